#include "fake_cluster.h"

#include <algorithm>
#include <set>
#include <utility>

#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "contract.h"

namespace kmpc::kdc::testing {

namespace pb = kmpc::v1;

namespace {

std::string Random(size_t n) {
  std::string s(n, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), n);
  return s;
}

std::string Hmac(const std::string& key, const std::string& msg) {
  unsigned char out[32];
  unsigned int len = 32;
  HMAC(EVP_sha256(), key.data(), key.size(),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
       &len);
  return std::string(reinterpret_cast<char*>(out), 16);
}

std::string Be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (24 - 8 * i));
  return s;
}

// Party p's view of v: (s_p, s_{p+1}) with s_0 ^ s_1 ^ s_2 = v.
void Share(const std::string& v, std::array<SharePair*, 3> out) {
  std::array<std::string, 3> s = {Random(v.size()), Random(v.size()), v};
  for (size_t i = 0; i < v.size(); ++i) s[2][i] ^= s[0][i] ^ s[1][i];
  for (int p = 0; p < 3; ++p) *out[p] = {s[p], s[(p + 1) % 3]};
}

// A Run result's values before they go into the response's flat buffers
// (kmpc.proto RunResponse.ctr0s, .shares).
struct Values {
  std::string ctr0;
  SharePair keystream, tag;
};

// Appends every result's values in order, as the servers lay them out.
void Flatten(const std::vector<std::array<Values, 3>>& v,
             std::array<pb::RunResponse, 3>* out) {
  for (int p = 0; p < 3; ++p) {
    pb::RunResponse& r = (*out)[p];
    for (const auto& x : v) {
      r.mutable_ctr0s()->append(x[p].ctr0);
      for (const SharePair* sp : {&x[p].keystream, &x[p].tag}) {
        r.mutable_shares()->append(sp->first);
        r.mutable_shares()->append(sp->second);
      }
    }
  }
}

}  // namespace

FakeCluster::FakeCluster() : thread_([this] { Loop(); }) {}

FakeCluster::~FakeCluster() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FakeCluster::AddKey(const std::string& key_id, const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  keys_[key_id] = key;
}
void FakeCluster::set_latency(absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  latency_ = d;
}
void FakeCluster::set_down(int p, bool v) {
  std::lock_guard<std::mutex> l(mu_);
  down_[p] = v;
}
void FakeCluster::set_hang(int p, bool v) {
  std::lock_guard<std::mutex> l(mu_);
  hang_[p] = v;
}
void FakeCluster::set_corrupt(int p, bool v) {
  std::lock_guard<std::mutex> l(mu_);
  corrupt_[p] = v;
}
void FakeCluster::set_corrupt_finalize(int p, bool v) {
  std::lock_guard<std::mutex> l(mu_);
  corrupt_fin_[p] = v;
}
void FakeCluster::set_failure_detail(std::string detail) {
  std::lock_guard<std::mutex> l(mu_);
  detail_ = std::move(detail);
}

void FakeCluster::set_tag_share_error(int p, bool sign, std::string error) {
  std::lock_guard<std::mutex> l(mu_);
  (sign ? sign_error_ : verify_error_)[p] = std::move(error);
}

void FakeCluster::set_chain_tag_share_error(int p, std::string error) {
  std::lock_guard<std::mutex> l(mu_);
  chain_error_[p] = std::move(error);
}

