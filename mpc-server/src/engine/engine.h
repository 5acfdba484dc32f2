// The computational core of one MPC server worker: jobs of the
// aes128-ctr-mpc / aes256-ctr-mpc enctypes (docs/design/enctype.md)
// evaluated on replicated 2-of-3 XOR shares (Araki et al., CCS 2016).
//
// A batch runs in these ring rounds (one message to party i-1, one from
// party i+1 each):
//   2  agreement: SHA-256 digests of the public inputs and of each party's
//      view of the keys (present? cipher, dealing id), sent and then
//      forwarded, so all three decide alike (ABORTED for different inputs,
//      ring and PRSS still in step); what is forwarded carries its
//      originator's tag (agreement.h ForwardTag), and a forwarder that
//      alters it fails the batch as an integrity failure, in step; the
//      second round also reveals ctr0 for ENCRYPT/CHECKSUM/PAD jobs (PRSS
//      random values; a range that would touch the all-zero block is moved
//      by a local, deterministic fix-up, pads.h FixCounter, no round);
//   2+1  only if the key views differ: the per-job views are exchanged and
//      forwarded, the jobs whose key is missing (JOB_UNKNOWN_KEY) or
//      differently dealt / unusable (JOB_KEY_INCONSISTENT) on any party fail
//      alone on all three, and the counters of the rest are drawn in one
//      more round; a job whose key is the same everywhere but was dealt for
//      another cipher than the job names fails alone (JOB_WRONG_CIPHER), as
//      the agreed view carries the key's cipher and the inputs digest the
//      job's;
//   nr * d  AES AND layers for all blocks of all jobs, bitsliced (d = 3 with
//      the 51-AND S-box for batches of at most depth3_max_blocks, 1020
//      bytes per AES-128 block; d = 4 with
//      the 34-AND S-box for batches under small_sbox_min_blocks, else d = 6
//      with the 32-AND S-box: 1 bit per AND per party, i.e. 680 resp. 640
//      bytes per AES-128 block); batches over wave_lanes blocks run in
//      consecutive waves;
//   k  only for messages over kStoredHPowers-2 blocks: log2 doubling rounds
//      computing further powers of H;
//   1  only if the batch has CHECKSUM/VERIFY_CHECKSUM jobs with a non-empty
//      message: the shared message blocks times their shared powers of H
//      (one GF(2^128) product per block, all jobs at once);
//   d' only if the batch has aes*-cts jobs (engine/cts_jobs.h): the AND
//      depth of its deepest RFC 3962 program (2,914 for a 300-byte AES-256
//      reply), all shapes side by side (cts::EvaluateAll);
//   2  only if the batch has DECRYPT/VERIFY jobs: one GF(2^128)
//      multiplication r * (T' ^ T) and one reveal of the products;
//   1  only if the batch has aes*-cts DECRYPTs: the reveal of their
//      mismatch bits (after a check of every AND so far when malicious).
// AES-128 single block: 42 rounds (ENCRYPT), 44 (DECRYPT).
//
// With EngineOptions::malicious (protocol/verify.h), every product and
// opening is logged and verified by a distributed zero-knowledge proof:
// 2 ceil(log2 n) + 5 more rounds (n about 2x the logged AND words; 33 for
// one AES-128 block) after every wave but the last and inside a wave at
// the first AND-layer boundary past MulLog::kVerifyWords logged words
// (about every 770 AES-128 blocks), and once more before
// the tag checks' reveal (then one compare round after it) or before
// release; O(log n) field elements (a few kilobytes) per check, so the
// ring bytes stay within ~0.1% of the semi-honest ones for large batches.
//
// Threading: one Engine per worker thread and RingChannel; an Engine is not
// thread-safe. KeyShares / EncryptState are immutable once built and may be
// shared between threads.
//
// Output format for the KDC: every value the KDC may learn (keystream
// blocks, tags) is returned as this party's two shares (s_i, s_{i+1}) for
// party i in {0,1,2} (indices mod 3). The KDC XORs s_0 ^ s_1 ^ s_2 and
// rejects a batch whose two copies of any share (party i's s_{i+1} and party
// i+1's s_{i+1}) disagree. Public values (ctr0, integrity verdicts) are
// returned in the clear and are identical on the three servers.
#ifndef KMPC_ENGINE_ENGINE_H_
#define KMPC_ENGINE_ENGINE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "contract.h"
#include "kmpc.pb.h"
#include "net/channel.h"
#include "protocol/verify.h"
#include "store/cipher.h"

