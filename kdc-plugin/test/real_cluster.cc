#include "real_cluster.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "batch_error.h"
#include "client/reveal.h"
#include "contract.h"
#include "engine/engine.h"
#include "protocol/gf128.h"
#include "test_util.h"

namespace kmpc::kdc::testing {

namespace pb = kmpc::v1;

namespace {

// As GrpcTransport (grpc_transport.cc FromGrpc): a typed refusal as it is;
// the handlers return no other failure.
CallStatus FromGrpc(const grpc::Status& s) {
  if (s.ok()) return CallStatus();
  if (auto e = contract::BatchErrorOf(s)) return CallStatus::Refused(*e);
  return CallStatus(absl::UnavailableError(
      absl::StrCat("gRPC status ", static_cast<int>(s.error_code()), ": ",
                   s.error_message())));
}

// AES-ECB of whole blocks with OpenSSL: the reference.
std::string AesEcb(const std::string& key, const std::string& in) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_EncryptInit_ex(ctx,
                     key.size() == 16 ? EVP_aes_128_ecb() : EVP_aes_256_ecb(),
                     nullptr, reinterpret_cast<const uint8_t*>(key.data()),
                     nullptr);
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  std::string out(in.size(), '\0');
  int n = 0;
  EVP_EncryptUpdate(ctx, reinterpret_cast<uint8_t*>(out.data()), &n,
                    reinterpret_cast<const uint8_t*>(in.data()),
                    static_cast<int>(in.size()));
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

// ctr0 + i as a 128-bit big-endian integer.
std::string CounterPlus(const std::string& ctr0, uint64_t i) {
  unsigned __int128 c = 0;
  for (unsigned char b : ctr0) c = (c << 8) | b;
  c += i;
  std::string out(16, '\0');
  for (int k = 15; k >= 0; --k, c >>= 8) out[k] = static_cast<char>(c);
  return out;
}

void AppendPadded(std::string* x, const std::string& v) {
  *x += v;
  x->resize((x->size() + 15) / 16 * 16, '\0');
}

void AppendBitLength64(std::string* x, size_t bytes) {
  const uint64_t bits = 8 * static_cast<uint64_t>(bytes);
  for (int k = 7; k >= 0; --k) x->push_back(static_cast<char>(bits >> (8 * k)));
}

}  // namespace

RealCluster::RealCluster() {
  const std::string dir = ::kmpc::testing::MakeTempDir("batcher-real");
  rings_ = std::make_unique<service::MemorySchedulerRings>(2, absl::Seconds(2));
  for (int i = 0; i < 3; ++i) {
    Party& p = parties_[i];
    auto st = store::ShareStore::Open(absl::StrCat(dir, "/store-", i),
                                      size_t{64} << 20);
    if (!st.ok()) {
      fprintf(stderr, "share store: %s\n", st.status().ToString().c_str());
      abort();
    }
    p.store = std::move(*st);
    p.keys = std::make_unique<service::KeyCache>(p.store.get(), i);
    service::SchedulerOptions so;
    so.schedule_timeout = absl::Seconds(3);
    so.peer_batch_wait = absl::Milliseconds(500);
    p.scheduler = std::make_unique<service::Scheduler>(
        &rings_->party(i), p.keys->AsLookup(), so);
    p.metrics = std::make_unique<service::Metrics>();
    p.scheduler->Start();
    Restart(i);
  }
}

RealCluster::~RealCluster() {
  {
    std::unique_lock<std::mutex> l(mu_);
    idle_.wait(l, [this] { return running_ == 0; });
  }
  for (auto& p : parties_) p.scheduler->Stop();
  rings_->Shutdown();
  for (auto& p : parties_) {
    p.keyops.reset();
    p.scheduler.reset();
  }
}

void RealCluster::Restart(int party) {
  service::ServiceOptions o;
  o.party = party;
  Party& p = parties_[party];
  auto svc = std::make_shared<service::KeyOpsService>(
      o, p.keys.get(), p.scheduler.get(), p.metrics.get());
  std::lock_guard<std::mutex> l(mu_);
  p.keyops = std::move(svc);
}

std::shared_ptr<service::KeyOpsService> RealCluster::Service(int party) {
  std::lock_guard<std::mutex> l(mu_);
  return parties_[party].keyops;
}

void RealCluster::Store(const std::string& key_id,
                        const engine::KeyShares& view) {
  Party& p = parties_[view.party];
  store::KeyMeta meta;
  std::memcpy(meta.key_id.data(), key_id.data(), meta.key_id.size());
  meta.cipher = view.cipher == engine::Cipher::kAes128 ? store::Cipher::kAes128
                                                       : store::Cipher::kAes256;
  meta.kind = view.kind;  // DealKey's: a service's unless dealt otherwise
  const std::vector<uint8_t> ser = view.Serialize();
  absl::Status st = p.store->Put(meta, ser, /*replace=*/true);
  if (!st.ok()) {
    fprintf(stderr, "share store put: %s\n", st.ToString().c_str());
    abort();
  }
  p.keys->Invalidate(key_id);
}

void RealCluster::AddKey(const std::string& key_id, const std::string& key) {
  auto views = engine::DealKey(
      key.size() == 16 ? engine::Cipher::kAes128 : engine::Cipher::kAes256,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()),
                          key.size()));
  if (!views.ok() || key_id.size() != store::kKeyIdSize) abort();
  for (const auto& v : *views) Store(key_id, v);
}

