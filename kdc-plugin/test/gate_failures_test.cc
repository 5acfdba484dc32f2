// The module's failure bound (gate_failures.h): which jobs are gates, the
// window from its first failure, gates in flight held to it, other keys
// unaffected, no bound at 0, the table's size bounded; and the kdc.conf
// relations that set it.
#include "gate_failures.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "absl/time/time.h"
#include "options.h"

namespace kmpc::kdc {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

Job Gate(const std::string& key, uint32_t usage = 1) {
  Job j;
  j.type = kmpc::v1::JOB_DECRYPT;
  j.cipher = kmpc::v1::CIPHER_AES256_CTS;
  j.key_id = key;
  j.usage = usage;
  if (usage == 54) j.cts_key = kmpc::v1::CTS_KEY_CF2_AES256;
  return j;
}

TEST(GateFailures, GatesAreTimestampsAndFastChallenges) {
  EXPECT_TRUE(GateFailures::IsGate(Gate("k")));
  EXPECT_TRUE(GateFailures::IsGate(Gate("k", 54)));
  Job ctr = Gate("k");
  ctr.cipher = kmpc::v1::CIPHER_AES256;  // a ctr-mpc user's timestamp too
  EXPECT_TRUE(GateFailures::IsGate(ctr));
  EXPECT_FALSE(GateFailures::IsGate(Gate("k", 2)));  // a ticket presented back
  Job enc = Gate("k");
  enc.type = kmpc::v1::JOB_ENCRYPT;
  EXPECT_FALSE(GateFailures::IsGate(enc));
}

// An outsider's wrong passwords for one user: `limit` of them fail, then
// the key's gates are refused before any Run until the window ends; the
// refusal is kResourceExhausted (KDC_ERR_SVC_UNAVAILABLE, not counted by
// MIT's lockout, never a failover); another key is unaffected.
TEST(GateFailures, AKeyIsStoppedAfterItsLimitUntilTheWindowEnds) {
  GateFailures g(3, absl::Seconds(100));
  const Job victim = Gate(std::string(32, 'v')), other = Gate(std::string(32, 'o'));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(g.Admit(victim, kT0 + absl::Seconds(i)).ok());
    g.Failed(victim, kT0 + absl::Seconds(i));
  }
  EXPECT_EQ(g.Failures(victim.key_id, kT0 + absl::Seconds(5)), 3u);
  const absl::Status st = g.Admit(victim, kT0 + absl::Seconds(99));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("gate_failures = 3"), absl::string_view::npos) << st;
  EXPECT_TRUE(g.Admit(Gate(victim.key_id, 54), kT0 + absl::Seconds(99)).code() ==
              absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(g.Admit(other, kT0 + absl::Seconds(99)).ok());
  Job ticket = Gate(victim.key_id, 2);
  EXPECT_TRUE(g.Admit(ticket, kT0 + absl::Seconds(99)).ok());  // not a gate
  EXPECT_TRUE(g.Admit(victim, kT0 + absl::Seconds(100)).ok());
  g.Failed(victim, kT0 + absl::Seconds(100));
  EXPECT_EQ(g.Failures(victim.key_id, kT0 + absl::Seconds(100)), 1u);
}

// Issue 62's acceptance, the module's side: a realm whose users each type
// a wrong password 5 times an hour (never more than 5 within 60 minutes:
// 12 minutes or more apart), each time followed by the right one, is never
// stopped at the defaults (10 failures an hour), over two days.
TEST(GateFailures, UsersWithFiveWrongPasswordsAnHourAreNeverStopped) {
  GateFailures g;
  std::mt19937 rng(62);
  for (int u = 0; u < 50; ++u) {
    const Job user = Gate(std::string(31, 'u') + static_cast<char>('A' + u));
    absl::Time t = kT0 + absl::Seconds(rng() % 3600);
    for (int k = 0; k < 48 * 5; ++k) {
      ASSERT_TRUE(g.Admit(user, t).ok()) << "user " << u << ", typo " << k;
      g.Done(user, /*failed=*/true, t + absl::Milliseconds(200));
      const absl::Time right = t + absl::Seconds(8);
      ASSERT_TRUE(g.Admit(user, right).ok()) << "user " << u << ", login " << k;
      g.Done(user, /*failed=*/false, right + absl::Milliseconds(200));
      t += absl::Minutes(12) + absl::Seconds(rng() % 900);
    }
  }
}

