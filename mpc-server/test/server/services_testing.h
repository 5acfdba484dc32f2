// What the tests of the gRPC services share (keyops_service_test.cc,
// admin_service_test.cc, services_test.cc): three parties in one process,
// each with its own LMDB store, TLS ring endpoint, Scheduler and
// KeyOpsService, served without gRPC transport (the multi-process tests
// cover that); the enctype's keystream and tags in the clear; the flat
// share buffers of requests and responses, dealt and read back per job.
#ifndef KMPC_TEST_SERVER_SERVICES_TESTING_H_
#define KMPC_TEST_SERVER_SERVICES_TESTING_H_

#include <netinet/in.h>
#include <signal.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "batch_error.h"
#include "contract.h"
#include "cts/cts.h"
#include "cts/dealer.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "net/tls_ring.h"
#include "service/scheduler.h"
#include "service/services.h"
#include "protocol/gf128.h"
#include "share/replicated.h"
#include "store/share_store.h"

namespace kmpc::service {

inline std::string Rand(size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(random());
  return s;
}

inline std::string AesEcb(const std::string& key, const std::string& in) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(ctx, key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                     nullptr, reinterpret_cast<const uint8_t*>(key.data()), nullptr);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  std::string out(in.size(), '\0');
  int n = 0;
  EVP_EncryptUpdate(ctx, reinterpret_cast<uint8_t*>(out.data()), &n,
                    reinterpret_cast<const uint8_t*>(in.data()), in.size());
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

// The enctype's keystream in the clear: AES_K(ctr0 + 1), AES_K(ctr0 + 2),
// ... (ctr0 a 128-bit big-endian counter), its first `len` bytes.
inline std::string RefKeystream(const std::string& key, const std::string& ctr0, size_t len) {
  unsigned __int128 c0 = 0;
  for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
  std::string ctrs_in;
  for (size_t b = 1; b <= (len + 15) / 16; ++b) {
    unsigned __int128 c = c0 + b;
    for (int k = 15; k >= 0; --k) ctrs_in.push_back(static_cast<char>(c >> (8 * k)));
  }
  return AesEcb(key, ctrs_in).substr(0, len);
}

// The enctype's tag in the clear: GHASH_H(a, msg) ^ AES_K(ctr0), with
// H = AES_K(0^128).
inline std::string RefTag(const std::string& key, const std::string& a, const std::string& ctr0,
                          const std::string& msg) {
  const std::string h = AesEcb(key, std::string(16, '\0'));
  protocol::Block hb;
  std::memcpy(hb.data(), h.data(), 16);
  const protocol::Block g = protocol::Ghash(
      hb, protocol::GhashInput(
              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(a.data()), a.size()),
              absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(msg.data()), msg.size())));
  const std::string e0 = AesEcb(key, ctr0);
  std::string out(16, '\0');
  for (int k = 0; k < 16; ++k) out[k] = static_cast<char>(g[k] ^ e0[k]);
  return out;
}

// The enctype's checksum tag of `msg` under `key`, usage and ctr0, in the
// clear: GHASH_H(usage BE32 || 0x99, msg) ^ AES_K(ctr0).
inline std::string RefChecksumTag(const std::string& key, uint32_t usage,
                                  const std::string& ctr0, const std::string& msg) {
  const char a[5] = {static_cast<char>(usage >> 24), static_cast<char>(usage >> 16),
                     static_cast<char>(usage >> 8), static_cast<char>(usage),
                     static_cast<char>(0x99)};
  return RefTag(key, std::string(a, 5), ctr0, msg);
}

// Appends a share's two components to a flat share buffer (kmpc.proto
// RunRequest.data_shares, SignRequest.data_shares).
inline void AppendShares(std::string* buf, const std::array<std::vector<uint8_t>, 2>& comp) {
  for (const auto& c : comp) buf->append(reinterpret_cast<const char*>(c.data()), c.size());
}

