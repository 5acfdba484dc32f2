// The "async" engine: one thread (per --threads) drives many logins at once
// over non-blocking sockets and epoll.  The Kerberos side is libkrb5's own
// state machines, krb5_init_creds_step (AS exchange with encrypted-timestamp
// pre-auth, the two round trips kinit makes) and krb5_tkt_creds_step
// (TGS-REQ): libkrb5 builds and checks every message; only the transport is
// ours: UDP with kinit's retransmit rhythm (1 s, then doubling), or TCP with
// the 4-byte length prefix of RFC 4120 section 7.2.2, a fresh connection
// per request as libkrb5 makes, and a switch to TCP on
// KRB_ERR_RESPONSE_TOO_BIG.
//
// Late replies.  A UDP socket that may still receive a reply to an earlier
// request (one that was retransmitted, or a login that timed out) is not
// used again: the slot takes a fresh socket.  The old socket is not closed
// at once but kept open, out of the epoll set, for kQuarantine: the kernel
// gives a closed socket's port to the next socket that asks, and a KDC
// that answers seconds late (an overloaded batching KDC: tens of seconds)
// would send its answer to whichever login now holds that port.  libkrb5
// takes any datagram on its socket as the reply, so another principal's
// AS-REP would fail that login with KRB_AP_ERR_BAD_INTEGRITY (another key)
// and a same-principal one with KRB5_KDCREP_MODIFIED (another nonce):
// errors of the load generator, not of the KDC.  Beyond the quarantine (and for
// ports a previous process used), a reply that names another client, or
// is the wrong kind of reply for the exchange, cannot be this request's:
// it is counted as a stray reply and dropped, and the login keeps waiting.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "storm.h"

// libkrb5's ASN.1 decoders (exported, declared only in its private
// k5-int.h): the clear-text client name of a reply, to recognise strays.
extern "C" {
krb5_error_code decode_krb5_as_rep(const krb5_data* in, krb5_kdc_rep** out);
krb5_error_code decode_krb5_tgs_rep(const krb5_data* in, krb5_kdc_rep** out);
krb5_error_code decode_krb5_error(const krb5_data* in, krb5_error** out);
void krb5_free_kdc_rep(krb5_context ctx, krb5_kdc_rep* rep);
}

namespace kmpc::storm {
namespace {

constexpr uint64_t kSec = 1000000000ull;
constexpr size_t kMaxReply = 65536;
// How long a UDP socket that may still get a late reply stays open (its
// port unavailable to the kernel's next socket), and how many such sockets
// all workers keep at most (file descriptors and UDP ports are finite; the
// oldest is closed first).
constexpr uint64_t kQuarantine = 60 * kSec;
constexpr size_t kMaxRetired = 8192;

enum class Phase { kIdle, kAs, kTgs };

struct Slot {
  uint32_t id = 0;
  uint32_t tcp_gen = 0;  // bumped per TCP connection: stale events ignored
  int udp_fd = -1;   // connected UDP socket, kept across logins
  int tcp_fd = -1;   // one TCP connection per request
  bool use_tcp = false;
  bool tcp_writing = false;
  bool retransmitted = false;  // this socket may still get a stale reply
  Phase phase = Phase::kIdle;
  krb5_init_creds_context icc = nullptr;
  krb5_tkt_creds_context tcc = nullptr;
  krb5_ccache cc = nullptr;
  size_t user = 0;
  bool measured = false;
  uint64_t sched = 0, deadline = 0, next_retx = 0, retx_gap = 0;
  uint64_t first_due = 0;  // closed loop with --ramp: not before this
  std::string req;            // current request (for retransmits)
  std::string tcp_out, tcp_in;
  size_t tcp_off = 0;
};

class Worker {
 public:
  Worker(Run* run, int index, WorkerStats* ws) : run_(run), index_(index), ws_(ws) {}
  ~Worker();
  bool Init();
  void Loop();

