// Framing of ring messages on the TLS connections.
//
// Every message a party sends to its predecessor travels as one frame:
//
//   offset size field
//   0      2    magic 0x4B52 ("KR"), little endian
//   2      1    type  (kData: a protocol step; kControl: batch scheduling)
//   3      1    flags (reserved, must be 0)
//   4      4    seq   batch sequence number (the worker's batch counter)
//   8      4    step  number of the message within the batch, from 0
//   12     4    length of the payload that follows
//
// 16 bytes per step, so at ~45 steps per AES batch framing costs ~0.7 KB per
// batch, a fraction of a byte per block for large batches. The receiver knows
// the exact size of every data message (channel.h), so any mismatch in magic,
// type, seq, step or length is a malformed frame: DATA_LOSS.
#ifndef KMPC_NET_FRAME_H_
#define KMPC_NET_FRAME_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kmpc::net {

inline constexpr uint16_t kFrameMagic = 0x4B52;
inline constexpr size_t kFrameHeaderSize = 16;
inline constexpr uint32_t kMaxControlPayload = 4096;

enum class FrameType : uint8_t { kData = 1, kControl = 2 };

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint32_t seq = 0;
  uint32_t step = 0;
  uint32_t length = 0;
};

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);

// Parses a header; DATA_LOSS for a bad magic, type or flags.
absl::Status DecodeFrameHeader(absl::Span<const uint8_t> in, FrameHeader* h);

// Checks a received data frame's header against what the receiver expects.
absl::Status CheckDataFrame(const FrameHeader& h, uint32_t seq, uint32_t step,
                            size_t length);

}  // namespace kmpc::net

#endif  // KMPC_NET_FRAME_H_
