// Tickets under handles: the hook of krb5 patch 0026-Decrypt-tickets
// (krb5_mpc_set_ticket_decrypt) that kadmind's kadm5_hook init registers
// (ticket_hook.h). libkrb5 calls it for a ticket whose service key
// libk5crypto refused. It decrypts in the cluster (TicketDecrypter,
// ticket_decrypt.h) a ticket to one of kadmind's own principals of its
// realm (KadmindService, dealer.h) whose key is an aes*-cts handle, and
// refuses every other as libk5crypto did. Its state (the cluster's
// settings, the realm, the decrypter) is under the module's mutex
// (dealer_module.h).
#include "ticket_hook.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "admin/config.h"
#include "client/channels.h"
#include "dealer.h"
#include "dealer_module.h"
#include "ticket_decrypt.h"

extern "C" {
#include <krb5/kdcmpc_plugin.h>
#include <krb5/krb5.h>
#include <krb5/mpcdealer_plugin.h>
}

namespace kmpc::admin::dealer {
namespace {

// The cluster kadmind runs ticket DECRYPTs on (ticket_decrypt.h): the KDC's
// ([kdcmpc] kmpc in kdc.conf: servers, certs = DIR or ca / cert / key, as
// kdc-plugin/src/options.h reads them), else kmpc-admin's (`config`).
// Read when kadm5 loads the hook: the krb5 contexts GSS-API makes to
// accept a ticket see krb5.conf only, not kdc.conf.
std::optional<client::ClusterConfig> g_ticket_cfg;
std::string g_realm;  // kadmind's realm (kadm5 makes it the default realm)
std::unique_ptr<TicketDecrypter> g_decrypter;  // made on first use, under g_mu

std::vector<std::string> KdcValues(krb5_context ctx, const char* name) {
  return ProfileValues(ctx, name, "kdcmpc");
}

std::optional<client::ClusterConfig> TicketClusterConfig(krb5_context ctx) {
  client::ClusterConfig cfg;
  std::vector<std::string> servers = KdcValues(ctx, "servers");
  if (servers.size() == 1) {
    std::vector<std::string> split;
    size_t at = 0;
    for (size_t comma; (comma = servers[0].find(',', at)) != std::string::npos;
         at = comma + 1)
      split.push_back(servers[0].substr(at, comma - at));
    split.push_back(servers[0].substr(at));
    servers = split;
  }
  if (servers.size() == client::kParties) {
    for (int i = 0; i < client::kParties; ++i) cfg.servers[i] = servers[i];
    std::vector<std::string> dir = KdcValues(ctx, "certs");
    if (!dir.empty()) {
      cfg.ca = dir.back() + "/ca.pem";
      cfg.cert = dir.back() + "/kdc.pem";
      cfg.key = dir.back() + "/kdc.key";
    }
    for (auto [name, field] : {std::pair{"ca", &cfg.ca}, std::pair{"cert", &cfg.cert},
                               std::pair{"key", &cfg.key}})
      if (std::vector<std::string> v = KdcValues(ctx, name); !v.empty()) *field = v.back();
    return cfg;
  }
  std::vector<std::string> config = ProfileValues(ctx, "config");
  if (config.empty()) return std::nullopt;
  auto settings = ReadConfigFile(config.back());
  Config admin;
  if (!settings.ok() || !ApplySettings(*settings, &admin).ok()) return std::nullopt;
  cfg.servers = admin.servers;
  cfg.ca = admin.ca;
  cfg.cert = admin.cert;
  cfg.key = admin.key;
  cfg.rpc_timeout = absl::Milliseconds(admin.timeout_ms);
  return cfg;
}

// Whether kadmind may have a ticket to `server` decrypted in the cluster:
// only a ticket to one of its own principals of its realm. The KDB: keytab
// kadmind reads hands it any principal's key, so without this an AP-REQ
// carrying a ticket to any service in the cluster (host/, HTTP/) would be
// decrypted through it.
bool KadmindMayDecrypt(krb5_const_principal server) {
  std::lock_guard<std::mutex> lock(g_mu);
  return server != nullptr && !g_realm.empty() && ComponentIs(server->realm, g_realm) &&
         KadmindService(server);
}

// The hook of krb5 patch 0026-Decrypt-tickets (krb5_mpc_set_ticket_decrypt):
// libkrb5 calls it for a ticket whose service key libk5crypto refused; it
// decrypts those to kadmind's own principals whose key is an aes*-cts
// handle in the cluster and refuses the rest as libk5crypto did.
krb5_error_code DecryptTicket(krb5_context ctx, void*, krb5_const_principal server,
                              const krb5_keyblock* key, const krb5_enc_data* enc,
                              krb5_data* output) {
  if (!KadmindMayDecrypt(server)) {
    krb5_set_error_message(ctx, KRB5KRB_AP_ERR_NOKEY,
                           "kmpc: kadmind decrypts tickets to its own principals "
                           "only, in the cluster");
    return KRB5KRB_AP_ERR_NOKEY;
  }
  if (key->length != KRB5_KDCMPC_HANDLE_LEN ||
      std::memcmp(key->contents, KRB5_KDCMPC_HANDLE_MAGIC,
                  KRB5_KDCMPC_HANDLE_MAGIC_LEN) != 0 ||
      (key->enctype != ENCTYPE_AES128_CTS_HMAC_SHA1_96 &&
       key->enctype != ENCTYPE_AES256_CTS_HMAC_SHA1_96))
    return KRB5_BAD_KEYSIZE;
  const std::string key_id(
      reinterpret_cast<const char*>(key->contents) + KRB5_KDCMPC_HANDLE_MAGIC_LEN,
      KRB5_KDCMPC_KEY_ID_LEN);
  absl::Status st;
  size_t len = 0;
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_ticket_cfg) {
      st = absl::FailedPreconditionError(
          "no cluster configuration ([kdcmpc] kmpc or [mpcdealer] kmpc config)");
    } else if (!g_decrypter) {
      auto d = TicketDecrypter::Open(*g_ticket_cfg);
      if (d.ok()) g_decrypter = std::move(*d);
      else st = d.status();
    }
    if (st.ok())
      st = g_decrypter->Decrypt(
          static_cast<kmpc::v1::Cipher>(key->enctype), key_id,
          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(enc->ciphertext.data),
                              enc->ciphertext.length),
          absl::MakeSpan(reinterpret_cast<uint8_t*>(output->data), output->length),
          &len);
  } catch (...) {
    st = absl::ResourceExhaustedError("out of memory");
  }
  if (st.ok()) {
    output->length = len;
    return 0;
  }
  const krb5_error_code code = st.code() == absl::StatusCode::kUnauthenticated
                                   ? KRB5KRB_AP_ERR_BAD_INTEGRITY
                                   : KRB5KRB_AP_ERR_NOKEY;
  krb5_set_error_message(ctx, code, "kmpc: a ticket under an MPC-held key: %s",
                         std::string(st.message()).c_str());
  return code;
}

}  // namespace

void StartTicketHook(krb5_context ctx) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    try {
      g_ticket_cfg = TicketClusterConfig(ctx);
      char* realm = nullptr;
      g_realm.clear();
      if (krb5_get_default_realm(ctx, &realm) == 0) {
        g_realm = realm;
        krb5_free_default_realm(ctx, realm);
      }
    } catch (...) {
      g_ticket_cfg.reset();
    }
  }
  krb5_mpc_set_ticket_decrypt(DecryptTicket, nullptr);
}

void StopTicketHook() {
  krb5_mpc_set_ticket_decrypt(nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_decrypter.reset();
  }
}

}  // namespace kmpc::admin::dealer
