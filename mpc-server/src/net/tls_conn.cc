#include "net/tls_conn.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/hex.h"

namespace kmpc::net {
namespace {

std::string SslErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("unknown TLS error") : out;
}

// An SSL object of `ctx` on `fd` (Connect, Accept); closes fd if it cannot.
absl::StatusOr<SSL*> NewSsl(const TlsContext& ctx, int fd) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) {
    close(fd);
    return absl::InternalError("SSL_new: " + SslErrors());
  }
  SSL_set_fd(ssl, fd);
  return ssl;
}

}  // namespace

// The state of a buffered socket BIO (TlsConn::UseBufferedIo). Holds TLS
// records only (ciphertext), never plaintext.
struct BufferedSocket {
  int fd = -1;
  bool eof = false;
  std::vector<uint8_t> in;  // kReadChunk bytes
  size_t in_pos = 0, in_end = 0;
  // Output: bytes [out_pos, out_len) of out (capacity out_cap) wait for
  // the kernel. Not a vector: growing one value-initialises (memsets).
  std::unique_ptr<uint8_t[]> out;
  size_t out_pos = 0, out_len = 0, out_cap = 0;
  // Invariant: out_len - out_pos <= max_out. A write past it is refused
  // (overflow set), as is one whose allocation fails: BsWrite then fails
  // the SSL_write, nothing throws through OpenSSL's C frames.
  size_t max_out = SIZE_MAX;
  bool overflow = false;
  // UseBlockingReads: the socket is blocking; a read waits only while
  // `wait` is set, every other socket call passes MSG_DONTWAIT.
  bool blocking = false;
  bool wait = false;

  bool Append(const void* data, size_t len) {
    if (len > max_out - (out_len - out_pos)) {
      overflow = true;
      return false;
    }
    if (out_len + len > out_cap) {
      if (out_pos > 0) {  // compact first
        std::memmove(out.get(), out.get() + out_pos, out_len - out_pos);
        out_len -= out_pos;
        out_pos = 0;
      }
      if (out_len + len > out_cap) {
        // Doubling, but never past the cap (out_len + len <= max_out here).
        const size_t cap = std::max(
            out_len + len, std::min(out_cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * out_cap,
                                    max_out));
        std::unique_ptr<uint8_t[]> bigger(new (std::nothrow) uint8_t[cap]);
        if (bigger == nullptr) {
          overflow = true;
          return false;
        }
        if (out_len > 0) std::memcpy(bigger.get(), out.get(), out_len);
        out = std::move(bigger);
        out_cap = cap;
      }
    }
    std::memcpy(out.get() + out_len, data, len);
    out_len += len;
    return true;
  }
};

