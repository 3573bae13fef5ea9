#pragma once
// A run's name, and the markers that tie its processes to it after the fact.
// Every run has an id "<name>-<gpureap pid>". In cgroup mode its processes live
// in the cgroup "gpureap-run-<id>"; in both modes CMD starts with
// GPUREAP_RUN_ID=<id> in its environment, which its children inherit. If
// gpureap is SIGKILLed, these two are how `status` tells the run's leftovers
// apart from everything else, and how a later run knows the owner is gone.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace gpureap::proc {

/// The environment variable set in CMD's environment.
inline constexpr std::string_view kRunIdVariable = "GPUREAP_RUN_ID";

/// "<name>-<pid>", with `name` reduced to [A-Za-z0-9_.] (others become '_')
/// and at most 40 characters; "run" when nothing is left.
std::string make_run_id(std::string_view name, pid_t pid);

/// The run name for a command: the last path component of argv[0].
std::string default_run_name(std::string_view argv0);

/// The pid of the gpureap that owns a run id (its last "-N" part).
std::optional<pid_t> run_owner(std::string_view run_id);

/// The run id in a /proc/PID/environ text (NUL-separated "KEY=value"
/// entries); nullopt when the process is not part of a run.
std::optional<std::string> run_id_from_environ(std::string_view environ);

}  // namespace gpureap::proc
