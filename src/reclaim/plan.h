#pragma once
// Who `free` will signal, and why. The targets are the selected holders plus
// their descendants that hold no GPU (a worker's helpers die with it); a descendant
// that holds a GPU is a target only when it is selected by itself. Some processes
// are never targets, whatever the flags. Every process has one verdict: a target or
// left alone (skipped), never both.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "proc/environ.h"
#include "proc/process_table.h"
#include "reclaim/target_lineage.h"
#include "util/pattern.h"

namespace gpureap::reclaim {

/// The narrowing filters of a selection: a holder passes when it passes every one
/// that is set (none set: every holder of the selected GPUs passes).
struct Filters {
  std::vector<pid_t> pids;          // --pid: only these (and they may name infrastructure)
  std::optional<uid_t> user;        // --user
  std::string cgroup;               // --cgroup: substring of the cgroup path or container hint
  std::string cgroup_component;     // a whole component of the cgroup path (Slurm's "job_42")
  std::vector<std::string> cgroup_none;  // none of these a whole component of the cgroup path
                                         // (running Slurm jobs' "job_43")
  std::optional<Pattern> match;     // --match: searched anywhere in the command line
  bool orphans_only = false;        // --orphans
  /// With orphans_only, for what acts unattended (the reaper, the Slurm hooks): not an
  /// orphan by its process group alone (proc::unattended_may_act).
  bool unattended = false;
  std::vector<proc::EnvEntry> env;  // --env: every one an entry of its environment
  std::vector<proc::EnvEntry> env_none;  // none of these in its environment
  std::vector<gpu::DeviceId> on_gpus;         // uses one of these GPUs (empty: any selected one)
  // Only these exact processes (pid and start time): the reaper's announced set, so
  // that no later round of its reclaim can select another holder (W2-01).
  std::vector<proc::ProcessId> ids;
  /// Why a holder outside `ids` is left alone, in the words of who chose them (`top`:
  /// "not tagged"); the reaper's by default.
  std::string ids_left_out = "not one of the processes this reap announced";
  std::string instance;  // --instance: only holders of this instance (inventory/instances.h)

  /// True when `pid` is named by --pid.
  bool names(pid_t pid) const { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }
  /// True when any filter is set.
  bool narrowed() const {
    return !pids.empty() || user || !cgroup.empty() || !cgroup_component.empty() ||
           !cgroup_none.empty() || match || orphans_only || !env.empty() || !env_none.empty() ||
           !on_gpus.empty() || !ids.empty() || !instance.empty();
  }
};

struct Selection : Filters {
  std::vector<gpu::DeviceId> gpus;  // the selected GPUs
  /// When not empty, a holder must also pass at least one of these. The Slurm epilog
  /// selects a job's leftovers this way: its environment holds SLURM_JOB_ID=42, or its
  /// cgroup is the job's, or it is an orphan on one of the job's GPUs.
  std::vector<Filters> any_of;

  /// True when the selection narrows beyond GPUs.
  bool narrowed() const { return Filters::narrowed() || !any_of.empty(); }
};

/// Facts about the caller that decide protection and permission.
struct CallerContext {
  pid_t self = 0;
  std::set<pid_t> ancestors;  // our parent chain up to pid 1
  std::set<pid_t> helpers;    // our own descendants (the NVML worker, nvidia-smi, scontrol):
                              // they inherit our environment and cgroup, and are never targets
  uid_t euid = 0;
  std::vector<proc::ProcessEntry> table;  // all processes, for descendants
  std::string proc_root;  // where the table was read; plans read more here (current() sets it)
  std::string state_dir;  // inventory::state_dir(), "" when refused: the runs' records

