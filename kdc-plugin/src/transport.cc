#include "transport.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "batch_error.h"

namespace kmpc::kdc {

CallStatus CallStatus::Refused(const kmpc::v1::BatchError& e) {
  CallStatus s(absl::AbortedError(
      absl::StrCat(contract::BatchErrorName(e.code()), ": ", e.detail())));
  s.refusal = e.code();
  return s;
}

absl::Status MarkDeviation(absl::Status st) {
  if (!st.ok()) st.SetPayload(kDeviationPayload, absl::Cord("1"));
  return st;
}

bool IsDeviation(const absl::Status& st) {
  return !st.ok() && st.GetPayload(kDeviationPayload).has_value();
}

}  // namespace kmpc::kdc