// The three servers' copies of `req`, as the KDC module sends them: every
// CHECKSUM or VERIFY_CHECKSUM job whose message a test put in `data`
// (length 0) gets it dealt afresh as replicated shares into the flat
// buffer (kmpc.proto RunRequest.data_shares) and `length` set; a job that
// sets `length` itself keeps its `data` (a message in the clear:
// JOB_MALFORMED) and takes 2 * length zero bytes of the buffer, one that
// sets `length` without data takes none. Whatever req.data_shares holds
// goes last (a test's own shares for the last such job).
inline std::array<v1::RunRequest, 3> DealMessages(const v1::RunRequest& req) {
  std::array<v1::RunRequest, 3> out = {req, req, req};
  for (auto& o : out) o.clear_data_shares();
  for (int j = 0; j < req.jobs_size(); ++j) {
    const v1::Job& in = req.jobs(j);
    // The jobs that take a dealt message (an aes*-cts ENCRYPT too).
    if (contract::SharedBytes(in.type(), in.cipher(), 1) == 0) continue;
    const bool verify = in.type() == v1::JOB_VERIFY_CHECKSUM;
    if (in.length() != 0) {
      if (!in.data().empty())
        for (auto& o : out)
          o.mutable_data_shares()->append(
              2 * contract::SharedBytes(in.type(), in.length()), '\0');
      continue;
    }
    if (in.data().empty()) {
      if (verify)  // an empty message: a zero tag dealt
        for (auto& o : out) o.mutable_data_shares()->append(2 * 16, '\0');
      continue;
    }
    // A VERIFY_CHECKSUM's ctr0 || tag: the tag is dealt after the message,
    // the job keeps ctr0 (kmpc.proto JOB_VERIFY_CHECKSUM); a checksum of
    // another size stays whole, a zero tag dealt.
    std::string value = in.data();
    std::string ctr0 = in.checksum();
    if (verify) {
      const bool whole = ctr0.size() == contract::kChecksumSize;
      value += whole ? ctr0.substr(16) : std::string(16, '\0');
      if (whole) ctr0.resize(16);
    }
    auto views = share::Deal(absl::MakeConstSpan(
        reinterpret_cast<const uint8_t*>(value.data()), value.size()));
    EXPECT_TRUE(views.ok());
    for (int i = 0; i < 3; ++i) {
      v1::Job* o = out[i].mutable_jobs(j);
      o->clear_data();
      if (verify) o->set_checksum(ctr0);
      o->set_length(static_cast<uint32_t>(in.data().size()));
      AppendShares(out[i].mutable_data_shares(), (*views)[i].comp);
    }
  }
  for (auto& o : out) o.mutable_data_shares()->append(req.data_shares());
  return out;
}

// Every request a test sends goes through V, which sets the wire version
// (contract::kWireVersion) and remembers a Run request's public jobs by
// batch id, so that Vals can read a response's flat buffers back per job.
inline std::mutex g_requests_mu;
inline std::map<std::string, v1::RunRequest>* g_requests =
    new std::map<std::string, v1::RunRequest>;

inline v1::RunRequest V(v1::RunRequest r) {
  r.set_wire_version(contract::kWireVersion);
  std::lock_guard<std::mutex> l(g_requests_mu);
  v1::RunRequest pub = r;
  pub.clear_data_shares();
  (*g_requests)[r.batch_id()] = pub;
  return r;
}
inline v1::FinalizeRequest V(v1::FinalizeRequest r) {
  r.set_wire_version(contract::kWireVersion);
  return r;
}
inline v1::SignRequest V(v1::SignRequest r) {
  r.set_wire_version(contract::kWireVersion);
  return r;
}

