#include "reclaim/reclaimer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpu/gpu_select.h"
#include "gpu/mig.h"
#include "gpu/vendor.h"
#include "inventory/release_model.h"
#include "proc/cgroup_fs.h"
#include "proc/engine_role.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_handle.h"
#include "reclaim/fresh_look.h"
#include "util/units.h"

namespace gpureap::reclaim {
namespace {

using TimePoint = util::Clock::time_point;

const inventory::GpuView* find_view(const inventory::Inventory& inv, gpu::DeviceId id) {
  for (const auto& v : inv.gpus)
    if (v.info.id == id) return &v;
  return nullptr;
}

// What stops a respawning parent, for the report: its service or container's own
// command, else gpureap with the opt-in.
std::string stop_hint(const proc::ProcessEntry& parent,
                      const std::optional<std::string>& protection,
                      const std::vector<gpu::DeviceId>& gpus, const std::string& proc_root) {
  std::string hint = proc::container_hint(proc::cgroup2_path_of(parent.id.pid, proc_root));
  // A protected supervisor's own unit is not the thing to stop (it runs other jobs too).
  const bool unit = hint.starts_with("systemd:");
  if (auto stop = proc::container_stop_command(hint); stop && !(unit && protection)) return *stop;
  if (protection)
    return "it is protected (" + *protection +
           "): stop the job it runs with that job's own tool, or name it with --pid";
  // What the parent is says how it stops (proc/engine_role.h): torchrun's elastic agent
  // restarts failed workers up to --max-restarts and ends them itself on SIGTERM; Ray's
  // raylet restarts its workers; an MPI daemon belongs to its job's mpirun.
  const auto engine = proc::recognise_engine_cmdline(
      proc::read_small_file(fmt::format("{}/{}/cmdline", proc_root, parent.id.pid)), parent.comm);
  switch (engine.role) {
    case proc::EngineRole::elastic_agent:
      return fmt::format(
          "it is torchrun's elastic agent, which restarts failed workers up to --max-restarts: "
          "stop it and its workers with kill {} (SIGTERM), or gpureap free --gpu {} "
          "--stop-respawners",
          parent.id.pid, gpu::device_list(gpus));
    case proc::EngineRole::ray_raylet:
      return "it is Ray's raylet, which restarts its workers: stop the Ray node with `ray stop` "
             "(or end the job that uses it)";
    case proc::EngineRole::mpi_daemon:
      return "it is an MPI daemon of a running job: end that job with its own mpirun/scheduler";
    default:
      break;
  }
  return fmt::format("gpureap free --gpu {} --stop-respawners (or: kill {})",
                     gpu::device_list(gpus), parent.id.pid);
}

// Without NVML, "freed" cannot be proven: say so rather than guess.
Leftover source_failed(gpu::DeviceId gpu, const inventory::GpuView* view,
                     const std::string& source_error, const inventory::Inventory& latest) {
  // The vendor's words (gpu/vendor.h): NVML and nvidia-smi, or amdgpu's sysfs and amd-smi.
  const gpu::Vendor vendor = gpu::vendor_of(view ? view->info.uuid : std::string());
  const std::string driver(gpu::driver_interface(vendor));
  std::string why = view && !view->info.problem.empty()
                        ? driver + " cannot read this GPU: " + view->info.problem
                        : driver + " stopped answering while verifying: " +
                              (source_error.empty() ? latest.source_problem : source_error);
  return Leftover{gpu,
                  LeftoverClass::source_failed,
                  {},
                  {why},
                  fmt::format("the signalled processes are listed under actions; check the GPU "
                              "with {}, and dmesg for {}",
                              gpu::smi_command(vendor), gpu::driver_errors(vendor))};
}

// Until when the release is watched: --timeout from the start, and with a global
// deadline, no later than the time kept for the last reading before it.
TimePoint watch_deadline(TimePoint t0, const ReclaimOptions& options) {
  TimePoint end = t0 + options.timeout;
  if (options.deadline) end = std::min(end, *options.deadline - kClassifyReserve);
  return end;
}

// One free's engine state; each member function is one named step of a round
// (escalate -> watch release -> rescan) or of the verdict (judge -> classify -> reset).
class Reclaim {
 public:
  Reclaim(inventory::Node& node, ProcessControl& control, const ReclaimOptions& options,
          const ProgressFn& progress, CallerContext caller)
      : node_(node),
        control_(control),
        options_(options),
        progress_(progress),
        clock_(node.clock()),
        t0_(clock_.now()),
        deadline_(watch_deadline(t0_, options)),
        caller_(std::move(caller)) {}

