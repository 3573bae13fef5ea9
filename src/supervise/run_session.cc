#include "supervise/run_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <unistd.h>

#include <csignal>

#include "reclaim/audited_control.h"
#include "supervise/run_cgroup.h"
#include "proc/run_id.h"
#include "util/clock.h"
#include "util/units.h"

extern char** environ;

namespace gpureap::supervise {

using util::seconds_since;

namespace {

// The first GPU sample comes this long after the start: a command that ends
// sooner never makes gpureap load NVML.
constexpr std::chrono::milliseconds kFirstSample{250};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGWINCH:
      return "SIGWINCH";
    case SIGKILL:
      return "SIGKILL";
  }
  return "signal " + std::to_string(sig);
}

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

}  // namespace

RunOutcome supervise_run(const RunSettings& settings, inventory::Node& node, const RunLog& log,
                         reclaim::AuditSink& audit) {
  RunOutcome out;
  const auto t0 = Clock::now();
  auto say = [&](const std::string& line) {
    if (log) log(line);
  };

  // 1. Contain: a cgroup of the run's own where cgroup v2 is writable.
  out.run_id = proc::make_run_id(
      settings.name.empty() ? proc::default_run_name(settings.argv.at(0)) : settings.name, ::getpid());
  std::optional<RunCgroup> cgroup;
  if (settings.use_cgroup) {
    for (const auto& path : sweep_stale_run_cgroups(node.proc_root()))
      say("removed the empty cgroup of an ended run: " + path);
    auto created = RunCgroup::create(std::string(kRunCgroupPrefix) + out.run_id, node.proc_root());
    if (created) {
      cgroup.emplace(std::move(*created));
    } else {
      out.no_cgroup_reason = created.error().message;
    }
  } else {
    out.no_cgroup_reason = "--no-cgroup";
  }

  // 2. Launch: reaper + CMD. A cgroup we may create but not move into (no
  //    delegation of cgroup.procs) means subreaper mode after all.
  auto signals = ForwardedSignals::block();
  if (!signals) {
    out.launch_failure = LaunchFailure{LaunchFailure::Stage::setup, 0, signals.error().message};
    if (cgroup) (void)cgroup->remove();
    return out;
  }
  LaunchSpec spec{settings.argv, command_environment(out.run_id), cgroup ? cgroup->procs_fd() : -1};
  auto run = LaunchedRun::start(spec, *signals);
  if (!run && run.error().stage == LaunchFailure::Stage::cgroup && cgroup) {
    out.no_cgroup_reason = run.error().message;
    (void)cgroup->remove();
    cgroup.reset();
    spec.cgroup_procs_fd = -1;
    run = LaunchedRun::start(spec, *signals);
  }
  if (!run) {
    out.launch_failure = run.error();
    if (cgroup) (void)cgroup->remove();
    return out;
  }
  RunCgroup* cg = cgroup ? &*cgroup : nullptr;
  out.mode = cg ? Containment::cgroup : Containment::subreaper;
  out.cgroup_path = cg ? cg->cgroup_path() : "";
  out.cmd_pid = run->cmd_pid();
  if (cg) {
    say(fmt::format("run {}: cgroup mode, in {} (teardown: SIGTERM, then freeze + cgroup.kill)",
                    out.run_id, cg->dir()));
  } else {
    say(fmt::format("run {}: subreaper mode ({}); processes are marked {}={}", out.run_id,
                    out.no_cgroup_reason, proc::kRunIdVariable, out.run_id));
  }
  say(fmt::format("started {} as pid {} (reaper pid {})", settings.argv[0], out.cmd_pid,
                  run->reaper_pid()));
  if (settings.on_launch) settings.on_launch(out.run_id, out.cmd_pid);

  // 3. Supervise until CMD ends or we are told to stop; meanwhile note which
  //    GPUs the run holds.
  std::optional<RunGpuWatch> watch;
  auto next_sample = [&] { return watch ? watch->next_sample() : t0 + kFirstSample; };
  for (;;) {
    RunEvent ev = run->next_event(next_sample());
    if (ev.kind == RunEvent::Kind::signal) {
      if (ev.value == SIGTERM || ev.value == SIGINT) {
        // Told to stop. SIGTERM reaches CMD as the teardown's first signal;
        // SIGINT is passed on as such first (Ctrl-C), then the teardown follows.
        out.stop_signal = ev.value;
        if (ev.value != SIGTERM) run->forward(ev.value);
        say(fmt::format("{} received: stopping the run", signal_name(ev.value)));
        break;
      }
      run->forward(ev.value);
      say(fmt::format("forwarded {} to pid {}", signal_name(ev.value), out.cmd_pid));
    } else if (ev.kind == RunEvent::Kind::cmd_exited) {
      say(fmt::format("pid {} {} after {:.3f} s", out.cmd_pid, describe_status(ev.value),
                      seconds_since(t0)));
      break;
    } else if (ev.kind == RunEvent::Kind::reaper_lost) {
      out.reaper_lost = true;
      say("the reaper process was killed: reaping and signal forwarding stopped");
      break;
    } else if (ev.kind == RunEvent::Kind::deadline) {
      if (!watch) watch.emplace(node);
      watch->sample(run->reaper_pid(), cg);
    }
  }
  const auto stop_time = Clock::now();

  // 4. Teardown. Which GPUs the run holds is read before anything is signalled.
  if (out.cmd_wait_status = run->cmd_status(); out.cmd_wait_status && !out.stop_signal)
    // CMD's exit and "all reaped" are sent back to back: the second is on its way.
    run->take_pending(Clock::now() + std::chrono::milliseconds(2));
  bool anything_left = !run->all_reaped() || (cg && cg->populated());
  std::vector<proc::ProcessId> members;
  if (anything_left) members = run_members(run->reaper_pid(), cg, node.proc_root());
  if (!members.empty() && !watch) watch.emplace(node);
  if (watch) {
    auto inventory_start = Clock::now();
    watch->before_teardown(members);
    std::string held;
    for (const auto& h : watch->held()) held += (held.empty() ? "" : ",") + gpu::device_text(h.gpu);
    say(fmt::format("GPUs held by the run: {} (looked up in {:.3f} s)",
                    held.empty() ? "none" : held, seconds_since(inventory_start)));
  }
  if (!members.empty())
    say(fmt::format("tearing down {} process(es): {}", members.size(),
                    settings.grace.count() == 0
                        ? std::string("SIGKILL at once (--grace 0)")
                        : "SIGTERM, SIGKILL after " + format_duration(settings.grace)));
  TeardownOptions teardown_options;
  teardown_options.grace = settings.grace;
  teardown_options.kill_wait = settings.kill_wait;
  teardown_options.proc_root = node.proc_root();
  if (watch) teardown_options.member_gpus = watch->member_gpus();
  reclaim::AuditCaller caller = reclaim::AuditCaller::current(node.proc_root());
  caller.run_id = out.run_id;
  reclaim::AuditTrail trail(audit, reclaim::AuditActor::run_teardown, std::move(caller));
  if (watch)
    for (const auto& g : watch->held()) trail.know_gpu(g.gpu, g.uuid);
  reclaim::SystemProcessControl system_control(node.proc_root());
  reclaim::AuditedControl control(system_control, trail, node.proc_root());
  const auto teardown_start = Clock::now();
  out.teardown = tear_down(*run, cg, teardown_options, t0, control);
  out.cmd_wait_status = run->cmd_status();
  if (out.teardown.processes > 0) {
    say(fmt::format("teardown: {} process(es) in {} round(s), {:.3f} s{}{}", out.teardown.processes,
                    out.teardown.rounds, out.teardown.seconds,
                    out.teardown.cgroup_killed ? ", cgroup.kill" : "",
                    out.teardown.survivors.empty() ? ""
                                                   : fmt::format(", {} still alive after SIGKILL",
                                                                 out.teardown.survivors.size())));
  }

  // 5. Verify: the GPUs the run held, back at their baselines (bounded).
  if (watch && !watch->held().empty()) {
    // The release's phases (release.phases of run --json): each GPU's members, when they
    // were first signalled and when the last exited; NVML's lists say when they are gone.
    std::vector<reclaim::GpuRelease> held = watch->held();
    for (auto& g : held)
      for (const auto& [member, used] : teardown_options.member_gpus) {
        if (std::find(used.gpus.begin(), used.gpus.end(), g.gpu) == used.gpus.end()) continue;
        g.released_pids.push_back(static_cast<std::uint32_t>(member.pid));
        for (const auto& a : out.teardown.actions) {
          if (a.id != member || a.via.empty()) continue;
          if (!g.signalled_at || a.sent_at < *g.signalled_at) g.signalled_at = a.sent_at;
          if (a.exited_at && (!g.exited_at || *a.exited_at > *g.exited_at))
            g.exited_at = a.exited_at;
        }
      }
    out.release = reclaim::wait_for_release(
        node.gpus(), std::move(held), Clock::now() + settings.release_timeout, t0, nullptr, {});
    std::vector<gpu::DeviceId> not_freed;
    for (const auto& g : out.release->gpus) {
      if (g.freed_at) {
        say(fmt::format("GPU {}: back at baseline ({} used) {:.3f} s after the stop", g.gpu,
                        g.used ? format_bytes(*g.used) : "?",
                        *g.freed_at - std::chrono::duration<double>(stop_time - t0).count()));
      } else if (g.measured) {  // one NVML cannot read is named as such, not classified
        not_freed.push_back(g.gpu);
      }
    }
    if (!not_freed.empty()) out.leftovers = watch->classify(not_freed, out.teardown.survivors);
  }
  if (watch) {
    out.unverified = watch->unverified();
    out.source_problem = watch->source_problem();
    out.warnings = watch->warnings();
  }
  // The teardown's verdict, when it signalled anything: the GPUs the run held, measured.
  if (trail.signals() > 0)
    trail.verdict(out.memory_unverified()  ? reclaim::AuditVerdict::unmeasured
                  : out.memory_released() ? reclaim::AuditVerdict::freed
                                          : reclaim::AuditVerdict::still_held,
                  out.release ? out.release->gpus : std::vector<reclaim::GpuRelease>{},
                  seconds_since(teardown_start));

  // 6. Done: the reaper goes, and the cgroup with it once empty (a populated
  //    one stays: it names the leftovers).
  run->finish();
  if (cg) {
    if (!cg->populated()) {
      (void)cg->remove();
    } else {
      say("cgroup kept, still populated: " + cg->dir());
    }
  }
  out.seconds = seconds_since(t0);
  out.stop_to_return_seconds = seconds_since(stop_time);
  return out;
}

}  // namespace gpureap::supervise
