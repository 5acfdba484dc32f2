// kmpc-admin set-kind --kind=user|service|user+service [--force]
//   (PRINC... | --key-ids KEYID_HEX...)
//
// set-kind: re-marks the kind of keys already on the servers, without
//   dealing them again (Admin.SetKeyKind): every key handle of each named
//   principal in the KDB (on the KDC host), or the given key ids. Meant for
//   keys stored before key kinds (status and list-keys show them as
//   "kind unrecorded"), which load as a user's but keep the ticket (usage
//   2) and PAC (17) material they were dealt with: --kind=user makes each
//   server rewrite the record with the kind and remove that material (it
//   cannot be given back short of a new key). --kind=service drops the
//   gate on a password-derived key's AS reply (an offline verifier for
//   whoever asks the KDC): refused for such a key unless --force.
//   Reports per server; exit 0 only when every server of every cluster
//   holds the kind. A server not reached keeps the old record, and the
//   servers compare the kind and the material in every job's key view, so
//   the key's jobs fail on all three (JOB_KEY_INCONSISTENT) until the same
//   command is run again, which changes nothing where it was done
//   already. It does not change the principal's kmpc_key_kind string
//   attribute, from which the kadmind key dealer takes the next key's kind.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/kdb.h"
#include "client/admin_client.h"
#include "contract.h"
#include "util/hex.h"

