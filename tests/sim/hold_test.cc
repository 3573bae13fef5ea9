// Holder shapes: real process trees, checked through /proc and the stand-in NVML.

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "sim/proc_stat.h"
#include "sim_test_support.h"

namespace simtest {
namespace {

using namespace std::chrono_literals;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string status_line(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key + ":")) return line;
  return "";
}

TEST(SimHold, OrphanedWorkersAreReparentedAndKeepTheirGpus) {
  SimNode node;
  Nvml nvml;
  auto h = node.hold({"--gpu", "0", "--children", "4", "--bytes", "10GiB", "--orphan"});
  ASSERT_EQ(h.holders.size(), 4U);
  EXPECT_EQ(h.leader, h.invoker);
  EXPECT_EQ(h.pids.size(), 5U);  // server + 4 workers
  int status = 0;
  ASSERT_EQ(::waitpid(h.invoker, &status, 0), h.invoker);  // the server died...
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  std::set<unsigned> gpus;
  for (const auto& w : h.holders) {
    gpus.insert(w.gpu);
    EXPECT_TRUE(alive(w.pid));
    EXPECT_EQ(ppid_of(w.pid), ::getpid());  // ...and its workers came to us (subreaper)
    auto st = gpureap::sim::read_proc_stat(w.pid);
    EXPECT_EQ(st->pgrp, h.leader);  // still in the dead server's process group
  }
  EXPECT_EQ(gpus, (std::set<unsigned>{0, 1, 2, 3}));
  for (unsigned g = 0; g < 4; ++g) EXPECT_EQ(nvml.used(g), kBaseline + 10 * kGiB);
  ASSERT_EQ(node.sim({"cleanup", "--dir", node.dir()}).exit_code, 0);
  for (unsigned g = 0; g < 4; ++g) EXPECT_EQ(nvml.used(g), kBaseline);
  for (const auto& w : h.holders) EXPECT_FALSE(alive(w.pid));
}

TEST(SimHold, DetachedOrphanAndDaemonOrphanLeaveOnlyWorkers) {
  SimNode node({"--gpus", "8", "--memory", "96GiB"});
  Nvml nvml;
  auto d = node.hold({"--gpu", "0", "--children", "4", "--bytes", "2GiB", "--orphan", "--detach"});
  auto dm = node.hold({"--gpu", "4", "--children", "4", "--bytes", "2GiB", "--orphan", "--daemon"});
  for (const auto* h : {&d, &dm}) {
    ASSERT_EQ(h->holders.size(), 4U);
    EXPECT_FALSE(alive(h->leader));  // the server is dead by the time the line is printed
    for (const auto& w : h->holders) EXPECT_TRUE(alive(w.pid));
  }
  for (unsigned g = 0; g < 8; ++g) EXPECT_EQ(nvml.used(g), kBaseline + 2 * kGiB);
}

TEST(SimHold, ZombieLeaderWithALiveThreadStillHolds) {
  SimNode node;
  Nvml nvml;
  auto h = node.hold({"--gpu", "1", "--bytes", "3GiB", "--zombie-leader", "--detach"});
  ASSERT_EQ(h.holders.size(), 1U);
  pid_t pid = h.holders[0].pid;
  ASSERT_TRUE(eventually([&] { return state_of(pid) == 'Z'; }));
  EXPECT_GE(threads_of(pid), 2);
  EXPECT_EQ(status_line(pid, "State"), "State:\tZ (zombie)");
  EXPECT_TRUE(
      std::filesystem::is_empty("/proc/" + std::to_string(pid) + "/fd"));  // fuser's blind spot
  EXPECT_EQ(nvml.used(1), kBaseline + 3 * kGiB);
  auto procs = nvml.processes(1);
  ASSERT_EQ(procs->size(), 1U);
  EXPECT_EQ((*procs)[0].first, static_cast<unsigned>(pid));
  ASSERT_EQ(node.sim({"cleanup", "--dir", node.dir()}).exit_code, 0);
  EXPECT_EQ(nvml.used(1), kBaseline);
}

