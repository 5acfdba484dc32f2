// kmpc-mpc-client's Admin commands (client::AdminClient, with the admin
// certificate):
//   put-key --key_hex=.. [--key_id_hex=..] [--kvno --label --replace --key_kind]
//       [--cipher=aes128-cts|aes256-cts: an aes*-cts key, with the material
//       the dealer computes per usage]
//       deals the key (engine::DealKey) and stores party i's view on server
//       i; all-or-nothing (client::AdminClient::PutKey): a failure removes
//       what was or may have been stored. Prints the id.
//   delete-key --key_id_hex=.. [--only_party=I]   list-keys   health   metrics
//   set-kind --key_id_hex=.. --key_kind=user|service|user+service
//       [--allow_ungate] [--only_party=I]   Admin.SetKeyKind; prints
//       "party I previous KIND unrecorded B dropped N changed B tickets B"
//       per server
// The key is wiped once dealt; a server's failure is "rpc_error PARTY CODE
// MESSAGE", exit 3 (CheckEach).
#include <openssl/crypto.h>

#include <array>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/admin_client.h"
#include "contract.h"
#include "engine/engine.h"
#include "kmpc.grpc.pb.h"
#include "tools/cluster_tool.h"
#include "tools/mpc_client/command.h"

ABSL_FLAG(std::string, key_hex, "", "put-key: the key");
ABSL_FLAG(std::string, key_id_hex, "", "key id (32 bytes hex)");
ABSL_FLAG(int, kvno, 1, "put-key: kvno");
ABSL_FLAG(std::string, label, "", "put-key: label");
ABSL_FLAG(bool, replace, false, "put-key: overwrite an existing id");
ABSL_FLAG(std::string, key_kind, "user",
          "put-key: user (password-derived: its aes*-cts AS reply gated, no ticket or PAC "
          "material), service (a random key) or user+service (kmpc.proto KeyKind)");
ABSL_FLAG(bool, allow_ungate, false,
          "set-kind: allow a password-derived key to become a service's "
          "(SetKeyKindRequest.allow_ungate)");

namespace kmpc::tools::mpc_client {

int PutKey(Cluster& c) {
  Bytes key;
  if (!FromHex(absl::GetFlag(FLAGS_key_hex), &key) ||
      (key.size() != 16 && key.size() != 32))
    Die("--key_hex must be 16 or 32 bytes of hex");
  Bytes id;
  if (absl::GetFlag(FLAGS_key_id_hex).empty()) {
    id = RandomBytes(kmpc::contract::kKeyIdSize);
  } else if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id) ||
             id.size() != kmpc::contract::kKeyIdSize) {
    Die("--key_id_hex must be 32 bytes of hex");
  }
  const bool cts = absl::EndsWith(absl::GetFlag(FLAGS_cipher), "-cts");
  auto cipher = key.size() == 16
                    ? (cts ? kmpc::engine::Cipher::kAes128Cts : kmpc::engine::Cipher::kAes128)
                    : (cts ? kmpc::engine::Cipher::kAes256Cts : kmpc::engine::Cipher::kAes256);
  std::array<absl::Status, 3> each;
  kmpc::client::KeyMeta meta{id, static_cast<uint32_t>(absl::GetFlag(FLAGS_kvno)),
                             absl::GetFlag(FLAGS_label), absl::GetFlag(FLAGS_replace)};
  const std::string kind = absl::GetFlag(FLAGS_key_kind);
  if (kind == "service") meta.kind = kmpc::KeyKind::kService;
  else if (kind == "user+service") meta.kind = kmpc::KeyKind::kUserService;
  else if (kind != "user") Die("--key_kind must be user, service or user+service");
  absl::Status st = c.admin.PutKey(
      cipher,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()), meta,
      &each);
  OPENSSL_cleanse(key.data(), key.size());
  if (!st.ok()) {
    // What the clean-up did (removed again, or a WARNING).
    std::fprintf(stderr, "kmpc-mpc-client: put-key: %s\n",
                 std::string(st.message()).c_str());
    CheckEach(each);
    Die(std::string(st.message()));  // not a server's failure: the dealer's
  }
  std::printf("%s\n", ToHex(id).c_str());
  return 0;
}

