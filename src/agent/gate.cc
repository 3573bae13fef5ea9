#include "agent/gate.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "agent/kube_gate.h"
#include "agent/slurm_gate.h"
#include "inventory/node_check.h"
#include "proc/lineage.h"
#include "util/signal_mask.h"

namespace gpureap::agent {

GateVerdict judge_gate(const inventory::Inventory& inv) {
  GateVerdict v;
  for (const auto& view : inv.gpus) {
    report::GateFinding orphaned{view.info.id, "orphaned", 0, {}};
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || !proc::unattended_may_act(gh.holder)) continue;
      orphaned.bytes += gh.gpu_bytes.value_or(0);
      orphaned.pids.push_back(gh.holder.id.pid);
    }
    if (!orphaned.pids.empty()) v.findings.push_back(std::move(orphaned));
    for (auto f : inventory::gpu_findings(view)) {
      if (f == inventory::Finding::driver_held)
        v.findings.push_back({view.info.id, "driver_held", view.unattributed_bytes, {}});
      else if (f == inventory::Finding::ghost)
        v.findings.push_back({view.info.id, "ghost", view.info.memory ? view.info.memory->used : 0, {}});
    }
  }
  if (!v.findings.empty()) {
    v.want = GateVerdict::Want::close;
    return v;
  }
  if (!gpu::lists_gpus(inv.source_state) ||
      inventory::check_node(inv).verdict() != inventory::Verdict::clean)
    return v;
  const bool verified = std::all_of(inv.gpus.begin(), inv.gpus.end(), [](const auto& view) {
    const auto state = inventory::gpu_state(view);
    return state == inventory::GpuState::free || state == inventory::GpuState::held;
  });
  if (verified) v.want = GateVerdict::Want::open;
  return v;
}

Gate::Gate(std::vector<std::unique_ptr<NodeAction>> actions, NoticeFn notice,
           std::chrono::milliseconds retry)
    : actions_(std::move(actions)),
      closed_(actions_.size()),
      notice_(std::move(notice)),
      retry_(retry) {
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
    verdict_at_ = Clock::now();
    pending_ = std::move(v);
  }
  wake_.notify_all();
}

void Gate::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return stopping_ || (!pending_ && !busy_); });
}

std::vector<std::pair<std::string, double>> Gate::take_done() {
  std::lock_guard lock(mutex_);
  return std::exchange(done_, {});
}

std::map<std::string, std::uint64_t> Gate::take_errors() {
  std::lock_guard lock(mutex_);
  return std::exchange(errors_, {});
}

void Gate::run() {
  std::vector<Clock::time_point> not_before(actions_.size());
  std::vector<bool> failing(actions_.size(), false);
  std::optional<GateVerdict> current;
  Clock::time_point current_at;
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
      current_at = verdict_at_;
    }
    retry_at = Clock::time_point::max();
    if (!current || current->want == GateVerdict::Want::hold) {
      idle_.notify_all();
      continue;
    }
    busy_ = true;
    const GateVerdict v = *current;
    const auto at = current_at;
    lock.unlock();
    const bool want_closed = v.want == GateVerdict::Want::close;
    bool retry = false;
    for (std::size_t i = 0; i < actions_.size(); ++i) {
      if (closed_[i] == want_closed) continue;
      if (Clock::now() < not_before[i]) {
        retry = true;
        continue;
      }
      NodeAction& a = *actions_[i];
      auto done = want_closed ? a.close(report::gate_reason(v.findings)) : a.open();
      const double seconds = std::chrono::duration<double>(Clock::now() - at).count();
      if (!done) {
        not_before[i] = Clock::now() + retry_;
        retry = true;
        {
          std::lock_guard errors_lock(mutex_);
          ++errors_[std::string(a.mode())];
        }
        if (!failing[i] && notice_)
          notice_({std::string(a.mode()), report::GateStep::failed, "", done.error().message,
                   seconds});
        failing[i] = true;
        continue;
      }
      failing[i] = false;
      closed_[i] = want_closed;
      if (!done->quiet &&
          (done->step == report::GateStep::closed || done->step == report::GateStep::opened)) {
        std::lock_guard done_lock(mutex_);
        done_.emplace_back(std::string(a.mode()), seconds);
      }
      if (!done->quiet && notice_)
        notice_({std::string(a.mode()), done->step, done->target, done->detail, seconds});
    }
    lock.lock();
    busy_ = false;
    if (retry) retry_at = Clock::now() + retry_;
    idle_.notify_all();
  }
}

Result<std::vector<std::unique_ptr<NodeAction>>> make_node_actions(
    const std::vector<std::string>& modes, bool dry_run) {
  std::vector<std::unique_ptr<NodeAction>> out;
  std::vector<std::string> seen;
  for (const auto& mode : modes) {
    if (std::find(seen.begin(), seen.end(), mode) != seen.end()) continue;
    seen.push_back(mode);
    if (mode == "slurm") {
      out.push_back(make_slurm_gate(cluster::Scontrol(cluster::scontrol_from_environment(),
                                                      kSlurmGateTimeout),
                                    cluster::node_name_from_environment(), dry_run));
      continue;
    }
    if (mode == "kubernetes-condition" || mode == "kubernetes-taint") {
      auto endpoint = kube_endpoint_from_environment(::getenv);
      if (!endpoint) return std::unexpected(endpoint.error());
      auto transport = make_curl_transport(endpoint->ca_file, kKubeGateTimeout);
      if (!transport) return fail("--gate " + mode + ": " + transport.error().message);
      KubeApi api(std::move(*endpoint), std::move(*transport));
      out.push_back(mode == "kubernetes-taint" ? make_taint_gate(std::move(api), dry_run)
                                               : make_condition_gate(std::move(api), dry_run));
      continue;
    }
    return fail("--gate: unknown mode '" + mode + "' (known: " + std::string(kGateModes) + ")");
  }
  return out;
}

}  // namespace gpureap::agent
