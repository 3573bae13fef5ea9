#include "proc/holder_scan.h"
#include "proc/lineage.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "proc/proc_parse.h"
#include "proc/process_handle.h"
#include "proc/process_table.h"
#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using testing::Children;
using testing::park;
using testing::signal_ready;
using testing::SimulatedDevDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string self_comm() {
  std::string c = slurp("/proc/self/comm");
  if (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

class HolderScan : public ::testing::Test {
 protected:
  void SetUp() override {
    auto set = discover_devices(dev_.dir(), "/proc");
    ASSERT_TRUE(set);
    devices_ = std::move(*set);
  }

  // The real /proc unless a test names another (ScanOptions has no default root).
  ScanResult scan(ScanOptions opts = {}) {
    if (opts.proc_root.empty()) opts.proc_root = "/proc";
    opts.devices = &devices_;
    return scan_holders(opts);
  }

  static const Holder* find(const ScanResult& r, pid_t pid) {
    for (const auto& h : r.holders)
      if (h.id.pid == pid) return &h;
    return nullptr;
  }

  std::set<std::string> paths(const Holder& h) const {
    std::set<std::string> out;
    for (const auto& n : h.nodes) out.insert(n.path);
    return out;
  }

  int open_node(const std::string& name, int flags = O_RDONLY) const {
    return ::open(dev_.path(name).c_str(), flags);  // no O_CLOEXEC: children keep it
  }

  SimulatedDevDir dev_;
  DeviceSet devices_;
  Children children_;
};

TEST_F(HolderScan, FdHolderHasEveryField) {
  pid_t pid = children_.spawn([&](int ready) {
    ::prctl(PR_SET_NAME, "gr fd (holder)");
    open_node("nvidia0");
    open_node("nvidiactl");
    signal_ready(ready);
    park();
  });
  children_.ready(pid);
  ASSERT_TRUE(testing::wait_state(pid, 'S'));  // parked in pause(), not still on its way

  ScanResult r = scan();
  const Holder* h = find(r, pid);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->id, read_process_id(pid, "/proc").value());
  EXPECT_EQ(h->uid, ::getuid());
  passwd* pw = ::getpwuid(::getuid());
  EXPECT_EQ(h->user, pw ? std::string(pw->pw_name) : std::to_string(::getuid()));
  EXPECT_EQ(h->state, 'S');
  EXPECT_FALSE(h->zombie_leader);
  EXPECT_EQ(h->ppid, ::getpid());
  EXPECT_EQ(h->pgid, ::getpgrp());
  EXPECT_EQ(h->sid, ::getsid(0));
  EXPECT_FALSE(h->orphaned) << h->orphan_reason;
  EXPECT_EQ(h->orphan_reason, "");
  std::string cgroup = pick_cgroup_path(parse_cgroup(slurp("/proc/self/cgroup")));
  EXPECT_EQ(h->cgroup, cgroup);
  EXPECT_EQ(h->container, container_hint(cgroup));
  ASSERT_FALSE(h->nspid.empty());
  EXPECT_EQ(h->nspid.front(), pid);
  EXPECT_EQ(h->comm, "gr fd (holder)");
  EXPECT_EQ(h->cmdline, read_cmdline(::getpid(), "/proc"));  // forked, not exec'ed
  EXPECT_GE(h->age_seconds, 0.0);
  EXPECT_LT(h->age_seconds, 30.0);
  EXPECT_EQ(h->found_by, std::set<FoundBy>{FoundBy::fd});
  EXPECT_EQ(paths(*h), (std::set<std::string>{dev_.path("nvidia0"), dev_.path("nvidiactl")}));
  EXPECT_EQ(h->gpu_minors, std::set<unsigned>{0});
  ASSERT_EQ(h->threads.size(), 1u);
  EXPECT_EQ(h->threads[0].tid, pid);
  EXPECT_EQ(h->threads[0].state, 'S');
  EXPECT_GT(r.processes_scanned, 1u);
  for (const auto& p : r.problems) EXPECT_NE(p.pid, pid) << p.what;

  // The test process itself holds nothing: only the child is found.
  EXPECT_EQ(find(r, ::getpid()), nullptr);
}

TEST_F(HolderScan, MappingOnlyHolderIsFoundThroughMaps) {
  pid_t pid = children_.spawn([&](int ready) {
    int fd = open_node("nvidia1", O_RDWR);
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);  // the mapping alone keeps the file (and a GPU client) alive
    signal_ready(ready, p == MAP_FAILED ? "mmap failed" : "");
    park();
  });
  ASSERT_EQ(children_.ready(pid), "");

  const Holder* h = nullptr;
  ScanResult r = scan();
  h = find(r, pid);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->found_by, std::set<FoundBy>{FoundBy::mapping});
  EXPECT_EQ(paths(*h), std::set<std::string>{dev_.path("nvidia1")});
  EXPECT_EQ(h->gpu_minors, std::set<unsigned>{1});

  // Without maps the mapping-only holder is invisible: the option is a trade-off.
  ScanOptions fds_only;
  fds_only.read_maps = false;
  EXPECT_EQ(find(scan(fds_only), pid), nullptr);
}

