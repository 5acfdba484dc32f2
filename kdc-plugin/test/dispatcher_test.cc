// The dispatcher (dispatcher.h, through the Batcher facade) against a
// cluster: the window, the size limits, early flush, per-job failures,
// deadlines, share-copy checks and exactly-once completion. BatcherTest
// runs every test against the fake cluster and the real servers' code;
// FakeBatcherTest against the fake only: each of its tests says which
// fault the real servers cannot be made to show.
#include "batcher_fixture.h"

#include <syslog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "contract.h"
#include "kdc_metrics.h"
#include "options.h"
#include "gtest/gtest.h"

namespace kmpc::kdc {
namespace {

INSTANTIATE_TEST_SUITE_P(Cluster, BatcherTest,
                         ::testing::Values(ClusterKind::kFake,
                                           ClusterKind::kReal),
                         KindName);

INSTANTIATE_TEST_SUITE_P(Cluster, FakeBatcherTest,
                         ::testing::Values(ClusterKind::kFake), KindName);

TEST_P(BatcherTest, EncryptDecryptChecksumVerifyRoundTrip) {
  if (!ChecksumsOnShares())
    GTEST_SKIP() << "these servers do not compute checksums over data_shares";
  BatcherOptions o = WindowFlushed(absl::Milliseconds(10));
  auto b = Make(o);
  const std::string pt = "an EncTicketPart of some 150 bytes, give or take";
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt(pt)).ok());
  Job ck;
  ck.type = kmpc::v1::JOB_CHECKSUM;
  ck.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  ck.key_id = kKeyId;
  ck.usage = 56;
  ck.input.assign(pt.begin(), pt.end());
  ASSERT_TRUE(b->dispatcher().Submit(2, std::move(ck)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  Result enc = sink_.Get(1);
  ASSERT_TRUE(enc.status.ok()) << enc.status;
  ASSERT_EQ(enc.output.size(), pt.size() + 32);
  // ctr0 || C || T with C = P ^ KS and the cluster's tag over C.
  std::string out = Str(enc.output);
  std::string ctr0 = out.substr(0, 16), c = out.substr(16, pt.size());
  std::string ks = cluster_.Keystream(kKey, ctr0, pt.size());
  for (size_t i = 0; i < pt.size(); ++i) EXPECT_EQ(c[i] ^ ks[i], pt[i]);
  EXPECT_EQ(out.substr(16 + pt.size()), cluster_.Tag(kKey, 2, ctr0, c, false));

  ASSERT_TRUE(b->dispatcher().Submit(3, Decrypt(enc.output)).ok());
  SecureBytes bad = enc.output;
  bad[20] ^= 1;
  ASSERT_TRUE(b->dispatcher().Submit(4, Decrypt(bad)).ok());
  Result ckr = sink_.Get(2);
  ASSERT_TRUE(ckr.status.ok());
  ASSERT_EQ(ckr.output.size(), 32u);
  // The tag is over the message the shares reconstruct: ctr0 || tag.
  const std::string sum = Str(ckr.output);
  EXPECT_EQ(sum.substr(16), cluster_.Tag(kKey, 56, sum.substr(0, 16), pt, true));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  v.key_id = kKeyId;
  v.usage = 56;
  v.input.assign(pt.begin(), pt.end());
  v.checksum = Str(ckr.output);
  Job v2 = v;
  v2.checksum[31] ^= 1;
  ASSERT_TRUE(b->dispatcher().Submit(5, std::move(v)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(6, std::move(v2)).ok());
  ASSERT_TRUE(sink_.WaitFor(6));
  EXPECT_EQ(Str(sink_.Get(3).output), pt);
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(4).status)) << sink_.Get(4).status;
  EXPECT_TRUE(sink_.Get(4).output.empty());
  EXPECT_TRUE(sink_.Get(5).status.ok());
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(6).status));
}

