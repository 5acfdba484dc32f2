#include "transport.h"

#include "absl/strings/str_cat.h"
#include "batch_error.h"

namespace kmpc::kdc {

CallStatus CallStatus::Refused(const kmpc::v1::BatchError& e) {
  CallStatus s(absl::AbortedError(
      absl::StrCat(contract::BatchErrorName(e.code()), ": ", e.detail())));
  s.refusal = e.code();
  return s;
}

}  // namespace kmpc::kdc
