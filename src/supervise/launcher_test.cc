// The launcher with real processes: exit statuses, exec failures, signal
// forwarding, orphans adopted by the reaper, and CMD moved into a cgroup.

#include "supervise/launcher.h"
#include "proc/proc_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include "supervise/test_support.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "supervise/run_cgroup.h"

extern char** environ;

namespace gpureap::supervise {
namespace {

using testing::current_env;
using testing::signals;

// Runs events until CMD has exited and every process of the run is reaped.
int wait_done(LaunchedRun& run, std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto deadline = Clock::now() + limit;
  while (!(run.cmd_status() && run.all_reaped())) {
    auto ev = run.next_event(deadline);
    if (ev.kind == RunEvent::Kind::deadline || ev.kind == RunEvent::Kind::reaper_lost) break;
  }
  return run.cmd_status() ? exit_code_of(*run.cmd_status()) : -1;
}

std::string stat_field(pid_t pid, int field) {
  std::string s = proc::read_small_file("/proc/" + std::to_string(pid) + "/stat");  // "" once gone
  auto close = s.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(s.substr(close + 2));
  std::string f;
  for (int i = 3; fields >> f; ++i)
    if (i == field) return f;
  return {};
}

std::string temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpureap-launch-XXXXXX").string();
  return ::mkdtemp(tmpl.data());
}

TEST(Launcher, ReturnsTheCommandsExitStatus) {
  auto run = LaunchedRun::start({{"sh", "-c", "exit 7"}, current_env()}, signals());
  ASSERT_TRUE(run.has_value()) << run.error().message;
  EXPECT_EQ(wait_done(*run), 7);
  EXPECT_TRUE(run->all_reaped());
}

TEST(Launcher, TakePendingReturnsOnceTheExitAndAllReapedAreIn) {
  auto run = LaunchedRun::start({{"sh", "-c", "exit 4"}, current_env()}, signals());
  ASSERT_TRUE(run.has_value()) << run.error().message;
  run->take_pending(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(run->cmd_status());
  EXPECT_EQ(exit_code_of(*run->cmd_status()), 4);
  EXPECT_TRUE(run->all_reaped());
  // Nothing more will come: a later call returns at once, without waiting.
  auto start = Clock::now();
  run->take_pending(start + std::chrono::seconds(240));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(120)) << "it waited for its deadline";
}

TEST(Launcher, KilledBySignalIs128PlusN) {
  auto run = LaunchedRun::start({{"sh", "-c", "kill -9 $$"}, current_env()}, signals());
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(wait_done(*run), 137);
}

TEST(Launcher, CommandNotFoundIs127) {
  auto run = LaunchedRun::start({{"gpureap-no-such-command-xyz"}, current_env()}, signals());
  ASSERT_FALSE(run.has_value());
  EXPECT_EQ(run.error().stage, LaunchFailure::Stage::exec);
  EXPECT_EQ(exit_code_for_exec_error(run.error().err), 127);
}

TEST(Launcher, NotExecutableIs126) {
  std::string dir = temp_dir();
  std::string file = dir + "/not-exec";
  std::ofstream(file) << "#!/bin/sh\nexit 0\n";
  ::chmod(file.c_str(), 0644);
  auto run = LaunchedRun::start({{file}, current_env()}, signals());
  ASSERT_FALSE(run.has_value());
  EXPECT_EQ(exit_code_for_exec_error(run.error().err), 126);
  std::filesystem::remove_all(dir);
}

TEST(Launcher, CommandGetsItsOwnSessionAndEnvironment) {
  std::string dir = temp_dir();
  auto env = current_env();
  env.push_back("GPUREAP_RUN_ID=test-1");
  auto run = LaunchedRun::start(
      {{"sh", "-c", "echo \"$GPUREAP_RUN_ID $(cut -d' ' -f6 /proc/$$/stat)\" > " + dir + "/out"},
       env},
      signals());
  ASSERT_TRUE(run.has_value());
  pid_t cmd = run->cmd_pid();
  EXPECT_EQ(wait_done(*run), 0);
  std::ifstream in(dir + "/out");
  std::string id, sid;
  in >> id >> sid;
  EXPECT_EQ(id, "test-1");
  EXPECT_EQ(sid, std::to_string(cmd)) << "CMD must lead its own session";
  std::filesystem::remove_all(dir);
}

TEST(Launcher, ForwardsSignalsToTheCommand) {
  std::string dir = temp_dir();
  std::string script = "trap 'echo USR1 > " + dir + "/got; exit 3' USR1; echo ready > " + dir +
                       "/ready; while :; do sleep 0.05; done";
  auto run = LaunchedRun::start({{"sh", "-c", script}, current_env()}, signals());
  ASSERT_TRUE(run.has_value());
  for (int i = 0; i < 400 && !std::filesystem::exists(dir + "/ready"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(::getpid(), SIGUSR1);  // to ourselves: blocked, read from the signalfd, forwarded
  auto ev = run->next_event(Clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(ev.kind, RunEvent::Kind::signal);
  EXPECT_EQ(ev.value, SIGUSR1);
  run->forward(ev.value);
  EXPECT_EQ(wait_done(*run), 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/got"));
  std::filesystem::remove_all(dir);
}

TEST(Launcher, DoubleForkedDaemonIsAdoptedByTheReaper) {
  std::string dir = temp_dir();
  // The daemon leaves the session and its parent exits at once: classic double fork.
  std::string script = "(setsid sh -c 'echo $$ > " + dir + "/daemon; exec sleep 30' &) ; exit 0";
  auto run = LaunchedRun::start({{"sh", "-c", script}, current_env()}, signals());
  ASSERT_TRUE(run.has_value());
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!run->cmd_status() && Clock::now() < deadline) run->next_event(deadline);
  ASSERT_TRUE(run->cmd_status());
  pid_t daemon = 0;
  for (int i = 0; i < 400 && daemon == 0; ++i) {
    std::ifstream in(dir + "/daemon");
    in >> daemon;
    if (daemon == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(daemon, 0);
  EXPECT_EQ(stat_field(daemon, 4), std::to_string(run->reaper_pid()))
      << "re-parented to the reaper";
  EXPECT_FALSE(run->all_reaped());
  ::kill(daemon, SIGKILL);  // our test started it (as the reaper's child, unreaped)
  EXPECT_EQ(wait_done(*run), 0);
  EXPECT_TRUE(run->all_reaped());
  std::filesystem::remove_all(dir);
}

TEST(Launcher, ReaperDiesWithTheFront) {
  // Run the front in a child process and SIGKILL it: the reaper must follow.
  std::string dir = temp_dir();
  pid_t front = ::fork();
  if (front == 0) {
    auto run = LaunchedRun::start(
        {{"sh", "-c", "echo $PPID > " + dir + "/reaper; exec sleep 30"}, current_env()}, signals());
    if (!run) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  pid_t reaper = 0;
  for (int i = 0; i < 400 && reaper == 0; ++i) {
    std::ifstream in(dir + "/reaper");
    in >> reaper;
    if (reaper == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(reaper, 0);
  std::string cmd_pid;
  {
    std::ifstream in("/proc/" + std::to_string(reaper) + "/task/" + std::to_string(reaper) +
                     "/children");
    in >> cmd_pid;
  }
  ::kill(front, SIGKILL);
  ::waitpid(front, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 400 && !gone; ++i) {
    std::string st = stat_field(reaper, 3);
    gone = st.empty() || st == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(gone) << "the reaper outlived its front";
  // The command was left running (orphaned); end it: our test started it.
  if (!cmd_pid.empty()) ::kill(std::stoi(cmd_pid), SIGKILL);
  std::filesystem::remove_all(dir);
}

// The run records its command in before_exec (run_session.cc): CMD must not have run
// yet when it is called, or a gpureap killed before the record leaves a command no
// record names (the flake of Run.FreeOrphansReclaimsAKilledRunSubreaperMode). CMD is
// still the fork of this program then, waiting for its release.
TEST(Launcher, TheCommandExecsOnlyAfterBeforeExecReturned) {
  pid_t seen_reaper = 0, seen_cmd = 0;
  std::string exe_at_call, parent_at_call;
  LaunchSpec spec{{"sh", "-c", "exit 5"}, current_env()};
  spec.before_exec = [&](pid_t reaper, pid_t cmd) {
    seen_reaper = reaper;
    seen_cmd = cmd;
    std::error_code ec;
    exe_at_call = std::filesystem::read_symlink("/proc/" + std::to_string(cmd) + "/exe", ec);
    parent_at_call = stat_field(cmd, 4);
  };
  auto run = LaunchedRun::start(spec, signals());
  ASSERT_TRUE(run.has_value()) << run.error().message;
  EXPECT_EQ(seen_reaper, run->reaper_pid());
  EXPECT_EQ(seen_cmd, run->cmd_pid());
  EXPECT_EQ(parent_at_call, std::to_string(run->reaper_pid()));
  EXPECT_EQ(exe_at_call, std::filesystem::read_symlink("/proc/self/exe"))
      << "the command had exec'd before the front could record it";
  EXPECT_EQ(wait_done(*run), 5) << "released, it runs";
}

// A front that dies before it releases CMD (gpureap SIGKILLed while it records the run)
// leaves nothing running: CMD sees EOF instead of its release and never execs.
TEST(Launcher, ACommandWhoseFrontDiesBeforeReleasingItNeverRuns) {
  std::string dir = temp_dir();
  int to_test[2], to_front[2];
  ASSERT_EQ(::pipe(to_test), 0);
  ASSERT_EQ(::pipe(to_front), 0);
  pid_t front = ::fork();
  if (front == 0) {
    LaunchSpec spec{{"touch", dir + "/ran"}, current_env()};
    spec.before_exec = [&](pid_t, pid_t cmd) {
      (void)!::write(to_test[1], &cmd, sizeof cmd);
      char ack = 0;
      (void)!::read(to_front[0], &ack, 1);  // the test holds CMD's pidfd now
      ::_exit(0);                           // dies without releasing CMD
    };
    (void)LaunchedRun::start(spec, signals());
    ::_exit(1);
  }
  ::close(to_test[1]);
  ::close(to_front[0]);
  pid_t cmd = 0;
  ASSERT_EQ(::read(to_test[0], &cmd, sizeof cmd), static_cast<ssize_t>(sizeof cmd));
  // CMD waits for its release until the front ends: it is alive, its pid its own.
  auto id = proc::read_process_id(cmd, "/proc");
  ASSERT_TRUE(id.has_value());
  auto handle = proc::ProcessHandle::open(*id, "/proc");
  ASSERT_TRUE(handle.has_value());
  ASSERT_EQ(::write(to_front[1], "k", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(front, &status, 0), front);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the front died in before_exec";
  EXPECT_TRUE(handle->wait_exit(Clock::now() + std::chrono::seconds(10)))
      << "CMD outlived its front without a release";
  EXPECT_FALSE(std::filesystem::exists(dir + "/ran")) << "CMD ran although never released";
  ::close(to_test[0]);
  ::close(to_front[1]);
  std::filesystem::remove_all(dir);
}

TEST(Launcher, CommandMovesIntoTheRunCgroupBeforeExec) {
  auto cg = RunCgroup::create("gpureap-run-launcher-test-" + std::to_string(::getpid()), "/proc");
  if (!cg) GTEST_SKIP() << "no writable cgroup v2 here: " << cg.error().message;
  auto run = LaunchedRun::start(
      {{"sh", "-c", "sleep 30 & sleep 30"}, current_env(), cg->procs_fd()}, signals());
  ASSERT_TRUE(run.has_value()) << run.error().message;
  std::ifstream in("/proc/" + std::to_string(run->cmd_pid()) + "/cgroup");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(proc::parse_cgroup2_path(text), cg->cgroup_path());
  for (int i = 0; i < 400 && cg->members().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(cg->members().size(), 3u) << "sh and both sleeps";
  EXPECT_TRUE(cg->populated());
  ASSERT_TRUE(proc::cgroup_kill_all(cg->dir(), Clock::now() + std::chrono::seconds(2), "/proc")
                  .has_value());
  EXPECT_TRUE(cg->wait_empty(Clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(wait_done(*run), 137);
  EXPECT_TRUE(cg->remove().has_value());
  EXPECT_FALSE(std::filesystem::exists(cg->dir()));
}

}  // namespace
}  // namespace gpureap::supervise
