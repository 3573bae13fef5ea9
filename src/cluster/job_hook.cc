#include "cluster/job_hook.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "reclaim/free_lock.h"

namespace gpureap::cluster {

std::string_view enum_name(NodeStep s) {
  switch (s) {
    case NodeStep::none:
      return "none";
    case NodeStep::drained:
      return "drained";
    case NodeStep::not_drained:
      return "not_drained";
    case NodeStep::resumed:
      return "resumed";
    case NodeStep::kept_drained:
      return "kept_drained";
    case NodeStep::left_alone:
      return "left_alone";
  }
  return {};
}

WhenHeld when_held(std::string_view mode, std::string_view given) {
  std::string_view when = given.empty() ? (mode == "prolog" ? "drain-fail" : "drain") : given;
  return WhenHeld{when != "fail", when != "drain"};
}

HookTimes hook_times(HookClock::time_point started, std::chrono::milliseconds total,
                     std::chrono::milliseconds scontrol_timeout) {
  const auto end = started + total;
  return HookTimes{end, end - std::min(scontrol_timeout, total / 4)};
}

JobCheck check_under_free_lock(const std::string& state_dir, HookClock::time_point until,
                               const std::function<JobCheck()>& check) {
  // A unique_ptr, not an optional: g++ 13 (the GPU machine's) warns that an optional's
  // moved-in descriptor "may be used uninitialized" here, and -Werror makes it fatal.
  std::unique_ptr<reclaim::FreeLock> lock;
  auto l = reclaim::FreeLock::acquire(state_dir, until);
  if (!l) {
    JobCheck failed;
    failed.error = l.error().message;
    return failed;
  }
  lock = std::make_unique<reclaim::FreeLock>(std::move(*l));
  return check();
}

NodeOutcome settle_job_node(const JobCheck& check, WhenHeld policy, const std::string& node,
                            const std::string& reason, const Scontrol& scontrol,
                            HookClock::time_point end) {
  NodeOutcome outcome{node, NodeStep::none, "", ""};
  if (check.ok()) return outcome;
  outcome.reason = reason;
  outcome.step = NodeStep::not_drained;
  if (!policy.drain) return outcome;
  if (auto r = scontrol.drain(node, outcome.reason, end); r)
    outcome.step = NodeStep::drained;
  else
    outcome.error = r.error().message;
  return outcome;
}

HookEnd job_hook_end(const JobCheck& check, const NodeOutcome& outcome, WhenHeld policy) {
  if (check.ok()) return HookEnd::ok;
  if (outcome.step == NodeStep::drained && !policy.fail) return HookEnd::ok;
  return check.error.empty() ? HookEnd::still_held : HookEnd::system;
}

NodeOutcome settle_health_node(const HealthCheck& check, const std::string& node,
                               const std::string& reason, const Scontrol& scontrol,
                               HookClock::time_point end, std::optional<NodeState>& state) {
  NodeOutcome outcome{node, NodeStep::none, "", ""};
  state.reset();
  if (auto s = scontrol.show_node(node, end); s)
    state = *s;
  else
    outcome.error = s.error().message;
  if (!state) return outcome;
  switch (decide_health_action(check.healthy(), *state, check.releasing.empty())) {
    case HealthAction::none:
      break;
    case HealthAction::drain:
      outcome.reason = reason;
      outcome.step = NodeStep::not_drained;
      if (auto r = scontrol.drain(node, outcome.reason, end); r)
        outcome.step = NodeStep::drained;
      else
        outcome.error = r.error().message;
      break;
    case HealthAction::keep:
      outcome.step = NodeStep::kept_drained;
      outcome.reason = state->reason;
      break;
    case HealthAction::resume:
      outcome.reason = state->reason;
      if (auto r = scontrol.resume(node, end); r)
        outcome.step = NodeStep::resumed;
      else
        outcome.error = r.error().message;
      break;
    case HealthAction::leave_alone:
      outcome.step = NodeStep::left_alone;
      outcome.reason = state->reason;
      break;
  }
  return outcome;
}

HookEnd health_end(const HealthCheck& check, const NodeOutcome& outcome) {
  if (!outcome.error.empty() || !check.error.empty()) return HookEnd::system;
  return check.healthy() ? HookEnd::ok : HookEnd::still_held;
}

}  // namespace gpureap::cluster
