// The control messages of scheduler_control.h: their encoding (big-endian
// counts) and checks, and the leader's wait for a proposal's reply.
#include "service/scheduler_control.h"

#include <algorithm>
#include <cstring>

#include "util/log.h"

namespace kmpc::service::scheduling {
namespace {

void PutU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 |
         uint32_t{p[3]};
}

}  // namespace

bool SeqBefore(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(b - a) > 0;
}

uint32_t Ms(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<uint32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d), UINT32_MAX));
}

std::vector<uint8_t> Encode(const Control& c) {
  std::vector<uint8_t> out(kControlSize, 0);
  out[0] = c.type;
  out[1] = static_cast<uint8_t>(c.kind);
  out[2] = c.status;
  out[3] = c.status_party;
  out[4] = c.flags;
  std::memcpy(out.data() + 8, c.id.data(), kBatchIdSize);
  PutU32(out.data() + 8 + kBatchIdSize, c.age_ms);
  PutU32(out.data() + 12 + kBatchIdSize, c.wait_ms);
  return out;
}

void AbandonProposal(WorkerRing& ch, uint32_t seq, const Control& propose) {
  if (!ch.connected()) return;
  Control abort = propose;
  abort.type = kCommit;
  abort.status = kStatusOk;
  abort.status_party = 0;
  abort.flags = 0;
  abort.age_ms = abort.wait_ms = 0;
  (void)ch.SendControl(seq, Encode(abort));
}

absl::StatusOr<Control> Decode(const std::vector<uint8_t>& in) {
  if (in.size() != kControlSize)
    return absl::DataLossError("ring: malformed scheduling message (size)");
  Control c;
  c.type = in[0];
  c.status = in[2];
  c.status_party = in[3];
  c.flags = in[4];
  const bool bad_retry =
      (c.flags & kFlagRetry) != 0 && (c.type != kCommit || (c.flags & kFlagGo) != 0);
  const bool bad_kind = in[1] != static_cast<uint8_t>(BatchKind::kRun) &&
                        in[1] != static_cast<uint8_t>(BatchKind::kRefresh);
  if ((c.type != kPropose && c.type != kCommit) || bad_kind ||
      c.status > kStatusBreaker || c.status_party > 2 || (c.flags & ~7) != 0 ||
      bad_retry || in[5] != 0 || in[6] != 0 || in[7] != 0)
    return absl::DataLossError("ring: malformed scheduling message");
  c.kind = static_cast<BatchKind>(in[1]);
  std::memcpy(c.id.data(), in.data() + 8, kBatchIdSize);
  c.age_ms = GetU32(in.data() + 8 + kBatchIdSize);
  c.wait_ms = GetU32(in.data() + 12 + kBatchIdSize);
  return c;
}

absl::StatusOr<Control> AwaitReply(WorkerRing& ch, uint32_t seq,
                                   const Control& propose, absl::Time reply_by) {
  for (;;) {
    uint32_t rseq = 0;
    auto reply = ch.RecvControl(&rseq, reply_by);
    if (!reply.ok()) {
      AbandonProposal(ch, seq, propose);
      return reply.status();
    }
    absl::StatusOr<Control> back = Decode(*reply);
    if (back.ok() && back->type == kPropose && SeqBefore(rseq, seq)) {
      KMPC_VLOG(1) << "dropped a late reply to abandoned proposal " << rseq;
      continue;
    }
    if (back.ok() && (back->type != kPropose || rseq != seq ||
                      back->id != propose.id || back->kind != propose.kind))
      back = absl::DataLossError("ring: scheduling message for another batch");
    return back;
  }
}

}  // namespace kmpc::service::scheduling