// A result's values as the flat buffers carry them (kmpc.proto
// RunResponse.ctr0s, .shares; FinalizeResponse.tags).
struct Values {
  std::string ctr0;
  std::pair<std::string, std::string> keystream, tag;  // s_i, s_{i+1}
  bool has_keystream() const { return !keystream.first.empty(); }
  bool has_tag() const { return !tag.first.empty(); }
};
inline Values Vals(const v1::RunResponse& r, int job) {
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  {
    std::lock_guard<std::mutex> l(g_requests_mu);
    req = (*g_requests)[r.batch_id()];
  }
  Values out;
  contract::FlatReader c(r.ctr0s()), sh(r.shares());
  for (int k = 0; k < req.jobs_size() && k < r.results_size(); ++k) {
    const v1::Job& j = req.jobs(k);
    const v1::JobStatus st = r.results(k).status();
    absl::string_view ctr0;
    if (contract::ResultHasCtr0(contract::ShapeOf(j), st)) ctr0 = c.Take(16);
    const contract::MessageShares m =
        sh.TakePair(contract::RevealedShareBytes(contract::ShapeOf(j), st));
    if (k != job) continue;
    out.ctr0 = std::string(ctr0);
    // Through a reference: GCC 12 assigns a braced list to a copy of a
    // conditional lvalue, `(c ? a : b) = {x, y}`, leaving a and b as they
    // were.
    std::pair<std::string, std::string>& v =
        j.type() == v1::JOB_CHECKSUM && !contract::CtsCipher(j.cipher()) ? out.tag
                                                                         : out.keystream;
    v = {std::string(m.first), std::string(m.second)};
  }
  return out;
}
// Item `item`'s additive tag share (kmpc.proto FinalizeResponse.tags: 16
// bytes per item) as tag.first; tag.second stays empty.
inline Values Vals(const v1::FinalizeResponse& r, int item) {
  Values out;
  out.tag.first = std::string(absl::string_view(r.tags()).substr(16 * item, 16));
  return out;
}
// Result k's tag share (kmpc.proto SignResponse.tag_shares: one per JOB_OK
// result, in order); empty for the others.
inline std::string TagShare(const v1::SignResponse& r, int k) {
  contract::FlatReader flat(r.tag_shares());
  std::string t;
  for (int j = 0; j <= k && j < r.results_size(); ++j) {
    const bool ok = r.results(j).status() == v1::JOB_OK;
    const absl::string_view x = ok ? flat.Take(16) : absl::string_view();
    if (j == k) t = std::string(x);
  }
  return t;
}

struct Party {
  std::unique_ptr<store::ShareStore> store;
  std::unique_ptr<net::TlsRing> ring;
  std::unique_ptr<KeyCache> keys;
  std::unique_ptr<Scheduler> scheduler;
  Metrics metrics;
  std::unique_ptr<KeyOpsService> keyops;
};

inline std::string ClearCts(const absl::StatusOr<cts::Program>& p, const std::string& key,
                            uint32_t usage, const std::string& in);
