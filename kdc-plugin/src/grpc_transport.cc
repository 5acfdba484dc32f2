#include "grpc_transport.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "batch_error.h"
#include "client/channels.h"

namespace kmpc::kdc {
namespace {

// A server's typed refusal (BatchError in the details) as it is; every
// other failure is the transport's, as the cluster's channels read it
// (ClusterChannels::Classify): kUnavailable, except a deadline, a
// cancellation and a server of another party (kPermissionDenied: the
// certificate check refused it; the request was not sent).
CallStatus FromGrpc(const kmpc::client::ClusterChannels& cluster, int party,
                    const grpc::Status& s) {
  if (s.ok()) return CallStatus();
  if (auto e = contract::BatchErrorOf(s)) return CallStatus::Refused(*e);
  const std::string& msg = s.error_message();
  switch (cluster.Classify(party, s)) {
    case kmpc::client::RpcFailure::kNone:
      return CallStatus();
    case kmpc::client::RpcFailure::kDeadlineExceeded:
      return absl::DeadlineExceededError(msg);
    case kmpc::client::RpcFailure::kCancelled:
      return absl::CancelledError(msg);
    case kmpc::client::RpcFailure::kWrongParty:
      return cluster.WrongPartyError(party, s);
    case kmpc::client::RpcFailure::kTlsHandshake:
    case kmpc::client::RpcFailure::kClosedInHandshake:
    case kmpc::client::RpcFailure::kUnreachable:
      return absl::UnavailableError(msg);
    case kmpc::client::RpcFailure::kPermissionDenied:
    case kmpc::client::RpcFailure::kUnauthenticated:
    case kmpc::client::RpcFailure::kServerError:
      break;
  }
  return absl::UnavailableError(absl::StrCat(
      "gRPC status ", static_cast<int>(s.error_code()), ": ", msg));
}

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

// A gRPC thread must never see an exception (it would end the KDC); a job
// whose completion was lost that way fails at the batch deadline instead.
void Invoke(const Transport::Done& done, CallStatus s) {
  try {
    done(std::move(s));
  } catch (...) {
  }
}

// A call in flight on the completion queue: its tag. Finish's tag comes
// back exactly once (ok is always true for a unary call's Finish).
struct PendingCall {
  virtual ~PendingCall() = default;
  grpc::Status status;
  std::function<void(grpc::Status)> cb;
};
template <class Resp>
struct PendingCallOf : PendingCall {
  std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
};

// Starts prepare(ctx, cq)'s call and has its answer go to cb on the
// completion-queue thread.
template <class Resp, class Prepare>
void StartOnQueue(grpc::ClientContext* ctx, grpc::CompletionQueue* cq, Resp* resp,
                  std::function<void(grpc::Status)> cb, Prepare prepare) {
  auto* call = new PendingCallOf<Resp>;
  call->cb = std::move(cb);
  call->reader = prepare(ctx, cq);
  call->reader->StartCall();
  call->reader->Finish(resp, &call->status, static_cast<PendingCall*>(call));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    const std::array<std::string, 3>& servers, const std::string& ca,
    const std::string& cert, const std::string& key) {
  kmpc::client::ChannelOptions opts;  // DefaultChannelArguments(): 256 MiB
  grpc::ChannelArguments& args = opts.args;
  // A restarted server must be serving again well within a second of its
  // start (integration-tests/test_recovery.py asserts it under a storm),
  // not after gRPC's default exponential backoff (up to two minutes): while a party is down nothing is sent to it (Reachable),
  // so only these background attempts notice it is back. Attempts at most
  // every 250 ms (+-20% jitter, gRPC's doc/connection-backoff.md) cost a
  // refused TCP connect each. The "min reconnect backoff" is the timeout of
  // one connection attempt (TCP + TLS handshake), not a backoff, so it
  // stays generous for a loaded machine.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  // Detect a dead peer on an idle connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // No connecting here (opts.connect_wait 0): the first call connects (a
  // TCP and TLS handshake, about a millisecond on loopback). gRPC 1.51
  // handles a socket's events only while some thread polls (here the
  // completion-queue thread; without one only the client channel's backup
  // poller, every 5 s, and an attempt stalled until the connect timeout
  // above cut it, leaving the channel in TRANSIENT_FAILURE).
  //
  // Party identity: the channel to the server at position i accepts only
  // party i's certificate (client/channels.h), checked in the TLS
  // handshake before any request is sent; the shared SANs (127.0.0.1,
  // localhost) are on all three certificates and would let any party
  // stand in for another (and collect the other parties' messages).
  kmpc::client::ClusterConfig cfg;
  cfg.servers = servers;
  cfg.ca = ca;
  cfg.cert = cert;
  cfg.key = key;
  auto channels = kmpc::client::ClusterChannels::Open(cfg, opts);
  if (!channels.ok()) return channels.status();

  std::unique_ptr<GrpcTransport> t(new GrpcTransport());
  t->cluster_ =
      std::make_unique<kmpc::client::ClusterChannels>(*std::move(channels));
  for (int i = 0; i < 3; ++i) {
    t->servers_[i] = servers[i];
    t->channels_[i] = t->cluster_->channel(i);
    t->stubs_[i] = kmpc::v1::KeyOps::NewStub(t->channels_[i]);
  }
  // The thread in Next() also polls the channels' sockets (gRPC 1.51 reads
  // a socket only while some thread polls), from now on.
  t->cq_ = std::make_unique<grpc::CompletionQueue>();
  t->cq_thread_ = std::thread([raw = t.get()] { raw->Poll(); });
  return t;
}

GrpcTransport::~GrpcTransport() {
  Shutdown();
  if (cq_ != nullptr) {
    // Every call has completed and its context is gone (Shutdown): the
    // queue drains at once.
    cq_->Shutdown();
    if (cq_thread_.joinable()) cq_thread_.join();
  }
}

void GrpcTransport::Poll() {
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) {
    std::unique_ptr<PendingCall> call(static_cast<PendingCall*>(tag));
    // The callback may start another call (RetryFirstConnect's attempt).
    call->cb(std::move(call->status));
  }
}

std::string GrpcTransport::PartyName(int party) const {
  if (party < 0 || party > 2) return absl::StrCat("party ", party);
  return absl::StrCat("party ", party, " (", servers_[party], ")");
}

std::shared_ptr<grpc::ClientContext> GrpcTransport::NewContext() {
  auto* c = new grpc::ClientContext;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++contexts_;
  }
  // (Should the shared_ptr's allocation throw, it deletes c through this.)
  return std::shared_ptr<grpc::ClientContext>(c, [this](grpc::ClientContext* c) {
    delete c;
    std::lock_guard<std::mutex> l(mu_);
    --contexts_;
    cv_.notify_all();
  });
}

