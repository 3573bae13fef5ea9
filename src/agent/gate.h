#pragma once
// `gpureap watch --gate MODE` (issue 51, item 2): closes this node to new work while the
// agent sees a leak by evidence on a GPU (an owned or witnessed orphan's memory,
// driver-held memory, a ghost GPU), and opens it again once a look verifies every GPU
// back at baseline (or explained by live holders). What closing means is a NodeAction's
// (agent/slurm_gate.h: a Slurm drain; agent/kube_gate.h: a Kubernetes node condition or
// taint; agent/device_taint_gate.h: a DRA DeviceTaintRule per GPU); this file holds the
// policy, its thread and the interface, so a new mode is one more NodeAction. An action
// that closes GPUs one by one (per_gpu) is asked per GPU, each GPU on its own verdict.
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
#include <utility>
#include <vector>

#include "gpu/device_id.h"
#include "inventory/inventory.h"
#include "report/slurm_report.h"
#include "report/watch_service.h"
#include "util/result.h"

namespace gpureap::agent {

/// What a look wants of the node, or of one GPU.
enum class GateWant { close, open, hold };

/// What one look says about one whole GPU (not a MIG device), for the actions that close
/// GPUs one by one (a DRA DeviceTaintRule).
struct GpuVerdict {
  gpu::DeviceId id;
  std::string uuid;
  GateWant want = GateWant::hold;
  std::vector<report::GateFinding> findings;  // close: why
};

/// What one look says to the gate.
struct GateVerdict {
  using Want = GateWant;
  Want want = Want::hold;
  std::vector<report::GateFinding> findings;  // close: why
  std::vector<GpuVerdict> gpus;               // each whole GPU's own verdict
};

/// close: a GPU has an owned or witnessed orphan's memory, driver-held memory or is a
/// ghost (inventory::gpu_findings, lineage's unattended_may_act); open: the node check
/// is clean and every GPU is free or held by live holders; hold otherwise. Per GPU, the
/// same rule on that GPU alone: close on its findings, open once it is free or held by
/// live holders in a look that read the GPUs, hold otherwise.
GateVerdict judge_gate(const inventory::Inventory& inv);

/// What a node action did; `target` names what it acted on ("node gpu01"), `detail` the
/// reason set or found.
struct GateOutcome {
  report::GateStep step = report::GateStep::closed;
  std::string target;
  std::string detail;
  bool quiet = false;  // nothing done and nothing to say (opening a node never closed)
};

/// What one call of an action closes or opens: the node, or one GPU (per_gpu actions).
struct GateTarget {
  std::string reason;  // close: "gpureap: GPU 1 orphaned 8.00 GiB pid 42 (gpureap watch)"
  struct Gpu {
    gpu::DeviceId id;
    std::string uuid;
    std::string what;  // its findings' classes joined by '.': "orphaned", "driver_held.ghost"
  };
  std::optional<Gpu> gpu;  // per_gpu actions only
};

/// One way of closing the node (or a GPU) to new work. Called from the gate's thread only.
class NodeAction {
 public:
  virtual ~NodeAction() = default;
  virtual std::string_view mode() const = 0;
  /// Whether it closes GPUs one by one (each GpuVerdict) rather than the node.
  virtual bool per_gpu() const { return false; }
  /// Closes with `target.reason` (starting "gpureap:"), unless closed already or by
  /// someone else.
  virtual Result<GateOutcome> close(const GateTarget& target) = 0;
  /// Opens again only what gpureap closed.
  virtual Result<GateOutcome> open(const GateTarget& target) = 0;
};

/// One call the gate owes an action for a verdict: `key` is "" for the node, else the
/// GPU's UUID (what the gate remembers each action's state by).
struct GateStepDue {
  std::string key;
  bool close = false;
  GateTarget target;
};
/// The calls `verdict` asks of an action (per_gpu or not), before the gate skips those
/// whose state is already reached: none for a verdict (or a GPU) that holds.
std::vector<GateStepDue> gate_steps(bool per_gpu, const GateVerdict& verdict);

/// What the gate did, for the metrics (thread-safe): steps done and failures, by mode.
class GateTally {
 public:
  void done(std::string mode, double seconds);
  void failed(const std::string& mode);
  /// The steps done since the last call (closed or opened: not a dry run's, not a
  /// failure), as (mode, seconds from the verdict): gpureap_gate_seconds.
  std::vector<std::pair<std::string, double>> take_done();
  /// The actions that failed since the last call, by mode: gpureap_gate_errors_total.
  std::map<std::string, std::uint64_t> take_errors();

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, double>> done_;
  std::map<std::string, std::uint64_t> errors_;
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
  std::vector<std::pair<std::string, double>> take_done() { return tally_.take_done(); }
  std::map<std::string, std::uint64_t> take_errors() { return tally_.take_errors(); }

 private:
  /// One action and what the gate's thread knows of it.
  struct Slot {
    std::unique_ptr<NodeAction> action;
    std::map<std::string, bool> closed;  // by GateStepDue::key: the state it last reached
    Clock::time_point not_before{};      // a failed call: not again before
    bool failing = false;                // its last call failed (said once)
  };
  /// The latest verdict not yet taken by the gate's thread, and when it was given.
  struct Pending {
    GateVerdict verdict;
    Clock::time_point at;
  };
  void run();
  /// Asks `slot` what `verdict` (given at `at`) wants of it; false when a call failed
  /// or must wait (a retry is due).
  bool act(Slot& slot, const GateVerdict& verdict, Clock::time_point at);

  std::vector<Slot> slots_;
  NoticeFn notice_;
  std::chrono::milliseconds retry_;
  GateTally tally_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::optional<Pending> pending_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace gpureap::agent