 private:
  void Start(Slot* s, uint64_t sched, bool measured, uint64_t now);
  void Step(Slot* s, const krb5_data* in);
  void Send(Slot* s, const krb5_data& out);
  void SendUdp(Slot* s);
  bool OpenTcp(Slot* s);
  void OnEvent(Slot* s, bool tcp, uint32_t events);
  void OnUdpReadable(Slot* s);
  void OnTcpEvent(Slot* s, uint32_t events);
  void Finish(Slot* s, krb5_error_code code);
  void CheckTimers(uint64_t now);
  bool OpenUdp(Slot* s);
  void CloseTcp(Slot* s);
  void Arm(Slot* s, int fd, uint32_t events, int op);
  void Retire(int fd, uint64_t now);
  bool IsStray(const Slot* s, const krb5_data& in);

  Run* run_;
  int index_;
  WorkerStats* ws_;
  const Config& cfg() const { return run_->cfg(); }
  krb5_context ctx_ = nullptr;
  krb5_get_init_creds_opt* opt_ = nullptr;
  krb5_principal server_ = nullptr;
  std::vector<krb5_principal> princs_;
  std::vector<krb5_keytab> kts_;
  sockaddr_storage kdc_{};
  socklen_t kdc_len_ = 0;
  int ep_ = -1;
  std::vector<Slot> slots_;
  std::vector<Slot*> idle_;
  int inflight_ = 0;
  uint64_t next_k_ = 0;   // open loop: this worker's next login number
  uint64_t closed_k_ = 0;
  bool issuing_ = true;
  std::vector<char> buf_ = std::vector<char>(kMaxReply);
  std::deque<std::pair<uint64_t, int>> retired_;  // (retired at, fd), oldest first
  size_t max_retired_ = 0;
};

Worker::~Worker() {
  for (Slot& s : slots_) {
    if (s.icc) krb5_init_creds_free(ctx_, s.icc);
    if (s.tcc) krb5_tkt_creds_free(ctx_, s.tcc);
    if (s.cc) krb5_cc_destroy(ctx_, s.cc);
    if (s.udp_fd >= 0) close(s.udp_fd);
    if (s.tcp_fd >= 0) close(s.tcp_fd);
  }
  for (auto& r : retired_) close(r.second);
  if (ep_ >= 0) close(ep_);
  krb5_free_principal(ctx_, server_);
  for (auto kt : kts_) krb5_kt_close(ctx_, kt);
  for (auto p : princs_) krb5_free_principal(ctx_, p);
  if (opt_) krb5_get_init_creds_opt_free(ctx_, opt_);
  if (ctx_) krb5_free_context(ctx_);
}

// krb5.conf kdc syntax: [tcp/|udp/]host[:port], host may be [v6-address].
static bool ParseAddr(const std::string& spec, sockaddr_storage* ss, socklen_t* len) {
  std::string hostport = spec;
  if (hostport.rfind("tcp/", 0) == 0 || hostport.rfind("udp/", 0) == 0)
    hostport = hostport.substr(4);
  std::string host = hostport, port = "88";
  if (!hostport.empty() && hostport[0] == '[') {
    size_t rb = hostport.find(']');
    if (rb == std::string::npos) return false;
    host = hostport.substr(1, rb - 1);
    if (rb + 1 < hostport.size() && hostport[rb + 1] == ':') port = hostport.substr(rb + 2);
  } else if (size_t colon = hostport.rfind(':');
             colon != std::string::npos && hostport.find(':') == colon) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_NUMERICSERV;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) return false;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

bool Worker::Init() {
  krb5_error_code ret = MakeContext(cfg().tcp, &ctx_);
  if (ret) {
    fprintf(stderr, "kmpc-storm: krb5 context: %s\n", error_message(ret));
    return false;
  }
  size_t n = run_->principals().size();
  for (size_t i = 0; i < n; i++) {
    krb5_principal p = nullptr;
    krb5_keytab kt = nullptr;
    ret = krb5_parse_name(ctx_, run_->principals()[i].c_str(), &p);
    if (!ret) ret = krb5_kt_resolve(ctx_, run_->keytab_names()[i].c_str(), &kt);
    if (ret) {
      fprintf(stderr, "kmpc-storm: %s: %s\n", run_->principals()[i].c_str(),
              error_message(ret));
      return false;
    }
    princs_.push_back(p);
    kts_.push_back(kt);
  }
  if ((ret = krb5_get_init_creds_opt_alloc(ctx_, &opt_))) return false;
  if (!cfg().tgs_service.empty() &&
      (ret = krb5_parse_name(ctx_, cfg().tgs_service.c_str(), &server_))) {
    fprintf(stderr, "kmpc-storm: --tgs %s: %s\n", cfg().tgs_service.c_str(),
            error_message(ret));
    return false;
  }
  std::string realm(krb5_princ_realm(ctx_, princs_[0])->data,
                    krb5_princ_realm(ctx_, princs_[0])->length);
  std::string addr = KdcAddress(ctx_, realm, cfg().kdc);
  if (addr.empty() || !ParseAddr(addr, &kdc_, &kdc_len_)) {
    fprintf(stderr, "kmpc-storm: no usable KDC address for %s (%s); use --kdc\n",
            realm.c_str(), addr.c_str());
    return false;
  }
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) return false;
  int total = run_->open_loop() ? cfg().max_inflight : cfg().concurrency;
  int mine = total / cfg().threads + (index_ < total % cfg().threads ? 1 : 0);
  // Retired sockets: this worker's share of kMaxRetired, within what the
  // descriptor limit leaves after a UDP and a TCP socket per slot.
  rlimit rl{};
  size_t budget = kMaxRetired;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    uint64_t need = 2 * static_cast<uint64_t>(total) + 256;
    budget = rl.rlim_cur > need ? std::min<uint64_t>(budget, rl.rlim_cur - need) : 0;
  }
  max_retired_ = budget / cfg().threads;
  slots_.resize(mine);
  for (int i = 0; i < mine; i++) {
    Slot& s = slots_[i];
    s.id = i;
    if (!cfg().tcp && !OpenUdp(&s)) return false;
    if (server_ && (ret = krb5_cc_new_unique(ctx_, "MEMORY", nullptr, &s.cc)))
      return false;
  }
  // Closed loop with --ramp: slot j of all workers' C slots makes its
  // first login at t0 + ramp * j / C, so C logins do not hit the KDC's
  // socket in one burst (it holds a few hundred datagrams).
  for (int i = 0; i < mine; i++) {
    uint64_t j = static_cast<uint64_t>(i) * cfg().threads + index_;
    slots_[i].first_due =
        run_->open_loop() || total == 0
            ? 0
            : run_->t0() + static_cast<uint64_t>(cfg().ramp * 1e9 * j / total);
  }
  for (int i = mine - 1; i >= 0; i--) idle_.push_back(&slots_[i]);
  return true;
}

