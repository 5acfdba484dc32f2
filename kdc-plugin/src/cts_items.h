// Jobs and plan items under the aes*-cts ciphers (CIPHER_AES128_CTS,
// CIPHER_AES256_CTS: RFC 3962 aes*-cts-hmac-sha1-96 keys the cluster holds):
// which of them the module serves, and how their results differ from the
// ctr-mpc ones (docs/design/exchange-plan.md section 2,
// docs/design/cts-circuits.md "Jobs").
//
// Served: the AS exchange's TIMESTAMP (DECRYPT, usage 1) and REPLY
// (ENCRYPT, usage 3), both given at begin, the REPLY with the
// PA-REQ-ENC-PA-REP checksum (REQ_CHECKSUM, usage 56) spliced in
// (CtsSpliceProblem), FAST's CHALLENGE and KDC_CHALLENGE; and, outside any
// plan, the two
// jobs of a service ticket whose server is the key's principal, made by
// the TGS exchange's finishing round after the presented tickets were
// checked: the PAC server signature (CHECKSUM, usage 17) and the ticket
// (ENCRYPT, usage 2). And a ticket to such a service presented back: the
// TGS header ticket of a renewal or validation (the exchange's gate) and
// an S4U2Proxy evidence ticket (SECOND_TICKET), each a DECRYPT under
// usage 2 given at begin; the servers compute it for a key of the service
// kind only (kmpc.proto KeyKind). A DECRYPT's ciphertext is
// C || T (no ctr0), dealt as fresh XOR shares like a plaintext (whole, it
// is an offline password verifier: kmpc.proto JobType); the servers
// release conf || P only if the HMAC-SHA1-96
// tag holds, and the KDC gets P. An ENCRYPT's plaintext goes to the servers
// only as fresh XOR shares (kmpc.proto RunRequest.data_shares), its
// confounder is drawn by the servers, and the KDC gets the released value
// whole: conf' || CBC-CTS || 12-byte tag, what krb5_c_encrypt() gives. A
// CHECKSUM's message goes the same way, and the KDC gets the 12-byte
// hmac-sha1-96-aes128/256 value. No FINALIZE, no keystream.
#ifndef KMPC_KDC_PLUGIN_CTS_ITEMS_H_
#define KMPC_KDC_PLUGIN_CTS_ITEMS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "job.h"
#include "plan.h"

namespace kmpc::kdc {

// Whether job is under an aes*-cts cipher.
bool CtsJob(const Job& job);

// OK for a DECRYPT, ENCRYPT or CHECKSUM under an aes*-cts cipher;
// Unavailable (the KDC answers KDC_ERR_SVC_UNAVAILABLE) for the other
// types, which the module does not serve under those ciphers.
absl::Status CtsJobServed(const Job& job);

// Whether job, under an aes*-cts cipher, is served outside an exchange
// plan: only a service ticket's ENCRYPT under usage 2, its PAC server
// signature, a CHECKSUM under usage 17, and its CAMMAC service verifier,
// a CHECKSUM under usage 64 (RFC 7751; the servers compute it under a
// service's random key only). None has a gate to wait for (the KDC
// submits them once it has checked the request), and none returns
// anything a client asking for that ticket cannot test a password
// against (docs/security-model.md). The AS jobs need their plan (the
// reply is gated on the timestamp).
bool CtsServedUnplanned(const Job& job);

// A ticket signed in the cluster, as the KDC states it (kdcmpc_plugin.h
// submit_ticket's job fields; sign_cipher converted by module.cc).
struct TicketSigning {
  const uint8_t* pac = nullptr;  // the PAC, both signatures zeroed
  size_t pac_length = 0;
  uint64_t sig_offset = 0;  // the server signature's, in the ticket
  kmpc::v1::Cipher sign_cipher = kmpc::v1::CIPHER_UNSPECIFIED;  // the krbtgt's
  const unsigned char* sign_key_id = nullptr;  // contract::kKeyIdSize bytes
};

// kmpc.proto Job.sign_pad: `job`, an aes*-cts ENCRYPT under usage 2, takes
// the PAC and its HMAC inner padding as its splice, the server signature's
// offset as splice_offset, and the aes*-ctr-mpc krbtgt whose PAD makes
// the KDC signature (queued with it: dispatcher.cc Submit).
// InvalidArgument if it is no such ticket; the servers check the rest
// (contract::CheckJob, keys.cc CheckSignPad).
absl::Status SignTicketInCluster(Job* job, const TicketSigning& t);

// Why plan item p under an aes*-cts cipher is not served (empty: it is):
// only TIMESTAMP, REPLY, FAST's CHALLENGE and KDC_CHALLENGE, REQ_CHECKSUM,
// HEADER_TICKET and SECOND_TICKET, given at begin, and the REPLY exact.
std::string CtsItemProblem(const PlanItem& p);

// Why the splice of item i of plan, or into it, is not served (empty: it
// is, or there is none). The one splice served (kmpc.proto
// Job.splice_length, RFC 6806 section 11): a given, exact aes*-cts REPLY
// (ENCRYPT, usage 3) under the dealt key takes the checksum of a given
// REQ_CHECKSUM item (CHECKSUM, usage 56) of the same key id and cipher, of
// a nonempty message, into its plaintext's bytes
// [splice_offset, +12). Such a REQ_CHECKSUM is spliced into exactly one
// REPLY and is never a job of its own (its checksum is a password
// verifier: never released); an aes*-cts REQ_CHECKSUM that is not spliced
// is refused.
std::string CtsSpliceProblem(const Plan& plan, size_t i);

// Whether the agreed public result of request job k under an aes*-cts
// cipher is well formed: JOB_OK (either type) or JOB_INTEGRITY_FAILED (a
// DECRYPT's tag); OK also for a failure status (it fails the job alone).
// Aborted otherwise.
absl::Status CtsCheckResult(const Job& job, kmpc::v1::JobStatus status, int k);

// The result handed to the KDC from the revealed value of a JOB_OK
// aes*-cts job, in place: a DECRYPT's conf || P becomes P (the confounder
// wiped); an ENCRYPT's value is already its ciphertext, a CHECKSUM's its
// 12-byte checksum. Aborted if the
// value has not the length the contract gives (contract::RevealedBytes).
absl::Status CtsResult(const Job& job, SecureBytes* value);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_CTS_ITEMS_H_
