// aes*-ctr-mpc copies of users' password-derived keys (docs/security-model.md,
// "One door per password").
//
// The aes*-ctr-mpc string-to-key is RFC 3962's, so a user's aes256-ctr-mpc
// handle holds the same key as its aes256-cts-hmac-sha1-96 handle. Under
// the aes*-cts handle the servers see a login's timestamp and reply only
// as shares and gate the reply; under the aes*-ctr-mpc copy the
// timestamp's and the reply's ciphertexts reach every server whole: an
// offline verifier of the password for each server's operator. Realms
// made before kmpc dealt passwords under aes*-cts only (kadmin's
// supported_enctypes listed aes*-ctr-mpc for users) hold such copies.
//
// `kmpc-admin drop-user-ctr (--all | PRINC...) [--dry-run] [--grace-ms=N]`
// (on the KDC host): for each principal holding a copy (IsUserCtrCopy),
//   - if it also holds an aes*-cts handle at its current kvno, the copies
//     leave its KDB entry (one write; its other handles, kvnos and salts
//     stay) and, once the KDC can no longer have a job in flight under
//     them (--grace-ms, 5 s by default: kdcmpc's deadline_ms is 3 s), their
//     shares leave every server of every cluster;
//   - else it is named as needing a new password (kadmin cpw, kpasswd, or
//     kmpc-admin share --password-stdin --enctype=aes256-cts-hmac-sha1-96;
//     krb5's libkdb5 deals a password under aes*-cts for it), and left.
// A principal holding real keys beside its handles is left (share them
// first). Exit 0 when no copy is left, 1 otherwise (each reason printed),
// 2 on bad usage. --dry-run changes nothing and says what it would do.
// Names principals and key ids only: no key, share or password.
#ifndef KMPC_ADMIN_USER_CTR_H_
#define KMPC_ADMIN_USER_CTR_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "admin/kdb.h"
#include "kmpc.pb.h"

namespace kmpc::admin {

class Clusters;

// What the servers list of each key id (kmpc.proto KeyInfo).
using KeyInfos = std::map<std::string, kmpc::v1::KeyInfo>;

// Whether `e`, a key of principal `canon`, is an aes*-ctr-mpc copy of a
// user's key: a handle of an MPC enctype, on a principal that is not
// ticket-granting, whose key the servers list with a kind other than
// KEY_KIND_SERVICE (user, user+service, or none recorded: a record
// without a kind loads as a user's). A handle the servers do not list is
// not one (status --kdb reports it missing). Neither the KDB nor the
// servers record whether a key was random: a random key the dealer dealt
// as a user's kind (no pattern or kmpc_key_kind names the principal a
// service) counts as one; mark such principals service first.
bool IsUserCtrCopy(const std::string& canon, const KeyEntry& e, const KeyInfos& infos);

// status --kdb's line for a principal holding such copies, when kmpc-admin's
// config does not allow them (config.h user_ctr_mpc); true when there is
// none to print.
bool ReportUserCtr(const PrincipalInfo& info, const KeyInfos& infos);

struct DropUserCtrOptions {
  bool all = false;                  // every principal of the realm
  std::vector<std::string> principals;
  bool dry_run = false;
  absl::Duration grace = absl::Seconds(5);
};

// The command above; the exit code.
int DropUserCtr(Clusters& clusters, Kdb& kdb, const DropUserCtrOptions& options);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_USER_CTR_H_