inline std::string FreshTimestamp();

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // As the server runs (main.cc): a TLS ring connection's handshake writes
    // through OpenSSL's socket BIO, and a peer that closes meanwhile (a
    // test's servers stopping) must be EPIPE, not a signal that ends the
    // test binary.
    signal(SIGPIPE, SIG_IGN);
    dir_ = new std::string(::kmpc::testing::MakeTestCerts("service-test"));
    ASSERT_FALSE(dir_->empty());
  }

  void SetUp() override {
    using ::kmpc::testing::FreeLoopbackPort;
    int ports[3] = {FreeLoopbackPort(), FreeLoopbackPort(), FreeLoopbackPort()};
    static int instance = 0;
    ++instance;
    for (int i = 0; i < 3; ++i) {
      Party& p = parties_[i];
      auto st = store::ShareStore::Open(absl::StrCat(*dir_, "/store-", instance, "-", i),
                                        size_t{64} << 20);
      ASSERT_TRUE(st.ok()) << st.status();
      p.store = std::move(*st);
      net::TlsRingOptions o;
      o.party = i;
      o.workers = 2;
      o.listen_addr = absl::StrCat("127.0.0.1:", ports[i]);
      o.prev_addr = absl::StrCat("127.0.0.1:", ports[(i + 2) % 3]);
      std::string c = *dir_ + "/certs/";
      o.tls = {c + "party-" + std::to_string(i) + ".pem",
               c + "party-" + std::to_string(i) + ".key", c + "ca.pem"};
      o.recv_timeout = absl::Seconds(2);
      auto ring = net::TlsRing::Start(o);
      ASSERT_TRUE(ring.ok()) << ring.status();
      p.ring = std::move(*ring);
      p.keys = std::make_unique<KeyCache>(p.store.get(), i);
      SchedulerOptions so;
      so.schedule_timeout = absl::Seconds(3);
      // The three copies of a batch are sent at once; on a loaded machine
      // (ctest -j beside a build) gRPC delivered one over 500 ms after the
      // others, which failed an honest batch as "not received in time".
      so.peer_batch_wait = absl::Seconds(2);
      p.scheduler = std::make_unique<Scheduler>(p.ring.get(), p.keys->AsLookup(), so);
      ServiceOptions svc;
      svc.party = i;
      p.keyops = std::make_unique<KeyOpsService>(svc, p.keys.get(), p.scheduler.get(),
                                                 &p.metrics);
      p.scheduler->Start();
    }
  }

  void TearDown() override {
    for (auto& p : parties_) p.scheduler->Stop();
  }

  std::string PutKey(const std::string& key) {
    auto views = engine::DealKey(
        key.size() == 16 ? engine::Cipher::kAes128 : engine::Cipher::kAes256,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
    EXPECT_TRUE(views.ok());
    std::string id = Rand(32);
    ciphers_[id] = key.size() == 16 ? v1::CIPHER_AES128 : v1::CIPHER_AES256;
    for (int i = 0; i < 3; ++i) {
      store::KeyMeta meta;
      std::memcpy(meta.key_id.data(), id.data(), 32);
      meta.cipher = key.size() == 16 ? store::Cipher::kAes128 : store::Cipher::kAes256;
      // A service's random key, as DealKey dealt it: a user's ctr-mpc key
      // runs an AS exchange only (engine/user_key_rule.h).
      meta.kind = KeyKind::kService;
      auto ser = (*views)[i].Serialize();
      EXPECT_TRUE(parties_[i].store->Put(meta, ser, false).ok());
    }
    return id;
  }

  // Deals `key` as an aes*-cts key (with its per-usage material).
  std::string PutCtsKey(const std::string& key) {
    const engine::Cipher c =
        key.size() == 16 ? engine::Cipher::kAes128Cts : engine::Cipher::kAes256Cts;
    auto views = engine::DealKey(
        c, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
    EXPECT_TRUE(views.ok());
    std::string id = Rand(32);
    ciphers_[id] = engine::ToProto(c);
    for (int i = 0; i < 3; ++i) {
      store::KeyMeta meta;
      std::memcpy(meta.key_id.data(), id.data(), 32);
      meta.cipher = c;
      auto ser = (*views)[i].Serialize();
      EXPECT_TRUE(parties_[i].store->Put(meta, ser, false).ok());
    }
    return id;
  }

  // Runs req on the three servers, each of which must accept the batch,
  // and checks every job on each: its id, status want[j], the same detail
  // and ctr0 on all three, and no keystream or tag unless JOB_OK.
  void RunExpecting(const v1::RunRequest& req, const v1::JobStatus* want,
                    std::array<v1::RunResponse, 3>* resp) {
    const std::array<v1::RunRequest, 3> reqs = DealMessages(req);
    for (auto& s : RunAll(reqs, resp)) ASSERT_TRUE(s.ok()) << s.error_message();
    for (int j = 0; j < req.jobs_size(); ++j) {
      for (int i = 0; i < 3; ++i) {
        const v1::JobResult& r = (*resp)[i].results(j);
        EXPECT_EQ(r.job_id(), req.jobs(j).job_id());
        EXPECT_EQ(r.status(), want[j]) << "job " << j << " party " << i << ": " << r.detail();
        EXPECT_EQ(r.detail(), (*resp)[0].results(j).detail()) << j;
        const Values v = Vals((*resp)[i], j);
        EXPECT_EQ(v.ctr0, Vals((*resp)[0], j).ctr0) << j;
        if (want[j] != v1::JOB_OK) {
          EXPECT_FALSE(v.has_keystream()) << j;
          EXPECT_FALSE(v.has_tag()) << j;
        }
      }
    }
  }

  // Runs `reqs[i]` on party i (all three at once).
  std::array<grpc::Status, 3> RunAll(const std::array<v1::RunRequest, 3>& reqs,
                                     std::array<v1::RunResponse, 3>* resp,
                                     std::array<bool, 3> send = {true, true, true}) {
    std::array<std::future<grpc::Status>, 3> fs;
    for (int i = 0; i < 3; ++i) {
      if (!send[i]) continue;
      fs[i] = std::async(std::launch::async, [&, i] {
        return parties_[i].keyops->DoRun(V(reqs[i]), &(*resp)[i]);
      });
    }
    std::array<grpc::Status, 3> st;
    for (int i = 0; i < 3; ++i)
      if (send[i]) st[i] = fs[i].get();
    return st;
  }

  // The cipher a PutKey id was dealt for, as a KDC knows its keys'
  // enctypes; CIPHER_AES128 for any other id (only its absence matters).
  v1::Cipher CipherOf(const std::string& id) const {
    auto it = ciphers_.find(id);
    return it == ciphers_.end() ? v1::CIPHER_AES128 : it->second;
  }

  // Appends a job of `type` under key `id`, its cipher the one the key was
  // dealt for (CipherOf).
  v1::Job* AddJob(v1::RunRequest* req, uint64_t job_id, const std::string& id,
                  v1::JobType type) const {
    v1::Job* job = req->add_jobs();
    job->set_job_id(job_id);
    job->set_key_id(id);
    job->set_cipher(CipherOf(id));
    job->set_type(type);
    return job;
  }

  inline static std::string* dir_ = nullptr;
  Party parties_[3];
  std::map<std::string, v1::Cipher> ciphers_;
};

// The BatchErrorCode a refusal carries (BATCH_ERROR_UNSPECIFIED if none).
inline v1::BatchErrorCode ErrorOf(const grpc::Status& st) {
  auto e = contract::BatchErrorOf(st);
  return e ? e->code() : v1::BATCH_ERROR_UNSPECIFIED;
}

inline std::string Combine(const std::array<v1::RunResponse, 3>& r, int job) {
  std::string v = Vals(r[0], job).keystream.first;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Vals(r[i], job).keystream.second,
              Vals(r[(i + 1) % 3], job).keystream.first);
  }
  for (int i = 1; i < 3; ++i) {
    const std::string s = Vals(r[i], job).keystream.first;
    for (size_t k = 0; k < v.size(); ++k) v[k] ^= s[k];
  }
  return v;
}

