#include "net/tls_ring.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>

#include "util/log.h"
#include "absl/strings/str_cat.h"

namespace kmpc::net {
namespace {

constexpr uint8_t kHelloMagic[4] = {'K', 'R', 'H', '1'};
constexpr size_t kHelloSize = 8;
constexpr int kAbortSliceMs = 100;  // how often a blocked wait checks Abort()
// An accepted connection must send its first bytes (the ClientHello, which
// a dialer sends as soon as TCP connects) within this, or it is closed
// before it costs a TLS handshake; the whole handshake and hello then get
// kHandshakeTime.
constexpr absl::Duration kFirstBytesTime = absl::Milliseconds(500);
constexpr absl::Duration kHandshakeTime = absl::Seconds(2);

// The address bytes of a socket address (IPv4-mapped IPv6 as IPv4), the
// unit of the listener's per-source limit; empty for other families.
std::string AddrKey(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return std::string(reinterpret_cast<const char*>(&in->sin_addr), 4);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
      return std::string(reinterpret_cast<const char*>(&in6->sin6_addr) + 12, 4);
    return std::string(reinterpret_cast<const char*>(&in6->sin6_addr), 16);
  }
  return std::string();
}

// The printable form of an accepted peer's address, for log lines.
std::string AddrText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf,
              sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
              buf, sizeof buf);
  return buf;
}

absl::Status ShuttingDown() {
  return absl::UnavailableError("ring: this server is shutting down");
}

int Prev(int party) { return (party + 2) % 3; }
int Next(int party) { return (party + 1) % 3; }

// OK if pins is empty or holds the connection's peer key.
absl::Status CheckPin(const TlsConn& conn, const std::vector<SpkiPin>& pins,
                      int party, const char* flag) {
  if (pins.empty() ||
      std::find(pins.begin(), pins.end(), conn.peer_spki()) != pins.end())
    return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "ring: party ", party, " ('", conn.peer_identity(),
      "') presented a certificate whose key ", SpkiPinString(conn.peer_spki()),
      " is not pinned by ", flag));
}

}  // namespace

const char* RingRejectName(RingReject r) {
  switch (r) {
    case RingReject::kNoSlot: return "no_slot";
    case RingReject::kSilent: return "silent";
    case RingReject::kTls: return "tls";
    case RingReject::kIdentity: return "identity";
    case RingReject::kPin: return "pin";
    case RingReject::kHello: return "hello";
  }
  return "other";
}

// ---------------------------------------------------------------- channel

uint64_t TlsRingChannel::OutTcpBytes() const {
  if (out_ == nullptr) return 0;
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(out_->fd(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent))
    return 0;
  return info.tcpi_bytes_sent;
}

void TlsRingChannel::DropOut() {
  tcp_bytes_base_ += OutTcpBytes();
  out_.reset();
}

uint64_t TlsRingChannel::tcp_bytes_sent() const {
  return tcp_bytes_base_ + OutTcpBytes();
}

void TlsRingChannel::Reset() {
  DropOut();
  in_.reset();
  up_ = false;
  ++generation_;
}

absl::Status TlsRingChannel::Fail(absl::Status st) {
  Reset();
  return st;
}

bool TlsRingChannel::connected() const { return up_.load(); }

void TlsRingChannel::OfferIncoming(std::unique_ptr<TlsConn> conn) {
  std::lock_guard<std::mutex> lock(incoming_mu_);
  incoming_ = std::move(conn);
}

void TlsRingChannel::AdoptIncoming() {
  std::lock_guard<std::mutex> lock(incoming_mu_);
  if (incoming_ != nullptr) {
    // Its handshake may predate a CRL reload (see Connect).
    if (!incoming_->RecheckPeer().ok()) {
      incoming_.reset();
      return;
    }
    in_ = std::move(incoming_);
    ++generation_;
  }
}