namespace kmpc::engine {

namespace pb = ::kmpc::v1;

// The servers' one cipher type (store/cipher.h); persisted by the store.
using ::kmpc::Cipher;

// The wire's kmpc.v1.Cipher and Cipher have the same values, so that a key
// record's cipher byte, the engine's Cipher and a Job's cipher field name
// a key size alike; ToProto and CipherFromProto are the conversions.
static_assert(static_cast<int>(Cipher::kAes128) == pb::CIPHER_AES128,
              "Cipher::kAes128 must equal kmpc.v1.CIPHER_AES128");
static_assert(static_cast<int>(Cipher::kAes256) == pb::CIPHER_AES256,
              "Cipher::kAes256 must equal kmpc.v1.CIPHER_AES256");
static_assert(static_cast<int>(Cipher::kAes128Cts) == pb::CIPHER_AES128_CTS &&
                  static_cast<int>(Cipher::kAes256Cts) == pb::CIPHER_AES256_CTS,
              "Cipher::kAes*Cts must equal kmpc.v1.CIPHER_AES*_CTS");

constexpr pb::Cipher ToProto(Cipher c) { return static_cast<pb::Cipher>(c); }

// aes128/aes256-cts-hmac-sha1-96 (store/cipher.h).
constexpr bool IsCts(Cipher c) { return c == Cipher::kAes128Cts || c == Cipher::kAes256Cts; }

// The Cipher of a kmpc.v1.Cipher value (or a record's cipher byte);
// nullopt for CIPHER_UNSPECIFIED and every unknown value.
constexpr std::optional<Cipher> CipherFromProto(int v) {
  switch (v) {
    case pb::CIPHER_AES128: return Cipher::kAes128;
    case pb::CIPHER_AES256: return Cipher::kAes256;
    case pb::CIPHER_AES128_CTS: return Cipher::kAes128Cts;
    case pb::CIPHER_AES256_CTS: return Cipher::kAes256Cts;
    default: return std::nullopt;
  }
}

// 10 or 14; 0 for an unknown value.
int NumRounds(Cipher cipher);
// 16 or 32; 0 for an unknown value.
size_t KeyBytes(Cipher cipher);

// H^1 .. H^kStoredHPowers are stored with every key (H = AES_K(0^128)).
// Longer messages get the missing powers computed inside the MPC by the
// job that needs them (log2 rounds of shared GF(2^128) multiplication).
inline constexpr int kStoredHPowers = 64;
static_assert(kStoredHPowers == contract::kStoredHPowers,
              "contract::PadPowers counts the stored powers");

// The contract's limits (proto/contract.h): blocks one job may cover, AES
// blocks one batch may need.
using contract::kMaxBatchBlocks;
using contract::kMaxJobBlocks;

// Material the dealer computed in the clear for an aes*-cts key (cts/
// dealer.h) and dealt as fresh replicated shares: what the aes*-cts jobs
// compute on (engine/cts_jobs.h). Each is a password-equivalent.
enum class CtsKind : uint8_t {
  kUsage = 1,     // DealUsage(K, usage): Ke's round keys, Ki's HMAC states
  kChecksum = 2,  // DealChecksum(K, usage): Kc's HMAC states
  kPrf = 3,       // DealPrf(K): DK(K, "prf")'s round keys (usage 0)
};
struct CtsMaterial {
  CtsKind kind = CtsKind::kUsage;
  uint32_t usage = 0;
  std::array<std::vector<uint8_t>, 2> share;  // (party+k)%3, same size
};

// The usages the dealer deals for an aes*-cts key (exchange-plan.md
// section 2): the PA-ENC-TIMESTAMP (1), the AS reply (3), and the
// PA-REQ-ENC-PA-REP checksum (56); for a service ticket whose server is
// the key's principal (a user used as a service: `kvno user`), the
// ticket (2, KRB5_KEYUSAGE_KDC_REP_TICKET) and its PAC's server
// signature (checksum usage 17, KRB5_KEYUSAGE_APP_DATA_CKSUM, which
// MIT's krb5_kdc_sign_ticket() uses for every PAC signature); and the
// PRF for FAST. A key record without a usage's material fails that
// usage's jobs alone with JOB_UNKNOWN_USAGE (PlanCtsJob); dealing the key
// again (kmpc-admin share, a password change) gives it all of them.
inline constexpr uint32_t kCtsDealtUsages[] = {1, 2, 3};
inline constexpr uint32_t kCtsDealtChecksums[] = {17, 56, 64};
// Of those, what only a key that is (also) a service gets (KeyKind): the
// ticket (2) and the PAC server signature (17), each an offline verifier
// for whoever asks for a ticket to it. A user's key (KeyKind::kUser) is
// dealt without them.
inline constexpr uint32_t kCtsServiceUsages[] = {2, 17};
// Whether a kind of key gets kCtsServiceUsages' material.
constexpr bool DealsServiceUsages(KeyKind k) { return k != KeyKind::kUser; }
// Of kCtsDealtChecksums, what a service's random key (KeyKind::kService)
// alone gets, and alone is computed under: the CAMMAC service verifier
// (usage 64, KRB5_KEYUSAGE_CAMMAC, RFC 7751), which the KDC makes for a ticket
// carrying authentication indicators. Under a password-derived key
// (a user, or a user used as a service) it would be one more offline
// password verifier released to the KDC in the clear, for any
// authorization data it picks: refused (JOB_UNKNOWN_USAGE), never dealt.
inline constexpr uint32_t kCtsServiceKeyChecksums[] = {64};
// Whether a key of this kind is password-derived: its aes*-cts AS reply
// is gated (user_key_rule.h CheckUserGate).
constexpr bool PasswordDerived(KeyKind k) { return k != KeyKind::kService; }
// The one direction the KDC uses each dealt usage in: it decrypts the
// client's timestamp (1), encrypts the reply (3) and a service ticket to
// the principal (2). The other direction is refused (JOB_UNKNOWN_USAGE):
// DECRYPT under 3 would let a compromised KDC host decrypt AS replies
// recorded before it was compromised, ENCRYPT under 1 mint a user's
// PA-ENC-TIMESTAMP, and DECRYPT under 2 decrypt every ticket to the
// principal it ever issued or recorded (their session keys, hence the
// user's sessions as a service). The KDC needs DECRYPT under 2 to read a
// ticket presented back to it (renewal or validation, S4U2Proxy evidence,
// a user-to-user second ticket; kadmind's AP-REQs): allowed under a
// service's random key only (kCtsServiceDecryptUsages), refused under a
// password-derived one (docs/limitations.md).
inline constexpr uint32_t kCtsDecryptUsages[] = {1};
// What a key of KeyKind::kService alone is also decrypted under: a ticket
// (2, contract::kTicketUsage), released to the KDC only if its HMAC holds.
// A random key's ticket is no password verifier; what a KDC host that is
// compromised gains by it (the tickets to that service presented or
// recorded meanwhile) is in docs/security-model.md.
inline constexpr uint32_t kCtsServiceDecryptUsages[] = {contract::kTicketUsage};
inline constexpr uint32_t kCtsEncryptUsages[] = {2, 3};
// The checksums a CHECKSUM job releases: the PAC server signature (17)
// only. The usage-56 material is dealt for the PA-REQ-ENC-PA-REP splice
// (Job.splice_length), whose checksum of the AS-REQ is an offline verifier
// of the user's password and leaves the cluster only inside the encrypted
// reply (cts.h SpliceEncryptProgram); a CHECKSUM under 56 would hand it to
// the KDC in the clear for any request it picks (JOB_UNKNOWN_USAGE).
inline constexpr uint32_t kCtsChecksumUsages[] = {17};
// (And kCtsServiceKeyChecksums, under a KeyKind::kService key only.)
// The same for the FAST keys (Job.cts_key, cts.h Cf2Pepper: the KDC's half
// of KRB-FX-CF2 with the dealt key's PRF+): the KDC decrypts the client's
// encrypted challenge (54), encrypts its own (55) and the reply under the
// strengthened reply key (3). ENCRYPT under 54 would mint a client's
// challenge for any armor key the KDC picks, DECRYPT under 55 or 3 open
// what the KDC sent earlier.
inline constexpr uint32_t kCtsCf2DecryptUsages[] = {54};
inline constexpr uint32_t kCtsCf2EncryptUsages[] = {55, 3};

// One party's view of one shared key. Party i holds shares i and i+1 of
// every value. Secrets are wiped when the object dies.
struct KeyShares {
  int party = -1;  // 0, 1, 2: which party's view this is
  Cipher cipher = Cipher::kAes128;
  // From the key's record (store::KeyMeta::kind), not this encoding: the
  // key lookup sets it. Part of the key view the parties compare.
  KeyKind kind = KeyKind::kUser;
  // Random id the dealer gives the three views of one dealing (not
  // secret). The parties compare it before using a key, so a re-dealt key
  // present on only some servers fails cleanly instead of computing junk.
  std::array<uint8_t, 16> deal_id{};
  // The deal_id of the dealing these shares descend from: deal_id itself
  // for a dealt key, the old key's origin for a RefreshKeys copy (refresh.h:
  // the copy's own deal_id is new). What a server's per-key bounds are
  // keyed by (gate_budget.h, CtsReleaseLimiter), so copies share them.
  std::array<uint8_t, 16> origin_deal_id{};
  // origin_deal_id, or deal_id where it is unset (all zero).
  const std::array<uint8_t, 16>& Origin() const;
  // round_keys[k] = share (party+k)%3 of the expanded key schedule,
  // (NumRounds+1)*16 bytes, round 0 first, FIPS-197 byte order.
  std::array<std::vector<uint8_t>, 2> round_keys;
  // h_powers[k] = share (party+k)%3 of H^1 .. H^kStoredHPowers, 16 bytes
  // each, GCM byte order (SP 800-38D), H^1 first.
  std::array<std::vector<uint8_t>, 2> h_powers;
  // aes*-cts keys only (Cipher::kAes*Cts): the dealt per-usage material;
  // round_keys and h_powers above are then the base key's, kept for
  // usages dealt later (a cts key is never run as a ctr-mpc key: the job's
  // cipher must be the key's).
  std::vector<CtsMaterial> cts;
  // The material of (kind, usage), or null.
  const CtsMaterial* FindCts(CtsKind kind, uint32_t usage) const;

