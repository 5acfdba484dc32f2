// The fake cluster answers the same requests as the real servers do: the
// same requests go to a FakeCluster and a RealCluster, and everything
// public in the answers (per-job status and detail, which values are
// revealed and their sizes, the batch's AES blocks, whole-batch refusals)
// must be equal. The values themselves differ by construction (the fake's
// cipher is HMAC-based); each cluster's are checked against its reference.
#include <array>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/reveal.h"
#include "contract.h"
#include "fake_cluster.h"
#include "gtest/gtest.h"
#include "real_cluster.h"

namespace kmpc::kdc {
namespace {

namespace pb = kmpc::v1;
using testing::FakeCluster;
using testing::RealCluster;
using testing::TestCluster;
using testing::SharePair;

const std::string kKeyId(32, 'k');
const std::string kKey(32, 'K');
const std::string kBadId(32, 'b');    // dealt inconsistently
const std::string kNoKeyId(32, 'u');  // dealt nowhere

// The three parties' answers to one request (all three called at once).
template <typename Resp>
struct Answers {
  std::array<CallStatus, 3> status;
  std::array<Resp, 3> resp;
};

// "OK", or the refusal's BatchErrorCode name, or the transport's code.
std::string Outcome(const CallStatus& s) {
  if (s.ok()) return "OK";
  if (s.refused()) return pb::BatchErrorCode_Name(s.refusal);
  return absl::StatusCodeToString(s.status.code());
}

// Deals msg afresh into the three parties' flat share buffers.
void DealInto(const std::string& msg, const std::array<std::string*, 3>& flat) {
  client::DealRandom random;
  ASSERT_TRUE(random.Draw(msg.size()).ok());
  EXPECT_TRUE(client::DealFlat(
                  absl::MakeConstSpan(
                      reinterpret_cast<const uint8_t*>(msg.data()), msg.size()),
                  random.Take(msg.size()), flat)
                  .ok());
}

// The three parties' copies of req, as the module sends them: the message
// of a CHECKSUM or VERIFY_CHECKSUM job written in `data` is dealt into
// the flat data_shares (client::DealFlat), a fresh dealing per job.
std::array<pb::RunRequest, 3> PerParty(const pb::RunRequest& req) {
  std::array<pb::RunRequest, 3> out = {req, req, req};
  for (auto& r : out) r.set_wire_version(contract::kWireVersion);
  for (int k = 0; k < req.jobs_size(); ++k) {
    const pb::Job& j = req.jobs(k);
    if ((j.type() != pb::JOB_CHECKSUM && j.type() != pb::JOB_VERIFY_CHECKSUM) ||
        j.data().empty())
      continue;
    // A VERIFY_CHECKSUM's ctr0 || tag: ctr0 in the clear, the tag dealt
    // after the message (kmpc.proto JOB_VERIFY_CHECKSUM); a checksum of
    // another size keeps a wrong-sized ctr0 and a zero tag.
    std::string dealt = j.data();
    std::string ctr0 = j.checksum();
    if (j.type() == pb::JOB_VERIFY_CHECKSUM) {
      const bool whole = ctr0.size() == contract::kChecksumSize;
      dealt += whole ? ctr0.substr(16) : std::string(16, '\0');
      ctr0 = whole ? ctr0.substr(0, 16) : ctr0.substr(0, 15);
    }
    for (int p = 0; p < 3; ++p) {
      pb::Job* x = out[p].mutable_jobs(k);
      x->clear_data();
      x->set_length(j.data().size());
      if (j.type() == pb::JOB_VERIFY_CHECKSUM) x->set_checksum(ctr0);
    }
    DealInto(dealt, {out[0].mutable_data_shares(),
                        out[1].mutable_data_shares(),
                        out[2].mutable_data_shares()});
  }
  return out;
}

// Result `job`'s values in party p's answer, read back from the flat
// buffers (kmpc.proto RunResponse.ctr0s, .shares) with the request's
// public metadata; `extra` counts bytes beyond what the results take.
struct ResultValues {
  std::string ctr0;
  SharePair value;
};
ResultValues ValuesOf(const pb::RunRequest& req, const pb::RunResponse& r,
                      int job, size_t* extra = nullptr) {
  ResultValues out;
  contract::FlatReader c(r.ctr0s()), sh(r.shares());
  for (int k = 0; k < req.jobs_size() && k < r.results_size(); ++k) {
    const pb::JobStatus st = r.results(k).status();
    const pb::Job& j = req.jobs(k);
    absl::string_view ctr0;
    if (contract::ResultHasCtr0(j.type(), st)) ctr0 = c.Take(16);
    const contract::MessageShares m = sh.TakePair(
        contract::RevealedShareBytes(contract::ShapeOf(j), st));
    if (k != job) continue;
    out.ctr0 = std::string(ctr0);
    out.value = {std::string(m.first), std::string(m.second)};
  }
  if (extra) *extra = c.left() + sh.left();
  return out;
}

Answers<pb::RunResponse> RunAll(TestCluster& c, const pb::RunRequest& one,
                                std::array<bool, 3> send = {true, true,
                                                            true}) {
  Answers<pb::RunResponse> a;
  const std::array<pb::RunRequest, 3> req = PerParty(one);
  std::array<std::promise<CallStatus>, 3> done;
  for (int p = 0; p < 3; ++p) {
    if (!send[p]) continue;
    c.Run(p, req[p], &a.resp[p], absl::Now() + absl::Seconds(10),
          [&done, p](CallStatus s) { done[p].set_value(std::move(s)); });
  }
  for (int p = 0; p < 3; ++p)
    if (send[p]) a.status[p] = done[p].get_future().get();
  return a;
}

Answers<pb::FinalizeResponse> FinalizeAll(TestCluster& c,
                                          pb::FinalizeRequest req) {
  req.set_wire_version(contract::kWireVersion);
  Answers<pb::FinalizeResponse> a;
  std::array<std::promise<CallStatus>, 3> done;
  for (int p = 0; p < 3; ++p)
    c.Finalize(p, req, &a.resp[p], absl::Now() + absl::Seconds(10),
               [&done, p](CallStatus s) { done[p].set_value(std::move(s)); });
  for (int p = 0; p < 3; ++p) a.status[p] = done[p].get_future().get();
  return a;
}

// What a party's answer says in public terms, one line per job.
std::vector<std::string> Describe(const CallStatus& s,
                                  const pb::RunResponse& r) {
  std::vector<std::string> out = {Outcome(s)};
  if (!s.ok()) return out;
  out.push_back(absl::StrCat("party ", r.party(), " batch id ",
                             r.batch_id().size(), " bytes, aes_blocks ",
                             r.stats().aes_blocks(), ", wire version ",
                             r.wire_version(), ", ctr0s ", r.ctr0s().size(),
                             " bytes, shares ", r.shares().size(), " bytes"));
  for (const auto& j : r.results())
    out.push_back(absl::StrCat("job ", j.job_id(), ": ",
                               pb::JobStatus_Name(j.status()), " [",
                               j.detail(), "]"));
  return out;
}

std::vector<std::string> Describe(const CallStatus& s,
                                  const pb::FinalizeResponse& r) {
  std::vector<std::string> out = {Outcome(s)};
  if (!s.ok()) return out;
  out.push_back(absl::StrCat("wire version ", r.wire_version(), ", tags ",
                             r.tags().size(), " bytes"));
  for (const auto& j : r.results())
    out.push_back(absl::StrCat("item ", j.job_id(), " of a ",
                               j.run_batch_id().size(), "-byte batch"));
  return out;
}

// XOR of the three parties' first copies; every second copy must equal
// the next party's first.
std::string Reveal(const std::array<const SharePair*, 3>& s) {
  std::string v = s[0]->first;
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(s[p]->second, s[(p + 1) % 3]->first) << "party " << p;
    if (p > 0)
      for (size_t i = 0; i < v.size() && i < s[p]->first.size(); ++i)
        v[i] ^= s[p]->first[i];
  }
  return v;
}

class FakeConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (TestCluster* c : clusters_) {
      c->AddKey(kKeyId, kKey);
      c->AddInconsistentKey(kBadId);
    }
  }
  static std::string BatchId(char fill) { return std::string(16, fill); }

  // Runs req on both clusters (build(c) makes it for cluster c, whose
  // reference computations may be needed) and expects the same public
  // answers from both; returns them (fake, real).
  std::array<Answers<pb::RunResponse>, 2> Compare(
      const std::function<pb::RunRequest(TestCluster&)>& build,
      const std::string& what) {
    std::array<Answers<pb::RunResponse>, 2> a;
    for (int k = 0; k < 2; ++k) a[k] = RunAll(*clusters_[k], build(*clusters_[k]));
    for (int p = 0; p < 3; ++p)
      EXPECT_EQ(Describe(a[0].status[p], a[0].resp[p]),
                Describe(a[1].status[p], a[1].resp[p]))
          << what << ", party " << p << " (fake, then real)";
    return a;
  }
  // The same for a FINALIZE request, under a batch id of its own.
  std::array<Answers<pb::FinalizeResponse>, 2> CompareFinalize(
      pb::FinalizeRequest req, const std::string& what) {
    req.set_batch_id(BatchId(next_id_++));
    std::array<Answers<pb::FinalizeResponse>, 2> a;
    for (int k = 0; k < 2; ++k) a[k] = FinalizeAll(*clusters_[k], req);
    for (int p = 0; p < 3; ++p)
      EXPECT_EQ(Describe(a[0].status[p], a[0].resp[p]),
                Describe(a[1].status[p], a[1].resp[p]))
          << what << ", party " << p << " (fake, then real)";
    return a;
  }

  FakeCluster fake_;
  RealCluster real_;
  std::array<TestCluster*, 2> clusters_ = {&fake_, &real_};
  char next_id_ = 'A';
};