// Event tags: the slot index, plus for a TCP connection bit 31 and the
// connection's generation in the high half (a closed fd's number is soon
// reused by another slot's connection).
constexpr uint64_t kTcpBit = 1u << 31;

void Worker::Arm(Slot* s, int fd, uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = fd == s->tcp_fd
                    ? (static_cast<uint64_t>(s->tcp_gen) << 32) | kTcpBit | s->id
                    : s->id;
  epoll_ctl(ep_, op, fd, &ev);
}

// Out of the epoll set, still open: its port is not handed to another
// socket while late replies may arrive (see the top of this file).
void Worker::Retire(int fd, uint64_t now) {
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  retired_.emplace_back(now, fd);
  while (retired_.size() > max_retired_ ||
         (!retired_.empty() && now - retired_.front().first >= kQuarantine)) {
    close(retired_.front().second);
    retired_.pop_front();
  }
}

bool Worker::OpenUdp(Slot* s) {
  if (s->udp_fd >= 0) Retire(s->udp_fd, NowNs());
  s->retransmitted = false;
  s->udp_fd = socket(kdc_.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->udp_fd < 0 ||
      connect(s->udp_fd, reinterpret_cast<sockaddr*>(&kdc_), kdc_len_) != 0) {
    perror("kmpc-storm: udp socket");
    return false;
  }
  Arm(s, s->udp_fd, EPOLLIN, EPOLL_CTL_ADD);
  return true;
}