// enctype.md invariant 5: a checksum's message (a ticket signature covers
// the EncTicketPart, session key included) reaches each server only as
// its two of three shares, dealt afresh for every job; the parties'
// requests differ in those shares only, and no party's request holds the
// message, nor a VERIFY's presented tag. The tags are still right (the
// fake reconstructs the message from two parties' shares).
TEST_P(FakeBatcherTest, ChecksumMessageReachesEachPartyOnlyAsShares) {
  BatcherOptions o;
  o.window = absl::Milliseconds(20);
  o.early_flush = false;  // both jobs in one batch
  auto b = Make(o);
  const std::string msg =
      "EncTicketPart: session key 0123456789abcdef0123456789abcdef, PAC";
  ASSERT_TRUE(b->dispatcher().Submit(1, Checksum(msg)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Checksum(msg)).ok());  // the same message again
  ASSERT_TRUE(sink_.WaitFor(2));
  const std::string sum = Str(sink_.Get(1).output);
  ASSERT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_EQ(sum.substr(16), fake_.Tag(kKey, 17, sum.substr(0, 16), msg, true));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;
  v.key_id = kKeyId;
  v.usage = 17;
  v.input.assign(msg.begin(), msg.end());
  v.checksum = sum;
  ASSERT_TRUE(b->dispatcher().Submit(3, std::move(v)).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;

  std::array<std::vector<kmpc::v1::RunRequest>, 3> got;
  for (int p = 0; p < 3; ++p) {
    for (const std::string& raw : fake_.received(p)) {
      EXPECT_EQ(raw.find(msg.substr(0, 12)), std::string::npos) << p;
      EXPECT_EQ(raw.find("0123456789abcdef"), std::string::npos) << p;
      // The VERIFY's presented tag (a PAC signature: ticket plaintext)
      // goes as shares too (kmpc.proto JOB_VERIFY_CHECKSUM).
      EXPECT_EQ(raw.find(sum.substr(16)), std::string::npos) << p;
      got[p].emplace_back();
      ASSERT_TRUE(got[p].back().ParseFromString(raw));
    }
    ASSERT_EQ(got[p].size(), 2u) << p;  // two batches
  }
  int jobs = 0;
  std::set<std::string> seen;  // every share of every job differs
  for (size_t r = 0; r < 2; ++r) {
    // The same batch and jobs for the three parties, but their own shares.
    for (int p = 1; p < 3; ++p) {
      ASSERT_EQ(got[p][r].batch_id(), got[0][r].batch_id());
      ASSERT_EQ(got[p][r].jobs_size(), got[0][r].jobs_size());
    }
    for (int k = 0; k < got[0][r].jobs_size(); ++k) {
      ++jobs;
      // Party p's shares of job k: its slice of the flat buffer
      // (kmpc.proto RunRequest.data_shares).
      std::array<std::pair<std::string, std::string>, 3> pairs;
      std::array<const std::pair<std::string, std::string>*, 3> s;
      for (int p = 0; p < 3; ++p) {
        const kmpc::v1::Job& j = got[p][r].jobs(k);
        EXPECT_TRUE(j.data().empty());
        EXPECT_EQ(j.length(), msg.size());
        const contract::MessageShares m =
            contract::SliceMessageShares(got[p][r])[k];
        pairs[p] = {std::string(m.first), std::string(m.second)};
        s[p] = &pairs[p];
        // A VERIFY's shares carry the presented tag after the message.
        const size_t n = contract::SharedBytes(j.type(), msg.size());
        ASSERT_EQ(s[p]->first.size(), n);
        ASSERT_EQ(s[p]->second.size(), n);
        EXPECT_NE(s[p]->first.substr(0, msg.size()), msg);
        EXPECT_NE(s[p]->second.substr(0, msg.size()), msg);
        // Party p holds (s_p, s_{p+1}): consistent with its neighbour's.
        EXPECT_TRUE(seen.insert(s[p]->first).second) << r << " " << k;
        // Everything but the shares is the same for the three parties.
        EXPECT_EQ(j.SerializeAsString(),
                  got[0][r].jobs(k).SerializeAsString());
      }
      std::string d = s[0]->first;
      for (int p = 0; p < 3; ++p) {
        EXPECT_EQ(s[p]->second, s[(p + 1) % 3]->first);
        if (p > 0)
          for (size_t i = 0; i < d.size(); ++i) d[i] ^= s[p]->first[i];
      }
      if (got[0][r].jobs(k).type() == kmpc::v1::JOB_VERIFY_CHECKSUM)
        EXPECT_EQ(d, msg + sum.substr(16));  // D || t', dealt
      else
        EXPECT_EQ(d, msg);
    }
  }
  EXPECT_EQ(jobs, 3);
}

// The PA-REQ-ENC-PA-REP splice (kmpc.proto Job.splice_length): an aes*-cts
// reply ENCRYPT carrying the AS-REQ goes as one job whose shares are P
// then D, both dealt afresh (D is public, dealt all the same), with the
// splice's length and offset in the clear; no party sees a window of
// either in its request.
TEST_P(FakeBatcherTest, ASplicedReplyGoesAsSharesOfItsPlaintextThenTheRequest) {
  auto b = Make(BatcherOptions());
  const std::string plain =
      "EncASRepPart: session key 0123456789abcdef0123456789abcdef, cksum here.....";
  const std::string req = "AS-REQ as received: padata, req-body, nonce 4242, till, etypes";
  Job j;
  j.type = kmpc::v1::JOB_ENCRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256_CTS;
  j.key_id = kKeyId;
  j.usage = 3;
  j.input.assign(plain.begin(), plain.end());
  j.splice.assign(req.begin(), req.end());
  const std::string pad = contract::SplicePadding(req.size());  // as module.cc deals it
  j.splice.insert(j.splice.end(), pad.begin(), pad.end());
  j.splice_offset = 60;
  ASSERT_TRUE(b->dispatcher().Submit(1, std::move(j)).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  std::array<kmpc::v1::RunRequest, 3> got;
  for (int p = 0; p < 3; ++p) {
    const std::vector<std::string> sent = fake_.received(p);
    ASSERT_EQ(sent.size(), 1u) << p;
    const std::string& raw = sent[0];
    for (size_t at = 0; at + 8 <= plain.size(); at += 4)
      EXPECT_EQ(raw.find(plain.substr(at, 8)), std::string::npos) << p << " " << at;
    for (size_t at = 0; at + 8 <= req.size(); at += 4)
      EXPECT_EQ(raw.find(req.substr(at, 8)), std::string::npos) << p << " " << at;
    ASSERT_TRUE(got[p].ParseFromString(raw));
    ASSERT_EQ(got[p].jobs_size(), 1);
    const kmpc::v1::Job& k = got[p].jobs(0);
    EXPECT_TRUE(k.data().empty());
    EXPECT_EQ(k.length(), plain.size());
    EXPECT_EQ(k.splice_length(), req.size() + pad.size());
    EXPECT_EQ(k.splice_offset(), 60u);
    EXPECT_EQ(contract::SharedBytes(k), plain.size() + req.size() + pad.size());
  }
  std::array<std::pair<std::string, std::string>, 3> s;
  for (int p = 0; p < 3; ++p) {
    const contract::MessageShares m = contract::SliceMessageShares(got[p])[0];
    s[p] = {std::string(m.first), std::string(m.second)};
    ASSERT_EQ(s[p].first.size(), plain.size() + req.size() + pad.size());
  }
  std::string d = s[0].first;
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(s[p].second, s[(p + 1) % 3].first);
    if (p > 0)
      for (size_t i = 0; i < d.size(); ++i) d[i] ^= s[p].first[i];
  }
  EXPECT_EQ(d, plain + req + pad);  // P || D || its padding
}

// A ticket signed in the cluster (module.cc kmpc_core_submit_ticket):
// the ENCRYPT and a signing PAD of the krbtgt go in one Run, the ticket
// naming the PAD (kmpc.proto Job.sign_pad); its PAC goes as shares after
// the plaintext, as a splice's message.
TEST_P(FakeBatcherTest, ATicketSignedInTheClusterGoesWithItsKrbtgtPadInOneRun) {
  auto b = Make(BatcherOptions());
  const std::string plain(200, 'T');
  const std::string pac = "a PAC: client info, UPN, attributes, four signatures";
  Job j;
  j.type = kmpc::v1::JOB_ENCRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256_CTS;
  j.key_id = std::string(contract::kKeyIdSize, 's');
  j.usage = 2;
  j.input.assign(plain.begin(), plain.end());
  j.splice.assign(pac.begin(), pac.end());
  const std::string pad = contract::SplicePadding(pac.size());
  j.splice.insert(j.splice.end(), pad.begin(), pad.end());
  j.splice_offset = 100;
  j.sign_key_id = kKeyId;
  j.sign_cipher = kmpc::v1::CIPHER_AES256;
  ASSERT_TRUE(b->dispatcher().Submit(1, std::move(j)).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  for (int p = 0; p < 3; ++p) {
    const std::vector<std::string> sent = fake_.received(p);
    ASSERT_EQ(sent.size(), 1u) << p;
    for (size_t at = 0; at + 8 <= pac.size(); at += 4)
      EXPECT_EQ(sent[0].find(pac.substr(at, 8)), std::string::npos) << p << " " << at;
    kmpc::v1::RunRequest got;
    ASSERT_TRUE(got.ParseFromString(sent[0]));
    ASSERT_EQ(got.jobs_size(), 2) << p;
    const kmpc::v1::Job& t = got.jobs(0);
    const kmpc::v1::Job& k = got.jobs(1);
    EXPECT_EQ(t.type(), kmpc::v1::JOB_ENCRYPT);
    ASSERT_TRUE(t.has_sign_pad());
    EXPECT_EQ(t.sign_pad(), k.job_id());
    EXPECT_EQ(t.splice_length(), pac.size() + pad.size());
    EXPECT_EQ(t.splice_offset(), 100u);
    EXPECT_EQ(k.type(), kmpc::v1::JOB_PAD);
    EXPECT_EQ(k.key_id(), kKeyId);
    EXPECT_EQ(k.cipher(), kmpc::v1::CIPHER_AES256);
    EXPECT_EQ(k.usage(), contract::kTicketChecksumUsage);
    EXPECT_EQ(k.length(), contract::kSpliceBytes);
  }
}

// An aes*-cts DECRYPT (a PA-ENC-TIMESTAMP; under FAST the encrypted
// challenge, after the KDC's half): C || T, an offline password verifier
// whole, goes as fresh shares, its length in the clear, never Job.data
// (wire version 9); no party sees a window of it in its request.
TEST_P(FakeBatcherTest, AGateCiphertextGoesAsShares) {
  auto b = Make(BatcherOptions());
  const std::string ct = "conf-block-of-16PA-ENC-TS-ENC 20261126143000Z usec.. and its tag 12";
  const std::string half(32, 'X');
  for (const bool fast : {false, true}) {
    Job j;
    j.type = kmpc::v1::JOB_DECRYPT;
    j.cipher = kmpc::v1::CIPHER_AES256_CTS;
    j.key_id = kKeyId;
    j.usage = fast ? 54 : 1;
    j.input.assign(ct.begin(), ct.end());
    if (fast) {
      j.cts_key = kmpc::v1::CTS_KEY_CF2_AES256;
      j.cf2_half.assign(half.begin(), half.end());
    }
    ASSERT_TRUE(b->dispatcher().Submit(fast ? 3 : 2, std::move(j)).ok());
    ASSERT_TRUE(sink_.WaitFor(fast ? 2 : 1));
    std::array<kmpc::v1::RunRequest, 3> got;
    std::string v;
    for (int p = 0; p < 3; ++p) {
      const std::vector<std::string> sent = fake_.received(p);
      ASSERT_EQ(sent.size(), fast ? 2u : 1u) << p;
      for (size_t at = 0; at + 8 <= ct.size(); ++at)
        EXPECT_EQ(sent.back().find(ct.substr(at, 8)), std::string::npos) << p << " " << at;
      ASSERT_TRUE(got[p].ParseFromString(sent.back()));
      const kmpc::v1::Job& k = got[p].jobs(0);
      EXPECT_TRUE(k.data().empty());
      EXPECT_EQ(k.length(), ct.size());
      const contract::MessageShares m = contract::SliceMessageShares(got[p])[0];
      ASSERT_EQ(m.first.size(), (fast ? half.size() : 0) + ct.size());
      if (p == 0) v = std::string(m.first);
      else
        for (size_t i = 0; i < v.size(); ++i) v[i] ^= m.first[i];
    }
    EXPECT_EQ(v, (fast ? half : "") + ct);
  }
}

// Self-clocked batches by default: a lone job goes at once on an idle
// cluster, not after the window.
TEST_P(BatcherTest, LoneJobDoesNotWaitForTheWindowByDefault) {
  BatcherOptions o;
  EXPECT_TRUE(o.early_flush);
  o.window = absl::Seconds(30);  // would be unmistakable
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a lone ticket")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_LT(sink_.At(1) - t0, absl::Seconds(5));
  EXPECT_EQ(RunCalls(), 1);
}

TEST_P(BatcherTest, MalformedJobsAreRefusedAtSubmit) {
  auto b = Make({});
  Job j = Encrypt("x");
  j.key_id = "short";
  EXPECT_TRUE(absl::IsInvalidArgument(b->dispatcher().Submit(1, std::move(j))));
  SecureBytes tiny(31, 1);
  EXPECT_TRUE(absl::IsDataLoss(b->dispatcher().Submit(2, Decrypt(tiny))));
  SecureBytes zero_ctr(48, 0);  // ctr0 == 0 touches the all-zero block
  EXPECT_TRUE(absl::IsDataLoss(b->dispatcher().Submit(3, Decrypt(zero_ctr))));
  SecureBytes wrap(48, 0xff);  // ctr0 + 1 wraps past 2^128 - 1
  EXPECT_TRUE(absl::IsDataLoss(b->dispatcher().Submit(4, Decrypt(wrap))));
  Job v;
  v.type = kmpc::v1::JOB_VERIFY_CHECKSUM;
  v.cipher = kmpc::v1::CIPHER_AES256;  // kKey is 32 bytes
  v.key_id = kKeyId;
  v.checksum = std::string(31, 'c');
  EXPECT_TRUE(absl::IsDataLoss(b->dispatcher().Submit(5, std::move(v))));
  b->Stop();
  EXPECT_TRUE(sink_.counts().empty());
}

// A job that breaks the contract fails alone at the servers: the module
// never sends one (Submit refuses it, above), so the request is edited on
// its way (a key id of 31 bytes). The servers answer JOB_MALFORMED for it
// (kInvalidArgument here); the other jobs of the batch succeed.
TEST_P(BatcherTest, MalformedJobFailsAloneAtTheServers) {
  const std::string marked(32, 'm');
  cluster_.AddKey(marked, std::string(32, 'M'));
  EditingTransport edited(&cluster_, [&](kmpc::v1::RunRequest* r) {
    for (auto& j : *r->mutable_jobs())
      if (j.key_id() == marked) j.set_key_id(marked.substr(0, 31));
  });
  BatcherOptions o = WindowFlushed(absl::Milliseconds(20));
  Batcher b(o, &edited, &sink_);
  Job bad = Encrypt("x");
  bad.key_id = marked;
  const std::string pt = "the other job";
  ASSERT_TRUE(b.dispatcher().Submit(1, std::move(bad)).ok());
  ASSERT_TRUE(b.dispatcher().Submit(2, Encrypt(pt)).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  const Result r1 = sink_.Get(1);
  EXPECT_TRUE(absl::IsInvalidArgument(r1.status)) << r1.status;
  EXPECT_TRUE(absl::StrContains(r1.status.message(), "key id")) << r1.status;
  EXPECT_TRUE(r1.output.empty());
  const Result r2 = sink_.Get(2);
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  const std::string out = Str(r2.output);
  ASSERT_EQ(out.size(), pt.size() + 32);
  const std::string ctr0 = out.substr(0, 16), c = out.substr(16, pt.size());
  const std::string ks = cluster_.Keystream(kKey, ctr0, pt.size());
  for (size_t i = 0; i < pt.size(); ++i) EXPECT_EQ(c[i] ^ ks[i], pt[i]);
  EXPECT_EQ(out.substr(16 + pt.size()), cluster_.Tag(kKey, 2, ctr0, c, false));
  EXPECT_EQ(RunCalls(), 1);  // one batch, no re-run
}

TEST_P(BatcherTest, WindowCollectsJobsIntoOneBatch) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(400));
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("ticket")).ok());
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(sink_.WaitFor(5));
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(sink_.Get(i).status.ok());
    EXPECT_GE(sink_.At(i) - t0, absl::Milliseconds(395));
  }
  auto calls = cluster_.calls();
  ASSERT_EQ(RunCalls(), 1);
  EXPECT_EQ(calls[0].jobs, 5);
  // The window runs from the oldest job: flushed once, at ~400 ms.
  EXPECT_GE(calls[0].at - t0, absl::Milliseconds(395));
  EXPECT_LT(calls[0].at - t0, absl::Seconds(2));
  // Finalize is batched too: one call per server.
  int fin = 0;
  for (const auto& c : calls)
    if (c.method == "Finalize") {
      ++fin;
      EXPECT_EQ(c.jobs, 5);
    }
  EXPECT_EQ(fin, 3);
  EXPECT_EQ(b->stats().batches, 1u);
  EXPECT_EQ(b->stats().jobs, 5u);
}

