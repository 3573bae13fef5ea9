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
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "gpu/gpu_source.h"
#include "gpu/nvml_library.h"
#include "gpu/nvml_wire.h"

namespace gpureap::gpu {
namespace {

using nlohmann::json;

std::string describe_ending(const proc::ChildExit& exit) {
  switch (exit.how) {
    case proc::ChildExit::How::exited:
      return fmt::format("exited with status {}", exit.status);
    case proc::ChildExit::How::killed:
      return fmt::format("was killed by signal {} ({})", exit.status, strsignal(exit.status));
    case proc::ChildExit::How::unknown:
      break;  // someone else reaped it (SIGCHLD ignored, or a waitpid(-1))
  }
  return "ended";
}

// ---- The worker (child) side. ----

// Each GPU is queried on a thread of its own, so that a GPU whose calls never
// return (a lost GPU, a driver stuck on it) holds up only itself: at the
// request's deadline the worker answers with the GPUs that answered, and the
// others marked hung. A hung GPU is not queried again while its query is still
// stuck (another would hang as well, and cost a thread); its identity, which
// NVML gives even for a lost GPU, is kept so that gpureap can name it.
class PerGpuQueries {
 public:
  explicit PerGpuQueries(NvmlLibrary& library) : library_(library) {}

  std::vector<GpuInfo> snapshot(unsigned count, std::optional<std::chrono::milliseconds> limit) {
    std::vector<unsigned> indices(count);
    for (unsigned i = 0; i < count; ++i) indices[i] = i;
    auto board = run(indices, limit, [this](unsigned index, Slot& slot, std::mutex& m) {
      GpuInfo gpu = library_.query_gpu(index, [&](const GpuInfo& identity) {
        std::lock_guard lock(m);
        slot.identity = identity;
      });
      std::lock_guard lock(m);
      slot.gpu = std::move(gpu);
    });
    std::vector<GpuInfo> gpus;
    std::lock_guard lock(board->mutex);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      Slot& slot = board->slots[k];
      if (slot.gpu) {
        gpus.push_back(std::move(*slot.gpu));
        continue;
      }
      GpuInfo gpu = slot.identity.value_or(GpuInfo{});
      gpu.id.index = indices[k];
      gpu.hung = true;
      gpu.problem = hung_problem(indices[k], limit);
      gpus.push_back(std::move(gpu));
    }
    return gpus;
  }

  std::vector<MemoryReading> memory(const std::vector<unsigned>& indices,
                                    std::optional<std::chrono::milliseconds> limit) {
    auto board = run(indices, limit, [this](unsigned index, Slot& slot, std::mutex& m) {
      auto reading = library_.query_reading(index);
      std::lock_guard lock(m);
      slot.reading = std::move(reading);
    });
    std::vector<MemoryReading> readings;
    std::lock_guard lock(board->mutex);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      Slot& slot = board->slots[k];
      MemoryReading reading;
      reading.id.index = indices[k];
      if (!slot.reading) {
        reading.hung = true;
        reading.problem = hung_problem(indices[k], limit);
      } else if (!*slot.reading) {
        reading.problem = slot.reading->error().message;
      } else {
        reading = std::move(**slot.reading);
      }
      readings.push_back(std::move(reading));
    }
    return readings;
  }

 private:
  struct Slot {
    std::optional<GpuInfo> identity;
    std::optional<GpuInfo> gpu;
    std::optional<Result<MemoryReading>> reading;
    bool done = false;
  };
  // Shared with the query threads: one left stuck in the driver outlives the request.
  struct Board {
    std::mutex mutex;
    std::condition_variable done;
    std::vector<Slot> slots;
    std::size_t finished = 0;
  };
  std::string hung_problem(unsigned index, std::optional<std::chrono::milliseconds> limit) const {
    auto it = stuck_.find(index);
    if (it != stuck_.end() && it->second.since_request) {
      return fmt::format("GPU {}: NVML did not answer within {} ms (the driver may be stuck on "
                         "this GPU; see dmesg)",
                         index, limit ? limit->count() : 0);
    }
    return fmt::format(
        "GPU {}: an earlier NVML query of this GPU has still not returned (the driver may be "
        "stuck on this GPU; see dmesg)",
        index);
  }