void Worker::CloseTcp(Slot* s) {
  if (s->tcp_fd >= 0) {
    close(s->tcp_fd);  // also leaves the epoll set
    s->tcp_fd = -1;
  }
}

bool Worker::OpenTcp(Slot* s) {
  CloseTcp(s);
  s->tcp_fd = socket(kdc_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->tcp_fd < 0) return false;
  int one = 1;
  setsockopt(s->tcp_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(s->tcp_fd, reinterpret_cast<sockaddr*>(&kdc_), kdc_len_) != 0 &&
      errno != EINPROGRESS) {
    CloseTcp(s);
    return false;
  }
  s->tcp_gen++;
  uint32_t len = htonl(static_cast<uint32_t>(s->req.size()));
  s->tcp_out.assign(reinterpret_cast<char*>(&len), 4);
  s->tcp_out += s->req;
  s->tcp_off = 0;
  s->tcp_in.clear();
  s->tcp_writing = true;
  Arm(s, s->tcp_fd, EPOLLOUT, EPOLL_CTL_ADD);
  return true;
}

void Worker::Start(Slot* s, uint64_t sched, bool measured, uint64_t now) {
  s->sched = sched;
  s->measured = measured;
  s->use_tcp = cfg().tcp;
  s->deadline = now + static_cast<uint64_t>(cfg().timeout * 1e9);
  // Spread logins over the users: open loop by global login number.
  uint64_t k = run_->open_loop() ? (next_k_ - 1) * cfg().threads + index_
                                 : closed_k_++ * cfg().threads + index_;
  s->user = k % princs_.size();
  inflight_++;
  ws_->inflight.store(inflight_, std::memory_order_relaxed);
  ws_->started_all.fetch_add(1, std::memory_order_relaxed);
  if (measured) ws_->started++;
  size_t sec = std::min(ws_->seconds.size() - 1,
                        static_cast<size_t>((now - run_->t0()) / kSec));
  ws_->seconds[sec].started++;
  s->phase = Phase::kAs;
  krb5_error_code ret =
      krb5_init_creds_init(ctx_, princs_[s->user], nullptr, nullptr, 0, opt_, &s->icc);
  if (!ret) ret = krb5_init_creds_set_keytab(ctx_, s->icc, kts_[s->user]);
  if (ret) {
    Finish(s, ret);
    return;
  }
  krb5_data empty = {0, 0, nullptr};
  Step(s, &empty);
}

