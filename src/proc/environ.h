#pragma once
// A process's environment (/proc/PID/environ): how a process is recognised after
// whoever started it is gone. `free --env NAME=VALUE` selects by it, the Slurm epilog
// finds a job's escaped workers by SLURM_JOB_ID, and a `gpureap run` marks its
// processes with GPUREAP_RUN_ID (run_id.h). The text is what the process was started
// with (the kernel shows the initial environment block, which the process may
// overwrite): untrusted, compared byte for byte, never interpreted.
//
// Reading it needs ptrace-read access: root, or the same user on a dumpable process.
// A denial is an answer of its own ("cannot tell"), never taken as "not set".

#include <optional>
#include <string>
#include <string_view>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::proc {

/// One NAME=VALUE, matched against whole entries of an environment.
struct EnvEntry {
  std::string name;
  std::string value;
  std::string text() const { return name + "=" + value; }
  friend bool operator==(const EnvEntry&, const EnvEntry&) = default;
};

/// Parses "NAME=VALUE": NAME is everything before the first '=' and must not be
/// empty; VALUE may be empty or hold further '='. Fails, quoting the text, otherwise.
Result<EnvEntry> parse_env_entry(std::string_view text);

/// The value of NAME in an environ text (NUL-separated "NAME=value" entries): the
/// first entry for NAME, as getenv(3) would see it; nullopt when there is none.
std::optional<std::string_view> environ_value(std::string_view environ, std::string_view name);

/// True when some entry of `environ` is exactly NAME=VALUE.
bool environ_has(std::string_view environ, const EnvEntry& entry);

/// /proc/PID/environ of the process `id`, as that process's own: read through its
/// /proc/PID directory, whose start time is checked after the read (a pid reused
/// meanwhile is not `id`). A zombie leader (main thread exited, other threads live:
/// still a process, still a holder) has no environment of its own to show; it is
/// read from a live thread's task/TID/environ instead. Fails with sys_errno ESRCH
/// when the process is gone (or the pid reused, or every thread exited), EACCES/EPERM
/// when access is denied (another user's process, or a non-dumpable one, without
/// root), or the errno of any other failure; the message names the pid and the reason.
Result<std::string> read_environ(const ProcessId& id, std::string_view proc_root);

/// /proc/PID/cmdline of the process `id` for display and --match (NULs as spaces, as
/// Holder::cmdline), read as read_environ reads the environment: a zombie leader's from
/// a live thread (its own reads empty), the same errors. Empty for a process whose
/// argument vector is empty (a kernel thread).
Result<std::string> read_process_cmdline(const ProcessId& id, std::string_view proc_root);

}  // namespace gpureap::proc
