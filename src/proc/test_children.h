#pragma once
// Test support (header only, not part of the library): real child processes
// that a test starts, waits for, and always kills and reaps, plus a temp
// directory of simulated device nodes (plain files).

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "proc/sim_node_marker.h"

namespace gpureap::proc::testing {

/// Forks children and guarantees they die with the test: each child gets
/// PR_SET_PDEATHSIG(SIGKILL) unless asked not to, and the destructor
/// SIGKILLs and reaps every pid it tracks (only pids this guard started or
/// adopted after they were re-parented to us, so never a stranger).
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    for (auto& [pid, fd] : ready_fds_) ::close(fd);
  }

  /// Forks a child running `body(ready_fd)`; the child _exits with 0 when body
  /// returns. `ready_fd` is the write end of a pipe the parent reads with ready().
  pid_t spawn(const std::function<void(int ready_fd)>& body, bool death_signal = true) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      ::close(fds[0]);
      if (death_signal) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(1);  // the test died before prctl
      }
      body(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    pids_.push_back(pid);
    ready_fds_.push_back({pid, fds[0]});
    return pid;
  }

  /// Reads what the child wrote to its ready pipe before `timeout` (up to the
  /// first newline or EOF); throws on timeout.
  std::string ready(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    int fd = -1;
    for (auto& [p, f] : ready_fds_)
      if (p == pid) fd = f;
    if (fd < 0) throw std::runtime_error("no such child");
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("child not ready in time");
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char c;
      ssize_t n = ::read(fd, &c, 1);
      if (n <= 0 || c == '\n') return got;
      got.push_back(c);
    }
  }

  /// Starts tracking a process that was re-parented to us (we are its subreaper).
  void adopt(pid_t pid) { pids_.push_back(pid); }

  /// Waits for a child to exit (it stays a zombie: WNOWAIT).
  void wait_zombie(pid_t pid) {
    siginfo_t info{};
    ::waitid(P_PID, pid, &info, WEXITED | WNOWAIT);
  }

  /// Stops tracking a child the test reaped itself (its pid may be reused).
  void forget(pid_t pid) { std::erase(pids_, pid); }

  /// Reaps a child now; returns its wait status.
  int reap(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::erase(pids_, pid);
    return status;
  }

 private:
  std::vector<pid_t> pids_;
  std::vector<std::pair<pid_t, int>> ready_fds_;
};

/// Writes a line to a ready pipe (child side).
inline void signal_ready(int fd, const std::string& text = "") {
  std::string line = text + "\n";
  (void)!::write(fd, line.data(), line.size());
}

/// Blocks a child forever (until killed).
[[noreturn]] inline void park() {
  for (;;) ::pause();
}

/// In a child's body: starts a thread that says the child is ready on `ready` and
/// blocks until killed, then ends the main thread alone: the child is a zombie leader
/// (state Z) whose live thread keeps its fds, mappings and memory.
[[noreturn]] inline void become_zombie_leader(int ready) {
  static int ready_fd;
  ready_fd = ready;
  pthread_t t;
  ::pthread_create(
      &t, nullptr,
      [](void*) -> void* {
        signal_ready(ready_fd);
        park();
      },
      nullptr);
  // Give the thread time to report, then end only the leader thread.
  ::usleep(50 * 1000);
  ::syscall(SYS_exit, 0);
  ::_exit(0);  // not reached: SYS_exit ends this thread
}

/// Forks a child that says it is ready, then blocks until killed; returns its
/// pid once it is ready.
inline pid_t spawn_parked(Children& children) {
  pid_t pid = children.spawn([](int ready) {
    signal_ready(ready);
    park();
  });
  children.ready(pid);
  return pid;
}

/// The state letter of /proc/PID/stat, '?' if unreadable.
inline char state_of(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return '?';
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return '?';
  std::string s(buf, static_cast<std::size_t>(n));
  auto close = s.rfind(')');
  return close == std::string::npos || close + 2 >= s.size() ? '?' : s[close + 2];
}

/// Polls (bounded) until `pid` shows state `want`.
inline bool wait_state(pid_t pid, char want,
                       std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (state_of(pid) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

/// A temp directory of simulated nodes: regular files of one page each, so they
/// can be mmap'ed, and the simulator's marker (sim_node_marker.h) unless
/// `marker` is false. Removed on destruction.
class SimulatedDevDir {
 public:
  explicit SimulatedDevDir(std::vector<std::string> names = {"nvidia0", "nvidia1", "nvidiactl",
                                                             "nvidia-uvm"},
                           bool marker = true) {
    char tmpl[] = "/tmp/gpureap-proc-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    if (marker) {
      int fd = ::open(path(std::string(kSimNodeMarkerName)).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC,
                      0644);
      if (fd < 0 || ::write(fd, kSimNodeMarkerContent.data(), kSimNodeMarkerContent.size()) !=
                        static_cast<ssize_t>(kSimNodeMarkerContent.size()))
        throw std::runtime_error("write marker");
      ::close(fd);
    }
    for (const auto& n : names) {
      int fd = ::open(path(n).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      if (fd < 0 || ::ftruncate(fd, 4096) != 0) throw std::runtime_error("create " + n);
      ::close(fd);
    }
  }
  ~SimulatedDevDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

}  // namespace gpureap::proc::testing