namespace kmpc::admin {
namespace {

using client::AdminClient;

// set-kind's options and arguments.
struct SetKindOptions {
  std::string kind;      // --kind
  bool force = false;
  bool key_ids = false;  // the arguments are key ids, not principals
  std::vector<std::string> args;
};

// set-kind's keys: (key id, what to call it in the report).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SetKindTargets(
    const SetKindOptions& a, const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  if (a.key_ids) {
    for (const std::string& hex : a.args) {
      std::string id;
      if (hex.size() != 2 * contract::kKeyIdSize || !util::HexToBytes(hex, &id))
        return absl::InvalidArgumentError(
            absl::StrCat(hex, ": not a key id (", 2 * contract::kKeyIdSize, " hex digits)"));
      out.emplace_back(std::move(id),
                       absl::StrCat("key ", absl::AsciiStrToLower(hex)));
    }
    return out;
  }
  auto kdb = Kdb::Open(cfg.realm);
  if (!kdb.ok()) return kdb.status();
  for (const std::string& name : a.args) {
    auto info = (*kdb)->Lookup(name);
    if (!info.ok()) return info.status();
    const KdbKeyFacts f = FactsOf(*info);
    if (f.old_ids.empty())
      return absl::FailedPreconditionError(absl::StrCat(
          info->name, ": holds no key handle (its keys are not in the cluster)"));
    for (const std::string& id : f.old_ids)
      out.emplace_back(id, absl::StrCat("key ", Hex(id), " of ", info->name));
  }
  return out;
}

const char* KindName(kmpc::v1::KeyKind k) {
  switch (k) {
    case kmpc::v1::KEY_KIND_USER: return "user";
    case kmpc::v1::KEY_KIND_SERVICE: return "service";
    case kmpc::v1::KEY_KIND_USER_SERVICE: return "user+service";
    default: return "unknown";
  }
}

// One server's answer to set-kind, printed: 0 done, 1 refused (a service's
// kind for a password-derived key without --force, or not in that server's
// --allow_ungate_keys: nothing changed), 2 another error.
int ReportSetKind(const absl::StatusOr<kmpc::v1::SetKeyKindResponse>& r,
                   const std::string& who, const std::string& what, KeyKind kind, bool force) {
  const char* want = KindName(static_cast<kmpc::v1::KeyKind>(kind));
  if (!r.ok()) {
    // With --force sent, a refusal is the server operator's list's, which
    // the message names.
    std::printf("%s: %s: NOT changed: %s%s\n", who.c_str(), what.c_str(),
                std::string(r.status().message()).c_str(),
                absl::IsFailedPrecondition(r.status()) && !force ? " (--force)" : "");
    return absl::IsFailedPrecondition(r.status()) ? 1 : 2;
  }
  std::string from = KindName(r->previous_kind());
  if (r->was_unrecorded()) from = "unrecorded (loaded as user)";
  if (r->changed()) std::printf("%s: %s: %s -> %s", who.c_str(), what.c_str(), from.c_str(), want);
  else std::printf("%s: %s: already %s", who.c_str(), what.c_str(), want);
  if (r->dropped_materials() > 0)
    std::printf(", %u ticket/PAC materials removed", r->dropped_materials());
  if (kind != KeyKind::kUser && !r->holds_ticket_material())
    std::printf(" (holds no ticket material: tickets to it fail until its next key)");
  std::printf("\n");
  return 0;
}

// set-kind: Admin.SetKeyKind for every target on every server.
int SetKind(const SetKindOptions& a, const Config& cfg) {
  KeyKind kind;
  if (a.kind == "user") kind = KeyKind::kUser;
  else if (a.kind == "service") kind = KeyKind::kService;
  else if (a.kind == "user+service") kind = KeyKind::kUserService;
  else return Usage("set-kind needs --kind=user, --kind=service or --kind=user+service");
  if (a.args.empty())
    return Usage("set-kind needs principals (or --key-ids and key ids)");
  auto targets = SetKindTargets(a, cfg);
  if (!targets.ok()) return Fail(targets.status());
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  size_t failed = 0, refused = 0;
  bool stop = false;  // a server down or refusing us: the next keys would fail too
  for (const auto& [id, what] : *targets) {
    if (stop) {
      std::printf("%s: NOT changed: stopped after a cluster error\n", what.c_str());
      ++failed;
      continue;
    }
    for (size_t c = 0; c < (*clusters)->size(); ++c) {
      AdminClient& cluster = (*clusters)->at(c);
      auto r = cluster.SetKeyKind(id, kind, a.force);
      for (int i = 0; i < 3; ++i) {
        const int got = ReportSetKind(r[i], (*clusters)->Prefix(c) + cluster.Describe(i),
                                      what, kind, a.force);
        refused += got == 1;
        failed += got == 2;
        if (!r[i].ok() && IsClusterError(r[i].status())) stop = true;
      }
    }
  }
  if (failed == 0 && refused == 0) {
    std::printf("set-kind: %zu keys are %s on every server\n", targets->size(), a.kind.c_str());
    return 0;
  }
  if (refused > 0)
    std::printf("set-kind: %zu answers refused the service's kind for a password-derived "
                "key (no gate on its AS reply): if that is meant, --force, and each "
                "server's operator lists the key id in its --allow_ungate_keys\n",
                refused);
  if (failed == 0) return 1;
  std::printf("set-kind: %zu records NOT changed: until every server holds the same kind, "
              "a key's jobs fail (JOB_KEY_INCONSISTENT); run the same command again\n",
              failed);
  return 1;
}

class SetKindCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_option("--kind", o_.kind);
    app.add_flag("--force", o_.force);
    app.add_flag("--key-ids", o_.key_ids);
    app.add_option("PRINC|KEYID_HEX", o_.args);
  }
  int Run(const Context& ctx) override { return SetKind(o_, ctx.cfg); }

 private:
  SetKindOptions o_;
};

std::unique_ptr<Command> MakeSetKind() { return std::make_unique<SetKindCommand>(); }

}  // namespace

const CommandSpec kSetKindCommand = {
    "set-kind",
    "set-kind --kind=user|service|user+service [--force]\n"
    "                  (PRINC... | --key-ids KEYID_HEX...)\n"
    "           re-mark keys already on the servers (keys stored before key kinds);\n"
    "           --kind=user removes their ticket and PAC material\n",
    MakeSetKind};

}  // namespace kmpc::admin
