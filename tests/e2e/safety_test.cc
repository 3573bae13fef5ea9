// `free` signals nothing outside the plan (issue 9, D1 and D10): cgroup.kill only when
// a cgroup's whole subtree is targets, never an impostor that took a target's pid inside
// the cgroup, never a respawning parent unless asked, never a protected supervisor.
// Real processes, real cgroups (skipped where cgroup v2 is not writable), real signals.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"
#include "proc/cgroup_fs.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace safety_test {

namespace fs = std::filesystem;

// A cgroup of the test's own, removed (with anything below it) at the end. Members
// are the test's own processes; they are killed by pid before the directories go.
class TestCgroup {
 public:
  static std::optional<TestCgroup> make(const std::string& name) {
    auto mount = proc::cgroup2_mount("/proc");
    if (!mount) return std::nullopt;
    std::string dir = mount->mount_point + "/gpureap-e2e-" + std::to_string(::getpid()) + "-" +
                      name;
    if (::mkdir(dir.c_str(), 0755) != 0) return std::nullopt;
    TestCgroup g(dir);
    if (!proc::cgroup_kill_available(dir)) return std::nullopt;
    return g;
  }
  TestCgroup(TestCgroup&& o) noexcept : dir_(std::move(o.dir_)) { o.dir_.clear(); }
  ~TestCgroup() {
    if (dir_.empty()) return;
    // Leaves first: every directory below, deepest first.
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec)) dirs.push_back(it->path());
    std::sort(dirs.begin(), dirs.end(), [](auto& a, auto& b) { return a.size() > b.size(); });
    dirs.push_back(dir_);
    for (const auto& d : dirs) ::rmdir(d.c_str());
  }
  const std::string& dir() const { return dir_; }
  std::string child(const std::string& name) const {
    std::string d = dir_ + "/" + name;
    ::mkdir(d.c_str(), 0755);
    return d;
  }
  static bool move(const std::string& dir, pid_t pid) {
    std::ofstream out(dir + "/cgroup.procs");
    out << pid << std::flush;
    return static_cast<bool>(out);
  }

 private:
  explicit TestCgroup(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// A child of the test that only sleeps (the innocent bystander).
pid_t start_sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", "300", nullptr);
    ::_exit(127);
  }
  return pid;
}

void kill_child(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);  // our own child, not yet reaped: the pid is still ours
  ::waitpid(pid, nullptr, 0);
}

bool any_action_via(const nlohmann::json& j, const std::string& prefix) {
  for (const auto& a : j["actions"])
    if (a["via"].get<std::string>().starts_with(prefix)) return true;
  return false;
}

std::string all_notes(const nlohmann::json& j) {
  std::string s;
  for (const auto& n : j["notes"]) s += n.get<std::string>() + "\n";
  return s;
}

TEST(Safety, WholeCgroupOfTargetsIsKilledAtOnce) {
  auto cg = TestCgroup::make("whole");
  if (!cg) GTEST_SKIP() << "no writable cgroup v2 with cgroup.kill here";
  SimNode node;
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i)
    for (pid_t p : node.hold({"--gpu", "1", "--bytes", "4GiB"}).pids) pids.push_back(p);
  for (pid_t p : pids) ASSERT_TRUE(TestCgroup::move(cg->dir(), p));
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "1", "--grace", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = r.json();
  EXPECT_TRUE(any_action_via(j, "cgroup.kill")) << j["actions"].dump(1);
  EXPECT_TRUE(j["notes"].empty()) << j["notes"].dump();
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
}

// D1: cgroup.kill acts on the whole subtree; an innocent process in a child cgroup of
// the target's cgroup was killed in 20/20 runs.
TEST(Safety, InnocentInAChildCgroupSurvivesAndIsNamed) {
  auto cg = TestCgroup::make("parent");
  if (!cg) GTEST_SKIP() << "no writable cgroup v2 with cgroup.kill here";
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "4GiB"});
  for (pid_t p : held.pids) ASSERT_TRUE(TestCgroup::move(cg->dir(), p));
  pid_t innocent = start_sleeper();
  ASSERT_TRUE(TestCgroup::move(cg->child("child"), innocent));

  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "1", "--grace", "0"});
  bool innocent_alive = alive(innocent);
  kill_child(innocent);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(innocent_alive) << "the process in the child cgroup was killed\n" << r.out;
  auto j = r.json();
  EXPECT_FALSE(any_action_via(j, "cgroup.kill")) << j["actions"].dump(1);
  std::string notes = all_notes(j);
  EXPECT_NE(notes.find("cgroup.kill not used"), std::string::npos) << notes;
  EXPECT_NE(notes.find("pid " + std::to_string(innocent)), std::string::npos) << notes;
  EXPECT_NE(notes.find("not in the plan"), std::string::npos) << notes;
  for (pid_t p : held.pids) EXPECT_FALSE(alive(p)) << p;

  // The text report says it too.
  auto held2 = node.hold({"--gpu", "1", "--bytes", "4GiB"});
  for (pid_t p : held2.pids) ASSERT_TRUE(TestCgroup::move(cg->dir(), p));
  pid_t innocent2 = start_sleeper();
  ASSERT_TRUE(TestCgroup::move(cg->dir() + "/child", innocent2));
  auto t = node.gpureap({"free", "--yes", "--gpu", "1", "--grace", "0"});
  bool alive2 = alive(innocent2);
  kill_child(innocent2);
  EXPECT_TRUE(alive2) << t.out;
  EXPECT_NE(t.out.find("Note: cgroup.kill not used"), std::string::npos) << t.out;
}

