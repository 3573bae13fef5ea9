#pragma once
// cgroup v2 operations used for containment: find the v2 mount, list members,
// freeze, and kill a whole cgroup at once (cgroup.kill, Linux >= 5.14: atomic
// against concurrent forks, unlike any signal loop).

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
Result<Cgroup2Mount> cgroup2_mount(std::string_view proc_root = "/proc");

/// The v2 cgroup path of a process ("/system.slice/x.service"), from the
/// "0::" line of /proc/PID/cgroup; empty when none.
std::string cgroup2_path_of(pid_t pid, std::string_view proc_root = "/proc");

/// Members (cgroup.procs) of the cgroup at `dir` (absolute directory).
Result<std::vector<pid_t>> cgroup_members(const std::string& dir);

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

/// Waits (bounded) until cgroup.events reports "frozen 1". A member stuck in D
/// inside a driver never freezes, so a timeout is evidence, not an error.
bool cgroup_wait_frozen(const std::string& dir, std::chrono::milliseconds timeout);

/// Writes 1 to cgroup.kill: SIGKILL to every member of the cgroup AND of every cgroup
/// below it. Callers must have verified the whole subtree (cgroup_subtree_members).
Result<void> cgroup_kill(const std::string& dir);

/// True when cgroup.kill exists and we can write it.
bool cgroup_kill_available(const std::string& dir);

}  // namespace gpureap::proc
