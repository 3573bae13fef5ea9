#pragma once
// `gpureap watch --gate MODE` (issue 51, item 2): closes this node to new work while the
// agent sees a leak by evidence on a GPU (an owned or witnessed orphan's memory,
// driver-held memory, a ghost GPU), and opens it again once a look verifies every GPU
// back at baseline (or explained by live holders). What closing means is a NodeAction's
// (agent/slurm_gate.h: a Slurm drain; agent/kube_gate.h: a Kubernetes node condition or
// taint); this file holds the policy, its thread and the
// interface, so a new mode is one more NodeAction.
//
// Hysteresis: a look that can neither close nor open (memory still releasing, a GPU not
// read, an orphan known only by inference) changes nothing, so a release never flaps the
// node; each action is asked only when the wanted state differs from the one it last
// reached. The actions run on the gate's own thread: the agent's loop never waits for
// scontrol. A failed action is said and tried again 5 s later, never a crash.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "inventory/inventory.h"
#include "report/slurm_report.h"
#include "report/watch_service.h"
#include "util/result.h"

namespace gpureap::agent {

/// What one look says to the gate.
struct GateVerdict {
  enum class Want { close, open, hold } want = Want::hold;
  std::vector<report::GateFinding> findings;  // close: why
};

/// close: a GPU has an owned or witnessed orphan's memory, driver-held memory or is a
/// ghost (inventory::gpu_findings, lineage's unattended_may_act); open: the node check
/// is clean and every GPU is free or held by live holders; hold otherwise.
GateVerdict judge_gate(const inventory::Inventory& inv);

/// What a node action did; `target` names what it acted on ("node gpu01"), `detail` the
/// reason set or found.
struct GateOutcome {
  report::GateStep step = report::GateStep::closed;
  std::string target;
  std::string detail;
  bool quiet = false;  // nothing done and nothing to say (opening a node never closed)
};

/// One way of closing the node (or a GPU) to new work. Called from the gate's thread only.
class NodeAction {
 public:
  virtual ~NodeAction() = default;
  virtual std::string_view mode() const = 0;
  /// Closes with `reason` (starting "gpureap:"), unless closed already or by someone else.
  virtual Result<GateOutcome> close(const std::string& reason) = 0;
  /// Opens again only what gpureap closed.
  virtual Result<GateOutcome> open() = 0;
};

class Gate {
 public:
  using Clock = std::chrono::steady_clock;
  using NoticeFn = std::function<void(const report::GateNotice&)>;
  static constexpr std::chrono::seconds kRetry{5};

  /// `notice` is called from the gate's thread (it must be thread-safe); a failed
  /// action is tried again `retry` later.
  Gate(std::vector<std::unique_ptr<NodeAction>> actions, NoticeFn notice,
       std::chrono::milliseconds retry = kRetry);
  ~Gate();  // waits for the action in progress
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  /// After each look (the agent's loop): records the verdict; never waits for an action.
  void after_look(const inventory::Inventory& inv);
  /// For tests: waits until every verdict given has been acted on (or a retry is due).
  void wait_idle();
  /// The steps done since the last call (closed or opened: not a dry run's, not a
  /// failure), as (mode, seconds from the verdict): gpureap_gate_seconds.
  std::vector<std::pair<std::string, double>> take_done();
  /// The actions that failed since the last call, by mode: gpureap_gate_errors_total.
  std::map<std::string, std::uint64_t> take_errors();

 private:
  void run();

  std::vector<std::unique_ptr<NodeAction>> actions_;
  std::vector<std::optional<bool>> closed_;  // per action: the state it last reached
  NoticeFn notice_;
  std::chrono::milliseconds retry_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::optional<GateVerdict> pending_;
  std::vector<std::pair<std::string, double>> done_;
  std::map<std::string, std::uint64_t> errors_;
  Clock::time_point verdict_at_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

/// The actions of `modes` ("slurm", "kubernetes-condition", "kubernetes-taint"), or why
/// one cannot be made (an unknown mode; for Kubernetes, agent/kube_api.h's environment,
/// libcurl missing): exit 2.
Result<std::vector<std::unique_ptr<NodeAction>>> make_node_actions(
    const std::vector<std::string>& modes, bool dry_run);

/// The modes --gate knows, for its help and its refusal.
inline constexpr std::string_view kGateModes = "slurm, kubernetes-condition, kubernetes-taint";

}  // namespace gpureap::agent
