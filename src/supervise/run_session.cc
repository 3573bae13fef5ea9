#include "supervise/run_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <sstream>

#include "reclaim/audited_control.h"
#include "supervise/run_cgroup.h"
#include "inventory/run_records.h"
#include "inventory/state_file.h"
#include "proc/process_handle.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/run_id.h"
#include "util/clock.h"
#include "util/signal_name.h"
#include "util/units.h"
#include "util/plural.h"

extern char** environ;

namespace gpureap::supervise {

using util::seconds_since;

namespace {

// The first GPU sample comes this long after the start: a command that ends
// sooner never makes gpureap load NVML.
constexpr std::chrono::milliseconds kFirstSample{250};

std::string describe_status(int wait_status) {
  int code = exit_code_of(wait_status);
  if (WIFSIGNALED(wait_status))
    return fmt::format("was killed by {} ({})", signal_name(WTERMSIG(wait_status)), code);
  return fmt::format("exited with status {}", code);
}

// CMD's environment: ours, with GPUREAP_RUN_ID naming this run (replacing the
// id of an enclosing run, if any).
std::vector<std::string> command_environment(const std::string& run_id) {
  std::string prefix = std::string(proc::kRunIdVariable) + "=";
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with(prefix)) env.emplace_back(*e);
  env.push_back(prefix + run_id);
  return env;
}

// One `gpureap run`, in the order of its steps: contain, launch, supervise, tear down,
// verify, finish. Each step reads and fills the outcome.
// The identity of `pid` (a pid of this PID namespace) as `proc_root` shows it. Where
// that is another namespace's /proc (`unshare -p` without a /proc of its own, as a
// container may be), getpid() and fork() give this namespace's pids: the process is
// found among the children of `parent` (proc_root's pid; 0: this process, /proc/self)
// by its NSpid. An empty identity when it cannot be found.
proc::ProcessId proc_identity(pid_t pid, pid_t parent, const std::string& proc_root) {
  char link[32] = {};
  const ssize_t n = ::readlink((proc_root + "/self").c_str(), link, sizeof link - 1);
  const pid_t self = n > 0 ? proc::parse_pid(std::string_view(link, static_cast<std::size_t>(n))) : 0;
  if (self == ::getpid()) {
    auto read = proc::read_process_id(pid, proc_root);
    return read ? *read : proc::ProcessId{};
  }
  if (parent == 0) {
    auto read = proc::read_process_id(self, proc_root);
    return read ? *read : proc::ProcessId{};
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(
           fmt::format("{}/{}/task", proc_root, parent), ec)) {
    std::istringstream children(proc::read_small_file(task.path().string() + "/children"));
    for (pid_t child = 0; children >> child;) {
      auto status =
          proc::parse_status(proc::read_small_file(fmt::format("{}/{}/status", proc_root, child)));
      if (!status.nspid.empty() && status.nspid.back() == pid) {
        auto read = proc::read_process_id(child, proc_root);
        return read ? *read : proc::ProcessId{};
      }
    }
  }
  return {};
}

class RunSession {
 public:
  RunSession(const RunSettings& settings, inventory::Node& node, const RunLog& log)
      : settings_(settings), node_(node), log_(log) {}

  RunOutcome run(reclaim::AuditSink& audit) {
    contain();
    if (!launch()) return std::move(out_);
    supervise();
    const auto stop_time = Clock::now();
    const std::vector<proc::ProcessId> members = look_before_teardown();
    reclaim::AuditTrail trail = audit_trail(audit);
    const auto teardown_start = Clock::now();
    const TeardownOptions teardown_options = tear_down_members(members, trail);
    verify(teardown_options, stop_time);
    // The teardown's verdict, when it signalled anything: the GPUs the run held, measured.
    if (trail.signals() > 0)
      trail.verdict(out_.memory_unverified() ? reclaim::AuditVerdict::unmeasured
                    : out_.memory_released() ? reclaim::AuditVerdict::freed
                                             : reclaim::AuditVerdict::still_held,
                    out_.release ? out_.release->gpus : std::vector<reclaim::GpuRelease>{},
                    seconds_since(teardown_start));
    finish();
    out_.stop_to_return_seconds = seconds_since(stop_time);
    return std::move(out_);
  }

 private:
  void say(const std::string& line) const {
    if (log_) log_(line);
  }
  RunCgroup* cgroup() { return cgroup_ ? &*cgroup_ : nullptr; }

