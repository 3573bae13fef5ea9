// redact_for and without_pids (inventory/inventory_wire.h): the agent's answer
// recomputed for a caller, by build_inventory over the agent's NVML snapshot and
// a changed holder set, so it is what a direct scan would have built.
//
// redact_for: what the agent, which runs as root, may tell a caller of another
// uid. The rule is "what a direct scan run by that user would show it", so the
// answer is rebuilt the way such a scan builds it (proc/holder_scan.cc, inventory/collect.cc):
//  - the caller's own processes: its scan reads their fds and maps, so they are
//    kept whole;
//  - other users' processes: /proc/PID/fd and maps answer EACCES, so the scan
//    finds none of them by fd or mapping; collect describes those NVML lists from
//    the world-readable stat, status, cgroup and cmdline (describe_processes):
//    found_by {nvml}, no device nodes, no wchan, no zombie-leader flag (only the
//    threads' fd tables could tell), no run id from environ (mode 0400);
//  - then build_inventory joins the two exactly as the direct scan does, so
//    openers, attribution and the unexplained class (an fd-only holder the
//    caller cannot see no longer explains memory) come out as it would see them.
// Differences from a direct scan:
//  - problems: a direct scan lists one "permission denied" problem per process
//    of another user on the node. The agent does not know those processes (it
//    reads them all), and listing only the GPU holders among them would tell
//    the caller which processes hold a device. So the agent's own problems are
//    kept and one entry (pid 0) says that other users' processes were not
//    inspected;
//  - baselines are the agent's (root's state directory), not the caller's;
//  - a process of the caller's uid that the caller still may not trace (setuid,
//    not dumpable: its /proc/PID/fd is root's) is kept whole, where the
//    caller's scan would find it unreadable. The agent keeps no dumpable flag;
//    such a process runs the caller's own program.

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "inventory/inventory_wire.h"

namespace gpureap::inventory {
namespace {

/// What describe_processes() finds of another user's process.
proc::Holder as_seen_by_others(const proc::Holder& h) {
  proc::Holder out = h;
  out.found_by.clear();
  out.nodes.clear();
  out.gpu_minors.clear();
  out.wchan.clear();
  out.zombie_leader = false;
  // The run id comes from the cgroup (world-readable) or from environ (not); a live
  // run is read from the process tree (world-readable), so run_alive stays.
  if (!out.run_in_cgroup) {
    // Without the run id, its scan knows nothing of the gone run: that hint goes.
    if (!out.run_id.empty() && out.orphan_evidence == proc::OrphanEvidence::run_gone) {
      out.orphan_reason.clear();
      out.orphaned = false;
      out.orphan_evidence = proc::OrphanEvidence::none;
      out.provenance = proc::Provenance::none;
    }
    out.run_id.clear();
    out.run_gone = false;
    out.run_left_to_init = 0;
  }
  return out;
}

bool listed_by_nvml(const gpu::GpuInfo& info, pid_t pid) {
  return std::any_of(info.processes.begin(), info.processes.end(),
                     [&](const gpu::GpuProcess& p) { return static_cast<pid_t>(p.pid) == pid; });
}

/// Each holder of `inv` once (by pid, as the scan found it: without the nvml
/// mark build_inventory adds), passed to `keep` with whether NVML lists it on
/// some GPU; `keep` returns what the new scan has of it, or nullopt.
template <typename Keep>
std::vector<proc::Holder> scanned_holders(const Inventory& inv, Keep&& keep) {
  std::map<pid_t, proc::Holder> seen;
  auto add = [&](const proc::Holder& h, bool source_lists_it) {
    // Seen already: only NVML listing it here can change the decision.
    if (seen.contains(h.id.pid) && !source_lists_it) return;
    proc::Holder bare = h;
    bare.found_by.erase(proc::FoundBy::source);
    if (auto kept = keep(std::move(bare), source_lists_it))
      seen.insert_or_assign(h.id.pid, std::move(*kept));
  };
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders) add(gh.holder, listed_by_nvml(view.info, gh.holder.id.pid));
  for (const auto& h : inv.other_holders) add(h, false);
  std::vector<proc::Holder> out;
  for (auto& [pid, h] : seen) out.push_back(std::move(h));
  return out;
}

/// build_inventory again, over the agent's NVML snapshot and baselines and the
/// given scan: the inventory a scan that found `scan` would have built.
Inventory rebuild(const Inventory& inv, proc::ScanResult scan) {
  gpu::GpuSnapshot snapshot;
  snapshot.state = inv.source_state;
  snapshot.problem = inv.source_problem;
  snapshot.driver_version = inv.driver_version;
  snapshot.cuda_version = inv.cuda_version;
  // Recorded baselines stay recorded; estimates are estimated again.
  auto baselines = BaselineStore::in_memory();
  if (gpu::lists_gpus(inv.source_state)) {
    for (const auto& view : inv.gpus) {
      snapshot.gpus.push_back(view.info);
      if (view.baseline.recorded && view.info.memory)
        baselines.observe_idle(view.info.uuid, view.info.memory->total, view.baseline.bytes);
    }
  }
  Inventory out =
      build_inventory(std::move(snapshot), std::move(scan), baselines, inv.host_pid_namespace);
  out.as_root = inv.as_root;
  out.warnings = inv.warnings;
  out.source = inv.source;
  out.agent_pid = inv.agent_pid;
  out.agent_degraded = inv.agent_degraded;
  // "Still being released" rests on a second reading the agent took; the holders
  // dropped have no NVML figure, so no byte count changed and it still holds.
  for (auto& view : out.gpus) {
    auto it = std::find_if(inv.gpus.begin(), inv.gpus.end(),
                           [&](const GpuView& v) { return v.info.id == view.info.id; });
    if (it != inv.gpus.end() && it->unexplained == Unexplained::releasing &&
        view.unattributed_bytes == it->unattributed_bytes) {
      view.unexplained = it->unexplained;
      view.unexplained_detail = it->unexplained_detail;
    }
  }
  return out;
}

// The dead launchers (Inventory::dead_launchers) of groups `out` still shows a holder of,
// among the holders `keeps` accepts.
std::vector<proc::DeadParent> launchers_kept(const std::vector<proc::DeadParent>& launchers,
                                             const Inventory& out,
                                             const std::function<bool(const proc::Holder&)>& keeps) {
  std::vector<proc::DeadParent> kept;
  for (const auto& dead : launchers) {
    bool shown = false;
    for (const auto& view : out.gpus)
      for (const auto& gh : view.holders)
        shown = shown || (gh.holder.pgid == dead.pid && keeps(gh.holder));
    if (shown) kept.push_back(dead);
  }
  return kept;
}

}  // namespace

