#include "status_class.h"

#include <array>

namespace kmpc::contract {
namespace {

using K = KrbClass;

// Indexed by the code's number (absl/status/status.h; gRPC's are the same).
constexpr std::array<StatusClass, 17> kTable = {{
    /* 0 kOk */ {"ok", K::kNone, false, false, false},
    /* 1 kCancelled */ {"cancelled", K::kSvcUnavailable, false, false, false},
    /* 2 kUnknown */ {"internal", K::kInternal, false, false, false},
    /* 3 kInvalidArgument */ {"invalid", K::kInvalid, false, false, true},
    /* 4 kDeadlineExceeded */ {"deadline", K::kSvcUnavailable, true, true, false},
    /* 5 kNotFound */ {"unknown_key", K::kUnknownKey, true, false, false},
    /* 6 kAlreadyExists */ {"internal", K::kInternal, false, false, true},
    /* 7 kPermissionDenied */ {"wrong_cipher", K::kWrongCipher, false, true, true},
    /* 8 kResourceExhausted */ {"overloaded", K::kSvcUnavailable, false, false, false},
    /* 9 kFailedPrecondition */ {"invalid", K::kInvalid, false, false, true},
    /* 10 kAborted */ {"aborted", K::kSvcUnavailable, true, false, false},
    /* 11 kOutOfRange: over an aes*-cts length cap */
    {"too_long", K::kSvcUnavailable, false, false, false},
    /* 12 kUnimplemented */ {"internal", K::kInternal, false, false, false},
    /* 13 kInternal */ {"internal", K::kInternal, false, false, false},
    /* 14 kUnavailable */ {"unavailable", K::kSvcUnavailable, true, true, true},
    /* 15 kDataLoss: a tag or checksum did not verify */
    {"integrity", K::kBadIntegrity, false, false, false},
    /* 16 kUnauthenticated: withheld (its gate failed); to kmpc-admin, our
       certificate refused */
    {"withheld", K::kBadIntegrity, false, true, true},
}};

}  // namespace

const StatusClass& ClassOf(absl::StatusCode code) {
  const int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(kTable.size()) ? kTable[i] : kTable[2];
}

}  // namespace kmpc::contract
