// Three in-process parties running masked programs (cts/masked.h) on
// their views of each lane: the tests' and the bench's harness.
#ifndef KMPC_TEST_CTS_MASKED_TESTING_H_
#define KMPC_TEST_CTS_MASKED_TESTING_H_

#include <array>
#include <vector>

#include "cts/masked.h"
#include "cts_testing.h"

namespace kmpc::cts::testing {

// One party's run of the jobs (their lanes' views), Verify at the end
// with a log. out[job][lane] = the two output components; with words,
// (*words)[job] = its raw output words of component 0. word_walk: one-lane
// jobs on the word walk (MaskedJob::word_walk).
using PartyOutputs = std::vector<std::vector<std::array<Bytes, 2>>>;
inline absl::Status RunMaskedParty(protocol::Rep3& r, const std::vector<const MaskedProgram*>& p,
                                   int party, const std::vector<std::vector<Views>>& lanes,
                                   protocol::MulLog* log, size_t verify_words, PartyOutputs& out,
                                   bool word_walk = false,
                                   std::vector<std::vector<uint64_t>>* words = nullptr) {
  std::vector<size_t> outputs;
  for (const MaskedProgram* q : p) outputs.push_back(q->outputs);
  PartyWords w(party, lanes, outputs);
  std::vector<MaskedJob> jobs;
  for (size_t j = 0; j < p.size(); ++j) {
    jobs.push_back({p[j], w.wn[j], w.In(j), w.Out(j), w.lanes[j]});
    jobs.back().word_walk = word_walk;
  }
  r.set_log(log);
  absl::Status st = EvaluateMaskedAll(jobs, r, verify_words);
  if (st.ok() && log != nullptr) st = protocol::Verifier::Verify(r, *log);
  r.set_log(nullptr);
  w.Unpack(out);
  if (words != nullptr)
    for (size_t j = 0; j < p.size(); ++j) words->push_back(w.o[j][0]);
  return st;
}

// Per job and lane (lanes[job] of them) the output opened from the three
// parties' components (empty where the copies disagree or one is missing).
inline std::vector<std::vector<Bytes>> OpenOutputs(const std::array<PartyOutputs, 3>& outs,
                                                   const std::vector<size_t>& lanes) {
  std::vector<std::vector<Bytes>> r(lanes.size());
  for (size_t j = 0; j < lanes.size(); ++j) {
    for (size_t l = 0; l < lanes[j]; ++l) {
      Views v;
      bool have = true;
      for (int i = 0; i < 3; ++i) {
        have = have && outs[i].size() > j && outs[i][j].size() > l;
        if (have) v[i].comp = outs[i][j][l];
      }
      auto o = have ? share::Open(v) : absl::StatusOr<Bytes>(absl::InternalError("none"));
      r[j].push_back(o.ok() ? *o : Bytes{});
    }
  }
  return r;
}

// All three parties: per job and lane the opened output (empty where the
// copies disagree). Statuses in *st.
inline std::vector<std::vector<Bytes>> RunMaskedAll(std::array<protocol::Rep3*, 3> rep3,
                                       const std::vector<const MaskedProgram*>& p,
                                       const std::vector<std::vector<Views>>& lanes,
                                       bool malicious, std::array<absl::Status, 3>* st,
                                       size_t verify_words = protocol::MulLog::kVerifyWords) {
  std::array<PartyOutputs, 3> outs;
  std::array<protocol::MulLog, 3> logs;
  *st = ::kmpc::testing::RunParties([&](int i) {
    return RunMaskedParty(*rep3[i], p, i, lanes, malicious ? &logs[i] : nullptr, verify_words,
                    outs[i]);
  });
  std::vector<size_t> n;
  for (const std::vector<Views>& l : lanes) n.push_back(l.size());
  return OpenOutputs(outs, n);
}

}  // namespace kmpc::cts::testing

#endif  // KMPC_TEST_CTS_MASKED_TESTING_H_