  KeyShares() = default;
  KeyShares(const KeyShares&) = default;
  KeyShares(KeyShares&&) = default;
  KeyShares& operator=(const KeyShares&) = default;
  KeyShares& operator=(KeyShares&&) = default;
  ~KeyShares();

  // Checks sizes and fields; the engine refuses a key that fails this.
  absl::Status Validate() const;

  // Stable binary encoding for the share store:
  //   "KMPCKS" | version 0x01 | party (1) | cipher (1) | hpowers (u16 BE) |
  //   deal_id (16) | round_keys[0] | round_keys[1] | h_powers[0] |
  //   h_powers[1]
  // and for an aes*-cts key version 0x02, the same followed by
  //   count (1) | count x (kind (1) | usage (u32 BE) | len (u16 BE) |
  //   share[0] (len) | share[1] (len)).
  // Version 1 records (every ctr-mpc key) load unchanged. A key whose
  // origin_deal_id differs from its deal_id (a refresh's copy) is written
  // as version 3 (of 1) or 4 (of 2): the origin (16) follows deal_id; a
  // version 1 or 2 record's origin is its deal_id.
  std::vector<uint8_t> Serialize() const;
  // Strict inverse of Serialize: exact length, known version/cipher/party.
  static absl::StatusOr<KeyShares> Parse(absl::Span<const uint8_t> bytes);
};

// Removes from `key` the material a user's key must not hold
// (kCtsServiceUsages: the ticket's usage 2, the PAC signature's checksum
// usage 17), wiping it: what Admin.SetKeyKind does to a key re-marked as a
// user's (a record dealt before key kinds holds it). Returns how many
// materials it removed. Nothing else changes: the rest of the dealing, and
// its deal_id, stay as they were.
size_t DropServiceMaterial(KeyShares& key);

// The dealer (admin path, tests): expands `key` (16 or 32 bytes matching
// `cipher`), computes H = AES_K(0) and H^1..H^kStoredHPowers in the clear,
// and splits everything into three party views with fresh randomness.
// The caller must wipe `key` itself; intermediate copies are wiped here.
// For an aes*-cts cipher the dealer also computes, where the key is,
// DealUsage(K, u) for kCtsDealtUsages, DealChecksum(K, u) for
// kCtsDealtChecksums and DealPrf(K) (cts/dealer.h), and deals each as
// fresh shares (KeyShares::cts); the clear material is wiped.
// `kind`: a user's key (KeyKind::kUser) gets no kCtsServiceUsages
// material; the views carry the kind (the caller stores it with them).
absl::StatusOr<std::array<KeyShares, 3>> DealKey(Cipher cipher,
                                                 absl::Span<const uint8_t> key,
                                                 KeyKind kind = KeyKind::kService);

// What one tag under one counter needs (one party's view): shares of
// AES_K(c0) and of the powers of H the tag's GHASH needs. Wiped on
// destruction. EncryptState and PadState are its two uses, distinct types
// so that the service keeps them in distinct stores.
struct TagState {
  int party = -1;
  Cipher cipher = Cipher::kAes128;
  std::string key_id;
  uint32_t usage = 0;
  std::array<uint8_t, 16> ctr0{};  // public
  // shares (party, party+1) of AES_K(c0)
  std::array<std::array<uint8_t, 16>, 2> mask{};
  // Shares of H^1 .. H^m, 16 bytes each: for messages whose tag needs at
  // most kStoredHPowers powers, the key's stored ones (`key`, no copy;
  // h_powers empty), else the powers the job computed (h_powers).
  std::shared_ptr<const KeyShares> key;
  std::array<std::vector<uint8_t>, 2> h_powers;

