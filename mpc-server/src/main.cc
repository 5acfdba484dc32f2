// kmpc-mpc-server: one of the three MPC servers.
//
//   kmpc-mpc-server --party=0 --listen=127.0.0.1:7000
//     --ring_listen=127.0.0.1:7100 --ring_prev=127.0.0.1:7102
//     --cert=party-0.pem --key=party-0.key --ca=ca.pem --store_dir=/var/lib/kmpc
//   (one command line; integration-tests/kmpc_harness/mpc-local.sh starts three on loopback)
//
// or, as the systemd units do (deploy/systemd/, deploy/THREE-HOSTS.md),
//   kmpc-mpc-server --flagfile=/etc/kmpc/party0.flags
// with one --name=value per line (abseil's standard --flagfile; a later
// flag on the command line overrides the file's).
//
// Party i dials party i-1's ring address (--ring_prev) and accepts party
// i+1. Logs "listening on <addr>" once gRPC serves (tests wait for it).
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/exposer.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "net/tls_ring.h"
#include "service/auth.h"
#include "service/breaker.h"
#include "service/metrics.h"
#include "service/scheduler.h"
#include "service/services.h"
#include "service/request_wipe.h"
#include "service/wipe_interceptor.h"
#include "store/share_store.h"
#include "util/log.h"

ABSL_FLAG(int, party, -1, "this server's party index: 0, 1 or 2");
ABSL_FLAG(std::string, listen, "127.0.0.1:7000", "gRPC listen address host:port");
ABSL_FLAG(std::string, ring_listen, "127.0.0.1:7100",
          "ring listen address (party i+1 connects here)");
ABSL_FLAG(std::string, ring_prev, "",
          "ring address of party i-1 (this server connects there)");
ABSL_FLAG(std::string, ring_next, "",
          "host (name or address) that party i+1 connects to --ring_listen "
          "from: its connections get handshake slots of their own, so a "
          "connection flood from other addresses cannot keep it out "
          "(empty: none reserved)");
ABSL_FLAG(int, ring_max_queued_mb, 128,
          "ring output queued for party i-1 beyond which the batch fails "
          "(a party i-1 that stops reading); net/tls_ring.h says why 128");
ABSL_FLAG(std::string, ring_pin_prev, "",
          "optional spki-sha256:<hex> pins (comma-separated) of party i-1's "
          "certificate key, checked when dialing it (docs/security-model.md)");
ABSL_FLAG(std::string, ring_pin_next, "",
          "optional spki-sha256:<hex> pins (comma-separated) of party i+1's "
          "certificate key, checked when it connects");
ABSL_FLAG(std::string, cert, "", "PEM certificate (CN kmpc-party-<i>)");
ABSL_FLAG(std::string, key, "", "PEM private key");
ABSL_FLAG(std::string, ca, "", "PEM CA certificate trusted for peers and clients");
ABSL_FLAG(std::string, store_dir, "", "directory of the LMDB share store");
ABSL_FLAG(int, workers, 2, "worker threads, each with its own ring connections");
ABSL_FLAG(int, v, 0, "verbose logging level");
ABSL_FLAG(int, ring_timeout_ms, 5000,
          "deadline for one ring receive; a dead peer fails a batch after this");
ABSL_FLAG(int, schedule_timeout_ms, 5000,
          "how long a batch may wait to be scheduled on the ring (never "
          "past its client's deadline)");
ABSL_FLAG(int, peer_batch_wait_ms, 2000,
          "how long party 0 keeps proposing a batch a follower has not "
          "received (again after a short backoff, serving other batches "
          "meanwhile; never past the batch's deadline)");
ABSL_FLAG(std::string, keyops_clients, "kmpc-kdc",
          "comma-separated certificate CNs allowed to call KeyOps, and "
          "optionally sha256:<hex> certificate fingerprints: with pins, a "
          "client needs an allowed CN and a pinned certificate");
