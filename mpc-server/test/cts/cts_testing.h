// Helpers for the cts tests: run a compiled program on lanes in the clear
// or among three parties (each lane's inputs as three views), and the
// clear references (OpenSSL AES-CBC with the RFC 3962 swap, HMAC-SHA1).
#ifndef KMPC_TEST_CTS_CTS_TESTING_H_
#define KMPC_TEST_CTS_CTS_TESTING_H_

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <vector>

#include "cts/circuit.h"
#include "cts/cts.h"
#include "cts/dealer.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::cts::testing {

using Bytes = std::vector<uint8_t>;
using Views = std::array<share::View, 3>;

inline size_t WordsFor(size_t lanes) { return (lanes + 63) / 64; }

// The program on each lane's input bytes, in the clear.
inline std::vector<Bytes> RunClear(const Program& p, const std::vector<Bytes>& lanes) {
  const size_t wn = WordsFor(lanes.size());
  std::vector<absl::Span<const uint8_t>> spans(lanes.begin(), lanes.end());
  const std::vector<uint64_t> in = PackLanes(spans, wn);
  std::vector<uint64_t> out(p.outputs * wn);
  ClearEngine e;
  absl::Status st = Evaluate(p, e, wn, {in, {}}, {absl::MakeSpan(out), {}});
  EXPECT_TRUE(st.ok()) << st;
  std::vector<Bytes> r;
  for (size_t l = 0; l < lanes.size(); ++l) r.push_back(UnpackLane(out, wn, l));
  return r;
}

// The clear engine, counting what it runs: AND layers (messages) and AND
// words (ANDs per lane with one word per wire).
class CountingEngine : public ClearEngine {
 public:
  absl::Status AndLayer(std::array<const uint64_t*, 2> x, std::array<const uint64_t*, 2> y,
                        std::array<uint64_t*, 2> z, size_t n) override {
    ++layers;
    words += n;
    return ClearEngine::AndLayer(x, y, z, n);
  }
  int layers = 0;
  size_t words = 0;
};

// Runs p on one lane of zeros in the clear and checks the counted AND
// layers and ANDs against the program's depth and ANDs.
inline void ExpectCounted(const Program& p) {
  const std::vector<uint64_t> in(p.inputs, 0);
  std::vector<uint64_t> out(p.outputs);
  CountingEngine e;
  ASSERT_TRUE(Evaluate(p, e, 1, {in, {}}, {absl::MakeSpan(out), {}}).ok());
  EXPECT_EQ(e.layers, p.depth);
  EXPECT_EQ(e.words, p.ands);
}

// A public value as three views: (c, 0, 0) (share/replicated.h).
inline Views PublicViews(const Bytes& c) {
  Views v;
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 2; ++k) {
      v[i].comp[k] = share::HoldsPublicIn(i, k) ? c : Bytes(c.size(), 0);
    }
  }
  return v;
}

inline Views DealViews(const Bytes& secret) {
  auto d = share::Deal(secret);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

// Concatenates per-party views (the inputs of one lane, in order).
inline Views Concat(const std::vector<Views>& parts) {
  Views v;
  for (const Views& p : parts) {
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 2; ++k) {
        v[i].comp[k].insert(v[i].comp[k].end(), p[i].comp[k].begin(), p[i].comp[k].end());
      }
    }
  }
  return v;
}

// One party's run of the programs, each on its views of its own lanes, in
// the same rounds (EvaluateAll); with `log`, every AND is logged and
// Verify runs at the end. out[job][lane] = the two output components.
inline size_t g_verify_words = protocol::MulLog::kVerifyWords;  // ShareEngine's

// One party's words of each job: its lanes' views packed (PackLanes) and
// room for the outputs, both components; out() its lanes' outputs.
struct PartyWords {
  std::vector<std::array<std::vector<uint64_t>, 2>> in, o;
  std::vector<size_t> wn, lanes;
  PartyWords(int party, const std::vector<std::vector<Views>>& views,
             const std::vector<size_t>& outputs)
      : in(views.size()), o(views.size()) {
    for (size_t j = 0; j < views.size(); ++j) {
      wn.push_back(WordsFor(views[j].size()));
      lanes.push_back(views[j].size());
      for (int k = 0; k < 2; ++k) {
        std::vector<absl::Span<const uint8_t>> spans;
        for (const Views& v : views[j]) spans.push_back(v[party].comp[k]);
        in[j][k] = PackLanes(spans, wn[j]);
        o[j][k].assign(outputs[j] * wn[j], 0);
      }
    }
  }
  std::array<absl::Span<const uint64_t>, 2> In(size_t j) const { return {in[j][0], in[j][1]}; }
  std::array<absl::Span<uint64_t>, 2> Out(size_t j) {
    return {absl::MakeSpan(o[j][0]), absl::MakeSpan(o[j][1])};
  }
  // out[job][lane] = the lane's two output components.
  void Unpack(std::vector<std::vector<std::array<Bytes, 2>>>& out) const {
    out.assign(o.size(), {});
    for (size_t j = 0; j < o.size(); ++j) {
      for (size_t l = 0; l < lanes[j]; ++l)
        out[j].push_back({UnpackLane(o[j][0], wn[j], l), UnpackLane(o[j][1], wn[j], l)});
    }
  }
};