TEST_F(HolderScan, ZombieLeaderIsFoundThroughItsLiveThread) {
  pid_t pid = children_.spawn([&](int ready) {
    open_node("nvidia-uvm");
    int fd = open_node("nvidia0", O_RDWR);
    void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    (void)p;
    testing::become_zombie_leader(ready);
  });
  children_.ready(pid);
  ASSERT_TRUE(testing::wait_state(pid, 'Z'));

  ScanResult r = scan();
  const Holder* h = find(r, pid);
  ASSERT_NE(h, nullptr) << "zombie leader with a live thread must be a holder";
  EXPECT_TRUE(h->zombie_leader);
  EXPECT_EQ(h->state, 'Z');
  EXPECT_EQ(h->found_by, (std::set<FoundBy>{FoundBy::fd, FoundBy::mapping}));
  EXPECT_EQ(paths(*h), (std::set<std::string>{dev_.path("nvidia-uvm"), dev_.path("nvidia0")}));
  EXPECT_EQ(h->gpu_minors, std::set<unsigned>{0});
  ASSERT_EQ(h->threads.size(), 2u);
  EXPECT_EQ(h->threads[0].tid, pid);
  EXPECT_EQ(h->threads[0].state, 'Z');
  EXPECT_NE(h->threads[1].state, 'Z');
  EXPECT_EQ(h->cmdline, "[" + h->comm + "]");  // a zombie leader's cmdline reads empty
}

TEST_F(HolderScan, PureZombieHoldsNothing) {
  pid_t pid = children_.spawn([&](int ready) {
    open_node("nvidia0");
    signal_ready(ready);
    // returning _exits: every thread is gone, fds are closed
  });
  children_.ready(pid);
  children_.wait_zombie(pid);
  ASSERT_EQ(testing::state_of(pid), 'Z');

  ScanResult r = scan();
  EXPECT_EQ(find(r, pid), nullptr);
  for (const auto& p : r.problems) EXPECT_NE(p.pid, pid) << p.what;
}

