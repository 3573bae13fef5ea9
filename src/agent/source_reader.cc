#include "agent/source_reader.h"

#include <algorithm>

#include "inventory/inventory.h"

namespace gpureap::agent {

void SourceReader::take(gpu::GpuSource& gpus, util::Clock::time_point now,
                        std::chrono::milliseconds deadline) {
  const bool hung = snapshot_.state == gpu::SourceState::hung ||
                    std::any_of(snapshot_.gpus.begin(), snapshot_.gpus.end(),
                                [](const gpu::GpuInfo& g) { return g.hung; });
  const bool not_started = snapshot_.state == gpu::SourceState::init_failed ||
                           snapshot_.state == gpu::SourceState::library_missing;
  if (!hung && !not_started) {
    backoff_ = kRetryStart;
    next_retry_ = now + kRetryStart;  // the first retry, should this reading fail
    probe_since_.reset();
  } else if (!probe_since_ && now >= next_retry_) {
    if (gpus.retry_after_failure()) {
      gpus.prefetch_snapshot();
      probe_since_ = now;
    }
    next_retry_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, hung ? kHangRetryMax : kInitRetryMax);
  }
  if (probe_since_) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - *probe_since_);
    if (gpus.snapshot_in_flight()) {
      if (waited < deadline) return;
      // The probe's deadline counts from when it was sent: a helper still silent
      // past it is a hang, found without waiting again.
      deadline = std::max(std::chrono::milliseconds(1), deadline - waited);
    }
    probe_since_.reset();
  }
  // The snapshot being replaced joins the utilization history; a GPU that did
  // not say starts its window afresh.
  for (const auto& g : snapshot_.gpus) {
    auto& history = busy_history_[g.id];
    if (!g.utilization_gpu) {
      history.clear();
      continue;
    }
    history.push_back(*g.utilization_gpu);
    if (history.size() >= inventory::kBusyTicks)
      history.erase(history.begin(), history.end() - (inventory::kBusyTicks - 1));
  }
  snapshot_ = gpus.snapshot(deadline);
}

std::set<pid_t> SourceReader::listed_pids() const {
  std::set<pid_t> pids;
  for (const auto& g : snapshot_.gpus)
    for (const auto& p : g.processes) pids.insert(static_cast<pid_t>(p.pid));
  return pids;
}

}  // namespace gpureap::agent