// An aes*-cts ENCRYPT of an n-byte AS reply under a user's dealt key (the
// fake computes none: such a job fails alone, unknown key).
Job CtsReply(size_t n) {
  Job j;
  j.type = kmpc::v1::JOB_ENCRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256_CTS;
  j.key_id = std::string(contract::kKeyIdSize, 'u');
  j.usage = 3;
  j.input.assign(n, 'R');
  return j;
}

// A server keeps every aes*-cts program of a batch until it ends and fails
// a job whose new program would pass contract::kCtsBatchBytes (JOB_MALFORMED,
// the exchange lost). Users of varied name lengths make such batches: the
// dispatcher starts another batch instead; a length already in the batch
// counts once.
TEST_P(FakeBatcherTest, AesCtsProgramsOfOneBatchStayWithinTheServersBound) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(400));
  o.max_blocks = o.backlog_blocks = uint64_t{1} << 40;  // the bound alone cuts
  auto b = Make(o);
  const auto cts = CtsReply;
  // None deeper than deep_rounds (those go in batches of their own):
  // thirteen classes of 1,300 down to 1,108 bytes (15,989 bytes of
  // programs), 1,300 again, then 1,092 and 1,300.
  std::vector<size_t> lengths;
  for (size_t n = 1300; n >= 1108; n -= 16) lengths.push_back(n);
  for (size_t n : {1300, 1092, 1300}) lengths.push_back(n);
  uint64_t all = 0;
  std::set<contract::CtsShape> distinct;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Job j = cts(lengths[i]);
    const contract::CtsShape s = contract::CtsShapeOf(ShapeOf(j));
    if (distinct.insert(s).second) all += contract::CtsShapeBytes(s);
    ASSERT_LE(JobDepth(j), o.deep_rounds) << lengths[i];
    ASSERT_TRUE(b->dispatcher().Submit(i, std::move(j)).ok());
  }
  ASSERT_GT(all, contract::kCtsBatchBytes);  // one batch would fail a job
  // (The fake computes no aes*-cts job: each fails alone, unknown key.)
  ASSERT_TRUE(sink_.WaitFor(lengths.size(), absl::Seconds(5)));
  // In order: the thirteen classes and 1,300 again (one program) fit;
  // 1,092 would pass the bound, so it and the last 1,300 go in a second
  // batch.
  EXPECT_EQ(RunSizes(), (std::vector<int>{14, 2}));
  EXPECT_EQ(b->stats().cts_shape_cuts, 1u);
}

