// scan_bench: how long does finding the holders of the GPU device nodes take,
// fuser versus gpureap's scan_holders, on a machine with many processes?
//
// Spawns N sleeping processes (each with a few open files; a handful hold
// simulated device nodes in a temp dir, by fd or by mapping only), then times,
// alternating within one run, K repetitions of
//   (a) `fuser <the device files>` as a subprocess, and
//   (b) scan_holders in-process (1 worker, then the automatic choice),
// and prints the medians and the ratio. Every process it started is killed
// and reaped before it exits (and each dies with the bench: PR_SET_PDEATHSIG).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proc/device_nodes.h"
#include "proc/holder_scan.h"
#include "proc/sim_node_marker.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using gpureap::proc::DeviceSet;

struct Options {
  long procs = 10000;
  int holders = 8;  // by fd; 2 more hold a mapping only
  int reps = 7;
  std::string fuser = "/usr/bin/fuser";
  std::string gpureap;  // accepted for later; not timed yet
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: gpureap_scan_bench [--procs N] [--holders H] [--reps K] [--fuser PATH]"
               " [--gpureap PATH]\n");
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--procs")
      o.procs = std::stol(value());
    else if (a == "--holders")
      o.holders = std::stoi(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--fuser")
      o.fuser = value();
    else if (a == "--gpureap")
      o.gpureap = value();
    else
      usage();
  }
  if (o.procs < 0 || o.holders < 0 || o.reps < 1) usage();
  return o;
}

long read_long(const char* path) {
  std::ifstream in(path);
  long v = -1;
  in >> v;
  return v;
}

long count_processes() {
  long n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc"))
    if (std::isdigit(static_cast<unsigned char>(e.path().filename().string()[0]))) ++n;
  return n;
}

/// The processes this bench started; killed and reaped on destruction.
class Sleepers {
 public:
  ~Sleepers() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);  // our own unreaped children only
    for (pid_t p : pids_)
      while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
  void add(pid_t p) { pids_.push_back(p); }
  std::size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

/// What a sleeper does before it sleeps.
enum class Role { plain, fd_holder, map_holder };

[[noreturn]] void sleeper(pid_t parent, int ready_fd, Role role, const std::string& node,
                          const std::string& ctl, const std::string& filler) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  // "A few open files", like any daemon: stdin-like, a data file, a directory.
  ::open("/dev/null", O_RDONLY);
  ::open(filler.c_str(), O_RDONLY);
  ::open("/tmp", O_RDONLY | O_DIRECTORY);
  if (role == Role::fd_holder) {
    ::open(node.c_str(), O_RDWR);
    ::open(ctl.c_str(), O_RDWR);
  } else if (role == Role::map_holder) {
    int fd = ::open(node.c_str(), O_RDWR);
    if (::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) ::_exit(1);
    ::close(fd);
  }
  char c = 1;
  (void)!::write(ready_fd, &c, 1);
  ::close(ready_fd);
  for (;;) ::pause();
}