  TagState() = default;
  TagState(const TagState&) = delete;
  TagState& operator=(const TagState&) = delete;
  ~TagState();

  // Share comp (0, 1) of the powers of H, and how many powers there are.
  const uint8_t* Powers(int comp) const;
  size_t NumPowers() const;

 protected:
  // Heap memory of key_id and h_powers (not counting a shared `key`).
  size_t OwnHeapBytes() const;
};

// State an ENCRYPT job leaves for its FINALIZE: the powers are H^1 ..
// H^(nblocks+2). The service must let at most one FINALIZE use it
// (enctype.md, invariant 2) and drop it afterwards.
struct EncryptState : TagState {
  uint32_t nblocks = 0;

  // Memory this state holds on its own (not counting a shared `key`).
  size_t OwnBytes() const { return sizeof(EncryptState) + OwnHeapBytes(); }
};

// State a PAD job leaves for one KeyOps.Sign item: the powers a message of
// up to max_length bytes needs, H^1 .. H^(2 + ceil(max_length/16)), and a
// zero-sharing share z (PRSS, Araki et al. CCS 2016 section 2.2:
// z_0 ^ z_1 ^ z_2 = 0, fresh for this pad) that makes the party's tag share
// uniform on its own. Nothing of it is revealed but ctr0. The service keeps
// it apart from EncryptStates (a pad never finalizes, an ENCRYPT state
// never signs) and lets one Sign item use it (enctype.md, invariant 6).
struct PadState : TagState {
  uint32_t max_length = 0;         // bytes of the longest message it signs
  // A verification pad (JOB_PAD with a counter given by the KDC): it only
  // verifies (SignItem.verify), never signs: a tag at a counter the
  // KDC chose would break invariant 6.
  bool verify_only = false;
  // A verification pad holds shares of r*H^k and r*AES_K(c0) in h_powers
  // and mask (pads.h, the verification pads), and of r here.
  std::array<std::array<uint8_t, 16>, 2> r{};
  std::array<uint8_t, 16> zero{};  // z_party

  PadState() = default;
  ~PadState();