// Submits a job as the KDC's event loop does: the job, then SubmitterIdle
// (the callback that submitted it returned).
void SubmitThenIdle(Batcher* b, uint64_t token, Job j) {
  ASSERT_TRUE(b->dispatcher().Submit(token, std::move(j)).ok());
  b->dispatcher().SubmitterIdle();
}

// cts_window: behind a Run in flight, a queue of aes*-cts exchanges waits
// for no Run to be in flight (then early flush takes it at once), not for
// the 100 ms window: a second ~4,300-round Run for what arrived meanwhile
// would cost every server a Run's CPU. Another job queued behind them
// keeps its own window, from its own arrival, and takes them along; a
// deep Run in flight holds nothing back (deep_rounds). (The fake computes
// no aes*-cts job, each fails alone: only the batches are looked at.)
TEST_P(FakeBatcherTest, AesCtsExchangesWaitForTheRunInFlightOthersForTheWindow) {
  BatcherOptions o = SubmitterKicked(absl::Milliseconds(100));
  o.cts_window = absl::Seconds(30);  // unmistakable
  const auto cts = CtsReply;
  o.deep_rounds = JobDepth(cts(300));  // a 300-byte reply shares, 1,300 is deep
  ASSERT_GT(JobDepth(cts(1300)), o.deep_rounds);
  o.deadline = absl::Seconds(20);  // a Run and its Finalize take 1.5 s each
  cluster_.set_latency(absl::Milliseconds(1500));
  auto b = Make(o);
  auto submit = [&b](uint64_t token, Job j) { SubmitThenIdle(b.get(), token, std::move(j)); };
  submit(1, cts(300));  // Run 1, at once: nothing in flight
  EXPECT_EQ(RunCalls(), 1);
  submit(2, cts(300));
  // Job 2 waited for Run 1's end (1.5 s), not the 100 ms window, nor the
  // 30 s cts_window.
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(10)));
  std::vector<TestCluster::Call> runs = Runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_GE(runs[1].at - runs[0].at, absl::Milliseconds(1400));
  EXPECT_LT(runs[1].at - runs[0].at, absl::Seconds(10));
  WaitIdle(b.get());
  // Run 3 in flight; a cts job, 300 ms later a krbtgt-only one: the
  // latter's window (100 ms from its own arrival) sends both in Run 4,
  // Run 3 still in flight.
  submit(3, cts(300));
  WaitRunCalls(3);
  submit(4, cts(300));
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time t5 = absl::Now();
  submit(5, Encrypt("ticket"));
  WaitRunCalls(4);
  runs = Runs();
  EXPECT_GE(runs[3].at - t5, absl::Milliseconds(90));
  EXPECT_LT(runs[3].at - t5, absl::Milliseconds(800));  // Run 3 ends ~1.2 s after t5
  EXPECT_EQ(runs[3].jobs, 2);  // job 4 went along with job 5
  ASSERT_TRUE(sink_.WaitFor(5, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(5).status.ok()) << sink_.Get(5).status;
  WaitIdle(b.get());
  // A deep Run in flight (its own batch) holds no other login back: job 7
  // goes at its window, not at the deep Run's end.
  submit(6, cts(1300));
  WaitRunCalls(5);
  const absl::Time t7 = absl::Now();
  submit(7, cts(300));
  WaitRunCalls(6);
  runs = Runs();
  EXPECT_LT(runs[5].at - t7, absl::Milliseconds(1000));  // the deep Run: 1.5 s
  ASSERT_TRUE(sink_.WaitFor(7, absl::Seconds(10)));
}

// With the module's default options (cts_batch_window_ms unset: the hold
// is off) an aes*-cts exchange queued behind a Run in flight goes at the
// 100 ms window, in a second Run beside the first: a closed loop of
// clients completes more logins that way (docs/bench-log.md, the 20:12
// entry of 2026-11-27). Fails if the hold comes back on by default.
TEST_P(FakeBatcherTest, AesCtsExchangesGoAtTheWindowBehindARunByDefault) {
  auto parsed = ParseOptions({"servers = h:1,h:2,h:3", "certs=/c"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  BatcherOptions o = parsed->batcher;
  ASSERT_TRUE(o.early_flush);
  ASSERT_EQ(o.window, absl::Milliseconds(100));
  o.submitter_kicks = true;        // as the KDC's module sets it
  o.deadline = absl::Seconds(20);  // a Run and its Finalize take 1.5 s each
  cluster_.set_latency(absl::Milliseconds(1500));
  auto b = Make(o);
  auto submit = [&b](uint64_t token, Job j) { SubmitThenIdle(b.get(), token, std::move(j)); };
  ASSERT_LE(JobDepth(CtsReply(300)), o.deep_rounds);  // not deep work
  submit(1, CtsReply(300));  // Run 1, at once: nothing in flight
  WaitRunCalls(1);
  const absl::Time t2 = absl::Now();
  submit(2, CtsReply(300));
  WaitRunCalls(2);
  const std::vector<TestCluster::Call> runs = Runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_GE(runs[1].at - t2, absl::Milliseconds(90));   // its window
  EXPECT_LT(runs[1].at - t2, absl::Milliseconds(1000)); // not Run 1's end
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(10)));
}

