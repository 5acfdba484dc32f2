// The contract between the KDC module and the MPC servers: the job types
// (the proto enum kmpc::v1::JobType is the only one), the limits, the
// ciphertext format's overhead, the counter-range rule and what a job costs.
// The module checks a job with CheckJob before it queues it; the servers
// check every job of a batch with the same function and fail a job that
// breaks it alone (JobStatus), never the whole batch. Constructions:
// docs/design/enctype.md.
//
// Depends on the proto messages only (no gRPC): the servers' engine uses it.
#ifndef KMPC_PROTO_CONTRACT_H_
#define KMPC_PROTO_CONTRACT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "kmpc.pb.h"

namespace kmpc::contract {

namespace pb = ::kmpc::v1;

inline constexpr size_t kKeyIdSize = 32;    // a handle's key id (enctype.md)
inline constexpr size_t kBatchIdSize = 16;  // RunRequest / FinalizeRequest
inline constexpr size_t kBlockSize = 16;
inline constexpr size_t kCtr0Size = 16;
inline constexpr size_t kTagSize = 16;
// ctr0 (16) || C || T (16): what an encryption adds to the plaintext.
inline constexpr size_t kCiphertextOverhead = kCtr0Size + kTagSize;
// A gmac-aes*-mpc checksum: ctr0 || tag.
inline constexpr size_t kChecksumSize = kCtr0Size + kTagSize;
// The KeyOps wire's version (kmpc.proto, "Shares travel flat"): every
// request and response carries it, and either end refuses another.
// 1: a string per share (a message of two per job); 2: one flat buffer per
// message; 3: a verify item's presented tag travels as shares (SignItem.verify);
// 4: a FinalizeResponse carries one additive tag share per item, not two;
// 5: a Sign item may chain a second signature (SignItem.chain);
// 6: jobs under the aes*-cts ciphers (CIPHER_AES128_CTS, CIPHER_AES256_CTS),
// and a linked pad names its slot (Job.pad_slot): up to kPadSlots pads per
// ENCRYPT, at distinct counters.
// 7: an aes*-cts job may run under a FAST key (Job.cts_key): the KDC's half
// of KRB-FX-CF2 leads the job's shares.
// 8: an aes*-cts reply ENCRYPT may splice the PA-REQ-ENC-PA-REP checksum of
// a dealt message into its plaintext (Job.splice_length, splice_offset).
// 9: an aes*-cts DECRYPT's C || T goes as shares (RunRequest.data_shares,
// after a FAST key's KDC half), its length in Job.length; Job.data is
// refused under those ciphers.
// 10: a splice's message is dealt with its HMAC inner padding
// (SpliceDealtBytes): splice_length is a multiple of 64.
// 11: a Run carries the KDC's clock (RunRequest.now_unix), against which
// the servers check an aes*-cts DECRYPT's timestamp on shares (the gate's
// freshness); JOB_RATE_LIMITED.
// 12: an aes*-cts ENCRYPT or CHECKSUM runs its length class's program
// (contract::CtsClassMax): the KDC's requests are unchanged, but the
// servers' rings carry other programs' layers, so the three must agree.
// 13: the aes*-cts programs' SHA-1 Maj and CBC encryption S-boxes take
// fewer ANDs (cts-circuits.md): other layers on the ring again.
// 14: a fifth linked pad slot (kPadSlots), the full-PAC signature's of MIT
// 1.21: servers of 13 refuse pad_slot 4.
// 15: an aes*-cts ticket ENCRYPT (usage 2) may sign its PAC in the cluster
// (Job.sign_pad): the server signature and the KDC signature under a PAD
// of the krbtgt, both spliced into the ticket.
// 16: a signed ticket's program serves one SHA-1 block count of conf || P
// and the 64 offsets of T_s's SHA-1 block (CtsTicketClassMax,
// CtsTicketWindow): other programs' layers on the ring.
inline constexpr uint32_t kWireVersion = 16;
// Empty if `got` is kWireVersion; else what is wrong, naming both versions
// and `peer` ("the KDC module", "MPC party 1 (...)").
std::string WireVersionProblem(uint32_t got, absl::string_view peer);

// Powers of H every server keeps with a key (mpc-server engine.h
// kStoredHPowers), and those a pad of `pad_length` bytes holds: the
// stored ones, or the GHASH blocks of its longest message (A', D, the
// lengths) when more (engine.h PadState).
inline constexpr uint64_t kStoredHPowers = 64;
constexpr uint64_t PadPowers(uint64_t pad_length) {
  const uint64_t m = (pad_length + 15) / 16 + 2;
  return m > kStoredHPowers ? m : kStoredHPowers;
}

// Largest message one job may cover (keystream blocks of ENCRYPT/DECRYPT,
// data of CHECKSUM/VERIFY_CHECKSUM): 65,536 blocks, 1 MiB.
inline constexpr uint64_t kMaxJobBlocks = 65536;
inline constexpr uint64_t kMaxJobBytes = kMaxJobBlocks * kBlockSize;
// Largest number of AES blocks (JobBlocks summed) in one batch.
inline constexpr uint64_t kMaxBatchBlocks = uint64_t{1} << 20;

// ceil(bytes / 16).
constexpr uint64_t CeilBlocks(uint64_t bytes) {
  return (bytes + kBlockSize - 1) / kBlockSize;
}

// enctype.md: the counters c0 .. c0 + n (c0 = ctr0 read as a 128-bit
// big-endian integer) never reach the all-zero block: c0 != 0 and
// c0 + n <= 2^128 - 1. False for a ctr0 that is not 16 bytes.
bool CounterRangeOk(absl::string_view ctr0, uint64_t n);

// A linked PAD's counter (kmpc.proto Job.pad_after, Job.pad_slot) is its
// ENCRYPT's ctr0 + kLinkedPadOffset + slot. 2^17 > kMaxJobBlocks: never one of that
// encryption's own counters c0 .. c0 + kMaxJobBlocks; any other counter
// is a fresh 128-bit draw (uniform but for the engine's fix-up of counters
// whose range would touch the all-zero block, pads.cc FixCounter, which
// at most doubles the weight of a few values), equal to it with probability
// at most 2^-127.
inline constexpr uint64_t kLinkedPadOffset = uint64_t{1} << 17;
static_assert(kLinkedPadOffset > kMaxJobBlocks);
// Slots of the pads linked to one ENCRYPT (Job.pad_slot): a ticket's PAC
// server signature (0), KDC signature (1), CAMMAC KDC verifier (2), ticket
// signature (3) and full-PAC signature (4, MIT 1.21's extended KDC
// checksum, [MS-PAC] 2.8.5). Every slot's counter lies past the ENCRYPT's
// own.
inline constexpr uint32_t kPadSlots = 5;
static_assert(kLinkedPadOffset > kMaxJobBlocks + kPadSlots);

// *out = ctr0 + kLinkedPadOffset + slot (16 bytes, big-endian); false (out
// untouched) if ctr0 is not 16 bytes, slot >= kPadSlots, or the sum
// leaves the counter range (CounterRangeOk(ctr0, kLinkedPadOffset + slot)
// fails).
bool LinkedPadCtr0(absl::string_view ctr0, uint32_t slot, std::string* out);
// Slot 0: the PAC server signature's counter.
inline bool LinkedPadCtr0(absl::string_view ctr0, std::string* out) {
  return LinkedPadCtr0(ctr0, 0, out);
}

// "AES128", "AES256", "AES128-CTS", "AES256-CTS", "UNSPECIFIED" or
// "UNKNOWN".
const char* CipherName(pb::Cipher cipher);
// CIPHER_AES128, CIPHER_AES256 or an aes*-cts cipher: the ciphers a job
// may name.
bool KnownCipher(pb::Cipher cipher);
// CIPHER_AES128_CTS or CIPHER_AES256_CTS (RFC 3962; kmpc.proto JobType).
bool CtsCipher(pb::Cipher cipher);
// Bounded depth (docs/design/cts-circuits.md, "Length caps"): a batch
// waits for its deepest program, and an aes*-cts program's AND depth
// grows with its length (CBC and SHA-1 are sequential), so each job kind
// is capped at what real exchanges need with a wide margin, not at what
// the protocol allows (docs/design/cts-circuits.md, "Length caps": the
// AS-REQ with PA-ENC-TIMESTAMP of names of 2-40 characters is 232-274
// bytes from Debian's MIT kinit, 234-276 from Heimdal's, 210-245 from
// OpenJDK 17's Krb5LoginModule, ~50 more with the host's addresses; a
// PA-ENC-TS-ENC is 49-56 bytes of ciphertext and tag).
// The largest conf || P of an aes*-cts ENCRYPT and the largest message of
// a CHECKSUM (an AS reply, a ticket with its PAC, a PAC's checksum).
inline constexpr uint64_t kMaxCtsBytes = 2048;
// The largest conf || P of an aes*-cts DECRYPT of a timestamp or a FAST
// challenge (the KDC refuses any longer before it asks); a ticket's
// (kTicketUsage) is capped at kMaxCtsBytes.
inline constexpr uint64_t kMaxCtsDecryptBytes = 256;
// The largest splice message as dealt (SpliceDealtBytes: the AS-REQ and
// its HMAC inner padding): 16 SHA-1 blocks, an AS-REQ of up to 1015 bytes.
inline constexpr uint64_t kMaxCtsSpliceBytes = 1024;

// How many compiled aes*-cts programs a server keeps (engine/cts_jobs.h
// CtsProgramCache); the KDC module proves fewer reply shapes than this
// (kdc-plugin planner.h ProvenShapes), so that a proven shape is compiled.
inline constexpr size_t kCtsProgramsKept = 32;
// RFC 3962: the confounder block and the HMAC-SHA1-96 tag.
inline constexpr size_t kCtsConfounder = 16;
inline constexpr size_t kCtsTag = 12;

// "ENCRYPT", "DECRYPT", "CHECKSUM", "VERIFY_CHECKSUM", "FINALIZE", "PAD",
// "UNKNOWN".
const char* JobTypeName(pb::JobType type);

// A job's public inputs, as the module holds them before it builds the
// request and as a server reads them from a pb::Job. No plaintext is among
// them: an ENCRYPT's plaintext never leaves the KDC, a checksum's message
// goes to each server as its two shares only (kmpc.proto
// RunRequest.data_shares).
struct JobShape {
  pb::JobType type = pb::JOB_TYPE_UNSPECIFIED;
  // Required (kmpc.proto Job.cipher): CheckJob fails CIPHER_UNSPECIFIED and
  // unknown values; whether it is the key's cipher only the servers know.
  pb::Cipher cipher = pb::CIPHER_UNSPECIFIED;
  size_t key_id_size = 0;
  // ENCRYPT: plaintext bytes; CHECKSUM, VERIFY_CHECKSUM: message bytes;
  // PAD: the longest message the pad may sign; an aes*-cts DECRYPT: the
  // bytes of C || T (dealt as shares).
  uint64_t length = 0;
  absl::string_view data;       // a ctr-mpc DECRYPT only: ctr0||C||T
  // VERIFY_CHECKSUM: the checksum's ctr0 (16 bytes); its tag goes as
  // shares (SharedBytes), never in the clear.
  absl::string_view checksum;
  // CHECKSUM, VERIFY_CHECKSUM: sizes of the two shares of the message
  // (RunRequest.data_shares); each must equal SharedBytes(type, length).
  // The module checks a job before it deals the shares and sets both so.
  uint64_t share_sizes[2] = {0, 0};
  // aes*-cts DECRYPT / ENCRYPT (kmpc.proto Job.cts_key): CTS_KEY_DEALT, or
  // a FAST key whose KDC half (CtsKeyBytes) leads the job's shares.
  pb::CtsKey cts_key = pb::CTS_KEY_DEALT;
  // aes*-cts ENCRYPT (kmpc.proto Job.splice_length): the dealt message D
  // after P in the job's shares, and where its usage-56 checksum goes in P.
  uint32_t usage = 0;
  uint64_t splice_length = 0;
  uint64_t splice_offset = 0;
  // aes*-cts ENCRYPT (kmpc.proto Job.sign_pad): the splice is a ticket's
  // PAC, signed under usage 17 and by a PAD of the batch.
  bool sign_pad = false;
};
// The key usage a splice's checksum is computed under (KRB5_KEYUSAGE_AS_REQ,
// RFC 6806 section 11: PA-REQ-ENC-PA-REP), and the only usage of the
// ENCRYPT that carries it (KRB5_KEYUSAGE_AS_REP_ENCPART).
inline constexpr uint32_t kSpliceChecksumUsage = 56;
inline constexpr uint32_t kSpliceReplyUsage = 3;
// A ticket (RFC 4120 section 7.5.1, KRB5_KEYUSAGE_KDC_REP_TICKET): the one
// plain aes*-cts DECRYPT usage besides the timestamp's (1), for a
// service's key only (mpc-server engine.h kCtsServiceDecryptUsages). Its
// program has no freshness window, so it is a shape of its own
// (MakeCtsShape keeps the usage of a DECRYPT under it); also the usage of
// a ticket ENCRYPT signed in the cluster (Job.sign_pad, below), whose
// shape keeps it too.
inline constexpr uint32_t kTicketUsage = 2;
// The KDC's FAST challenge (RFC 6113 5.4.6: KEY_USAGE_ENC_CHALLENGE_KDC).
inline constexpr uint32_t kKdcChallengeUsage = 55;
inline constexpr uint64_t kSpliceBytes = 12;
// A ticket to an aes*-cts key's principal signed in the cluster
// (kmpc.proto Job.sign_pad): the PAC signatures' usage
// (KRB5_KEYUSAGE_APP_DATA_CKSUM), and where the KDC signature
// (gmac-aes*-mpc: ctr0 || tag) starts after the server signature's start:
// MIT appends the KDC signature's PAC buffer right after the server
// signature's (4 + 12 bytes, 8-byte aligned) and the signature follows
// its 4-byte type.
inline constexpr uint32_t kTicketChecksumUsage = 17;
inline constexpr uint64_t kTicketSignatureGap = 16;
inline constexpr uint64_t kKdcSignatureBytes = 32;
// The splice's message as dealt (kmpc.proto Job.splice_length): D, then
// the padding SHA-1 appends to the HMAC inner hash's input (Ki ^ ipad) ||
// D (FIPS 180-4 section 5.1.1: 0x80, zeros, the 64-bit big-endian bit
// length of 64 + |D|), so that the servers' program depends on the
// number of SHA-1 blocks only, not on |D| (cts/cts.h
// SpliceEncryptProgram). The padding is public given |D|.
uint64_t SpliceDealtBytes(uint64_t m);  // m + the padding: a multiple of 64
std::string SplicePadding(uint64_t m);
// Bytes of the KDC's half of a FAST key: 16, 32, or 0 for CTS_KEY_DEALT
// (and for an unknown value: CheckJob refuses it).
uint64_t CtsKeyBytes(pb::CtsKey key);
// Length classes (docs/design/cts-circuits.md, "Length classes"): an
// ENCRYPT's program serves every n = |conf || P| of one CBC block count
// and one SHA-1 block count of its HMAC's padded inner input (64 + n + 9
// bytes and up), a CHECKSUM's every message length of one SHA-1 block
// count; the servers fill in the zeros and SHA-1's padding past n (public
// given n) and cut the output to n's ciphertext. CtsClassMax names n's
// class by its largest length (n itself for a DECRYPT), as mpc-server
// cts/cts.h EncryptClassMax and ChecksumClassMax do. A splice's offset is
// named by its window of 16 (the CBC block where the 12-byte checksum
// ends in conf || P): CtsSpliceWindow, the window's last offset.
uint64_t CtsHashBlocks(uint64_t n);
uint64_t CtsClassMax(pb::JobType type, uint64_t n);
uint64_t CtsSpliceWindow(uint64_t off);
// A ticket signed in the cluster (a usage-2 ENCRYPT with its PAC spliced,
// Job.sign_pad; mpc-server cts.h TicketClassProgram) is classed wider, so
// that tickets of clients with names of other lengths share a program:
// its class is one SHA-1 block count of conf || P (CtsTicketClassMax: the
// CBC blocks past n are computed and dropped), and its signatures' offset
// is named by the SHA-1 block where T_s starts in conf || P (64 offsets;
// CtsTicketWindow, the window's last offset). Neither adds AND depth: the
// HMAC's chain waits for T_s from the same block as a window of 16 does.
uint64_t CtsTicketClassMax(uint64_t n);
uint64_t CtsTicketWindow(uint64_t off);
// The program an aes*-cts job runs, as the servers key their compiled
// programs (mpc-server engine/cts_jobs.h CtsProgramCache) and as the KDC
// module keys the shapes a passed gate proved (kdc-plugin planner.h): (job
// type, AES rounds (0 for a CHECKSUM), n's class (CtsClassMax), the FAST
// key's KDC half's bytes (0: the dealt key), the usage (0 unless under a
// FAST key, a ticket's DECRYPT or a signed ticket's ENCRYPT: kTicketUsage),
// a splice's message length and offset window (0, 0: none)).
// n is a DECRYPT's conf || P (its ciphertext without the tag), an
// ENCRYPT's conf || P, a CHECKSUM's message (CtsLengthOf).
using CtsShape = std::tuple<int, int, uint64_t, uint64_t, uint32_t, uint64_t, uint64_t>;
CtsShape MakeCtsShape(pb::JobType type, int nr, uint64_t n, uint64_t cf2_bytes, uint32_t usage,
                      uint64_t splice_m = 0, uint64_t splice_off = 0);
// AES rounds of an aes*-cts cipher: 10, 14; 0 for another cipher.
int CtsRounds(pb::Cipher cipher);
// The program a job of shape s (an aes*-cts cipher) runs: n from its
// length (DECRYPT: of C || T; ENCRYPT: of P; CHECKSUM: of D).
CtsShape CtsShapeOf(const JobShape& s);
// What a shape's compiled program and scratch grow with: n's class and a
// splice's message length. A server keeps every program of a batch until
// the batch ends, so one batch's distinct shapes sum to at most
// kCtsBatchBytes of it (mpc-server EngineOptions::cts_batch_bytes); a job
// whose new shape would pass it fails (JOB_MALFORMED), and the KDC module
// never puts such a job in a batch beside others (kdc-plugin job.h
// CtsBatchShapes). The bound lets one job of any length through beside
// others, or one spliced reply of the longest P and D alone; it holds
// the several shapes a realm's names of 2 to 40 characters give its
// logins and signed tickets (a few a SHA-1 block count each), so that a
// loaded KDC's Runs are not cut by length. A shape byte is ~31 KB of
// gate list (a 636-byte spliced reply's program 19.8 MiB), so a batch's
// programs stay within ~0.5 GB, the cache's bound (CtsProgramCache).
uint64_t CtsShapeBytes(const CtsShape& s);
inline constexpr uint64_t kCtsBatchBytes = 8 * kMaxCtsBytes;
// n of an aes*-cts job, before its class: what its output is cut to.
uint64_t CtsLengthOf(const JobShape& s);
// One party's two shares of a message, as slices of a request's flat
// buffer (kmpc.proto RunRequest.data_shares, SignRequest.data_shares).
struct MessageShares {
  absl::string_view first, second;
};
// The bytes of each share a job's dealt value takes (kmpc.proto
// RunRequest.data_shares): a CHECKSUM's message D (`length`), a
// VERIFY_CHECKSUM's D || t' (`length` + kTagSize: the presented tag t' is
// a PAC signature, i.e. bytes of a ticket's plaintext, so it is dealt as
// shares too); 0 for the other types.
uint64_t SharedBytes(pb::JobType type, uint64_t length);
// The same for a job under `cipher`: an aes*-cts ENCRYPT's plaintext P
// (`length`), DECRYPT's C || T (`length`: an offline password verifier
// whole) and CHECKSUM's message are dealt too, after a FAST key's KDC
// half; VERIFY_CHECKSUM takes none under those ciphers (0: CheckJob
// refuses it).
uint64_t SharedBytes(pb::JobType type, pb::Cipher cipher, uint64_t length,
                     pb::CtsKey key = pb::CTS_KEY_DEALT, uint64_t splice_length = 0);
// The same for a job (its type, cipher, length, cts_key, splice_length).
uint64_t SharedBytes(const pb::Job& job);
// The same for a Sign item: D, or D || t' for a verify item.
uint64_t SharedBytes(const pb::SignItem& item);
// The shape; share_sizes from `shares` (none: 0, 0).
JobShape ShapeOf(const pb::Job& job, const MessageShares* shares = nullptr);

// Reads a flat share buffer in order: each value's two shares, n bytes
// each, or (Take) one n-byte slice. A value the buffer does not hold whole
// comes out empty (both shares), and the reader stays where it was.
class FlatReader {
 public:
  explicit FlatReader(absl::string_view buf) : buf_(buf) {}
  MessageShares TakePair(uint64_t n);
  absl::string_view Take(uint64_t n);
  size_t left() const { return buf_.size() - at_; }

