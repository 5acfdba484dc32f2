// The module's kdc.conf options ([kdcmpc] -> kmpc), parsed as hostile
// input: every relation must be known and well-formed.
//
//   servers = HOST:PORT,HOST:PORT,HOST:PORT   the three parties, in party
//                        order (may also be given as three relations)
//   certs = DIR          ca.pem, kdc.pem, kdc.key from deploy/gen-certs.sh;
//   ca = / cert = / key = PATH   or each file on its own (these win)
//   servers2 = ..., certs2 = DIR (or ca2 / cert2 / key2)   a second MPC
//                        cluster holding the same keys under the same ids
//                        (kmpc-admin deals to every cluster); likewise 3
//                        and 4. A later cluster without mTLS relations of
//                        its own uses cluster 1's files. Jobs go to the
//                        first healthy cluster and fail over (router.h)
//   batch_window_ms = 100      flush the queue when its oldest job is this
//                              old (early_flush: only behind a batch in
//                              flight, with max_inflight > 1)
//   max_batch_jobs = 256       ... or when it holds this many jobs
//   max_batch_blocks = 16384   ... or this many AES blocks
//   early_flush = true         self-clocked batches: flush at once when no
//                              batch is in flight (batcher.h); false: every
//                              batch waits for batch_window_ms
//   coalesce_us = 500          early flush: wait this long for jobs
//                              submitted back to back
//   batch_hold_pct = 0         early flush: a queue that was waiting
//                              behind a Run batch waits after its end
//                              for up to this percentage of that batch's
//                              latency (at most batch_window_ms; none
//                              after a failed batch), until it holds as
//                              many jobs as that batch (batcher.h)
//   backlog_batch_jobs = 2048  a batch takes every waiting job up to this
//   backlog_batch_blocks = 65536   many jobs / AES blocks (batcher.h)
//   max_inflight = 2           batches in flight at once
//   gate_failures = 10         failed pre-authentications (gate DECRYPTs)
//   gate_failure_window_s = 3600   under one key id per window, past which
//                              its logins are refused until the window
//                              ends (gate_failures.h); 0: no bound
//   max_queue_jobs = 65536     jobs allowed to wait; more are refused
//                              (KRB5KDC_ERR_SVC_UNAVAILABLE)
//   deadline_ms = 3000         a batch not done by then fails (every job
//                              KRB5KDC_ERR_SVC_UNAVAILABLE)
//   debug = false              per-batch figures in the KDC log
//   metrics_addr = HOST:PORT   Prometheus /metrics over plain HTTP
//                              (kdc_metrics.h); unset = off. With
//                              krb5kdc -w only the first worker to bind
//                              serves it; a port in use is logged and
//                              costs only the metrics
//   speculate = true           an exchange's first Run prepares what the
//                              later items of its plan need (keystreams,
//                              PAC signature pads: planner.h); false: each
//                              later job is a Run of its own
//   chain_signatures = true    with speculate: a PAC's server signature
//                              and its KDC signature (over the first)
//                              under one key are one Sign item
//                              (planner.h, chained signatures)
//   speculate_max = 8192       prepared keystreams and pads held or on
//                              their way, at most
//   speculate_ttl_ms = 4000    an unused prepared keystream or pad is
//                              dropped after this; keep it well below the
//                              servers' --encrypt_state_ttl_ms (default
//                              10000) and their pad TTL
#ifndef KMPC_KDC_PLUGIN_OPTIONS_H_
#define KMPC_KDC_PLUGIN_OPTIONS_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batcher.h"
#include "client/cluster_config.h"

namespace kmpc::kdc {

// At most this many clusters (servers, servers2, ... servers4).
using client::kMaxClusters;

// One cluster: its servers in party order and the module's mTLS files
// (paths), as kmpc-admin's config names its clusters too.
using ClusterOptions = client::ClusterConfig;

struct ModuleOptions {
  // Cluster 1's (clusters[0]), as before there were several.
  std::array<std::string, 3> servers;
  std::string ca, cert, key;  // paths
  // Every configured cluster in order; clusters[0] is the primary.
  std::vector<ClusterOptions> clusters;
  std::string metrics_addr;   // empty: no HTTP /metrics
  BatcherOptions batcher;
};

absl::StatusOr<ModuleOptions> ParseOptions(
    const std::vector<std::string>& options);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_OPTIONS_H_
