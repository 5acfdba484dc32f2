// A fake MPC cluster for the batcher tests: computes in one process what
// the three servers compute together, and hands each "party" its view of
// every revealed value as replicated XOR shares (s_p, s_{p+1}). The
// "cipher" is HMAC-SHA256 based, not AES: these tests are about batching,
// share handling and error paths; the real constructions are tested against
// the real servers (integration-tests/test_kdc_plugin.py).
//
// Its contract is the real servers': a job that breaks proto/contract.h
// (contract::CheckJob) or whose key is unknown or inconsistent fails alone
// (JobStatus, with a detail); whole-batch refusals are typed
// (CallStatus::Refused with a BatchErrorCode, as the gRPC transport makes
// of BatchErrorStatus): a malformed batch, one over kMaxBatchBlocks, a
// FINALIZE of no awaiting ENCRYPT state (BATCH_UNKNOWN_ENCRYPT).
// fake_conformance_test.cc sends the same requests to this fake and to the
// real servers' code (real_cluster.h) and compares the answers.
#ifndef KMPC_KDC_PLUGIN_TEST_FAKE_CLUSTER_H_
#define KMPC_KDC_PLUGIN_TEST_FAKE_CLUSTER_H_

#include <array>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_cluster.h"
#include "transport.h"

namespace kmpc::kdc::testing {

// One party's two replicated shares of a value: (s_p, s_{p+1}).
using SharePair = std::pair<std::string, std::string>;

class FakeCluster : public TestCluster {
 public:
  FakeCluster();
  ~FakeCluster() override;

  void AddKey(const std::string& key_id, const std::string& key) override;

  // Behaviour, changeable at any time.
  void set_latency(absl::Duration d) override;
  void set_down(int party, bool down);     // answers kUnavailable at once
  void set_hang(int party, bool hang);     // never answers
  void set_corrupt(int party, bool bad);   // flips a bit of its 2nd share copy
  void set_corrupt_finalize(int party, bool bad);  // the same, Finalize only
  void set_zero_ctr0(bool zero);  // ENCRYPT answers with ctr0 = 0 (invalid)
  // Answers as a server of KeyOps wire version 1 would, to the module:
  // wire_version unset and none of the flat buffers (kmpc.proto).
  void set_old_wire(int party, bool old);
  // Sign answers of `party` carry `extra` more bytes of tag shares than
  // one per JOB_OK result (negative: fewer), as a faulty server's would.
  void set_tag_shares_extra(int party, int extra);
  // `party` XORs `error` (16 bytes; empty: none) into its tag share of
  // every signing item (sign) or verify item (!sign) it answers JOB_OK, as
  // a deviating server can: the tag is then off by `error`, or a verify
  // item's answers refuse a tag that holds.
  void set_tag_share_error(int party, bool sign, std::string error);
  // Likewise into its share of a chained item's second tag (SignItem.chain).
  void set_chain_tag_share_error(int party, std::string error);
  // Every failed Run job's detail becomes `detail` (empty: the fake's
  // own), as a deviating server may write anything there.
  void set_failure_detail(std::string detail);
  // Refuses every Run and Finalize with this typed BatchError
  // (BATCH_ERROR_UNSPECIFIED: no refusal), as an overloaded server does.
  void set_refuse(int party, kmpc::v1::BatchErrorCode code);

  // TestCluster. ForgetEncryptStates(party): as the real servers, that
  // party's FINALIZE of any of the forgotten states fails with
  // BATCH_UNKNOWN_ENCRYPT, the other parties' with BATCH_RING_UNAVAILABLE
  // (the party is missing on the ring), and theirs are used up.
  void AddInconsistentKey(const std::string& key_id) override;
  void ForgetEncryptStates() override;
  void ForgetEncryptStates(int party) override;
  void DelayNextFinalize(int party, absl::Duration d) override;
  // Every Run call answers `d` later than set_latency says.
  void set_run_delay(absl::Duration d) override;
  int finalize_answers() override;
  std::vector<Call> calls() override;
  // Every Run request `party` received, serialized, oldest first: what
  // that server saw of the KDC's data.
  std::vector<std::string> received(int party);

  void Run(int party, const kmpc::v1::RunRequest& req,
           kmpc::v1::RunResponse* resp, absl::Time deadline,
           Done done) override;
  void Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                kmpc::v1::FinalizeResponse* resp, absl::Time deadline,
                Done done) override;
  // As the servers (kmpc.proto SignItem): each party answers for its own
  // pads (unknown or used by it: JOB_PAD_UNAVAILABLE; usage or length
  // that do not fit: JOB_MALFORMED, pad kept; a data_shares buffer of the
  // wrong total size: BATCH_MALFORMED) with an additive
  // share of the tag; the three XOR to the checksum tag over the message,
  // which the fake reconstructs from two parties' shares (so it answers
  // once two parties have asked).
  void Sign(int party, const kmpc::v1::SignRequest& req,
            kmpc::v1::SignResponse* resp, absl::Time deadline,
            Done done) override;
  std::string PartyName(int party) const override;
  // Every server forgets its pads (a restart, or their TTL passed), or
  // only `party`'s.
  void ForgetPads();
  void ForgetPads(int party);
  // Every Sign request `party` received, serialized, oldest first.
  std::vector<std::string> received_signs(int party);

