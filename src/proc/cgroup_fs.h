#pragma once
// cgroup v2, the one place that reads and writes it: find the v2 mount and a
// process's cgroup, list members (recursively), freeze and wait for "frozen",
// kill a whole cgroup at once (cgroup.kill, Linux >= 5.14: atomic against
// concurrent forks, unlike any signal loop), and wait for it to empty. The
// waits are driven by cgroup.events, which kernfs notifies with POLLPRI.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::proc {

/// A cgroup2 mount: where it is mounted, and which directory of the hierarchy
/// it shows ("/" unless it is a bind mount of a subtree or we are in a cgroup
/// namespace).
struct Cgroup2Mount {
  std::string root;
  std::string mount_point;

  /// The directory of the cgroup at `path` (a "0::" path from /proc/PID/cgroup),
  /// or "" when that cgroup is not below this mount's root.
  std::string dir_of(std::string_view path) const;
};

/// The first cgroup2 mount in a mountinfo text (pure; mountinfo's \ooo escapes
/// are decoded). Hybrid hosts mount it at /sys/fs/cgroup/unified: never assume
/// /sys/fs/cgroup.
std::optional<Cgroup2Mount> parse_cgroup2_mount(std::string_view mountinfo);

/// The cgroup2 mount of this process, from PROC_ROOT/self/mountinfo.
Result<Cgroup2Mount> cgroup2_mount(std::string_view proc_root);

/// The v2 cgroup path in a /proc/PID/cgroup text (its "0::" line, pure);
/// nullopt when the process has no v2 entry.
std::optional<std::string> parse_cgroup2_path(std::string_view proc_pid_cgroup);

/// The v2 cgroup path of a process ("/system.slice/x.service"), from the
/// "0::" line of /proc/PID/cgroup; empty when none.
std::string cgroup2_path_of(pid_t pid, std::string_view proc_root);

/// The v2 cgroup path of this process, from PROC_ROOT/self/cgroup; empty when none.
std::string own_cgroup2_path(std::string_view proc_root);

/// Members (cgroup.procs) of the cgroup at `dir` (absolute directory).
Result<std::vector<pid_t>> cgroup_members(const std::string& dir);

/// The directory of every cgroup at or below `dir`, parents before children
/// (symlinks are not followed). A cgroup removed while we list is left out (an
/// rmdir of a cgroup succeeds only once it is empty); any other failure to list
/// fails the whole answer.
Result<std::vector<std::string>> cgroup_subtree_dirs(const std::string& dir);

/// A process of a cgroup subtree and the directory of the cgroup it is in.
struct CgroupMember {
  pid_t pid = 0;
  std::string dir;
};

/// Every process of the cgroup at `dir` and of every cgroup below it, recursively
/// (what cgroup.freeze and cgroup.kill act on), the cgroup's own members first. Fails
/// when a directory of the subtree cannot be listed or read.
Result<std::vector<CgroupMember>> cgroup_subtree_members(const std::string& dir);

/// True when cgroup.freeze of `dir` reads 1 (someone froze it on purpose).
bool cgroup_freeze_requested(const std::string& dir);

/// Writes 1/0 to cgroup.freeze.
Result<void> cgroup_freeze(const std::string& dir, bool frozen);

/// Waits until cgroup.events reports "frozen 1" or `deadline` passes; returns
/// whether it is frozen. A member stuck in D inside a driver never freezes, so a
/// timeout is evidence, not an error.
bool cgroup_wait_frozen(const std::string& dir, std::chrono::steady_clock::time_point deadline);

/// cgroup_wait_frozen for at most `timeout` from now.
bool cgroup_wait_frozen(const std::string& dir, std::chrono::milliseconds timeout);

/// `populated` of cgroup.events: a live process in the cgroup or below it. When
/// cgroup.events cannot be read, whether any member is listed (true when that
/// fails as well: never "empty" by mistake).
bool cgroup_populated(const std::string& dir);

/// Waits until the cgroup and every cgroup below it are empty, or `deadline`
/// passes; returns whether they are empty.
bool cgroup_wait_empty(const std::string& dir, std::chrono::steady_clock::time_point deadline);

/// Writes 1 to cgroup.kill: SIGKILL to every member of the cgroup AND of every cgroup
/// below it. Callers must have verified the whole subtree (cgroup_subtree_members).
Result<void> cgroup_kill(const std::string& dir);

/// True when cgroup.kill exists and we can write it.
bool cgroup_kill_available(const std::string& dir);

/// SIGKILLs every process of the cgroup at `dir` and below, for a cgroup that
/// is ours as a whole (a run's own cgroup; free's targets go through
/// cgroup_subtree_members first): cgroup.kill where the kernel has it; else
/// (Linux < 5.14) freeze, wait for "frozen 1" until `deadline`, SIGKILL each
/// member through a pidfd opened after its start time was read and only while
/// PROC_ROOT/PID/cgroup still puts it in this subtree, then thaw.
Result<void> cgroup_kill_all(const std::string& dir, std::chrono::steady_clock::time_point deadline,
                             std::string_view proc_root);

}  // namespace gpureap::proc