  size_t OwnBytes() const { return sizeof(PadState) + OwnHeapBytes(); }
};

// A' of a keyed checksum's GHASH: usage (4 bytes big-endian) || 0x99
// (enctype.md "Keyed checksum").
std::array<uint8_t, 5> ChecksumAad(uint32_t usage);

// This party's additive share of the checksum tag of a message D under a
// pad (kmpc.proto SignItem; enctype.md "Keyed checksum"): with x = D's
// blocks, h = the pad's powers of H and m = 2 + ceil(len(D)/16) GHASH
// blocks (A' = usage BE32 || 0x99, D, the lengths; SP 800-38D 6.4),
//   t_i = sum_q (x_{q,i} h_{k,i} ^ x_{q,i} h_{k,i+1} ^ x_{q,i+1} h_{k,i})
//         ^ A' h_{m,i} ^ lens h_{1,i} ^ [AES_K(c0)]_i ^ z_i,
// k = m - 1 - q: the local cross terms of a shared product (Araki et al.,
// CCS 2016, section 2.2) summed over the blocks, public blocks times the
// party's first share. t_0 ^ t_1 ^ t_2 is the tag; each t_i alone is
// uniform (z). Local, no communication. `shares` = this party's (s_i,
// s_{i+1}) of D. INVALID_ARGUMENT (nothing computed) if usage differs from
// the pad's, len(D) exceeds max_length, the two shares' sizes differ, or
// the pad is incomplete.
absl::StatusOr<std::array<uint8_t, 16>> SignShare(
    const PadState& pad, uint32_t usage, absl::Span<const uint8_t> share0,
    absl::Span<const uint8_t> share1);

// A chain of two signatures under one key (kmpc.proto SignItem.chain;
// enctype.md "Chained signatures"): sig_1 = ctr0_1 || tag_1 over D (pad1),
// sig_2 = ctr0_2 || tag_2 over D_2 = ctr0_1 || tag_1 (pad2, two blocks).
// Returns t_1,i (SignShare) || t_2,i with, H^k_1 and H^k_2 the pads'
// shares of the powers of H (same H: same key),
//   t_2,i = A' h2_{4,i} ^ ctr0_1 h2_{3,i} ^ lens_2 h2_{1,i}
//           ^ [tag_1 * H^2]_i ^ [AES_K(ctr0_2)]_i ^ z2_i,
//   [tag_1 * H^2]_i = (t_1,i's terms with every power H^k of pad 1 replaced
//           by H^(k+2)) ^ cross terms of [AES_K(ctr0_1)] and [H^2] (pad 1),
// i.e. tag_1's own degree-2 terms one power further (tag_1 is linear in
// the public and shared blocks of D, and AES_K(ctr0_1) times H^2 is a
// shared product: Araki et al. CCS 2016 section 2.2); the zero-sharing
// z1 of pad 1 sums to zero and does not enter. Degree 2, local, and each
// t_2,i alone is uniform (z2). INVALID_ARGUMENT (nothing computed) as
// SignShare does, or if the pads differ in party, key id, cipher or usage,
// either is a verification pad, pad2 signs fewer than 32 bytes, or pad1
// lacks H^(m+1), H^(m+2) (m = D's GHASH blocks).
absl::StatusOr<std::array<uint8_t, 32>> ChainedSignShare(
    const PadState& pad1, const PadState& pad2, uint32_t usage,
    absl::Span<const uint8_t> share0, absl::Span<const uint8_t> share1);

// A job of a batch. The type is the contract's (proto/kmpc.proto JobType):
//   JOB_ENCRYPT  in: key_id, usage, nblocks (0..kMaxJobBlocks; 0 = empty
//                plaintext). out: ctr0 (picked by the cluster), keystream
//                shares for blocks c0+1 .. c0+nblocks, state for FINALIZE.
//   JOB_FINALIZE is not a Run job (JOB_MALFORMED, contract::CheckJob): an
//                ENCRYPT's tag is FinalizeShare's, ring-free, one additive
//                share per server (below).
//   JOB_DECRYPT  in: key_id, usage, data = ctr0 || C || T (the enctype's
//                ciphertext format). out: JOB_OK with keystream shares for
//                blocks c0+1.. if the tag holds, else JOB_INTEGRITY_FAILED.
//   JOB_CHECKSUM in: key_id, usage, length = len(D), data_shares = this
//                party's two shares of D (never D itself: enctype.md,
//                invariant 5). out: ctr0 (picked by the cluster) and tag
//                shares; the checksum is ctr0 || (s_0 ^ s_1 ^ s_2).
//   JOB_VERIFY_CHECKSUM in: key_id, usage, length, data_shares as for
//                CHECKSUM, checksum = ctr0 || tag (32). out: JOB_OK or
//                JOB_INTEGRITY_FAILED.
//   JOB_PAD      in: key_id, usage, length = the longest message it may
//                sign. out: ctr0 (picked by the cluster) and a PadState
//                (AES_K(c0), the powers of H, a fresh zero-share); nothing
//                secret is revealed. In malicious mode a batch whose checks
//                fail returns no result, so every pad comes from a
//                verified batch. With `checksum` (16 bytes): a
//                verification pad at that counter (PadState::verify_only).
//                With pad_after: its counter is that ENCRYPT's ctr0 +
//                contract::kLinkedPadOffset + pad_slot.
// The GHASH of a shared message needs one shared x shared GF(2^128) product
// per message block (a block of D times its power of H), all of the batch
// in one ring round (protocol::Rep3::GfMul, logged in malicious mode); the
// public blocks (A', the lengths) multiply the powers' shares locally.
// Every job is checked with contract::CheckJob (an ENCRYPT's length is
// 16 * nblocks); a job that fails it fails alone.
struct Job {
  pb::JobType type = pb::JOB_ENCRYPT;
  // Required for every job (kmpc.proto Job.cipher): not
  // CIPHER_AES128 / CIPHER_AES256 fails the check (JOB_MALFORMED); not the
  // cipher the key was dealt for (KeyShares::cipher, the same on all three
  // parties once their key views agree) fails the job as JOB_WRONG_CIPHER
  // before any AES runs on the key. Part of the agreement digest.
  pb::Cipher cipher = pb::CIPHER_UNSPECIFIED;
  std::string key_id;  // contract::kKeyIdSize bytes
  uint32_t usage = 0;
  uint32_t nblocks = 0;           // JOB_ENCRYPT only
  // JOB_CHECKSUM, JOB_VERIFY_CHECKSUM: len(D); JOB_PAD: the longest message
  // it may sign; an aes*-cts job: its dealt input's (a DECRYPT's C || T).
  // Public and part of the agreement digest (the shares are not:
  // batch_agreement.cc EncodeJob).
  uint32_t length = 0;
  std::vector<uint8_t> data;      // a ctr-mpc JOB_DECRYPT: ctr0||C||T
  // JOB_VERIFY_CHECKSUM: the checksum's ctr0 (16 bytes); a verification
  // JOB_PAD: its counter.
  std::vector<uint8_t> checksum;
  // JOB_CHECKSUM: data_shares[k] = share (party+k)%3 of D, `length` bytes
  // each; JOB_VERIFY_CHECKSUM: of D || t' (`length` + 16 bytes, t' the
  // presented tag, contract::SharedBytes) (kmpc.proto
  // RunRequest.data_shares). The only input that differs between the
  // parties; wiped when the Job dies.
  // A failed check the caller already made (the server checks the request's
  // jobs with contract::CheckJob): the job fails with this status and
  // detail on every party without being computed. Part of the agreement
  // digest.
  contract::JobCheck precheck;
  // JOB_ENCRYPT, JOB_CHECKSUM: index in the batch of a JOB_DECRYPT or
  // JOB_VERIFY_CHECKSUM this job's result is released on (kmpc.proto
  // Job.release_if_ok): unless that job ends JOB_OK, this one ends
  // JOB_WITHHELD with nothing revealed and no state. kNoCondition: none.
  // Part of the agreement digest, so a KDC cannot give the condition to
  // some parties only.
  static constexpr int64_t kNoCondition = -1;
  int64_t release_if_ok = kNoCondition;
  // JOB_PAD: index in the batch of the ENCRYPT whose ctr0 +
  // contract::kLinkedPadOffset + pad_slot is this pad's counter (kmpc.proto
  // Job.pad_after, Job.pad_slot); the PADs naming one ENCRYPT have
  // distinct slots below contract::kPadSlots. kNoCondition: none. Part of
  // the agreement digest, as is pad_slot.
  int64_t pad_after = kNoCondition;
  uint32_t pad_slot = 0;
  // aes*-cts DECRYPT / ENCRYPT: the FAST key (kmpc.proto Job.cts_key);
  // data_shares then start with the KDC's half of it. Part of the
  // agreement digest.
  pb::CtsKey cts_key = pb::CTS_KEY_DEALT;
  // aes*-cts ENCRYPT, usage 3, the dealt key: the PA-REQ-ENC-PA-REP splice
  // (kmpc.proto Job.splice_length, splice_offset): data_shares hold P then
  // D (splice_length bytes); the checksum of D under the key's usage-56
  // checksum material is XORed into P at splice_offset inside the
  // encryption and never output. 0: none. Part of the agreement digest.
  uint32_t splice_length = 0;
  uint32_t splice_offset = 0;
  // aes*-cts ENCRYPT, usage 2, with a splice: index in the batch of the
  // signing PAD (a ctr-mpc key, usage 17) whose pad makes the ticket's KDC
  // signature over the PAC's server signature, both computed and spliced
  // in the circuit (kmpc.proto Job.sign_pad; cts.h TicketClassProgram).
  // The pad is spent: its result carries ctr0 and no PadState. kNoCondition:
  // none. Part of the agreement digest.
  int64_t sign_pad = kNoCondition;
  // The KDC's clock, seconds since the Unix epoch (kmpc.proto
  // RunRequest.now_unix): an aes*-cts DECRYPT's freshness window is
  // [now - cts_skew_s, now + cts_skew_s] (EngineOptions). Part of the
  // agreement digest.
  int64_t now = 0;
  std::array<std::vector<uint8_t>, 2> data_shares;

