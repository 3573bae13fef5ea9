// The teardown with real processes: members found below the reaper (and in the
// cgroup), SIGTERM honoured, SIGKILL after the grace period, CMD's status known.

#include "supervise/teardown.h"
#include "proc/proc_files.h"

#include <gtest/gtest.h>

#include "supervise/test_support.h"
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "supervise/run_gpus.h"

extern char** environ;

namespace gpureap::supervise {
namespace {

using namespace std::chrono_literals;

using testing::current_env;
using testing::signals;

std::string teardown_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpureap-teardown-XXXXXX").string();
  return ::mkdtemp(tmpl.data());
}

// Waits until `file` holds `lines` lines (the script's processes are up).
std::vector<pid_t> wait_for_pids(const std::string& file, std::size_t lines) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 1000 && pids.size() < lines; ++i) {
    pids.clear();
    std::ifstream in(file);
    for (pid_t p; in >> p;) pids.push_back(p);
    if (pids.size() < lines) std::this_thread::sleep_for(5ms);
  }
  return pids;
}

bool contains(const std::vector<proc::ProcessId>& ids, pid_t pid) {
  return std::any_of(ids.begin(), ids.end(),
                     [&](const proc::ProcessId& id) { return id.pid == pid; });
}

bool gone(pid_t pid) {
  std::string s = proc::read_small_file("/proc/" + std::to_string(pid) + "/stat");  // "" once gone
  auto close = s.rfind(')');
  return close == std::string::npos || s[close + 2] == 'Z';
}

void teardown_kills_everything(RunCgroup* cgroup) {
  std::string dir = teardown_temp_dir();
  std::string pids = dir + "/pids";
  // A worker that ignores SIGTERM, a setsid daemon whose parent exits, and CMD.
  std::string script = "sh -c 'trap \"\" TERM; echo $$ >> " + pids +
                       "; while :; do sleep 0.05; done' & " + "(setsid sh -c 'echo $$ >> " + pids +
                       "; exec sleep 60' &) ; " + "echo $$ >> " + pids +
                       "; while :; do sleep 0.05; done";
  auto run = LaunchedRun::start(
      {{"sh", "-c", script}, current_env(), cgroup ? cgroup->procs_fd() : -1}, signals());
  ASSERT_TRUE(run.has_value()) << run.error().message;
  auto started = wait_for_pids(pids, 3);
  ASSERT_EQ(started.size(), 3u);

  auto members = run_members(run->reaper_pid(), cgroup, "/proc");
  for (pid_t p : started) {
    EXPECT_TRUE(contains(members, p)) << "pid " << p << " not found as a member";
    EXPECT_TRUE(belongs_to_run(p, run->reaper_pid(), cgroup, "/proc"));
  }
  EXPECT_FALSE(contains(members, ::getpid()));
  EXPECT_FALSE(belongs_to_run(::getpid(), run->reaper_pid(), cgroup, "/proc"));

  TeardownOptions options;
  options.proc_root = "/proc";
  options.grace = 300ms;
  options.kill_wait = 5s;
  auto t0 = Clock::now();
  reclaim::CapturedAudit audit;
  reclaim::AuditTrail trail(audit, reclaim::AuditActor::run_teardown,
                            reclaim::AuditCaller::current("/proc"));
  reclaim::SystemProcessControl system_control("/proc");
  reclaim::AuditedControl control(system_control, trail, "/proc");
  auto report = tear_down(*run, cgroup, options, t0, control);
  EXPECT_TRUE(report.empty);
  EXPECT_TRUE(report.survivors.empty());
  EXPECT_GE(report.processes, 3u);
  EXPECT_GE(Clock::now() - t0, 300ms) << "the TERM-ignoring worker must cost the grace period";
  for (pid_t p : started) EXPECT_TRUE(gone(p)) << "pid " << p;
  ASSERT_TRUE(run->cmd_status().has_value());
  EXPECT_EQ(exit_code_of(*run->cmd_status()), 128 + SIGTERM);
  bool sigkill_sent = std::any_of(
      report.actions.begin(), report.actions.end(),
      [](const reclaim::Action& a) { return a.signal == reclaim::Signal::sigkill; });
  EXPECT_TRUE(sigkill_sent) << "the worker ignoring SIGTERM needed SIGKILL";
  // Every signal of the teardown is in the audit trail, with the process it reached:
  // a SIGTERM record for each process started, and the SIGKILL of the one ignoring it.
  for (pid_t p : started) {
    bool termed = false;
    for (const auto& r : audit.records) {
      const auto* s = std::get_if<reclaim::SignalRecord>(&r.what);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(r.actor, reclaim::AuditActor::run_teardown);
      if (s->target.id.pid == p && s->signal == SIGTERM) {
        termed = true;
        EXPECT_FALSE(s->target.comm.empty()) << p;
        EXPECT_EQ(s->target.uid, ::geteuid()) << p;
        EXPECT_EQ(s->result, reclaim::SignalResult::delivered);
      }
    }
    EXPECT_TRUE(termed) << "no SIGTERM record for pid " << p;
  }
  const auto sent = static_cast<std::size_t>(
      std::count_if(report.actions.begin(), report.actions.end(),
                    [](const reclaim::Action& a) { return a.signal != reclaim::Signal::none; }));
  // One record per signal the teardown reports (the final sweep of the cgroup adds its own).
  if (report.cgroup_killed)
    EXPECT_GE(audit.records.size(), sent);
  else
    EXPECT_EQ(audit.records.size(), sent);
  std::filesystem::remove_all(dir);
}

TEST(Teardown, SubreaperModeKillsEveryProcessOfTheRun) {
  teardown_kills_everything(nullptr);
}

TEST(Teardown, CgroupModeKillsEveryProcessOfTheRun) {
  auto cg = RunCgroup::create("gpureap-run-teardown-test-" + std::to_string(::getpid()), "/proc");
  if (!cg) GTEST_SKIP() << "no writable cgroup v2 here: " << cg.error().message;
  teardown_kills_everything(&*cg);
  EXPECT_FALSE(cg->populated());
  EXPECT_TRUE(cg->remove().has_value());
}

TEST(Teardown, NothingLeftMeansNoSignal) {
  auto run = LaunchedRun::start({{"true"}, current_env()}, signals());
  ASSERT_TRUE(run.has_value());
  auto deadline = Clock::now() + 5s;
  while (!(run->cmd_status() && run->all_reaped()) && Clock::now() < deadline)
    run->next_event(deadline);
  reclaim::CapturedAudit audit;
  reclaim::AuditTrail trail(audit, reclaim::AuditActor::run_teardown, {});
  reclaim::SystemProcessControl system_control("/proc");
  reclaim::AuditedControl control(system_control, trail, "/proc");
  auto report = tear_down(*run, nullptr, {}, Clock::now(), control);
  EXPECT_TRUE(audit.records.empty());
  EXPECT_EQ(report.processes, 0u);
  EXPECT_TRUE(report.actions.empty());
  EXPECT_TRUE(report.empty);
}

}  // namespace
}  // namespace gpureap::supervise
