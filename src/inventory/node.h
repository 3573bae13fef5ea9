#pragma once
// The node context: everything a command needs to look at this machine's GPUs,
// built once per command (mold's and ccache's context object): the NVIDIA device
// nodes, the GPU source (NVML, or a fake in tests), the baseline store, the proc
// root, the clock and the interrupt flag. `look()` is the one way to take an
// inventory, so status, free, wait, run and the engine's re-scans all see the
// machine the same way.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_select.h"
#include "gpu/gpu_source.h"
#include "inventory/baseline_store.h"
#include "inventory/collect.h"
#include "inventory/inventory.h"
#include "proc/device_nodes.h"
#include "util/clock.h"
#include "util/result.h"

namespace gpureap::inventory {

struct NodeConfig {
  std::string dev_dir = "/dev";
  /// Where /proc is: the only place a proc root is set (tests point it at fixtures).
  std::string proc_root = "/proc";
  /// Baselines from this directory (already checked: state_dir()); nullopt: from
  /// state_dir() when usable, else in memory with a warning (BaselineStore::load_default).
  std::optional<std::string> state_dir;
  /// A running agent's socket (inventory/agent_client.h): the first look() asks it
  /// and falls back to a direct scan when no agent answers; later looks (the
  /// engine's re-scans) are direct. nullopt: always scan directly.
  std::optional<std::string> agent_socket;
  /// What the GPU source loads and reads, for identity(): the NVML library as resolved
  /// (gpu::resolve_nvml_library) and $GPUREAP_SIM_DIR ("" when unset).
  std::string nvml_library;
  std::string sim_dir;
  /// The release model's budget (the global option --release-budget); nullopt: its rule
  /// (release_model.h, ReleaseBudget).
  std::optional<std::chrono::milliseconds> release_budget;
};

class Node {
 public:
  /// Nothing is read yet: the device nodes are discovered (a failure leaves the set
  /// empty and is kept in device_error(): each command decides whether it is fatal)
  /// and the baselines loaded on first use, and NVML is asked only by look(), so a
  /// `gpureap run -- true` never pays for any of it.
  Node(NodeConfig config, std::unique_ptr<gpu::GpuSource> gpus,
       util::Clock& clock = util::system_clock());
  Node(Node&&) noexcept = default;
  Node& operator=(Node&&) noexcept = default;

  /// One look at the machine: NVML snapshot and /proc holder scan, concurrently
  /// (inventory/collect.h), joined into an Inventory. The first look asks the
  /// agent instead when config.agent_socket is set (source "agent"; on any
  /// failure, and when the agent watches another node than identity() names, it
  /// scans); the agent records the baselines then, this node does not.
  /// The node's proc root and clock replace those of `options`.
  Inventory look(CollectOptions options = {});
  /// What the agent saw die no later direct look can see: the orphans `inv` calls
  /// orphaned by that (OrphanEvidence::witnessed) stay orphaned in this node's later
  /// looks while each is the same process, still adopted by the same parent
  /// (CollectOptions::witnessed). look() does it for an agent's answer; the agent's
  /// reaper for its own view before it frees.
  void remember_witnessed(const Inventory& inv);
  /// The next look() asks the agent again, as a first look does: `gpureap top`'s
  /// refreshes and the look its free starts from. The looks after it (the engine's
  /// re-scans while it acts) stay direct.
  void ask_agent_again() { agent_asked_ = false; }
  /// Writes the baselines learnt by look() (a read-only state dir only costs them).
  Result<void> save_baselines() { return baselines().save(); }

  /// The node this context looks at, its paths made absolute (Inventory::node).
  NodeIdentity identity() const;

  /// Why the device directory could not be read (a missing one included); nullopt
  /// when it could.
  const std::optional<Error>& device_error() { return load(), device_error_; }
  const proc::DeviceSet& devices() { return load(), devices_; }
  gpu::GpuSource& gpus() { return *gpus_; }
  /// The running agent's socket this node's first look asks (NodeConfig::agent_socket).
  const std::optional<std::string>& agent_socket() const { return config_.agent_socket; }
  BaselineStore& baselines() { return load(), baselines_; }
  /// What this node's looks saw of each GPU's releases (release_model.h): look() records
  /// every look into it and judges its own looks by it; the agent's watcher joins its
  /// looks with it too.
  ReleaseTracker& releases() { return load(), releases_; }
  const std::string& proc_root() const { return config_.proc_root; }
  const std::string& dev_dir() const { return config_.dev_dir; }
  util::Clock& clock() { return *clock_; }

  /// The flag a signal handler sets (Ctrl-C): long waits stop and report.
  void set_interrupt_flag(const std::atomic<bool>* flag) { interrupted_ = flag; }
  const std::atomic<bool>* interrupt_flag() const { return interrupted_; }
  bool interrupted() const { return interrupted_ && interrupted_->load(); }

 private:
  void load();

  NodeConfig config_;
  std::unique_ptr<gpu::GpuSource> gpus_;
  util::Clock* clock_;
  proc::DeviceSet devices_;
  std::optional<Error> device_error_;
  BaselineStore baselines_ = BaselineStore::in_memory();
  ReleaseTracker releases_;
  bool loaded_ = false;
  bool agent_asked_ = false;  // only the first look asks the agent
  std::vector<proc::Holder>
      witnessed_;  // the agent's witnessed orphans (CollectOptions::witnessed)
  const std::atomic<bool>* interrupted_ = nullptr;
};

/// The devices a --gpu selector (gpu/gpu_select.h) picks among the inventory's GPUs.
Result<std::vector<gpu::DeviceId>> select_gpus(const gpu::GpuSelector& selector,
                                               const Inventory& inv);

/// True when `id` is among `chosen`.
bool is_selected(const std::vector<gpu::DeviceId>& chosen, gpu::DeviceId id);

/// The GPUs on which a holder that `chosen` picks uses the GPU, or is a client of it (a
/// monitor, which only a pick by pid reaches), not one whose memory is on another GPU,
/// ascending: the GPUs of `free --pid`, of top's tagged set, of a reap.
std::vector<gpu::DeviceId> gpus_used_by(const Inventory& inv,
                                        const std::function<bool(const proc::Holder&)>& chosen);
std::vector<gpu::DeviceId> gpus_used_by(const Inventory& inv,
                                        const std::vector<proc::ProcessId>& ids);

/// Keeps only the GPUs in `chosen` in an inventory, and the instances that use one of them.
void keep_gpus(Inventory& inv, const std::vector<gpu::DeviceId>& chosen);

}  // namespace gpureap::inventory