  Job() = default;
  Job(const Job&) = default;
  Job(Job&&) = default;
  Job& operator=(const Job&) = default;
  Job& operator=(Job&&) = default;
  ~Job();
};

struct JobResult {
  // JOB_OK; JOB_INTEGRITY_FAILED (a tag that does not verify, or an input
  // that cannot verify: contract::CheckJob); JOB_MALFORMED; JOB_UNKNOWN_KEY
  // (some party lacks the key); JOB_KEY_INCONSISTENT (the parties hold
  // different dealings of the key, or a party's shares are unusable);
  // JOB_WRONG_CIPHER (Job::cipher is not the key's, nothing computed). The
  // same status on all three parties; the other jobs of the batch are
  // unaffected. `detail` says why (public terms only).
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  bool ok() const { return status == pb::JOB_OK; }
  std::array<uint8_t, 16> ctr0{};  // JOB_ENCRYPT, JOB_CHECKSUM
  // keystream[k] = share (party+k)%3 of the keystream, nblocks*16 bytes.
  std::array<std::vector<uint8_t>, 2> keystream;
  // tag[k] = share (party+k)%3 of the tag (JOB_CHECKSUM).
  std::array<std::array<uint8_t, 16>, 2> tag{};
  std::shared_ptr<const EncryptState> state;  // JOB_ENCRYPT
  std::shared_ptr<const PadState> pad;        // JOB_PAD
};

struct BatchResult {
  uint64_t batch_seq = 0;
  std::vector<JobResult> jobs;  // same order as the input
};

// Key lookup by id in this party's store. Returning an error (NOT_FOUND or
// anything else) fails only that job, consistently on all three parties.
using KeyLookup = std::function<absl::StatusOr<std::shared_ptr<const KeyShares>>(
    absl::string_view key_id)>;

class CtsReleaseLimiter;  // cts_jobs.h
class GateBudget;         // gate_budget.h

struct EngineOptions {
  // Lanes (AES blocks) per pipeline chunk: while one chunk's AND-layer
  // message is in flight the next chunk computes. Multiple of 64. 4096:
  // over TLS/TCP every ring message costs syscalls, records and wake-ups,
  // so fewer, larger chunks cost less server CPU per block.
  uint32_t chunk_lanes = 4096;
  // Lanes per wave: larger batches run in consecutive waves (each a full
  // set of AND rounds), which keeps the working set in cache. >= chunk_lanes.
  uint32_t wave_lanes = 8192;
  // Batches with at least this many AES blocks use the 32-AND S-box
  // (AND depth 6: fewer bytes); smaller ones the 34-AND S-box (AND depth 4:
  // fewer rounds, lower latency). The server's --small_sbox_min_blocks
  // defaults to this. 16384: login batches (tens to a few hundred logins,
  // ~32 AES-256 blocks each) take 14*4 AND rounds instead of 14*6 for ~6%
  // more bytes; bulk batches of 16384 blocks and more keep the 32-AND
  // S-box and its 640 bytes per AES-128 block.
  uint32_t small_sbox_min_blocks = 16384;
  // Batches of at most this many AES blocks use the 51-AND S-box of AND
  // depth 3 (aes.h kDepth3): 14*3 instead of 14*4 ring rounds per AES-256
  // batch for half again as many AND bits, which wins where a batch's
  // latency is round trips (one client's Run, ~28 blocks), not bytes and
  // AND compute. 0 = never. It pays only while a batch's rounds cost more
  // than its bytes and AND compute (integration-tests/bench/sbox_ab.py
  // measures where: up to a few hundred blocks, semi-honest). With
  // --security=malicious the check verifies 1.5x the AND words, in one
  // more halving round, which takes the saved rounds back. So the server's
  // --depth3_max_blocks defaults to kDepth3MaxBlocksSemiHonest, and to 0
  // with --security=malicious (docs/bench-log.md, 2026-11-24).
  static constexpr uint32_t kDepth3MaxBlocksSemiHonest = 256;
  uint32_t depth3_max_blocks = kDepth3MaxBlocksSemiHonest;
  // Security with abort against one malicious party (protocol/verify.h):
  // every AND and GF(2^128) product of a batch is verified before anything
  // depending on it is opened or released. All three parties must agree
  // (the agreement digest covers it). Costs extra rounds and bytes.
  bool malicious = false;
  // Malicious mode: the AES kernel checks the products so far at the first
  // AND-layer boundary where its log holds this many AND words
  // (protocol::MulLog::kVerifyWords: the log and the check's vectors stay
  // in a 2-core host's shared L3 for all three parties). Larger values
  // save rounds (about 25 per check) where each party has its own cache
  // and the ring a real RTT. All three parties must agree (the agreement
  // digest covers it). > 0.
  uint32_t verify_words = protocol::MulLog::kVerifyWords;
  // The aes*-cts shapes one batch may compile and run, as the sum of their
  // message bytes n (conf || P, plus a spliced message's bytes, or a
  // checksum's data; one term per distinct shape, engine/cts_jobs.h
  // CtsProgramCache::ShapeBytes). A program and its
  // evaluation's scratch grow linearly in n (an 8 KiB AES-128 DECRYPT:
  // about 0.3 GiB of gate lists and more of scratch per party), and the
  // batch holds all of its shapes' at once whatever the program cache
  // evicts: without a bound, tens of long distinct lengths in one batch
  // exhaust a server's memory. A job whose new shape would pass it fails
  // alone (JOB_MALFORMED) before it is compiled, alike on every party.
  // All three parties must agree (the agreement digest covers it). The
  // default lets one job of any length (contract::kMaxCtsBytes) through
  // beside others, or one spliced reply of the longest P and D alone; > 0.
  // The KDC module packs batches to the default (contract::kCtsBatchBytes).
  uint64_t cts_batch_bytes = contract::kCtsBatchBytes;
  // With masked programs (--cts_masked_gates, cts_jobs.h CtsProgramCache)
  // a Run goes over masked wires only while its Rep3 AND words (each
  // shape's program ANDs x its lane words, cts_jobs.h RunWords) are at
  // most this; a larger Run keeps Rep3 ANDs. Masked wires halve the
  // rounds for ~1.5x the CPU a lane word (docs/design/masked-gates.md,
  // "Which Runs"): a small Run's cost is its rounds (one-client latency,
  // servers in different rooms), a large one's is CPU (a busy realm's
  // peak, where Runs hold tens of logins a shape). The default lets a
  // login's Run of one lane word (~444,000 words) or a TGS's (~600,000)
  // go masked, not one of two words (at 1,000,000 a closed loop of 256
  // clients ran 2-word masked Runs at 1.4x the CPU a login), nor a login
  // beside a TGS. Each party's choice goes into the Run's
  // agreement (masked only if all three choose it), so servers that differ
  // here run Rep3. 0: never masked.
  static constexpr uint64_t kCtsMaskedMaxAndWords = 750'000;
  uint64_t cts_masked_max_and_words = kCtsMaskedMaxAndWords;
  // And only while the batch holds at most this many aes*-cts jobs: one
  // request's (a login's timestamp and reply; a FAST login's three; a
  // TGS's ticket). A batch of more is requests that queued together, a
  // realm at load, where the CPU a lane word decides the peak and masked
  // wires spend ~1.9x (a reply) to ~2.5x (a ticket) of it: a closed loop
  // of 16 clients ran Runs of ~6 tickets of one length class, one lane
  // word within the words' bound, masked at ~1.4x the CPU an operation
  // (docs/bench-log.md, 2026-11-29 22:51). Goes into the same agreement.
  static constexpr size_t kCtsMaskedMaxJobs = 3;
  size_t cts_masked_max_jobs = kCtsMaskedMaxJobs;
  // And only once the server has run no batch at load (past
  // cts_masked_max_jobs, or while busy) for cts_masked_calm: under load
  // the queue drains now and then, and the small batches of those
  // moments are the load's too. cts_loaded_at holds the last such
  // batch's start (absl::ToUnixNanos), shared by the server's workers;
  // null or a zero calm: no memory (tests, tools).
  std::shared_ptr<std::atomic<int64_t>> cts_loaded_at;
  absl::Duration cts_masked_calm = absl::ZeroDuration();
  // Whether this server has other batches waiting or running beside the
  // one this engine runs (service/scheduler.h Scheduler::Busy). A busy
  // party chooses Rep3 ANDs for the Run's aes*-cts programs whatever their
  // words: other batches then wait for the CPU, which masked wires spend
  // ~1.5x of a lane word, while an idle server's login waits for the
  // Run's rounds, which they halve. Goes into the same agreement as the
  // bound. Null: never busy (tests, tools).
  std::function<bool()> busy;
  // The freshness of a gate (docs/security-model.md, "Freshness of the
  // gate"): an aes*-cts DECRYPT (a PA-ENC-TIMESTAMP, a FAST challenge)
  // releases the jobs gated on it only if its patimestamp lies within
  // cts_skew_s of the batch's Job::now (the KDC's clock, checked against
  // the server's own by the service), compared on shares (cts.h
  // StaleTimestamp). MIT's default clockskew, 300 s. All three parties
  // must agree (the agreement digest covers it).
  uint32_t cts_skew_s = 300;
  // A password-derived key's gated AS replies (an aes*-cts ENCRYPT under
  // usage 3 released on its gate) released per minute, a token bucket of
  // this size refilled over a minute per key (cts_jobs.h
  // CtsReleaseLimiter): past it the job fails alone (JOB_RATE_LIMITED),
  // alike on every party (a party's "over" is in its key view, and any
  // party's fails the job). Bounds what a compromised KDC gets from a
  // timestamp it replays within the skew. 0: no bound.
  uint32_t cts_releases_per_minute = 30;
  // The server's per-deal state, shared by its workers and owned by the
  // server (made in engine_flags.cc): the release bound's buckets
  // (cts_jobs.h CtsReleaseLimiter) and the gate DECRYPTs' failure budget
  // (gate_budget.h). Null: the engine keeps its own (tests; each party of
  // an in-process ring counts apart, as a server does).
  std::shared_ptr<CtsReleaseLimiter> release_limiter;
  std::shared_ptr<GateBudget> gate_budget;