  ReclaimReport run(const inventory::Inventory& initial, Plan plan) {
    latest_ = initial;
    set_thresholds(initial, plan);
    while (round_ < options_.max_rounds && !plan.targets.empty() &&
           ((round_ == 0 && !options_.deadline) || clock_.now() < deadline_)) {
      ++round_;
      report_.rounds.push_back(plan);
      if (!escalate(plan)) break;
      plan = watch_release();
      step("release");
      if (report_.interrupted || !report_.source_error.empty()) break;
    }
    // Nothing to signal, but memory of holders gone before this free is still coming
    // back (they were killed by hand, or exited): it is waited for as a signalled
    // holder's would be, within --timeout, instead of being called held.
    if (round_ == 0 && releasing_selected()) (void)watch_release();
    judge(plan);
    // The verdict is a measurement at the end: one last look, freed or not (a GPU that
    // turned ghost as its holder died, busy with no process, is not freed).
    if (!report_.interrupted) {
      classify();
      step("verdict look");
      // A reset (nvidia-smi, bounded by its own timeout) only with time left.
      if (options_.reset && !past_deadline() && !report_.leftovers.empty()) reset_driver_held();
    }
    if (!report_.interrupted) note_live_parents();
    await_dying();
    report_.seconds = since_t0();
    step("done");
    return std::move(report_);
  }

 private:
  double since_t0() const { return std::chrono::duration<double>(clock_.now() - t0_).count(); }

  // Holders whose memory was back while they were still exiting (Outcome::exiting) were
  // not waited for before the verdict and its last look; free ends after their exits, so
  // that nothing it signalled is left when it returns (NVML lists such a worker until its
  // exit ends, and a script may look at once). Bounded like the wait after SIGKILL.
  void await_dying() {
    if (dying_.empty() || report_.interrupted) return;
    std::vector<ControlledProcess*> live;
    for (const auto& p : dying_) live.push_back(p.get());
    const auto left = control_.wait_for_exit(live, clock_.now() + options_.escalation.kill_wait);
    for (std::size_t i : left)
      report_.notes.push_back(fmt::format(
          "pid {} was still inside its exit {:.1f} s after its memory came back",
          live[i]->id().pid, std::chrono::duration<double>(options_.escalation.kill_wait).count()));
    step("exits");
  }
  void step(const char* name) { report_.steps.emplace_back(name, since_t0()); }

  // With a global deadline, the grace and the wait after SIGKILL share the time left
  // (half each at most): a late round still sends both signals, with shorter waits.
  EscalationOptions escalation_options() const {
    EscalationOptions esc = options_.escalation;
    if (!options_.deadline) return esc;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(deadline_ - clock_.now(), util::Clock::duration::zero()));
    esc.grace = std::min(esc.grace, left / 2);
    esc.kill_wait = std::min(esc.kill_wait, left - esc.grace);
    return esc;
  }

  // NVML's deadline for a look: the usual one, cut to the time left before the global
  // deadline (at least 100 ms, so a reading can still be taken).
  // Each look lists /proc once, for its holders and for the plan's process table
  // (CallerContext::of): one listing per look, not one per question.
  inventory::CollectOptions look_options() const {
    inventory::CollectOptions look;
    look.process_table = true;
    return look.within(options_.deadline, clock_.now());
  }

  bool past_deadline() const { return options_.deadline && clock_.now() >= *options_.deadline; }

  // What "freed" means for each selected GPU: back at its baseline, within tolerance.
  // A GPU the first look could not read (the agent's NVML down, a transient error) is
  // measured directly now, before any signal (W2-23); one still unreadable is measured
  // as soon as a re-scan can (measure_late) and is never freed before.
  void set_thresholds(const inventory::Inventory& initial, const Plan& plan) {
    for (const auto& s : plan.skipped)
      if (s.kind != SkipKind::protected_process) left_alone_.insert(s.id);
    for (const auto& t : plan.targets) targeted_.insert(t.id);
    std::optional<inventory::Inventory> direct;
    for (gpu::DeviceId idx : options_.selection.gpus) {
      const auto* view = find_view(initial, idx);
      if (!view) continue;
      if (!view->info.memory) {
        if (!direct) direct = node_.look(look_options());
        if (const auto* read = find_view(*direct, idx); read && read->info.memory) view = read;
      }
      // A selected GPU that NVML cannot read is reported as such, never as freed.
      report_.gpus.push_back(measure(*view, plan.targets.empty()));
    }
    if (initial.source != "scan" && !plan.targets.empty()) read_before_signals();
  }

