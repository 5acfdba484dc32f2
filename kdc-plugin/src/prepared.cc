#include "prepared.h"

#include <utility>

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

PendingJob PreparedJob(const PendingJob& cause, pb::JobType type,
                       const std::string& key_id, pb::Cipher cipher,
                       uint32_t usage, size_t length) {
  PendingJob x;
  x.prepared = true;
  x.group = cause.group;
  x.job.type = type;
  x.job.key_id = key_id;
  x.job.cipher = cipher;
  x.job.usage = usage;
  if (type == pb::JOB_PAD)
    x.job.pad_length = static_cast<uint32_t>(length);
  else
    x.job.input.assign(length, 0);
  x.figures = FiguresOf(x.job);
  x.blocks = x.figures.cost;
  x.enqueued = cause.enqueued;
  return x;
}

std::vector<PendingJob> GroupOf(PendingJob* q, const Job* gate) {
  std::vector<PendingJob> g;
  if (!q->job.sign_key_id.empty()) {
    g.push_back(PreparedJob(*q, pb::JOB_PAD, q->job.sign_key_id, q->job.sign_cipher,
                            contract::kTicketChecksumUsage, contract::kSpliceBytes));
    g.back().ticket_pad = true;
  } else if (gate != nullptr) {
    PendingJob r;
    r.job = *gate;  // the same ciphertext, dealt afresh when it goes
    r.figures = FiguresOf(r.job);
    r.blocks = r.figures.cost;
    r.enqueued = q->enqueued;
    r.prepared = r.regate = true;
    g.push_back(std::move(r));
    q->gated = true;
  }
  return g;
}

void FinalizeWith(PendingJob* q, HeldKeystream k) {
  const size_t len = q->job.input.size();
  q->output.resize(contract::kCiphertextOverhead + len);
  std::copy(k.ctr0.begin(), k.ctr0.end(), q->output.begin());
  uint8_t* c = q->output.data() + contract::kCtr0Size;
  for (size_t b = 0; b < len; ++b) c[b] = q->job.input[b] ^ k.keystream[b];
  q->finalize_only = true;
  q->run_batch_id = std::move(k.run_batch_id);
  q->run_job_id = k.run_job_id;
  q->blocks = 0;  // no AES work left
}  // k's keystream wipes itself as it goes (SecureBytes)

void SignWith(PendingJob* q, HeldKeystream pad) {
  q->output.assign(pad.ctr0.begin(), pad.ctr0.end());
  q->sign = true;
  q->run_batch_id = std::move(pad.run_batch_id);
  q->run_job_id = pad.run_job_id;
  q->blocks = 0;  // no AES work left
}

}  // namespace kmpc::kdc
