// Tickets to kadmind whose service key the MPC cluster holds (kadmin/admin,
// kadmin/changepw, kiprop/*: an aes*-cts key handle in the KDB), decrypted
// in the cluster: one aes*-cts DECRYPT under key usage 2 (RFC 4120 section
// 7.5.1, the EncTicketPart), its C || T dealt as replicated XOR shares, so
// no single server sees the ciphertext, and conf || P revealed to kadmind
// only if the HMAC-SHA1-96 tag holds, checked inside the MPC
// (proto/kmpc.proto JobType; docs/design/cts-circuits.md). The servers run
// it only for keys dealt as KEY_KIND_SERVICE.
//
// libkrb5 calls this through the hook of krb5 patch 0026-Decrypt-tickets
// (krb5_mpc_set_ticket_decrypt, krb5/mpcdealer_plugin.h), which the dealer
// module registers when kadmind loads its kadm5_hook interface.
//
// KeyOps is the KDC's role on the servers (--keyops_clients): kadmind runs
// the DECRYPT as the KDC does, with the KDC's client certificate and
// servers from the same kdc.conf ([kdcmpc] kmpc: servers, certs or
// ca/cert/key; kdc-plugin/src/options.h), over the pinned channels every
// client uses (client/channels.h). The admin certificate stays Admin-only.
// Without a [kdcmpc] section, kmpc-admin's configuration is used.
#ifndef KMPC_DEALER_TICKET_DECRYPT_H_
#define KMPC_DEALER_TICKET_DECRYPT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/channels.h"
#include "kmpc.grpc.pb.h"
// Header-only: the KDC module's compile budget, not its sources.
#include "../src/compile_budget.h"

namespace kmpc::admin {

class TicketDecrypter {
 public:
  // The compile budget (docs/design/exchange-plan.md, "The compile
  // budget"): the servers compile a DECRYPT program per ciphertext length,
  // which whoever sends kadmind an AP-REQ chooses, valid ticket or not. A
  // length that no ticket verified under recently (the kProvenLengths most
  // recent per cipher) takes a token of a bucket of `unproven_per_minute`
  // refilled over a minute (0: no limit); without one Decrypt refuses
  // (kResourceExhausted) before anything is sent.
  static constexpr uint64_t kUnprovenPerMinute = 30;
  static constexpr size_t kProvenLengths = 16;
  static absl::StatusOr<std::unique_ptr<TicketDecrypter>> Open(
      const client::ClusterConfig& cfg, uint64_t unproven_per_minute = kUnprovenPerMinute);

  // Decrypts the RFC 3962 ciphertext `ct` (C || T) of a ticket under the
  // aes*-cts key `key_id` (cipher CIPHER_AES128_CTS or _AES256_CTS) and
  // writes P (the confounder stripped) to the first bytes of `out`, whose
  // size must be at least len(ct); *out_len is P's length. Errors:
  // kUnauthenticated: the tag did not verify (nothing revealed);
  // kNotFound: a server holds no such key, or no ticket material for it
  // (a user's key); kUnavailable / kDeadlineExceeded: a server; others:
  // the servers' answers disagree or are malformed. Messages name
  // servers, never a key, share or plaintext; every share is wiped.
  absl::Status Decrypt(kmpc::v1::Cipher cipher, const std::string& key_id,
                       absl::Span<const uint8_t> ct, absl::Span<uint8_t> out,
                       size_t* out_len);

 private:
  TicketDecrypter(client::ClusterChannels channels, uint64_t unproven_per_minute);
  using Length = std::pair<int, size_t>;  // cipher, len(C || T)
  // Whether `len` may go: proven, or a token taken.
  bool Admit(const Length& len);
  void Prove(const Length& len);
  absl::Status RunOnAll(const std::array<kmpc::v1::RunRequest, client::kParties>& reqs,
                        std::array<kmpc::v1::RunResponse, client::kParties>* resp);

  client::ClusterChannels channels_;
  const double per_minute_;
  std::mutex mu_;  // guards what follows
  kdc::RecentlyProven<Length, kProvenLengths> proven_;
  kdc::Budget budget_;
  std::array<std::unique_ptr<kmpc::v1::KeyOps::Stub>, client::kParties> stubs_;
};

}  // namespace kmpc::admin

#endif  // KMPC_DEALER_TICKET_DECRYPT_H_