inline absl::Status RunPartyJobs(protocol::Rep3& r, const std::vector<const Program*>& p,
                                 int party, const std::vector<std::vector<Views>>& lanes,
                                 protocol::MulLog* log,
                                 std::vector<std::vector<std::array<Bytes, 2>>>& out) {
  std::vector<size_t> outputs;
  for (const Program* q : p) outputs.push_back(q->outputs);
  PartyWords w(party, lanes, outputs);
  std::vector<Job> jobs;
  // The lane count, as engine/cts_jobs.cc gives it: jobs of at most 32
  // lanes run packed (circuit.h Job::lanes).
  for (size_t j = 0; j < p.size(); ++j) jobs.push_back({p[j], w.wn[j], w.In(j), w.Out(j), w.lanes[j]});
  r.set_log(log);
  ShareEngine e(r, g_verify_words);
  absl::Status st = EvaluateAll(jobs, e);
  if (st.ok() && log != nullptr) st = protocol::Verifier::Verify(r, *log);
  r.set_log(nullptr);
  w.Unpack(out);
  return st;
}

// All three parties; per job and lane, the opened output (expecting the
// copies of every share to agree unless `cheated`). Statuses in *st.
inline std::vector<std::vector<Bytes>> RunSharedJobs(
    std::array<protocol::Rep3*, 3> rep3, const std::vector<const Program*>& p,
    const std::vector<std::vector<Views>>& lanes, bool malicious,
    std::array<absl::Status, 3>* st, bool cheated = false) {
  std::array<std::vector<std::vector<std::array<Bytes, 2>>>, 3> outs;
  std::array<protocol::MulLog, 3> logs;
  *st = ::kmpc::testing::RunParties([&](int i) {
    return RunPartyJobs(*rep3[i], p, i, lanes, malicious ? &logs[i] : nullptr, outs[i]);
  });
  std::vector<std::vector<Bytes>> r(p.size());
  for (size_t j = 0; j < p.size(); ++j) {
    for (size_t l = 0; l < lanes[j].size(); ++l) {
      Views v;
      for (int i = 0; i < 3; ++i) {
        if (outs[i].size() <= j || outs[i][j].size() <= l) return r;
        v[i].comp = outs[i][j][l];
      }
      auto o = share::Open(v);
      EXPECT_TRUE(o.ok() || cheated) << o.status();
      r[j].push_back(o.ok() ? *o : Bytes{});
    }
  }
  return r;
}

inline std::vector<Bytes> RunShared(std::array<protocol::Rep3*, 3> rep3, const Program& p,
                                    const std::vector<Views>& lanes, bool malicious,
                                    std::array<absl::Status, 3>* st, bool cheated = false) {
  return RunSharedJobs(rep3, {&p}, {lanes}, malicious, st, cheated)[0];
}

// RFC 3962 section 5 with OpenSSL: AES-CBC (IV zero) over the zero-padded
// input, then the last two blocks swapped and the output cut to |in|.
inline Bytes RefCts(const Bytes& key, const Bytes& in) {
  Bytes padded = in;
  padded.resize((in.size() + 15) / 16 * 16, 0);
  Bytes out(padded.size());
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const uint8_t iv[16] = {0};
  int len = 0;
  EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc(), nullptr,
                     key.data(), iv);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  EVP_EncryptUpdate(ctx, out.data(), &len, padded.data(), static_cast<int>(padded.size()));
  EVP_CIPHER_CTX_free(ctx);
  const size_t nb = out.size() / 16;
  if (nb >= 2) {
    for (size_t k = 0; k < 16; ++k) std::swap(out[16 * (nb - 2) + k], out[16 * (nb - 1) + k]);
  }
  out.resize(in.size());
  return out;
}

inline Bytes RefHmac(const Bytes& key, const Bytes& msg) {
  Bytes mac(20);
  unsigned len = 0;
  HMAC(EVP_sha1(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(),
       mac.data(), &len);
  return mac;
}

// The whole RFC 3962 encryption of conf || P under a base key and usage,
// with OpenSSL (Ke and Ki from DeriveKey).
inline Bytes RefEncrypt(const Bytes& base, uint32_t usage, const Bytes& conf_plain) {
  Bytes c = {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
             static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage), 0xAA};
  const Bytes ke = *DeriveKey(base, c);
  c[4] = 0x55;
  const Bytes ki = *DeriveKey(base, c);
  Bytes out = RefCts(ke, conf_plain);
  const Bytes mac = RefHmac(ki, conf_plain);
  out.insert(out.end(), mac.begin(), mac.begin() + kTagBytes);
  return out;
}

}  // namespace kmpc::cts::testing

#endif  // KMPC_TEST_CTS_CTS_TESTING_H_