TEST_P(BatcherTest, SizeLimitFlushesAtOnce) {
  BatcherOptions o = WindowFlushed(absl::Seconds(30));
  o.max_jobs = 4;
  o.backlog_jobs = 4;  // no bigger batches for a backlog (next test)
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(8, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  auto calls = cluster_.calls();
  EXPECT_EQ(calls[0].jobs, 4);
  // The ninth job waits for the window (30 s): not done yet.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(sink_.counts().size(), 8u);
  b->Stop();
  EXPECT_EQ(sink_.counts().size(), 8u);
}

// Jobs that piled up while a batch ran go out together, up to the backlog
// caps, not in batches of max_jobs; what is left below max_jobs waits for
// the window as usual.
TEST_P(BatcherTest, BacklogGoesOutInOneBiggerBatch) {
  BatcherOptions o = WindowFlushed(absl::Seconds(30));
  o.max_jobs = 4;
  o.backlog_jobs = 10;
  o.max_inflight = 1;
  cluster_.set_latency(absl::Milliseconds(150));
  auto b = Make(o);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("t")).ok());
  WaitRunCalls(1);  // batch 1 is in flight (150 ms)
  for (int i = 4; i < 22; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(22, absl::Seconds(5)));
  // 4; then 10 of the 18 that waited (the cap); then the other 8 at once
  // (still >= max_jobs): not in batches of 4, and nothing waits for 30 s.
  ASSERT_EQ(RunSizes(), (std::vector<int>{4, 10, 8}));
  for (int i = 0; i < 22; ++i) EXPECT_TRUE(sink_.Get(i).status.ok()) << i;
  // One batch at a time: each Run starts after the previous one's answer.
  const auto runs = Runs();
  for (size_t k = 1; k < runs.size(); ++k)
    EXPECT_GE(runs[k].at - runs[k - 1].at, absl::Milliseconds(145)) << k;
}

TEST_P(BatcherTest, BacklogBatchIsCappedByBlocks) {
  BatcherOptions o = WindowFlushed(absl::Seconds(30));
  o.max_jobs = 100;
  o.max_blocks = 4;      // each job: 1 keystream block + 1 = 2 blocks
  o.backlog_blocks = 6;
  o.max_inflight = 1;
  cluster_.set_latency(absl::Milliseconds(100));
  auto b = Make(o);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("t")).ok());
  WaitRunCalls(1);
  for (int i = 2; i < 9; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("t")).ok());
  ASSERT_TRUE(sink_.WaitFor(8, absl::Seconds(5)));
  const std::vector<int> sizes = RunSizes();
  ASSERT_GE(sizes.size(), 3u);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 3);  // 6 blocks
  EXPECT_EQ(sizes[2], 3);
}

TEST_P(BatcherTest, BlockLimitFlushesAtOnce) {
  BatcherOptions o = WindowFlushed(absl::Seconds(30));
  o.max_blocks = 20;  // each job: 8 keystream blocks + 1
  o.backlog_blocks = 20;
  auto b = Make(o);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt(std::string(128, 'a'))).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt(std::string(128, 'b'))).ok());
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt(std::string(128, 'c'))).ok());
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_EQ(cluster_.calls()[0].jobs, 2);
}

TEST_P(BatcherTest, EarlyFlushWhenIdleThenBatchesUnderLoad) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = true;
  o.coalesce = absl::Milliseconds(20);
  cluster_.set_latency(absl::Milliseconds(150));
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("b")).ok());  // back to back: same batch
  WaitRunCalls(1);  // batch 1 went out (after the 20 ms coalescing)
  // The servers are busy with batch 1 (150 ms): these wait, then go together.
  for (int i = 3; i < 7; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Decrypt(SecureBytes(40, 7))).ok());
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(5)));
  EXPECT_LT(sink_.At(1) - t0, absl::Seconds(1));  // not the 30 s window
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 4);
  // The second batch started only after the first was done.
  EXPECT_GE(sink_.At(3), sink_.At(1));
  for (int i = 3; i < 7; ++i) EXPECT_TRUE(absl::IsDataLoss(sink_.Get(i).status));
}

TEST_P(BatcherTest, SubmitterIdleFlushesAnIdleQueueWithoutTheCoalesceDelay) {
  BatcherOptions o;
  o.window = absl::Seconds(30);
  o.early_flush = true;
  o.coalesce = absl::Seconds(20);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("b")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(RunCalls(), 0);  // the coalesce delay holds them
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_LT(sink_.At(2) - t0, absl::Seconds(5));
  EXPECT_EQ(RunCalls(), 1);  // both in one batch
  // A kick with nothing queued changes nothing; the next jobs wait again.
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt("c")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(RunCalls(), 1);
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(5)));
  EXPECT_EQ(RunCalls(), 2);
}

TEST_P(BatcherTest, SubmitterIdleWithoutEarlyFlushKeepsTheWindow) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(300));
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a")).ok());
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_GE(sink_.At(1) - t0, absl::Milliseconds(290));
}

// submitter_kicks (the KDC module): Submit() leaves the queue to
// SubmitterIdle(), which starts an idle cluster's batch itself; under load
// the batch in flight still wakes the dispatcher for the next one.
TEST_P(BatcherTest, SubmitterKicksLeaveTheQueueToSubmitterIdle) {
  BatcherOptions o = SubmitterKicked(absl::Seconds(30));
  cluster_.set_latency(absl::Milliseconds(100));
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("b")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(RunCalls(), 0);
  b->dispatcher().SubmitterIdle();  // starts batch 1 (both jobs) on this thread
  EXPECT_EQ(RunCalls(), 1);
  // Behind batch 1: these go when it ends, not after 20 s.
  for (int i = 3; i < 6; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("c")).ok());
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(5, absl::Seconds(10)));
  EXPECT_LT(sink_.At(5) - t0, absl::Seconds(5));
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[1], 3);
}

// The thread each Run call to party 0 came from.
class ThreadRecordingTransport : public ForwardingTransport {
 public:
  explicit ThreadRecordingTransport(Transport* next) : ForwardingTransport(next) {}
  void Run(int party, const kmpc::v1::RunRequest& req, kmpc::v1::RunResponse* resp,
           absl::Time deadline, Done done) override {
    if (party == 0) {
      std::lock_guard<std::mutex> l(mu_);
      threads_.push_back(std::this_thread::get_id());
    }
    next_->Run(party, req, resp, deadline, std::move(done));
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> l(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::vector<std::thread::id> threads_;
};

// SubmitterIdle() starts a small queue on the submitter's thread (the KDC
// event loop), but leaves a backlog (more than 64 jobs) to the dispatcher
// thread: building and dealing it would stall the loop.
TEST_P(FakeBatcherTest, SubmitterIdleLeavesABacklogToTheDispatcher) {
  BatcherOptions o = SubmitterKicked(absl::Seconds(30));
  ThreadRecordingTransport t(&cluster_);
  auto b = std::make_unique<Batcher>(o, &t, &sink_);
  for (int i = 1; i <= 64; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("a")).ok());
  b->dispatcher().SubmitterIdle();
  ASSERT_EQ(t.threads().size(), 1u);  // started inline
  EXPECT_EQ(t.threads()[0], std::this_thread::get_id());
  ASSERT_TRUE(sink_.WaitFor(64, absl::Seconds(10)));
  for (int i = 101; i <= 165; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("b")).ok());
  b->dispatcher().SubmitterIdle();
  ASSERT_TRUE(sink_.WaitFor(129, absl::Seconds(10)));  // not after 20 s
  ASSERT_EQ(t.threads().size(), 2u);
  EXPECT_NE(t.threads()[1], std::this_thread::get_id());
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 64);
  EXPECT_EQ(sizes[1], 65);
  for (const auto& [token, n] : sink_.counts()) EXPECT_EQ(n, 1) << token;
}