ABSL_FLAG(std::string, admin_clients, "kmpc-admin",
          "the same for Admin (kmpc-admin)");
ABSL_FLAG(std::string, crl, "",
          "PEM CRL signed by the --ca CA (deploy/gen-certs.sh DIR --revoke): "
          "gRPC clients and ring peers with a listed certificate are refused "
          "(established ring connections are dropped before the next batch); "
          "reloaded when the file "
          "changes and on SIGHUP");
ABSL_FLAG(bool, allow_key_replace, false,
          "let PutKey replace stored shares and reuse deleted key ids (tests, "
          "recovery); by default ids are immutable, so an Admin certificate "
          "cannot swap the shares of a key the KDB refers to");
ABSL_FLAG(std::string, allow_ungate_keys, "",
          "comma-separated KEYID:DEALID (hex: the key id as kmpc-admin prints "
          "it, the deal id of its shares as this server's refusal names it) "
          "whose password-derived aes*-cts key Admin.SetKeyKind may make a "
          "service's (kmpc-admin set-kind --kind=service --force), dropping "
          "the gate on its AS reply; empty: none. The Admin certificate "
          "alone, which the KDC host holds, cannot");
ABSL_FLAG(std::string, metrics_addr, "",
          "HOST:PORT for Prometheus /metrics over plain HTTP (the same "
          "figures as Admin.Metrics, plus process memory); empty = off. "
          "Counters and timings only, no secret, but bind it to loopback or "
          "a monitoring network: it has no authentication");
ABSL_FLAG(int, max_message_mb, 64, "largest gRPC message accepted (MiB)");
ABSL_FLAG(int, encrypt_state_ttl_ms, 10000,
          "how long an ENCRYPT job's state waits for its FINALIZE (the KDC "
          "finalizes within milliseconds)");
ABSL_FLAG(int, max_pending_encrypt_mb, 256,
          "memory all ENCRYPT states awaiting FINALIZE may hold (MiB); "
          "ENCRYPT jobs beyond it fail with RESOURCE_EXHAUSTED");
ABSL_FLAG(int, pad_ttl_ms, 30000,
          "how long a PAD job's pad waits for its Sign (unused pads are "
          "dropped)");
ABSL_FLAG(int, max_pending_pad_mb, 256,
          "memory all pads awaiting Sign may hold (MiB); PAD jobs beyond it "
          "fail with RESOURCE_EXHAUSTED");
ABSL_FLAG(std::string, debug_record_requests, "",
          "TEST ONLY: append every KeyOps request (Run, Finalize, Sign), "
          "serialized as received, to this file (records hold shares: never "
          "in production; refused unless KMPC_TEST_ONLY_RECORD_REQUESTS=1 "
          "is set in the environment too). Off when empty");
// Spinning on small ring messages: a single block's batch runs ~40 rounds
// of messages under 3 KiB, each answered within tens of microseconds, so a
// sleep and wake-up per round would dominate its latency. Only latency-bound
// batches spin (at most ~128 AES blocks: one login's; service/scheduler.cc
// LatencyBound): larger ones (login storms, bulk) sleep in every receive and
// keep their CPU for the co-located parties, even where their messages are
// small (a storm's aes*-cts Run: ~2,400 rounds of bit-packed AND layers).
// The spin covers one more scheduling slot than a round takes, since with
// three parties on two cores a round's message often arrives a slot late
// (docs/bench-log.md has the measurements).
ABSL_FLAG(int, ring_spin_us, 150,
          "busy-poll a ring receive of at most --ring_spin_max_bytes this long "
          "before sleeping (latency of small batches); 0 = never");
ABSL_FLAG(bool, ring_spin_late, true,
          "a receive that spins (--ring_spin_us) and whose recent rounds waited longer "
          "than that spins through the wait (up to --ring_spin_through_us) or sleeps "
          "until --ring_spin_us before the expected arrival, then spins: servers in "
          "different rooms pay no wake-up after a sleep per round; false = spin "
          "first, then sleep");
