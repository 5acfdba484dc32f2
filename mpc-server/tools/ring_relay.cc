// kmpc-ring-relay: integration-tests/bench/ring_relay.py in C++, with the
// same command line, behaviour and control protocol (that file's docstring
// is the reference; ring_delay.py starts this one when it is built). A TCP
// relay that holds every chunk for a one-way delay in both directions,
// order kept: an MPC ring link between emulated server rooms where the
// kernel has no sch_netem. A bench tool: libc and libstdc++ only.
//
//   kmpc-ring-relay --listen HOST:PORT --to HOST:PORT --control PATH
//                   [--delay-ms D]
//
// Every accepted connection gets a connection of its own to --to (and to
// nowhere else). Bytes that reached a socket at time t (the kernel's
// SO_TIMESTAMPNS receive timestamp) are written to the other side at
// t + delay, or later when the bytes read before them on that side are not
// written yet: each direction is a FIFO. The Unix stream socket --control
// takes one line per connection:
//   "delay MS"  -> "ok MS"
//   "stats"     -> one JSON line: lateness (write time minus due time) and
//                  read lag (read time minus arrival) as n, p50/p90/p99/max
//                  in us, the chunks and bytes forwarded since the last
//                  "stats", the connections, the lead
//   "ping"      -> "ok"
// One thread around ppoll() (nanosecond timeout) with the timer slack at
// 1 ns; a timed wake-up asks to come early by the lead (the median of the
// last 64 oversleeps, at most 100 us and half the delay) and writes a chunk
// once it is due within the lead. SIGTERM (or SIGINT) ends it, the control
// socket removed; SIGTERM is only let in while ppoll() waits. SCHED_FIFO is
// the launcher's (ring_delay.py runs it under chrt when it can). Prints
// "listening HOST:PORT" when ready.
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr size_t kChunk = 1 << 18;
// A direction stops reading its source past this many queued bytes (the
// sender then sees TCP's own back-pressure).
constexpr size_t kMaxQueued = 64 << 20;
constexpr size_t kMaxSamples = 1 << 20;
constexpr int64_t kMaxLeadNs = 100'000;
constexpr double kMaxDelayMs = 1e9;  // what the ns clock holds with room
constexpr size_t kOversleeps = 64;
constexpr int kConnectTimeoutMs = 2000;
constexpr int kControlTimeoutS = 2;
constexpr int kBacklog = 128;
constexpr int kControlBacklog = 8;

volatile sig_atomic_t g_stop = 0;

void OnStop(int) { g_stop = 1; }

int64_t NowNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t Monotonic() { return NowNs(CLOCK_MONOTONIC); }

struct HostPort {
  std::string host;
  std::string port;
};

// "HOST:PORT" split at its last colon (as ring_relay.py's addr()).
bool ParseHostPort(const std::string& text, HostPort* out) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  out->host = text.substr(0, colon);
  out->port = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(out->port.c_str(), &end, 10);
  return !out->port.empty() && *end == '\0' && errno == 0 && port >= 0 && port <= 65535;
}

struct Options {
  HostPort listen;
  HostPort to;
  std::string control;
  double delay_ms = 0.0;
};

const char kUsage[] =
    "usage: kmpc-ring-relay --listen HOST:PORT --to HOST:PORT --control PATH "
    "[--delay-ms D]\n";