TEST_F(HolderScan, WorkerAdoptedBySubreaperFromAnotherSessionIsReparented) {
  // The launcher makes its own session (as gpureap run's, or a supervisor's, does),
  // forks the worker and dies; the worker is re-parented to us, a subreaper in
  // another session: adopted. One worker with no title and no dead parent seen.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  struct Unset {
    ~Unset() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } unset;
  const pid_t self = ::getpid();
  pid_t launcher = children_.spawn([&](int ready) {
    ::setsid();
    const pid_t launcher_pid = ::getpid();
    pid_t worker = ::fork();
    if (worker == 0) {
      open_node("nvidia1");
      // No death signal yet: it would fire when the launcher exits. Set it
      // once adopted by the test, so the worker still dies with the test.
      while (::getppid() == launcher_pid) ::usleep(1000);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) ::_exit(1);
      signal_ready(ready, std::to_string(::getpid()));
      park();
    }
    // returning _exits the launcher
  });
  children_.reap(launcher);
  pid_t worker = std::stoi(children_.ready(launcher));
  children_.adopt(worker);  // now our child (we are its subreaper)

  ScanResult r = scan();
  const Holder* h = find(r, worker);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->ppid, self);
  EXPECT_EQ(h->sid, launcher);
  EXPECT_TRUE(h->reparented);
  EXPECT_EQ(h->reparent_reason, fmt::format("adopted by {} (pid {}), outside its session {}",
                                            self_comm(), self, launcher));
  // Its group's leader (the launcher) is gone, and one look cannot tell a killed server
  // from a launcher that exited: orphaned on weak evidence only (the verdict is the
  // look's, inventory::join_look's: the scan reads the facts).
  classify_lineage(r.holders, {}, 0);
  h = find(r, worker);
  EXPECT_TRUE(h->orphaned) << h->detached_reason;
  EXPECT_EQ(h->orphan_evidence, OrphanEvidence::group);
}

TEST_F(HolderScan, PipelineWhoseFirstCommandExitedIsNotReparented) {
  // W2-08: `cat prompts | python infer.py` under job control: the shell (us) forks
  // the group leader (cat) and the holder into cat's group; cat exits. The holder's
  // parent is its live starter, in its session: attached, neither orphaned nor
  // detached, though its group leader is gone.
  pid_t leader = children_.spawn([&](int ready) {
    ::setpgid(0, 0);
    signal_ready(ready);
    park();
  });
  children_.ready(leader);
  pid_t holder = children_.spawn([&](int ready) {
    ::setpgid(0, leader);
    open_node("nvidia1");
    signal_ready(ready);
    park();
  });
  children_.ready(holder);
  ::kill(leader, SIGKILL);
  children_.reap(leader);

  ScanResult r = scan();
  const Holder* h = find(r, holder);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->pgid, leader);
  EXPECT_TRUE(h->group_leader_gone);
  EXPECT_FALSE(h->reparented) << h->reparent_reason;
  EXPECT_FALSE(h->orphaned) << h->orphan_reason;
  EXPECT_FALSE(h->detached) << h->detached_reason;
}

TEST_F(HolderScan, ProcessInItsOwnSession) {
  pid_t pid = children_.spawn([&](int ready) {
    ::setsid();
    open_node("nvidia1");
    signal_ready(ready);
    park();
  });
  children_.ready(pid);
  ScanResult r = scan();
  const Holder* h = find(r, pid);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->sid, pid);
  EXPECT_EQ(h->pgid, pid);
  EXPECT_NE(h->sid, ::getsid(0));
  EXPECT_FALSE(h->orphaned) << h->orphan_reason;
}

TEST_F(HolderScan, ExcludedPidsAreSkipped) {
  pid_t pid = children_.spawn([&](int ready) {
    open_node("nvidiactl");
    signal_ready(ready);
    park();
  });
  children_.ready(pid);
  ASSERT_NE(find(scan(), pid), nullptr);
  ScanOptions opts;
  opts.exclude = {pid};
  EXPECT_EQ(find(scan(opts), pid), nullptr);
}

// W3-04: a scan that runs out of descriptors says so: the processes it could not
// read are not "holding nothing", and the agent keeps its last look of them.
TEST_F(HolderScan, RunningOutOfDescriptorsIsSaidW3_04) {
  pid_t pid = children_.spawn([&](int ready) {
    open_node("nvidia0");
    signal_ready(ready);
    park();
  });
  children_.ready(pid);
  ScanOptions opts;
  opts.only_pids = std::vector<pid_t>{pid};
  opts.workers = 1;
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  // Room for /proc itself and nothing more: its fd table cannot be opened.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit tight = before;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free + 1);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  ScanResult starved = scan(opts);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
  EXPECT_TRUE(starved.out_of_descriptors);
  EXPECT_EQ(find(starved, pid), nullptr);

  ScanResult fine = scan(opts);
  EXPECT_FALSE(fine.out_of_descriptors);
  EXPECT_NE(find(fine, pid), nullptr);
}