void FakeCluster::set_tag_shares_extra(int p, int extra) {
  std::lock_guard<std::mutex> l(mu_);
  tag_extra_[p] = extra;
}
void FakeCluster::set_old_wire(int p, bool v) {
  std::lock_guard<std::mutex> l(mu_);
  old_wire_[p] = v;
}
void FakeCluster::set_zero_ctr0(bool v) {
  std::lock_guard<std::mutex> l(mu_);
  zero_ctr0_ = v;
}
void FakeCluster::set_refuse(int p, pb::BatchErrorCode code) {
  std::lock_guard<std::mutex> l(mu_);
  refuse_[p] = code;
}
std::vector<FakeCluster::Call> FakeCluster::calls() {
  std::lock_guard<std::mutex> l(mu_);
  return calls_;
}
std::vector<std::string> FakeCluster::received(int party) {
  std::lock_guard<std::mutex> l(mu_);
  return received_[party];
}
std::vector<std::string> FakeCluster::received_signs(int party) {
  std::lock_guard<std::mutex> l(mu_);
  return received_signs_[party];
}
void FakeCluster::ForgetPads() {
  std::lock_guard<std::mutex> l(mu_);
  pads_.clear();
}
void FakeCluster::ForgetPads(int party) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [k, v] : pads_) v.gone[party] = true;
}
std::string FakeCluster::PartyName(int party) const {
  return absl::StrCat("party ", party, " (fake)");
}

std::string FakeCluster::Keystream(const std::string& key,
                                   const std::string& ctr0, size_t len) const {
  std::string ks;
  for (uint32_t i = 1; ks.size() < len; ++i) ks += Hmac(key, ctr0 + Be32(i));
  ks.resize(len);
  return ks;
}

std::string FakeCluster::Tag(const std::string& key, uint32_t usage,
                             const std::string& ctr0, const std::string& data,
                             bool checksum) const {
  return Hmac(key, std::string(checksum ? "C" : "E") + Be32(usage) + ctr0 + data);
}

void FakeCluster::Later(absl::Duration d, std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(mu_);
    timers_.emplace(absl::Now() + d, std::move(f));
  }
  cv_.notify_all();
}

void FakeCluster::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (timers_.empty()) {
      cv_.wait(l);
      continue;
    }
    auto it = timers_.begin();
    absl::Time now = absl::Now();
    if (it->first > now) {
      cv_.wait_for(l, absl::ToChronoMicroseconds(it->first - now));
      continue;
    }
    auto f = std::move(it->second);
    timers_.erase(it);
    l.unlock();
    f();
    l.lock();
  }
}

namespace {

CallStatus Refused(pb::BatchErrorCode code, std::string detail) {
  pb::BatchError e;
  e.set_code(code);
  e.set_detail(std::move(detail));
  return CallStatus::Refused(e);
}

// Sets every party's view of a failed job.
void FailJob(const std::array<pb::JobResult*, 3>& r, pb::JobStatus status,
             const std::string& detail) {
  for (auto* x : r) {
    x->set_status(status);
    x->set_detail(detail);
  }
}

}  // namespace

