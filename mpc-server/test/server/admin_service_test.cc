// AdminService (service/admin_service.cc) on the three parties of
// services_testing.h, without gRPC's authorization (the integration tests
// cover it): SetKeyKind's edits of a stored key and the ungating it allows
// only on each server's operator's list, DeleteKeys, and ResetBreaker
// without a breaker.
#include "services_testing.h"

namespace kmpc::service {
namespace {

class AdminServiceTest : public ServiceTest {
 protected:
  // An aes*-cts key as servers stored it before key kinds: every usage's
  // material dealt (the ticket's 2 and the PAC signature's 17 too) and a
  // "KMS1" record without a kind, which loads as a user's key.
  std::string PutOldFormatCtsKey(const std::string& key) {
    auto views = engine::DealKey(
        engine::Cipher::kAes256Cts,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key.data()), key.size()),
        KeyKind::kService);
    EXPECT_TRUE(views.ok());
    std::string id = Rand(32);
    ciphers_[id] = engine::ToProto(engine::Cipher::kAes256Cts);
    for (int i = 0; i < 3; ++i) {
      store::KeyMeta meta;
      std::memcpy(meta.key_id.data(), id.data(), 32);
      meta.cipher = engine::Cipher::kAes256Cts;
      meta.label = "olduser@R";
      std::vector<uint8_t> v = store::EncodeRecord(meta, (*views)[i].Serialize());
      v[3] = '1';
      v.erase(v.begin() + 5);  // the kind byte
      EXPECT_TRUE(parties_[i].store->put_raw_for_test(meta.key_id, v).ok());
    }
    return id;
  }

  // Admin.SetKeyKind on party i's server (without gRPC's authorization,
  // which the integration tests cover); `listed`: the entry the server's
  // operator lists in --allow_ungate_keys (Listed; empty: none).
  absl::StatusOr<v1::SetKeyKindResponse> SetKind(int i, const std::string& id, v1::KeyKind k,
                                                 bool allow_ungate = false,
                                                 const std::string& listed = "") {
    ServiceOptions svc;
    svc.party = i;
    if (!listed.empty()) svc.ungate_keys.insert(listed);
    AdminService admin(svc, parties_[i].store.get(), parties_[i].keys.get(),
                       parties_[i].scheduler.get(), &parties_[i].metrics);
    v1::SetKeyKindRequest req;
    req.set_key_id(id);
    req.set_kind(k);
    req.set_allow_ungate(allow_ungate);
    v1::SetKeyKindResponse resp;
    absl::Status st = admin.DoSetKeyKind(req, &resp);
    if (!st.ok()) return st;
    return resp;
  }

  // An --allow_ungate_keys entry of party i's key `id` as ServiceOptions
  // holds it: the key id, then the deal_id of its stored shares.
  std::string Listed(int i, const std::string& id) {
    auto rec = parties_[i].store->Get(*store::KeyIdFromBytes(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(id.data()), id.size())));
    EXPECT_TRUE(rec.ok()) << rec.status();
    if (!rec.ok()) return id;
    auto ks = engine::KeyShares::Parse(rec->shares.span());
    EXPECT_TRUE(ks.ok()) << ks.status();
    if (!ks.ok()) return id;
    return id + std::string(ks->deal_id.begin(), ks->deal_id.end());
  }

  // A login under `id` and a ticket to it: the PA-ENC-TIMESTAMP's DECRYPT
  // (usage 1), the AS reply released on it (usage 3), and an ungated
  // ENCRYPT under the ticket usage (2): an offline verifier of the
  // password for whoever gets it.
  void LoginAndTicket(const std::string& id, const std::string& key,
                      const v1::JobStatus (&want)[3]) {
    const std::string ct =
        ClearCts(cts::EncryptProgram(14, 44), key, 1, FreshTimestamp());
    v1::RunRequest req;
    req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
    req.set_batch_id(Rand(16));
    auto* d = AddJob(&req, 1, id, v1::JOB_DECRYPT);
    d->set_usage(1);
    d->set_data(ct);
    auto* e = AddJob(&req, 2, id, v1::JOB_ENCRYPT);
    e->set_usage(3);
    e->set_data(Rand(120));
    e->set_release_if_ok(1);
    auto* t = AddJob(&req, 3, id, v1::JOB_ENCRYPT);
    t->set_usage(2);
    t->set_data(Rand(200));
    std::array<v1::RunResponse, 3> resp;
    ASSERT_NO_FATAL_FAILURE(RunExpecting(req, want, &resp));
  }

  // Party i's AdminService (no breaker).
  std::unique_ptr<AdminService> Admin(int i) {
    ServiceOptions svc;
    svc.party = i;
    return std::make_unique<AdminService>(svc, parties_[i].store.get(), parties_[i].keys.get(),
                                          parties_[i].scheduler.get(), &parties_[i].metrics);
  }
};