 private:
  absl::string_view buf_;
  size_t at_ = 0;
};

// The message shares of each job of a RunRequest (RunRequest.data_shares
// sliced in job order; empty for the types that take none, and for a job
// whose slice the buffer does not hold whole: CheckJob then fails it).
// The server refuses a buffer of another size than RunShareBytes before
// slicing, so every slice is then the job's own.
std::vector<MessageShares> SliceMessageShares(const pb::RunRequest& req);

// The exact size of RunRequest.data_shares: 2 x SharedBytes summed over
// the CHECKSUM and VERIFY_CHECKSUM jobs; of SignRequest.data_shares: 2 x
// SharedBytes summed over the items. Lengths are uint32 and requests
// are bounded (max_batch_jobs, max_sign_items), so the sums cannot wrap.
uint64_t RunShareBytes(const pb::RunRequest& req);
uint64_t SignShareBytes(const pb::SignRequest& req);

// Whether a Run result carries a ctr0 in RunResponse.ctr0s: a JOB_OK
// ENCRYPT, CHECKSUM or PAD.
bool ResultHasCtr0(pb::JobType type, pb::JobStatus status);
// The same for a job of any cipher: an aes*-cts result has none.
bool ResultHasCtr0(const JobShape& job, pb::JobStatus status);
// Bytes of each of the two shares a Run result carries in
// RunResponse.shares: RevealedBytes for a JOB_OK ENCRYPT, DECRYPT or
// CHECKSUM, else 0.
uint64_t RevealedShareBytes(const JobShape& job, pb::JobStatus status);

// Why an aes*-cts job is longer than its kind's cap (kMaxCtsBytes,
// kMaxCtsDecryptBytes, kMaxCtsSpliceBytes), in public terms; empty if it
// is not (or is no aes*-cts job). CheckJob fails such a job
// JOB_MALFORMED; the KDC module refuses it before it is queued, with
// SVC_UNAVAILABLE, so that it never shares a batch with others' logins.
std::string CtsLengthProblem(const JobShape& job);

// The outcome of CheckJob: JOB_OK, JOB_MALFORMED (also for a cipher that is
// not CIPHER_AES128 or CIPHER_AES256), or JOB_INTEGRITY_FAILED
// for an input that cannot verify under any key (a DECRYPT shorter than
// ctr0 || T, a counter range through the all-zero block). `detail` says
// what is wrong in public terms (sizes, type), never data.
struct JobCheck {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  bool ok() const { return status == pb::JOB_OK; }
};

// The one check of a Run job (FINALIZE is checked by the server against
// the ENCRYPT it finalizes).
JobCheck CheckJob(const JobShape& job);

// An upper bound on the AND rounds (ring round trips) of an aes*-cts job's
// program (docs/design/cts-circuits.md, "Cost"), from its public shape:
// CBC's AES blocks in sequence beside the HMAC's SHA-1 compressions (487
// rounds each), a splice's checksum before its reply's last ones, a FAST
// key's derivation (~630) first; 0 for another cipher. The KDC module
// sends a job far above a login's in a batch of its own.
uint64_t CtsDepthBound(const JobShape& job);

// AES blocks the job costs the cluster, as counted against kMaxBatchBlocks
// and a server's batch limits: ENCRYPT ceil(length/16) + 1 (the tag mask
// AES_K(c0)); DECRYPT ceil(len(C)/16) + 1; CHECKSUM, VERIFY_CHECKSUM and
// PAD 1. A malformed job costs 1.
uint64_t JobBlocks(const JobShape& job);

// What the job costs the cluster in the batch limits (kMaxBatchBlocks, the
// module's max_batch_blocks): JobBlocks plus, for CHECKSUM, VERIFY_CHECKSUM
// and PAD, one per 16-byte block of the (longest) message (their GHASH, or
// the powers of H a PAD keeps for it: a 1 MiB checksum costs as much as a
// 1 MiB DECRYPT, not one block). DECRYPT's GHASH is already covered by its
// keystream blocks.
uint64_t JobCost(const JobShape& job);

// Bytes of the value revealed to the KDC for a job that succeeds: the
// keystream of an ENCRYPT (length) or DECRYPT (len(C)), the tag of a
// CHECKSUM (16); 0 for VERIFY_CHECKSUM (a verdict only) and PAD (its ctr0
// is public; the pad itself is never revealed).
uint64_t RevealedBytes(const JobShape& job);

}  // namespace kmpc::contract

#endif  // KMPC_PROTO_CONTRACT_H_