bool GrpcTransport::Begin(const std::shared_ptr<grpc::ClientContext>& ctx) {
  std::lock_guard<std::mutex> l(mu_);
  if (shutdown_) return false;
  calls_.insert(ctx);
  return true;
}

void GrpcTransport::End(const std::shared_ptr<grpc::ClientContext>& ctx) {
  // The caller still holds ctx: its deleter (which takes mu_) cannot run
  // here.
  std::lock_guard<std::mutex> l(mu_);
  calls_.erase(ctx);
  cv_.notify_all();
}

absl::Status GrpcTransport::Reachable(int party) {
  if (party < 0 || party > 2 ||
      !connected_[party].load(std::memory_order_relaxed))
    return absl::OkStatus();  // never connected: the first-connect grace
  // try_to_connect: an IDLE channel (a connection lost, no call since)
  // starts connecting now, so that it is READY again as soon as it can be.
  if (channels_[party]->GetState(/*try_to_connect=*/true) !=
      GRPC_CHANNEL_TRANSIENT_FAILURE)
    return absl::OkStatus();
  return absl::UnavailableError(
      "no connection (lost; gRPC reconnects in the background)");
}

void GrpcTransport::NoteConnected(int party, const absl::Status& s) {
  if (connected_[party].load(std::memory_order_relaxed)) return;
  // An answer from the server, or a connection up now (the server answered
  // with an error of its own, or the deadline hit a connected call).
  if (s.ok() ||
      channels_[party]->GetState(/*try_to_connect=*/false) ==
          GRPC_CHANNEL_READY)
    connected_[party].store(true, std::memory_order_relaxed);
}

bool GrpcTransport::RetryFirstConnect(int party, const absl::Status& s) {
  // Only "could not connect": not a server of the wrong party
  // (kPermissionDenied, FromGrpc) nor anything a server answered.
  if (!absl::IsUnavailable(s) ||
      connected_[party].load(std::memory_order_relaxed))
    return false;
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> l(mu_);
  if (first_failure_[party] == absl::InfinitePast())
    first_failure_[party] = now;
  return now < first_failure_[party] + kFirstConnectGrace;
}