ABSL_FLAG(int, ring_spin_through_us, 1500,
          "with --ring_spin_late, while this server has one batch in flight, a "
          "spinning receive whose recent rounds waited longer than --ring_spin_us "
          "but no longer than this (median) spins through the wait, up to this long "
          "(servers rooms apart: a core's time while it lasts); 0 = never, at most "
          "10000");
ABSL_FLAG(int, ring_spin_max_bytes, 3072,
          "largest ring message a receive busy-polls for (larger ones sleep: "
          "throughput-bound batches keep their CPU)");
ABSL_FLAG(int, cts_clock_tolerance_s, 5,
          "how far the KDC's clock in a Run (RunRequest.now_unix) may be from "
          "this server's before its aes*-cts DECRYPTs fail (JOB_MALFORMED): "
          "the clocks' offset plus a request's age (the module's 3 s deadline)");
ABSL_FLAG(int, breaker_deviations, 3,
          "the deviation breaker (service/breaker.h): after this many batches "
          "failed by the malicious check (BATCH_INTEGRITY_CHECK_FAILED) within "
          "--breaker_window, the server refuses every batch (BATCH_BREAKER_OPEN) "
          "until kmpc-admin breaker-reset; the trip is kept in "
          "STORE_DIR/breaker-open across restarts; 0 = never opens");
ABSL_FLAG(absl::Duration, breaker_window, absl::Minutes(10),
          "the deviation breaker's window (e.g. 600s, 10m)");

namespace {

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  *ok = f.good() || f.eof();
  return ss.str();
}

int Fail(const std::string& msg) {
  KMPC_LOG(ERROR) << msg;
  return 1;
}

// Never write a key share to a core dump: no core file (RLIMIT_CORE 0) and
// not dumpable (also keeps other processes of our uid from ptrace-ing us
// and reading /proc/<pid>/mem).
bool DisableCoreDumps() {
  struct rlimit none = {0, 0};
  return setrlimit(RLIMIT_CORE, &none) == 0 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
}

// Client authorization (service/auth.h), checked before anything starts:
// the CRL of --crl (null without it) and the KeyOps and Admin policies.
struct ClientAuthorization {
  std::shared_ptr<kmpc::service::RevocationList> crl;
  kmpc::service::ClientPolicy keyops_clients, admin_clients;
};

absl::StatusOr<ClientAuthorization> ClientAuthorizationFromFlags() {
  ClientAuthorization auth;
  if (!absl::GetFlag(FLAGS_crl).empty()) {
    // The highest CRL Numbers accepted, kept across restarts (rollback).
    auto c = kmpc::service::RevocationList::Open(
        absl::GetFlag(FLAGS_crl), absl::GetFlag(FLAGS_ca),
        absl::GetFlag(FLAGS_store_dir) + "/crl-numbers");
    if (!c.ok())
      return absl::InvalidArgumentError(absl::StrCat("--crl: ", c.status().message()));
    auth.crl = *std::move(c);
  }
  for (auto [flag, name, policy] :
       {std::tuple{&FLAGS_keyops_clients, "--keyops_clients", &auth.keyops_clients},
        std::tuple{&FLAGS_admin_clients, "--admin_clients", &auth.admin_clients}}) {
    auto p = kmpc::service::ParseClientPolicy(absl::GetFlag(*flag), auth.crl);
    if (!p.ok())
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", p.status().message()));
    *policy = *std::move(p);
  }
  return auth;
}

// Blocks the stop signals (and SIGHUP, which reloads --crl) in the calling
// thread, and so in every thread it starts afterwards: call it before any
// thread starts; one thread waits for them (ServeUntilStopSignal).
sigset_t BlockStopSignals() {
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGHUP);  // reloads --crl
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_set;
}