/// Runs fuser on `files`; returns the pids it printed (stdout holds only pids).
std::set<pid_t> run_fuser(const Options& o, const std::vector<std::string>& files) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) std::exit(3);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv{const_cast<char*>(o.fuser.c_str())};
  for (const auto& f : files) argv.push_back(const_cast<char*>(f.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, o.fuser.c_str(), &fa, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "cannot run %s\n", o.fuser.c_str());
    std::exit(3);
  }
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(out[0]);
  ::waitpid(pid, nullptr, 0);
  std::set<pid_t> pids;
  std::istringstream in(text);
  for (std::string tok; in >> tok;)
    if (pid_t p = std::atoi(tok.c_str()); p > 0) pids.insert(p);
  return pids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);

  // How many processes can we have? pid_max and RLIMIT_NPROC cannot be raised
  // here, so the bench takes what is left of them (with a margin for others).
  const long pid_max = read_long("/proc/sys/kernel/pid_max");
  const long threads_max = read_long("/proc/sys/kernel/threads-max");
  rlimit nproc{};
  ::getrlimit(RLIMIT_NPROC, &nproc);
  const long existing = count_processes();
  long room = std::min(pid_max, threads_max) - existing - 500;
  if (nproc.rlim_cur != RLIM_INFINITY)
    room = std::min(room, static_cast<long>(nproc.rlim_cur) - existing - 500);
  std::printf(
      "limits: pid_max %ld, threads-max %ld, ulimit -u %s, %ld processes running\n", pid_max,
      threads_max,
      nproc.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(nproc.rlim_cur).c_str(),
      existing);
  long n = o.procs;
  if (n > room) {
    std::printf("NOTE: %ld processes requested, only %ld possible under these limits; using %ld\n",
                o.procs, room, room);
    n = std::max(0L, room);
  }
  const int fd_holders = static_cast<int>(std::min<long>(o.holders, n));
  const int map_holders = static_cast<int>(std::min<long>(2, n - fd_holders));

  // Simulated device nodes: plain files, matched by (st_dev, st_ino).
  char tmpl[] = "/tmp/gpureap-scan-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 3;
  const std::string dir = tmpl;
  struct RemoveDir {
    std::string d;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } remove_dir{dir};
  std::vector<std::string> nodes;
  for (int i = 0; i < 8; ++i) nodes.push_back(dir + "/nvidia" + std::to_string(i));
  nodes.push_back(dir + "/nvidiactl");
  nodes.push_back(dir + "/nvidia-uvm");
  const std::string filler = dir + "/model.safetensors";
  for (const auto& f : std::vector<std::string>{nodes.begin(), nodes.end()}) {
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) return 3;
    ::close(fd);
  }
  std::ofstream(filler) << "weights";
  // Regular files count as nodes only beside the simulator's marker.
  std::ofstream(dir + "/" + std::string(gpureap::proc::kSimNodeMarkerName))
      << gpureap::proc::kSimNodeMarkerContent;

  Sleepers sleepers;
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return 3;
  const pid_t self = ::getpid();
  auto start = Clock::now();
  for (long i = 0; i < n; ++i) {
    Role role = i < fd_holders                 ? Role::fd_holder
                : i < fd_holders + map_holders ? Role::map_holder
                                               : Role::plain;
    const std::string& node = role == Role::map_holder ? nodes[9] : nodes[i % 8];
    pid_t pid = ::fork();
    if (pid < 0) {
      std::printf("fork failed after %ld processes: %s; using %ld\n", i, std::strerror(errno), i);
      n = i;
      break;
    }
    if (pid == 0) {
      ::close(ready[0]);
      sleeper(self, ready[1], role, node, nodes[8], filler);
    }
    sleepers.add(pid);
  }
  ::close(ready[1]);
  long got = 0;
  char buf[4096];
  for (ssize_t r; got < n && (r = ::read(ready[0], buf, sizeof buf)) > 0;) got += r;
  ::close(ready[0]);
  std::printf(
      "spawned %ld sleepers (%d hold a node by fd, %d by mapping only) in %.0f ms;"
      " %ld processes in /proc\n",
      got, fd_holders, map_holders, ms_since(start), count_processes());

  auto devices = gpureap::proc::discover_devices(dir, "/proc");
  if (!devices) return 3;
  auto scan = [&](unsigned workers) {
    gpureap::proc::ScanOptions opts;
    opts.proc_root = "/proc";
    opts.devices = &*devices;
    opts.workers = workers;
    return gpureap::proc::scan_holders(opts);
  };

  // Warm-up (dentry caches, page cache of fuser), and agreement of the answers.
  std::set<pid_t> by_fuser = run_fuser(o, nodes);
  auto result = scan(0);
  std::set<pid_t> by_scan;
  for (const auto& h : result.holders) by_scan.insert(h.id.pid);
  std::printf("holders found: fuser %zu, scan_holders %zu (%s); scan read %zu processes\n",
              by_fuser.size(), by_scan.size(), by_fuser == by_scan ? "same pids" : "DIFFERENT",
              result.processes_scanned);

  std::vector<double> t_fuser, t_scan1, t_scan_auto;
  for (int rep = 0; rep < o.reps; ++rep) {
    // Alternate the order so that neither side always runs on a warmer cache.
    auto time_fuser = [&] {
      auto t = Clock::now();
      run_fuser(o, nodes);
      t_fuser.push_back(ms_since(t));
    };
    auto time_scan = [&] {
      auto t = Clock::now();
      scan(1);
      t_scan1.push_back(ms_since(t));
      t = Clock::now();
      scan(0);
      t_scan_auto.push_back(ms_since(t));
    };
    if (rep % 2 == 0) {
      time_fuser();
      time_scan();
    } else {
      time_scan();
      time_fuser();
    }
  }
  // scan_holders' automatic choice: 2 workers from 2000 processes on a 2-CPU machine.
  const unsigned auto_workers =
      result.processes_scanned >= 2000 && std::thread::hardware_concurrency() >= 2 ? 2 : 1;
  const double f = median(t_fuser), s1 = median(t_scan1), sa = median(t_scan_auto);
  std::printf(
      "median of %d reps: fuser %.1f ms | scan_holders 1 worker %.1f ms (%.2fx of fuser)"
      " | auto (%u workers) %.1f ms (%.2fx of fuser)\n",
      o.reps, f, s1, s1 / f, auto_workers, sa, sa / f);
  if (!o.gpureap.empty())
    std::printf("--gpureap %s: not timed yet (only fuser and scan_holders)\n", o.gpureap.c_str());
  std::fflush(stdout);
  return 0;
}