CallStatus FakeCluster::ComputeRun(const pb::RunRequest& req,
                                   std::array<pb::RunResponse, 3>* out) {
  for (int p = 0; p < 3; ++p) {
    (*out)[p].set_batch_id(req.batch_id());
    (*out)[p].set_party(p);
    (*out)[p].set_wire_version(contract::kWireVersion);
  }
  if (!contract::WireVersionProblem(req.wire_version(), "the KDC").empty())
    return Refused(pb::BATCH_MALFORMED, "wire version");
  if (req.batch_id().size() != contract::kBatchIdSize || req.jobs().empty())
    return Refused(pb::BATCH_MALFORMED, "batch id size or no jobs");
  if (req.data_shares().size() != contract::RunShareBytes(req))
    return Refused(pb::BATCH_MALFORMED, "data_shares of the wrong size");
  std::set<uint64_t> ids;
  uint64_t batch_blocks = 0;
  for (const pb::Job& j : req.jobs()) {
    if (!ids.insert(j.job_id()).second)
      return Refused(pb::BATCH_MALFORMED, "duplicate job id");
    batch_blocks += contract::JobBlocks(contract::ShapeOf(j));
  }
  // Party 0's slices: every party's have the same sizes (the KDC deals
  // them alike), which is all CheckJob looks at.
  const std::vector<contract::MessageShares> sliced =
      contract::SliceMessageShares(req);
  std::vector<std::array<Values, 3>> values(req.jobs_size());
  if (batch_blocks > contract::kMaxBatchBlocks)
    return Refused(pb::BATCH_TOO_LARGE, "too many AES blocks");
  std::set<std::pair<uint64_t, uint32_t>> linked_slots;  // (pad_after, slot)
  for (int k = 0; k < req.jobs_size(); ++k) {
    const pb::Job& j = req.jobs(k);
    std::array<pb::JobResult*, 3> r;
    for (int p = 0; p < 3; ++p) {
      r[p] = (*out)[p].add_results();
      r[p]->set_job_id(j.job_id());
    }
    const contract::JobCheck check =
        contract::CheckJob(contract::ShapeOf(j, &sliced[k]));
    if (!check.ok()) {
      FailJob(r, check.status, check.detail);
      continue;
    }
    if (j.has_release_if_ok()) {
      // As the engine (engine.h, Job::release_if_ok).
      const pb::Job* on = nullptr;
      for (const pb::Job& o : req.jobs())
        if (o.job_id() == j.release_if_ok() && &o != &j) on = &o;
      if ((j.type() != pb::JOB_ENCRYPT && j.type() != pb::JOB_CHECKSUM &&
           j.type() != pb::JOB_PAD) ||
          on == nullptr ||
          (on->type() != pb::JOB_DECRYPT && on->type() != pb::JOB_VERIFY_CHECKSUM)) {
        FailJob(r, pb::JOB_MALFORMED,
                "release_if_ok must name another job of the batch, a DECRYPT or "
                "VERIFY_CHECKSUM, from an ENCRYPT, CHECKSUM or PAD");
        continue;
      }
    }
    if (!keys_.count(j.key_id())) {
      FailJob(r, pb::JOB_UNKNOWN_KEY, "unknown key id");
      continue;
    }
    if (inconsistent_.count(j.key_id())) {
      FailJob(r, pb::JOB_KEY_INCONSISTENT,
              "the MPC servers hold different dealings of this key (deal_id, "
              "cipher or aes*-cts material differ): re-deal it");
      continue;
    }
    const std::string& key = keys_[j.key_id()];
    // As the engine: a key is dealt for the cipher of its size, and a job
    // naming the other one is refused without computing (JOB_WRONG_CIPHER).
    const pb::Cipher dealt =
        key.size() == 16 ? pb::CIPHER_AES128 : pb::CIPHER_AES256;
    if (j.cipher() != dealt) {
      FailJob(r, pb::JOB_WRONG_CIPHER,
              absl::StrCat("the key id was dealt for ", contract::CipherName(dealt),
                           ", the job names ", contract::CipherName(j.cipher())));
      continue;
    }
    for (auto* x : r) x->set_status(pb::JOB_OK);
    std::array<Values, 3>& val = values[k];
    auto pairs = [&](SharePair Values::*m) {
      return std::array<SharePair*, 3>{&(val[0].*m), &(val[1].*m),
                                       &(val[2].*m)};
    };
    auto set_ctr0 = [&](const std::string& c) {
      for (auto& x : val) x.ctr0 = c;
    };
    switch (j.type()) {
      case pb::JOB_ENCRYPT: {
        std::string ctr0 = zero_ctr0_ ? std::string(16, '\0') : Random(16);
        set_ctr0(ctr0);
        Share(Keystream(key, ctr0, j.length()), pairs(&Values::keystream));
        enc_[{req.batch_id(), j.job_id()}] = {key, ctr0, j.usage(), j.length()};
        break;
      }
      case pb::JOB_DECRYPT: {
        const std::string& d = j.data();
        std::string ctr0 = d.substr(0, 16), c = d.substr(16, d.size() - 32),
                    t = d.substr(d.size() - 16);
        if (Tag(key, j.usage(), ctr0, c, false) != t) {
          for (auto* x : r) x->set_status(pb::JOB_INTEGRITY_FAILED);
        } else {
          Share(Keystream(key, ctr0, c.size()), pairs(&Values::keystream));
        }
        break;
      }
      case pb::JOB_CHECKSUM: {
        const std::optional<std::string> d = Message(req.batch_id(), k);
        if (!d) {
          FailJob(r, pb::JOB_MALFORMED, "message shares inconsistent");
          break;
        }
        std::string ctr0 = Random(16);
        set_ctr0(ctr0);
        Share(Tag(key, j.usage(), ctr0, *d, true), pairs(&Values::tag));
        break;
      }
      case pb::JOB_VERIFY_CHECKSUM: {
        const std::optional<std::string> d = Message(req.batch_id(), k);
        if (!d) {
          FailJob(r, pb::JOB_MALFORMED, "message shares inconsistent");
          break;
        }
        // D || t' (kmpc.proto JOB_VERIFY_CHECKSUM): t' came as shares.
        if (d->size() != j.length() + 16 || j.checksum().size() != 16) {
          FailJob(r, pb::JOB_MALFORMED, "verify shares or ctr0 of the wrong size");
          break;
        }
        if (Tag(key, j.usage(), j.checksum(), d->substr(0, j.length()), true) !=
            d->substr(j.length()))
          for (auto* x : r) x->set_status(pb::JOB_INTEGRITY_FAILED);
        break;
      }
      case pb::JOB_PAD: {
        // As the contract: a verification pad at its given counter, a
        // linked pad at its ENCRYPT's ctr0 + 2^17 + slot (one pad per
        // slot), else a fresh one.
        std::string ctr0 = zero_ctr0_ ? std::string(16, '\0') : Random(16);
        if (!j.checksum().empty()) ctr0 = j.checksum();
        if (j.has_pad_after()
                ? j.pad_slot() >= contract::kPadSlots ||
                      !linked_slots.insert({j.pad_after(), j.pad_slot()}).second
                : j.pad_slot() != 0) {
          FailJob(r, pb::JOB_MALFORMED, "pad_slot out of range, taken or unlinked");
          break;
        }
        if (j.has_pad_after()) {
          auto e = enc_.find({req.batch_id(), j.pad_after()});
          if (e == enc_.end() ||
              !contract::LinkedPadCtr0(e->second.ctr0, j.pad_slot(), &ctr0)) {
            FailJob(r, pb::JOB_WITHHELD, "the ENCRYPT this pad is linked to failed");
            break;
          }
        }
        set_ctr0(ctr0);
        PadState& s = pads_[{req.batch_id(), j.job_id()}];
        s = {key, ctr0, j.usage(), j.length()};
        s.verify = !j.checksum().empty();
        break;
      }
      default:  // CheckJob let no other type through
        break;
    }
  }
  // Conditional release, after every job ran (as the engine's Collect).
  std::map<uint64_t, int> pos;
  for (int k = 0; k < req.jobs_size(); ++k) pos[req.jobs(k).job_id()] = k;
  for (int k = 0; k < req.jobs_size(); ++k) {
    const pb::Job& j = req.jobs(k);
    if (!j.has_release_if_ok() || (*out)[0].results(k).status() != pb::JOB_OK) continue;
    if ((*out)[0].results(pos[j.release_if_ok()]).status() == pb::JOB_OK) continue;
    for (int p = 0; p < 3; ++p) {
      pb::JobResult* x = (*out)[p].mutable_results(k);
      values[k][p] = Values();
      x->set_status(pb::JOB_WITHHELD);
      x->set_detail("withheld: the job it is released on did not verify");
    }
    enc_.erase({req.batch_id(), j.job_id()});
  }
  Flatten(values, out);
  shared_.erase(req.batch_id());
  // As the servers: the blocks the request asks for, computed or not.
  for (int p = 0; p < 3; ++p)
    (*out)[p].mutable_stats()->set_aes_blocks(batch_blocks);
  return CallStatus();
}