  /// Reads the caller's context from `proc_root` (inventory::Node::proc_root()).
  static CallerContext current(const std::string& proc_root);
  /// The same, with `table` (a process table of `proc_root` just read) for the table.
  static CallerContext from_table(const std::string& proc_root,
                                  std::vector<proc::ProcessEntry> table);
  /// The context of a look: its own process table when it read one
  /// (inventory::CollectOptions::process_table), else read now. One listing of /proc
  /// serves the look and the plan made from it.
  static CallerContext of(const inventory::Inventory& look, const std::string& proc_root);
};

struct Target {
  proc::ProcessId id;
  std::string comm;
  std::string cmdline;
  std::string user;
  std::vector<gpu::DeviceId> gpus;   // every GPU it uses, selected or not (empty: it holds none)
  std::uint64_t gpu_bytes = 0;  // NVML's figure over those GPUs: what signalling it frees
  std::string why;              // "orphaned; holds 20 GiB on GPU 3", "descendant of 4242"
  std::string instance{};       // its server instance's key (inventory/instances.h), if any
  /// The lineage verdict of a GPU holder when planned; nullopt for a target that holds
  /// no GPU (a descendant, a respawner, the rest of an ended run: `why` says why).
  std::optional<TargetLineage> lineage{};
  /// Its VmPin + VmLck (proc::Holder::pinned_host_bytes): unpinned after it exits, the
  /// release's slow phase; 0 when none.
  std::uint64_t pinned_host_bytes = 0;
};

enum class SkipKind { protected_process, not_permitted, not_matched };

struct Skipped {
  proc::ProcessId id;
  std::string comm;
  std::vector<gpu::DeviceId> gpus;   // every GPU it uses, selected or not
  std::uint64_t gpu_bytes = 0;  // NVML's figure over those GPUs
  SkipKind kind = SkipKind::not_matched;
  std::string reason;
};

struct Plan {
  std::vector<Target> targets;
  // Holders of the selected GPUs that are not targets, and GPU-holding descendants of
  // targets that are not selected themselves (with how to include them). Disjoint
  // from targets.
  std::vector<Skipped> skipped;
  /// The server instances (inventory/instances.h) its targets belong to, whole: the
  /// plan names the server, not only its processes.
  std::vector<inventory::Instance> instances;
  /// True when `id` is a target.
  bool contains(const proc::ProcessId& id) const;
  /// The skipped entry of `id`, or nullptr.
  const Skipped* left_alone(const proc::ProcessId& id) const;
};

/// Whether a plan leaves nothing to do on the selected GPUs: free's rule, read by free,
/// the Slurm epilog and the agent's reaper alike. `no` while there is a target, or while
/// a selected GPU holds memory no process explains (driver-held, releasing, outside the
/// namespace, unknown), is a ghost or was not measured: those go on to be classified.
enum class NothingToDo {
  no,
  idle,            // every selected GPU is free (inventory::GpuState::free)
  only_unmatched,  // the only holders are ones the selection itself leaves alone
};
NothingToDo nothing_to_do(const inventory::Inventory& inv, const Selection& selection,
                          const Plan& plan);

/// Why a process must never be signalled, or nullopt. Infrastructure names are
/// allowed when `named_by_pid` (the operator asked for it by pid).
std::optional<std::string> protection_reason(pid_t pid, const std::string& comm, bool kernel_thread,
                                             const CallerContext& ctx, bool named_by_pid);

/// Builds the plan from an inventory.
Plan make_plan(const inventory::Inventory& inv, const Selection& selection,
               const CallerContext& ctx);

/// The GPUs that make_plan's GPU-holding targets use (every GPU each uses, selected or
/// not), ascending: its verdicts (protection, permission, the filters) without the
/// plan (no descendants, reasons or instances). The Slurm epilog's GPUs to verify, the
/// job's own processes' (cluster/job_check.cc), before its one plan is made.
std::vector<gpu::DeviceId> target_gpus(const inventory::Inventory& inv, const Selection& selection,
                                       const CallerContext& ctx);

/// Adds every process of ctx.table that matches one of `any_of` by what describes a
/// process (its environment, cgroup, user, command line; orphans_only and on_gpus do not
/// apply), whether it holds a GPU or not: the rest of a finished Slurm job (an escaped
/// server whose workers hold the GPUs would start new ones). Never a protected process,
/// a kernel thread, a zombie, or (without root) another user's. `why` is each one's reason.
/// Returns how many were added.
std::size_t add_processes_matching(Plan& plan, const std::vector<Filters>& any_of,
                                   const CallerContext& ctx, const std::string& why);

/// What `gpureap free --orphans` over every GPU of `inv` would plan (status's closing
/// advice names only what free would act on). Reads the caller's context from
/// `proc_root` only when some holder is orphaned; otherwise the plan is empty.
Plan orphans_plan(const inventory::Inventory& inv, const std::string& proc_root);

/// Adds a respawning parent to `plan` as a target, when it is not protected and
/// the selection (if narrowed) matches it. A parent the plan left alone as a holder
/// moves from skipped to targets (one verdict), with its GPUs and bytes. Returns
/// true when added.
bool include_respawner(Plan& plan, const proc::ProcessEntry& parent, const Selection& selection,
                       const CallerContext& ctx, int respawns);

}  // namespace gpureap::reclaim