namespace {

BufferedSocket* Bs(BIO* b) { return static_cast<BufferedSocket*>(BIO_get_data(b)); }

int BsWrite(BIO* b, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(b);
  BufferedSocket* s = Bs(b);
  if (s == nullptr || !s->Append(data, len)) return 0;  // no retry flag: fatal
  *written = len;
  return 1;
}

int BsRead(BIO* b, char* data, size_t len, size_t* readbytes) {
  BIO_clear_retry_flags(b);
  *readbytes = 0;
  BufferedSocket* s = Bs(b);
  if (s == nullptr || len == 0) return 0;
  if (s->in_pos == s->in_end) {
    s->in_pos = s->in_end = 0;
    ssize_t r;
    do {
      r = recv(s->fd, s->in.data(), s->in.size(),
               s->blocking && s->wait ? 0 : MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    // One wait per set_read_wait: OpenSSL reads a record's bytes in a
    // loop of its own, with no deadline, so a peer trickling a record
    // byte by byte would hold a reader that waited for every byte. The
    // rest of the record is then read without waiting; its caller
    // (TlsRingChannel::Pump) checks the deadline before it waits again.
    s->wait = false;
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
      return 0;
    }
    if (r == 0) {
      s->eof = true;
      return 0;
    }
    s->in_end = static_cast<size_t>(r);
  }
  const size_t n = std::min(len, s->in_end - s->in_pos);
  std::memcpy(data, s->in.data() + s->in_pos, n);
  s->in_pos += n;
  *readbytes = n;
  return 1;
}

long BsCtrl(BIO* b, int cmd, long num, void*) {
  BufferedSocket* s = Bs(b);
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // FlushOut() writes; OpenSSL need not wait for it
    case BIO_CTRL_PENDING:
      return s == nullptr ? 0 : static_cast<long>(s->in_end - s->in_pos);
    case BIO_CTRL_WPENDING:
      return s == nullptr ? 0 : static_cast<long>(s->out_len - s->out_pos);
    case BIO_CTRL_EOF:
      return s != nullptr && s->eof && s->in_pos == s->in_end;
    case BIO_CTRL_GET_CLOSE:
      return BIO_get_shutdown(b);
    case BIO_CTRL_SET_CLOSE:
      BIO_set_shutdown(b, static_cast<int>(num));
      return 1;
    default:
      return 0;
  }
}

int BsCreate(BIO* b) {
  BIO_set_init(b, 0);
  BIO_set_data(b, nullptr);
  return 1;
}

int BsDestroy(BIO* b) {
  delete Bs(b);
  BIO_set_data(b, nullptr);
  BIO_set_init(b, 0);
  return 1;
}

const BIO_METHOD* BufferedSocketMethod() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                 "kmpc buffered socket");
    if (m == nullptr) return static_cast<BIO_METHOD*>(nullptr);
    BIO_meth_set_write_ex(m, BsWrite);
    BIO_meth_set_read_ex(m, BsRead);
    BIO_meth_set_ctrl(m, BsCtrl);
    BIO_meth_set_create(m, BsCreate);
    BIO_meth_set_destroy(m, BsDestroy);
    return m;
  }();
  return method;
}

}  // namespace

void TlsConn::UseBufferedIo(size_t max_out) {
  if (io_ != nullptr) return;
  const BIO_METHOD* m = BufferedSocketMethod();
  BIO* b = m == nullptr ? nullptr : BIO_new(m);
  if (b == nullptr) return;  // keep the socket BIO: slower, still correct
  auto* s = new BufferedSocket;
  s->fd = fd_;
  s->in.resize(kReadChunk);
  s->max_out = max_out;
  BIO_set_data(b, s);
  BIO_set_init(b, 1);
  // One reference, used as both rbio and wbio; the socket BIO SSL_set_fd
  // made is freed (BIO_NOCLOSE: the descriptor stays ours).
  SSL_set_bio(ssl_, b, b);
  SSL_set_read_ahead(ssl_, 0);
  io_ = s;
}

absl::Status TlsConn::FlushOut(bool* blocked) {
  *blocked = false;
  if (io_ == nullptr) return absl::OkStatus();
  BufferedSocket& s = *io_;
  while (s.out_pos < s.out_len) {
    ssize_t r = send(fd_, s.out.get() + s.out_pos, s.out_len - s.out_pos,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      s.out_pos += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      *blocked = true;
      break;
    }
    return absl::UnavailableError(
        absl::StrCat("ring: send: ", r < 0 ? strerror(errno) : "no progress"));
  }
  if (s.out_pos == s.out_len) s.out_pos = s.out_len = 0;
  return absl::OkStatus();
}

void TlsConn::UseBlockingReads(absl::Duration slice) {
  if (io_ == nullptr || io_->blocking) return;
  timeval tv = absl::ToTimeval(slice);
  const int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
    return;  // stays non-blocking: reads never wait, as before
  if (fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) return;
  io_->blocking = true;
}

void TlsConn::set_read_wait(bool on) {
  if (io_ != nullptr) io_->wait = on;
}

bool TlsConn::blocking_reads() const { return io_ != nullptr && io_->blocking; }

size_t TlsConn::out_buffered() const {
  return io_ == nullptr ? 0 : io_->out_len - io_->out_pos;
}

bool TlsConn::out_overflowed() const { return io_ != nullptr && io_->overflow; }

bool TlsConn::in_buffered() const {
  return io_ != nullptr && io_->in_pos < io_->in_end;
}