Inventory redact_for(uid_t uid, const Inventory& inv, OtherUsers others) {
  if (uid == 0) return inv;
  // The scan that user would get: its own holders whole, other users' only
  // where NVML names them, as describe_processes() sees them, and not at all
  // when its /proc hides them (describe_processes() finds no /proc/PID).
  proc::ScanResult scan;
  scan.holders = scanned_holders(inv, [&](proc::Holder h, bool source_lists_it) {
    if (h.uid == uid) return std::optional(std::move(h));
    if (source_lists_it && others == OtherUsers::visible) return std::optional(as_seen_by_others(h));
    return std::optional<proc::Holder>();
  });
  // pid 0 (the whole scan) first, as the scan sorts its problems by pid.
  scan.problems.push_back(
      {0, others == OtherUsers::visible
              ? "processes of other users not inspected (permission denied): the agent answers a "
                "caller that is not root with what that caller's own scan could read; run as root "
                "to see every holder"
              : "processes of other users not shown: your /proc hides them (hidepid), and the "
                "agent answers a caller that is not root with what that caller's own scan could "
                "read; run as root to see every holder"});
  scan.problems.insert(scan.problems.end(), inv.problems.begin(), inv.problems.end());
  scan.processes_scanned = inv.processes_scanned;
  Inventory out = rebuild(inv, std::move(scan));
  out.as_root = false;
  // What a launcher ran is told only to the user whose own workers it led.
  out.dead_launchers = launchers_kept(inv.dead_launchers, out,
                                      [&](const proc::Holder& h) { return h.uid == uid; });
  return out;
}

Inventory without_pids(const Inventory& inv, const std::set<pid_t>& pids) {
  if (pids.empty()) return inv;
  proc::ScanResult scan;
  scan.holders = scanned_holders(inv, [&](proc::Holder h, bool) {
    return pids.contains(h.id.pid) ? std::nullopt : std::optional(std::move(h));
  });
  for (const auto& p : inv.problems)
    if (!pids.contains(p.pid)) scan.problems.push_back(p);
  scan.processes_scanned = inv.processes_scanned;
  Inventory out = rebuild(inv, std::move(scan));
  out.dead_launchers =
      launchers_kept(inv.dead_launchers, out, [](const proc::Holder&) { return true; });
  return out;
}

}  // namespace gpureap::inventory