TEST_F(HolderScan, OneAndTwoWorkersAgree) {
  std::vector<pid_t> pids;
  for (const char* node : {"nvidia0", "nvidia1", "nvidiactl"}) {
    pid_t pid = children_.spawn([&](int ready) {
      open_node(node);
      signal_ready(ready);
      park();
    });
    children_.ready(pid);
    pids.push_back(pid);
  }
  ScanOptions one, two;
  one.workers = 1;
  two.workers = 2;
  ScanResult a = scan(one), b = scan(two);
  ASSERT_EQ(a.holders.size(), b.holders.size());
  for (std::size_t i = 0; i < a.holders.size(); ++i) {
    EXPECT_EQ(a.holders[i].id, b.holders[i].id);
    EXPECT_EQ(a.holders[i].nodes, b.holders[i].nodes);
  }
  for (pid_t pid : pids) EXPECT_NE(find(b, pid), nullptr);
  EXPECT_TRUE(std::is_sorted(b.holders.begin(), b.holders.end(),
                             [](const Holder& x, const Holder& y) { return x.id < y.id; }));
}

TEST_F(HolderScan, AnotherUsersProcessIsAProblemNotAGuess) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  pid_t holder = children_.spawn([&](int ready) {
    open_node("nvidia0");
    signal_ready(ready);
    park();
  });
  children_.ready(holder);

  // A scanner running as nobody cannot read root's fd table.
  pid_t scanner = children_.spawn([&](int ready) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) {
      signal_ready(ready, "setuid failed");
      return;
    }
    ScanResult r = scan();
    std::string out;
    for (const auto& h : r.holders) out += fmt::format("H{} ", h.id.pid);
    for (const auto& p : r.problems)
      if (p.pid == holder) out += fmt::format("P{}:{} ", p.pid, p.what);
    signal_ready(ready, out);
  });
  std::string report = children_.ready(scanner);
  EXPECT_EQ(report.find(fmt::format("H{} ", holder)), std::string::npos) << report;
  EXPECT_NE(report.find(fmt::format("P{}:", holder)), std::string::npos) << report;
  EXPECT_NE(report.find("permission denied"), std::string::npos) << report;
}

TEST_F(HolderScan, NoDevicesFindsNothing) {
  DeviceSet none;
  ScanOptions opts;
  opts.proc_root = "/proc";
  opts.devices = &none;
  ScanResult r = scan_holders(opts);
  EXPECT_TRUE(r.holders.empty());
  EXPECT_EQ(r.processes_scanned, 0u);
}

TEST_F(HolderScan, MissingProcRootIsAProblem) {
  ScanOptions opts;
  opts.proc_root = dev_.path("no-proc-here");
  ScanResult r = scan(opts);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].pid, 0);
}