  // The "before" of each GPU is read before the first signal (W2-23). An agent's answer
  // may carry a figure older than the holders it lists (NVML was read before their
  // allocation, or while it was recovering): one direct reading now replaces it. When
  // that reading fails, the look's figure stays: it is still from before any signal.
  void read_before_signals() {
    std::vector<gpu::DeviceId> ids;
    for (const auto& g : report_.gpus)
      if (g.measured) ids.push_back(g.gpu);
    if (ids.empty()) return;
    auto reading = node_.gpus().memory(ids, std::chrono::milliseconds(2000));
    if (!reading) return;
    for (const auto& r : *reading)
      for (auto& g : report_.gpus)
        if (g.gpu == r.id && r.used && r.problem.empty()) {
          g.before = *r.used;
          g.used = r.used;
        }
  }

  // What "freed" means for the GPU of `view`.
  GpuRelease measure(const inventory::GpuView& view, bool no_targets) {
    // Only what the selection itself leaves alone is subtracted (D9): holders it does
    // not match, and other users' (without root). A protected holder's memory is still
    // held (naming it with --pid frees it), and a free with no target at all has no
    // memory of its own to wait for, so what others hold stays "still held" (exit 1).
    // Where NVML gives no per-process figure, nothing can be subtracted.
    std::uint64_t left_alone = 0;
    if (!no_targets) {
      for (const auto& gh : view.holders)
        if (gh.uses_gpu && left_alone_.contains(gh.holder.id))
          left_alone += gh.gpu_bytes.value_or(0);
      // A compute instance's memory figures are its GPU instance's (gpu/mig.h): what the
      // holders of a sibling compute instance keep there stays unless they are targets.
      for (const auto& other : latest_.gpus)
        if (gpu::shares_memory(view.info, other.info))
          for (const auto& gh : other.holders)
            if (gh.uses_gpu && !targeted_.contains(gh.holder.id))
              left_alone += gh.gpu_bytes.value_or(0);
    }
    GpuRelease g = release_of(view, left_alone);
    if (!g.measured) return g;
    // The baseline this free measures against, estimated once: later looks (and the
    // leftovers' evidence) read the same figure.
    if (!g.baseline_recorded) node_.baselines().keep_estimate(g.uuid, g.baseline);
    g.used = g.before;
    g.freed = g.before <= g.threshold && no_targets;
    return g;
  }

  // A selected GPU unreadable until now that the latest look could read: from here on
  // it is waited for like any other. Its "before" is this first reading, taken after
  // the signals, and the report says so.
  void measure_late() {
    for (auto& g : report_.gpus) {
      if (g.measured) continue;
      const auto* view = find_view(latest_, g.gpu);
      if (!view || !view->info.memory) continue;
      g = measure(*view, false);
      g.before_read = false;  // a reading after the signals is no "before" (W2-23)
      note_once(fmt::format(
          "GPU {} could not be read before the signals; first read at +{:.3f} s ({} used)", g.gpu,
          since_t0(), format_bytes(view->used())));
    }
  }

  // Step 1, escalate: confirm every target on a fresh look (fresh_look.h), then
  // SIGTERM -> grace -> SIGKILL, each through a verified handle. False when interrupted.
  bool escalate(const Plan& planned) {
    Plan plan = confirm(planned);
    step("confirmed");
    for (const auto& p : caller_.table) existed_before_kill_.insert(p.id);
    for (const auto& t : plan.targets) {
      signalled_.insert(t.id);
      auto e = proc::find_process(caller_.table, t.id);
      if (!e) continue;
      if (auto p = proc::find_process(caller_.table, e->ppid)) {
        parent_of_killed_[t.id] = p->id;
        killed_comms_[p->id].insert(t.comm);
      }
      note_restarting_unit(*e);
      watch_children_of_respawner(*e, plan);
    }
    note_released_pids(plan);
    EscalationEnv env{control_, clock_, node_.interrupt_flag(), t0_};
    // A holder whose memory is back while the kernel finishes its exit is waited for no
    // more (escalation.h): the release wait's own reading decides "back".
    env.released = [this] {
      return released_in_one_reading(node_.gpus(), report_.gpus, since_t0(),
                                     std::chrono::milliseconds(200), clock_, &node_.releases());
    };
    EscalationResult esc = terminate(plan.targets, escalation_options(), env);
    step("signals");
    note_phases(plan, esc.actions);
    report_.actions.insert(report_.actions.end(), esc.actions.begin(), esc.actions.end());
    report_.notes.insert(report_.notes.end(), esc.notes.begin(), esc.notes.end());
    survivors_ = esc.survivors;
    for (auto& p : esc.exiting) dying_.push_back(std::move(p));
    if (esc.interrupted) report_.interrupted = true;
    return !esc.interrupted;
  }

  // Each GPU's holders signalled this round, for the reading in which NVML lists none of
  // them (taken during the escalation too).
  void note_released_pids(const Plan& plan) {
    for (auto& g : report_.gpus)
      for (const auto& t : plan.targets)
        if (std::find(t.gpus.begin(), t.gpus.end(), g.gpu) != t.gpus.end())
          g.released_pids.push_back(static_cast<std::uint32_t>(t.id.pid));
  }

