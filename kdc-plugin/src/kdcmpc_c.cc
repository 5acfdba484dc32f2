// kdcmpc_c.h: the kdcmpc interface's jobs and plans as the core's.
#include "kdcmpc_c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cts_items.h"
#include "status_class.h"

namespace kmpc::kdc {

krb5_error_code KrbErrorFromStatus(const absl::Status& s) {
  switch (contract::ClassOf(s.code()).krb) {
    case contract::KrbClass::kNone: return 0;
    case contract::KrbClass::kSvcUnavailable: return KRB5KDC_ERR_SVC_UNAVAILABLE;
    case contract::KrbClass::kUnknownKey: return KRB5_KT_NOTFOUND;
    case contract::KrbClass::kWrongCipher: return KRB5_BAD_ENCTYPE;
    case contract::KrbClass::kBadIntegrity: return KRB5KRB_AP_ERR_BAD_INTEGRITY;
    case contract::KrbClass::kInvalid: return EINVAL;
    case contract::KrbClass::kInternal: break;
  }
  return KRB5_CRYPTO_INTERNAL;
}

char* Dup(const std::string& s) {
  char* p = static_cast<char*>(malloc(s.size() + 1));
  if (p != nullptr) memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

krb5_error_code JobOfC(const krb5_kdcmpc_job* job, krb5_kdcmpc_done_fn done,
                       Job* out, char** msg_out) {
  if (job == nullptr || job->key_id == nullptr || done == nullptr ||
      (job->input.length > 0 && job->input.data == nullptr) ||
      (job->checksum.length > 0 && job->checksum.data == nullptr)) {
    *msg_out = Dup("kdcmpc: malformed job");
    return EINVAL;
  }
  out->cipher = CipherOfEnctype(job->enctype);
  if (out->cipher == kmpc::v1::CIPHER_UNSPECIFIED) {
    *msg_out = Dup("kdcmpc: not an MPC enctype");
    return KRB5_BAD_ENCTYPE;
  }
  out->type = JobTypeOf(job->type);
  if (out->type == kmpc::v1::JOB_TYPE_UNSPECIFIED) {
    *msg_out = Dup("kdcmpc: unknown job type");
    return EINVAL;
  }
  // Under the aes*-cts ciphers the core serves DECRYPT, ENCRYPT and
  // CHECKSUM only (cts_items.h); the planner and Enqueue further limit
  // them to the AS exchange's items and a service ticket's two jobs.
  if (contract::CtsCipher(out->cipher)) {
    if (absl::Status st = CtsJobServed(*out); !st.ok()) {
      *msg_out = Dup(std::string(st.message()));
      return KRB5KDC_ERR_SVC_UNAVAILABLE;
    }
  }
  out->key_id.assign(reinterpret_cast<const char*>(job->key_id),
                     KRB5_KDCMPC_KEY_ID_LEN);
  out->usage = static_cast<uint32_t>(job->usage);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(job->input.data);
  out->input.assign(in, in + job->input.length);
  if (job->checksum.length > 0)
    out->checksum.assign(job->checksum.data, job->checksum.length);
  return 0;
}


namespace {

// Every splice_from names an item of the plan given now.
absl::Status CheckSpliceSources(const krb5_kdcmpc_plan* in) {
  for (size_t i = 0; i < in->n_items; ++i) {
    const int from = in->items[i].splice_from;
    if (from != KRB5_KDCMPC_NO_ITEM &&
        (from < 0 || static_cast<size_t>(from) >= in->n_items ||
         in->items[from].input.length == 0 || in->items[from].input.data == nullptr))
      return absl::InvalidArgumentError(
          absl::StrCat("plan item ", i, ": a splice from no item given now"));
  }
  return absl::OkStatus();
}

// A spliced item's message goes with the job it is spliced into; it is
// no job of its own (Dispatcher::Begin counts it so).
absl::Status AttachSplices(const krb5_kdcmpc_plan* in, const Plan& plan,
                           std::vector<ItemJob>* given) {
  std::vector<ItemJob> jobs;
  for (ItemJob& g : *given) {
    if (SplicedAway(plan, static_cast<size_t>(g.item))) continue;
    const int from = plan.items[g.item].splice_from;
    if (from >= 0) {
      const krb5_data& d = in->items[from].input;
      const uint8_t* b = reinterpret_cast<const uint8_t*>(d.data);
      // D and its HMAC inner padding (kmpc.proto Job.splice_length): the
      // servers' program follows D's SHA-1 block count, not its length.
      const std::string pad = contract::SplicePadding(d.length);
      g.job.splice.assign(b, b + d.length);
      g.job.splice.insert(g.job.splice.end(), pad.begin(), pad.end());
      if (plan.items[g.item].splice_offset > UINT32_MAX)
        return absl::InvalidArgumentError("a splice offset over 2^32");
      g.job.splice_offset = static_cast<uint32_t>(plan.items[g.item].splice_offset);
    }
    jobs.push_back(std::move(g));
  }
  *given = std::move(jobs);
  return absl::OkStatus();
}

}  // namespace

// The core's plan of a kdcmpc plan, and the jobs of its items given now
// (tokens not yet assigned), each admitted by the gate book (`gates`; a
// gate's claim into *claims by item). What the core does not serve is
// refused (Planner::Check, cts_items.h): items under aes*-cts keys other
// than the AS exchange's, and any splice but a REQ_CHECKSUM's into an
// aes*-cts REPLY, whose job then carries the checksum's message
// (Job::splice) and the REQ_CHECKSUM no job of its own.
absl::Status PlanOfC(const krb5_kdcmpc_plan* in, GateBook& gates, Plan* out,
                     std::vector<ItemJob>* given, std::map<int, GateBook::Claim>* claims) {
  if (in == nullptr || in->n_items < 1 || in->n_items > kMaxPlanItems ||
      in->items == nullptr)
    return absl::InvalidArgumentError("a plan has 1 to 16 items");
  if (in->kind < KRB5_KDCMPC_EXCH_AS || in->kind > KRB5_KDCMPC_EXCH_S4U2PROXY)
    return absl::InvalidArgumentError("unknown exchange kind");
  out->kind = static_cast<ExchangeKind>(in->kind);
  if (absl::Status st = CheckSpliceSources(in); !st.ok()) return st;
  for (size_t i = 0; i < in->n_items; ++i) {
    const krb5_kdcmpc_item& it = in->items[i];
    PlanItem p;
    p.role = static_cast<Role>(it.role);
    p.type = JobTypeOf(it.type);
    p.cipher = CipherOfEnctype(it.enctype);
    if (it.key_id == nullptr || p.cipher == kmpc::v1::CIPHER_UNSPECIFIED ||
        (it.ctr0.length > 0 && it.ctr0.data == nullptr))
      return absl::InvalidArgumentError(absl::StrCat(
          "plan item ", i, ": no key id, or not an MPC enctype"));
    p.splice_from = it.splice_from == KRB5_KDCMPC_NO_ITEM ? -1 : it.splice_from;
    p.splice_offset = it.splice_offset;
    p.key_id.assign(reinterpret_cast<const char*>(it.key_id), KRB5_KDCMPC_KEY_ID_LEN);
    p.usage = static_cast<uint32_t>(it.usage);
    p.flags = it.flags;
    p.length = it.length;
    p.gate = (it.flags & KRB5_KDCMPC_ITEM_GATED) ? it.gate : -1;
    p.ticket = it.ticket;
    p.ctr0.assign(it.ctr0.data != nullptr ? it.ctr0.data : "", it.ctr0.length);
    p.given = it.input.length > 0;
    if (it.cf2_half.length > 0) {
      // A FAST key (kdcmpc_plugin.h cf2_half): given items under aes*-cts
      // keys only; its size is the output key's (16 or 32 bytes).
      if (it.cf2_half.data == nullptr || !p.given || !contract::CtsCipher(p.cipher) ||
          (it.cf2_half.length != 16 && it.cf2_half.length != 32))
        return absl::InvalidArgumentError(absl::StrCat(
            "plan item ", i, ": a FAST key's half on an item that cannot take one"));
      p.cts_key = it.cf2_half.length == 16 ? kmpc::v1::CTS_KEY_CF2_AES128
                                           : kmpc::v1::CTS_KEY_CF2_AES256;
    }
    if (p.given) {
      krb5_kdcmpc_job job = {it.type, it.enctype, it.key_id, it.usage,
                             it.input, it.checksum};
      ItemJob g;
      g.item = static_cast<int>(i);
      char* msg = nullptr;
      if (JobOfC(&job, it.done, &g.job, &msg) != 0) {
        const std::string why = msg != nullptr ? msg : "kdcmpc: malformed job";
        free(msg);
        return absl::InvalidArgumentError(absl::StrCat("plan item ", i, ": ", why));
      }
      g.job.cts_key = p.cts_key;
      GateBook::Claim& claim = (*claims)[static_cast<int>(i)];
      if (GateBook::Admission a = gates.Admit(g.job, absl::Now(), &claim);
          a.decision == GateBook::Decision::kRefuse)
        return a.why;
      if (p.cts_key != kmpc::v1::CTS_KEY_DEALT) {
        const uint8_t* h = reinterpret_cast<const uint8_t*>(it.cf2_half.data);
        g.job.cf2_half.assign(h, h + it.cf2_half.length);
      }
      given->push_back(std::move(g));
    }
    out->items.push_back(std::move(p));
  }
  return AttachSplices(in, *out, given);
}

}  // namespace kmpc::kdc