// D1: a process that takes an exited target's pid inside the target's cgroup (forced
// with clone3 set_tid + CLONE_INTO_CGROUP between SIGTERM and SIGKILL) is never killed.
// Returns the number of trials in which the impostor was signalled.
int reused_pid_in_cgroup_trials(int trials) {
  if (::geteuid() != 0) {
    ADD_FAILURE() << "needs root";  // callers skip first
    return 0;
  }
  auto cg = TestCgroup::make("reuse");
  if (!cg) return -1;
  int cgfd = ::open(cg->dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgfd < 0) return -1;
  SimNode node;
  int wrong = 0;
  for (int i = 0; i < trials; ++i) {
    // A dies of SIGTERM (our own child, so we can reap it); B ignores SIGTERM, so the
    // cgroup still has a live target when the SIGKILL phase comes.
    auto a = node.hold({"--gpu", "1", "--bytes", "1GiB"}, /*foreground=*/true);
    auto b = node.hold({"--gpu", "1", "--bytes", "1GiB", "--ignore-term"});
    EXPECT_TRUE(TestCgroup::move(cg->dir(), a.leader));
    for (pid_t p : b.pids) EXPECT_TRUE(TestCgroup::move(cg->dir(), p));
    CommandResult r;
    std::thread run([&] {
      r = node.gpureap({"free", "--json", "--yes", "--gpu", "1", "--grace", "400ms",
                        "--timeout", "5s"});
    });
    ::waitpid(a.leader, nullptr, 0);  // A exits on gpureap's SIGTERM
    struct clone_args args {};
    pid_t tid[1] = {a.leader};
    args.flags = CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(cgfd);
    args.set_tid = reinterpret_cast<std::uint64_t>(tid);
    args.set_tid_size = 1;
    args.exit_signal = SIGCHLD;
    long c = ::syscall(SYS_clone3, &args, sizeof args);
    if (c == 0) {
      ::pause();
      ::_exit(0);
    }
    run.join();
    pid_t impostor = static_cast<pid_t>(c);
    if (impostor != a.leader) {
      ADD_FAILURE() << "clone3 set_tid failed in trial " << i << ": " << c;
      if (impostor > 0) kill_child(impostor);
      break;
    }
    if (!alive(impostor)) {
      ++wrong;
      ADD_FAILURE() << "trial " << i << ": the impostor was killed\n" << r.out;
    }
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (pid_t p : b.pids) EXPECT_FALSE(alive(p));
    kill_child(impostor);
  }
  ::close(cgfd);
  return wrong;
}

bool clone3_set_tid_works() {
  if (::geteuid() != 0) return false;
  struct clone_args args {};
  args.exit_signal = SIGCHLD;
  pid_t tid[1] = {1};  // pid 1 is taken: EEXIST means set_tid is understood and permitted
  args.set_tid = reinterpret_cast<std::uint64_t>(tid);
  args.set_tid_size = 1;
  long c = ::syscall(SYS_clone3, &args, sizeof args);
  if (c == 0) ::_exit(0);
  if (c > 0) ::waitpid(static_cast<pid_t>(c), nullptr, 0);
  return c < 0 && errno == EEXIST;
}

TEST(Safety, PidReusedInsideTheTargetCgroupIsNeverKilled) {
  if (!clone3_set_tid_works()) GTEST_SKIP() << "clone3 set_tid needs root (CAP_SYS_ADMIN)";
  int wrong = reused_pid_in_cgroup_trials(5);
  if (wrong < 0) GTEST_SKIP() << "no writable cgroup v2 with cgroup.kill here";
  EXPECT_EQ(wrong, 0);
}

