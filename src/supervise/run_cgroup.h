#pragma once
// The run's own cgroup v2: the one containment a process cannot leave by
// double-forking, setsid() or re-parenting (kernel-and-driver-facts.md §2.1).
// gpureap creates `gpureap-run-<name>-<pid>` beneath its own cgroup (or at the
// root of the v2 mount), CMD moves itself in before exec, and the teardown
// kills the whole cgroup at once with cgroup.kill (Linux >= 5.14), or, on older
// kernels, freezes it and SIGKILLs each member (reclaim::ProcessControl::sweep_cgroup,
// through the audited control, so the kills are recorded). This class only places,
// creates and sweeps run cgroups; reading, freezing, killing and waiting on a cgroup
// are proc/cgroup_fs.h's (the cgroup2 mount is found in /proc/self/mountinfo: hybrid
// hosts mount it at /sys/fs/cgroup/unified).

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/cgroup_fs.h"
#include "util/fd.h"
#include "util/result.h"

namespace gpureap::supervise {

/// Prefix of every run cgroup's directory name; `status` recognises it
/// (proc::container_hint reports "gpureap-run:<name>").
inline constexpr std::string_view kRunCgroupPrefix = "gpureap-run-";

/// The pid of the gpureap that created a run cgroup named
/// `gpureap-run-<name>-<pid>`; nullopt for other names.
std::optional<pid_t> run_cgroup_owner(std::string_view dir_name);

class RunCgroup {
 public:
  using Clock = std::chrono::steady_clock;

  /// Creates the cgroup `dir_name` beneath this process's v2 cgroup, else at
  /// the root of the v2 mount (both read from PROC_ROOT/self). Fails (with the
  /// reason, for the "subreaper mode" message) when cgroup v2 is absent or
  /// neither place is writable.
  static Result<RunCgroup> create(const std::string& dir_name,
                                  std::string_view proc_root);

  RunCgroup(RunCgroup&&) noexcept = default;
  RunCgroup& operator=(RunCgroup&&) noexcept = default;
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;
  /// Closes procs_fd; never removes the directory (a gpureap killed with
  /// SIGKILL leaves it behind on purpose: it names the run's leftovers).
  ~RunCgroup() = default;

  /// Filesystem path of the cgroup directory.
  const std::string& dir() const { return dir_; }
  /// The path as /proc/PID/cgroup shows it ("/gpureap-run-x-123").
  const std::string& cgroup_path() const { return cgroup_path_; }

  /// An O_WRONLY fd of cgroup.procs: a child writes "0" to it before exec to
  /// move itself in (so nothing it forks is ever outside the cgroup).
  int procs_fd() const { return procs_fd_.get(); }

  /// Pids of every process in the cgroup and its descendant cgroups
  /// (proc::cgroup_subtree_members); empty when they cannot be listed.
  std::vector<pid_t> members() const;

  /// proc::cgroup_populated: a live process in the cgroup or beneath it.
  bool populated() const { return proc::cgroup_populated(dir_); }

  /// proc::cgroup_wait_empty: until the cgroup is empty or `deadline` passes.
  bool wait_empty(Clock::time_point deadline) const {
    return proc::cgroup_wait_empty(dir_, deadline);
  }

  /// Removes the cgroup (descendant cgroups first). Fails with EBUSY while
  /// members remain.
  Result<void> remove();

 private:
  RunCgroup(std::string dir, std::string cgroup_path, UniqueFd procs_fd)
      : dir_(std::move(dir)), cgroup_path_(std::move(cgroup_path)), procs_fd_(std::move(procs_fd)) {}

  std::string dir_;
  std::string cgroup_path_;
  UniqueFd procs_fd_;
};

/// Removes empty `gpureap-run-*` cgroups left beside where a new run cgroup
/// would go (found through PROC_ROOT/self) by runs whose gpureap has exited (a
/// SIGKILLed gpureap cannot clean up after itself). Only empty cgroups can be
/// removed, so nothing is lost. Returns the paths removed.
std::vector<std::string> sweep_stale_run_cgroups(std::string_view proc_root);

}  // namespace gpureap::supervise