  // The release's first phase per GPU (release_wait.h, ReleasePhases): when its holders
  // were first signalled and when the last of them exited. One still exiting when free
  // stopped waiting (Outcome::exiting) leaves the last exit unseen.
  void note_phases(const Plan& plan, const std::vector<Action>& actions) {
    for (auto& g : report_.gpus) {
      bool exit_unseen = false;
      for (const auto& t : plan.targets) {
        if (std::find(t.gpus.begin(), t.gpus.end(), g.gpu) == t.gpus.end()) continue;
        for (const auto& a : actions) {
          if (a.id != t.id || a.via.empty()) continue;
          if (!g.signalled_at || a.sent_at < *g.signalled_at) g.signalled_at = a.sent_at;
          if (a.exited_at && (!g.exited_at || *a.exited_at > *g.exited_at))
            g.exited_at = a.exited_at;
          exit_unseen |= a.outcome == Outcome::exiting;
        }
      }
      if (exit_unseen) g.exited_at.reset();
    }
  }

  // Act only on a fresh look (W2-20): the plan may come from the agent's answer or from
  // a look taken before the operator said yes. A direct look now (memory is not re-read,
  // ghosts not sampled: only who holds what matters) confirms each target; the others
  // are reported as not signalled, with why, and stay candidates of later rounds.
  Plan confirm(const Plan& planned) {
    inventory::CollectOptions look = look_options();
    look.reread_unexplained = false;
    look.sample_busy = false;
    inventory::Inventory fresh = node_.look(look);
    CallerContext now = CallerContext::of(fresh, node_.proc_root());
    Confirmation c = confirm_targets(planned, caller_.table, fresh, options_.selection, now);
    for (const auto& u : c.refused) report_.actions.push_back(not_signalled_action(u, since_t0()));
    caller_ = std::move(now);
    latest_ = std::move(fresh);
    return std::move(c.plan);
  }

  // A respawning parent killed (--stop-respawners, --pid) may have forked a child that
  // has not taken the GPU yet: it outlives its parent and takes the GPU after the
  // verdict. Its live children that are not targets themselves are watched as a live
  // parent is (keep_settling).
  void watch_children_of_respawner(const proc::ProcessEntry& target, const Plan& plan) {
    if (std::none_of(report_.respawners.begin(), report_.respawners.end(),
                     [&](const Respawner& r) { return r.id == target.id; }))
      return;
    // A child it forks between this table and its death (its last worker's exit races
    // our signal) is in no table, and re-parented by the time we look: its process group
    // names it (note_late_children).
    KilledRespawner killed{target.id, target.pgid, {}};
    for (const auto& p : caller_.table) {
      if (p.pgid == target.pgid) killed.known.insert(p.id);
      if (p.ppid == target.id.pid && !plan.contains(p.id) && !signalled_.contains(p.id))
        children_of_killed_respawner_[p.id] = target.id;
    }
    if (target.pgid > 0) killed_respawners_.push_back(std::move(killed));
  }

  // A killed target that is a system service's main process, or whose parent is (its
  // parent is pid 1), comes back when systemd restarts the unit, unless Restart=no.
  // systemd is asked once per unit; no answer (no systemd, a timeout) is no claim.
  void note_restarting_unit(const proc::ProcessEntry& target) {
    const proc::ProcessEntry* service_main =
        target.ppid == 1 ? &target : proc::find_process(caller_.table, target.ppid);
    if (!service_main || service_main->ppid != 1 || !options_.restart_policy) return;
    std::string unit =
        system_service_of(proc::cgroup2_path_of(service_main->id.pid, node_.proc_root()));
    if (unit.empty() || !asked_units_.insert(unit).second) return;
    auto policy = options_.restart_policy(unit);
    if (policy && *policy != "no")
      restarting_units_.push_back({service_main->id, service_main->comm, 0, false,
                                   "systemctl stop " + unit, unit, *policy});
  }

  // Step 2, watch release: memory falls; re-scan now and then for holders that
  // appeared. Returns the next round's plan (no targets: this was the last round;
  // its skipped holders are the latest re-scan's).
  Plan watch_release() {
    Plan last;
    while (clock_.now() < deadline_) {
      if (!watch_slice()) break;
      Plan next = rescan();
      measure_late();
      if (!next.targets.empty()) {
        // Memory freed earlier is held again by the new holders' GPUs.
        for (const auto& t : next.targets)
          for (gpu::DeviceId idx : t.gpus)
            for (auto& g : report_.gpus)
              if (g.gpu == idx) g.freed_at.reset();
        settling_ = false;  // the next release is watched afresh
        return next;
      }
      last.skipped = std::move(next.skipped);  // freed: the settle window decides when to stop
      if (all_stalled()) break;
    }
    return last;
  }