// The stress label (`make stress`, also part of `make test`): 100 trials, or
// $GPUREAP_STRESS_TRIALS (bench/reuse_stress.sh runs 10,000).
TEST(Stress, PidReusedInsideTheTargetCgroupIsNeverKilled) {
  if (!clone3_set_tid_works()) GTEST_SKIP() << "clone3 set_tid needs root (CAP_SYS_ADMIN)";
  const char* n = std::getenv("GPUREAP_STRESS_TRIALS");
  const int trials = n && std::atoi(n) > 0 ? std::atoi(n) : 100;
  int wrong = reused_pid_in_cgroup_trials(trials);
  std::cout << "trials " << trials << ", impostors killed " << std::max(wrong, 0) << "\n";
  if (wrong < 0) GTEST_SKIP() << "no writable cgroup v2 with cgroup.kill here";
  EXPECT_EQ(wrong, 0);
}

// A retry loop: `while :; do <holder>; done`, started by the test in a session (and
// process group) of its own; `comm` comes from the name the shell is executed as.
struct RetryLoop {
  pid_t pid = 0;
  RetryLoop(const SimNode& node, const std::string& shell_path, unsigned gpu) {
    std::string loop = std::string("while :; do '") + GPUREAP_SIM_BIN + "' hold --dir '" +
                       node.dir() + "' --gpu " + std::to_string(gpu) + " --bytes 2GiB; done";
    auto env = node.env();
    pid = ::fork();
    if (pid == 0) {
      ::setsid();
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::execl(shell_path.c_str(), shell_path.c_str(), "-c", loop.c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~RetryLoop() {
    // The loop's session is ours (setsid above): end the loop and its current holder.
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

bool gpu_used_above(const SimNode& node, unsigned gpu, std::uint64_t bytes) {
  auto s = node.gpureap({"--json", "status", "--gpu", std::to_string(gpu)});
  if (s.exit_code != 0) return false;
  auto j = s.json();
  return !j["gpus"].empty() && j["gpus"][0]["memory"]["used_bytes"].get<std::uint64_t>() > bytes;
}

// D10: a parent seen respawning killed holders is reported with the command that
// stops it, and left alone unless asked (--stop-respawners) or named (--pid).
TEST(Safety, RetryLoopParentIsReportedAndLeftAlone) {
  SimNode node;
  RetryLoop loop(node, "/bin/bash", 1);
  ASSERT_TRUE(SimNode::eventually([&] { return gpu_used_above(node, 1, 1ull << 30); }));
  auto r = node.gpureap(
      {"free", "--json", "--yes", "--gpu", "1", "--grace", "1s", "--timeout", "3s"});
  EXPECT_TRUE(alive(loop.pid)) << "the retry loop was signalled\n" << r.out;
  auto j = r.json();
  for (const auto& a : j["actions"]) EXPECT_NE(a["pid"], loop.pid) << a.dump();
  ASSERT_FALSE(j["respawners"].empty()) << j.dump(1);
  EXPECT_EQ(j["respawners"][0]["pid"], loop.pid);
  EXPECT_FALSE(j["respawners"][0]["included"]);
  EXPECT_NE(j["respawners"][0]["stop_hint"].get<std::string>().find("--stop-respawners"),
            std::string::npos);
  EXPECT_NE(r.exit_code, 0) << "the loop keeps the GPU held: no verdict of free";
}

TEST(Safety, RetryLoopIsStoppedOnlyWithStopRespawners) {
  SimNode node;
  RetryLoop loop(node, "/bin/bash", 2);
  ASSERT_TRUE(SimNode::eventually([&] { return gpu_used_above(node, 2, 1ull << 30); }));
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "2", "--grace", "1s", "--timeout",
                         "10s", "--stop-respawners"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(loop.pid); }, std::chrono::seconds(10)));
  auto j = r.json();
  ASSERT_FALSE(j["respawners"].empty()) << j.dump(1);
  EXPECT_TRUE(j["respawners"][0]["included"]);
}

// D10: a supervisor (here a loop that runs as `containerd-shim`) is protected even with
// --stop-respawners, and the report says so.
TEST(Safety, ProtectedSupervisorSurvivesEvenWithStopRespawners) {
  SimNode node;
  std::string shim = node.dir() + "/containerd-shim";
  ASSERT_EQ(::symlink("/bin/bash", shim.c_str()), 0);
  RetryLoop loop(node, shim, 3);
  ASSERT_TRUE(SimNode::eventually([&] { return gpu_used_above(node, 3, 1ull << 30); }));
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "3", "--grace", "1s", "--timeout",
                         "3s", "--stop-respawners"});
  EXPECT_TRUE(alive(loop.pid)) << "containerd-shim was signalled\n" << r.out;
  auto j = r.json();
  ASSERT_FALSE(j["respawners"].empty()) << j.dump(1);
  EXPECT_EQ(j["respawners"][0]["comm"], "containerd-shim");
  EXPECT_FALSE(j["respawners"][0]["included"]);
  EXPECT_NE(j["respawners"][0]["stop_hint"].get<std::string>().find("protected"),
            std::string::npos)
      << j["respawners"].dump();
}

}  // namespace
}  // namespace gpureap::e2e