CallStatus FakeCluster::ComputeSign(const pb::SignRequest& req,
                                    std::array<pb::SignResponse, 3>* out) {
  for (int p = 0; p < 3; ++p) {
    (*out)[p].set_party(p);
    (*out)[p].set_wire_version(contract::kWireVersion);
  }
  if (!contract::WireVersionProblem(req.wire_version(), "the KDC").empty())
    return Refused(pb::BATCH_MALFORMED, "wire version");
  if (req.data_shares().size() != contract::SignShareBytes(req))
    return Refused(pb::BATCH_MALFORMED, "data_shares of the wrong size");
  for (int k = 0; k < req.items_size(); ++k) {
    const pb::SignItem& it = req.items(k);
    std::array<std::string, 3> share;  // party p's t_p (JOB_OK only)
    std::array<pb::SignResult*, 3> r;
    for (int p = 0; p < 3; ++p) {
      r[p] = (*out)[p].add_results();
      r[p]->set_run_batch_id(it.run_batch_id());
      r[p]->set_job_id(it.job_id());
    }
    auto pad = pads_.find({it.run_batch_id(), it.job_id()});
    // A chain's second pad (SignItem.chain), as the servers check it.
    const bool chained = it.has_chain();
    auto pad2 = chained ? pads_.find({it.chain().run_batch_id(), it.chain().job_id()})
                        : pads_.end();
    const std::optional<std::string> d = Message(req.request_id(), k);
    bool all = true;
    for (int p = 0; p < 3; ++p) {
      if (pad == pads_.end() || pad->second.gone[p]) {
        r[p]->set_status(pb::JOB_PAD_UNAVAILABLE);
        r[p]->set_detail("no such pad");
        all = false;
      } else if (it.usage() != pad->second.usage ||
                 it.length() > pad->second.length || !d ||
                 d->size() != contract::SharedBytes(it) ||
                 it.verify() != pad->second.verify) {
        r[p]->set_status(pb::JOB_MALFORMED);  // the pad is kept
        r[p]->set_detail("usage, length or shares do not fit the pad");
        all = false;
      } else if (chained && (it.verify() || pad2 == pad)) {
        r[p]->set_status(pb::JOB_MALFORMED);
        r[p]->set_detail("a verify item or its own pad chained");
        all = false;
      } else if (chained && (pad2 == pads_.end() || pad2->second.gone[p])) {
        r[p]->set_status(pb::JOB_PAD_UNAVAILABLE);
        r[p]->set_detail("no such chained pad");
        all = false;
      } else if (chained && (pad2->second.key != pad->second.key ||
                             pad2->second.usage != pad->second.usage ||
                             pad2->second.verify || pad2->second.length < 32 ||
                             contract::CeilBlocks(it.length()) + 4 >
                                 contract::PadPowers(pad->second.length))) {
        r[p]->set_status(pb::JOB_MALFORMED);  // both pads are kept
        r[p]->set_detail("the chained pad does not fit");
        all = false;
      } else {
        pad->second.gone[p] = true;  // forgotten before the answer
        if (chained) pad2->second.gone[p] = true;
        r[p]->set_status(pb::JOB_OK);
        share[p] = Random(chained ? 32 : 16);  // alone uniform
      }
    }
    if (all) {
      std::string t = Tag(pad->second.key, it.usage(), pad->second.ctr0,
                          d->substr(0, it.length()), true);
      // A verify item's shares sum to r * (T ^ t'): zero iff it holds,
      // else a random value (t' came as shares after D).
      if (pad->second.verify)
        t = t == d->substr(it.length()) ? std::string(16, '\0') : Random(16);
      if (chained) {
        // tag_2: the checksum of ctr0_1 || tag_1 under the second pad.
        t += Tag(pad2->second.key, it.usage(), pad2->second.ctr0, pad->second.ctr0 + t, true);
      }
      for (size_t i = 0; i < t.size(); ++i) t[i] ^= share[0][i] ^ share[1][i];
      share[2] = t;
      for (int p = 0; p < 3; ++p) {
        const std::string& e = (pad->second.verify ? verify_error_ : sign_error_)[p];
        for (size_t i = 0; i < e.size() && i < 16; ++i) share[p][i] ^= e[i];
        if (chained)
          for (size_t i = 0; i < chain_error_[p].size() && i < 16; ++i)
            share[p][16 + i] ^= chain_error_[p][i];
      }
    }
    for (int p = 0; p < 3; ++p) (*out)[p].mutable_tag_shares()->append(share[p]);
  }
  shared_.erase(req.request_id());
  return CallStatus();
}