// The driver keeps memory while anything references its owner's device files: a child
// forked after the allocation (an inheritor) or a process that mapped it (an importer).
// NVML keeps listing the dead owner with the bytes (seen on an H100, driver 580), until
// the keeper exits.
TEST(SimHold, AKeeperKeepsADeadHoldersMemoryListedUnderTheDeadPid) {
  SimNode node;
  Nvml nvml;
  auto inh = node.hold({"--gpu", "0", "--bytes", "8GiB", "--inheritor", "--detach"});
  auto imp = node.hold({"--gpu", "1", "--bytes", "4GiB", "--ipc-importer", "--detach"});
  for (const auto* h : {&inh, &imp}) {
    ASSERT_EQ(h->holders.size(), 1U);
    ASSERT_NE(h->keeper, 0);
    EXPECT_FALSE(alive(h->holders[0].pid));  // the owner is dead and reaped
    EXPECT_TRUE(alive(h->keeper));
  }
  // The inheritor stays in the dead owner's process group with its descriptors; the
  // importer leads a session of its own and maps the allocation.
  EXPECT_EQ(gpureap::sim::read_proc_stat(inh.keeper)->pgrp, inh.holders[0].pid);
  EXPECT_EQ(gpureap::sim::read_proc_stat(imp.keeper)->session, imp.keeper);
  EXPECT_NE(read_text("/proc/" + std::to_string(imp.keeper) + "/maps")
                .find(fmt::format("g1-{}-", imp.holders[0].pid)),
            std::string::npos);
  // The inheritor's owner stays listed, dead; the importer is listed with its own context
  // and, once the exporter is dead, the imported bytes (as on an H100, driver 580).
  EXPECT_EQ(nvml.used(0), kBaseline + inh.holders[0].bytes);
  auto procs = nvml.processes(0);
  ASSERT_EQ(procs->size(), 1U);
  EXPECT_EQ((*procs)[0], std::make_pair(static_cast<unsigned>(inh.holders[0].pid), 8 * kGiB));
  EXPECT_EQ(nvml.used(1), kBaseline + 4 * kGiB + 512 * kMiB);
  procs = nvml.processes(1);
  ASSERT_EQ(procs->size(), 1U);
  EXPECT_EQ((*procs)[0], std::make_pair(static_cast<unsigned>(imp.keeper), 4 * kGiB + 512 * kMiB));
  // The keeper's exit releases it.
  for (pid_t k : {inh.keeper, imp.keeper}) {
    ASSERT_EQ(::kill(k, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return !alive(k); }));
  }
  EXPECT_EQ(nvml.used(0), kBaseline);
  EXPECT_EQ(nvml.used(1), kBaseline);
  EXPECT_EQ(nvml.processes(0)->size(), 0U);
}

// --holder-lives: the exporter lives until killed. While both live NVML lists each with its
// own bytes; the exporter killed, its bytes move to the importer's entry and the exporter
// is listed no more (as on an H100: exporter 8802 MiB and importer 610 MiB, then the
// importer alone at 8802 MiB), which is the moment an agent witnesses the import.
TEST(SimHold, AnExportersBytesMoveToTheImporterWhenItDies) {
  SimNode node;
  Nvml nvml;
  auto imp = node.hold({"--gpu", "1", "--bytes", "4GiB", "--ipc-importer", "--holder-lives", "--detach"});
  ASSERT_EQ(imp.holders.size(), 1U);
  const pid_t exporter = imp.holders[0].pid;
  ASSERT_TRUE(alive(exporter));
  auto procs = nvml.processes(1);
  ASSERT_EQ(procs->size(), 2U);
  std::map<unsigned, std::uint64_t> listed(procs->begin(), procs->end());
  EXPECT_EQ(listed[static_cast<unsigned>(exporter)], 4 * kGiB);
  EXPECT_EQ(listed[static_cast<unsigned>(imp.keeper)], 512 * kMiB);
  ASSERT_EQ(::kill(exporter, SIGKILL), 0);  // ours: this test's hold
  ASSERT_TRUE(eventually([&] { return !alive(exporter); }));
  procs = nvml.processes(1);
  ASSERT_EQ(procs->size(), 1U);
  EXPECT_EQ((*procs)[0], std::make_pair(static_cast<unsigned>(imp.keeper), 4 * kGiB + 512 * kMiB));
  EXPECT_EQ(nvml.used(1), kBaseline + 4 * kGiB + 512 * kMiB);
  ASSERT_EQ(::kill(imp.keeper, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return !alive(imp.keeper); }));
  EXPECT_EQ(nvml.used(1), kBaseline);
}