absl::Status TlsRingChannel::Connect(absl::Time deadline) {
  AdoptIncoming();
  // A neighbour that dropped its end re-dials; do not read its stale side.
  // One whose certificate was revoked since the handshake (a CRL reloaded
  // meanwhile: TlsFiles::check_peer) is dropped before the next batch, not
  // at its next reconnect; re-dialing or accepting it again then fails in
  // the handshake, so a revoked party takes no further part.
  if (in_ != nullptr && (in_->PeerClosed() || !in_->RecheckPeer().ok())) {
    in_.reset();
    ++generation_;
  }
  if (out_ != nullptr && (out_->PeerGone() || !out_->RecheckPeer().ok())) {
    ++generation_;
    DropOut();
  }
  const TlsRingOptions& opt = ring_->options_;
  absl::Status last;
  while (out_ == nullptr) {
    if (ring_->aborting())
      return ShuttingDown();
    absl::Time attempt = std::min(deadline, absl::Now() + absl::Seconds(2));
    auto conn = TlsConn::Dial(*ring_->client_ctx_, opt.prev_addr,
                              PartyIdentity(Prev(party_)), attempt);
    if (conn.ok()) {
      // A key other than the pinned one will not become right by retrying.
      if (absl::Status pin = CheckPin(**conn, opt.prev_pins, Prev(party_),
                                      "--ring_pin_prev");
          !pin.ok())
        return pin;
      uint8_t hello[kHelloSize] = {kHelloMagic[0], kHelloMagic[1],
                                   kHelloMagic[2], kHelloMagic[3],
                                   static_cast<uint8_t>(party_),
                                   static_cast<uint8_t>(worker_), 0, 0};
      absl::Status st = (*conn)->WriteAll(hello, kHelloSize, attempt);
      if (st.ok()) {
        (*conn)->UseBufferedIo(opt.max_queued_bytes);
        out_ = std::move(*conn);
        ++generation_;
        break;
      }
      last = st;
    } else {
      last = conn.status();
      // A peer with the wrong identity, or a revoked or unverifiable
      // certificate, will not become right by retrying.
      if (absl::IsPermissionDenied(last) || absl::IsUnauthenticated(last)) return last;
    }
    if (absl::Now() + absl::Milliseconds(50) >= deadline)
      return absl::UnavailableError(
          absl::StrCat("ring: cannot reach party ", Prev(party_), " at ",
                       opt.prev_addr, ": ", last.message()));
    absl::SleepFor(absl::Milliseconds(50));
  }
  while (in_ == nullptr) {
    AdoptIncoming();
    if (in_ != nullptr) break;
    if (ring_->aborting())
      return ShuttingDown();
    if (absl::Now() >= deadline)
      return absl::UnavailableError(absl::StrCat(
          "ring: party ", Next(party_), " has not connected (worker ", worker_,
          ")"));
    absl::SleepFor(absl::Milliseconds(10));
  }
  up_ = true;
  return absl::OkStatus();
}

namespace {

// ERR_clear_error walks and frees all of the thread's error slots (OpenSSL
// 3.0, crypto/err/err.c err_clear): a few hundred ns at every ring receive
// and send, where the queue is almost always empty already. ERR_peek_error
// is 0 exactly when SSL_get_error would find no error queued (ssl/ssl_lib.c
// SSL_get_error), so clearing only then leaves SSL_get_error's input as it
// was.
void ClearSslErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

}  // namespace

void TlsRingChannel::BeginBatch(uint32_t seq, absl::Time deadline) {
  seq_ = seq;
  batch_deadline_ = deadline;
  send_step_ = 0;
  recv_step_ = 0;
}

void WaitHistory::Add(absl::Duration wait) { waits_[n_++ % kWaits] = wait; }

WaitHistory::Plan WaitHistory::PlanFor(absl::Duration spin,
                                       absl::Duration through) const {
  if (n_ < kWaits / 2) return {absl::ZeroDuration(), spin};
  std::array<absl::Duration, kWaits> w = waits_;
  const size_t k = std::min(n_, kWaits);
  std::sort(w.begin(), w.begin() + k);
  const absl::Duration early = w[1], median = w[k / 2], longest = w[k - 1];
  if (median <= spin) return {absl::ZeroDuration(), spin};
  if (median <= through)
    return {absl::ZeroDuration(), std::min(longest + spin / 2, through)};
  if (early <= spin) return {absl::ZeroDuration(), spin};
  return {early - spin, std::min(std::max(early, median + spin / 2), early + spin)};
}

absl::Duration TlsRingChannel::SpinThroughBound() const {
  return spin_through_ && spin_through_()
             ? absl::Microseconds(ring_->options_.spin_through_us)
             : absl::ZeroDuration();
}

