#include "engine/runtime/scheduler.h"

#include <algorithm>

#include "absl/status/statusor.h"

namespace witcert {

void Scheduler::Preempt(std::list<std::unique_ptr<Sequence>>::iterator it, KvCache& kv) {
  std::unique_ptr<Sequence> seq = std::move(*it);
  running_.erase(it);
  kv.FreeSequence(seq->id);
  seq->num_computed = 0;  // recompute from its tokens when readmitted
  ++seq->preemptions;
  ++total_preemptions_;
  waiting_.push_front(std::move(seq));
}

StepPlan Scheduler::Schedule(KvCache& kv) {
  StepPlan plan;
  int64_t budget = options_.max_batched_tokens;

  // 1. Decodes: every running sequence whose prompt is done needs one more token slot.
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence* seq = it->get();
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    if (remaining != 1) { ++it; continue; }
    bool scheduled = false;
    while (true) {
      if (kv.Reserve(seq->id, static_cast<int64_t>(seq->tokens.size())).ok()) {
        scheduled = true;
        break;
      }
      // Out of blocks: preempt the most recently admitted sequence (maybe this one).
      auto victim = std::prev(running_.end());
      const bool self = victim == it;
      // Drop any chunk already planned for the victim.
      Sequence* victim_seq = victim->get();
      plan.chunks.erase(std::remove_if(plan.chunks.begin(), plan.chunks.end(),
                                       [&](const ScheduledChunk& c) {
                                         return c.seq == victim_seq;
                                       }),
                        plan.chunks.end());
      Preempt(victim, kv);
      ++plan.num_preempted;
      if (self) break;
    }
    if (!scheduled) break;  // `it` was preempted and is the last element: done
    plan.chunks.push_back({seq, seq->num_computed, seq->num_computed + 1});
    ++it;
  }
  plan.num_tokens = static_cast<int64_t>(plan.chunks.size());
  budget -= plan.num_tokens;

  // 2. Running prefills (a chunked prompt in progress).
  for (auto& owned : running_) {
    Sequence* seq = owned.get();
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    if (remaining <= 1 || budget <= 0) continue;
    const int64_t n = std::min(remaining, budget);
    if (!kv.Reserve(seq->id, seq->num_computed + n).ok()) continue;
    plan.chunks.push_back({seq, seq->num_computed, seq->num_computed + n});
    budget -= n;
    plan.num_tokens += n;
  }

  // 3. Admit waiting sequences in order while there is room.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front().get();
    if (!kv.AddSequence(seq->id).ok()) break;
    // Admitted prompts start after their longest cached prefix (0 with prefix caching off).
    const absl::StatusOr<int64_t> hit = kv.AttachPrefix(seq->id, seq->tokens);
    const int64_t cached = hit.ok() ? *hit : 0;
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(seq->tokens.size()) - cached, budget);
    if (!kv.Reserve(seq->id, cached + n).ok()) {
      kv.FreeSequence(seq->id);
      break;  // wait for running sequences to finish
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.chunks.push_back({seq, cached, cached + n});
    budget -= n;
    plan.num_tokens += n;
  }
  return plan;
}

std::unique_ptr<Sequence> Scheduler::Remove(Sequence* seq, KvCache& kv) {
  std::unique_ptr<Sequence> removed;
  auto running = std::find_if(running_.begin(), running_.end(),
                              [&](const auto& s) { return s.get() == seq; });
  if (running != running_.end()) {
    removed = std::move(*running);
    running_.erase(running);
    kv.FreeSequence(seq->id);
    return removed;
  }
  auto waiting = std::find_if(waiting_.begin(), waiting_.end(),
                              [&](const auto& s) { return s.get() == seq; });
  if (waiting != waiting_.end()) {
    removed = std::move(*waiting);
    waiting_.erase(waiting);
  }
  return removed;
}

std::vector<Sequence*> Scheduler::All() {
  std::vector<Sequence*> all;
  for (auto& s : running_) all.push_back(s.get());
  for (auto& s : waiting_) all.push_back(s.get());
  return all;
}

}  // namespace witcert
