#pragma once
// A run's name, and the markers that tie its processes to it after the fact.
// Every run has an id "<name>-<gpureap pid>". In cgroup mode its processes live
// in the cgroup "gpureap-run-<id>"; in both modes CMD starts with
// GPUREAP_RUN_ID=<id> in its environment, which its children inherit. If
// gpureap is SIGKILLed, these two are how `status` tells the run's leftovers
// apart from everything else, and how a later run knows the owner is gone.

#include <sys/types.h>

#include <cstdint>

#include <optional>
#include <string>
#include <string_view>

namespace gpureap::proc {

/// The environment variable set in CMD's environment.
inline constexpr std::string_view kRunIdVariable = "GPUREAP_RUN_ID";

/// "<name>-<pid>", with `name` reduced to [A-Za-z0-9_.] (others become '_')
/// and at most 40 characters; "run" when nothing is left. In a PID namespace of its
/// own (a container), "<name>-ns<inode>-<pid>": two containers' runs are both pid 1
/// there, and the namespace is what tells them apart on the host (W4-11(e)).
/// `pid_namespace` is 0 in the initial namespace (run_pid_namespace).
std::string make_run_id(std::string_view name, pid_t pid, std::uint64_t pid_namespace = 0);

/// The inode of this process's PID namespace under `proc_root` (/proc/self/ns/pid),
/// or 0 in the initial one (PROC_PID_INIT_INO) and where it cannot be read.
std::uint64_t run_pid_namespace(const std::string& proc_root);

/// The run name for a command: the last path component of argv[0].
std::string default_run_name(std::string_view argv0);

/// The pid of the gpureap that owns a run id (its last "-N" part).
std::optional<pid_t> run_owner(std::string_view run_id);

/// The run id in a /proc/PID/environ text (NUL-separated "KEY=value"
/// entries); nullopt when the process is not part of a run.
std::optional<std::string> run_id_from_environ(std::string_view environ);

}  // namespace gpureap::proc