absl::Status TlsRingChannel::PollWait(bool out_blocked, bool want_in,
                                      bool reading, bool spin,
                                      absl::Time deadline) {
  pollfd fds[2];
  int nfds = 0;
  if (out_blocked) fds[nfds++] = {out_->fd(), POLLOUT, 0};
  if (want_in) fds[nfds++] = {in_->fd(), POLLIN, 0};
  int rc = 0;
  const bool spinning = spin && ring_->options_.spin_us > 0;
  // A receive alone (nothing to write) times its wait for WaitHistory.
  const bool timed = spinning && reading && want_in && !out_blocked;
  // The spin and the waits on the monotonic clock (a wall-clock step must
  // neither stretch a spin nor record a wrong wait); the deadline is wall.
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0;
  if (spinning) {
    t0 = Clock::now();
    const absl::Duration to_deadline = deadline - absl::Now();
    // Small messages of a latency-bound batch arrive within tens of
    // microseconds; polling briefly saves a sleep/wake-up per round. A
    // ring whose rounds wait longer (servers in different rooms) sleeps
    // until spin_us before the expected arrival first.
    spins_.fetch_add(1, std::memory_order_relaxed);
    const absl::Duration spin_for = absl::Microseconds(ring_->options_.spin_us);
    const WaitHistory::Plan plan = timed && ring_->options_.spin_late
                                       ? waits_.PlanFor(spin_for, SpinThroughBound())
                                       : WaitHistory::Plan{absl::ZeroDuration(), spin_for};
    // Not past the receive's deadline nor while aborting (the slices
    // below check both); a signal ends the sleep like its timeout.
    const absl::Duration sleep =
        std::min({plan.sleep, absl::Milliseconds(kAbortSliceMs), to_deadline});
    if (sleep > absl::ZeroDuration() && !ring_->aborting()) {
      late_spins_.fetch_add(1, std::memory_order_relaxed);
      const timespec ts = absl::ToTimespec(sleep);
      rc = ppoll(fds, static_cast<nfds_t>(nfds), &ts, nullptr);
      if (rc < 0 && errno == EINTR) rc = 0;
    }
    // Not past the deadline (to_deadline from t0) nor while aborting.
    const Clock::time_point spin_end =
        t0 + absl::ToChronoNanoseconds(std::max(
                 absl::ZeroDuration(), std::min({plan.spin_until,
                                                 absl::Milliseconds(kAbortSliceMs),
                                                 to_deadline})));
    while (rc == 0 && (rc = poll(fds, nfds, 0)) == 0 && Clock::now() < spin_end &&
           !ring_->aborting()) {
      sched_yield();  // let a co-located party run (3 parties, 2 cores)
    }
    if (rc == 0)
      spins_ran_out_.fetch_add(1, std::memory_order_relaxed);
    else if (plan.sleep == absl::ZeroDuration() && plan.spin_until > spin_for &&
             Clock::now() - t0 > absl::ToChronoNanoseconds(spin_for))
      spun_through_.fetch_add(1, std::memory_order_relaxed);
  }
  // In slices, so that a shutting-down server (TlsRing::Abort) does not
  // wait out the timeout.
  while (rc == 0) {
    if (ring_->aborting())
      return Fail(ShuttingDown());
    const int left = RemainingMs(deadline);
    rc = poll(fds, nfds, std::min(left, kAbortSliceMs));
    if (rc != 0 || left <= kAbortSliceMs) break;
  }
  if (rc == 0) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "ring: party ", reading ? Next(party_) : Prev(party_),
        " did not respond ",
        deadline == batch_deadline_
            ? std::string("before the batch's deadline")
            : absl::StrCat("within ", absl::FormatDuration(
                                          ring_->options_.recv_timeout)))));
  }
  if (rc < 0 && errno != EINTR)
    return Fail(absl::UnavailableError(
        absl::StrCat("ring: poll: ", strerror(errno))));
  if (timed && rc > 0 && (fds[0].revents & POLLIN) != 0)
    waits_.Add(absl::FromChrono(Clock::now() - t0));
  return absl::OkStatus();
}