// hold_pct: a queue waiting behind a batch waits after its end, up to the
// given share of that batch's latency, for as many jobs as it had; a lone
// job (nothing waiting at the end) goes at once, even while an earlier
// batch's hold would still run. SubmitterIdle starts a batch that may go
// on the calling thread, so "goes at once" is RunCalls() right after it,
// not a bound on wall-clock time; the hold (10x batch 1's latency, at
// least 1.5 s) is far longer than a wake-up on a loaded machine. A batch's
// jobs are delivered before its end is booked (inflight, the hold), so
// the test waits for that end before it goes on.
TEST_P(BatcherTest, HoldGathersTheNextBatchUnderLoadOnly) {
  BatcherOptions o = SubmitterKicked(absl::Seconds(30));
  o.hold_pct = 1000;
  cluster_.set_latency(absl::Milliseconds(150));
  auto b = Make(o);
  auto wait_ended = [&b] {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (b->stats().inflight > 0 && absl::Now() < until)
      absl::SleepFor(absl::Milliseconds(1));
    return b->stats().inflight == 0;
  };
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("a")).ok());
  b->dispatcher().SubmitterIdle();  // batch 1: three jobs
  ASSERT_TRUE(b->dispatcher().Submit(4, Encrypt("b")).ok());
  b->dispatcher().SubmitterIdle();  // waits behind batch 1
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(10)));
  ASSERT_TRUE(wait_ended());
  // Held: one job of three after batch 1's end; two more arrive within
  // the hold and go with it at once (the queue reached three).
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(RunCalls(), 1);
  ASSERT_TRUE(b->dispatcher().Submit(5, Encrypt("c")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(6, Encrypt("d")).ok());
  b->dispatcher().SubmitterIdle();
  EXPECT_EQ(RunCalls(), 2);
  ASSERT_TRUE(sink_.WaitFor(6, absl::Seconds(10)));
  ASSERT_TRUE(wait_ended());
  std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[1], 3);
  // Nothing waited at batch 2's end (and batch 1's hold, still running,
  // was used by batch 2): a lone job goes at once.
  ASSERT_TRUE(b->dispatcher().Submit(7, Encrypt("e")).ok());
  b->dispatcher().SubmitterIdle();
  EXPECT_EQ(RunCalls(), 3);
  ASSERT_TRUE(sink_.WaitFor(7, absl::Seconds(10)));
  sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_EQ(sizes[2], 1);
}

// hold_pct after a failed batch (fake only: a party that never answers):
// the batch ran to its deadline, which says nothing of the cluster's pace,
// so it sets no hold; at 1000% the job waiting behind it would otherwise
// wait ten deadlines (3 s) after its end.
TEST_P(FakeBatcherTest, FailedBatchSetsNoHold) {
  // Batch 1 is formed by SubmitterIdle (the KDC module's kick), not by a
  // coalesce that a preempted Submit loop could miss.
  BatcherOptions o = SubmitterKicked(absl::Seconds(30));
  o.deadline = absl::Milliseconds(300);
  o.hold_pct = 1000;
  fake_.set_hang(1, true);
  auto b = Make(o);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("a")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("b")).ok());
  b->dispatcher().SubmitterIdle();  // batch 1: jobs 1 and 2, started on this thread
  ASSERT_EQ(RunCalls(), 1);
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt("c")).ok());  // waits behind batch 1
  b->dispatcher().SubmitterIdle();
  // Party 0's call is not party 1's: the hang is read when party 1's call
  // arrives (FakeCluster::Answer), which on a loaded machine may be after
  // this thread saw party 0's. Unhung only once party 1 took batch 1's
  // call, which then stays unanswered.
  auto party1_runs = [&] {
    int n = 0;
    for (const auto& c : fake_.calls()) n += c.method == "Run" && c.party == 1;
    return n;
  };
  for (int i = 0; i < 5000 && party1_runs() == 0; ++i)
    absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(party1_runs(), 1);
  fake_.set_hang(1, false);
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  const absl::Time end1 = absl::Now();
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status)) << sink_.Get(1).status;
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(10)));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
  EXPECT_LT(sink_.At(3) - end1, absl::Seconds(1));
  EXPECT_EQ(b->stats().failed_batches, 1u);
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 2);  // a hold would wait for two jobs
}

// hold_pct never holds a queue longer than the window: at 5000% of a
// 200 ms batch the hold would be 10 s, the window caps it at 100 ms.
// Robust to a loaded machine: batch 1 is formed by SubmitterIdle (the KDC
// module's kick), not by a 50 ms coalesce that a preempted Submit loop
// could miss; batch 1's end is when its jobs were delivered, not when this
// thread woke up to see them; and capped (0.3 s) and uncapped (10.2 s)
// lie far apart, since thread wake-ups alone stretched the capped case to
// 1.4 s under stress-ng --cpu 4 beside two builds.
TEST_P(FakeBatcherTest, HoldIsCappedAtTheWindow) {
  BatcherOptions o = SubmitterKicked(absl::Milliseconds(100));
  o.hold_pct = 5000;
  o.max_inflight = 1;  // job 4 waits behind batch 1
  fake_.set_latency(absl::Milliseconds(200));
  auto b = Make(o);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("a")).ok());
  b->dispatcher().SubmitterIdle();  // batch 1: jobs 1 to 3, started on this thread
  ASSERT_EQ(RunCalls(), 1);
  ASSERT_TRUE(b->dispatcher().Submit(4, Encrypt("b")).ok());  // waits behind batch 1
  b->dispatcher().SubmitterIdle();  // the hold applies: batch 1 is in flight
  ASSERT_TRUE(sink_.WaitFor(4, absl::Seconds(20)));
  const absl::Time end1 = sink_.At(3);
  EXPECT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  // The hold (<= 100 ms) and the batch's own 200 ms, with slack for a
  // loaded machine; uncapped it is 10.2 s.
  EXPECT_GE(sink_.At(4) - end1, absl::Milliseconds(190));
  EXPECT_LT(sink_.At(4) - end1, absl::Seconds(5));
  const std::vector<int> sizes = RunSizes();
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], 3);
  EXPECT_EQ(sizes[1], 1);
}