  template <typename Query>
  std::shared_ptr<Board> run(const std::vector<unsigned>& indices,
                             std::optional<std::chrono::milliseconds> limit, Query query) {
    auto board = std::make_shared<Board>();
    board->slots.resize(indices.size());
    const auto end = limit ? std::optional(std::chrono::steady_clock::now() + *limit) : std::nullopt;
    std::size_t started = 0;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const unsigned index = indices[k];
      if (still_stuck(index)) {
        std::lock_guard lock(board->mutex);
        board->slots[k].identity = stuck_[index].identity;
        stuck_[index].since_request = false;
        continue;
      }
      ++started;
      std::thread([board, k, index, query] {
        query(index, board->slots[k], board->mutex);
        std::lock_guard lock(board->mutex);
        board->slots[k].done = true;
        ++board->finished;
        board->done.notify_all();
      }).detach();
    }
    std::unique_lock lock(board->mutex);
    auto all_done = [&] { return board->finished == started; };
    if (end) {
      board->done.wait_until(lock, *end, all_done);
    } else {
      board->done.wait(lock, all_done);
    }
    for (std::size_t k = 0; k < indices.size(); ++k) {
      Slot& slot = board->slots[k];
      if (slot.done || stuck_.contains(indices[k])) continue;
      stuck_[indices[k]] = StuckGpu{board, k, slot.identity, true};
    }
    return board;
  }

  // True while an earlier query of this GPU has not returned. One that has
  // returned since lets the GPU be queried again.
  bool still_stuck(unsigned index) {
    auto it = stuck_.find(index);
    if (it == stuck_.end()) return false;
    std::lock_guard lock(it->second.board->mutex);
    if (it->second.board->slots[it->second.slot].done) {
      stuck_.erase(it);
      return false;
    }
    return true;
  }

  struct StuckGpu {
    std::shared_ptr<Board> board;
    std::size_t slot = 0;
    std::optional<GpuInfo> identity;
    bool since_request = true;  // it got stuck during the current request
  };

  NvmlLibrary& library_;
  std::map<unsigned, StuckGpu> stuck_;
};

std::optional<std::chrono::milliseconds> request_limit(const json& request) {
  auto it = request.find("deadline_ms");
  if (it == request.end() || !it->is_number_unsigned()) return std::nullopt;
  return std::chrono::milliseconds(it->get<std::uint64_t>());
}

json answer(NvmlLibrary& library, PerGpuQueries& queries, const json& request) {
  try {
    const std::string op = request.at("op").get<std::string>();
    if (op == "snapshot") {
      auto count = library.gpu_count();
      if (!count) return {{"error", count.error().message}};
      json wire = json::array();
      json problems = json::array();
      for (const GpuInfo& gpu : queries.snapshot(*count, request_limit(request))) {
        if (!gpu.problem.empty()) problems.push_back(gpu.problem);
        wire.push_back(gpu_info_to_wire(gpu));
      }
      return {{"gpus", wire}, {"problems", problems}};
    }
    if (op == "memory") {
      auto indices = request.at("indices").get<std::vector<unsigned>>();
      auto count = library.gpu_count();
      if (!count) return {{"error", count.error().message}};
      for (unsigned index : indices) {
        if (index >= *count) {
          return {{"error", fmt::format("no GPU with index {}: NVML sees {} GPU{}", index, *count,
                                        *count == 1 ? "" : "s")}};
        }
      }
      json wire = json::array();
      for (const MemoryReading& r : queries.memory(indices, request_limit(request))) {
        wire.push_back(memory_reading_to_wire(r));
      }
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
    send({{"ready", false}, {"state", enum_name(SourceState::library_missing)}, {"problem", library.error().message}});
    _exit(0);
  }
  if (auto init = library->init(); !init) {
    send({{"ready", false}, {"state", enum_name(SourceState::init_failed)}, {"problem", init.error().message}});
    _exit(0);
  }
  send({{"ready", true},
        {"driver_version", library->driver_version()},
        {"cuda_version", library->cuda_version()}});
  PerGpuQueries queries(*library);
  for (;;) {
    auto request = read_frame(fd, std::nullopt);
    // EOF: gpureap closed the channel. Exiting releases NVML's device files
    // (and ends any query thread stuck in the driver).
    if (!request) _exit(0);
    send(answer(*library, queries, *request));
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
    prctl(PR_SET_NAME, kWorkerComm);

    // A process group of its own: a signal to gpureap's whole group (`kill --
    // -PGID`, timeout(1), a terminal's Ctrl-C) must not take the worker away
    // while gpureap still has to measure the release. The parent sets the
    // group too, so it is in place whichever runs first.
    setpgid(0, 0);

    // Drop gpureap's handlers and mask. Signals meant to stop gpureap, should
    // they reach the worker anyway (systemd signals every process of a unit's
    // cgroup), are ignored: the worker ends with gpureap (PDEATHSIG, or EOF).
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &action, nullptr);
    for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) signal(sig, SIG_IGN);
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
  UniqueFd ours(sv[0]);
  UniqueFd theirs(sv[1]);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return std::unexpected(Error::from_errno("fork of the NVML worker"));
  if (pid == 0) {
    ours.reset();
    run_child(theirs.get(), parent, library_path);
  }
  theirs.reset();
  // EACCES once the child has exec'd (it never does) and ESRCH once it died: harmless.
  setpgid(pid, pid);
  fcntl(ours.get(), F_SETFL, fcntl(ours.get(), F_GETFL) | O_NONBLOCK);
  return NvmlWorker(proc::ProcessHandle::open_child(pid), std::move(ours));
}

void NvmlWorker::close_channel() {
  socket_.reset();
}

void NvmlWorker::kill() {
  if (!ending_) (void)child_.signal(SIGKILL);
}

std::optional<std::string> NvmlWorker::try_reap() {
  if (!ending_) {
    if (auto exit = child_.try_reap()) ending_ = describe_ending(*exit);
  }
  return ending_;
}

std::optional<std::string> NvmlWorker::wait_exit(std::chrono::milliseconds limit) {
  if (auto ending = try_reap()) return ending;
  child_.wait_exit(std::chrono::steady_clock::now() + limit);
  return try_reap();
}

}  // namespace gpureap::gpu