int DeleteKey(Cluster& c) {
  Bytes id;
  if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id)) Die("bad --key_id_hex");
  const int only = absl::GetFlag(FLAGS_only_party);
  if (only < -1 || only > 2) Die("--only_party must be 0, 1 or 2");
  std::array<absl::Status, 3> st;
  if (only >= 0) st[only] = c.admin.DeleteKeyOn(only, id);
  else st = c.admin.DeleteKeyEach(id);
  CheckEach(st);
  std::printf("deleted\n");
  return 0;
}

int SetKind(Cluster& c) {
  Bytes id;
  if (!FromHex(absl::GetFlag(FLAGS_key_id_hex), &id)) Die("bad --key_id_hex");
  const int only = absl::GetFlag(FLAGS_only_party);
  if (only < -1 || only > 2) Die("--only_party must be 0, 1 or 2");
  const std::string kind = absl::GetFlag(FLAGS_key_kind);
  kmpc::KeyKind k = kmpc::KeyKind::kUser;
  if (kind == "service") k = kmpc::KeyKind::kService;
  else if (kind == "user+service") k = kmpc::KeyKind::kUserService;
  else if (kind != "user") Die("--key_kind must be user, service or user+service");
  const bool ungate = absl::GetFlag(FLAGS_allow_ungate);
  std::array<absl::StatusOr<pb::SetKeyKindResponse>, 3> r;
  if (only >= 0) r[only] = c.admin.SetKeyKindOn(only, id, k, ungate);
  else r = c.admin.SetKeyKind(id, k, ungate);
  std::array<absl::Status, 3> st;
  for (int i = 0; i < 3; ++i)
    if (only < 0 || i == only) st[i] = r[i].status();
  CheckEach(st);
  for (int i = 0; i < 3; ++i)
    if (only < 0 || i == only)
      std::printf("party %d previous %s unrecorded %d dropped %u changed %d tickets %d\n", i,
                  pb::KeyKind_Name(r[i]->previous_kind()).c_str(), r[i]->was_unrecorded(),
                  r[i]->dropped_materials(), r[i]->changed(), r[i]->holds_ticket_material());
  return 0;
}

int AdminQuery(Cluster& c, const std::string& cmd) {
  std::array<std::string, 3> out;
  std::array<absl::Status, 3> st;
  if (cmd == "health") {
    auto h = c.admin.Health();
    for (int i = 0; i < 3; ++i) {
      st[i] = h[i].status();
      if (!h[i].ok()) continue;
      const pb::HealthResponse& r = *h[i];
      out[i] = absl::StrFormat(
          "party %d ring_up %d workers %d keys %d batches_ok %d batches_failed %d "
          "breaker %s deviations %d security %s",
          r.party(), r.ring_up(), r.workers(), r.keys(), r.batches_ok(),
          r.batches_failed(), r.breaker_open() ? "open" : "closed", r.deviations(),
          r.security().empty() ? "unknown" : r.security());
    }
  } else if (cmd == "metrics") {
    auto m = c.admin.Metrics();
    for (int i = 0; i < 3; ++i) {
      st[i] = m[i].status();
      if (m[i].ok()) out[i] = *m[i];
    }
  } else {
    auto l = c.admin.ListKeys();
    for (int i = 0; i < 3; ++i) {
      st[i] = l[i].status();
      if (!l[i].ok()) continue;
      for (const auto& k : *l[i])
        absl::StrAppend(&out[i], "party ", i, " ", ToHex(k.key_id()), " ",
                        pb::Cipher_Name(k.cipher()), " kvno ", k.kvno(), " ",
                        k.label(), "\n");
    }
  }
  CheckEach(st);
  for (auto& o : out) std::printf("%s%s", o.c_str(), o.empty() || o.back() == '\n' ? "" : "\n");
  return 0;
}

}  // namespace kmpc::tools::mpc_client