  // What Engine::Create checks (chunk_lanes a positive multiple of 64,
  // wave_lanes >= chunk_lanes, verify_words > 0; in malicious mode, few
  // enough waves per batch that it runs at most kMaxVerifiesPerBatch
  // Verifies, protocol/verify.h); a server checks its flags with it at
  // start-up, not at its first batch.
  absl::Status Validate() const;

  // Verifies per batch under which protocol/verify.h's bound holds, and
  // the AND layers of a wave (AES-256, 32-AND S-box: 14 rounds x 6).
  static constexpr uint64_t kMaxVerifiesPerBatch = uint64_t{1} << 14;
  static constexpr uint64_t kMaxAndLayersPerWave = 14 * 6;
  // The most waves a batch may take in malicious mode: each costs up to
  // kMaxAndLayersPerWave + 1 Verifies, and two more end the batch.
  static constexpr uint64_t MaxWavesPerBatch() {
    return (kMaxVerifiesPerBatch - 2) / (kMaxAndLayersPerWave + 1);
  }
};

// One worker's MPC engine. The RingChannel must outlive the Engine.
//
// Channel requirement: within one AND layer the engine sends the messages
// of all chunks (up to ~36 bits per AES block per S-box layer, i.e. a few
// MB for 100,000 blocks) before it receives the first reply, so
// SendToPrev must not wait for the peer to read (queue or buffer it).
class Engine {
 public:
  // Sets up the PRSS keys with the two neighbours (one exchange on the
  // ring: party i draws k_i and sends it to party i-1). All three parties
  // must call this at the same time on the same ring.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      net::RingChannel& channel, EngineOptions options = {});

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int party() const;