// metrics: counts the connections the ring listener rejects; outlives the
// ring.
absl::StatusOr<kmpc::net::TlsRingOptions> RingOptionsFromFlags(
    int party, const std::shared_ptr<kmpc::service::RevocationList>& crl,
    kmpc::service::Metrics* metrics) {
  kmpc::net::TlsRingOptions ropt;
  ropt.party = party;
  ropt.workers = absl::GetFlag(FLAGS_workers);
  ropt.listen_addr = absl::GetFlag(FLAGS_ring_listen);
  ropt.prev_addr = absl::GetFlag(FLAGS_ring_prev);
  ropt.next_host = absl::GetFlag(FLAGS_ring_next);
  if (absl::GetFlag(FLAGS_ring_max_queued_mb) < 1)
    return absl::InvalidArgumentError("--ring_max_queued_mb must be positive");
  ropt.max_queued_bytes = size_t(absl::GetFlag(FLAGS_ring_max_queued_mb)) << 20;
  auto prev_pins = kmpc::net::ParseSpkiPins(absl::GetFlag(FLAGS_ring_pin_prev));
  if (!prev_pins.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_pin_prev: ", prev_pins.status().message()));
  auto next_pins = kmpc::net::ParseSpkiPins(absl::GetFlag(FLAGS_ring_pin_next));
  if (!next_pins.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_pin_next: ", next_pins.status().message()));
  ropt.prev_pins = *std::move(prev_pins);
  ropt.next_pins = *std::move(next_pins);
  ropt.tls = {absl::GetFlag(FLAGS_cert), absl::GetFlag(FLAGS_key),
              absl::GetFlag(FLAGS_ca)};
  if (crl != nullptr)
    ropt.tls.check_peer = [crl](X509* peer) { return crl->CheckPeer(peer); };
  ropt.recv_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_ring_timeout_ms));
  ropt.spin_us = absl::GetFlag(FLAGS_ring_spin_us);
  ropt.spin_late = absl::GetFlag(FLAGS_ring_spin_late);
  ropt.spin_through_us = absl::GetFlag(FLAGS_ring_spin_through_us);
  if (ropt.spin_through_us < 0 ||
      ropt.spin_through_us > kmpc::net::TlsRingOptions::kMaxSpinThroughUs)
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_spin_through_us must be 0 to ",
                     kmpc::net::TlsRingOptions::kMaxSpinThroughUs));
  ropt.spin_max_bytes =
      static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_ring_spin_max_bytes)));
  ropt.on_reject = [metrics](kmpc::net::RingReject r) {
    metrics->RecordRingRejected(kmpc::net::RingRejectName(r));
  };
  return ropt;
}

// The ring (RingOptionsFromFlags, *ropt), its listener's rejects and its
// receives' spins (TlsRingChannel's counters over its workers) counted in
// `metrics`, which outlives it: the exposer and the services stop before
// the ring is destroyed.
absl::StatusOr<std::unique_ptr<kmpc::net::TlsRing>> StartRing(
    int party, const std::shared_ptr<kmpc::service::RevocationList>& crl,
    kmpc::service::Metrics* metrics, kmpc::net::TlsRingOptions* ropt) {
  auto opt = RingOptionsFromFlags(party, crl, metrics);
  if (!opt.ok()) return opt.status();
  *ropt = *std::move(opt);
  auto ring = kmpc::net::TlsRing::Start(*ropt);
  if (!ring.ok()) return ring.status();
  metrics->SetRingWaitSource([r = ring->get()] {
    kmpc::service::Metrics::RingWaits w;
    for (int i = 0; i < r->workers(); ++i) {
      const kmpc::net::TlsRingChannel* ch = r->channel(i);
      w.spun += ch->spins();
      w.slept_first += ch->late_spins();
      w.ran_out += ch->spins_ran_out();
      w.through += ch->spun_through();
    }
    return w;
  });
  return ring;
}

