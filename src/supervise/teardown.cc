#include "supervise/teardown.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "proc/process_handle.h"
#include "proc/process_table.h"
#include "util/clock.h"

namespace gpureap::supervise {
namespace {

// Processes that appeared during the first round's grace period (forks) get
// SIGTERM and, this long after, SIGKILL.
constexpr std::chrono::milliseconds kLaterRoundGrace{1};

}  // namespace

std::vector<proc::ProcessId> run_members(pid_t reaper, const RunCgroup* cgroup,
                                         const std::string& proc_root) {
  std::set<proc::ProcessId> out;
  if (auto table = proc::read_process_table(proc_root)) {
    for (const auto& id : proc::descendants(*table, reaper)) out.insert(id);
  }
  if (cgroup) {
    for (pid_t pid : cgroup->members()) {
      if (auto id = proc::read_process_id(pid, proc_root)) out.insert(*id);
    }
  }
  const pid_t self = ::getpid();
  std::erase_if(out, [&](const proc::ProcessId& id) { return id.pid == self || id.pid == reaper; });
  return {out.begin(), out.end()};
}

TeardownReport tear_down(LaunchedRun& run, RunCgroup* cgroup, const TeardownOptions& options,
                         Clock::time_point t0, reclaim::AuditedControl& control) {
  TeardownReport report;
  const auto start = Clock::now();
  std::set<proc::ProcessId> signalled;

  // 1. SIGTERM -> grace -> SIGKILL for everything in the run, then again for
  //    whatever appeared meanwhile (forked during the grace period, or a fork
  //    that raced the first listing): those get SIGKILL at once.
  for (int round = 0; round < options.max_rounds; ++round) {
    run.take_pending(Clock::now());
    if (run.all_reaped() && !(cgroup && cgroup->populated())) break;
    std::vector<reclaim::Target> targets;
    for (const auto& id : run_members(run.reaper_pid(), cgroup, options.proc_root)) {
      if (signalled.contains(id)) continue;
      reclaim::Target t;
      t.id = id;
      if (auto g = options.member_gpus.find(id); g != options.member_gpus.end()) {
        t.gpus = g->second.gpus;
        t.gpu_bytes = g->second.bytes;
      }
      targets.push_back(std::move(t));
    }
    if (targets.empty()) break;
    reclaim::EscalationOptions esc;
    // A grace of 0 means what it means in `free`: SIGKILL at once, no SIGTERM.
    esc.grace = round == 0 ? options.grace : kLaterRoundGrace;
    esc.kill_wait = options.kill_wait;
    for (const auto& t : targets) signalled.insert(t.id);
    auto result = reclaim::terminate(std::move(targets), esc, t0, control, options.proc_root);
    report.rounds = round + 1;
    report.actions.insert(report.actions.end(), result.actions.begin(), result.actions.end());
    report.survivors = result.survivors;
  }
  report.processes = signalled.size();

  // 2. The cgroup, if any, is the last word: kill whatever is still in it
  //    (cgroup.kill catches forks in flight) and wait until it is empty.
  if (cgroup && cgroup->populated()) {
    auto deadline = Clock::now() + options.kill_wait;
    report.cgroup_killed = control.sweep_cgroup(cgroup->dir(), deadline).sent.has_value();
    cgroup->wait_empty(deadline);
  }

  // 3. The reaper reports CMD's status and that nothing is left to reap.
  run.take_pending(Clock::now() + options.kill_wait);
  report.empty = run.all_reaped() && !(cgroup && cgroup->populated());
  if (!run.reaper_alive())
    report.empty = run_members(run.reaper_pid(), cgroup, options.proc_root).empty();
  report.seconds = util::seconds_since(start);
  return report;
}

}  // namespace gpureap::supervise