void RealCluster::AddInconsistentKey(const std::string& key_id) {
  const std::string key(32, 'i');
  const auto span =
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), 32);
  auto a = engine::DealKey(engine::Cipher::kAes256, span);
  auto b = engine::DealKey(engine::Cipher::kAes256, span);
  if (!a.ok() || !b.ok()) abort();
  Store(key_id, (*a)[0]);
  Store(key_id, (*a)[1]);
  Store(key_id, (*b)[2]);
}

void RealCluster::ForgetEncryptStates() {
  for (int i = 0; i < 3; ++i) Restart(i);
}
void RealCluster::ForgetEncryptStates(int party) { Restart(party); }

void RealCluster::DelayNextFinalize(int party, absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  next_fin_delay_[party] = d;
}
void RealCluster::set_latency(absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  latency_ = d;
}
void RealCluster::set_run_delay(absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  run_delay_ = d;
}
int RealCluster::finalize_answers() { return fin_answers_.load(); }
std::vector<TestCluster::Call> RealCluster::calls() {
  std::lock_guard<std::mutex> l(mu_);
  return calls_;
}
std::string RealCluster::PartyName(int party) const {
  return absl::StrCat("party ", party, " (in-process server)");
}

void RealCluster::Spawn(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++running_;
  }
  std::thread([this, f = std::move(f)]() mutable {
    f();
    f = nullptr;  // the batcher's callback state goes before we are idle
    std::lock_guard<std::mutex> l(mu_);
    --running_;
    idle_.notify_all();
  }).detach();
}

void RealCluster::Run(int party, const pb::RunRequest& req,
                      pb::RunResponse* resp, absl::Time deadline, Done done) {
  CountConditions(party, req);
  absl::Duration delay;
  {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back({"Run", party, req.jobs_size(), absl::Now()});
    delay = latency_ + run_delay_;
  }
  Spawn([svc = Service(party), &req, resp, delay, done = std::move(done)] {
    CallStatus st = FromGrpc(svc->DoRun(req, resp));
    if (!st.ok()) resp->Clear();  // as KeyOpsService::Serve
    absl::SleepFor(delay);
    done(std::move(st));
  });
}

void RealCluster::Finalize(int party, const pb::FinalizeRequest& req,
                           pb::FinalizeResponse* resp, absl::Time deadline,
                           Done done) {
  absl::Duration delay;
  {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back({"Finalize", party, req.items_size(), absl::Now()});
    delay = latency_ + next_fin_delay_[party];
    next_fin_delay_[party] = absl::ZeroDuration();
  }
  Spawn([this, svc = Service(party), &req, resp, delay,
         done = std::move(done)] {
    CallStatus st = FromGrpc(svc->DoFinalize(req, resp));
    if (!st.ok()) resp->Clear();
    absl::SleepFor(delay);
    done(std::move(st));
    fin_answers_.fetch_add(1);
  });
}

