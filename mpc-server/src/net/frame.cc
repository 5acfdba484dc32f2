#include "net/frame.h"

#include "absl/strings/str_cat.h"

namespace kmpc::net {
namespace {

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}

}  // namespace

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  out[0] = kFrameMagic & 0xff;
  out[1] = kFrameMagic >> 8;
  out[2] = static_cast<uint8_t>(h.type);
  out[3] = 0;
  PutU32(out + 4, h.seq);
  PutU32(out + 8, h.step);
  PutU32(out + 12, h.length);
}

absl::Status DecodeFrameHeader(absl::Span<const uint8_t> in, FrameHeader* h) {
  if (in.size() != kFrameHeaderSize)
    return absl::DataLossError("ring frame: short header");
  uint16_t magic = uint16_t{in[0]} | uint16_t{in[1]} << 8;
  if (magic != kFrameMagic)
    return absl::DataLossError("ring frame: bad magic");
  if (in[2] != static_cast<uint8_t>(FrameType::kData) &&
      in[2] != static_cast<uint8_t>(FrameType::kControl))
    return absl::DataLossError(absl::StrCat("ring frame: unknown type ", in[2]));
  if (in[3] != 0) return absl::DataLossError("ring frame: nonzero flags");
  h->type = static_cast<FrameType>(in[2]);
  h->seq = GetU32(in.data() + 4);
  h->step = GetU32(in.data() + 8);
  h->length = GetU32(in.data() + 12);
  if (h->type == FrameType::kControl && h->length > kMaxControlPayload)
    return absl::DataLossError("ring frame: oversized control message");
  return absl::OkStatus();
}

absl::Status CheckDataFrame(const FrameHeader& h, uint32_t seq, uint32_t step,
                            size_t length) {
  if (h.type != FrameType::kData)
    return absl::DataLossError("ring frame: control frame inside a batch");
  if (h.seq != seq)
    return absl::DataLossError(absl::StrCat("ring frame: batch seq ", h.seq,
                                            ", expected ", seq));
  if (h.step != step)
    return absl::DataLossError(
        absl::StrCat("ring frame: step ", h.step, ", expected ", step));
  if (h.length != length)
    return absl::DataLossError(absl::StrCat(
        "ring frame: length ", h.length, ", expected ", length));
  return absl::OkStatus();
}

}  // namespace kmpc::net