pb::Job* AddJob(pb::RunRequest* r, pb::JobType type, const std::string& key_id,
                uint32_t usage = 2) {
  pb::Job* j = r->add_jobs();
  j->set_job_id(r->jobs_size() - 1);
  j->set_type(type);
  j->set_key_id(key_id);
  j->set_cipher(pb::CIPHER_AES256);  // every key here is 32 bytes
  j->set_usage(usage);
  return j;
}

// Every job type, well formed and not, known keys and not, tags that
// verify and not, in one batch: each job's outcome on its own.
TEST_F(FakeConformanceTest, PerJobOutcomes) {
  if (!real_.ChecksumsOnShares())
    GTEST_SKIP() << "these MPC servers compute checksums over Job.data, not "
                    "over data_shares (kmpc.proto; the server side of the "
                    "shared checksum message is not in this tree)";
  const std::string ctr0 = std::string(15, '\x01') + '\x02';
  const std::string data = "some data to be checksummed";
  auto build = [&](TestCluster& c) {
    pb::RunRequest r;
    r.set_batch_id(BatchId('a'));
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(20);
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(0);
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId.substr(0, 31))->set_length(20);
    AddJob(&r, pb::JOB_ENCRYPT, kNoKeyId)->set_length(20);
    AddJob(&r, pb::JOB_ENCRYPT, kBadId)->set_length(20);
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(contract::kMaxJobBytes + 1);
    AddJob(&r, pb::JOB_TYPE_UNSPECIFIED, kKeyId);
    AddJob(&r, pb::JOB_FINALIZE, kKeyId);
    // DECRYPT: valid, tag flipped, too short, counter through zero.
    const std::string cipher = "0123456789abcdefXYZ";
    const std::string ks = c.Keystream(kKey, ctr0, cipher.size());
    std::string ct = cipher;
    for (size_t i = 0; i < ct.size(); ++i) ct[i] ^= ks[i];
    const std::string good = ctr0 + ct + c.Tag(kKey, 3, ctr0, ct, false);
    AddJob(&r, pb::JOB_DECRYPT, kKeyId, 3)->set_data(good);
    std::string flipped = good;
    flipped.back() ^= 1;
    AddJob(&r, pb::JOB_DECRYPT, kKeyId, 3)->set_data(flipped);
    AddJob(&r, pb::JOB_DECRYPT, kKeyId, 3)->set_data(good.substr(0, 31));
    AddJob(&r, pb::JOB_DECRYPT, kKeyId, 3)
        ->set_data(std::string(16, '\0') + good.substr(16));
    AddJob(&r, pb::JOB_DECRYPT, kNoKeyId, 3)->set_data(good);
    // CHECKSUM and VERIFY_CHECKSUM: valid, flipped, wrong size.
    AddJob(&r, pb::JOB_CHECKSUM, kKeyId, 56)->set_data(data);
    const std::string sum = ctr0 + c.Tag(kKey, 56, ctr0, data, true);
    pb::Job* v = AddJob(&r, pb::JOB_VERIFY_CHECKSUM, kKeyId, 56);
    v->set_data(data);
    v->set_checksum(sum);
    v = AddJob(&r, pb::JOB_VERIFY_CHECKSUM, kKeyId, 57);
    v->set_data(data);
    v->set_checksum(sum);
    v = AddJob(&r, pb::JOB_VERIFY_CHECKSUM, kKeyId, 56);
    v->set_data(data);
    v->set_checksum(sum.substr(0, 31));
    v = AddJob(&r, pb::JOB_VERIFY_CHECKSUM, kBadId, 56);
    v->set_data(data);
    v->set_checksum(sum);
    // Release conditions (Job.release_if_ok): on the good DECRYPT (8),
    // the flipped one (9), a VERIFY that fails (15), a CHECKSUM (13), no
    // job, itself; and on an ENCRYPT's condition from a DECRYPT.
    auto cond = [&](pb::JobType t, uint64_t on) {
      pb::Job* j = AddJob(&r, t, kKeyId, 2);
      if (t == pb::JOB_ENCRYPT) j->set_length(20);
      else j->set_data(data);
      j->set_release_if_ok(on);
      return j;
    };
    cond(pb::JOB_ENCRYPT, 8);                   // 18 released
    cond(pb::JOB_ENCRYPT, 9);                   // 19 withheld
    cond(pb::JOB_CHECKSUM, 15);                 // 20 withheld
    cond(pb::JOB_ENCRYPT, 13);                  // 21 malformed: a CHECKSUM
    cond(pb::JOB_ENCRYPT, 999);                 // 22 malformed: no such job
    cond(pb::JOB_ENCRYPT, 23);                  // 23 malformed: itself
    AddJob(&r, pb::JOB_DECRYPT, kKeyId, 3)->set_data(good);
    r.mutable_jobs(r.jobs_size() - 1)->set_release_if_ok(8);  // 24 malformed: a DECRYPT
    return r;
  };
  auto a = Compare(build, "mixed batch");
  // And the values revealed are each cluster's construction: the good
  // DECRYPT's keystream, the ENCRYPT's keystream and the CHECKSUM's tag.
  for (int k = 0; k < 2; ++k) {
    TestCluster& c = *clusters_[k];
    const auto& r = a[k].resp;
    ASSERT_TRUE(a[k].status[0].ok()) << k;
    const pb::RunRequest req = build(c);  // the same public request
    std::array<ResultValues, 3> v;
    auto pairs = [&](int job, bool) {
      std::array<const SharePair*, 3> s;
      for (int p = 0; p < 3; ++p) {
        v[p] = ValuesOf(req, r[p], job);
        s[p] = &v[p].value;
      }
      return s;
    };
    auto ctr0_of = [&](int job) { return ValuesOf(req, r[0], job).ctr0; };
    // Nothing beyond what the results take: no withheld value, no
    // keystream of a failed DECRYPT.
    for (int p = 0; p < 3; ++p) {
      size_t extra = 1;
      ValuesOf(req, r[p], 0, &extra);
      EXPECT_EQ(extra, 0u) << k << " " << p;
    }
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(0).status()), "JOB_OK") << k;
    EXPECT_EQ(Reveal(pairs(0, false)), c.Keystream(kKey, ctr0_of(0), 20))
        << k;
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(8).status()), "JOB_OK") << k;
    EXPECT_EQ(Reveal(pairs(8, false)), c.Keystream(kKey, ctr0, 19)) << k;
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(13).status()), "JOB_OK") << k;
    EXPECT_EQ(Reveal(pairs(13, true)), c.Tag(kKey, 56, ctr0_of(13), data, true))
        << k;
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(14).status()), "JOB_OK") << k;
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(15).status()),
              "JOB_INTEGRITY_FAILED")
        << k;
    ASSERT_EQ(r[0].results_size(), 25) << k;
    EXPECT_EQ(pb::JobStatus_Name(r[0].results(18).status()), "JOB_OK") << k;
    for (int j : {19, 20}) {
      EXPECT_EQ(pb::JobStatus_Name(r[0].results(j).status()), "JOB_WITHHELD") << k;
      for (int p = 0; p < 3; ++p) {
        const ResultValues x = ValuesOf(req, r[p], j);
        EXPECT_TRUE(x.ctr0.empty() && x.value.first.empty()) << k << " " << j;
      }
    }
    for (int j : {21, 22, 23, 24})
      EXPECT_EQ(pb::JobStatus_Name(r[0].results(j).status()), "JOB_MALFORMED") << k << j;
  }
}