  // 1. Contain: a cgroup of the run's own where cgroup v2 is writable.
  void contain() {
    out_.run_id = proc::make_run_id(
        settings_.name.empty() ? proc::default_run_name(settings_.argv.at(0)) : settings_.name,
        ::getpid(), proc::run_pid_namespace(node_.proc_root()));
    if (!settings_.use_cgroup) {
      out_.no_cgroup_reason = "--no-cgroup";
      return;
    }
    for (const auto& path : sweep_stale_run_cgroups(node_.proc_root()))
      say("removed the empty cgroup of an ended run: " + path);
    auto created =
        RunCgroup::create(std::string(kRunCgroupPrefix) + out_.run_id, node_.proc_root());
    if (created) {
      cgroup_.emplace(std::move(*created));
    } else {
      out_.no_cgroup_reason = created.error().message;
    }
  }

  // 2. Launch: reaper + CMD. A cgroup we may create but not move into (no
  //    delegation of cgroup.procs) means subreaper mode after all. False when
  //    nothing could be started (out_.launch_failure says why).
  bool launch() {
    auto signals = ForwardedSignals::block();
    if (!signals) {
      out_.launch_failure = LaunchFailure{LaunchFailure::Stage::setup, 0, signals.error().message};
      if (cgroup_) (void)cgroup_->remove();
      return false;
    }
    signals_.emplace(std::move(*signals));
    // The run is on record before CMD can take a GPU: this gpureap, an ancestor of all it
    // starts, makes them a live run's. Recorded only after the launch, a look in between
    // saw a process in the run's cgroup with no live run above it: "its run is gone", an
    // owned orphan the reaper would have killed. CMD itself is recorded before it execs
    // (LaunchSpec::before_exec): recorded after, a gpureap SIGKILLed in between left a
    // command no record named, which `free --orphans` could not tie to the ended run.
    LaunchSpec spec{settings_.argv, command_environment(out_.run_id),
                    cgroup_ ? cgroup_->procs_fd() : -1, [this](pid_t reaper, pid_t cmd) {
                      if (recorded_) record(reaper, cmd);  // now with the reaper and CMD
                    }};
    record(0, 0);
    auto run = LaunchedRun::start(spec, *signals_);
    if (!run && run.error().stage == LaunchFailure::Stage::cgroup && cgroup_) {
      out_.no_cgroup_reason = run.error().message;
      (void)cgroup_->remove();
      cgroup_.reset();
      spec.cgroup_procs_fd = -1;
      run = LaunchedRun::start(spec, *signals_);
    }
    if (!run) {
      out_.launch_failure = run.error();
      if (cgroup_) (void)cgroup_->remove();
      if (recorded_) inventory::remove_run_record(node_.baselines().dir(), out_.run_id);
      recorded_ = false;
      return false;
    }
    run_.emplace(std::move(*run));
    announce_launch();
    return true;
  }

  void announce_launch() {
    RunCgroup* cg = cgroup();
    out_.mode = cg ? Containment::cgroup : Containment::subreaper;
    out_.cgroup_path = cg ? cg->cgroup_path() : "";
    out_.cmd_pid = run_->cmd_pid();
    if (cg) {
      say(fmt::format("run {}: cgroup mode, in {} (teardown: SIGTERM, then freeze + cgroup.kill)",
                      out_.run_id, cg->dir()));
    } else {
      say(fmt::format("run {}: subreaper mode ({}); processes are marked {}={}", out_.run_id,
                      out_.no_cgroup_reason, proc::kRunIdVariable, out_.run_id));
    }
    say(fmt::format("started {} as pid {} (reaper pid {})", settings_.argv[0], out_.cmd_pid,
                    run_->reaper_pid()));
    if (settings_.on_launch) settings_.on_launch(out_.run_id, out_.cmd_pid);
  }

  // The run's identity in the state directory: what tells its processes apart as a live
  // run's (its gpureap and reaper by pid and start time) and names its rest once it ended;
  // a name or GPUREAP_RUN_ID, which anyone sets, never does (inventory/run_records.h).
  // Written twice: before the launch with this gpureap alone (`reaper` 0), then with the
  // reaper and CMD, before CMD execs.
  void record(pid_t reaper, pid_t cmd) {
    const std::string& dir = node_.baselines().dir();
    if (dir.empty()) return;
    const std::string& root = node_.proc_root();
    const proc::ProcessId self = proc_identity(::getpid(), 0, root);
    inventory::RunRecord r{out_.run_id, inventory::boot_id(), self, {}, {}};
    if (reaper > 0) {
      r.reaper = proc_identity(reaper, self.pid, root);
      r.command = proc_identity(cmd, r.reaper.pid, root);
    }
    if (auto saved = inventory::save_run_record(dir, r); saved) {
      recorded_ = true;
    } else {
      say("the run's record could not be written (" + saved.error().message +
          "): its processes are not known as a live run's");
    }
  }