// Wrong passwords sent all at once (an outsider's burst of kinits): no
// verdict is back when the next arrives, so the gates in flight count
// toward the limit, or the whole burst would reach the servers and spend
// the user's budget there (a lockout at the cluster). Before slots were
// held, every one of a burst was admitted.
TEST(GateFailures, ABurstInFlightStopsAtTheLimit) {
  GateFailures g(3, absl::Hours(1));
  const Job victim = Gate(std::string(32, 'b'));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(g.Admit(victim, kT0).ok()) << i;
  const absl::Status st = g.Admit(victim, kT0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("in flight"), absl::string_view::npos) << st;
  EXPECT_EQ(g.InFlight(victim.key_id, kT0), 3u);
  // A right password's verdict frees its slot; a wrong one's turns into a
  // failure, which keeps the slot's place.
  g.Done(victim, /*failed=*/false, kT0 + absl::Seconds(1));
  EXPECT_TRUE(g.Admit(victim, kT0 + absl::Seconds(1)).ok());
  g.Done(victim, /*failed=*/true, kT0 + absl::Seconds(2));
  EXPECT_FALSE(g.Admit(victim, kT0 + absl::Seconds(2)).ok());
  EXPECT_EQ(g.Failures(victim.key_id, kT0 + absl::Seconds(2)), 1u);
  // A gate that never reports back holds its slot kReservationTtl only.
  EXPECT_EQ(g.InFlight(victim.key_id, kT0 + GateFailures::kReservationTtl), 1u);
  EXPECT_TRUE(g.Admit(victim, kT0 + GateFailures::kReservationTtl).ok());
}

TEST(GateFailures, ALoginLeavesNoEntry) {
  GateFailures g(3, absl::Hours(1));
  const Job user = Gate(std::string(32, 'u'));
  ASSERT_TRUE(g.Admit(user, kT0).ok());
  g.Done(user, /*failed=*/false, kT0);
  EXPECT_EQ(g.InFlight(user.key_id, kT0), 0u);
  EXPECT_EQ(g.Failures(user.key_id, kT0), 0u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(g.Admit(user, kT0).ok()) << i;
    g.Done(user, /*failed=*/false, kT0);
  }
}

TEST(GateFailures, ZeroIsNoBound) {
  GateFailures g(0, absl::Hours(1));
  const Job j = Gate(std::string(32, 'z'));
  for (int i = 0; i < 100; ++i) g.Failed(j, kT0);
  EXPECT_TRUE(g.Admit(j, kT0).ok());
}

TEST(GateFailures, TheTableStaysBounded) {
  GateFailures g(2, absl::Hours(1));
  for (size_t i = 0; i < GateFailures::kMaxKeys + 10; ++i)
    g.Failed(Gate("key-" + std::to_string(i)), kT0 + absl::Milliseconds(i));
  // The newest are held, the oldest forgotten.
  EXPECT_EQ(g.Failures("key-" + std::to_string(GateFailures::kMaxKeys + 9),
                       kT0 + absl::Seconds(1000)),
            1u);
  EXPECT_EQ(g.Failures("key-0", kT0 + absl::Seconds(1000)), 0u);
}

TEST(GateFailures, KdcConfRelations) {
  auto o = ParseOptions({"servers=a:1,b:2,c:3", "certs=/x", "gate_failures=4",
                         "gate_failure_window_s=60"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->batcher.gate_failures, 4u);
  EXPECT_EQ(o->batcher.gate_failure_window, absl::Seconds(60));
  GateFailures g(o->batcher.gate_failures, o->batcher.gate_failure_window);
  const Job j = Gate(std::string(32, 'c'));
  for (int i = 0; i < 4; ++i) g.Failed(j, kT0);
  EXPECT_FALSE(g.Admit(j, kT0 + absl::Seconds(59)).ok());
  EXPECT_TRUE(g.Admit(j, kT0 + absl::Seconds(60)).ok());
  EXPECT_FALSE(ParseOptions({"servers=a:1,b:2,c:3", "certs=/x", "gate_failure_window_s=0"}).ok());
  auto d = ParseOptions({"servers=a:1,b:2,c:3", "certs=/x"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->batcher.gate_failures, 10u);
  EXPECT_EQ(d->batcher.gate_failure_window, absl::Hours(1));
}

}  // namespace
}  // namespace kmpc::kdc