bool RealCluster::ChecksumsOnShares() {
  std::call_once(probe_once_, [this] {
    const std::string key_id(32, '\x01'), key(32, 'P'), msg = "probe message";
    AddKey(key_id, key);
    std::array<pb::RunRequest, 3> req;
    std::array<pb::RunResponse, 3> resp;
    std::array<std::string*, 3> out;
    for (int p = 0; p < 3; ++p) {
      req[p].set_batch_id(std::string(16, '\x7f'));
      req[p].set_wire_version(contract::kWireVersion);
      pb::Job* j = req[p].add_jobs();
      j->set_type(pb::JOB_CHECKSUM);
      j->set_cipher(pb::CIPHER_AES256);
      j->set_key_id(key_id);
      j->set_usage(1);
      j->set_length(msg.size());
      out[p] = req[p].mutable_data_shares();
    }
    client::DealRandom random;
    if (!random.Draw(msg.size()).ok() ||
        !client::DealFlat(absl::MakeConstSpan(
                              reinterpret_cast<const uint8_t*>(msg.data()),
                              msg.size()),
                          random.Take(msg.size()), out)
             .ok())
      return;
    std::vector<std::thread> t;
    for (int p = 0; p < 3; ++p)
      t.emplace_back([&, p] { Service(p)->DoRun(req[p], &resp[p]); });
    for (auto& x : t) x.join();
    if (resp[0].results_size() != 1 ||
        resp[0].results(0).status() != pb::JOB_OK)
      return;
    std::string tag(16, '\0');
    for (int p = 0; p < 3; ++p) {
      if (resp[p].results_size() != 1) return;
      // The tag's two shares (s_p, s_{p+1}) are all of .shares.
      const std::string& s = resp[p].shares();
      if (s.size() != 32) return;
      for (int i = 0; i < 16; ++i) tag[i] ^= s[i];
    }
    checksums_on_shares_ =
        tag == Tag(key, 1, resp[0].ctr0s(), msg, true);
  });
  return checksums_on_shares_;
}

std::string RealCluster::Keystream(const std::string& key,
                                   const std::string& ctr0, size_t len) const {
  std::string counters;
  for (uint64_t i = 1; counters.size() < len; ++i)
    counters += CounterPlus(ctr0, i);
  return AesEcb(key, counters).substr(0, len);
}

// enctype.md: S = GHASH_H(pad16(A) || pad16(data) || [8 len(A)]_64 ||
// [8 len(data)]_64) with H = AES_K(0^128), A = usage (4 bytes big-endian),
// followed by 0x99 for a checksum; T = S XOR AES_K(ctr0).
std::string RealCluster::Tag(const std::string& key, uint32_t usage,
                             const std::string& ctr0, const std::string& data,
                             bool checksum) const {
  std::string a;
  for (int k = 3; k >= 0; --k) a.push_back(static_cast<char>(usage >> (8 * k)));
  if (checksum) a.push_back(static_cast<char>(0x99));
  std::string x;
  AppendPadded(&x, a);
  AppendPadded(&x, data);
  AppendBitLength64(&x, a.size());
  AppendBitLength64(&x, data.size());
  const std::string h16 = AesEcb(key, std::string(16, '\0'));
  protocol::Block h, y{};
  std::memcpy(h.data(), h16.data(), 16);
  for (size_t j = 0; j < x.size(); j += 16) {
    for (int k = 0; k < 16; ++k) y[k] ^= static_cast<uint8_t>(x[j + k]);
    y = protocol::GfMulReference(y, h);
  }
  std::string t = AesEcb(key, ctr0);
  for (int k = 0; k < 16; ++k) t[k] ^= static_cast<char>(y[k]);
  return t;
}

}  // namespace kmpc::kdc::testing