// A store of states awaiting their next request (ENCRYPT states, pads):
// how long one waits (ms flag) and the memory all may hold (MiB flag),
// both positive; `names` names the two flags in the error.
absl::Status TtlAndBudget(const absl::Flag<int>& ttl_ms, const absl::Flag<int>& mb,
                          absl::string_view names, absl::Duration* ttl, size_t* bytes) {
  if (absl::GetFlag(ttl_ms) <= 0 || absl::GetFlag(mb) <= 0)
    return absl::InvalidArgumentError(absl::StrCat(names, " must be positive"));
  *ttl = absl::Milliseconds(absl::GetFlag(ttl_ms));
  *bytes = size_t(absl::GetFlag(mb)) << 20;
  return absl::OkStatus();
}

// --allow_ungate_keys: raw key id || deal id per entry
// (ServiceOptions::ungate_keys).
absl::StatusOr<std::set<std::string>> UngateKeysFromFlag() {
  std::set<std::string> keys;
  const auto hex = [](absl::string_view h, size_t bytes) {
    return h.size() == 2 * bytes &&
           std::all_of(h.begin(), h.end(), [](char c) { return absl::ascii_isxdigit(c); });
  };
  for (absl::string_view entry :
       absl::StrSplit(absl::GetFlag(FLAGS_allow_ungate_keys), ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const std::vector<absl::string_view> f = absl::StrSplit(entry, ':');
    if (f.size() != 2 || !hex(f[0], kmpc::store::kKeyIdSize) || !hex(f[1], 16))
      return absl::InvalidArgumentError(absl::StrCat(
          "--allow_ungate_keys: \"", entry, "\" is not KEYID:DEALID (", 2 * kmpc::store::kKeyIdSize,
          " and 32 hex digits: the key and its dealing)"));
    keys.insert(absl::HexStringToBytes(f[0]) + absl::HexStringToBytes(f[1]));
  }
  return keys;
}

// The services' options; moves the client policies out of *auth.
absl::StatusOr<kmpc::service::ServiceOptions> ServiceOptionsFromFlags(
    int party, ClientAuthorization* auth) {
  kmpc::service::ServiceOptions svc;
  svc.party = party;
  svc.keyops_clients = std::move(auth->keyops_clients);
  svc.admin_clients = std::move(auth->admin_clients);
  auto ungate = UngateKeysFromFlag();
  if (!ungate.ok()) return ungate.status();
  svc.ungate_keys = *std::move(ungate);
  if (absl::Status s = TtlAndBudget(FLAGS_encrypt_state_ttl_ms, FLAGS_max_pending_encrypt_mb,
                                    "--encrypt_state_ttl_ms and --max_pending_encrypt_mb",
                                    &svc.encrypt_state_ttl, &svc.max_pending_encrypt_bytes);
      !s.ok())
    return s;
  if (absl::Status s = TtlAndBudget(FLAGS_pad_ttl_ms, FLAGS_max_pending_pad_mb,
                                    "--pad_ttl_ms and --max_pending_pad_mb", &svc.pad_ttl,
                                    &svc.max_pending_pad_bytes);
      !s.ok())
    return s;
  if (absl::GetFlag(FLAGS_cts_clock_tolerance_s) <= 0)
    return absl::InvalidArgumentError("--cts_clock_tolerance_s must be > 0");
  svc.cts_clock_tolerance = absl::Seconds(absl::GetFlag(FLAGS_cts_clock_tolerance_s));
  svc.debug_record_requests = absl::GetFlag(FLAGS_debug_record_requests);
  if (!svc.debug_record_requests.empty()) {
    // Fail at start, not silently at the first request.
    auto probe = kmpc::service::RequestRecorder::Open(svc.debug_record_requests);
    if (!probe.ok()) return probe.status();
    for (int i = 0; i < 3; ++i)  // loud: this must never run in production
      KMPC_LOG(ERROR) << "TEST ONLY: --debug_record_requests is set: every KeyOps "
                      << "request, shares included, is appended to "
                      << svc.debug_record_requests << " (mode 0600)";
  }
  return svc;
}

// gRPC sync-server threads kept polling between calls (StartGrpcServer).
constexpr int kMaxGrpcPollers = 8;

// Serves KeyOps and Admin over gRPC with mTLS on --listen; *port is the
// bound port. The private key's copies are wiped once gRPC has its own.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    grpc::Service* keyops, grpc::Service* admin, int* port) {
  bool ok1, ok2, ok3;
  // TLS version: the ring enforces TLS 1.3; this gRPC port still accepts
  // TLS 1.2 (with mTLS either way). gRPC 1.51 (Debian's libgrpc++1.51) has
  // no public API to raise the minimum: SslServerCredentialsOptions has no
  // version field, and TlsCredentialsOptions::set_min_tls_version (server
  // and channel side) only appeared in gRPC 1.60 (grpc/grpc#34861); the
  // core's tsi layer pins SSL_CTX_set_min_proto_version to TLS 1.2, over any
  // OpenSSL MinProtocol setting. Enforce 1.3 here and in the clients
  // (kmpc-admin, kdc-plugin, kmpc-mpc-client) when moving to gRPC >= 1.60.
  grpc::SslServerCredentialsOptions sslopt(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  sslopt.pem_root_certs = ReadFile(absl::GetFlag(FLAGS_ca), &ok1);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.private_key = ReadFile(absl::GetFlag(FLAGS_key), &ok2);
  pair.cert_chain = ReadFile(absl::GetFlag(FLAGS_cert), &ok3);
  if (!ok1 || !ok2 || !ok3 || sslopt.pem_root_certs.empty() ||
      pair.private_key.empty() || pair.cert_chain.empty())
    return absl::InvalidArgumentError("cannot read --ca, --key or --cert");
  sslopt.pem_key_cert_pairs.push_back(pair);
  OPENSSL_cleanse(pair.private_key.data(), pair.private_key.size());

  // The standard grpc.health.v1 service (gRPC's own implementation), for
  // load balancers and orchestrators; its statuses are set by main.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           grpc::SslServerCredentials(sslopt), port);
  for (auto& k : sslopt.pem_key_cert_pairs)
    OPENSSL_cleanse(k.private_key.data(), k.private_key.size());
  const int max_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(keyops);
  builder.RegisterService(admin);
  // KeyOps responses' share bytes are wiped once serialized
  // (service/wipe_interceptor.h).
  builder.experimental().SetInterceptorCreators(kmpc::service::WipeSharesInterceptors());
  // The sync server's thread pool (grpc::ThreadManager): a thread that
  // takes a call spawns a new poller when fewer than MIN_POLLERS are left,
  // and exits after the call when MAX_POLLERS are already polling. With
  // gRPC's default of 2, a Run (which holds its thread for the whole ring
  // batch) beside the KDC's Sign and Finalize calls made a thread be
  // created and destroyed for about one call in five under load (a
  // clone, a stack and gRPC's thread-local set-up each). Threads that
  // stay polling cost nothing but their stacks.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              kMaxGrpcPollers);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0)
    return absl::UnavailableError("cannot serve gRPC on " + absl::GetFlag(FLAGS_listen));
  return server;
}

// /metrics: the registry Admin.Metrics renders (service/metrics.h); null
// without --metrics_addr. A configured address that cannot be bound stops
// the server: a scraper would otherwise silently see nothing.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const kmpc::service::Metrics& metrics) {
  std::unique_ptr<prometheus::Exposer> exposer;
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_addr); !addr.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(addr, 1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("--metrics_addr ", addr, ": ", e.what()));
    }
    for (const auto& c : metrics.collectables()) exposer->RegisterCollectable(c);
    KMPC_LOG(INFO) << "metrics on http://" << addr << "/metrics";
  }
  return exposer;
}