  // One slice of the release wait (until the next re-scan). False when the watch
  // is over: NVML failed, Ctrl-C, or freed and settled.
  bool watch_slice() {
    auto slice_end = std::min(deadline_, clock_.now() + options_.rescan_every);
    auto released = wait_for_release(node_.gpus(), report_.gpus, slice_end, t0_,
                                     node_.interrupt_flag(), progress_, clock_, &node_.releases());
    report_.gpus = std::move(released.gpus);
    if (!released.source_error.empty()) report_.source_error = released.source_error;
    if (released.interrupted) report_.interrupted = true;
    if (released.interrupted || !released.source_error.empty()) return false;
    if (released.all_freed) return keep_settling();
    settling_ = false;
    return true;
  }

  // Freed, but a live parent of a killed holder may be restarting it right now (a
  // supervisor, a retry loop; a torch worker needs seconds to take the GPU again):
  // keep watching for --settle. Orphans cost no extra time. Past --settle, keep
  // watching only while a replacement is visibly starting (a new child of such a
  // parent with the killed holder's name: a worker importing torch has no GPU yet).
  // --timeout still bounds the wait. False when the verdict is due.
  bool keep_settling() {
    note_late_children();
    if (!parent_may_respawn()) return false;
    const auto now = clock_.now();
    if (!settling_) settle_from_ = now;
    settling_ = true;
    report_.settled_seconds = std::chrono::duration<double>(now - settle_from_).count();
    if (options_.settle.count() == 0 ||
        (now - settle_from_ >= options_.settle && !replacement_starting()))
      return false;
    // Past --settle (a replacement starting), the next look is a rescan period away:
    // what is left of --settle is then negative, and sleeping for it was a hot loop of
    // full looks until the replacement took the GPU.
    const util::Clock::duration left = options_.settle - (now - settle_from_);
    clock_.sleep_for(left > util::Clock::duration::zero()
                         ? std::min<util::Clock::duration>(options_.rescan_every, left)
                         : util::Clock::duration(options_.rescan_every));
    return true;
  }

  // Step 3, rescan: a fresh look. New holders of a selected GPU that match the
  // selection by themselves are the next round's targets; a parent that respawns
  // them is noted (note_respawners).
  Plan rescan() {
    latest_ = node_.look(look_options());
    caller_ = CallerContext::of(latest_, node_.proc_root());
    Plan next = make_plan(latest_, options_.selection, caller_);
    std::erase_if(next.targets, [&](const Target& t) { return signalled_.contains(t.id); });
    note_respawners(next);
    return next;
  }

  // Processes of a killed respawner's group that no earlier table had: children it forked
  // as it died. Watched like the children it had (parent_may_respawn).
  void note_late_children() {
    if (killed_respawners_.empty()) return;
    auto table = proc::read_process_table(node_.proc_root());
    if (!table) return;
    for (const auto& p : *table)
      for (const auto& k : killed_respawners_)
        if (p.pgid == k.pgid && !k.known.contains(p.id) && !signalled_.contains(p.id) &&
            p.id != k.id)
          children_of_killed_respawner_.emplace(p.id, k.id);
  }

  // Whether a killed holder's parent is one that could restart it: not init (an orphan's
  // parent by adoption; any daemon on the node is adopted by it too) and not one of
  // gpureap's own ancestors (the shell waiting for gpureap restarts nothing meanwhile).
  // The one rule for the settle window, a replacement on its way and the verdict's note.
  bool could_restart(const proc::ProcessId& parent) const {
    return parent.pid > 1 && !caller_.ancestors.contains(parent.pid);
  }

  // True when some killed target's parent that could restart it is still alive.
  bool parent_may_respawn() const {
    if (!restarting_units_.empty()) return true;
    for (const auto& [child, respawner] : children_of_killed_respawner_)
      if (alive(child)) return true;
    for (const auto& [killed, parent] : parent_of_killed_)
      if (could_restart(parent) && alive(parent)) return true;
    return false;
  }

  // True when `id` still runs. A zombie restarts nothing. (Killed with its workers, as a
  // finished Slurm job's server is, it stays one until its new parent reaps it: on hosts
  // whose pid 1 is not a prompt reaper, for a second or more.)
  bool alive(const proc::ProcessId& id) const {
    auto now = proc::read_process_id(id.pid, node_.proc_root());
    if (!now || *now != id) return false;
    auto stat = proc::read_small_file(fmt::format("{}/{}/stat", node_.proc_root(), id.pid));
    return proc::parse_stat_state(stat) != 'Z';
  }

