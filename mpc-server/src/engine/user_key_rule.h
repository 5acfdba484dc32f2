// What the servers compute under a password-derived key (engine.h
// PasswordDerived: KeyKind::kUser, KeyKind::kUserService), under either
// family of ciphers: only what an AS exchange needs of it, the reply only
// on its gate (docs/security-model.md, "The servers enforce the gate").
// Every decision here is public and alike on the three parties: it reads
// the jobs (in the agreement's inputs digest) and the key's kind (in the
// agreed key view, keys.h EncodeKeyView), nothing secret.
#ifndef KMPC_ENGINE_USER_KEY_RULE_H_
#define KMPC_ENGINE_USER_KEY_RULE_H_

#include <cstddef>
#include <string>

#include "absl/types/span.h"
#include "engine/engine.h"

namespace kmpc::engine {

// A password-derived key's verifier released on its gate: an aes*-cts
// ENCRYPT with release_if_ok (CheckUserGate refuses one without) under
// usage 3 (the AS reply, the dealt key or a FAST reply key) or usage 55
// (the KDC's FAST challenge): what the servers' release bound counts
// (EngineOptions::cts_releases_per_minute). Each takes its token when its
// key is looked up (CtsReleaseLimiter::Take), so the replies of one Run,
// and of Runs in flight together, count against each other.
bool GatedUserReply(const Job& job, const KeyShares& key);

// Empty if aes*-cts job j of `jobs` may run under its key's kind, else
// why not (the job fails JOB_MALFORMED). A password-derived key's AS reply
// (an ENCRYPT under usage 3, the dealt key or a FAST reply key) and the
// KDC's FAST challenge (usage 55) are computed only when released on the
// DECRYPT of the same batch under the same key id that proves the client
// knows the key: the PA-ENC-TIMESTAMP (usage 1, the dealt key) or the FAST
// challenge (usage 54, a FAST key; the KDC challenge: only this). Which
// usages each direction takes at all is FindCtsMaterial's (cts_plan.h).
std::string CheckUserGate(absl::Span<const Job> jobs, size_t j, const KeyShares& key);

// Empty if aes*-ctr-mpc job j of `jobs` may run under a key of `kind`,
// else why not (the job fails JOB_MALFORMED before any AND). Under a
// password-derived key every job is refused but what a ctr-mpc AS exchange
// sends (krb5 patch 0017 kdc_mpc_as.c; docs/design/exchange-plan.md 1.5
// "AS"): the PA-ENC-TIMESTAMP's DECRYPT (usage 1), and, released on that
// DECRYPT in the same batch under the same key id (release_if_ok), the
// reply's keystream (ENCRYPT, usage 3) and the PA-REQ-ENC-PA-REP checksum
// (CHECKSUM, usage 56). The ctr-mpc keystream does not depend on the
// usage, so any other ENCRYPT, CHECKSUM or PAD would be an offline
// password verifier on demand for whoever holds the KDC's client
// certificate. A KeyKind::kUserService key also takes what a ticket to it
// needs, as its aes*-cts form does (kCtsServiceUsages): the ticket's
// keystream (ENCRYPT, usage 2) and its PAC's server signature (CHECKSUM or
// signing PAD, usage 17); never a DECRYPT under usage 2, a verification
// pad or VERIFY_CHECKSUM, nor a CAMMAC service verifier (64): refused under
// a password-derived aes*-cts key too (kCtsServiceDecryptUsages,
// kCtsServiceKeyChecksums). A ctr-mpc client has no FAST (the KDC refuses
// it: KRB-FX-CF2 of a ctr-mpc key has no circuit), so no FAST usage is
// taken.
std::string CheckCtrUserKey(absl::Span<const Job> jobs, size_t j, KeyKind kind);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_USER_KEY_RULE_H_