void FakeCluster::Sign(int party, const pb::SignRequest& req,
                       pb::SignResponse* resp, absl::Time deadline,
                       Done done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    received_signs_[party].push_back(req.SerializeAsString());
    if (!hang_[party] && !down_[party]) {
      contract::FlatReader flat(req.data_shares());
      for (int k = 0; k < req.items_size(); ++k) {
        const contract::MessageShares m = flat.TakePair(contract::SharedBytes(req.items(k)));
        shared_[req.request_id()][party][k] = {std::string(m.first),
                                               std::string(m.second)};
      }
    }
  }
  Answer<pb::SignResponse>(
      "Sign", party, req.items_size(), req.request_id(), 2, &signs_,
      [&](std::array<pb::SignResponse, 3>* out) {
        return ComputeSign(req, out);
      },
      [this](int p, pb::SignResponse* r) {
        if (old_wire_[p]) {
          r->clear_wire_version();
          r->clear_tag_shares();
        }
        std::string& ts = *r->mutable_tag_shares();
        if (tag_extra_[p] > 0) ts.append(tag_extra_[p], '\0');
        if (tag_extra_[p] < 0)
          ts.resize(ts.size() - std::min<size_t>(ts.size(), -tag_extra_[p]));
        if (!corrupt_[p]) return;  // else flip a bit of each tag share
        std::string& t = *r->mutable_tag_shares();
        for (size_t i = 0; i < t.size(); i += 16) t[i] ^= 1;
      },
      resp, std::move(done));
}