// The RFC 3962 circuits in the clear on the dealer's material (one lane).
inline std::string ClearCts(const absl::StatusOr<cts::Program>& p, const std::string& key,
                            uint32_t usage, const std::string& in) {
  auto m = cts::DealUsage(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()), usage);
  EXPECT_TRUE(p.ok() && m.ok());
  std::vector<uint8_t> bytes = m->bytes;
  bytes.insert(bytes.end(), in.begin(), in.end());
  std::vector<absl::Span<const uint8_t>> lanes = {bytes};
  std::vector<uint64_t> w = cts::PackLanes(lanes, 1), out(p->outputs);
  cts::ClearEngine e;
  EXPECT_TRUE(cts::Evaluate(*p, e, 1, {absl::MakeConstSpan(w), {}}, {absl::MakeSpan(out), {}})
                  .ok());
  std::vector<uint8_t> o = cts::UnpackLane(out, 1, 0);
  return std::string(o.begin(), o.end());
}

// conf || PA-ENC-TS-ENC of now (44 bytes): a user key's gate releases its
// reply only within the servers' skew (cts.h StaleTimestamp).
inline std::string FreshTimestamp() {
  std::string b = Rand(16) + std::string("\x30\x1a\xa0\x11\x18\x0f", 6);
  b += absl::FormatTime("%Y%m%d%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  return b + std::string("\xa1\x05\x02\x03\x01\x86\xa0", 7);
}

}  // namespace kmpc::service

#endif  // KMPC_TEST_SERVER_SERVICES_TESTING_H_