int RemainingMs(absl::Time deadline) {
  absl::Duration d = deadline - absl::Now();
  if (d <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(d) + 1;
  return ms > 1'000'000 ? 1'000'000 : static_cast<int>(ms);
}

std::string PartyIdentity(int party) { return absl::StrCat("kmpc-party-", party); }

std::optional<std::array<uint8_t, 32>> ParseSha256Hex(absl::string_view entry,
                                                      absl::string_view prefix) {
  if (!absl::StartsWithIgnoreCase(entry, prefix)) return std::nullopt;
  const std::string hex = absl::StrReplaceAll(entry.substr(prefix.size()), {{":", ""}});
  std::string raw;
  if (hex.size() != 64 || !util::HexToBytes(hex, &raw)) return std::nullopt;
  std::array<uint8_t, 32> out;
  std::memcpy(out.data(), raw.data(), out.size());
  return out;
}

absl::StatusOr<std::vector<SpkiPin>> ParseSpkiPins(const std::string& list) {
  std::vector<SpkiPin> pins;
  for (absl::string_view e : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    e = absl::StripAsciiWhitespace(e);
    const std::optional<SpkiPin> pin = ParseSha256Hex(e, "spki-sha256:");
    if (!pin)
      return absl::InvalidArgumentError(absl::StrCat(
          "ring pin '", e, "' is not spki-sha256: followed by 32 bytes of hex"));
    pins.push_back(*pin);
  }
  return pins;
}

std::string SpkiPinString(const SpkiPin& pin) {
  return absl::StrCat("spki-sha256:",
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(pin.data()), pin.size())));
}

void TuneSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 10, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

absl::Status PollFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = RemainingMs(deadline);
    int rc = poll(&p, 1, ms);
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::UnavailableError("ring: timed out");
    if (errno != EINTR)
      return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
  }
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(
    const TlsFiles& files, bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + SslErrors());
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  out->check_peer_ = files.check_peer;
  SSL_CTX_set_app_data(ctx, out.get());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load certificate ", files.cert, ": ", SslErrors()));
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load private key ", files.key, ": ", SslErrors()));
  if (SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load CA ", files.ca, ": ", SslErrors()));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (server) SSL_CTX_set_num_tickets(ctx, 0);
  // Ring throughput: AES-128-GCM first (OpenSSL's default TLS 1.3 order puts
  // AES-256-GCM first: 14 AES rounds per block instead of 10), and
  // read-ahead so one read() brings in several records instead of two
  // reads per record (header, body). Not much more than a few records:
  // OpenSSL memmoves the unread rest of its buffer to the front for every
  // record, so that copy grows with the buffer (TlsConn::UseBufferedIo
  // replaces this path for the ring's bulk traffic).
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 65536);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsConn::~TlsConn() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (fd_ >= 0) close(fd_);
}

bool TlsConn::PeerGone() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  int rc = poll(&p, 1, 0);
  return rc != 0;
}

bool TlsConn::PeerClosed() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 &&
         (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

absl::Status TlsConn::Handshake(bool client, absl::Time deadline) {
  for (;;) {
    ERR_clear_error();
    int rc = client ? SSL_connect(ssl_) : SSL_accept(ssl_);
    if (rc == 1) break;
    int err = SSL_get_error(ssl_, rc);
    absl::Status st;
    if (err == SSL_ERROR_WANT_READ) {
      st = PollFd(fd_, POLLIN, deadline);
    } else if (err == SSL_ERROR_WANT_WRITE) {
      st = PollFd(fd_, POLLOUT, deadline);
    } else {
      return absl::UnavailableError("TLS handshake failed: " + SslErrors());
    }
    if (!st.ok()) return absl::UnavailableError("TLS handshake timed out");
  }
  if (SSL_get_verify_result(ssl_) != X509_V_OK)
    return absl::UnauthenticatedError("peer certificate not verified");
  X509* cert = SSL_get1_peer_certificate(ssl_);
  if (cert == nullptr)
    return absl::UnauthenticatedError("peer presented no certificate");
  if (absl::Status st = CheckPeerCert(cert); !st.ok()) {
    X509_free(cert);
    return st;
  }
  unsigned char* der = nullptr;
  const int der_len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
  unsigned int md_len = 0;
  const bool hashed = der_len > 0 &&
                      EVP_Digest(der, static_cast<size_t>(der_len), peer_spki_.data(),
                                 &md_len, EVP_sha256(), nullptr) == 1 &&
                      md_len == peer_spki_.size();
  OPENSSL_free(der);
  if (!hashed) {
    X509_free(cert);
    return absl::InternalError("cannot hash the peer's public key");
  }
  char cn[256] = {0};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName,
                                    cn, sizeof(cn));
  X509_free(cert);
  if (n <= 0) return absl::UnauthenticatedError("peer certificate has no CN");
  peer_.assign(cn, n);
  return absl::OkStatus();
}