// Feed a reply (or nothing, at the start) to the current state machine.
void Worker::Step(Slot* s, const krb5_data* in) {
  krb5_data out = {0, 0, nullptr}, realm = {0, 0, nullptr};
  unsigned int flags = 0;
  krb5_error_code ret;
  if (s->phase == Phase::kAs) {
    ret = krb5_init_creds_step(ctx_, s->icc, const_cast<krb5_data*>(in), &out,
                               &realm, &flags);
  } else {
    ret = krb5_tkt_creds_step(ctx_, s->tcc, const_cast<krb5_data*>(in), &out,
                              &realm, &flags);
  }
  krb5_free_data_contents(ctx_, &realm);
  if (ret == KRB5KRB_ERR_RESPONSE_TOO_BIG && out.length > 0 && !s->use_tcp) {
    // The KDC's reply did not fit a datagram: resend this request over TCP
    // (libkrb5's k5_init_creds_get does the same).
    s->use_tcp = true;
    ws_->tcp_fallbacks++;
    Send(s, out);
    krb5_free_data_contents(ctx_, &out);
    return;
  }
  if (ret) {
    krb5_free_data_contents(ctx_, &out);
    Finish(s, ret);
    return;
  }
  bool more = s->phase == Phase::kAs ? (flags & KRB5_INIT_CREDS_STEP_FLAG_CONTINUE)
                                     : (flags & KRB5_TKT_CREDS_STEP_FLAG_CONTINUE);
  if (more) {
    Send(s, out);
    krb5_free_data_contents(ctx_, &out);
    return;
  }
  krb5_free_data_contents(ctx_, &out);
  if (s->phase == Phase::kAs) {
    // A login counts only once the TGT is in hand.
    krb5_creds tgt;
    memset(&tgt, 0, sizeof(tgt));
    ret = krb5_init_creds_get_creds(ctx_, s->icc, &tgt);
    if (!ret && tgt.ticket.length == 0) ret = KRB5KRB_AP_ERR_MSG_TYPE;
    if (!ret && server_) {
      ret = krb5_cc_initialize(ctx_, s->cc, princs_[s->user]);
      if (!ret) ret = krb5_cc_store_cred(ctx_, s->cc, &tgt);
    }
    krb5_free_cred_contents(ctx_, &tgt);
    krb5_init_creds_free(ctx_, s->icc);
    s->icc = nullptr;
    if (ret || !server_) {
      Finish(s, ret);
      return;
    }
    krb5_creds in_creds;
    memset(&in_creds, 0, sizeof(in_creds));
    in_creds.client = princs_[s->user];
    in_creds.server = server_;
    ret = krb5_tkt_creds_init(ctx_, s->cc, &in_creds, KRB5_GC_NO_STORE, &s->tcc);
    if (ret) {
      Finish(s, ret);
      return;
    }
    s->phase = Phase::kTgs;
    krb5_data empty = {0, 0, nullptr};
    Step(s, &empty);
    return;
  }
  krb5_creds* creds = nullptr;
  krb5_creds st;
  memset(&st, 0, sizeof(st));
  ret = krb5_tkt_creds_get_creds(ctx_, s->tcc, &st);
  if (!ret && st.ticket.length == 0) ret = KRB5KRB_AP_ERR_MSG_TYPE;
  (void)creds;
  krb5_free_cred_contents(ctx_, &st);
  Finish(s, ret);
}

void Worker::Send(Slot* s, const krb5_data& out) {
  s->req.assign(out.data, out.length);
  ws_->requests++;
  if (s->use_tcp) {
    if (!OpenTcp(s)) Finish(s, errno ? errno : KRB5_KDC_UNREACH);
    return;
  }
  s->retx_gap = kSec;
  if (s->retransmitted) {
    // A duplicate reply to an earlier, retransmitted request could still
    // arrive and be taken for this one's: libkrb5's sendto_kdc uses a new
    // socket per request; so do we, after a retransmit.
    if (!OpenUdp(s)) {
      Finish(s, errno ? errno : KRB5_KDC_UNREACH);
      return;
    }
  }
  SendUdp(s);
}

void Worker::SendUdp(Slot* s) {
  // A full socket buffer is a lost datagram, as on the wire: the
  // retransmit timer covers it.
  (void)send(s->udp_fd, s->req.data(), s->req.size(), 0);
  s->next_retx = NowNs() + s->retx_gap;
}

void Worker::OnEvent(Slot* s, bool tcp, uint32_t events) {
  if (tcp) {
    if (s->phase != Phase::kIdle && s->tcp_fd >= 0) OnTcpEvent(s, events);
    return;
  }
  if (s->phase == Phase::kIdle || s->use_tcp) {
    // A late duplicate reply (to a retransmitted request): drain it.
    while (recv(s->udp_fd, buf_.data(), buf_.size(), 0) > 0) {
    }
    return;
  }
  OnUdpReadable(s);
}

void Worker::OnUdpReadable(Slot* s) {
  ssize_t n = recv(s->udp_fd, buf_.data(), buf_.size(), 0);
  if (n <= 0) return;  // ECONNREFUSED etc.: retransmit or time out, as kinit
  krb5_data in = {0, static_cast<unsigned int>(n), buf_.data()};
  if (IsStray(s, in)) {
    ws_->stray_replies++;
    return;  // not this request's reply: keep waiting
  }
  Step(s, &in);
}