absl::Status TlsRingChannel::Pump(uint8_t* p, size_t n, absl::Time deadline,
                                  bool wait, bool spin) {
  // A read returns as soon as its bytes are in, even with output still
  // buffered: waiting for our output to drain while no longer reading would
  // let three parties with full socket buffers wait on each other.
  const bool reading = n > 0;
  // OpenSSL's error queue is emptied once here and after each failed call
  // (SSL_get_error needs it empty); successful calls add nothing to it.
  ClearSslErrors();
  for (;;) {
    bool out_blocked = false;
    if (out_ != nullptr && out_->out_buffered() > 0) {
      if (!out_->FlushOut(&out_blocked).ok())
        return Fail(absl::UnavailableError(absl::StrCat(
            "ring: lost connection to party ", Prev(party_))));
    }
    bool want_in = false, read_waits = false;
    while (n > 0) {
      if (in_ == nullptr)
        return Fail(absl::UnavailableError(absl::StrCat(
            "ring: no connection from party ", Next(party_))));
      // With no output left to write and no spin asked for, the read itself
      // sleeps until bytes come (one slice at most: UseBlockingReads),
      // saving a read() that finds nothing and a poll() per round. Decided
      // before every SSL_read: a next party sending one small record per
      // slice must not hold the receive past its deadline or Abort(). Near
      // the deadline, while aborting, or with output to drain, poll.
      read_waits = !spin && (out_ == nullptr || out_->out_buffered() == 0) &&
                   !ring_->aborting() && RemainingMs(deadline) > kAbortSliceMs;
      in_->set_read_wait(read_waits);
      int rc = SSL_read(in_->ssl(), p, static_cast<int>(std::min<size_t>(n, INT_MAX)));
      in_->set_read_wait(false);
      if (rc > 0) {
        p += rc;
        n -= rc;
        continue;
      }
      int err = SSL_get_error(in_->ssl(), rc);
      ERR_clear_error();
      if (err == SSL_ERROR_WANT_READ) {
        want_in = true;
        break;
      }
      return Fail(absl::UnavailableError(absl::StrCat(
          "ring: party ", Next(party_), " closed the connection")));
    }
    if (reading ? n == 0 : !out_blocked) return absl::OkStatus();
    // An opportunistic flush (SendToPrev) leaves what the kernel does not
    // take now for the next receive or Flush.
    if (!reading && !wait) return absl::OkStatus();
    // A waiting read that ran out its slice: decide again (abort, deadline).
    if (read_waits && in_ != nullptr && in_->blocking_reads()) continue;
    if (absl::Status st = PollWait(out_blocked, want_in, reading, spin, deadline);
        !st.ok())
      return st;
  }
}

absl::Status TlsRingChannel::SendToPrev(absl::Span<const uint8_t> msg) {
  const uint32_t step = send_step_++;
  return SendFrame(FrameType::kData, seq_, step, msg);
}

absl::Status TlsRingChannel::SendFrame(FrameType type, uint32_t seq,
                                       uint32_t step,
                                       absl::Span<const uint8_t> payload) {
  if (out_ == nullptr)
    return Fail(absl::UnavailableError(
        absl::StrCat("ring: no connection to party ", Prev(party_))));
  // The header and the first bytes of the payload fill one full TLS
  // record (16 KiB); the rest is encrypted straight from the caller's
  // buffer, so a frame costs no more records than its bytes need.
  constexpr size_t kRecord = 16 * 1024;
  static_assert(sizeof(staging_) == kRecord);
  const size_t head = std::min(payload.size(), kRecord - kFrameHeaderSize);
  EncodeFrameHeader({type, seq, step, static_cast<uint32_t>(payload.size())},
                    staging_);
  if (head > 0) std::memcpy(staging_ + kFrameHeaderSize, payload.data(), head);
  ClearSslErrors();
  for (absl::Span<const uint8_t> part :
       {absl::MakeConstSpan(staging_, kFrameHeaderSize + head),
        payload.subspan(head)}) {
    size_t done = 0;
    while (done < part.size()) {
      int rc = SSL_write(out_->ssl(), part.data() + done,
                         static_cast<int>(std::min<size_t>(part.size() - done, INT_MAX)));
      if (rc <= 0) {  // the output buffer takes all up to its cap
        if (out_->out_overflowed())
          return Fail(absl::UnavailableError(absl::StrCat(
              "ring: more than ", ring_->options_.max_queued_bytes >> 20,
              " MiB queued for party ", Prev(party_),
              ", which is not reading")));
        return Fail(absl::UnavailableError(absl::StrCat(
            "ring: lost connection to party ", Prev(party_))));
      }
      done += static_cast<size_t>(rc);
    }
  }
  bytes_sent_ += kFrameHeaderSize + payload.size();
  steps_sent_ += 1;
  // Opportunistic flush; whatever the kernel does not take now is written
  // while the next receive waits.
  return Pump(nullptr, 0, absl::Now(), /*wait=*/false);
}

