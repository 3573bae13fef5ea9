#pragma once
// Whether systemd restarts a service when its main process dies. A GPU worker that
// is a system service's main process, or the child of one, comes back by itself
// under Restart=always (or on-failure, ...) seconds after free killed it: the unit,
// not a live parent, is the supervisor to name (`systemctl stop NAME.service`) and
// to settle on. systemd is asked, never guessed: without an answer, no claim.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpureap::reclaim {

/// How the reclaim engine asks for a unit's Restart= setting (the seam: tests pass
/// a fake). Returns the setting ("no", "always", "on-failure", ...), or nullopt
/// when it cannot tell.
using RestartPolicyFn = std::function<std::optional<std::string>(const std::string& unit)>;

/// The unit's Restart= setting from `SYSTEMCTL show -p Restart --value -- UNIT`, run
/// without a shell and killed at `timeout`. nullopt when UNIT is not a plain
/// service name, systemctl is missing or fails (no systemd: a container), times out,
/// or answers something that is not a Restart= value.
std::optional<std::string> systemd_restart_policy(
    const std::string& unit, const std::string& systemctl = "systemctl",
    std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

/// The system service NAME.service that `cgroup` (a v2 path, /proc/PID/cgroup) puts
/// a process in, or "" (a scope, a user's own service manager, no unit).
std::string system_service_of(std::string_view cgroup);

}  // namespace gpureap::reclaim