// A key stored before key kinds loads as a user's but keeps its ticket
// material: a ticket to it (usage 2) is computed, an offline verifier of
// the password for whoever asks the KDC for one. Before Admin.SetKeyKind
// nothing could take that material away short of a new key (the stores
// refuse to replace a record: ShareStore.EditRewritesAnOldFormatRecord...).
// Re-marked a user's on the three servers, the key still logs in, and the
// ticket is refused; again changes nothing; making it a service's (no
// gate on its AS reply) needs allow_ungate.
TEST_F(AdminServiceTest, SetKeyKindUserTakesAnOldKeysTicketMaterial) {
  const std::string key = Rand(32);
  const std::string id = PutOldFormatCtsKey(key);
  ASSERT_NO_FATAL_FAILURE(LoginAndTicket(id, key, {v1::JOB_OK, v1::JOB_OK, v1::JOB_OK}));
  for (int i = 0; i < 3; ++i) {
    auto r = SetKind(i, id, v1::KEY_KIND_USER);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->was_unrecorded());
    EXPECT_EQ(r->previous_kind(), v1::KEY_KIND_USER);
    EXPECT_EQ(r->dropped_materials(), 2u);  // usage 2, checksum usage 17
    EXPECT_TRUE(r->changed());
    EXPECT_FALSE(r->holds_ticket_material());
    auto list = parties_[i].store->List();
    ASSERT_TRUE(list.ok());
    EXPECT_FALSE((*list)[0].kind_unrecorded);
  }
  ASSERT_NO_FATAL_FAILURE(
      LoginAndTicket(id, key, {v1::JOB_OK, v1::JOB_OK, v1::JOB_UNKNOWN_USAGE}));
  for (int i = 0; i < 3; ++i) {
    auto again = SetKind(i, id, v1::KEY_KIND_USER);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE(again->changed());
    EXPECT_FALSE(again->was_unrecorded());
    EXPECT_EQ(again->dropped_materials(), 0u);
  }
  auto ungate = SetKind(0, id, v1::KEY_KIND_SERVICE);
  EXPECT_EQ(ungate.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(parties_[0].store->Get(*store::KeyIdFromBytes(absl::MakeConstSpan(
                reinterpret_cast<const uint8_t*>(id.data()), id.size())))->meta.kind,
            KeyKind::kUser);
  EXPECT_EQ(SetKind(0, Rand(32), v1::KEY_KIND_USER).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SetKind(0, id, static_cast<v1::KeyKind>(7)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The attack: the Admin certificate is on the KDC host (kmpc-admin and
// kadmind's dealer run there), so a compromised KDC host could ask every
// server to make a user's password-derived key a service's, with
// allow_ungate, and then have the AS reply computed without the user's
// timestamp: an offline verifier of a password the user never typed while
// the host was compromised. Each server refuses unless its own operator
// listed the key (--allow_ungate_keys); the key stays a user's, its reply
// gated, on every server.
TEST_F(AdminServiceTest, SetKeyKindServiceNeedsTheKeyListedByEachServersOperator) {
  const std::string key = Rand(32);
  const std::string id = PutOldFormatCtsKey(key);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SetKind(i, id, v1::KEY_KIND_USER).ok());
  const store::KeyId kid = *store::KeyIdFromBytes(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(id.data()), id.size()));
  for (int i = 0; i < 3; ++i) {
    auto r = SetKind(i, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--allow_ungate_keys")) << r.status();
    // Another key listed does not open this one.
    auto other = SetKind(i, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true, /*listed=*/Rand(48));
    EXPECT_FALSE(other.ok());
    // This key id listed with another dealing (shares put under the id
    // after the operator listed it) does not open it either; the refusal
    // names the dealing held, for the operator to compare.
    std::string stale = Listed(i, id);
    stale.back() ^= 1;
    auto replaced = SetKind(i, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true, stale);
    EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string held = Listed(i, id).substr(32);
    EXPECT_TRUE(absl::StrContains(replaced.status().message(),
                                  absl::StrCat(":", absl::BytesToHexString(held))))
        << replaced.status();
    EXPECT_EQ(parties_[i].store->Get(kid)->meta.kind, KeyKind::kUser);
  }
  // Still a user's key on all three: it logs in (its reply released on
  // its timestamp) and gets no ticket.
  ASSERT_NO_FATAL_FAILURE(
      LoginAndTicket(id, key, {v1::JOB_OK, v1::JOB_OK, v1::JOB_UNKNOWN_USAGE}));
  // Listed by the operator but without the admin's allow_ungate: refused.
  EXPECT_EQ(SetKind(0, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/false, Listed(0, id))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// Under an aes*-ctr-mpc cipher a user's key runs an AS exchange only, a
// user+service's also tickets (engine/user_key_rule.h), and the keystream
// is the same for every usage: re-marked a service's or a user+service's,
// a user's ctr-mpc key would give whoever asks the KDC a keystream, an
// offline password verifier, on demand. The Admin certificate is on the
// KDC host, so each server refuses either unless its own operator listed
// the key with its dealing (on the code before, both were re-marked and
// the ENCRYPT below computed).
TEST_F(AdminServiceTest, SetKeyKindOfACtrUserKeyNeedsTheOperatorsList) {
  const std::string id = PutKey(Rand(32));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SetKind(i, id, v1::KEY_KIND_USER).ok());
  v1::RunRequest req;
  req.set_now_unix(absl::ToUnixSeconds(absl::Now()));
  AddJob(&req, 1, id, v1::JOB_ENCRYPT)->set_length(32);  // usage 0: no AS job's
  const v1::JobStatus refused[] = {v1::JOB_MALFORMED}, computed[] = {v1::JOB_OK};
  std::array<v1::RunResponse, 3> before, after, listed;
  req.set_batch_id(Rand(16));
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, refused, &before));
  for (v1::KeyKind k : {v1::KEY_KIND_SERVICE, v1::KEY_KIND_USER_SERVICE})
    for (int i = 0; i < 3; ++i) {
      auto r = SetKind(i, id, k, /*allow_ungate=*/true);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    }
  req.set_batch_id(Rand(16));
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, refused, &after));
  // Listed by every server's operator: the admin's explicit act.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(SetKind(i, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true, Listed(i, id)).ok());
  req.set_batch_id(Rand(16));
  ASSERT_NO_FATAL_FAILURE(RunExpecting(req, computed, &listed));
}

