#pragma once
// The Slurm hooks' policy (issue 36): what `gpureap slurm prolog|epilog|health` does
// about its node once the GPUs are checked, and how it ends. cli/slurm_command parses
// and prints; the decisions are here, unit-tested (job_hook_test.cc):
//  - --when-held: drain or not, fail or not (the prolog's default drain-fail, the
//    epilog's drain);
//  - the check's share of the deadline (the drain comes last and needs its own time);
//  - the job check under the free lock (concurrent epilogs and prologs, any free);
//  - a job hook's drain, and the health check's drain or resume (decide_health_action),
//    through scontrol;
//  - how each ends (ok, still held, not verified), for the exit status.
// The drain reason is given by the caller (report/slurm_report's drain_reason).

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cluster/health.h"
#include "cluster/job_check.h"
#include "cluster/scontrol.h"

namespace gpureap::cluster {

using HookClock = std::chrono::steady_clock;

/// What a `gpureap slurm` command did about its node.
enum class NodeStep {
  none,          // nothing was needed
  drained,       // drained with a gpureap reason
  not_drained,   // held, but draining was not asked for (--when-held fail) or failed (error)
  resumed,       // drained by gpureap earlier, healthy now: resumed
  kept_drained,  // drained by gpureap earlier, still held: left so
  left_alone,    // drained or down for another reason: never touched
};

/// Its name (util/enum_names.h): "drained", "kept_drained", ...
std::string_view enum_name(NodeStep s);

struct NodeOutcome {
  std::string node;
  NodeStep step = NodeStep::none;
  std::string reason;  // the reason set (drained, not_drained: the one it would have set) or found
  std::string error;   // scontrol failed: its words
};

/// --when-held: what the node gets when the GPUs are not clean (or not verified).
struct WhenHeld {
  bool drain = true;  // drain it with a gpureap reason
  bool fail = false;  // exit non-zero (slurmd drains it, "Epilog error", if we did not)
};

/// `given`: drain, drain-fail or fail; "" for the mode's default (the prolog's
/// drain-fail, so that the job is requeued; the epilog's drain).
WhenHeld when_held(std::string_view mode, std::string_view given);

/// A hook's times: it ends at `end`; the check ends earlier by scontrol's share (its
/// timeout, at most a quarter of the whole), so that the drain still has time.
struct HookTimes {
  HookClock::time_point end;
  HookClock::time_point check_end;
};
HookTimes hook_times(HookClock::time_point started, std::chrono::milliseconds total,
                     std::chrono::milliseconds scontrol_timeout);

/// How a hook ends, for its exit status.
enum class HookEnd {
  ok,          // clean, or handled (drained with --when-held drain)
  still_held,  // memory stays held
  system,      // nothing could be verified, or scontrol failed
};

/// The job hook's check, made by `check` while holding the free lock of `state_dir`,
/// waited for until `until`: concurrent epilogs and prologs wait for each other (and
/// for any `gpureap free`). The prolog too, freeing or not: a check made while an
/// epilog frees would read its release as held memory (W2-13). A lock not had is the
/// check's error; `check` then does not run.
JobCheck check_under_free_lock(const std::string& state_dir, HookClock::time_point until,
                               const std::function<JobCheck()>& check);

/// After a job check: the node drained with `reason` when the GPUs are not clean and
/// the site asked for a drain; not_drained when it did not (or scontrol failed).
NodeOutcome settle_job_node(const JobCheck& check, WhenHeld policy, const std::string& node,
                            const std::string& reason, const Scontrol& scontrol,
                            HookClock::time_point end);

/// Not clean: a drained node with --when-held drain is handled (ok); otherwise the
/// non-zero status makes slurmd drain it ("Epilog error"/"Prolog error") if we did not.
HookEnd job_hook_end(const JobCheck& check, const NodeOutcome& outcome, WhenHeld policy);

/// The health check's node: its state read (into `state`; nullopt when scontrol could
/// not say), then decide_health_action's drain (with `reason`), keep, resume or leave
/// alone.
NodeOutcome settle_health_node(const HealthCheck& check, const std::string& node,
                               const std::string& reason, const Scontrol& scontrol,
                               HookClock::time_point end, std::optional<NodeState>& state);

/// scontrol's failure or a check not made: system; held: still_held; else ok.
HookEnd health_end(const HealthCheck& check, const NodeOutcome& outcome);

}  // namespace gpureap::cluster
