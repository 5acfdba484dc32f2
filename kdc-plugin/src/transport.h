// How the batcher reaches the three MPC servers: one unary call per server
// per step. The gRPC implementation (grpc_transport.h) uses mTLS channels;
// tests use a fake that computes in one process.
#ifndef KMPC_KDC_PLUGIN_TRANSPORT_H_
#define KMPC_KDC_PLUGIN_TRANSPORT_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

// The outcome of one call. Either OK; or the server refused the whole
// batch (`refusal` is the BatchErrorCode it sent, kmpc.proto BatchError;
// `status` is kAborted with "BATCH_...: detail"); or the call failed
// without a server's answer (refusal BATCH_ERROR_UNSPECIFIED; `status` is
// kUnavailable, kDeadlineExceeded, kCancelled when the transport shuts
// down, or kPermissionDenied for a server that is not the party of its
// position).
struct CallStatus {
  absl::Status status;
  kmpc::v1::BatchErrorCode refusal = kmpc::v1::BATCH_ERROR_UNSPECIFIED;

  CallStatus() = default;
  CallStatus(absl::Status s) : status(std::move(s)) {}  // NOLINT: failures
  static CallStatus Refused(const kmpc::v1::BatchError& e);

  bool ok() const { return status.ok(); }
  bool refused() const { return refusal != kmpc::v1::BATCH_ERROR_UNSPECIFIED; }
};

// A job that failed because a server of its cluster refused the batch
// with BATCH_INTEGRITY_CHECK_FAILED: its malicious check found that a
// server of that cluster deviated from the protocol. The job's status is
// kUnavailable (KDC_ERR_SVC_UNAVAILABLE, never counted by lockout) and
// carries kDeviationPayload: the router never sends that job to that
// cluster again (router.h), another cluster may run it.
inline constexpr char kDeviationPayload[] = "kmpc.kdc/deviation";
absl::Status MarkDeviation(absl::Status st);
bool IsDeviation(const absl::Status& st);

class Transport {
 public:
  using Done = std::function<void(CallStatus)>;
  virtual ~Transport() = default;

  // Sends req to party (0, 1, 2) and fills *resp. req and resp must stay
  // valid until done runs. done runs exactly once, on any thread, possibly
  // before Run returns; a call not answered by deadline fails with
  // kDeadlineExceeded, an unreachable party with kUnavailable.
  virtual void Run(int party, const kmpc::v1::RunRequest& req,
                   kmpc::v1::RunResponse* resp, absl::Time deadline,
                   Done done) = 0;
  virtual void Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                        kmpc::v1::FinalizeResponse* resp, absl::Time deadline,
                        Done done) = 0;
  // KeyOps.Sign: ring-free, each server answers alone (kmpc.proto
  // SignItem). The default fails at once with kUnimplemented: the batcher
  // then runs the checksum as an ordinary Run job.
  virtual void Sign(int party, const kmpc::v1::SignRequest& req,
                    kmpc::v1::SignResponse* resp, absl::Time deadline,
                    Done done) {
    (void)party, (void)req, (void)resp, (void)deadline;
    done(CallStatus(absl::UnimplementedError("no KeyOps.Sign here")));
  }

  // OK unless `party` is known to be unreachable right now (a connection it
  // had failed and has not come back). A step then fails at once without
  // sending its calls: the other two parties would only hold a batch that
  // cannot run, until its deadline, and ask a restarted server about it.
  // Must not block. The default never knows.
  virtual absl::Status Reachable(int party) {
    (void)party;
    return absl::OkStatus();
  }

  // "party 1 (127.0.0.1:5001)": for log lines.
  virtual std::string PartyName(int party) const = 0;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_TRANSPORT_H_