// grpc.health.v1: the overall status ("") and both services are SERVING
// from here until shutdown, when gRPC's implementation turns them all to
// NOT_SERVING. It reports that this process serves; whether the ring can
// run a batch is Admin.Health's ring_up (an idle ring is not probed, so a
// dead peer is only noticed by the next batch). Returns the health service
// (null if gRPC has none).
grpc::HealthCheckServiceInterface* ReportServing(grpc::Server* server) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    health->SetServingStatus(kmpc::v1::KeyOps::service_full_name(), true);
    health->SetServingStatus(kmpc::v1::Admin::service_full_name(), true);
  }
  return health;
}

// Waits for SIGTERM or SIGINT (reloading the CRL on each SIGHUP); returns
// the signal.
int WaitForStopSignal(const sigset_t& stop_set,
                      const std::shared_ptr<kmpc::service::RevocationList>& crl) {
  int sig = 0;
  while (sigwait(&stop_set, &sig) == 0 && sig == SIGHUP) {
    if (crl != nullptr) (void)crl->Reload();  // logs the outcome
  }
  return sig;
}

kmpc::service::SchedulerOptions SchedulerOptionsFromFlags(
    const kmpc::engine::EngineOptions& engine, kmpc::service::Breaker* breaker) {
  kmpc::service::SchedulerOptions sopt;
  sopt.schedule_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_schedule_timeout_ms));
  sopt.peer_batch_wait = absl::Milliseconds(absl::GetFlag(FLAGS_peer_batch_wait_ms));
  sopt.engine = engine;
  sopt.breaker = breaker;
  return sopt;
}

