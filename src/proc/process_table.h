#pragma once
// A snapshot of the process table and per-process evidence readers
// (command line, wait channel, kernel stack, thread states).

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::proc {

/// One process of a snapshot, read from /proc/PID/stat and stat() of /proc/PID.
struct ProcessEntry {
  ProcessId id;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  uid_t uid = 0;  // owner of /proc/PID: the effective uid (root for non-dumpable processes)
  char state = '?';
  unsigned flags = 0;
  std::string comm;
  bool kernel_thread = false;
  int tty_nr = 0;  // controlling terminal (stat field 7), 0 when none
};

/// The login name of `uid`, or the number when it has none (no caching).
std::string user_name(uid_t uid);

/// The uid of a login name, or of a number (`--user 1000`): "unknown user 'NAME'" for a
/// name that is none, parse_count's error for a number out of range.
Result<uid_t> user_uid(const std::string& text);

/// Every process under `proc_root`, sorted by pid. Processes that exit while
/// being read are left out. Fails only when `proc_root` itself cannot be read.
Result<std::vector<ProcessEntry>> read_process_table(std::string_view proc_root);

/// The same table for `pids`, read through `proc_fd` (an open proc_root): a caller that
/// has listed the processes already (the holder scan) does not list them again.
std::vector<ProcessEntry> read_process_table_at(int proc_fd, std::vector<pid_t> pids);

/// The entry of `table` for `id` (pid and start time), or for `pid`; nullptr when none.
const ProcessEntry* find_process(const std::vector<ProcessEntry>& table, const ProcessId& id);
const ProcessEntry* find_process(const std::vector<ProcessEntry>& table, pid_t pid);

/// The processes below `root` in `table` (children, grandchildren, ...), parents
/// before their children; `root` itself is not included.
std::vector<ProcessId> descendants(const std::vector<ProcessEntry>& table, pid_t root);

/// The parent chain of `pid`: its parent first, then the grandparent, up to the
/// namespace's init (pid 1). Empty when `pid` cannot be read. Callers must
/// protect the ancestors of gpureap itself from any kill.
std::vector<pid_t> ancestors(pid_t pid, std::string_view proc_root);

/// /proc/PID/cmdline for display (NULs as spaces); empty when unreadable or empty
/// (kernel threads, zombies).
std::string read_cmdline(pid_t pid, std::string_view proc_root);

/// /proc/PID/wchan: the kernel function the task sleeps in; empty when running
/// ("0") or unreadable.
std::string read_wchan(pid_t pid, std::string_view proc_root);

/// /proc/PID/stack (needs root and CONFIG_STACKTRACE); empty when unreadable.
std::string read_stack(pid_t pid, std::string_view proc_root);

/// The state of each thread (task/*/stat), sorted by tid; empty when unreadable.
std::vector<ThreadState> read_thread_states(pid_t pid, std::string_view proc_root);

/// As read_thread_states, relative to an open /proc/PID directory, so the
/// answer belongs to the process that directory was opened for.
std::vector<ThreadState> read_thread_states_at(int pid_dirfd);

}  // namespace gpureap::proc
