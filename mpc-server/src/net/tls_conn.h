// TLS 1.3 over TCP for the ring: contexts with mutual certificate
// authentication under one CA, and a non-blocking connection.
//
// Identities: a certificate's subject CN names its holder: "kmpc-party-0",
// "kmpc-party-1", "kmpc-party-2" for the servers (deploy/gen-certs.sh). Each
// end checks that the peer is exactly the party the ring position expects.
#ifndef KMPC_NET_TLS_CONN_H_
#define KMPC_NET_TLS_CONN_H_

#include <cstddef>
#include <cstdint>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;

namespace kmpc::net {

struct BufferedSocket;

std::string PartyIdentity(int party);  // "kmpc-party-<party>"

// SHA-256 of a certificate's DER SubjectPublicKeyInfo (RFC 5280 4.1.2.7;
// the value HPKP pinned, RFC 7469 2.4): it names the key, so it survives a
// re-issue of the certificate for the same key. Written
// "spki-sha256:<64 hex digits>" (colons between digits allowed), e.g. from
//   openssl x509 -in CERT -noout -pubkey | openssl pkey -pubin -outform DER
//     | openssl dgst -sha256
using SpkiPin = std::array<uint8_t, 32>;
// A comma-separated list of pins (several: during a key rotation); empty
// list: no pinning. INVALID_ARGUMENT for a malformed entry.
absl::StatusOr<std::vector<SpkiPin>> ParseSpkiPins(const std::string& list);
// The SHA-256 written in `entry` as `prefix` (any case) then 64 hex digits,
// colons between digits allowed (openssl's -fingerprint form): the ring's
// pins and KeyOps/Admin's certificate pins (service/auth.h). nullopt if
// malformed.
std::optional<std::array<uint8_t, 32>> ParseSha256Hex(absl::string_view entry,
                                                      absl::string_view prefix);
std::string SpkiPinString(const SpkiPin& pin);

struct TlsFiles {
  std::string cert;  // PEM certificate of this server
  std::string key;   // PEM private key
  std::string ca;    // PEM CA certificate that signed all parties
  // Optional further check of the peer's verified certificate, on both ends
  // (main.cc: not revoked by --crl, service/auth.h); an error refuses it.
  std::function<absl::Status(X509* peer)> check_peer;
};

// Owns an SSL_CTX. Server contexts require and verify a client certificate
// and issue no session tickets (the acceptor never writes after the
// handshake, so the dialer's socket turns readable only when the peer goes).
class TlsContext {
 public:
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(
      const TlsFiles& files, bool server);
  ~TlsContext();
  SSL_CTX* get() const { return ctx_; }
  const std::function<absl::Status(X509*)>& check_peer() const { return check_peer_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
  std::function<absl::Status(X509*)> check_peer_;
};

// A TLS connection on a non-blocking TCP socket.
class TlsConn {
 public:
  ~TlsConn();
  TlsConn(const TlsConn&) = delete;
  TlsConn& operator=(const TlsConn&) = delete;

  // Dials host:port, handshakes and checks the server's identity.
  static absl::StatusOr<std::unique_ptr<TlsConn>> Dial(
      const TlsContext& ctx, const std::string& host_port,
      const std::string& expected_identity, absl::Time deadline);
  // Handshakes an accepted socket (takes ownership of fd).
  static absl::StatusOr<std::unique_ptr<TlsConn>> Accept(const TlsContext& ctx,
                                                         int fd,
                                                         absl::Time deadline);

  // Subject CN of the verified peer certificate.
  const std::string& peer_identity() const { return peer_; }
  // SpkiPin of the verified peer certificate (taken in the handshake).
  const SpkiPin& peer_spki() const { return peer_spki_; }
  // Runs the context's check_peer (TlsFiles) on the peer's certificate
  // again, e.g. after a CRL reload: OK if there is no such check.
  absl::Status RecheckPeer() const;
  int fd() const { return fd_; }
  SSL* ssl() const { return ssl_; }

  // Blocking (poll-based) helpers with a deadline, for hello messages.
  absl::Status WriteAll(const uint8_t* p, size_t n, absl::Time deadline);
  absl::Status ReadAll(uint8_t* p, size_t n, absl::Time deadline);

  // True if the peer closed or reset the connection (a write-only
  // connection that turns readable is dead).
  bool PeerGone() const;
  // True if the peer has closed its side (FIN/RST), even if data remain.
  bool PeerClosed() const;

  // After the handshake (and hello), for the ring's bulk traffic: TLS
  // records go through user-space buffers instead of one read()/write()
  // each. Writes append whole records to an output buffer that FlushOut()
  // hands to the kernel in large write()s (one syscall and ~64 KiB TCP
  // segments instead of one of each per 16 KiB record); reads fill an input
  // buffer with one read() of up to kReadChunk bytes, and OpenSSL's
  // read-ahead is switched off (with it, OpenSSL memmoves the unread part
  // of its buffer for every record). Records OpenSSL has already buffered
  // are kept. At most max_out bytes wait in the output buffer: a write
  // past that (a peer that stopped reading) fails, and out_overflowed()
  // tells it from a socket error.
  void UseBufferedIo(size_t max_out = SIZE_MAX);
  static constexpr size_t kReadChunk = 256 * 1024;
  // Writes buffered output until none is left or the socket is full
  // (*blocked = true). UNAVAILABLE on a socket error.
  absl::Status FlushOut(bool* blocked);
  // Output written by OpenSSL but not yet by the kernel.
  size_t out_buffered() const;
  // Whether a write was refused because the output buffer reached
  // max_out (or could not grow).
  bool out_overflowed() const;
  // Input read from the socket that OpenSSL has not consumed yet.
  bool in_buffered() const;
  // After UseBufferedIo, for a connection this end only reads: the socket
  // turns blocking for reads that set_read_wait allows, each waiting up to
  // `slice` (SO_RCVTIMEO); every other read and every write stays
  // non-blocking (MSG_DONTWAIT). A receive that must wait then costs one
  // recv() that sleeps in the kernel instead of a read() that finds
  // nothing, a poll() and a second read(): at a ring round's size the
  // syscalls are much of its cost (docs/bench-log.md).
  void UseBlockingReads(absl::Duration slice);
  // Whether the next socket read OpenSSL makes may wait (up to the slice;
  // then it fails as EAGAIN would); it clears the permission, so a record
  // trickled in byte by byte cannot hold one SSL_read for more than one
  // slice. A no-op without UseBlockingReads.
  void set_read_wait(bool on);
  // Whether UseBlockingReads took effect.
  bool blocking_reads() const;

 private:
  TlsConn(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  absl::Status Handshake(bool client, absl::Time deadline);
  // The context's check_peer (TlsFiles) on a verified peer certificate.
  absl::Status CheckPeerCert(X509* cert) const;
  absl::Status Transfer(bool write, uint8_t* p, size_t n, absl::Time deadline);
  int fd_;
  SSL* ssl_;
  std::string peer_;
  SpkiPin peer_spki_{};
  BufferedSocket* io_ = nullptr;  // owned by the SSL's BIO (UseBufferedIo)
};

// Applies TCP_NODELAY, keepalive and buffer sizes; makes fd non-blocking.
void TuneSocket(int fd);

// Waits for `events` on fd until deadline: OK, or UNAVAILABLE on timeout.
absl::Status PollFd(int fd, short events, absl::Time deadline);

// Milliseconds left until deadline for poll(): 0 if past, rounded up.
int RemainingMs(absl::Time deadline);

}  // namespace kmpc::net

#endif  // KMPC_NET_TLS_CONN_H_