// A saved /proc tree (symlinked fds point at the simulated nodes): exercises
// proc_root, the uptime-based age, a process that vanished mid-scan, a kernel
// thread and a zombie leader, deterministically.
TEST_F(HolderScan, SavedProcTree) {
  namespace fs = std::filesystem;
  const fs::path root = dev_.path("proc");
  auto write = [](const fs::path& p, std::string_view text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  auto stat_line = [](pid_t pid, std::string_view comm, char state, pid_t ppid, pid_t pgid,
                      unsigned flags, int threads, unsigned long start) {
    return fmt::format("{} ({}) {} {} {} {} 0 -1 {} 0 0 0 0 0 0 0 0 20 0 {} 0 {} 0 0\n", pid, comm,
                       state, ppid, pgid, pgid, flags, threads, start);
  };
  write(root / "uptime", "1000.50 1900.00\n");
  // 100: holds nvidia1 by fd, started at 900 s (tick 90000 at 100 Hz).
  write(root / "100/stat", stat_line(100, "my server", 'S', 1, 100, 0x400000, 1, 90000));
  write(root / "100/status", "Name:\tmy server\nUid:\t1234\t1234\t1234\t1234\nNSpid:\t100\t7\n");
  write(root / "100/cgroup", "0::/lxc.payload.129/system.slice/sglang.service\n");
  write(root / "100/cmdline", std::string("python3\0-m\0sglang\0", 18));
  write(root / "100/maps", "");
  fs::create_directories(root / "100/fd");
  fs::create_symlink(dev_.path("nvidia1"), root / "100/fd/5");
  fs::create_symlink("/dev/null", root / "100/fd/0");
  // 101: vanished (directory, nothing inside): skipped silently.
  fs::create_directories(root / "101");
  // 102: kernel thread.
  write(root / "102/stat", stat_line(102, "kworker/0:1", 'I', 2, 0, kPfKthread, 1, 5));
  fs::create_directories(root / "102/fd");
  // 103: zombie leader whose thread 104 holds nvidia-uvm.
  write(root / "103/stat", stat_line(103, "python3", 'Z', 1, 103, 0x400004, 2, 95000));
  write(root / "103/status", "Name:\tpython3\nUid:\t0\t0\t0\t0\nNSpid:\t103\n");
  fs::create_directories(root / "103/fd");
  write(root / "103/maps", "");
  write(root / "103/task/103/stat", stat_line(103, "python3", 'Z', 1, 103, 0x400004, 2, 95000));
  fs::create_directories(root / "103/task/103/fd");
  write(root / "103/task/104/stat", stat_line(104, "python3", 'S', 1, 103, 0x400040, 2, 95001));
  write(root / "103/task/104/maps", "");
  fs::create_directories(root / "103/task/104/fd");
  fs::create_symlink(dev_.path("nvidia-uvm"), root / "103/task/104/fd/9");

  ScanOptions opts;
  opts.proc_root = root.string();
  ScanResult r = scan(opts);
  EXPECT_TRUE(r.problems.empty()) << r.problems[0].what;
  ASSERT_EQ(r.holders.size(), 2u);

  const Holder& a = r.holders[0];
  EXPECT_EQ(a.id, (ProcessId{100, 90000}));
  EXPECT_EQ(a.comm, "my server");
  EXPECT_EQ(a.uid, 1234u);
  EXPECT_EQ(a.nspid, (std::vector<pid_t>{100, 7}));
  EXPECT_EQ(a.container, "lxc:129");
  EXPECT_EQ(a.cgroup, "/lxc.payload.129/system.slice/sglang.service");
  EXPECT_EQ(a.cmdline, "python3 -m sglang");
  // ppid 1 but its own session leader: a service init started, not an orphan.
  EXPECT_FALSE(a.orphaned);
  EXPECT_EQ(a.orphan_reason, "");
  EXPECT_NEAR(a.age_seconds, 1000.5 - 90000.0 / ::sysconf(_SC_CLK_TCK), 1e-6);
  EXPECT_EQ(a.gpu_minors, std::set<unsigned>{1});

  const Holder& z = r.holders[1];
  EXPECT_EQ(z.id.pid, 103);
  EXPECT_TRUE(z.zombie_leader);
  ASSERT_EQ(z.nodes.size(), 1u);
  EXPECT_EQ(z.nodes.begin()->kind, NodeKind::uvm);
  EXPECT_EQ(z.found_by, std::set<FoundBy>{FoundBy::fd});
  ASSERT_EQ(z.threads.size(), 2u);
  EXPECT_EQ(z.threads[1].tid, 104);
  EXPECT_EQ(z.threads[1].state, 'S');
}

}  // namespace
}  // namespace gpureap::proc
