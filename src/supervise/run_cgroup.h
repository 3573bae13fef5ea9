#pragma once
// The run's own cgroup v2: the one containment a process cannot leave by
// double-forking, setsid() or re-parenting (kernel-and-driver-facts.md §2.1).
// gpureap creates `gpureap-run-<name>-<pid>` beneath its own cgroup (or at the
// root of the v2 mount), CMD moves itself in before exec, and the teardown
// kills the whole cgroup at once with cgroup.kill (Linux >= 5.14), or, on older
// kernels, freezes it and SIGKILLs each member. The cgroup2 mount is found in
// /proc/self/mountinfo: hybrid hosts mount it at /sys/fs/cgroup/unified.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::supervise {

/// Prefix of every run cgroup's directory name; `status` recognises it
/// (proc::container_hint reports "gpureap-run:<name>").
inline constexpr std::string_view kRunCgroupPrefix = "gpureap-run-";

/// The mount point of the cgroup2 filesystem in a /proc/self/mountinfo text;
/// nullopt when cgroup v2 is not mounted. The first cgroup2 mount wins.
std::optional<std::string> cgroup2_mount(std::string_view mountinfo);

/// The v2 cgroup path ("0::<path>" line) in a /proc/PID/cgroup text; nullopt
/// when the process has no v2 entry.
std::optional<std::string> v2_cgroup_path(std::string_view proc_pid_cgroup);

/// The pid of the gpureap that created a run cgroup named
/// `gpureap-run-<name>-<pid>`; nullopt for other names.
std::optional<pid_t> run_cgroup_owner(std::string_view dir_name);

class RunCgroup {
 public:
  using Clock = std::chrono::steady_clock;

  /// Creates the cgroup `dir_name` beneath this process's v2 cgroup, else at
  /// the root of the v2 mount. Fails (with the reason, for the "subreaper mode"
  /// message) when cgroup v2 is absent or neither place is writable.
  static Result<RunCgroup> create(const std::string& dir_name);

  RunCgroup(RunCgroup&&) noexcept;
  RunCgroup& operator=(RunCgroup&&) noexcept;
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;
  /// Closes the fds; never removes the directory (a gpureap killed with
  /// SIGKILL leaves it behind on purpose: it names the run's leftovers).
  ~RunCgroup();

  /// Filesystem path of the cgroup directory.
  const std::string& dir() const { return dir_; }
  /// The path as /proc/PID/cgroup shows it ("/gpureap-run-x-123").
  const std::string& cgroup_path() const { return cgroup_path_; }

  /// An O_WRONLY fd of cgroup.procs: a child writes "0" to it before exec to
  /// move itself in (so nothing it forks is ever outside the cgroup).
  int procs_fd() const { return procs_fd_; }

  /// Pids of every process in the cgroup and its descendant cgroups.
  std::vector<pid_t> members() const;

  /// `populated` from cgroup.events: a live process in the cgroup or beneath it.
  bool populated() const;

  /// Whether this kernel has cgroup.kill (Linux >= 5.14).
  bool has_kill() const;

  /// SIGKILLs every member: cgroup.kill when the kernel has it; else freeze,
  /// wait for `frozen 1` until `deadline`, SIGKILL each member through a pidfd
  /// (re-checking it is still in this cgroup), and thaw.
  Result<void> kill_all(Clock::time_point deadline);

  /// Waits until the cgroup is empty (cgroup.events notifies changes with
  /// POLLPRI) or `deadline` passes; returns whether it is empty.
  bool wait_empty(Clock::time_point deadline) const;

  /// Removes the cgroup (descendant cgroups first). Fails with EBUSY while
  /// members remain.
  Result<void> remove();

 private:
  RunCgroup(std::string dir, std::string cgroup_path, int procs_fd, int events_fd);

  std::string dir_;
  std::string cgroup_path_;
  int procs_fd_ = -1;
  int events_fd_ = -1;
};

/// Removes empty `gpureap-run-*` cgroups left beside where a new run cgroup
/// would go by runs whose gpureap has exited (a SIGKILLed gpureap cannot clean
/// up after itself). Only empty cgroups can be removed, so nothing is lost.
/// Returns the paths removed.
std::vector<std::string> sweep_stale_run_cgroups();

}  // namespace gpureap::supervise