absl::Status TlsRingChannel::RecvFromNext(absl::Span<uint8_t> out) {
  absl::Time deadline =
      std::min(absl::Now() + ring_->options_.recv_timeout, batch_deadline_);
  // The header and a small payload arrive in one TLS record: the wait (and
  // so the spin decision) happens on the header, the payload is then
  // already in OpenSSL's buffer.
  const bool spin = spin_data_ && out.size() <= ring_->options_.spin_max_bytes;
  uint8_t hdr[kFrameHeaderSize];
  if (absl::Status st = Pump(hdr, kFrameHeaderSize, deadline, /*wait=*/true, spin);
      !st.ok())
    return st;
  FrameHeader h;
  absl::Status st = DecodeFrameHeader(hdr, &h);
  if (st.ok()) st = CheckDataFrame(h, seq_, recv_step_, out.size());
  if (!st.ok()) return Fail(st);
  ++recv_step_;
  return Pump(out.data(), out.size(), deadline, /*wait=*/true, spin);
}

absl::Status TlsRingChannel::Exchange(absl::Span<const uint8_t> to_prev,
                                      absl::Span<uint8_t> from_next) {
  if (absl::Status st = SendToPrev(to_prev); !st.ok()) return st;
  return RecvFromNext(from_next);
}

absl::Status TlsRingChannel::Flush(absl::Time deadline) {
  return Pump(nullptr, 0, deadline);
}

absl::Status TlsRingChannel::SendControl(uint32_t seq,
                                         absl::Span<const uint8_t> msg) {
  if (msg.size() > kMaxControlPayload)
    return absl::InternalError("ring: control message too large");
  if (absl::Status st = SendFrame(FrameType::kControl, seq, 0, msg); !st.ok())
    return st;
  return Pump(nullptr, 0, absl::Now() + ring_->options_.recv_timeout);
}

absl::StatusOr<std::vector<uint8_t>> TlsRingChannel::RecvControl(
    uint32_t* seq, absl::Time deadline) {
  uint8_t hdr[kFrameHeaderSize];
  if (absl::Status st = Pump(hdr, kFrameHeaderSize, deadline, /*wait=*/true,
                             spin_control_);
      !st.ok())
    return st;
  FrameHeader h;
  if (absl::Status st = DecodeFrameHeader(hdr, &h); !st.ok()) return Fail(st);
  // Data frames left over from a batch that failed elsewhere in the ring
  // are drained here, so the ring resynchronises at the next batch.
  while (h.type == FrameType::kData) {
    std::vector<uint8_t> junk(std::min<uint32_t>(h.length, 1 << 20));
    for (uint32_t left = h.length; left > 0;) {
      uint32_t n = std::min<uint32_t>(left, junk.size());
      if (absl::Status st = Pump(junk.data(), n, deadline); !st.ok()) return st;
      left -= n;
    }
    if (absl::Status st = Pump(hdr, kFrameHeaderSize, deadline); !st.ok())
      return st;
    if (absl::Status st = DecodeFrameHeader(hdr, &h); !st.ok()) return Fail(st);
  }
  std::vector<uint8_t> msg(h.length);
  if (absl::Status st = Pump(msg.data(), msg.size(), deadline); !st.ok())
    return st;
  *seq = h.seq;
  return msg;
}

bool TlsRingChannel::InboundReadable(absl::Duration wait) {
  if (in_ == nullptr) return false;
  // SSL_has_pending, not SSL_pending: with read-ahead, bytes of records
  // not yet decrypted may wait in OpenSSL's buffer, not in the socket.
  if (SSL_has_pending(in_->ssl()) || in_->in_buffered()) return true;
  pollfd p{in_->fd(), POLLIN, 0};
  return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) > 0;
}

