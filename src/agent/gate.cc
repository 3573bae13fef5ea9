#include "agent/gate.h"

#include <algorithm>
#include <utility>

#include "inventory/node_check.h"
#include "proc/lineage.h"
#include "util/signal_mask.h"

namespace gpureap::agent {

namespace {

// The findings' classes joined by '.', a label value: "orphaned", "driver_held.ghost".
std::string classes_of(const std::vector<report::GateFinding>& findings) {
  std::string out;
  for (const auto& f : findings)
    if (out.find(f.what) == std::string::npos) out += (out.empty() ? "" : ".") + std::string(f.what);
  return out;
}

}  // namespace

GateVerdict judge_gate(const inventory::Inventory& inv) {
  GateVerdict v;
  const bool read = gpu::lists_gpus(inv.source_state);
  bool all_verified = true;
  for (const auto& view : inv.gpus) {
    std::vector<report::GateFinding> found;
    report::GateFinding orphaned{view.info.id, "orphaned", 0, {}};
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || !proc::unattended_may_act(gh.holder)) continue;
      orphaned.bytes += gh.gpu_bytes.value_or(0);
      orphaned.pids.push_back(gh.holder.id.pid);
    }
    if (!orphaned.pids.empty()) found.push_back(std::move(orphaned));
    for (auto f : inventory::gpu_findings(view)) {
      if (f == inventory::Finding::driver_held)
        found.push_back({view.info.id, "driver_held", view.unattributed_bytes, {}});
      else if (f == inventory::Finding::ghost)
        found.push_back({view.info.id, "ghost", view.info.memory ? view.info.memory->used : 0, {}});
    }
    const auto state = inventory::gpu_state(view);
    const bool verified = state == inventory::GpuState::free || state == inventory::GpuState::held;
    all_verified = all_verified && verified;
    if (!view.info.id.mig() && !view.info.uuid.empty())
      v.gpus.push_back({view.info.id, view.info.uuid,
                        !found.empty()         ? GateWant::close
                        : read && verified     ? GateWant::open
                                               : GateWant::hold,
                        found});
    v.findings.insert(v.findings.end(), found.begin(), found.end());
  }
  if (!v.findings.empty()) {
    v.want = GateVerdict::Want::close;
    return v;
  }
  if (read && all_verified && inventory::check_node(inv).verdict() == inventory::Verdict::clean)
    v.want = GateVerdict::Want::open;
  return v;
}

std::vector<GateStepDue> gate_steps(bool per_gpu, const GateVerdict& verdict) {
  std::vector<GateStepDue> out;
  if (!per_gpu) {
    if (verdict.want != GateWant::hold) {
      const bool close = verdict.want == GateWant::close;
      out.push_back({"", close, {close ? report::gate_reason(verdict.findings) : "", std::nullopt}});
    }
    return out;
  }
  for (const auto& g : verdict.gpus) {
    if (g.want == GateWant::hold) continue;
    const bool close = g.want == GateWant::close;
    out.push_back({g.uuid, close,
                   {close ? report::gate_reason(g.findings) : "",
                    GateTarget::Gpu{g.id, g.uuid, classes_of(g.findings)}}});
  }
  return out;
}

void GateTally::done(std::string mode, double seconds) {
  std::lock_guard lock(mutex_);
  done_.emplace_back(std::move(mode), seconds);
}

void GateTally::failed(const std::string& mode) {
  std::lock_guard lock(mutex_);
  ++errors_[mode];
}

std::vector<std::pair<std::string, double>> GateTally::take_done() {
  std::lock_guard lock(mutex_);
  return std::exchange(done_, {});
}

std::map<std::string, std::uint64_t> GateTally::take_errors() {
  std::lock_guard lock(mutex_);
  return std::exchange(errors_, {});
}

Gate::Gate(std::vector<std::unique_ptr<NodeAction>> actions, NoticeFn notice,
           std::chrono::milliseconds retry)
    : notice_(std::move(notice)), retry_(retry) {
  for (auto& a : actions) slots_.push_back(Slot{std::move(a), {}, {}, false});
  StopSignalsBlocked quiet;  // the loop's thread takes the stop signals
  thread_ = std::thread([this] { run(); });
}

Gate::~Gate() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Gate::after_look(const inventory::Inventory& inv) {
  GateVerdict v = judge_gate(inv);
  {
    std::lock_guard lock(mutex_);
    pending_ = Pending{std::move(v), Clock::now()};
  }
  wake_.notify_all();
}

void Gate::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return stopping_ || (!pending_ && !busy_); });
}

void Gate::run() {
  std::optional<Pending> current;
  // No retry due: max (an optional here tripped g++ 12's -Wmaybe-uninitialized at -O2).
  Clock::time_point retry_at = Clock::time_point::max();
  std::unique_lock lock(mutex_);
  for (;;) {
    auto woken = [&] { return stopping_ || pending_.has_value(); };
    if (retry_at != Clock::time_point::max())
      wake_.wait_until(lock, retry_at, woken);
    else
      wake_.wait(lock, woken);
    if (stopping_) return;
    if (pending_) {
      current = std::move(pending_);
      pending_.reset();
    }
    retry_at = Clock::time_point::max();
    if (!current) {
      idle_.notify_all();
      continue;
    }
    busy_ = true;
    const Pending p = *current;
    lock.unlock();
    bool retry = false;
    for (auto& slot : slots_)
      if (!act(slot, p.verdict, p.at)) retry = true;
    lock.lock();
    busy_ = false;
    if (retry) retry_at = Clock::now() + retry_;
    idle_.notify_all();
  }
}

bool Gate::act(Slot& slot, const GateVerdict& verdict, Clock::time_point at) {
  NodeAction& a = *slot.action;
  const std::string mode(a.mode());
  for (const auto& due : gate_steps(a.per_gpu(), verdict)) {
    if (auto it = slot.closed.find(due.key); it != slot.closed.end() && it->second == due.close)
      continue;
    if (Clock::now() < slot.not_before) return false;
    auto done = due.close ? a.close(due.target) : a.open(due.target);
    const double seconds = std::chrono::duration<double>(Clock::now() - at).count();
    if (!done) {
      slot.not_before = Clock::now() + retry_;
      tally_.failed(mode);
      if (!slot.failing && notice_)
        notice_({mode, report::GateStep::failed, "", done.error().message, seconds});
      slot.failing = true;
      return false;
    }
    slot.failing = false;
    slot.closed[due.key] = due.close;
    if (done->quiet) continue;
    if (done->step == report::GateStep::closed || done->step == report::GateStep::opened)
      tally_.done(mode, seconds);
    if (notice_) notice_({mode, done->step, done->target, done->detail, seconds});
  }
  return true;
}

}  // namespace gpureap::agent
