// One classification of status codes for every side of kmpc: what the
// KDC module reports to krb5 and counts, whether a failure is the
// cluster's (the module's router tries another cluster; kmpc-admin stops
// a run), and whether a PutKey so answered stored nothing on that server.
//
// gRPC's and absl's status codes have the same numbers, so one table
// serves the servers' answers (grpc::Status) and the module's core
// statuses (absl::Status, whose meanings kdc-plugin/src/job.h fixes).
// Every code 0-16 has a row; a code outside that range is classified as
// kUnknown's row.
#ifndef KMPC_PROTO_STATUS_CLASS_H_
#define KMPC_PROTO_STATUS_CLASS_H_

#include "absl/status/status.h"

namespace kmpc::contract {

// The krb5 error a status becomes at the module's boundary (module.cc
// KrbErrorFromStatus maps these to krb5_error_code values).
enum class KrbClass {
  kNone,            // success
  kSvcUnavailable,  // KRB5KDC_ERR_SVC_UNAVAILABLE: the client may retry
  kUnknownKey,      // KRB5_KT_NOTFOUND: no shares for the key id
  kWrongCipher,     // KRB5_BAD_ENCTYPE
  kBadIntegrity,    // KRB5KRB_AP_ERR_BAD_INTEGRITY: a wrong password, a forgery
  kInvalid,         // EINVAL: a malformed job
  kInternal,        // KRB5_CRYPTO_INTERNAL
};

struct StatusClass {
  // The KDC module's metric label (kmpc_kdc_job_failures_total{cause}).
  const char* cause;
  KrbClass krb;
  // The module's router: the cluster failed, not the job (counted toward
  // its failover; kNotFound is a cluster answer, counted only for the job).
  bool kdc_cluster_failure;
  // kmpc-admin: the next principal or batch would fail the same way (a
  // server down, our certificate refused), so a run stops.
  bool admin_cluster_error;
  // The admin client: a PutKey answered so certainly stored nothing on
  // that server (refused before or by it).
  bool put_not_stored;
};

const StatusClass& ClassOf(absl::StatusCode code);

}  // namespace kmpc::contract

#endif  // KMPC_PROTO_STATUS_CLASS_H_