// Parses argv into *opts; on a bad command line prints why and returns false.
bool ParseArgs(int argc, char** argv, Options* opts) {
  static const option kLong[] = {{"listen", required_argument, nullptr, 'l'},
                                 {"to", required_argument, nullptr, 't'},
                                 {"control", required_argument, nullptr, 'c'},
                                 {"delay-ms", required_argument, nullptr, 'd'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  bool listen = false, to = false;
  int c;
  while ((c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1) {
    char* end = nullptr;
    switch (c) {
      case 'l': listen = ParseHostPort(optarg, &opts->listen); break;
      case 't': to = ParseHostPort(optarg, &opts->to); break;
      case 'c': opts->control = optarg; break;
      case 'd':
        opts->delay_ms = std::strtod(optarg, &end);
        if (*optarg == '\0' || *end != '\0' || !std::isfinite(opts->delay_ms)) {
          std::fprintf(stderr, "%skmpc-ring-relay: bad --delay-ms %s\n", kUsage, optarg);
          return false;
        }
        break;
      case 'h': std::fputs(kUsage, stdout); std::exit(0);
      default: std::fputs(kUsage, stderr); return false;
    }
  }
  if (!listen || !to || opts->control.empty() || optind != argc) {
    std::fprintf(stderr, "%skmpc-ring-relay: --listen and --to (HOST:PORT) and --control "
                 "are required\n", kUsage);
    return false;
  }
  return true;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "kmpc-ring-relay: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

int ListenTcp(const HostPort& at) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(at.host.empty() ? nullptr : at.host.c_str(), at.port.c_str(), &hints,
                       &res);
  if (rc != 0) {
    std::fprintf(stderr, "kmpc-ring-relay: %s: %s\n", at.host.c_str(), gai_strerror(rc));
    std::exit(1);
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) Die("socket");
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) Die("bind " + at.host + ":" + at.port);
  freeaddrinfo(res);
  if (listen(fd, kBacklog) != 0) Die("listen");
  return fd;
}

int ListenUnix(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    Die(path);
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  struct stat st;
  if (stat(path.c_str(), &st) == 0) unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) Die("bind " + path);
  if (listen(fd, kControlBacklog) != 0) Die("listen " + path);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// A connected non-blocking socket to one of at's addresses, each tried for
// at most kConnectTimeoutMs; -1 when none answers.
int Dial(const HostPort& at) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(at.host.c_str(), at.port.c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      pollfd p{fd, POLLOUT, 0};
      if (err == EINPROGRESS && poll(&p, 1, kConnectTimeoutMs) == 1) {
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else if (err == EINPROGRESS) {
        err = ETIMEDOUT;
      }
    }
    if (err != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

void TuneRelayed(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

// Python's repr of a float as json.dumps writes it: shortest round trip,
// ".0" added to an integral value.
std::string JsonFloat(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// round(us, 1) as ring_relay.py reports a duration.
std::string Us1(int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(ns) / 1e3);
  return buf;
}

// {"n", "p50_us", "p90_us", "p99_us", "max_us"} of samples (ns), as
// ring_relay.py's percentiles_us; sorts samples.
std::string Percentiles(std::vector<int64_t>& xs) {
  if (xs.empty()) return "{\"n\": 0}";
  std::sort(xs.begin(), xs.end());
  auto at = [&xs](double q) {
    size_t i = std::min(xs.size() - 1, static_cast<size_t>(q * static_cast<double>(xs.size())));
    return Us1(xs[i]);
  };
  return "{\"n\": " + std::to_string(xs.size()) + ", \"p50_us\": " + at(0.5) +
         ", \"p90_us\": " + at(0.9) + ", \"p99_us\": " + at(0.99) +
         ", \"max_us\": " + Us1(xs.back()) + "}";
}

struct Chunk {
  int64_t due;
  std::string data;
};

// One way of one relayed connection. Invariant: queue holds chunks in read
// order; sent counts the head's bytes already written.
struct Direction {
  int src = -1;
  int dst = -1;
  std::deque<Chunk> queue;
  size_t queued = 0;
  size_t sent = 0;
  bool eof = false;
  bool blocked = false;  // dst's buffer was full: wait until writable
  bool shut = false;

  bool Readable() const { return !eof && queued < kMaxQueued; }
};

struct Pair {
  Direction d[2];  // a->b, b->a
};

class Relay {
 public:
  Relay(int lsock, int ctl, HostPort to, double delay_ms)
      : lsock_(lsock), ctl_(ctl), to_(std::move(to)), buf_(kChunk) {
    SetDelay(delay_ms);
  }

  // One round of the loop: wait for a socket or the next chunk's due time
  // (less the lead), then accept, answer the control socket, read what is
  // readable and write what is due. Returns at once on a signal.
  void Step(const sigset_t* wait_mask);

 private:
  void SetDelay(double ms) {
    delay_ = std::clamp(ms, 0.0, kMaxDelayMs) / 1e3;
    delay_ns_ = std::llround(delay_ * 1e9);
    oversleeps_.clear();
    lead_ns_ = 0;
  }
  void Accept();
  bool Read(Direction& d, int64_t now);
  bool Write(Direction& d, int64_t now);
  std::string Command(const std::string& line);
  std::string Stats();
  void Control();
  int64_t TimeoutNs(int64_t now) const;
  void Slept(int64_t asked, int64_t t0, int64_t now);
  void Sample(std::vector<int64_t>& xs, int64_t v) {
    if (xs.size() < kMaxSamples) xs.push_back(v);
  }

  int lsock_, ctl_;
  HostPort to_;
  double delay_ = 0.0;  // seconds, as ring_relay.py keeps it
  int64_t delay_ns_ = 0;
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::vector<int64_t> lateness_, read_lags_;
  uint64_t chunks_ = 0, bytes_ = 0;
  int64_t lead_ns_ = 0;  // how early a timed wake-up is asked for
  std::deque<int64_t> oversleeps_;
  std::vector<char> buf_;
};

void Relay::Accept() {
  int a = accept4(lsock_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (a < 0) return;
  int b = Dial(to_);
  if (b < 0) {
    close(a);  // the peer is not up: the server dials again
    return;
  }
  TuneRelayed(a);
  TuneRelayed(b);
  auto p = std::make_unique<Pair>();
  p->d[0].src = p->d[1].dst = a;
  p->d[0].dst = p->d[1].src = b;
  pairs_.push_back(std::move(p));
}

bool Relay::Read(Direction& d, int64_t now) {
  alignas(cmsghdr) char anc[CMSG_SPACE(sizeof(timespec))];
  iovec iov{buf_.data(), buf_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = anc;
  msg.msg_controllen = sizeof anc;
  ssize_t n = recvmsg(d.src, &msg, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) {
    d.eof = true;
    return true;
  }
  int64_t arrived = now;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
        c->cmsg_len < CMSG_LEN(sizeof(timespec))) {
      continue;
    }
    timespec ts;
    std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
    int64_t stamp = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
    int64_t lag = std::max<int64_t>(NowNs(CLOCK_REALTIME) - stamp, 0);
    arrived = Monotonic() - lag;
    Sample(read_lags_, lag);
  }
  d.queue.push_back({arrived + delay_ns_, std::string(buf_.data(), static_cast<size_t>(n))});
  d.queued += static_cast<size_t>(n);
  return true;
}

// Writes every due chunk of d; false when the connection broke.
bool Relay::Write(Direction& d, int64_t now) {
  while (!d.queue.empty() && d.queue.front().due - lead_ns_ <= now) {
    Chunk& head = d.queue.front();
    if (d.sent == 0) {
      Sample(lateness_, now - head.due);
      ++chunks_;
    }
    ssize_t n = send(d.dst, head.data.data() + d.sent, head.data.size() - d.sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      d.blocked = true;
      return true;
    }
    if (n < 0) return false;
    d.sent += static_cast<size_t>(n);
    bytes_ += static_cast<uint64_t>(n);
    if (d.sent < head.data.size()) {
      d.blocked = true;
      return true;
    }
    d.queued -= head.data.size();
    d.queue.pop_front();
    d.sent = 0;
  }
  d.blocked = false;
  if (d.eof && d.queue.empty() && !d.shut) {
    d.shut = true;
    shutdown(d.dst, SHUT_WR);
  }
  return true;
}

std::string Relay::Stats() {
  std::string out = "{\"delay_ms\": " + JsonFloat(delay_ * 1e3) +
                    ", \"chunks\": " + std::to_string(chunks_) +
                    ", \"bytes\": " + std::to_string(bytes_) +
                    ", \"connections\": " + std::to_string(pairs_.size()) +
                    ", \"lead_us\": " + Us1(lead_ns_) +
                    ", \"lateness\": " + Percentiles(lateness_) +
                    ", \"read_lag\": " + Percentiles(read_lags_) + "}";
  lateness_.clear();
  read_lags_.clear();
  chunks_ = bytes_ = 0;
  return out;
}

std::string Relay::Command(const std::string& line) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find_first_not_of(" \t\r\n\v\f", i);
    if (j == std::string::npos) break;
    i = line.find_first_of(" \t\r\n\v\f", j);
    words.push_back(line.substr(j, i == std::string::npos ? std::string::npos : i - j));
  }
  if (words.size() == 2 && words[0] == "delay") {
    char* end = nullptr;
    double ms = std::strtod(words[1].c_str(), &end);
    if (*end != '\0' || !std::isfinite(ms)) {
      return "error: could not convert string to float: '" + words[1] + "'";
    }
    SetDelay(ms);
    char buf[64];
    std::snprintf(buf, sizeof buf, "ok %g", delay_ * 1e3);
    return buf;
  }
  if (words.size() == 1 && words[0] == "stats") return Stats();
  if (words.size() == 1 && words[0] == "ping") return "ok";
  return "error: delay MS | stats | ping";
}

// One control connection: a line in, a line out, each side given
// kControlTimeoutS (the loop waits meanwhile, as ring_relay.py's does).
void Relay::Control() {
  int c = accept4(ctl_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return;
  timeval tv{kControlTimeoutS, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string line;
  std::string reply;
  char part[4096];
  while (line.empty() || line.back() != '\n') {
    ssize_t n = recv(c, part, sizeof part, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      bool late = errno == EAGAIN || errno == EWOULDBLOCK;
      reply = std::string("error: ") + (late ? "timed out" : std::strerror(errno));
      break;
    }
    if (n == 0) break;
    line.append(part, static_cast<size_t>(n));
  }
  if (reply.empty()) reply = Command(line);
  reply += "\n";
  for (size_t off = 0; off < reply.size();) {
    ssize_t n = send(c, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(c);
}

// ns until the next due chunk less the lead (at least 0), -1 for none.
int64_t Relay::TimeoutNs(int64_t now) const {
  int64_t due = INT64_MAX;
  for (const auto& p : pairs_) {
    for (const Direction& d : p->d) {
      if (!d.queue.empty() && !d.blocked) due = std::min(due, d.queue.front().due);
    }
  }
  return due == INT64_MAX ? -1 : std::max<int64_t>(due - lead_ns_ - now, 0);
}

// A wait that timed out after asking for `asked` ns: its oversleep updates
// the lead.
void Relay::Slept(int64_t asked, int64_t t0, int64_t now) {
  oversleeps_.push_back(now - t0 - asked);
  if (oversleeps_.size() > kOversleeps) oversleeps_.pop_front();
  std::vector<int64_t> xs(oversleeps_.begin(), oversleeps_.end());
  std::nth_element(xs.begin(), xs.begin() + static_cast<long>(xs.size() / 2), xs.end());
  lead_ns_ = std::min({std::max<int64_t>(xs[xs.size() / 2], 0), kMaxLeadNs, delay_ns_ / 2});
}

void Relay::Step(const sigset_t* wait_mask) {
  int64_t now = Monotonic();
  std::vector<pollfd> fds = {{lsock_, POLLIN, 0}, {ctl_, POLLIN, 0}};
  for (const auto& p : pairs_) {
    for (int k = 0; k < 2; ++k) {  // socket k: src of d[k], dst of d[1 - k]
      short ev = static_cast<short>((p->d[k].Readable() ? POLLIN : 0) |
                                    (p->d[1 - k].blocked ? POLLOUT : 0));
      fds.push_back({ev != 0 ? p->d[k].src : -1, ev, 0});
    }
  }
  int64_t timeout = TimeoutNs(now);
  timespec ts{static_cast<time_t>(timeout / 1'000'000'000),
              static_cast<long>(timeout % 1'000'000'000)};
  int rc = ppoll(fds.data(), fds.size(), timeout < 0 ? nullptr : &ts, wait_mask);
  int64_t t0 = now;
  now = Monotonic();
  if (rc < 0) return;  // a signal: the caller looks at g_stop
  if (rc == 0 && timeout > 0) Slept(timeout, t0, now);
  size_t polled = pairs_.size();
  if (fds[0].revents != 0) Accept();
  if (fds[1].revents != 0) Control();
  std::vector<std::unique_ptr<Pair>> kept;
  for (size_t i = 0; i < pairs_.size(); ++i) {
    Pair& p = *pairs_[i];
    bool ok = true;
    for (int k = 0; k < 2 && ok && i < polled; ++k) {
      if (fds[2 + 2 * i + k].revents != 0 && p.d[k].Readable()) ok = Read(p.d[k], now);
    }
    for (int k = 0; k < 2 && ok; ++k) ok = Write(p.d[k], Monotonic());
    if (ok && !(p.d[0].shut && p.d[1].shut)) {
      kept.push_back(std::move(pairs_[i]));
    } else {
      close(p.d[0].src);
      close(p.d[1].src);
    }
  }
  pairs_ = std::move(kept);
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  if (!ParseArgs(argc, argv, &opts)) return 2;
  signal(SIGPIPE, SIG_IGN);
  sigset_t stops, wait_mask;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  sigprocmask(SIG_BLOCK, &stops, &wait_mask);  // wait_mask: the mask before
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

  int lsock = ListenTcp(opts.listen);
  int ctl = ListenUnix(opts.control);
  Relay relay(lsock, ctl, opts.to, opts.delay_ms);
  std::printf("listening %s:%d\n", opts.listen.host.c_str(), BoundPort(lsock));
  std::fflush(stdout);
  while (!g_stop) relay.Step(&wait_mask);
  unlink(opts.control.c_str());
  return 0;
}