// The servers do not re-mark a key together: each does on its own Admin
// call. A key re-marked on some servers only fails its jobs on all three
// alike (the kind and the material held are in the key view they
// compare), so no server computes what another refuses; re-marking the
// rest repairs it. Likewise a service's kind on one server only.
TEST_F(AdminServiceTest, SetKeyKindOnSomeServersFailsTheKeysJobsUntilAll) {
  const std::string key = Rand(32);
  const std::string id = PutOldFormatCtsKey(key);
  ASSERT_TRUE(SetKind(1, id, v1::KEY_KIND_USER).ok());
  constexpr v1::JobStatus kBad = v1::JOB_KEY_INCONSISTENT;
  ASSERT_NO_FATAL_FAILURE(LoginAndTicket(id, key, {kBad, kBad, kBad}));
  for (int i : {0, 2}) ASSERT_TRUE(SetKind(i, id, v1::KEY_KIND_USER).ok());
  ASSERT_NO_FATAL_FAILURE(
      LoginAndTicket(id, key, {v1::JOB_OK, v1::JOB_OK, v1::JOB_UNKNOWN_USAGE}));
  ASSERT_TRUE(SetKind(2, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true, Listed(2, id)).ok());
  ASSERT_NO_FATAL_FAILURE(LoginAndTicket(id, key, {kBad, kBad, kBad}));
  for (int i : {0, 1})
    ASSERT_TRUE(SetKind(i, id, v1::KEY_KIND_SERVICE, /*allow_ungate=*/true, Listed(i, id)).ok());
  // A service's key: its reply needs no gate, and no ticket material came
  // back (the dealt key alone could give it).
  ASSERT_NO_FATAL_FAILURE(
      LoginAndTicket(id, key, {v1::JOB_OK, v1::JOB_OK, v1::JOB_UNKNOWN_USAGE}));
}

// DeleteKeys deletes the ids it is given in one transaction and names
// those it did not find; a malformed id refuses the whole request.
TEST_F(AdminServiceTest, DeleteKeysNamesTheIdsNotFound) {
  const std::string id = PutKey(Rand(16)), unknown = Rand(32);
  v1::DeleteKeysRequest req;
  req.add_key_ids(id);
  req.add_key_ids(unknown);
  v1::DeleteKeysResponse resp;
  grpc::Status st = Admin(0)->DoDeleteKeys(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.not_found_size(), 1);
  EXPECT_EQ(resp.not_found(0), unknown);
  auto left = parties_[0].store->Count();
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 0u);
  req.add_key_ids("short");
  v1::DeleteKeysResponse bad;
  EXPECT_EQ(Admin(0)->DoDeleteKeys(req, &bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A server without a deviation breaker has none to reset.
TEST_F(AdminServiceTest, ResetBreakerWithoutABreakerIsRefused) {
  v1::ResetBreakerResponse resp;
  EXPECT_EQ(Admin(1)->DoResetBreaker(&resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace kmpc::service
