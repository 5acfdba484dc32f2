#include "start_step.h"

#include <utility>
#include <vector>

#include "contract.h"
#include "finalize_step.h"
#include "run_step.h"
#include "sign_step.h"

namespace kmpc::kdc {

// A Sign step takes every job; otherwise the finalize_only jobs go in a
// Finalize step of their own (re-run as ordinary jobs in a Run if the
// servers forgot their states) and the rest in a Run step.
void StartStep(const std::shared_ptr<BatchStep>& step) {
  if (step->kind() == StepKind::kSign) {
    SignStep::Start(step);
    return;
  }
  std::vector<size_t> run;
  auto fin = std::make_shared<FinalizeStep>(step, &RunStep::Start);
  for (size_t i = 0; i < step->size(); ++i) {
    const PendingJob& e = step->job(i);
    if (!e.finalize_only) {
      run.push_back(i);
      continue;
    }
    fin->Add(i, e.run_batch_id, e.run_job_id, e.output.data() + contract::kCtr0Size,
             e.job.input.size());
  }
  FinalizeStep::Start(fin);
  if (!run.empty()) RunStep::Start(step, std::move(run));
}

}  // namespace kmpc::kdc