// Fake only: the real servers have no hook for the fault (a party that never answers).
TEST_P(FakeBatcherTest, HangingServerFailsEveryJobAtTheDeadline) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  o.deadline = absl::Milliseconds(300);
  fake_.set_hang(1, true);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(3, absl::Seconds(5)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::IsUnavailable(sink_.Get(i).status)) << sink_.Get(i).status;
    EXPECT_GE(sink_.At(i) - t0, absl::Milliseconds(290));
    EXPECT_LT(sink_.At(i) - t0, absl::Seconds(2));
  }
  // The batcher keeps serving once the server is back.
  fake_.set_hang(1, false);
  ASSERT_TRUE(b->dispatcher().Submit(10, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(sink_.Get(10).status.ok());
  for (auto& [t, n] : sink_.counts()) EXPECT_EQ(n, 1) << "token " << t;
}

// Fake only: the real servers have no hook for the fault (a party that is down).
TEST_P(FakeBatcherTest, UnreachableServerFailsFast) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  o.deadline = absl::Seconds(20);
  fake_.set_down(2, true);
  auto b = Make(o);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status));
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "party 2"));
  fake_.set_down(2, false);
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(sink_.Get(2).status.ok());
}

// Reachable(party) fails for the parties marked down (a transport that
// knows a connection is lost).
class KnownDownTransport : public ForwardingTransport {
 public:
  explicit KnownDownTransport(Transport* next) : ForwardingTransport(next) {}
  void set_down(int party, bool down) { down_[party] = down; }
  absl::Status Reachable(int party) override {
    return down_[party] ? absl::UnavailableError("connection lost")
                        : absl::OkStatus();
  }

 private:
  std::array<std::atomic<bool>, 3> down_{};
};

// A party the transport knows is down fails the batch at once, and no
// server is sent anything (the two others would hold a batch that cannot
// run); once it is back, batches go again.
TEST_P(BatcherTest, KnownDownPartyFailsTheBatchWithoutSendingIt) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  o.deadline = absl::Seconds(20);
  KnownDownTransport t(&cluster_);
  t.set_down(1, true);
  auto b = std::make_unique<Batcher>(o, &t, &sink_);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status));
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "party 1"))
      << sink_.Get(1).status;
  EXPECT_TRUE(cluster_.calls().empty());
  t.set_down(1, false);
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
  b.reset();  // before t
}

// A server's typed refusal (an overloaded queue) fails the batch's jobs
// at once (SVC_UNAVAILABLE), naming the party and the refusal; nothing is
// re-run, and the next batch succeeds once the server accepts again.
// Fake only: the real servers have no hook for the fault (a server refusing every batch (an overloaded queue)).
TEST_P(FakeBatcherTest, TypedRefusalFailsTheBatchAtOnce) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  o.deadline = absl::Seconds(20);
  fake_.set_refuse(1, kmpc::v1::BATCH_OVERLOADED);
  auto b = Make(o);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Decrypt(SecureBytes(40, 7))).ok());
  ASSERT_TRUE(sink_.WaitFor(2, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  for (int t : {1, 2}) {
    const absl::Status& st = sink_.Get(t).status;
    EXPECT_TRUE(absl::IsUnavailable(st)) << st;
    EXPECT_TRUE(absl::StrContains(
        st.message(), "MPC party 1 (fake) refused the batch: BATCH_OVERLOADED"))
        << st;
  }
  EXPECT_EQ(RunCalls(), 1);
  fake_.set_refuse(1, kmpc::v1::BATCH_ERROR_UNSPECIFIED);
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
}

// Fake only: the real servers have no hook for the fault (a server sending a corrupt share copy).
TEST_P(FakeBatcherTest, ShareCopyDisagreementRejectsTheBatch) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  auto b = Make(o);
  // Warm up a ciphertext to decrypt.
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("the plaintext")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  SecureBytes ct = sink_.Get(1).output;
  fake_.set_corrupt(1, true);
  ASSERT_TRUE(b->dispatcher().Submit(2, Decrypt(ct)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt("other")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  for (int t : {2, 3}) {
    EXPECT_TRUE(absl::IsUnavailable(sink_.Get(t).status)) << sink_.Get(t).status;
    EXPECT_TRUE(sink_.Get(t).output.empty());
  }
  EXPECT_TRUE(sink_.Logged({"rejected", "party 1 (fake) and party 2 (fake) disagree"}))
      << ::testing::PrintToString(sink_.logs());
  // No plaintext in any log line.
  for (const auto& l : sink_.logs()) EXPECT_FALSE(absl::StrContains(l, "plaintext"));
  fake_.set_corrupt(1, false);
  ASSERT_TRUE(b->dispatcher().Submit(4, Decrypt(ct)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_EQ(Str(sink_.Get(4).output), "the plaintext");
}

// Fake only: the real servers have no hook for the fault (a server sending
// a corrupt tag share). A FINALIZE answer is one additive share per server
// (kmpc.proto FinalizeResponse.tags): nothing to compare it with, so the
// deviation makes that tag wrong and nothing more; the ciphertext then
// fails the cluster's own check, and the next encryption is right.
TEST_P(FakeBatcherTest, CorruptTagShareInFinalizeOnlyMakesThatTagWrong) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  fake_.set_corrupt_finalize(0, true);
  auto b = Make(o);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  ASSERT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  const SecureBytes bad = sink_.Get(1).output;
  fake_.set_corrupt_finalize(0, false);
  ASSERT_TRUE(b->dispatcher().Submit(2, Decrypt(bad)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(3, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(3));
  EXPECT_TRUE(absl::IsDataLoss(sink_.Get(2).status)) << sink_.Get(2).status;
  EXPECT_TRUE(sink_.Get(2).output.empty());
  ASSERT_TRUE(sink_.Get(3).status.ok()) << sink_.Get(3).status;
  ASSERT_TRUE(b->dispatcher().Submit(4, Decrypt(sink_.Get(3).output)).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_EQ(Str(sink_.Get(4).output), "y");
}

// Fake only: a server of KeyOps wire version 1 (kmpc.proto, "Shares travel
// flat") among the three. The module does not read its answer as shares:
// the job fails (kUnavailable) with both versions named, in its status and
// in the log, and nothing is finalized.
TEST_P(FakeBatcherTest, AServerOfAnotherWireVersionFailsTheBatchByName) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  fake_.set_old_wire(2, true);
  auto b = Make(o);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  const absl::Status st = sink_.Get(1).status;
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "wire version 0")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "upgraded together")) << st;
  for (const auto& c : fake_.calls()) EXPECT_NE(c.method, "Finalize");
  EXPECT_TRUE(sink_.Logged({"party 2 (fake) speaks KeyOps wire version 0"}))
      << ::testing::PrintToString(sink_.logs());
  // The same cluster at the current version: the job goes through.
  fake_.set_old_wire(2, false);
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
}

// Fake only: the real servers have no hook for the fault (a cluster answering with ctr0 = 0).
TEST_P(FakeBatcherTest, InvalidCounterFromTheClusterIsRejected) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  fake_.set_zero_ctr0(true);
  auto b = Make(o);
  ASSERT_TRUE(b->dispatcher().Submit(1, Encrypt("x")).ok());
  ASSERT_TRUE(sink_.WaitFor(1));
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(1).status)) << sink_.Get(1).status;
  // Nothing was finalized: no tag exists for that counter.
  for (const auto& c : fake_.calls()) EXPECT_NE(c.method, "Finalize");
}

