// Security with abort against one malicious party for the replicated
// 3-party protocol (rep3.h): every AND and GF(2^128) multiplication of a
// batch is logged and verified, and every value opened among the servers
// is compared, before anything that depends on them is opened or released.
//
// Error model. In replicated sharing a deviating party can only add a
// (known) error to the products it computes and to the shares it sends
// (Genkin et al., STOC 2014, additive attacks; Araki et al., S&P 2017,
// section 2): a logged AND word is x & y ^ D, a GF(2^128) product
// x * y + D. The check tests that every D is zero without opening x or y.
//
// The check: distributed zero-knowledge proofs of inner products (Boyle,
// Gilboa, Ishai, Nof, "Practical fully secure three-party computation via
// sublinear distributed zero-knowledge proofs", CCS 2019: the recursive
// compression of an inner-product claim, run on replicated shares as
// MAESTRO's multiplication check does (KULeuven-COSIC/maestro,
// wollut16_malsec/mult_verification.rs, the paper's Protocol 8); binary
// gates lifted to an extension field as in Li, Duan, Huang, Hong, Zhang,
// Song, USENIX Security 2023). Two proofs run in the same rounds (dzkp.h):
//  - proof A, the AND gates, over GF(2^64) (a product is one 64 x 64
//    carry-less product and a reduction by shifts);
//  - proof B, the logged GF(2^128) products (tag checks, shared GHASH,
//    powers of H), over GF(2^128); it runs only when the log holds such
//    products (the batch's last check; the in-wave checks are AND only).
// Before them, the lanes of partially live words (a chunk's last tile,
// MulLog::AddAnd) are packed, so a batch of b < 64 blocks is checked on
// about b/64 of its words. Every coin takes two rounds (Coin, verify.cc):
// a 32-byte acknowledgement (H of the values opened so far), then the
// 16-byte opening; the first orders the ring so that no party can know a
// coin before its own challenged messages reached an honest party.
// Rounds:
//  1. coin c1: word weights sigma_j (j < G) and group weights nu_k, all
//     in GF(2^64); tau_j = sigma_j^2. AND gate (group k, word j, lane l)
//     weighs w = nu_k tau_j x^l; the claim is sum w z = sum w x y. The
//     lane weights x^l make a word's lift the word itself (free), and a
//     lifted cross word times nu_k one 64 x 64 carry-less product, summed
//     unreduced.
//  2. first compression of A (factor G = 16, 32 or 64 by the log's size,
//     dzkp::GroupWordsFor): per group, f(e_j) = nu_k sigma_j x^l x (word
//     j), g(e_j) = sigma_j y, so f(e_j) g(e_j) = w x y; h = sum f g of
//     degree 2G - 2; every party's weak share of h(e_1) .. h(e_{2G-2})
//     comes from the G (G + 1) / 2 symmetric cross products of the
//     group's words (x_j & y_j' ^ x_j' & y_j for j < j', and x_j & y_j:
//     the coefficient sigma_j sigma_j' L_j L_j' of x_j y_j' in h is
//     symmetric; AND of shares, times nu_k), summed over groups. These, one random
//     product x'y' in GF(2^64) (A's mask) and, with proof B, one in
//     GF(2^128) (B's mask) are reshared (one message).
//  3. coin c2: r and w'_m (A's mask weight); B's weights w'_k of the
//     GF(2^128) products and w''_m of its mask. h(e_0) = claim - h(e_1) -
//     ... - h(e_{G-1}); A's new claim is h(r) + w'_m z' over the vectors
//     f(r), g(r) (64 elements per group) and (w'_m x', y'); B's claim is
//     sum_k w'_k z_k + w''_m z'' over (w'_k x_k, y_k) and (w''_m x'', y'').
//  4. halvings: pairs (a, b) -> a + r (a + b); each round, every proof
//     with more than T = 129 elements (dzkp::kTailWords) sends the weak
//     shares of its h(1), h(x) reshared (one message for both) and one
//     coin is drawn (its low 64 bits are A's challenge, all 128 bits B's).
//     Once A's vectors hold at most dzkp::kStepFrom = 32769 elements, A's
//     steps compress by K = 4 (dzkp::kStepWords) instead: groups of K
//     elements as in step 2, h of degree 2K - 2, its values at e_1 ..
//     e_{2K-2} reshared (48 bytes), n -> ceil(n / K) per round trio (two
//     halvings' worth in one; its h from the 16 cross sums of the groups'
//     columns, dzkp::StepH, about twice a halving pair's products per
//     element). Each step is three rounds (the reshare, the
//     coin's acknowledgement, its opening). A halving takes n to
//     ceil(n / 2), so 2^k (T - 1) + 1 elements reach T after k halvings:
//     the AND proof's 64 m + 1 elements (m groups, the + 1 the mask) fit
//     that form, and T = 2^7 + 1 saves a halving against T = 2^7. A check
//     of 65,536 AND words (65,537 elements): 1 halving to 32769, 4 steps
//     by 4 to 129, 25 rounds in all (31 with steps from 2049, 46 with
//     T = 32 and halvings only).
//     Then the last compression takes each proof's T elements
//     (zero-padded) to one as step 2 does a group: h of degree 2T - 2, its
//     values at e_1 .. e_{2T-2} reshared (one message for both), a coin.
//  5. each proof's last f, g and claim c are opened (one round; c = f g
//     or the batch fails). f and g are uniformly random: the masks enter
//     them with a nonzero coefficient, so only a zero test leaks. That
//     coefficient is the mask's weight from coin c2 times a product of
//     Lagrange basis values at the later coins: it would be zero if the
//     weight were zero or a coin equalled an interpolation node of a
//     halving, a step or the last compression, and the opened f or g
//     would then be a public linear combination of wire values. Such a
//     coin is redrawn (CoinAvoiding, verify.cc; two more rounds, with
//     probability below 2^-55 per check): the coin is public, so every
//     party redraws alike, and each challenge is uniform over the field
//     minus at most T = 129 nodes (B's, when both proofs run, also
//     minus the coins whose low half is one of A's nodes).
//  6. compare (one round): hashes of everything opened, as below.
// Communication per party (A alone: the in-wave checks): 2G - 1 + 2 h +
// 6 s + 2T - 2 + 3 elements of 8 bytes, h + s + 3 coins of 16 + 32 (the
// opening and its acknowledgement) and the 32-byte compare, for h
// halvings (to kStepFrom elements) and s steps by K (to T) of n = 64 / G
// per AND word + 1 elements: O(log n) however many gates (~2.6 KB for one
// AES-128 block, ~0.06 bytes per AND word of a 65,536-word check). B adds
// 16 bytes per element of its own: 1 + 2 h_B + 2T - 2 + 3 for n_B = the
// GF(2^128) products + 1 (B only halves).
//
// Soundness (per Verify; all probabilities over the coins, which no party
// can compute before what they challenge has reached an honest party: each
// coin is a PRSS random value, unknown to any single party, opened only
// after a round of acknowledgements (Coin, verify.cc: with a one-way ring
// a single opening round would let party i read party i+1's share before
// sending its own last message, and choose that message's error to vanish
// at the coin); A's
// challenges are uniform in GF(2^64), B's in GF(2^128), and the union
// bound over the two proofs needs no independence between them):
//  - A's weights: an error word D != 0 on word j of group k lifts to a
//    nonzero element D^ = sum_l x^l D_l of GF(2^64); the claim's error
//    sum_{k,j} nu_k tau_j D^_kj is a nonzero polynomial of degree 2 in the
//    weights (its coefficient of nu_k tau_j is D^_kj), zero with
//    probability at most 2 / 2^64 (Schwartz-Zippel); tau_j = sigma_j^2 is
//    uniform because squaring is a bijection of GF(2^64) (the Frobenius
//    automorphism), and the nu_k, tau_j are independent;
//  - compression: a false claim survives a step only if the reshared h
//    (errors included, fixed before the coin) agrees with the true one at
//    r: at most (2G - 2) / |F| <= 126 / 2^64 for A's first, 2 / |F| per
//    halving, (2K - 2) / |F| = 6 / |F| per step by K = 4, (2T - 2) / |F|
//    = 256 / |F| for each last one (a nonzero
//    polynomial of degree d has at most d roots); each mask's error, and
//    each GF(2^128) product's, enters with a weight drawn after it was
//    sent: 1 / 2^64 for A's mask, 1 / 2^128 for B's sum (linear in the
//    weights w'_k, w''_m);
//  - the opening is exact;
//  - a redrawn coin (step 5) is uniform over at least |F| (1 - 130 /
//    2^64) elements of its field (A's nodes exclude at most 129 values of
//    the low half, and so 129 * 2^64 coins for B, whose own nodes exclude
//    at most 129 more), so each bound above holds with that in place of
//    |F|: a factor below 1 + 2^-56, which moves none of the exponents
//    below.
// A's vector has n < 2^40 elements (64 per group of the log of one wave),
// so at most 25 halvings (to 32769 elements: 2^40 / 2^15 = 2^25) and 4
// steps by 4 (32769 -> 8193 -> 2049 -> 513 -> 129): A fails with
// probability below (2 + 126 + 2 * 25 + 6 * 4 + 256 + 1) / 2^64 = 459 /
// 2^64 < 2^-55.15, B below (1 + 2 *
// 64 + 256 + 1) / 2^128 < 2^-119; per Verify below 2^-55.15 + 2^-119 <
// 2^-55.1.
// Inside a wave the AES kernel verifies at the first AND-layer boundary
// where the log holds EngineOptions::verify_words AND words (default
// MulLog::kVerifyWords, 65,536), so a batch runs at most one Verify per
// AND layer, one per wave and two more: for the largest batch (2^20
// AES-256 blocks: 128 waves of at most 14 * 6 layers) under 2^14
// Verifies, below 2^-55.1 * 2^14 = 2^-41.1 per batch (union bound), as long
// as ceil(2^20 / wave_lanes) * (14 * 6 + 1) + 2 <= 2^14 (wave_lanes >=
// 5462; EngineOptions::Validate refuses smaller in malicious mode); with
// the default, under 2,100 (2^11.04; 1.25 * 10^8 AND words), below
// 2^-44.0. Both below the required 2^-40. A batch's aes*-cts circuits
// (engine/cts_jobs.h) add at most min(depth, ceil(AND words /
// verify_words)) Verifies (cts::ShareEngine checks at the first AND-layer
// boundary past verify_words words), one before their verdicts' opening
// and the last; the engine counts them with the AES part's before any AND
// (cts_plan.cc PlanCts) and refuses a batch whose total could exceed 2^14,
// so the per-batch bound above holds for every batch it runs. The coins are expanded with
// the AES-128 PRF (prf.h), which stands in for uniform randomness. Lanes
// past a word's live ones are not checked: bitsliced lanes never mix, and
// those lanes' outputs are dropped, so an error there reaches no output,
// opening or tag.
//
// Zero test without opening the shares: every value opened during the
// check (coins, the last f, g, c) and in the batch is hashed; party i
// sends H(opened) to party i-1, which compares it with its own ("compare
// view", Araki et al., S&P 2017, section 2.3). The two honest parties
// together hold all shares, so a party that sent different shares of an
// opening to different parties (or sent its part late, biased by the
// others') is caught: the honest copies differ. The verdict c = f g is
// computed by every party on its opened values; the honest party whose
// view is the honest one fails.
//
// Openings. No party sends a ring message computed from an opened value
// (a coin, the batch's ctr0, a tag check's reveal, the last f, g, c) that
// could tell another party anything before the honest parties have
// confirmed that they opened the same value; outputs computed from
// openings go only to the KDC, which uses a batch's outputs only if all
// three servers return the same result (kdc-plugin batch_step.h). A
// cheater i can send its predecessor i-1 a shifted share of any opening,
// so that i-1 alone opens another value and derives its next messages (to
// i+1) from it; i+1, which opened the true value, would otherwise go on
// and open to i values interpolated from those messages (the last claim):
// a relation of the shares i lacks, learnt from a batch that then fails
// (for proof B over the powers of H alone, H from two such batches:
// test/core/hrecovery_test.cc). The rule holds because:
//  - every coin's acknowledgement is compared, not only hashed: party
//    i+1 compares what party i-1 sends with its own H(opened so far); on
//    a mismatch (or if it saw a deviation before the check: MulLog::
//    MarkDeviated) it goes silent for the rest of the check: every
//    message zeros of the prescribed size (the ring stays in step, no
//    party waits for a message that never comes) except its coin shares,
//    fresh PRSS values independent of the data, so that its successor's
//    coins, and hence its last opening, stay the honest run's; the check
//    fails on it. No extra round;
//  - between an opening and the next acknowledgement an honest party
//    sends coin shares and AND-layer, GF(2^128) or reshare messages. The
//    latter may be computed from components its predecessor derived from
//    a shifted opening (from the agreement's ctr0 to the first check, whole
//    AES layers pass), but each carries the sender j's zero-share
//    component a_j = F(k_j, id) ^ F(k_{j+1}, id) for a fresh id, which
//    the receiving party j-1 cannot compute: it lacks k_{j+1}, and no id
//    used for a zero share is ever used for a revealed random value (the
//    PRSS counter only moves forward: Prss::Skip);
//  - a check runs before every opening that depends on the batch's data
//    (the AES kernel's in-wave checks, CheckTags' before its reveal, the
//    batch's last before its outputs are released), so the first
//    acknowledgement after the agreement confirms ctr0;
//  - the tag checks' reveal is followed by the compare round
//    (CompareOpened) before any other ring message, and a check's last
//    opening by its compare round;
//  - the rounds and sizes of a check follow from values agreed before it,
//    so a malformed, mis-sized or out-of-step message inside it (e.g.
//    after a cheater showed its predecessor alone a coin to redraw) is a
//    detected deviation (IntegrityFailure), not a ring fault.
// So in a batch that a cheater makes fail, every ring message it receives
// is a coin share, a masked message, zeros, or an opening of values the
// honest parties agreed on: it learns nothing it could not have computed
// from its own shares. The party that can be fooled (i-1, whose only
// source is the cheater) may release outputs to the KDC; the other honest
// party fails, and the KDC combines nothing.
//
// On a one-way ring the honest party that receives the cheater's messages
// can always be fooled; the other honest party detects and fails the
// batch, and the KDC requires the same result from all three (kdc-plugin
// batch_step.cc), so no value computed from a cheated product reaches it.
#ifndef KMPC_PROTOCOL_VERIFY_H_
#define KMPC_PROTOCOL_VERIFY_H_