  // True when a live parent of a killed holder has a child that did not exist when the
  // round began and that bears a killed holder's name: a replacement on its way to the
  // GPU. Noted once in the report.
  bool replacement_starting() {
    for (const auto& [child, respawner] : children_of_killed_respawner_) {
      auto comms = killed_comms_.find(respawner);
      auto p = proc::find_process(caller_.table, child);
      if (!p || p->state == 'Z' || comms == killed_comms_.end() || !comms->second.contains(p->comm))
        continue;
      note_once(fmt::format(
          "pid {} ({}) was started by pid {} before that respawning parent was killed: watching "
          "until it takes the GPU or exits (bounded by --timeout)",
          child.pid, p->comm, respawner.pid));
      return true;
    }
    for (const auto& p : caller_.table) {
      if (existed_before_kill_.contains(p.id)) continue;
      for (const auto& [parent, comms] : killed_comms_) {
        if (!could_restart(parent) || p.ppid != parent.pid || !comms.contains(p.comm)) continue;
        std::string note = fmt::format(
            "pid {} ({}) was started by pid {} after its holder was killed: watching until it "
            "takes the GPU or exits (bounded by --timeout)",
            p.id.pid, p.comm, parent.pid);
        note_once(note);
        return true;
      }
    }
    return false;
  }

  void note_once(const std::string& note) {
    if (std::find(report_.notes.begin(), report_.notes.end(), note) == report_.notes.end())
      report_.notes.push_back(note);
  }

  // Records every parent of a killed target that started a new holder of a selected GPU
  // (holders in the latest look not yet signalled), with the command that stops it; adds
  // it to `next` only when named by --pid or with --stop-respawners (and never when
  // protected, unless named). Respawns count per parent across rounds.
  void note_respawners(Plan& next) {
    std::set<proc::ProcessId> seen;  // a holder of several GPUs counts once
    for (const auto& view : latest_.gpus) {
      if (!inventory::is_selected(options_.selection.gpus, view.info.id)) continue;
      for (const auto& gh : view.holders) {
        const proc::Holder& h = gh.holder;
        if (!gh.uses_gpu || signalled_.contains(h.id) || !seen.insert(h.id).second) continue;
        bool by_parent = false;
        for (const auto& [killed, parent] : parent_of_killed_) {
          if (parent.pid != h.ppid || parent.pid <= 1) continue;
          note_respawner(parent, ++respawns_[parent], next);
          by_parent = true;
          break;
        }
        for (auto& u : restarting_units_)
          if (!by_parent && h.container == "systemd:" + u.unit) ++u.respawns;
      }
    }
  }

  void note_respawner(const proc::ProcessId& parent, int n, Plan& next) {
    auto pe = proc::find_process(caller_.table, parent);
    if (!pe) return;  // the parent is gone meanwhile
    bool named = options_.selection.names(parent.pid);
    bool included = !signalled_.contains(parent) && (named || options_.stop_respawners) &&
                    include_respawner(next, *pe, options_.selection, caller_, n);
    auto r = std::find_if(report_.respawners.begin(), report_.respawners.end(),
                          [&](const Respawner& x) { return x.id == parent; });
    if (r != report_.respawners.end()) {
      r->respawns = n;
      r->included = r->included || included;
      return;
    }
    auto protection = protection_reason(pe->id.pid, pe->comm, pe->kernel_thread, caller_, named);
    report_.respawners.push_back(
        {parent, pe->comm, n, included,
         stop_hint(*pe, protection, options_.selection.gpus, node_.proc_root()), "", ""});
  }

  // True when every selected GPU not yet freed holds memory that no live target explains
  // (no signalled process still uses it, NVML lists no pid we cannot see) and that will
  // not come back by waiting: memory no process holds only once the release model calls
  // it driver-held (flat past the release budget since its holders exited: a slow release
  // is waited through, within --timeout); memory others hold once the release model calls
  // it settled (watched a falling window without a fall: its one step and window, the
  // node's clock; D16). Waiting longer would only delay the classification.
  bool all_stalled() {
    const auto now = clock_.now();
    bool all = true, any_pending = false;
    for (const auto& g : report_.gpus) {
      if (g.freed_at) continue;
      any_pending = true;
      // Unreadable so far: waiting longer helps only while NVML may still answer.
      if (!g.measured) {
        if (now - t0_ < options_.stalled_after) all = false;
        continue;
      }
      const auto* view = find_view(latest_, g.gpu);
      if (!view || !view->info.memory) return false;
      bool target_lives = std::any_of(view->holders.begin(), view->holders.end(),
                                      [&](const inventory::GpuHolder& gh) {
                                        return gh.uses_gpu && signalled_.contains(gh.holder.id);
                                      });
      const auto state = inventory::gpu_state(*view);
      if (state == inventory::GpuState::releasing || state == inventory::GpuState::no_holder) {
        all = false;  // the model is still waiting for it (release_model.h)
        continue;
      }
      if (target_lives || !view->source_unseen.empty() ||
          (state == inventory::GpuState::driver_held && options_.wait_out_timeout) ||
          (state != inventory::GpuState::driver_held &&
           !node_.releases().settled(inventory::release_key(*view), now)))
        all = false;
    }
    return any_pending && all;
  }