  // The fake's constructions: HMAC-SHA256 based (fake_cluster.cc).
  std::string Keystream(const std::string& key, const std::string& ctr0,
                        size_t len) const override;
  std::string Tag(const std::string& key, uint32_t usage,
                  const std::string& ctr0, const std::string& data,
                  bool checksum) const override;

 private:
  void Later(absl::Duration d, std::function<void()> f);
  void Loop();
  // req: any party's request (their public fields are the same); the
  // messages of CHECKSUM and VERIFY_CHECKSUM jobs are reconstructed from
  // the shares of the parties recorded in shared_[batch id].
  CallStatus ComputeRun(const kmpc::v1::RunRequest& req,
                        std::array<kmpc::v1::RunResponse, 3>* out);
  // The message of request job k, from the parties' shares; nullopt if
  // fewer than two parties' shares are known or their copies disagree.
  std::optional<std::string> Message(const std::string& batch_id, int k);
  CallStatus ComputeSign(const kmpc::v1::SignRequest& req,
                         std::array<kmpc::v1::SignResponse, 3>* out);
  CallStatus ComputeFinalize(const kmpc::v1::FinalizeRequest& req,
                               std::array<kmpc::v1::FinalizeResponse, 3>* out);

  // One batch's outcome, computed once for all three parties.
  template <typename Resp>
  struct Batch {
    bool computed = false;
    int arrived = 0;
    struct Waiting {
      int party;
      Resp* resp;
      Done done;
    };
    std::vector<Waiting> waiting;  // calls answered once it is computed
    CallStatus status;
    std::array<Resp, 3> resp;
  };
  // What Run and Finalize share: record the call; a hung party never
  // answers, a down one fails at once; otherwise the batch's outcome is
  // computed once `need` parties have called (compute; 2 for a Run with
  // a message dealt as shares: one party's two shares do not determine
  // it) and each party's response, passed through tamper(party, resp), is
  // answered after the latency. compute and tamper run under mu_.
  template <typename Resp>
  void Answer(const char* method, int party, int items, const std::string& id,
              int need, std::map<std::string, Batch<Resp>>* batches,
              const std::function<CallStatus(std::array<Resp, 3>*)>& compute,
              const std::function<void(int, Resp*)>& tamper, Resp* resp,
              Done done);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::multimap<absl::Time, std::function<void()>> timers_;
  std::thread thread_;

  std::map<std::string, std::string> keys_;
  absl::Duration latency_ = absl::Milliseconds(5);
  std::array<bool, 3> down_{}, hang_{}, corrupt_{}, corrupt_fin_{};
  std::array<std::set<std::pair<std::string, uint64_t>>, 3> forgotten_;
  std::array<absl::Duration, 3> next_fin_delay_{};
  std::atomic<int> fin_answers_{0};
  bool zero_ctr0_ = false;
  std::array<bool, 3> old_wire_{};
  std::array<int, 3> tag_extra_{};
  std::array<std::string, 3> sign_error_, verify_error_, chain_error_;
  std::string detail_;
  std::array<kmpc::v1::BatchErrorCode, 3> refuse_{};
  absl::Duration run_delay_;
  std::set<std::string> inconsistent_;
  std::vector<Call> calls_;
  // Every party's Run requests as received (serialized), in order.
  std::array<std::vector<std::string>, 3> received_;
  // Per Run batch id (or Sign request id) with dealt messages: each
  // party's shares by job (or item) index (party -> job -> pair).
  std::map<std::string,
           std::map<int, std::map<int, SharePair>>> shared_;
  std::map<std::string, Batch<kmpc::v1::RunResponse>> runs_;
  struct EncState {
    std::string key, ctr0;
    uint32_t usage;
    uint32_t length;
  };
  std::map<std::pair<std::string, uint64_t>, EncState> enc_;
  struct PadState {
    std::string key, ctr0;
    uint32_t usage;
    uint32_t length;
    std::array<bool, 3> gone{};  // used or forgotten, per party
    bool verify = false;  // a verification pad (a PAD with a counter)
  };
  std::map<std::pair<std::string, uint64_t>, PadState> pads_;
  std::array<std::vector<std::string>, 3> received_signs_;
  std::map<std::string, Batch<kmpc::v1::SignResponse>> signs_;
  std::map<std::string, Batch<kmpc::v1::FinalizeResponse>> fins_;
};

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_PLUGIN_TEST_FAKE_CLUSTER_H_
