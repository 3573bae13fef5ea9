#pragma once
// Server instances (issue 24): the holders of one look grouped by what started them
// together, so that a crashed tensor-parallel server is one thing with ranks, not
// eight identical rows. An instance is, in this order:
//  - the processes of one `gpureap run` (their GPUREAP_RUN_ID), whatever their groups;
//  - else the holders of one parent the agent saw die (Holder::dead_parent), when it had
//    two or more, whatever their groups: one crash is one instance and one event;
//  - else the processes of one process group (and container): the group outlives the
//    launcher, so an orphaned server's workers still share it (vLLM's orphaned
//    EngineCore stays in the worker's group; SGLang starts its own session);
//  - else the process alone (pgid unknown: outside this PID namespace).
// Its launcher is the group leader (pid == pgid), when alive: its command line names
// the engine, the model and the port (proc/engine_role.h). A run's launcher is its
// members' parent when that is an engine launcher (`gpureap run -- python -m
// sglang.launch_server ...`: the run's command).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device_id.h"
#include "proc/engine_role.h"
#include "proc/holder.h"
#include "proc/lineage.h"

namespace gpureap::inventory {

struct Inventory;  // inventory.h, which holds the instances

enum class InstanceKind { run, process_group, process, parent };
/// "run", "process_group", "process", "parent" (util/enum_names.h).
std::string_view enum_name(InstanceKind kind);

struct InstanceMember {
  proc::ProcessId id;
  proc::EngineRole role = proc::EngineRole::none;
  std::string ranks;  // proc::rank_label: "TP3", "DP1 TP3", ""
};

struct Instance {
  /// What `free --instance` and the JSON's holders name it by: the run id for a run
  /// ("sglang-4721"), the process group id for a group ("4721"), the pid alone.
  std::string key;
  InstanceKind kind = InstanceKind::process;
  pid_t pgid = 0;
  std::string run_id;
  std::string container;
  proc::Engine engine = proc::Engine::none;  // the launcher's, else its members' (if one)
  // The launcher: the group leader (or the run's first process), when this /proc shows it.
  pid_t launcher_pid = 0;
  bool launcher_alive = false;
  std::string launcher_comm;
  /// Its command line, arguments joined by spaces (proc::format_cmdline), when known: the
  /// 15-character comm cuts `python3 -m sglang.launch_server` to `python3 -m sgla`.
  std::string launcher_cmdline;
  /// Of a `gpureap run`: every member names the run and no live run's supervisor is above
  /// it (proc::Holder::run_gone): its gpureap was killed, whether or not its server lives.
  bool run_gone = false;
  /// A member is in the run's own cgroup (gpureap-run:ID), which only a gpureap run makes;
  /// false: the run id is only GPUREAP_RUN_ID in an environment, which anyone may set.
  bool run_in_cgroup = false;
  /// When the agent saw the launcher die (wall clock, seconds since the epoch).
  std::optional<double> launcher_died_at;
  std::optional<std::string> model;  // from the launcher's command line
  std::optional<unsigned> port;
  /// TCP ports its members still listen on, read only when its launcher is gone (a
  /// crashed server's workers keep the port a relaunch needs).
  std::vector<unsigned> ports;
  std::vector<InstanceMember> members;  // its GPU holders, in pid order
  std::vector<gpu::DeviceId> gpus;      // the GPUs they use, ascending
  std::uint64_t bytes = 0;              // NVML's figures, summed over members and GPUs
  bool bytes_known = true;              // false when a member's figure is missing
  std::size_t orphaned = 0;             // members called orphaned
  std::size_t detached = 0;             // members called detached
};

/// Groups the look's GPU holders (those that use a GPU) into instances, sets each
/// holder's Holder::instance to its key, and reads each launcher's stat and cmdline
/// under `proc_root`. Instances come ordered by their first GPU, then key.
std::vector<Instance> find_instances(Inventory& inv, const std::string& proc_root);

/// Names an instance's dead launcher from what was seen of it alive (the agent's
/// witness): its comm, when it died, and what its command line says (engine, model, port).
void remember_dead_launcher(Instance& in, const proc::DeadParent& launcher);

/// The instance `key` names (a key, or a pgid/run id as typed), or nullptr.
const Instance* find_instance(const std::vector<Instance>& instances, std::string_view key);

/// The keys of the instances `key` would name but for a container ("sglang-1" ->
/// "sglang-1@docker:3f2a1b…", "sglang-1@docker:9c8d7e…"): what to offer when
/// find_instance finds none because two containers share the key.
std::vector<std::string> keys_in_containers(const std::vector<Instance>& instances,
                                            std::string_view key);

}  // namespace gpureap::inventory