  bool releasing_selected() const {
    return std::any_of(report_.gpus.begin(), report_.gpus.end(), [&](const GpuRelease& g) {
      const auto* view = find_view(latest_, g.gpu);
      if (g.freed || !view) return false;
      const auto state = inventory::gpu_state(*view);
      return state == inventory::GpuState::releasing || state == inventory::GpuState::no_holder;
    });
  }

  // The verdict per GPU: freed when seen at or below its threshold. Every holder of a
  // freed GPU is gone and its memory settled: that reading is the GPU's idle baseline
  // (the store refuses implausibly high values).
  void judge(const Plan& last) {
    for (auto& g : report_.gpus) {
      g.freed = g.freed_at.has_value() || (g.freed && round_ == 0);
      if (g.freed && round_ > 0 && last.skipped.empty())
        node_.baselines().observe_idle(g.uuid, g.total, g.after());
    }
  }

  // Classify what is still held, from a fresh look.
  void classify() {
    // Back at the driver's floor with no process listed: the verdict does not wait for
    // the utilization average of the killed work to decay (issue 35: 0.36 s to baseline,
    // 0.6-0.9 s to the verdict on the H200, in ghost sampling).
    inventory::CollectOptions final_look = look_options();
    for (const auto& g : report_.gpus)
      if (!g.released_pids.empty()) final_look.no_busy_window_at_baseline.insert(g.gpu);
    latest_ = node_.look(final_look);
    measure_late();  // measured here, at the last, is measured: never freed unmeasured
    caller_ = CallerContext::of(latest_, node_.proc_root());  // note_live_parents reads it too
    Plan last = make_plan(latest_, options_.selection, caller_);
    for (auto& g : report_.gpus) {
      const auto* view = find_view(latest_, g.gpu);
      // A ghost GPU is not free whatever its memory says: a new job there would
      // crawl (inventory::Busy::ghost).
      const bool ghost = view && inventory::gpu_state(*view) == inventory::GpuState::ghost;
      // Freed stays freed unless this last reading says otherwise: taken again since
      // (a late replacement), or a ghost.
      const bool taken_again = view && view->info.memory && view->used() > g.threshold;
      if (g.freed && !ghost && !taken_again) continue;
      if (ghost || taken_again) {
        g.freed = false;
        g.freed_at.reset();
      }
      if (!view || !view->info.memory) {
        g.measured = false;
        report_.leftovers.push_back(source_failed(g.gpu, view, report_.source_error, latest_));
        continue;
      }
      g.used = view->used();
      // The one rule: free counts users, not openers (a monitoring client with the node
      // open does not keep a released GPU from being freed).
      if (inventory::gpu_state(*view) == inventory::GpuState::free) {
        g.freed = true;
        if (!g.freed_at) g.freed_at = since_t0();
        continue;
      }
      LeftoverInput input{view, &last, survivors_, g.threshold, {}};
      for (const auto& r : report_.respawners)
        if (!r.included)
          input.respawner_stop.emplace(r.id.pid, std::pair{r.comm, r.stop_hint});
      auto found = classify_leftovers(input, node_.proc_root());
      report_.leftovers.insert(report_.leftovers.end(), found.begin(), found.end());
    }
  }

  // Optional reset of GPUs whose memory only the driver holds.
  void reset_driver_held() {
    for (const auto& l : report_.leftovers) {
      // A ghost GPU's way out is the same reset, under the same preconditions.
      if (l.cls != LeftoverClass::driver_held && l.cls != LeftoverClass::ghost_gpu) continue;
      const auto* view = find_view(latest_, l.gpu);
      if (!view || std::any_of(report_.resets.begin(), report_.resets.end(),
                               [&](const ResetOutcome& r) { return r.gpu == l.gpu; }))
        continue;  // one reset per GPU, driver-held and ghost alike
      report_.resets.push_back(reset_gpu(*view, latest_, node_.gpus(), node_.agent_socket()));
      if (!report_.resets.back().succeeded) continue;
      auto reading = node_.gpus().memory({l.gpu}, std::chrono::milliseconds(2000));
      for (auto& g : report_.gpus)
        if (g.gpu == l.gpu && reading && !reading->empty() && reading->front().used) {
          const auto& r = reading->front();
          g.used = r.used;
          // A ghost is over when the GPU is idle too (one reading: a reset is no spike).
          const bool busy = r.utilization_gpu && *r.utilization_gpu >= inventory::kBusyThreshold &&
                            view->busy.kind == inventory::Busy::ghost;
          g.freed = *g.used <= g.threshold && !busy;
          if (g.freed) g.freed_at = since_t0();
        }
    }
    std::erase_if(report_.leftovers, [&](const Leftover& l) {
      return std::any_of(report_.gpus.begin(), report_.gpus.end(),
                         [&](const GpuRelease& g) { return g.gpu == l.gpu && g.freed; });
    });
  }