// A well-formed reply that cannot answer this slot's request: an AS-REP or
// TGS-REP naming another client, a KRB-ERROR naming another client, or a
// reply of the other exchange.  Anything else (including what does not
// decode) goes to libkrb5, which judges it.  Clear-text fields only; the
// cost is one ASN.1 decode per reply.
bool Worker::IsStray(const Slot* s, const krb5_data& in) {
  if (in.length == 0) return false;
  const unsigned char tag = static_cast<unsigned char>(in.data[0]);
  krb5_principal client = nullptr;
  krb5_kdc_rep* rep = nullptr;
  krb5_error* err = nullptr;
  bool other_exchange = false;
  if (tag == 0x6b || tag == 0x6d) {  // [APPLICATION 11] AS-REP, [13] TGS-REP
    krb5_error_code ret = tag == 0x6b ? decode_krb5_as_rep(&in, &rep)
                                      : decode_krb5_tgs_rep(&in, &rep);
    if (ret) return false;
    other_exchange = (tag == 0x6b) != (s->phase == Phase::kAs);
    client = rep->client;
  } else if (tag == 0x7e) {  // [APPLICATION 30] KRB-ERROR
    if (decode_krb5_error(&in, &err)) return false;
    client = err->client;
  }
  bool stray = other_exchange ||
               (client != nullptr && !krb5_principal_compare(ctx_, client, princs_[s->user]));
  if (rep) krb5_free_kdc_rep(ctx_, rep);
  if (err) krb5_free_error(ctx_, err);
  return stray;
}

void Worker::OnTcpEvent(Slot* s, uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP) && s->tcp_writing) {
    CloseTcp(s);
    Finish(s, KRB5_KDC_UNREACH);
    return;
  }
  if (s->tcp_writing) {
    ssize_t n = write(s->tcp_fd, s->tcp_out.data() + s->tcp_off,
                      s->tcp_out.size() - s->tcp_off);
    if (n < 0) {
      if (errno == EAGAIN) return;
      CloseTcp(s);
      Finish(s, KRB5_KDC_UNREACH);
      return;
    }
    s->tcp_off += n;
    if (s->tcp_off == s->tcp_out.size()) {
      s->tcp_writing = false;
      Arm(s, s->tcp_fd, EPOLLIN, EPOLL_CTL_MOD);
    }
    return;
  }
  for (;;) {
    ssize_t n = read(s->tcp_fd, buf_.data(), buf_.size());
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      CloseTcp(s);
      Finish(s, KRB5_KDC_UNREACH);
      return;
    }
    s->tcp_in.append(buf_.data(), n);
    if (s->tcp_in.size() >= 4) {
      uint32_t len;
      memcpy(&len, s->tcp_in.data(), 4);
      len = ntohl(len);
      if (len > (1u << 20)) {  // hostile or broken length prefix
        CloseTcp(s);
        Finish(s, KRB5KRB_ERR_FIELD_TOOLONG);
        return;
      }
      if (s->tcp_in.size() >= 4 + static_cast<size_t>(len)) {
        std::string reply = s->tcp_in.substr(4, len);
        CloseTcp(s);
        krb5_data in = {0, len, reply.data()};
        Step(s, &in);
        return;
      }
    }
  }
}

void Worker::Finish(Slot* s, krb5_error_code code) {
  uint64_t now = NowNs();
  run_->Done(ws_, ctx_, s->sched, s->measured, code, now);
  if (s->icc) krb5_init_creds_free(ctx_, s->icc);
  if (s->tcc) krb5_tkt_creds_free(ctx_, s->tcc);
  s->icc = nullptr;
  s->tcc = nullptr;
  s->phase = Phase::kIdle;
  CloseTcp(s);
  inflight_--;
  ws_->inflight.store(inflight_, std::memory_order_relaxed);
  idle_.push_back(s);
}