// ---------------------------------------------------------------- ring

absl::StatusOr<std::unique_ptr<TlsRing>> TlsRing::Start(
    const TlsRingOptions& options) {
  if (options.party < 0 || options.party > 2)
    return absl::InvalidArgumentError("party must be 0, 1 or 2");
  if (options.workers < 1 || options.workers > 64)
    return absl::InvalidArgumentError("workers must be in [1, 64]");
  std::unique_ptr<TlsRing> ring(new TlsRing(options));
  auto sctx = TlsContext::Create(options.tls, /*server=*/true);
  if (!sctx.ok()) return sctx.status();
  auto cctx = TlsContext::Create(options.tls, /*server=*/false);
  if (!cctx.ok()) return cctx.status();
  ring->server_ctx_ = std::move(*sctx);
  ring->client_ctx_ = std::move(*cctx);
  for (int w = 0; w < options.workers; ++w)
    ring->channels_.emplace_back(
        new TlsRingChannel(ring.get(), w, options.party));

  const std::string& addr = options.listen_addr;
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError("ring listen address must be host:port");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("resolve ", addr, ": ", gai_strerror(rc)));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      listen(fd, 64) != 0) {
    int e = errno;
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("ring: cannot listen on ", addr, ": ", strerror(e)));
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  ring->listen_port_ =
      ntohs(ss.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  ring->listen_fd_ = fd;
  ring->ResolveNext();
  TlsRing* raw = ring.get();
  ring->listener_ = std::thread([raw] { raw->ListenLoop(); });
  return ring;
}

TlsRing::~TlsRing() {
  stop_ = true;
  if (listener_.joinable()) listener_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

bool TlsRing::AllConnected() const {
  for (const auto& c : channels_)
    if (!c->connected()) return false;
  return true;
}

uint64_t TlsRing::bytes_sent() const {
  uint64_t total = 0;
  for (const auto& c : channels_) total += c->bytes_sent();
  return total;
}

void TlsRing::ResolveNext() {
  std::string host = options_.next_host;
  if (host.empty()) return;
  if (!host.empty() && host.front() == '[') {  // [v6]:port or [v6]
    size_t close = host.find(']');
    host = host.substr(1, close == std::string::npos ? std::string::npos : close - 1);
  } else if (size_t colon = host.rfind(':');
             colon != std::string::npos && host.find(':') == colon) {
    host = host.substr(0, colon);  // host:port (one colon: not bare IPv6)
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    KMPC_LOG(WARNING) << "ring: cannot resolve --ring_next '" << host
                      << "': " << gai_strerror(rc)
                      << "; party " << Next(options_.party)
                      << " gets no reserved handshake slots";
    return;
  }
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    std::string key = AddrKey(a->ai_addr);
    if (!key.empty() &&
        std::find(next_addrs_.begin(), next_addrs_.end(), key) == next_addrs_.end())
      next_addrs_.push_back(key);
  }
  freeaddrinfo(res);
  KMPC_LOG(INFO) << "ring: connections from " << host << " (--ring_next, party "
                 << Next(options_.party) << ") have " << PeerSlots()
                 << " handshake slots of their own";
}