#include "absl/status/status.h"
#include "protocol/mul_log.h"

namespace kmpc::protocol {

class Rep3;

// The payload (absl::Status::SetPayload) marking a DATA_LOSS as a detected
// deviation rather than a broken ring message.
inline constexpr char kIntegrityPayload[] = "kmpc.v1/integrity-check-failed";
bool IsIntegrityFailure(const absl::Status& st);
// The status of a batch in which a deviation was detected (DATA_LOSS with
// kIntegrityPayload): the check's, and the agreement's (batch_agreement.cc).
absl::Status IntegrityFailure();

// Runs the checks of a MulLog among the three parties (all call Verify at
// the same point). Rounds: 2 coins of 2, 1 first compression, 3 per
// halving or step by 4 (see above), 3 for the last compression, 1
// opening, 1 compare. OK: every
// logged product is right and every opening consistent, except with
// probability below 2^-55.1.
// DATA_LOSS: a party deviated (the batch must fail and the ring be
// re-established); a channel error as is. Rewinds the log either way.
class Verifier {
 public:
  static absl::Status Verify(Rep3& ctx, MulLog& log);
  // Compares the opened-values hash only (one round): for openings made
  // after the last Verify (the tag checks' reveal).
  static absl::Status CompareOpened(Rep3& ctx, MulLog& log);
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_VERIFY_H_
