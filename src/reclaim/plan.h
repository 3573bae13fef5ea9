#pragma once
// Who `free` will signal, and why. The targets are the selected holders plus
// their descendants (a worker's helpers die with it); some processes are never
// targets, whatever the flags.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "proc/process_table.h"
#include "util/pattern.h"

namespace gpureap::reclaim {

struct Selection {
  std::vector<unsigned> gpus;       // indices of the selected GPUs
  std::vector<pid_t> pids;          // --pid: only these (and they may name infrastructure)
  std::optional<uid_t> user;        // --user
  std::string cgroup;               // --cgroup: substring of the cgroup path or container hint
  std::optional<Pattern> match;     // --match: searched anywhere in the command line
  bool orphans_only = false;        // --orphans

  /// True when `pid` is named by --pid.
  bool names(pid_t pid) const { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }
  /// True when the selection narrows beyond GPUs (any of pid/user/cgroup/match/orphans).
  bool narrowed() const {
    return !pids.empty() || user || !cgroup.empty() || match || orphans_only;
  }
};

/// Facts about the caller that decide protection and permission.
struct CallerContext {
  pid_t self = 0;
  std::set<pid_t> ancestors;  // our parent chain up to pid 1
  uid_t euid = 0;
  std::vector<proc::ProcessEntry> table;  // all processes, for descendants
  std::string proc_root = "/proc";        // where the table was read; plans read more here

  /// Reads the caller's context from `proc_root` (inventory::Node::proc_root()).
  static CallerContext current(const std::string& proc_root);
};

struct Target {
  proc::ProcessId id;
  std::string comm;
  std::string cmdline;
  std::string user;
  std::vector<unsigned> gpus;   // GPUs it uses (empty for a descendant that holds none)
  std::uint64_t gpu_bytes = 0;  // NVML's figure over those GPUs
  std::string why;              // "orphaned; holds 20 GiB on GPU 3", "descendant of 4242"
};

enum class SkipKind { protected_process, not_permitted, not_matched };

struct Skipped {
  proc::ProcessId id;
  std::string comm;
  std::vector<unsigned> gpus;
  std::uint64_t gpu_bytes = 0;
  SkipKind kind = SkipKind::not_matched;
  std::string reason;
};

struct Plan {
  std::vector<Target> targets;
  std::vector<Skipped> skipped;  // holders of the selected GPUs that are not targets
  bool contains(const proc::ProcessId& id) const;
};

/// Why a process must never be signalled, or nullopt. Infrastructure names are
/// allowed when `named_by_pid` (the operator asked for it by pid).
std::optional<std::string> protection_reason(pid_t pid, const std::string& comm, bool kernel_thread,
                                             const CallerContext& ctx, bool named_by_pid);

/// Builds the plan from an inventory.
Plan make_plan(const inventory::Inventory& inv, const Selection& selection,
               const CallerContext& ctx);

/// What `gpureap free --orphans` over every GPU of `inv` would plan (status's closing
/// advice names only what free would act on). Reads the caller's context from
/// `proc_root` only when some holder is orphaned; otherwise the plan is empty.
Plan orphans_plan(const inventory::Inventory& inv, const std::string& proc_root);

/// Adds a respawning parent to `plan` as a target, when it is not protected and
/// the selection (if narrowed) matches it. Returns true when added.
bool include_respawner(Plan& plan, const proc::ProcessEntry& parent, const Selection& selection,
                       const CallerContext& ctx, int respawns);

}  // namespace gpureap::reclaim