  // 3. Supervise until CMD ends or we are told to stop; meanwhile note which
  //    GPUs the run holds.
  void supervise() {
    auto next_sample = [&] { return watch_ ? watch_->next_sample() : t0_ + kFirstSample; };
    for (;;) {
      RunEvent ev = run_->next_event(next_sample());
      if (ev.kind == RunEvent::Kind::signal) {
        if (ev.value == SIGTERM || ev.value == SIGINT) {
          // Told to stop. SIGTERM reaches CMD as the teardown's first signal;
          // SIGINT is passed on as such first (Ctrl-C), then the teardown follows.
          out_.stop_signal = ev.value;
          if (ev.value != SIGTERM) run_->forward(ev.value);
          say(fmt::format("{} received: stopping the run", signal_name(ev.value)));
          return;
        }
        run_->forward(ev.value);
        say(fmt::format("forwarded {} to pid {}", signal_name(ev.value), out_.cmd_pid));
      } else if (ev.kind == RunEvent::Kind::cmd_exited) {
        say(fmt::format("pid {} {} after {:.3f} s", out_.cmd_pid, describe_status(ev.value),
                        seconds_since(t0_)));
        return;
      } else if (ev.kind == RunEvent::Kind::reaper_lost) {
        out_.reaper_lost = true;
        say("the reaper process was killed: reaping and signal forwarding stopped");
        return;
      } else if (ev.kind == RunEvent::Kind::deadline) {
        if (!watch_) watch_.emplace(node_);
        watch_->sample(run_->reaper_pid(), cgroup());
      }
    }
  }

  // 4. Teardown, first part: what is left of the run, and which GPUs it holds, read
  //    before anything is signalled.
  std::vector<proc::ProcessId> look_before_teardown() {
    RunCgroup* cg = cgroup();
    if (out_.cmd_wait_status = run_->cmd_status(); out_.cmd_wait_status && !out_.stop_signal)
      // CMD's exit and "all reaped" are sent back to back: the second is on its way.
      run_->take_pending(Clock::now() + std::chrono::milliseconds(2));
    bool anything_left = !run_->all_reaped() || (cg && cg->populated());
    std::vector<proc::ProcessId> members;
    if (anything_left) members = run_members(run_->reaper_pid(), cg, node_.proc_root());
    if (!members.empty() && !watch_) watch_.emplace(node_);
    if (watch_) {
      auto inventory_start = Clock::now();
      watch_->before_teardown(members);
      std::string held;
      for (const auto& h : watch_->held())
        held += (held.empty() ? "" : ",") + gpu::device_text(h.gpu);
      say(fmt::format("GPUs held by the run: {} (looked up in {:.3f} s)",
                      held.empty() ? "none" : held, seconds_since(inventory_start)));
    }
    return members;
  }

  // The audit trail of the teardown's signals, knowing the GPUs the run held.
  reclaim::AuditTrail audit_trail(reclaim::AuditSink& audit) {
    reclaim::AuditCaller caller = reclaim::AuditCaller::current(node_.proc_root());
    caller.run_id = out_.run_id;
    return reclaim::AuditTrail(audit, reclaim::AuditActor::run_teardown, std::move(caller));
  }

