// An exchange's plan as the kdcmpc module's core holds it (kdcmpc
// interface 1.2, krb5/kdcmpc_plugin.h krb5_kdcmpc_plan, converted by
// module.cc), and what the planner (planner.h) reports about an exchange.
#ifndef KMPC_KDC_PLUGIN_PLAN_H_
#define KMPC_KDC_PLUGIN_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "job.h"

namespace kmpc::kdc {

// krb5_kdcmpc_exchange_kind and krb5_kdcmpc_role (kdcmpc_plugin.h), by value.
enum class ExchangeKind : int {
  kAs = 1, kAsFast, kTgs, kRenew, kForward, kU2u, kS4u2Self, kS4u2Proxy
};
enum class Role : int {
  kTimestamp = 1, kArmor, kHeaderTicket, kSecondTicket, kReqChecksum,
  kTicket, kReply, kSigServer, kSigKdc, kCammacKdc, kSigTicket, kCammacSvc,
  kVerifyServer, kVerifyKdc, kVerifyCammac, kVerifyTicket,
  kChallenge, kKdcChallenge,
  // MIT 1.21's extended KDC (full PAC) signature, made and checked with
  // the ticket signature ([MS-PAC] 2.8.5).
  kSigFull, kVerifyFull
};
inline constexpr size_t kMaxPlanItems = 16;   // KRB5_KDCMPC_MAX_ITEMS
inline constexpr uint32_t kItemExact = 0x1;   // KRB5_KDCMPC_ITEM_EXACT
inline constexpr uint32_t kItemGated = 0x2;   // KRB5_KDCMPC_ITEM_GATED

// One plan item (krb5_kdcmpc_item without its input and callback).
struct PlanItem {
  Role role = Role::kTimestamp;
  kmpc::v1::JobType type = kmpc::v1::JOB_TYPE_UNSPECIFIED;
  kmpc::v1::Cipher cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  std::string key_id;
  uint32_t usage = 0;
  uint32_t flags = 0;
  size_t length = 0;     // input bytes: exact or a bound (kItemExact)
  int gate = -1;         // kItemGated: the DECRYPT item it is released on
  int ticket = -1;       // linked TICKET (signing) or DECRYPT (verifying)
  std::string ctr0;      // VERIFY_* with ticket -1: the signature's counter
  bool given = false;    // its job is given at begin
  // aes*-cts: the key of the item's job (kmpc.proto Job.cts_key): a FAST
  // key whose KDC half the given job carries (Job::cf2_half), or the dealt
  // key.
  kmpc::v1::CtsKey cts_key = kmpc::v1::CTS_KEY_DEALT;
  // An aes*-cts REPLY (krb5_kdcmpc_item.splice_from, splice_offset): the
  // REQ_CHECKSUM item whose checksum the servers put into its plaintext at
  // splice_offset (cts_items.h); -1: none.
  int splice_from = -1;
  size_t splice_offset = 0;
};

struct Plan {
  ExchangeKind kind = ExchangeKind::kTgs;
  std::vector<PlanItem> items;
};
// Whether item i of plan is spliced into another item (its splice_from):
// given, yet no job of its own; it completes with that item's job.
bool SplicedAway(const Plan& plan, size_t i);

// The job of a plan item given at begin, with the caller's token for it.
struct ItemJob {
  int item = -1;
  uint64_t token = 0;
  Job job;
};

// The job type, key usage and linked-pad slot (-1: none) of a role.
struct RoleInfo {
  kmpc::v1::JobType type;
  uint32_t usage;
  int slot;
};
// False for a value that is no role.
bool RoleOf(Role role, RoleInfo* out);

// Why an item ran in a Run of its own (kmpc_kdc_plan_misses_total{reason}).
enum class Miss { kBound, kCtr0, kExpired, kBudget, kFailover };
const char* MissName(Miss m);
// "as", "as_fast", "tgs", ... (the metrics' exchange label).
const char* ExchangeName(ExchangeKind k);
const char* RoleName(Role r);

// What End reports about an exchange.
struct ExchangeRecord {
  ExchangeKind kind = ExchangeKind::kTgs;
  uint32_t runs = 0;  // Run requests that carried a job of it
  std::vector<std::pair<Role, Miss>> misses;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_PLAN_H_
