#include "gpu/nvml_worker.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "gpu/nvml_library.h"
#include "gpu/nvml_wire.h"

namespace gpureap::gpu {
namespace {

using nlohmann::json;

// waitid(P_PIDFD, ...) (Linux 5.4); spelled out for C libraries that predate it.
constexpr auto kIdTypePidfd = static_cast<idtype_t>(3);

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

std::string describe_ending(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return fmt::format("exited with status {}", info.si_status);
  return fmt::format("was killed by signal {} ({})", info.si_status, strsignal(info.si_status));
}

// ---- The worker (child) side. ----

json answer(NvmlLibrary& library, const json& request) {
  try {
    const std::string op = request.at("op").get<std::string>();
    if (op == "snapshot") {
      std::vector<std::string> problems;
      auto gpus = library.query_all(&problems);
      if (!gpus) return {{"error", gpus.error().message}};
      json wire = json::array();
      for (const GpuInfo& gpu : *gpus) wire.push_back(gpu_info_to_wire(gpu));
      return {{"gpus", wire}, {"problems", problems}};
    }
    if (op == "memory") {
      auto readings = library.query_memory(request.at("indices").get<std::vector<unsigned>>());
      if (!readings) return {{"error", readings.error().message}};
      json wire = json::array();
      for (const MemoryReading& r : *readings) wire.push_back(memory_reading_to_wire(r));
      return {{"readings", wire}};
    }
    if (op == "shutdown") {
      library.shutdown();
      return {{"ok", true}};
    }
    return {{"error", fmt::format("unknown request '{}'", op)}};
  } catch (const std::exception& e) {
    return {{"error", fmt::format("bad request to the NVML worker: {}", e.what())}};
  }
}

[[noreturn]] void serve(int fd, const std::string& library_path) {
  auto send = [fd](const json& message) {
    if (!write_frame(fd, message, std::nullopt)) _exit(0);  // gpureap is gone
  };
  auto library = NvmlLibrary::load(library_path);
  if (!library) {
    send({{"ready", false}, {"state", "library_missing"}, {"problem", library.error().message}});
    _exit(0);
  }
  if (auto init = library->init(); !init) {
    send({{"ready", false}, {"state", "init_failed"}, {"problem", init.error().message}});
    _exit(0);
  }
  send({{"ready", true}, {"driver_version", library->driver_version()}});
  for (;;) {
    auto request = read_frame(fd, std::nullopt);
    // EOF: gpureap closed the channel. Exiting releases NVML's device files.
    if (!request) _exit(0);
    send(answer(*library, *request));
    if (request->value("op", "") == "shutdown") _exit(0);
  }
}

void close_fds_except(int keep) {
  auto close_range_fds = [](unsigned first, unsigned last) {
    if (first > last) return;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, first, last, 0) == 0) return;
#endif
    // Linux < 5.9: close one by one, up to the descriptor limit.
    long limit = std::min(sysconf(_SC_OPEN_MAX), 1L << 16);
    for (long fd = first; fd <= static_cast<long>(std::min<unsigned>(last, limit)); ++fd) {
      close(static_cast<int>(fd));
    }
  };
  close_range_fds(3, static_cast<unsigned>(keep) - 1);
  close_range_fds(static_cast<unsigned>(keep) + 1, ~0U);
}

// Runs in the forked child: make it a single-purpose process, then serve.
// Never returns to gpureap's code (no atexit handlers, no stdio flush: _exit).
[[noreturn]] void run_child(int fd, pid_t parent, const std::string& library_path) {
  try {
    // Die with gpureap; the check closes the race with a parent that died first.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    prctl(PR_SET_NAME, "gpureap-nvml");

    // Drop gpureap's handlers and mask. Ctrl-C reaches the whole process group:
    // the worker ignores it and ends with gpureap (PDEATHSIG, or EOF).
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &action, nullptr);
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);

    // A worker stuck in the driver must not keep gpureap's stdout open (a
    // reader such as `gpureap status | cat` would wait for EOF forever), nor
    // any other inherited descriptor.
    if (fd < 3) fd = fcntl(fd, F_DUPFD, 3);
    if (int null = open("/dev/null", O_RDWR); null >= 0) {
      for (int std_fd = 0; std_fd < 3; ++std_fd) dup2(null, std_fd);
    }
    close_fds_except(fd);
    serve(fd, library_path);
  } catch (...) {
    _exit(1);
  }
}

}  // namespace

Result<NvmlWorker> NvmlWorker::spawn(const std::string& library_path) {
  // A socket pair rather than two pipes: one descriptor per side, and send()
  // with MSG_NOSIGNAL, so a dead worker cannot raise SIGPIPE in gpureap.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return std::unexpected(Error::from_errno("socketpair for the NVML worker"));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    Error error = Error::from_errno("fork of the NVML worker");
    close(sv[0]);
    close(sv[1]);
    return std::unexpected(error);
  }
  if (pid == 0) {
    close(sv[0]);
    run_child(sv[1], parent, library_path);
  }
  close(sv[1]);
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  return NvmlWorker(pid, open_pidfd(pid), sv[0]);
}

NvmlWorker::NvmlWorker(NvmlWorker&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      socket_(std::exchange(other.socket_, -1)),
      reaped_(other.reaped_),
      ending_(std::move(other.ending_)) {}

NvmlWorker& NvmlWorker::operator=(NvmlWorker&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    socket_ = std::exchange(other.socket_, -1);
    reaped_ = other.reaped_;
    ending_ = std::move(other.ending_);
  }
  return *this;
}

NvmlWorker::~NvmlWorker() {
  release();
}

void NvmlWorker::release() {
  close_channel();
  if (pidfd_ >= 0) close(pidfd_);
  pidfd_ = -1;
}

void NvmlWorker::close_channel() {
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
}

void NvmlWorker::kill() {
  if (reaped_ || pid_ <= 0) return;
#ifdef SYS_pidfd_send_signal
  if (pidfd_ >= 0 && syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0) == 0) return;
#endif
  ::kill(pid_, SIGKILL);
}

std::optional<std::string> NvmlWorker::try_reap() {
  if (reaped_) return ending_;
  if (pid_ <= 0) return std::nullopt;
  for (;;) {
    siginfo_t info{};
    int rc = pidfd_ >= 0 ? waitid(kIdTypePidfd, static_cast<id_t>(pidfd_), &info, WEXITED | WNOHANG)
                         : waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG);
    if (rc == 0 && info.si_pid == 0) return std::nullopt;  // still running (or stuck)
    if (rc == 0) {
      ending_ = describe_ending(info);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EINVAL && pidfd_ >= 0) {
      // Linux 5.3 has pidfd_open but not waitid(P_PIDFD): use the pid (still our child).
      close(pidfd_);
      pidfd_ = -1;
      continue;
    } else {
      // ECHILD: someone else reaped it (SIGCHLD ignored, or a waitpid(-1)).
      ending_ = "ended";
    }
    reaped_ = true;
    return ending_;
  }
}

std::optional<std::string> NvmlWorker::wait_exit(std::chrono::milliseconds limit) {
  if (auto ending = try_reap()) return ending;
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return try_reap();
    if (pidfd_ >= 0) {
      // A pidfd becomes readable when the process exits.
      pollfd p{pidfd_, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()));
    } else {
      poll(nullptr, 0, static_cast<int>(std::min<long long>(left.count(), 5)));
    }
    if (auto ending = try_reap()) return ending;
  }
}

}  // namespace gpureap::gpu