absl::Status TlsConn::CheckPeerCert(X509* cert) const {
  const auto* tc =
      static_cast<const TlsContext*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl_)));
  if (tc == nullptr || !tc->check_peer()) return absl::OkStatus();
  return tc->check_peer()(cert);
}

absl::Status TlsConn::RecheckPeer() const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr)
    return absl::UnauthenticatedError("peer presented no certificate");
  return CheckPeerCert(cert);
}

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Dial(
    const TlsContext& ctx, const std::string& host_port,
    const std::string& expected_identity, absl::Time deadline) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError("address must be host:port: " + host_port);
  std::string host = host_port.substr(0, colon);
  std::string port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("resolve ", host_port, ": ", gai_strerror(rc)));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  TuneSocket(fd);
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", host_port, ": ", strerror(e)));
  }
  if (rc != 0) {
    if (!PollFd(fd, POLLOUT, deadline).ok()) {
      close(fd);
      return absl::UnavailableError("connect " + host_port + ": timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("connect ", host_port, ": ", strerror(err)));
    }
  }
  absl::StatusOr<SSL*> ssl = NewSsl(ctx, fd);
  if (!ssl.ok()) return ssl.status();
  std::unique_ptr<TlsConn> conn(new TlsConn(fd, *ssl));
  // Certificates carry SAN 127.0.0.1/localhost, but the ring authenticates
  // the party by its CN below; no hostname check needed.
  if (absl::Status st = conn->Handshake(/*client=*/true, deadline); !st.ok())
    return st;
  if (conn->peer_ != expected_identity)
    return absl::PermissionDeniedError(absl::StrCat(
        "ring peer at ", host_port, " is '", conn->peer_, "', expected '",
        expected_identity, "'"));
  return conn;
}

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Accept(const TlsContext& ctx,
                                                         int fd,
                                                         absl::Time deadline) {
  TuneSocket(fd);
  absl::StatusOr<SSL*> ssl = NewSsl(ctx, fd);
  if (!ssl.ok()) return ssl.status();
  std::unique_ptr<TlsConn> conn(new TlsConn(fd, *ssl));
  if (absl::Status st = conn->Handshake(/*client=*/false, deadline); !st.ok())
    return st;
  return conn;
}

// Blocking transfer of exactly n bytes on the non-blocking socket, polling
// for whatever OpenSSL asks for (a TLS read may need a write and back).
absl::Status TlsConn::Transfer(bool write, uint8_t* p, size_t n,
                               absl::Time deadline) {
  while (n > 0) {
    ERR_clear_error();
    int rc = write ? SSL_write(ssl_, p, static_cast<int>(n))
                   : SSL_read(ssl_, p, static_cast<int>(n));
    if (rc > 0) {
      p += rc;
      n -= rc;
      continue;
    }
    int err = SSL_get_error(ssl_, rc);
    absl::Status st;
    if (err == SSL_ERROR_WANT_WRITE) st = PollFd(fd_, POLLOUT, deadline);
    else if (err == SSL_ERROR_WANT_READ) st = PollFd(fd_, POLLIN, deadline);
    else return absl::UnavailableError(write ? "TLS write failed"
                                             : "TLS connection closed");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status TlsConn::WriteAll(const uint8_t* p, size_t n, absl::Time deadline) {
  return Transfer(/*write=*/true, const_cast<uint8_t*>(p), n, deadline);
}

absl::Status TlsConn::ReadAll(uint8_t* p, size_t n, absl::Time deadline) {
  return Transfer(/*write=*/false, p, n, deadline);
}

}  // namespace kmpc::net
