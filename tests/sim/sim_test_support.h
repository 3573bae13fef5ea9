#pragma once
// Test support for the simulated node: run gpureap-sim, start holder trees, load
// the stand-in libnvidia-ml.so.1. Every process a test starts is killed and
// reaped when its SimNode goes out of scope (also when the test fails).

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpu/nvml_api.h"

namespace simtest {

struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal
  std::string out;
  std::string err;
};

/// Runs argv (no shell) to completion, bounded by `timeout`; optionally as `uid`.
CommandResult run(const std::vector<std::string>& argv, std::optional<uid_t> uid = std::nullopt,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// Whether `uid` can execute `path` (every directory above it searchable), asked in a
/// child that becomes that user.
bool user_can_execute(uid_t uid, const std::string& path);

/// Polls `pred` every 5 ms until true or the deadline.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(5));

struct Holder {
  pid_t pid;
  unsigned gpu;
  std::uint64_t bytes;
};

struct HoldResult {
  pid_t invoker = 0;  // our child: `gpureap-sim hold` itself
  pid_t leader = 0;
  std::vector<pid_t> pids;
  std::vector<Holder> holders;
  pid_t keeper = 0;  // --inheritor / --ipc-importer: the process that keeps the memory
};

/// A node in a fresh temp dir, with $GPUREAP_SIM_DIR pointing at it.
class SimNode {
 public:
  explicit SimNode(const std::vector<std::string>& node_args = {"--gpus", "4", "--memory",
                                                                "96GiB"});
  ~SimNode();
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  const std::string& dir() const { return dir_; }
  CommandResult sim(std::vector<std::string> args) const;
  /// `gpureap-sim hold --dir D <args>`, waiting (bounded) for its ready line. The
  /// invoker stays our child until the node is destroyed (or exits by itself).
  HoldResult hold(const std::vector<std::string>& args);
  /// Signals a process this node registered (a holder tree member), through a
  /// pidfd verified against its registered start time. False if it is gone.
  bool signal(pid_t pid, int sig) const;

 private:
  std::string dir_;
  std::vector<int> child_pidfds_;  // our `hold` invokers, signalled through pidfds
};

/// The stand-in library, loaded once per test process; init/shutdown per object.
class Nvml {
 public:
  Nvml();  // loads and calls nvmlInit_v2 (asserting success is up to the caller)
  ~Nvml();
  nvmlReturn_t init_result() const { return init_; }
  /// Runs `fn` with this process's NVML session closed (nvmlShutdown, then
  /// nvmlInit again): the stand-in's reset refuses while another session is open,
  /// as the driver does.
  template <typename Fn>
  auto without_session(Fn fn) {
    end_session();
    auto result = fn();
    begin_session();
    return result;
  }
  void end_session();
  void begin_session();

  template <typename Fn>
  Fn sym(const char* name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }
  nvmlDevice_t device(unsigned index) const;
  /// v1 "used" of GPU `index`; nullopt on an NVML error.
  std::optional<std::uint64_t> used(unsigned index) const;
  /// Compute processes (pid, bytes) through _v3; nullopt on an NVML error.
  std::optional<std::vector<std::pair<unsigned, std::uint64_t>>> processes(unsigned index) const;

  static void* symbol(const char* name);

 private:
  nvmlReturn_t init_ = NVML_ERROR_UNINITIALIZED;
};

constexpr std::uint64_t kMiB = 1024ULL * 1024;
constexpr std::uint64_t kGiB = 1024 * kMiB;
constexpr std::uint64_t kBaseline = 512 * kMiB;

/// Stat fields of a live process; '\0' state when gone.
char state_of(pid_t pid);
long threads_of(pid_t pid);
pid_t ppid_of(pid_t pid);
/// True while the process exists and is not a pure zombie.
bool alive(pid_t pid);

}  // namespace simtest