// --breaker_deviations, --breaker_window; the trip persists in
// STORE_DIR/breaker-open (service/breaker.h).
absl::StatusOr<kmpc::service::BreakerOptions> BreakerOptionsFromFlags() {
  kmpc::service::BreakerOptions b;
  b.deviations = absl::GetFlag(FLAGS_breaker_deviations);
  b.window = absl::GetFlag(FLAGS_breaker_window);
  b.state_file = absl::GetFlag(FLAGS_store_dir) + "/breaker-open";
  if (b.deviations < 0 || b.window <= absl::ZeroDuration())
    return absl::InvalidArgumentError(
        "--breaker_deviations must be >= 0 and --breaker_window positive");
  return b;
}

}  // namespace

// --help lists the server's own flags (this file's and the engine's);
// --helpfull adds the libraries'.
static void HelpListsTheServersFlags() {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "src/main.cc") || absl::EndsWith(file, "src/engine_flags.cc");
  };
  absl::SetFlagsUsageConfig(usage);
}

static bool RequiredFlagMissing() {
  for (const auto* f : {&FLAGS_cert, &FLAGS_key, &FLAGS_ca, &FLAGS_store_dir,
                        &FLAGS_ring_prev})
    if (absl::GetFlag(*f).empty()) return true;
  return false;
}

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kmpc MPC server (one of three parties)");
  HelpListsTheServersFlags();
  // No lock-graph bookkeeping on every absl::Mutex acquisition (Debian's
  // abseil keeps deadlock detection on; as in the KDC module).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (!DisableCoreDumps()) return Fail("cannot disable core dumps");
  absl::ParseCommandLine(argc, argv);
  kmpc::log::g_verbosity = absl::GetFlag(FLAGS_v);
  // Before anything starts: a recording server must not come up by accident.
  if (!absl::GetFlag(FLAGS_debug_record_requests).empty())
    if (std::string why = kmpc::service::RequestRecorder::RefusalReason(); !why.empty())
      return Fail(why);
  const int party = absl::GetFlag(FLAGS_party);
  if (party < 0 || party > 2) return Fail("--party must be 0, 1 or 2");
  if (RequiredFlagMissing())
    return Fail("--cert, --key, --ca, --store_dir and --ring_prev are required");
  auto engine_options = kmpc::server::EngineOptionsFromFlags(absl::GetFlag(FLAGS_store_dir));
  if (!engine_options.ok()) return Fail(std::string(engine_options.status().message()));
  auto breaker_options = BreakerOptionsFromFlags();
  if (!breaker_options.ok()) return Fail(std::string(breaker_options.status().message()));

  // The store first: it takes STORE_DIR/kmpc.lock, so a second server on
  // the same directory stops here, before it could touch anything in it
  // (such as the CRL state below).
  auto store = kmpc::store::ShareStore::Open(absl::GetFlag(FLAGS_store_dir));
  if (!store.ok()) return Fail(std::string(store.status().message()));
  (*store)->set_immutable_ids(!absl::GetFlag(FLAGS_allow_key_replace));
  if (std::string why = kmpc::server::LoadGateBudget(*engine_options); !why.empty())
    return Fail(why);
  auto auth = ClientAuthorizationFromFlags();
  if (!auth.ok()) return Fail(std::string(auth.status().message()));
  const std::shared_ptr<kmpc::service::RevocationList> crl = auth->crl;

  const sigset_t stop_set = BlockStopSignals();  // before any thread starts
  kmpc::service::Metrics metrics(party);  // before the ring, which counts in it
  kmpc::net::TlsRingOptions ropt;
  auto ring = StartRing(party, crl, &metrics, &ropt);
  if (!ring.ok()) return Fail(std::string(ring.status().message()));

  kmpc::service::KeyCache keys(store->get(), party);
  kmpc::service::Breaker breaker(*breaker_options, &metrics);  // after the store's lock
  if (absl::Status st = breaker.Load(); !st.ok()) KMPC_LOG(ERROR) << st.message();
  kmpc::service::Scheduler scheduler(ring->get(), keys.AsLookup(),
                                     SchedulerOptionsFromFlags(*engine_options, &breaker));

  auto svc = ServiceOptionsFromFlags(party, &*auth);
  if (!svc.ok()) return Fail(std::string(svc.status().message()));
  kmpc::service::KeyOpsService keyops(*svc, &keys, &scheduler, &metrics);
  kmpc::service::AdminService admin(*svc, store->get(), &keys, &scheduler,
                                    &metrics, &breaker);
  // Each request's received bytes and parsed strings are wiped once it is
  // handled (service/request_wipe.h): the services are registered through
  // wrappers with the same method names.
  std::unique_ptr<grpc::Service> keyops_wiping = kmpc::service::WipingKeyOps(&keyops);
  std::unique_ptr<grpc::Service> admin_wiping = kmpc::service::WipingAdmin(&admin);
  int port = 0;
  auto server = StartGrpcServer(keyops_wiping.get(), admin_wiping.get(), &port);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  auto exposer = StartMetricsExposer(metrics);
  if (!exposer.ok()) return Fail(std::string(exposer.status().message()));
  kmpc::server::StartCtsPrecompile(absl::GetFlag(FLAGS_store_dir));
  scheduler.Start();
  KMPC_LOG(INFO) << "party " << party << " listening on "
                 << absl::GetFlag(FLAGS_listen) << " (port " << port
                 << "), ring on " << ropt.listen_addr << " -> "
                 << ropt.prev_addr << ", " << ropt.workers << " workers, security "
                 << (engine_options->malicious ? "malicious" : "semi-honest");
  grpc::HealthCheckServiceInterface* health = ReportServing(server->get());

  const int sig = WaitForStopSignal(stop_set, crl);
  KMPC_LOG(INFO) << "signal " << sig << ": shutting down";
  if (health != nullptr) health->Shutdown();
  // A batch in flight ends now (its ring waits return), not after the ring
  // timeout; the peers see the connections go and fail it too.
  (*ring)->Abort();
  scheduler.Stop();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