// Whole-batch refusals of Run.
TEST_F(FakeConformanceTest, RunRefusals) {
  Compare([](TestCluster&) {
    pb::RunRequest r;
    r.set_batch_id("short");
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(1);
    return r;
  }, "batch id of 5 bytes");
  Compare([](TestCluster&) {
    pb::RunRequest r;
    r.set_batch_id(BatchId('b'));
    return r;
  }, "no jobs");
  Compare([](TestCluster&) {
    pb::RunRequest r;
    r.set_batch_id(BatchId('c'));
    AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(1);
    pb::Job* twin = AddJob(&r, pb::JOB_ENCRYPT, kKeyId);
    twin->set_length(1);
    twin->set_job_id(0);
    return r;
  }, "duplicate job id");
  Compare([](TestCluster&) {
    pb::RunRequest r;
    r.set_batch_id(BatchId('d'));
    for (int i = 0; i < 17; ++i)
      AddJob(&r, pb::JOB_ENCRYPT, kKeyId)->set_length(contract::kMaxJobBytes);
    return r;
  }, "more AES blocks than kMaxBatchBlocks");
}

// FINALIZE: refusals, a request that may be retried after a malformed one,
// at most one FINALIZE per ENCRYPT, and one server that forgot its states.
TEST_F(FakeConformanceTest, FinalizeOutcomes) {
  auto encrypt = [](char id) {
    return [id](TestCluster&) {
      pb::RunRequest r;
      r.set_batch_id(BatchId(id));
      AddJob(&r, pb::JOB_ENCRYPT, kKeyId, 2)->set_length(20);
      AddJob(&r, pb::JOB_ENCRYPT, kKeyId, 3)->set_length(40);
      return r;
    };
  };
  auto runs = Compare(encrypt('e'), "two ENCRYPT jobs");
  ASSERT_TRUE(runs[0].status[0].ok() && runs[1].status[0].ok());
  auto item = [](pb::FinalizeRequest* f, const std::string& run, uint64_t job,
                 size_t len) {
    auto* it = f->add_items();
    it->set_run_batch_id(run);
    it->set_job_id(job);
    it->set_ciphertext(std::string(len, 'c'));
  };
  pb::FinalizeRequest f;
  CompareFinalize(f, "no items");
  item(&f, BatchId('e'), 0, 21);
  CompareFinalize(f, "a ciphertext longer than the ENCRYPT's length");
  f.clear_items();
  item(&f, BatchId('e'), 0, 20);
  item(&f, BatchId('e'), 0, 20);
  CompareFinalize(f, "one job twice");
  f.clear_items();
  item(&f, "short", 0, 20);
  CompareFinalize(f, "a run batch id of 5 bytes");
  f.clear_items();
  item(&f, BatchId('e'), 0, 20);
  item(&f, BatchId('x'), 0, 20);
  CompareFinalize(f, "one ENCRYPT unknown");
  // None of the refused requests used up a state: both finalize now, the
  // second one shorter than its keystream (a prepared keystream's case).
  f.clear_items();
  item(&f, BatchId('e'), 0, 20);
  item(&f, BatchId('e'), 1, 33);
  auto fin = CompareFinalize(f, "both ENCRYPT jobs");
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(fin[k].status[0].ok()) << k;
    std::string tag(16, '\0');  // item 1: bytes 16..31, one share each
    for (int p = 0; p < 3; ++p) {
      const std::string& tags = fin[k].resp[p].tags();
      ASSERT_EQ(tags.size(), 32u) << k << " " << p;
      for (int b = 0; b < 16; ++b) tag[b] ^= tags[16 + b];
    }
    const pb::RunRequest enc = encrypt('e')(*clusters_[k]);
    EXPECT_EQ(tag,
              clusters_[k]->Tag(kKey, 3, ValuesOf(enc, runs[k].resp[0], 1).ctr0,
                                std::string(33, 'c'), false))
        << k;
  }
  CompareFinalize(f, "the same jobs again");

  // Party 1 restarts between the Run and the FINALIZE.
  runs = Compare(encrypt('g'), "two ENCRYPT jobs");
  for (TestCluster* c : clusters_) c->ForgetEncryptStates(1);
  f.clear_items();
  item(&f, BatchId('g'), 0, 20);
  CompareFinalize(f, "party 1 forgot the state");
  CompareFinalize(f, "party 1 forgot the state, second try");
}