  // Bytes the malicious-mode checks keep allocated between batches
  // (protocol::MulLog::retained_bytes, at most MulLog::kMaxRetainedBytes
  // after a batch).
  size_t verify_retained_bytes() const;

  // Runs one batch. The three parties must call this with the same
  // batch_seq and jobs (same order); they first compare a SHA-256 digest of
  // a canonical encoding of (batch_seq, jobs' public inputs) and fail with
  // ABORTED if any differs. Per-job problems are reported in JobResult;
  // a returned error means the whole batch failed: ABORTED (the parties
  // were given different batches or hold an inconsistent state),
  // INVALID_ARGUMENT (over kMaxBatchBlocks), or a channel error
  // (UNAVAILABLE, DATA_LOSS, ...) after which the ring must be
  // re-established.
  absl::StatusOr<BatchResult> RunBatch(uint64_t batch_seq,
                                       absl::Span<const Job> jobs,
                                       const KeyLookup& lookup);

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// FINALIZE as KeyOps.Finalize serves it, without a ring: this party's one
// additive share t_i = GHASH_{[H]_i}(A, C) ^ [AES_K(c0)]_i of the tag
// (component i of the replicated sharing only; t_0 ^ t_1 ^ t_2 is the
// tag). Never both components: the two parties holding component j would
// each return it computed over the C it was sent, and a KDC that sent them
// different ciphertexts would get (GHASH_{[H]_j}(A, C) ^ GHASH_{[H]_j}(A, C'))
// with the mask cancelled, i.e. [H]_j times a known difference: H, and
// every tag, from one request. With one component per party the mask
// share [AES_K(c0)]_i is in each answer once; AES_K(c0) is used for no
// other tag (the state is taken once), so the three answers are uniform
// whatever ciphertexts they were computed over, and a tampered answer can
// only make this one tag wrong. INVALID_ARGUMENT for a state of no party,
// a usage other than the state's, or a C longer than its keystream (a
// shorter one is a prefix: the KDC's speculative keystream is sized by a
// bound). No function of the server returns both components of a tag
// (integration-tests/test_code_layout.py); tests that need them compute
// them in test code.
absl::Status FinalizeShare(const EncryptState& state, uint32_t usage,
                           absl::Span<const uint8_t> ciphertext,
                           std::array<uint8_t, 16>& share);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_ENGINE_H_