void GrpcTransport::Attempt(int party, absl::Time deadline,
                            std::shared_ptr<const Issue> issue, Done done,
                            absl::Status first_failure) {
  const bool waiting = !first_failure.ok();
  auto ctx = NewContext();
  ctx->set_deadline(ToChrono(deadline));
  // Through TRANSIENT_FAILURE until the channel is READY or the deadline.
  if (waiting) ctx->set_wait_for_ready(true);
  if (!Begin(ctx)) {
    Invoke(done, absl::CancelledError("the kdcmpc module is shutting down"));
    return;
  }
  const absl::Time started = absl::Now();
  (*issue)(ctx.get(), [this, party, deadline, started, ctx, issue,
                       done = std::move(done),
                       first_failure = std::move(first_failure)](
                          grpc::Status gs) mutable {
    CallStatus s = FromGrpc(*cluster_, party, gs);
    NoteConnected(party, s.status);
    if (first_failure.ok() && RetryFirstConnect(party, s.status)) {
      // The new call is registered before End(ctx): Shutdown cancels it,
      // or it is never started (Begin fails and completes done).
      Attempt(party, deadline, std::move(issue), std::move(done),
              std::move(s.status));
    } else {
      // Still not connected at the deadline: the connection's failure says
      // why, "Deadline Exceeded" would not.
      if (!first_failure.ok() && absl::IsDeadlineExceeded(s.status) &&
          !connected_[party].load(std::memory_order_relaxed))
        s = absl::UnavailableError(absl::StrCat(
            first_failure.message(), " (no connection after waiting ",
            absl::ToInt64Milliseconds(absl::Now() - started), " ms more)"));
      Invoke(done, std::move(s));
    }
    End(ctx);
  });
}

template <class Req, class Resp>
void GrpcTransport::Call(int party, const Req& req, Resp* resp, absl::Time deadline,
                         Done done, Prepare<Req, Resp> prepare) {
  auto issue = std::make_shared<const Issue>(
      [stub = stubs_[party].get(), cq = cq_.get(), req = &req, resp, prepare](
          grpc::ClientContext* ctx, std::function<void(grpc::Status)> cb) {
        StartOnQueue(ctx, cq, resp, std::move(cb),
                     [stub, req, prepare](grpc::ClientContext* c,
                                          grpc::CompletionQueue* q) {
                       return (stub->*prepare)(c, *req, q);
                     });
      });
  Attempt(party, deadline, std::move(issue), std::move(done),
          absl::OkStatus());
}

void GrpcTransport::Run(int party, const kmpc::v1::RunRequest& req,
                        kmpc::v1::RunResponse* resp, absl::Time deadline,
                        Done done) {
  Call(party, req, resp, deadline, std::move(done),
       &kmpc::v1::KeyOps::Stub::PrepareAsyncRun);
}

void GrpcTransport::Finalize(int party, const kmpc::v1::FinalizeRequest& req,
                             kmpc::v1::FinalizeResponse* resp,
                             absl::Time deadline, Done done) {
  Call(party, req, resp, deadline, std::move(done),
       &kmpc::v1::KeyOps::Stub::PrepareAsyncFinalize);
}

void GrpcTransport::Sign(int party, const kmpc::v1::SignRequest& req,
                         kmpc::v1::SignResponse* resp, absl::Time deadline,
                         Done done) {
  Call(party, req, resp, deadline, std::move(done),
       &kmpc::v1::KeyOps::Stub::PrepareAsyncSign);
}

void GrpcTransport::Shutdown() {
  std::set<std::shared_ptr<grpc::ClientContext>> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    shutdown_ = true;
    calls = calls_;
  }
  // Outside the lock: a cancelled call's callback may run at once.
  for (const auto& c : calls) c->TryCancel();
  calls.clear();
  // Every callback has returned, and every context is gone (a context
  // holds a reference to its channel): the channels' last references are
  // this object's own, released by its destructor after the
  // completion-queue thread has stopped, never on a gRPC thread (with
  // gRPC 1.51's callback API that thread would shut down the callback
  // threads, itself included, and abort the process: grpc/grpc#32584).
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return calls_.empty() && contexts_ == 0; });
}

}  // namespace kmpc::kdc