TEST(SimHold, RespawnReplacesAKilledWorkerOnTheSameGpu) {
  SimNode node;
  Nvml nvml;
  auto h = node.hold({"--gpu", "2", "--children", "2", "--bytes", "1GiB", "--respawn",
                      "--respawn-limit", "1", "--detach"});
  ASSERT_EQ(h.holders.size(), 2U);
  auto victim = h.holders[0].gpu == 2 ? h.holders[0] : h.holders[1];
  ASSERT_TRUE(node.signal(victim.pid, SIGKILL));
  pid_t replacement = 0;
  ASSERT_TRUE(eventually([&] {
    auto p = nvml.processes(2);
    if (!p || p->size() != 1 || (*p)[0].first == static_cast<unsigned>(victim.pid)) return false;
    replacement = static_cast<pid_t>((*p)[0].first);
    return true;
  }));
  EXPECT_EQ(nvml.used(2), kBaseline + kGiB);
  EXPECT_EQ(ppid_of(replacement), h.leader);
  // The limit was one respawn: the next death is final.
  ASSERT_TRUE(node.signal(replacement, SIGKILL));
  ASSERT_TRUE(eventually([&] { return nvml.used(2) == kBaseline; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(nvml.used(2), kBaseline);
}

TEST(SimHold, DetachReturnsAtOnceAndDaemonLeavesTheSession) {
  SimNode node;
  Nvml nvml;
  auto d = node.hold({"--gpu", "0", "--bytes", "2GiB", "--detach"});
  int status = -1;
  ASSERT_EQ(::waitpid(d.invoker, &status, 0), d.invoker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(d.leader, d.invoker);
  EXPECT_TRUE(alive(d.leader));

  auto dm = node.hold({"--gpu", "1", "--bytes", "2GiB", "--daemon"});
  ASSERT_EQ(::waitpid(dm.invoker, &status, 0), dm.invoker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(dm.holders.size(), 1U);
  pid_t daemon = dm.holders[0].pid;
  EXPECT_EQ(dm.leader, daemon);
  EXPECT_EQ(dm.pids.size(), 2U);  // the launcher that exited, and the daemon
  auto st = gpureap::sim::read_proc_stat(daemon);
  ASSERT_TRUE(st);
  EXPECT_NE(st->session, gpureap::sim::read_proc_stat(::getpid())->session);
  EXPECT_NE(st->session, daemon);  // double fork: not a session leader
  EXPECT_EQ(nvml.used(1), kBaseline + 2 * kGiB);
}

TEST(SimHold, IgnoreTermNeedsSigkill) {
  SimNode node;
  auto h = node.hold({"--gpu", "0", "--bytes", "1GiB", "--ignore-term", "--detach"});
  pid_t pid = h.holders.at(0).pid;
  ASSERT_TRUE(node.signal(pid, SIGTERM));
  EXPECT_FALSE(eventually([&] { return !alive(pid); }, 200ms));
  ASSERT_TRUE(node.signal(pid, SIGKILL));
  EXPECT_TRUE(eventually([&] { return !alive(pid); }));
}

TEST(SimHold, ForkStormChildrenInheritTheDeviceFds) {
  SimNode node;
  auto h = node.hold({"--gpu", "0", "--bytes", "1GiB", "--forks-per-second", "50", "--detach"});
  pid_t holder = h.holders.at(0).pid;
  std::string gpu_node = node.dir() + "/dev/nvidia0";
  ASSERT_TRUE(eventually([&] {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      pid_t p = std::atoi(e.path().filename().c_str());
      if (p <= 0 || p == holder || ppid_of(p) != holder) continue;
      std::error_code ec;
      for (const auto& fd : std::filesystem::directory_iterator(e.path() / "fd", ec))
        if (std::filesystem::read_symlink(fd.path(), ec) == gpu_node) return true;
    }
    return false;
  }));
}

TEST(SimHold, CommClientOnlyAndPidNamespace) {
  SimNode node;
  Nvml nvml;
  auto c = node.hold({"--gpu", "0", "--client-only", "--comm", "nv-hostengine", "--detach"});
  pid_t client = c.holders.at(0).pid;
  EXPECT_EQ(read_text("/proc/" + std::to_string(client) + "/comm"), "nv-hostengine\n");
  EXPECT_EQ(nvml.used(0), kBaseline);        // a monitoring client holds nothing...
  EXPECT_EQ(nvml.processes(0)->size(), 0U);  // ...and is not a compute process
  auto p =
      node.hold({"--gpu", "1", "--bytes", "1GiB", "--comm", "nvidia-persistenced", "--detach"});
  EXPECT_EQ(read_text("/proc/" + std::to_string(p.holders.at(0).pid) + "/comm"),
            "nvidia-persiste\n");  // TASK_COMM_LEN, as the kernel truncates it

  if (::geteuid() != 0) GTEST_SKIP() << "--pidns needs root";
  auto ns = node.hold({"--gpu", "2", "--bytes", "1GiB", "--pidns", "--detach"});
  pid_t inner = ns.holders.at(0).pid;
  EXPECT_EQ(status_line(inner, "NSpid"), "NSpid:\t" + std::to_string(inner) + "\t1");
  EXPECT_EQ(nvml.processes(2)->at(0).first, static_cast<unsigned>(inner));  // host pid
  // SIGTERM from outside reaches the namespace's init (it installs a handler).
  ASSERT_TRUE(node.signal(inner, SIGTERM));
  EXPECT_TRUE(eventually([&] { return nvml.used(2) == kBaseline; }));
}

std::optional<std::string> cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    auto dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream f(line);
    std::string id, parent, dev, root, mount;
    f >> id >> parent >> dev >> root >> mount;
    return mount;
  }
  return std::nullopt;
}

TEST(SimHold, CgroupHoldsTheWholeTreeAndIsRemovedByCleanup) {
  auto mount = cgroup2_mount();
  if (!mount || ::access(mount->c_str(), W_OK) != 0) GTEST_SKIP() << "no writable cgroup2 mount";
  SimNode node;
  std::string name = "gpureap-sim-test-" + std::to_string(::getpid());
  auto h =
      node.hold({"--gpu", "0", "--children", "2", "--bytes", "1GiB", "--cgroup", name, "--detach"});
  ASSERT_EQ(h.holders.size(), 2U);
  for (pid_t p : h.pids) {
    if (!alive(p)) continue;
    EXPECT_NE(read_text("/proc/" + std::to_string(p) + "/cgroup").find("0::/" + name + "\n"),
              std::string::npos);
  }
  ASSERT_EQ(node.sim({"cleanup", "--dir", node.dir()}).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(*mount + "/" + name));
}

TEST(SimHold, RejectsContradictionsWithAClearError) {
  SimNode node;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--gpu", "0", "--bytes", "20"}, "unit"},
      {{"--gpu", "9", "--bytes", "1GiB"}, "does not exist"},
      {{"--gpu", "2", "--children", "4", "--bytes", "1GiB"}, "--same-gpu"},
      {{"--gpu", "0"}, "--bytes is required"},
      {{"--gpu", "0", "--bytes", "1GiB", "--orphan"}, "needs --children"},
      {{"--gpu", "0", "--bytes", "1GiB", "--stuck", "--release-delay", "1s"}, "contradict"},
      {{"--gpu", "0", "--bytes", "200GiB"}, "does not fit"},
      {{"--gpu", "0", "--bytes", "1GiB", "--inheritor", "--ipc-importer"}, "give one"},
      {{"--gpu", "0", "--children", "2", "--bytes", "1GiB", "--inheritor"}, "keeps one holder"},
      {{"--gpu", "0", "--bytes", "1GiB", "--holder-lives"}, "--holder-lives needs"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"hold", "--dir", node.dir()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = node.sim(args);
    EXPECT_EQ(r.exit_code, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  auto r = node.sim({"node", "--dir", node.dir()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  r = node.sim({"mode", "--dir", node.dir(), "explode"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown mode"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace simtest