void TlsRing::ListenLoop() {
  // Handshakes run on their own threads, so a client that connects and
  // stalls cannot hold up a peer's reconnect. An unauthenticated source
  // that opens connections and sends nothing (or stalls mid-handshake)
  // holds a slot until kFirstBytesTime (or kHandshakeTime) passes; so that
  // it cannot keep the neighbour out by holding every slot:
  //  - one source address takes at most kMaxPerSource of the shared slots;
  //  - connections from next_host's addresses have PeerSlots() slots of
  //    their own (one re-dial per worker at once, and two to spare), which
  //    no other address can take; they use the shared slots only when
  //    those are full.
  // A flood from next_host's own address (or one spoofing it with a full
  // TCP handshake, i.e. on its path) is not covered: firewall the ring port
  // to the neighbour (deploy/README.md).
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string src = AddrKey(reinterpret_cast<sockaddr*>(&ss));
    std::string text = AddrText(reinterpret_cast<sockaddr*>(&ss));
    bool reserved = false;
    bool refused = false;
    {
      std::lock_guard<std::mutex> lock(handshakes_mu_);
      const bool from_next =
          std::find(next_addrs_.begin(), next_addrs_.end(), src) != next_addrs_.end();
      if (from_next && peer_handshakes_ < PeerSlots()) {
        reserved = true;
        ++peer_handshakes_;
      } else {
        int& mine = per_source_[src];
        if (handshakes_ >= kMaxHandshakes || mine >= kMaxPerSource) {
          if (mine == 0) per_source_.erase(src);
          refused = true;
        } else {
          ++mine;
          ++handshakes_;
        }
      }
    }
    if (refused) {
      close(fd);
      Reject(RingReject::kNoSlot, text, "no handshake slot free");
      continue;
    }
    std::thread([this, fd, reserved, src = std::move(src), text = std::move(text)] {
      HandleAccepted(fd, text);
      std::lock_guard<std::mutex> lock(handshakes_mu_);
      if (reserved) {
        --peer_handshakes_;
      } else {
        --handshakes_;
        if (--per_source_[src] == 0) per_source_.erase(src);
      }
      handshakes_cv_.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(handshakes_mu_);
  handshakes_cv_.wait(lock, [this] { return handshakes_ == 0 && peer_handshakes_ == 0; });
}

void TlsRing::Reject(RingReject reason, const std::string& source,
                     const std::string& detail) {
  const int r = static_cast<int>(reason);
  rejected_[r].fetch_add(1);
  if (options_.on_reject) options_.on_reject(reason);
  uint64_t unlogged;
  {
    std::lock_guard<std::mutex> lock(reject_log_mu_);
    RejectLogState& st = reject_log_[r];
    const absl::Time now = absl::Now();
    if (now < st.next_line) {
      ++st.unlogged;
      return;
    }
    unlogged = st.unlogged;
    st.unlogged = 0;
    st.next_line = now + options_.reject_log_interval;
  }
  KMPC_LOG(WARNING) << "ring: rejected connection from " << source << ": "
                    << detail << " (reason " << RingRejectName(reason) << "; "
                    << unlogged << " more since the last such line, not logged)";
}

void TlsRing::HandleAccepted(int fd, const std::string& source) {
  const int next = Next(options_.party);
  // A dialer's ClientHello follows its connect at once; a socket silent
  // this long is not a dialing party and gives its slot back early.
  if (!PollFd(fd, POLLIN, absl::Now() + kFirstBytesTime).ok()) {
    close(fd);
    Reject(RingReject::kSilent, source, "sent nothing");
    return;
  }
  absl::Time deadline = absl::Now() + kHandshakeTime;
  auto conn = TlsConn::Accept(*server_ctx_, fd, deadline);
  if (!conn.ok()) {
    Reject(RingReject::kTls, source, std::string(conn.status().message()));
    return;
  }
  if ((*conn)->peer_identity() != PartyIdentity(next)) {
    Reject(RingReject::kIdentity, source,
           absl::StrCat("certificate of '", (*conn)->peer_identity(),
                        "', expected '", PartyIdentity(next), "'"));
    return;
  }
  if (absl::Status pin = CheckPin(**conn, options_.next_pins, next, "--ring_pin_next");
      !pin.ok()) {
    Reject(RingReject::kPin, source, std::string(pin.message()));
    return;
  }
  uint8_t hello[kHelloSize];
  if (!(*conn)->ReadAll(hello, kHelloSize, deadline).ok() ||
      std::memcmp(hello, kHelloMagic, 4) != 0 || hello[4] != next ||
      hello[5] >= channels_.size() || hello[6] != 0 || hello[7] != 0) {
    Reject(RingReject::kHello, source,
           absl::StrCat("party ", next, ": malformed hello"));
    return;
  }
  KMPC_VLOG(1) << "ring: party " << next << " connected (worker "
          << int{hello[5]} << ")";
  (*conn)->UseBufferedIo(options_.max_queued_bytes);
  if (options_.wait_in_read)
    (*conn)->UseBlockingReads(absl::Milliseconds(kAbortSliceMs));
  channels_[hello[5]]->OfferIncoming(std::move(*conn));
}

}  // namespace kmpc::net
