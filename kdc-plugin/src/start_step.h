// A batch's steps started by its kind (batch_step.h StepKind): the one
// place that knows every step kind, above them all (kdc-plugin/README.md,
// "Layers"), so that the step base names none of them and each kind names
// only those below it. The dispatcher starts every batch it makes here.
//
// Invariants:
//  - A kSign batch is one Sign step of every job (sign_step.h).
//  - Otherwise its finalize_only jobs go in one Finalize step of their own
//    (finalize_step.h), which re-runs them through the Run step if the
//    servers cannot finalize them, and its other jobs in one Run step
//    (run_step.h); neither step waits for the other.
#ifndef KMPC_KDC_PLUGIN_START_STEP_H_
#define KMPC_KDC_PLUGIN_START_STEP_H_

#include <memory>

#include "batch_step.h"

namespace kmpc::kdc {

// Starts `step`'s requests (the calls are asynchronous: it returns before
// any answer). Once per step.
void StartStep(const std::shared_ptr<BatchStep>& step);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_START_STEP_H_
