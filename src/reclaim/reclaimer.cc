#include "reclaim/reclaimer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "proc/cgroup_fs.h"
#include "proc/proc_parse.h"
#include "proc/process_handle.h"

namespace gpureap::reclaim {
namespace {

std::vector<proc::ProcessId> ids_of(const Plan& plan) {
  std::vector<proc::ProcessId> ids;
  for (const auto& t : plan.targets) ids.push_back(t.id);
  return ids;
}

const inventory::GpuView* find_view(const inventory::Inventory& inv, unsigned index) {
  for (const auto& v : inv.gpus)
    if (v.info.index == index) return &v;
  return nullptr;
}

// True when some killed target's parent is still alive, not init and not one of
// gpureap's own ancestors (the shell waiting for gpureap restarts nothing meanwhile): it
// may start a replacement.
bool parent_may_respawn(const std::map<proc::ProcessId, proc::ProcessId>& parent_of_killed,
                        const std::set<pid_t>& ancestors, const std::string& proc_root) {
  for (const auto& [killed, parent] : parent_of_killed) {
    if (parent.pid <= 1 || ancestors.contains(parent.pid)) continue;
    auto now = proc::read_process_id(parent.pid, proc_root);
    if (now && *now == parent) return true;
  }
  return false;
}

// What stops a respawning parent, for the report: its service or container's own
// command, else gpureap with the opt-in.
std::string stop_hint(const proc::ProcessEntry& parent, const std::optional<std::string>& protection,
                      const std::vector<unsigned>& gpus, const std::string& proc_root) {
  std::string hint = proc::container_hint(proc::cgroup2_path_of(parent.id.pid, proc_root));
  std::string gpu_list;
  for (unsigned g : gpus) gpu_list += (gpu_list.empty() ? "" : ",") + std::to_string(g);
  if (hint.starts_with("systemd:") && hint.ends_with(".service") && !protection)
    return "systemctl stop " + hint.substr(8);
  if (hint.starts_with("docker:")) return "docker stop " + hint.substr(7);
  if (hint.starts_with("podman:")) return "podman stop " + hint.substr(7);
  if (hint.starts_with("k8s-pod:")) return "delete its pod (pod uid " + hint.substr(8) + ")";
  if (protection)
    return "it is protected (" + *protection +
           "): stop the job it runs with that job's own tool, or name it with --pid";
  return fmt::format("gpureap free --gpu {} --stop-respawners (or: kill {})", gpu_list,
                     parent.id.pid);
}

// True when a live parent of a killed holder has a child that did not exist when the
// round began and that bears a killed holder's name: a replacement on its way to the GPU.
// Noted once in the report.
bool replacement_starting(const CallerContext& caller,
                          const std::set<proc::ProcessId>& existed_before_kill,
                          const std::map<proc::ProcessId, std::set<std::string>>& killed_comms,
                          ReclaimReport& report) {
  for (const auto& p : caller.table) {
    if (existed_before_kill.contains(p.id)) continue;
    for (const auto& [parent, comms] : killed_comms) {
      if (p.ppid != parent.pid || !comms.contains(p.comm)) continue;
      std::string note = fmt::format(
          "pid {} ({}) was started by pid {} after its holder was killed: watching until it "
          "takes the GPU or exits (bounded by --timeout)",
          p.id.pid, p.comm, parent.pid);
      if (std::find(report.notes.begin(), report.notes.end(), note) == report.notes.end())
        report.notes.push_back(note);
      return true;
    }
  }
  return false;
}

// True when every selected GPU not yet freed holds memory that no live target explains
// (no signalled process still uses it, NVML lists no pid we cannot see) and whose reading
// has not fallen for `after`: waiting longer only delays the classification (D16).
bool all_stalled(const ReclaimReport& report, const inventory::Inventory& latest,
                 const std::set<proc::ProcessId>& signalled,
                 std::map<unsigned, std::pair<std::uint64_t, Clock::time_point>>& lowest,
                 std::chrono::milliseconds after) {
  const auto now = Clock::now();
  bool all = true, any_pending = false;
  for (const auto& g : report.gpus) {
    if (g.seconds_to_free || !g.measured) continue;
    any_pending = true;
    const auto* view = find_view(latest, g.index);
    if (!view || !view->info.memory) return false;
    auto [it, fresh] = lowest.try_emplace(g.index, view->used(), now);
    if (!fresh && view->used() + (1u << 20) < it->second.first) it->second = {view->used(), now};
    bool target_lives = std::any_of(view->holders.begin(), view->holders.end(),
                                    [&](const inventory::GpuHolder& gh) {
                                      return gh.uses_gpu && signalled.contains(gh.holder.id);
                                    });
    if (target_lives || !view->nvml_unseen.empty() || now - it->second.second < after)
      all = false;
  }
  return any_pending && all;
}

}  // namespace

void note_respawners(ReclaimReport& report, const inventory::Inventory& latest,
                     const CallerContext& caller,
                     const std::map<proc::ProcessId, proc::ProcessId>& parent_of_killed,
                     const std::set<proc::ProcessId>& signalled,
                     std::map<proc::ProcessId, int>& respawns, Plan& next,
                     const ReclaimOptions& options) {
  std::set<proc::ProcessId> seen;  // a holder of several GPUs counts once
  for (const auto& view : latest.gpus) {
    if (std::find(options.selection.gpus.begin(), options.selection.gpus.end(),
                  view.info.index) == options.selection.gpus.end())
      continue;
    for (const auto& gh : view.holders) {
      const proc::Holder& h = gh.holder;
      if (!gh.uses_gpu || signalled.contains(h.id) || !seen.insert(h.id).second) continue;
      for (const auto& [killed, parent] : parent_of_killed) {
        if (parent.pid != h.ppid || parent.pid <= 1) continue;
        int n = ++respawns[parent];
        auto pe = std::find_if(caller.table.begin(), caller.table.end(),
                               [&](const proc::ProcessEntry& p) { return p.id == parent; });
        if (pe == caller.table.end()) break;  // the parent is gone meanwhile
        bool named = std::find(options.selection.pids.begin(), options.selection.pids.end(),
                               parent.pid) != options.selection.pids.end();
        bool included = !signalled.contains(parent) && (named || options.stop_respawners) &&
                        include_respawner(next, *pe, options.selection, caller, n,
                                          options.proc_root);
        auto r = std::find_if(report.respawners.begin(), report.respawners.end(),
                              [&](const Respawner& x) { return x.id == parent; });
        if (r == report.respawners.end()) {
          auto protection = protection_reason(pe->id.pid, pe->comm, pe->kernel_thread, caller,
                                              named);
          report.respawners.push_back({parent, pe->comm, n, included,
                                       stop_hint(*pe, protection, options.selection.gpus,
                                                 options.proc_root)});
        } else {
          r->respawns = n;
          r->included = r->included || included;
        }
        break;
      }
    }
  }
}

bool ReclaimReport::all_freed() const {
  return !gpus.empty() &&
         std::all_of(gpus.begin(), gpus.end(), [](const GpuOutcome& g) { return g.freed; });
}

ReclaimReport reclaim(ReclaimContext ctx, const inventory::Inventory& initial, Plan plan,
                      const ReclaimOptions& options, const ProgressFn& progress) {
  ReclaimReport report;
  const auto t0 = Clock::now();
  const auto deadline = t0 + options.timeout;
  auto seconds_since_t0 = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // What "freed" means for each selected GPU: back at its baseline, within tolerance.
  std::set<proc::ProcessId> left_alone;  // skipped by the selection, not for protection
  for (const auto& s : plan.skipped)
    if (s.kind != SkipKind::protected_process) left_alone.insert(s.id);
  std::vector<ReleaseTarget> release_targets;
  for (unsigned idx : options.selection.gpus) {
    const auto* view = find_view(initial, idx);
    if (!view) continue;
    if (!view->info.memory) {
      // A selected GPU that NVML cannot read is reported as such, never as freed.
      GpuOutcome g;
      g.index = idx;
      g.uuid = view->info.uuid;
      g.measured = false;
      report.gpus.push_back(g);
      continue;
    }
    GpuOutcome g;
    g.index = idx;
    g.uuid = view->info.uuid;
    g.total = view->info.memory->total;
    g.before = g.after = view->used();
    g.baseline = view->baseline.bytes;
    // Holders left alone (not selected, protected, other users') keep their memory: a
    // narrowed free is done when its own targets' memory is gone (D9). Where NVML gives
    // no per-process figure, nothing can be subtracted.
    // Only what the selection itself leaves alone is subtracted: holders it does not
    // match, and other users' (without root). A protected holder's memory is still
    // held (naming it with --pid frees it), and a free with no target at all has no
    // memory of its own to wait for, so what others hold stays "still held" (exit 1).
    if (!plan.targets.empty())
      for (const auto& gh : view->holders)
        if (gh.uses_gpu && left_alone.contains(gh.holder.id))
          g.left_alone_bytes += gh.gpu_bytes.value_or(0);
    g.threshold = view->baseline.bytes + inventory::freed_tolerance(view->info.memory->total) +
                  g.left_alone_bytes;
    g.freed = view->used() <= g.threshold && plan.targets.empty();
    report.gpus.push_back(g);
    release_targets.push_back({idx, g.threshold});
  }

  std::set<proc::ProcessId> signalled;
  std::map<proc::ProcessId, proc::ProcessId> parent_of_killed;  // target -> its parent
  std::map<proc::ProcessId, int> respawns;                      // parent -> new holders seen
  std::vector<proc::ProcessId> survivors;
  CallerContext caller = CallerContext::current(options.proc_root);
  inventory::Inventory latest = initial;
  int round = 0;
  // Per GPU: the lowest reading so far and when it was taken, for the stall rule (D16).
  std::map<unsigned, std::pair<std::uint64_t, Clock::time_point>> lowest;
  // First "freed" with a live parent; `settling` says whether it is set (a plain pair
  // rather than std::optional: g++ 12 -O2 warns maybe-uninitialized on the optional).
  Clock::time_point settle_from{};
  bool settling = false;
  // For a replacement in the making: every process that existed when a round began, and
  // the comms of the holders each parent lost.
  std::set<proc::ProcessId> existed_before_kill;
  std::map<proc::ProcessId, std::set<std::string>> killed_comms;

  while (round < options.max_rounds && !plan.targets.empty()) {
    ++round;
    report.rounds.push_back(plan);
    for (const auto& p : caller.table) existed_before_kill.insert(p.id);
    for (const auto& t : plan.targets) {
      signalled.insert(t.id);
      auto e = std::find_if(caller.table.begin(), caller.table.end(),
                            [&](const proc::ProcessEntry& p) { return p.id == t.id; });
      if (e != caller.table.end())
        for (const auto& p : caller.table)
          if (p.id.pid == e->ppid) {
            parent_of_killed[t.id] = p.id;
            killed_comms[p.id].insert(t.comm);
          }
    }
    // 1. Signal: SIGTERM -> grace -> SIGKILL, each through a verified pidfd.
    EscalationResult esc = terminate(ids_of(plan), options.escalation, t0);
    report.actions.insert(report.actions.end(), esc.actions.begin(), esc.actions.end());
    report.notes.insert(report.notes.end(), esc.notes.begin(), esc.notes.end());
    survivors = esc.survivors;
    if (esc.interrupted) {
      report.interrupted = true;
      break;
    }

    // 2. Watch memory fall; re-scan now and then for holders that appeared.
    plan = Plan{};
    while (Clock::now() < deadline) {
      auto slice_end = std::min(deadline, Clock::now() + options.rescan_every);
      auto released = wait_for_release(ctx.gpus, release_targets, slice_end, t0, ctx.interrupted,
                                       [&](const std::vector<ReleaseState>& states) {
                                         for (const auto& s : states)
                                           for (auto& g : report.gpus)
                                             if (g.index == s.index) {
                                               if (s.used) g.after = *s.used;
                                               if (s.freed_at && !g.seconds_to_free)
                                                 g.seconds_to_free = s.freed_at;
                                             }
                                         if (progress) progress(report.gpus);
                                       });
      if (!released.nvml_error.empty()) report.nvml_error = released.nvml_error;
      if (released.interrupted) report.interrupted = true;
      if (released.interrupted || !released.nvml_error.empty()) break;
      if (released.all_freed) {
        // Freed, but a live parent of a killed holder may be restarting it right now
        // (a supervisor, a retry loop; a torch worker needs seconds to take the GPU
        // again): keep watching for --settle. Orphans cost no extra time.
        if (!parent_may_respawn(parent_of_killed, caller.ancestors, options.proc_root)) break;
        const auto now = Clock::now();
        if (!settling) settle_from = now;
        settling = true;
        report.settled_seconds = std::chrono::duration<double>(now - settle_from).count();
        // Past --settle, keep watching only while a replacement is visibly starting: a new
        // child of such a parent with the killed holder's name (a worker importing torch
        // has no GPU yet). --timeout still bounds the wait.
        if (options.settle.count() == 0 ||
            (now - settle_from >= options.settle &&
             !replacement_starting(caller, existed_before_kill, killed_comms, report)))
          break;
        std::this_thread::sleep_for(
            std::min<Clock::duration>(options.rescan_every, options.settle - (now - settle_from)));
      } else {
        settling = false;
      }

      caller = CallerContext::current(options.proc_root);
      latest =
          inventory::collect_inventory(ctx.gpus, ctx.devices, ctx.baselines,
                                       {options.proc_root, std::chrono::milliseconds(2000), {}});
      Plan next = make_plan(latest, options.selection, caller);
      std::erase_if(next.targets, [&](const Target& t) { return signalled.contains(t.id); });
      // A new holder of a selected GPU whose parent also parented a killed one: that
      // parent respawns. It is reported with the command that stops it, and signalled
      // only when the user named it (--pid) or opted in (--stop-respawners). The new
      // holder itself is a target only if it matches the selection on its own (above).
      note_respawners(report, latest, caller, parent_of_killed, signalled, respawns, next,
                      options);
      if (!next.targets.empty()) {
        // Memory freed earlier is held again by the new holders' GPUs.
        for (const auto& t : next.targets)
          for (unsigned g : t.gpus)
            for (auto& out : report.gpus)
              if (out.index == g) out.seconds_to_free.reset();
        plan = std::move(next);
        settling = false;  // the next release is watched afresh
        break;  // next round
      }
      plan.skipped = next.skipped;  // freed: the settle window above decides when to stop
      if (all_stalled(report, latest, signalled, lowest, options.stalled_after)) break;
    }
    if (report.interrupted || !report.nvml_error.empty()) break;
    if (plan.targets.empty()) break;
  }

  for (auto& g : report.gpus) {
    g.freed = g.seconds_to_free.has_value() || (g.freed && round == 0);
    // Every holder of this GPU is gone and its memory settled: that reading is
    // the GPU's idle baseline (the store refuses implausibly high values).
    if (g.freed && round > 0 && plan.skipped.empty())
      ctx.baselines.observe_idle(g.uuid, g.total, g.after);
  }

  // 3. Classify what is still held, from a fresh look.
  bool any_held = std::any_of(report.gpus.begin(), report.gpus.end(),
                              [](const GpuOutcome& g) { return !g.freed; });
  if (any_held && !report.interrupted) {
    latest = inventory::collect_inventory(ctx.gpus, ctx.devices, ctx.baselines,
                                          {options.proc_root, std::chrono::milliseconds(2000), {}});
    Plan last = make_plan(latest, options.selection, CallerContext::current(options.proc_root));
    for (auto& g : report.gpus) {
      const auto* view = find_view(latest, g.index);
      if (g.freed) continue;
      if (!view || !view->info.memory) {
        // Without NVML, "freed" cannot be proven: say so rather than guess.
        g.measured = false;
        std::string why = view && !view->info.problem.empty()
                              ? "NVML cannot read this GPU: " + view->info.problem
                              : "NVML stopped answering while verifying: " +
                                    (report.nvml_error.empty() ? latest.nvml_problem
                                                               : report.nvml_error);
        report.leftovers.push_back(
            Leftover{g.index,
                     "nvml_failed",
                     {},
                     {why},
                     "the signalled processes are listed under actions; check the GPU with "
                     "nvidia-smi, and dmesg for Xid errors"});
        continue;
      }
      g.after = view->used();
      if (view->at_baseline() && view->holders.empty()) {
        g.freed = true;
        if (!g.seconds_to_free) g.seconds_to_free = seconds_since_t0();
        continue;
      }
      auto found = classify_leftovers({view, &last, survivors, g.threshold, options.proc_root});
      report.leftovers.insert(report.leftovers.end(), found.begin(), found.end());
    }
    // 4. Optional reset of GPUs whose memory only the driver holds.
    if (options.reset) {
      for (const auto& l : report.leftovers) {
        if (l.cls != "driver_held") continue;
        const auto* view = find_view(latest, l.gpu);
        if (!view) continue;
        report.resets.push_back(reset_gpu(*view, latest, ctx.gpus));
        if (!report.resets.back().succeeded) continue;
        auto reading = ctx.gpus.memory({l.gpu}, std::chrono::milliseconds(2000));
        for (auto& g : report.gpus)
          if (g.index == l.gpu && reading && !reading->empty() && reading->front().used) {
            g.after = *reading->front().used;
            g.freed = g.after <= g.threshold;
            if (g.freed) g.seconds_to_free = seconds_since_t0();
          }
      }
      std::erase_if(report.leftovers, [&](const Leftover& l) {
        return std::any_of(report.gpus.begin(), report.gpus.end(),
                           [&](const GpuOutcome& g) { return g.index == l.gpu && g.freed; });
      });
    }
  }
  // Parents of killed holders still alive at the verdict: they could restart what was
  // killed. Named with the command that stops them, so "freed" is not taken as "stays freed".
  if (!report.interrupted) {
    auto now_ctx = CallerContext::current(options.proc_root);
    for (const auto& [killed, parent] : parent_of_killed) {
      if (parent.pid <= 1 || signalled.contains(parent) || now_ctx.ancestors.contains(parent.pid))
        continue;
      if (std::any_of(report.respawners.begin(), report.respawners.end(),
                      [&](const Respawner& r) { return r.id == parent; }))
        continue;
      auto pe = std::find_if(now_ctx.table.begin(), now_ctx.table.end(),
                             [&](const proc::ProcessEntry& p) { return p.id == parent; });
      if (pe == now_ctx.table.end()) continue;
      bool named = std::find(options.selection.pids.begin(), options.selection.pids.end(),
                             parent.pid) != options.selection.pids.end();
      auto protection = protection_reason(pe->id.pid, pe->comm, pe->kernel_thread, now_ctx, named);
      report.respawners.push_back(
          {parent, pe->comm, 0, false,
           stop_hint(*pe, protection, options.selection.gpus, options.proc_root)});
    }
  }
  report.seconds = seconds_since_t0();
  return report;
}

}  // namespace gpureap::reclaim