void Worker::CheckTimers(uint64_t now) {
  while (!retired_.empty() && now - retired_.front().first >= kQuarantine) {
    close(retired_.front().second);
    retired_.pop_front();
  }
  for (Slot& s : slots_) {
    if (s.phase == Phase::kIdle) continue;
    if (now >= s.deadline) {
      // No answer within the timeout: kinit reports "Cannot contact any
      // KDC for realm".  A fresh socket so a late reply cannot be taken
      // for the next login's (the old one is retired, not closed).
      if (!s.use_tcp) OpenUdp(&s);
      CloseTcp(&s);
      Finish(&s, KRB5_KDC_UNREACH);
      continue;
    }
    if (!s.use_tcp && now >= s.next_retx) {
      s.retx_gap *= 2;
      s.retransmitted = true;
      ws_->retransmits++;
      SendUdp(&s);
    }
  }
}

void Worker::Loop() {
  std::vector<epoll_event> evs(256);
  uint64_t next_timer_check = 0;
  const uint64_t kTimerEvery = 5000000;  // 5 ms
  for (;;) {
    uint64_t now = NowNs();
    // Issue what is due.
    if (issuing_) {
      if (run_->open_loop()) {
        for (;;) {
          uint64_t k = next_k_ * cfg().threads + index_;
          uint64_t due = run_->Due(k);
          if (due > now) break;
          if (idle_.empty()) break;  // backlog: waits for a free slot
          bool measured;
          if (!run_->MayStart(due, now, &measured)) {
            issuing_ = false;
            // What the schedule wanted by now but never got a slot.
            if (!run_->stopped() && cfg().duration > 0) {
              uint64_t end = std::min(now, run_->issue_end());
              while (run_->Due(next_k_ * cfg().threads + index_) < end) {
                if (run_->Due(next_k_ * cfg().threads + index_) >= run_->warmup_end())
                  ws_->dropped++;
                next_k_++;
              }
            }
            break;
          }
          Slot* s = idle_.back();
          idle_.pop_back();
          next_k_++;
          Start(s, due, measured, now);
        }
      } else {
        while (!idle_.empty()) {
          if (idle_.back()->first_due > now) break;  // ramping up
          bool measured;
          if (!run_->MayStart(now, now, &measured)) {
            issuing_ = false;
            break;
          }
          Slot* s = idle_.back();
          idle_.pop_back();
          Start(s, now, measured, now);
        }
      }
    }
    if (!issuing_ && inflight_ == 0) break;
    if (run_->stopped() && !issuing_ && now > run_->hard_end() + kSec) break;
    if (now >= next_timer_check) {
      CheckTimers(now);
      next_timer_check = now + kTimerEvery;
    }
    // Sleep until the next event, the next due login or the next timer.
    uint64_t wake = next_timer_check;
    if (issuing_ && run_->open_loop() && !idle_.empty())
      wake = std::min(wake, run_->Due(next_k_ * cfg().threads + index_) +
                                cfg().tick_us * 1000);
    if (issuing_ && !run_->open_loop() && !idle_.empty() && idle_.back()->first_due > now)
      wake = std::min(wake, idle_.back()->first_due);
    now = NowNs();
    uint64_t wait = wake > now ? wake - now : 0;
    timespec ts{static_cast<time_t>(wait / kSec), static_cast<long>(wait % kSec)};
    int n = epoll_pwait2(ep_, evs.data(), static_cast<int>(evs.size()), &ts, nullptr);
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      uint32_t id = static_cast<uint32_t>(tag & (kTcpBit - 1));
      bool tcp = tag & kTcpBit;
      if (id >= slots_.size()) continue;
      if (tcp && slots_[id].tcp_gen != static_cast<uint32_t>(tag >> 32)) continue;
      OnEvent(&slots_[id], tcp, evs[i].events);
    }
  }
}

}  // namespace

void RunAsyncWorker(Run* run, int worker, WorkerStats* ws) {
  Worker w(run, worker, ws);
  if (!w.Init()) {
    run->Stop();
    return;
  }
  SleepUntil(run->t0());  // set-up time is not part of the storm
  w.Loop();
}

}  // namespace kmpc::storm