  // Parents of killed holders still alive at the verdict: they could restart what was
  // killed. Named with the command that stops them, so "freed" is not taken as "stays freed".
  // The table is classify's last look's (note_live_parents runs only after it).
  void note_live_parents() {
    const CallerContext& now_ctx = caller_;
    for (const auto& [killed, parent] : parent_of_killed_) {
      if (!could_restart(parent) || signalled_.contains(parent)) continue;
      if (std::any_of(report_.respawners.begin(), report_.respawners.end(),
                      [&](const Respawner& r) { return r.id == parent; }))
        continue;
      auto pe = proc::find_process(now_ctx.table, parent);
      if (!pe) continue;
      bool named = options_.selection.names(parent.pid);
      auto protection = protection_reason(pe->id.pid, pe->comm, pe->kernel_thread, now_ctx, named);
      report_.respawners.push_back(
          {parent, pe->comm, 0, false,
           stop_hint(*pe, protection, options_.selection.gpus, node_.proc_root()), "", ""});
    }
    // Services systemd restarts: named whether or not their main process lives on.
    for (const auto& u : restarting_units_) {
      auto r = std::find_if(report_.respawners.begin(), report_.respawners.end(),
                            [&](const Respawner& x) { return x.id == u.id; });
      if (r == report_.respawners.end()) {
        report_.respawners.push_back(u);
        continue;
      }
      r->respawns += u.respawns;
      r->stop_hint = u.stop_hint;
      r->unit = u.unit;
      r->restart = u.restart;
    }
  }

  inventory::Node& node_;
  ProcessControl& control_;
  const ReclaimOptions& options_;
  const ProgressFn& progress_;
  util::Clock& clock_;
  const TimePoint t0_;
  const TimePoint deadline_;
  ReclaimReport report_;
  int round_ = 0;
  CallerContext caller_;
  inventory::Inventory latest_;
  std::set<proc::ProcessId> signalled_;
  std::set<proc::ProcessId> left_alone_;  // skipped by the selection, not for protection
  std::set<proc::ProcessId> targeted_;    // the plan's targets
  std::map<proc::ProcessId, proc::ProcessId> parent_of_killed_;  // target -> its parent
  std::map<proc::ProcessId, int> respawns_;                      // parent -> new holders seen
  std::vector<proc::ProcessId> survivors_;
  std::vector<ProcessPtr> dying_;  // Outcome::exiting: their exits are awaited at the end
  // First "freed" with a live parent; `settling_` says whether it is set (a plain pair
  // rather than std::optional: g++ 12 -O2 warns maybe-uninitialized on the optional).
  TimePoint settle_from_{};
  bool settling_ = false;
  // For a replacement in the making: every process that existed when a round began, and
  // the comms of the holders each parent lost.
  std::set<proc::ProcessId> existed_before_kill_;
  std::map<proc::ProcessId, std::set<std::string>> killed_comms_;
  // Children of killed respawners that were not targets (forked before the parent died,
  // not yet holding the GPU): watched as a live parent is. Child -> its respawner.
  std::map<proc::ProcessId, proc::ProcessId> children_of_killed_respawner_;
  struct KilledRespawner {
    proc::ProcessId id;
    pid_t pgid = 0;
    std::set<proc::ProcessId> known;  // its group when it was signalled
  };
  std::vector<KilledRespawner> killed_respawners_;
  // System services that restart a killed target (Restart= not "no"), as reported;
  // `respawns` counts new holders in the unit that no live parent explains.
  std::vector<Respawner> restarting_units_;
  std::set<std::string> asked_units_;
};

}  // namespace

bool ReclaimReport::all_freed() const {
  return !gpus.empty() &&
         std::all_of(gpus.begin(), gpus.end(), [](const GpuRelease& g) { return g.freed; });
}

ReclaimReport reclaim(inventory::Node& node, ProcessControl& control,
                      const inventory::Inventory& initial, Plan plan, const ReclaimOptions& options,
                      const ProgressFn& progress, const CallerContext* caller) {
  ReclaimReport report = Reclaim(node, control, options, progress,
                                 caller ? *caller : CallerContext::current(node.proc_root()))
                             .run(initial, std::move(plan));
  // The estimates held for this free end with it: the agent's node outlives its reaps.
  node.baselines().forget_kept_estimates();
  return report;
}

}  // namespace gpureap::reclaim