  // 4. Teardown: the run's processes signalled, each signal audited.
  TeardownOptions tear_down_members(const std::vector<proc::ProcessId>& members,
                                    reclaim::AuditTrail& trail) {
    if (!members.empty())
      say(fmt::format("tearing down {}: {}", count_of(members.size(), "process", "processes"),
                      settings_.grace.count() == 0
                          ? std::string("SIGKILL at once (--grace 0)")
                          : "SIGTERM, SIGKILL after " + format_duration(settings_.grace)));
    TeardownOptions options;
    options.grace = settings_.grace;
    options.kill_wait = settings_.kill_wait;
    options.proc_root = node_.proc_root();
    if (watch_) options.member_gpus = watch_->member_gpus();
    if (watch_)
      for (const auto& g : watch_->held()) trail.know_gpu(g.gpu, g.uuid);
    reclaim::SystemProcessControl system_control(node_.proc_root());
    reclaim::AuditedControl control(system_control, trail, node_.proc_root());
    out_.teardown = tear_down(*run_, cgroup(), options, t0_, control);
    out_.cmd_wait_status = run_->cmd_status();
    if (out_.teardown.processes > 0) {
      say(fmt::format(
          "teardown: {} in {}, {:.3f} s{}{}",
          count_of(out_.teardown.processes, "process", "processes"),
          count_of(out_.teardown.rounds, "round"), out_.teardown.seconds,
          out_.teardown.cgroup_killed ? ", cgroup.kill" : "",
          out_.teardown.survivors.empty()
              ? ""
              : fmt::format(", {} still alive after SIGKILL", out_.teardown.survivors.size())));
    }
    return options;
  }

  // The release's phases (release.phases of run --json): each GPU's members, when they
  // were first signalled and when the last exited; NVML's lists say when they are gone.
  std::vector<reclaim::GpuRelease> release_phases(const TeardownOptions& options) const {
    std::vector<reclaim::GpuRelease> held = watch_->held();
    for (auto& g : held)
      for (const auto& [member, used] : options.member_gpus) {
        if (std::find(used.gpus.begin(), used.gpus.end(), g.gpu) == used.gpus.end()) continue;
        g.released_pids.push_back(static_cast<std::uint32_t>(member.pid));
        for (const auto& a : out_.teardown.actions) {
          if (a.id != member || a.via.empty()) continue;
          if (!g.signalled_at || a.sent_at < *g.signalled_at) g.signalled_at = a.sent_at;
          if (a.exited_at && (!g.exited_at || *a.exited_at > *g.exited_at))
            g.exited_at = a.exited_at;
        }
      }
    return held;
  }

  // 5. Verify: the GPUs the run held, back at their baselines (bounded).
  void verify(const TeardownOptions& options, Clock::time_point stop_time) {
    if (watch_ && !watch_->held().empty()) {
      out_.release =
          reclaim::wait_for_release(node_.gpus(), release_phases(options),
                                    Clock::now() + settings_.release_timeout, t0_, nullptr, {});
      std::vector<gpu::DeviceId> not_freed;
      for (const auto& g : out_.release->gpus) {
        if (g.freed_at) {
          say(fmt::format("GPU {}: back at baseline ({} used) {:.3f} s after the stop", g.gpu,
                          g.used ? format_bytes(*g.used) : "?",
                          *g.freed_at - std::chrono::duration<double>(stop_time - t0_).count()));
        } else if (g.measured) {  // one NVML cannot read is named as such, not classified
          not_freed.push_back(g.gpu);
        }
      }
      if (!not_freed.empty()) out_.leftovers = watch_->classify(not_freed, out_.teardown.survivors);
    }
    if (watch_) {
      out_.unverified = watch_->unverified();
      out_.source_problem = watch_->source_problem();
      out_.warnings = watch_->warnings();
    }
  }

  // 6. Done: the reaper goes, and the cgroup with it once empty (a populated
  //    one stays: it names the leftovers).
  void finish() {
    run_->finish();
    if (recorded_) inventory::remove_run_record(node_.baselines().dir(), out_.run_id);
    if (RunCgroup* cg = cgroup()) {
      if (!cg->populated()) {
        (void)cg->remove();
      } else {
        say("cgroup kept, still populated: " + cg->dir());
      }
    }
    out_.seconds = seconds_since(t0_);
  }

  const RunSettings& settings_;
  inventory::Node& node_;
  const RunLog& log_;
  const Clock::time_point t0_ = Clock::now();
  RunOutcome out_;
  bool recorded_ = false;
  // Destroyed in reverse: the watch, the run, the signals it forwards, the cgroup.
  std::optional<RunCgroup> cgroup_;
  std::optional<ForwardedSignals> signals_;
  std::optional<LaunchedRun> run_;
  std::optional<RunGpuWatch> watch_;
};

}  // namespace

RunOutcome supervise_run(const RunSettings& settings, inventory::Node& node, const RunLog& log,
                         reclaim::AuditSink& audit) {
  return RunSession(settings, node, log).run(audit);
}

}  // namespace gpureap::supervise