// The fake's PAD and Sign (kmpc.proto JOB_PAD, SignItem) against the
// contract, fake only until the servers' Sign is in this tree (then
// compare with RealCluster as above): a PAD reveals only its ctr0; a Sign
// that does not fit the pad (usage, length) is JOB_MALFORMED and keeps it;
// one that fits gives additive tag shares that XOR to the checksum tag
// over the message under the pad's ctr0; a second Sign of that pad, or of
// an unknown one, is JOB_PAD_UNAVAILABLE on every party.
TEST_F(FakeConformanceTest, PadAndSignOutcomesOfTheFake) {
  pb::RunRequest r;
  r.set_batch_id(BatchId('p'));
  AddJob(&r, pb::JOB_PAD, kKeyId, 17)->set_length(64);
  pb::Job* bad = AddJob(&r, pb::JOB_PAD, kKeyId, 17);
  bad->set_length(64);
  bad->set_data("x");
  auto run = RunAll(fake_, r);
  ASSERT_TRUE(run.status[0].ok());
  for (int p = 0; p < 3; ++p) {
    const pb::JobResult& x = run.resp[p].results(0);
    EXPECT_EQ(pb::JobStatus_Name(x.status()), "JOB_OK");
    EXPECT_EQ(run.resp[p].ctr0s(), run.resp[0].ctr0s());  // the PAD's alone
    EXPECT_TRUE(run.resp[p].shares().empty());
    EXPECT_EQ(pb::JobStatus_Name(run.resp[p].results(1).status()),
              "JOB_MALFORMED");
  }
  const std::string ctr0 = run.resp[0].ctr0s();
  ASSERT_EQ(ctr0.size(), 16u);
  char id = 'A';
  // Party p's Sign request of `msg` under (batch, job), fresh shares.
  auto sign = [&](const std::string& msg, uint32_t usage, uint32_t length,
                  uint64_t job) {
    std::array<pb::SignRequest, 3> req;
    for (int p = 0; p < 3; ++p) {
      req[p].set_request_id(std::string(16, id));
      req[p].set_wire_version(contract::kWireVersion);
      pb::SignItem* it = req[p].add_items();
      it->set_run_batch_id(BatchId('p'));
      it->set_job_id(job);
      it->set_usage(usage);
      it->set_length(length);
    }
    ++id;
    DealInto(msg, {req[0].mutable_data_shares(), req[1].mutable_data_shares(),
                   req[2].mutable_data_shares()});
    std::array<pb::SignResponse, 3> resp;
    std::array<std::promise<CallStatus>, 3> done;
    for (int p = 0; p < 3; ++p)
      fake_.Sign(p, req[p], &resp[p], absl::Now() + absl::Seconds(10),
                 [&done, p](CallStatus s) { done[p].set_value(std::move(s)); });
    for (int p = 0; p < 3; ++p) EXPECT_TRUE(done[p].get_future().get().ok());
    return resp;
  };
  auto statuses = [](const std::array<pb::SignResponse, 3>& resp) {
    std::vector<std::string> out;
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ(resp[p].party(), static_cast<uint32_t>(p));
      EXPECT_EQ(resp[p].results_size(), 1);
      out.push_back(pb::JobStatus_Name(resp[p].results(0).status()));
    }
    return out;
  };
  const std::vector<std::string> all_ok(3, "JOB_OK"),
      all_malformed(3, "JOB_MALFORMED"), all_gone(3, "JOB_PAD_UNAVAILABLE");
  EXPECT_EQ(statuses(sign(std::string(65, 'm'), 17, 65, 0)), all_malformed);
  EXPECT_EQ(statuses(sign(std::string(20, 'm'), 18, 20, 0)), all_malformed);
  EXPECT_EQ(statuses(sign(std::string(20, 'm'), 17, 20, 1)), all_gone);
  const std::string msg(64, 'm');
  auto ok = sign(msg, 17, 64, 0);
  ASSERT_EQ(statuses(ok), all_ok);
  std::string tag(16, '\0');
  for (int p = 0; p < 3; ++p) {
    const std::string& t = ok[p].tag_shares();
    ASSERT_EQ(t.size(), 16u);
    for (int i = 0; i < 16; ++i) tag[i] ^= t[i];
  }
  EXPECT_EQ(tag, fake_.Tag(kKey, 17, ctr0, msg, true));
  EXPECT_EQ(statuses(sign(msg, 17, 64, 0)), all_gone);  // a pad signs once
}

}  // namespace
}  // namespace kmpc::kdc