void FakeCluster::ForgetEncryptStates() {
  std::lock_guard<std::mutex> l(mu_);
  enc_.clear();
}

void FakeCluster::ForgetEncryptStates(int party) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [k, v] : enc_) forgotten_[party].insert(k);
}

int FakeCluster::finalize_answers() { return fin_answers_.load(); }

void FakeCluster::DelayNextFinalize(int party, absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  next_fin_delay_[party] = d;
}

void FakeCluster::set_run_delay(absl::Duration d) {
  std::lock_guard<std::mutex> l(mu_);
  run_delay_ = d;
}

void FakeCluster::AddInconsistentKey(const std::string& key_id) {
  std::lock_guard<std::mutex> l(mu_);
  keys_[key_id] = std::string(32, 'i');
  inconsistent_.insert(key_id);
}

CallStatus FakeCluster::ComputeFinalize(
    const pb::FinalizeRequest& req, std::array<pb::FinalizeResponse, 3>* out) {
  for (int p = 0; p < 3; ++p) {
    (*out)[p].set_batch_id(req.batch_id());
    (*out)[p].set_party(p);
    (*out)[p].set_wire_version(contract::kWireVersion);
  }
  if (!contract::WireVersionProblem(req.wire_version(), "the KDC").empty())
    return Refused(pb::BATCH_MALFORMED, "wire version");
  // As the servers (KeyOpsService::DoFinalize): the request's form first,
  // then all of its states or none (EncryptStates::TakeAll); a ciphertext
  // longer than its ENCRYPT's length refuses the request and uses up no
  // state. A prefix of the keystream may be finalized (the batcher's
  // prepared keystream).
  if (req.batch_id().size() != contract::kBatchIdSize)
    return Refused(pb::BATCH_MALFORMED, "batch id size");
  if (req.items().empty())
    return Refused(pb::BATCH_MALFORMED, "finalize has no items");
  std::set<std::pair<std::string, uint64_t>> seen;
  for (const auto& it : req.items()) {
    if (it.run_batch_id().size() != contract::kBatchIdSize)
      return Refused(pb::BATCH_MALFORMED, "run_batch_id size");
    if (!seen.insert({it.run_batch_id(), it.job_id()}).second)
      return Refused(pb::BATCH_MALFORMED, "job finalized twice in one request");
  }
  for (const auto& it : req.items())
    if (!enc_.count({it.run_batch_id(), it.job_id()}))
      return Refused(pb::BATCH_UNKNOWN_ENCRYPT,
                     "no ENCRYPT job awaits FINALIZE");
  for (const auto& it : req.items())
    if (it.ciphertext().size() > enc_[{it.run_batch_id(), it.job_id()}].length)
      return Refused(pb::BATCH_MALFORMED,
                     "ciphertext longer than the ENCRYPT job's length");
  // A party that forgot a state refuses the request (Finalize); the others
  // answer alone (FINALIZE is ring-free) and use theirs up.
  for (const auto& it : req.items()) {
    auto e = enc_.find({it.run_batch_id(), it.job_id()});
    std::array<SharePair, 3> tag;
    for (int p = 0; p < 3; ++p) {
      auto* r = (*out)[p].add_results();
      r->set_run_batch_id(it.run_batch_id());
      r->set_job_id(it.job_id());
    }
    Share(Tag(e->second.key, e->second.usage, e->second.ctr0, it.ciphertext(),
              false),
          {&tag[0], &tag[1], &tag[2]});
    // Wire version 4: each party's one additive share (its first copy).
    for (int p = 0; p < 3; ++p) (*out)[p].mutable_tags()->append(tag[p].first);
    enc_.erase(e);
  }
  return CallStatus();
}