TEST_P(BatcherTest, UnknownKeyFailsOnlyItsJobs) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(20));
  auto b = Make(o);
  Job j = Encrypt("x");
  j.key_id = std::string(32, 'u');
  ASSERT_TRUE(b->dispatcher().Submit(1, std::move(j)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(sink_.WaitFor(2));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(1).status)) << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
}

// The servers fail a job whose key is missing or inconsistent on some of
// them per job (JobResult.status JOB_UNKNOWN_KEY / JOB_KEY_INCONSISTENT):
// only those jobs fail, in the same
// single Run, NOT_FOUND for a missing key, UNAVAILABLE for inconsistent
// shares; the others complete.
TEST_P(BatcherTest, PerJobKeyErrorsFailOnlyThoseJobs) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(20));
  const std::string bad(32, 'b');
  cluster_.AddInconsistentKey(bad);
  auto b = Make(o);
  Job unknown = Encrypt("x");
  unknown.key_id = std::string(32, 'u');
  Job stale = Encrypt("z");
  stale.key_id = bad;
  ASSERT_TRUE(b->dispatcher().Submit(1, std::move(unknown)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, Encrypt("y")).ok());
  ASSERT_TRUE(b->dispatcher().Submit(3, std::move(stale)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(4, Encrypt("w")).ok());
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(absl::IsNotFound(sink_.Get(1).status)) << sink_.Get(1).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(1).status.message(), "no shares"))
      << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(2).status.ok()) << sink_.Get(2).status;
  EXPECT_TRUE(absl::IsUnavailable(sink_.Get(3).status)) << sink_.Get(3).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(3).status.message(), "inconsistent"))
      << sink_.Get(3).status;
  EXPECT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  int runs = 0;
  for (const auto& c : cluster_.calls()) runs += c.method == "Run";
  EXPECT_EQ(runs, 3);  // one batch, one Run per party, no re-run
}

// kmpc.proto Job.cipher: the job carries the KDC's enctype and the cluster
// refuses a key id dealt for the other one, per job (JOB_WRONG_CIPHER ->
// kPermissionDenied, which the module maps to KRB5_BAD_ENCTYPE); the other
// jobs of the same Run complete. A job without a cipher never leaves the
// KDC (contract::CheckJob: kInvalidArgument at submit).
TEST_P(BatcherTest, WrongCipherFailsOnlyThatJob) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(20));
  const std::string id128(32, 'a');
  cluster_.AddKey(id128, std::string(16, 'A'));
  auto b = Make(o);
  Job as256 = Encrypt("x");  // kKey, AES-256: right
  Job wrong256 = Encrypt("y");
  wrong256.key_id = id128;  // dealt AES-128, named AES-256
  Job wrong128 = Encrypt("z");
  wrong128.cipher = kmpc::v1::CIPHER_AES128;  // kKey is AES-256
  Job as128 = Encrypt("w");
  as128.key_id = id128;
  as128.cipher = kmpc::v1::CIPHER_AES128;
  ASSERT_TRUE(b->dispatcher().Submit(1, std::move(as256)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(2, std::move(wrong256)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(3, std::move(wrong128)).ok());
  ASSERT_TRUE(b->dispatcher().Submit(4, std::move(as128)).ok());
  Job none = Encrypt("v");
  none.cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  absl::Status refused = b->dispatcher().Submit(5, std::move(none));
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "cipher")) << refused;
  ASSERT_TRUE(sink_.WaitFor(4));
  EXPECT_TRUE(sink_.Get(1).status.ok()) << sink_.Get(1).status;
  EXPECT_TRUE(sink_.Get(4).status.ok()) << sink_.Get(4).status;
  for (uint64_t t : {2, 3}) {
    const absl::Status& st = sink_.Get(t).status;
    EXPECT_TRUE(absl::IsPermissionDenied(st)) << t << ": " << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "another enctype")) << st;
    EXPECT_TRUE(sink_.Get(t).output.empty()) << t;
    EXPECT_STREQ(KdcMetrics::CauseOf(st), "wrong_cipher");
  }
  EXPECT_TRUE(absl::StrContains(sink_.Get(2).status.message(), "dealt for AES128"))
      << sink_.Get(2).status;
  EXPECT_TRUE(absl::StrContains(sink_.Get(3).status.message(), "dealt for AES256"))
      << sink_.Get(3).status;
  // The right ones are the right enctype's ciphertexts.
  const SecureBytes& ct = sink_.Get(4).output;
  ASSERT_GE(ct.size(), 32u + 1);
  const std::string ctr0(ct.begin(), ct.begin() + 16);
  EXPECT_EQ(static_cast<char>(ct[16] ^ cluster_.Keystream(std::string(16, 'A'), ctr0, 1)[0]), 'w');
  int runs = 0;
  for (const auto& c : cluster_.calls()) runs += c.method == "Run";
  EXPECT_EQ(runs, 3);  // one batch, one Run per party, no re-run
}

// Fake only: the real servers have no hook for the fault (parties hanging, down and corrupt in turn).
TEST_P(FakeBatcherTest, EveryJobCompletesExactlyOnceUnderChaos) {
  BatcherOptions o;
  o.window = absl::Milliseconds(3);
  o.max_jobs = 7;
  o.deadline = absl::Milliseconds(200);
  o.early_flush = true;
  o.max_inflight = 3;
  fake_.set_latency(absl::Milliseconds(2));
  auto b = Make(o);
  const int n = 600;
  for (int i = 0; i < n; ++i) {
    if (i == 150) fake_.set_hang(0, true);
    if (i == 250) fake_.set_hang(0, false);
    if (i == 300) fake_.set_down(1, true);
    if (i == 350) fake_.set_down(1, false);
    if (i == 400) fake_.set_corrupt(2, true);
    if (i == 450) fake_.set_corrupt(2, false);
    ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt(std::string(1 + i % 70, 'p'))).ok());
    if (i % 10 == 0) absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(sink_.WaitFor(n, absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(300));  // late callbacks must not count
  auto counts = sink_.counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(n));
  int ok = 0;
  for (auto& [t, c] : counts) {
    EXPECT_EQ(c, 1) << "token " << t;
    ok += sink_.Get(t).status.ok();
  }
  EXPECT_GT(ok, n / 3);
}

TEST_P(BatcherTest, FullQueueRefusesJobs) {
  BatcherOptions o = WindowFlushed(absl::Seconds(30));
  o.max_queue = 3;
  auto b = Make(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("x")).ok());
  EXPECT_TRUE(absl::IsUnavailable(b->dispatcher().Submit(3, Encrypt("x"))));
}

TEST_P(BatcherTest, StopAbandonsPendingJobsAndNothingArrivesAfter) {
  BatcherOptions o = WindowFlushed(absl::Milliseconds(5));
  cluster_.set_latency(absl::Milliseconds(200));
  auto b = Make(o);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b->dispatcher().Submit(i, Encrypt("x")).ok());
  absl::SleepFor(absl::Milliseconds(50));  // in flight
  b->Stop();
  size_t at_stop = sink_.counts().size();
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(sink_.counts().size(), at_stop);
  EXPECT_FALSE(b->dispatcher().Submit(99, Encrypt("x")).ok());
}

}  // namespace
}  // namespace kmpc::kdc