template <typename Resp>
void FakeCluster::Answer(
    const char* method, int party, int items, const std::string& id, int need,
    std::map<std::string, Batch<Resp>>* batches,
    const std::function<CallStatus(std::array<Resp, 3>*)>& compute,
    const std::function<void(int, Resp*)>& tamper, Resp* resp, Done done) {
  std::unique_lock<std::mutex> l(mu_);
  calls_.push_back({method, party, items, absl::Now()});
  if (hang_[party]) return;  // never answers
  if (down_[party]) {
    l.unlock();
    Later(absl::ZeroDuration(), [done] {
      done(CallStatus(absl::UnavailableError("connection refused")));
    });
    return;
  }
  if (refuse_[party] != pb::BATCH_ERROR_UNSPECIFIED) {
    const pb::BatchErrorCode code = refuse_[party];
    l.unlock();
    Later(absl::ZeroDuration(),
          [done, code] { done(Refused(code, "queue full")); });
    return;
  }
  Batch<Resp>& b = (*batches)[id];
  ++b.arrived;
  b.waiting.push_back({party, resp, std::move(done)});
  if (!b.computed && b.arrived >= need) {
    b.status = compute(&b.resp);
    b.computed = true;
  }
  std::vector<std::pair<CallStatus, Done>> go;
  if (b.computed) {
    for (auto& w : b.waiting) {
      if (b.status.ok()) {
        *w.resp = b.resp[w.party];
        tamper(w.party, w.resp);
      }
      go.emplace_back(b.status, std::move(w.done));
    }
    b.waiting.clear();
  }
  absl::Duration lat = latency_;
  l.unlock();
  for (auto& [st, d] : go) Later(lat, [d = std::move(d), st = st] { d(st); });
}

std::optional<std::string> FakeCluster::Message(const std::string& batch_id,
                                                int k) {
  // Party p holds (s_p, s_{p+1}); two parties hold all three shares.
  std::array<std::optional<std::string>, 3> s;
  for (const auto& [party, jobs] : shared_[batch_id]) {
    auto it = jobs.find(k);
    if (it == jobs.end()) return std::nullopt;
    for (auto [i, v] : {std::pair<int, const std::string*>{party, &it->second.first},
                        {(party + 1) % 3, &it->second.second}}) {
      if (s[i] && *s[i] != *v) return std::nullopt;  // copies disagree
      s[i] = *v;
    }
  }
  if (!s[0] || !s[1] || !s[2]) return std::nullopt;
  std::string d = *s[0];
  if (s[1]->size() != d.size() || s[2]->size() != d.size()) return std::nullopt;
  for (size_t i = 0; i < d.size(); ++i) d[i] ^= (*s[1])[i] ^ (*s[2])[i];
  return d;
}

void FakeCluster::Run(int party, const pb::RunRequest& req,
                      pb::RunResponse* resp, absl::Time deadline, Done done) {
  CountConditions(party, req);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (run_delay_ > absl::ZeroDuration())
      done = [this, extra = run_delay_, done = std::move(done)](CallStatus st) {
        Later(extra, [done, st] { done(st); });
      };
  }
  int need = 1;
  {
    std::lock_guard<std::mutex> l(mu_);
    received_[party].push_back(req.SerializeAsString());
    const std::vector<contract::MessageShares> sliced =
        contract::SliceMessageShares(req);
    for (int k = 0; k < req.jobs_size(); ++k) {
      const pb::Job& j = req.jobs(k);
      if (j.type() != pb::JOB_CHECKSUM && j.type() != pb::JOB_VERIFY_CHECKSUM)
        continue;
      need = 2;
      if (!hang_[party] && !down_[party]) {
        shared_[req.batch_id()][party][k] = {std::string(sliced[k].first),
                                             std::string(sliced[k].second)};
      }
    }
  }
  Answer<pb::RunResponse>(
      "Run", party, req.jobs_size(), req.batch_id(), need, &runs_,
      [&](std::array<pb::RunResponse, 3>* out) { return ComputeRun(req, out); },
      [this](int p, pb::RunResponse* r) {
        if (old_wire_[p]) {
          r->clear_wire_version();
          r->clear_ctr0s();
          r->clear_shares();
        }
        if (!detail_.empty())
          for (auto& x : *r->mutable_results())
            if (x.status() != pb::JOB_OK) x.set_detail(detail_);
        if (!corrupt_[p]) return;  // else flip a bit of its last share copy
        std::string& sh = *r->mutable_shares();
        if (!sh.empty()) sh.back() ^= 1;
      },
      resp, std::move(done));
}

void FakeCluster::Finalize(int party, const pb::FinalizeRequest& req,
                           pb::FinalizeResponse* resp, absl::Time deadline,
                           Done done_in) {
  Done done = [this, done_in = std::move(done_in)](CallStatus st) {
    done_in(std::move(st));
    fin_answers_.fetch_add(1);
  };
  {
    std::unique_lock<std::mutex> l(mu_);
    const absl::Duration extra = next_fin_delay_[party];
    const absl::Duration delay = latency_ + extra;
    next_fin_delay_[party] = absl::ZeroDuration();
    bool forgot = false;
    for (const auto& it : req.items())
      forgot |= forgotten_[party].count({it.run_batch_id(), it.job_id()}) > 0;
    if (forgot) {
      calls_.push_back({"Finalize", party, req.items_size(), absl::Now()});
      l.unlock();
      Later(delay, [done] {
        done(Refused(pb::BATCH_UNKNOWN_ENCRYPT,
                     "no ENCRYPT job awaits FINALIZE"));
      });
      return;
    }
    if (extra > absl::ZeroDuration()) {
      // The one-shot extra wait goes in front of the callback.
      done = [this, extra, done = std::move(done)](CallStatus st) {
        Later(extra, [done, st] { done(st); });
      };
    }
  }
  Answer<pb::FinalizeResponse>(
      "Finalize", party, req.items_size(), req.batch_id(), 1, &fins_,
      [&](std::array<pb::FinalizeResponse, 3>* out) {
        return ComputeFinalize(req, out);
      },
      [this](int p, pb::FinalizeResponse* r) {
        if (old_wire_[p]) {
          r->clear_wire_version();
          r->clear_tags();
        }
        if (!corrupt_[p] && !corrupt_fin_[p]) return;  // each tag share
        std::string& t = *r->mutable_tags();
        for (size_t i = 0; i < t.size(); i += 16) t[i] ^= 1;
      },
      resp, std::move(done));
}

}  // namespace kmpc::kdc::testing
