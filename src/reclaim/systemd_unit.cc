#include "reclaim/systemd_unit.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "proc/proc_parse.h"
#include "proc/spawn.h"
#include "util/text.h"

namespace gpureap::reclaim {
namespace {

// systemd.service(5), Restart=.
constexpr std::array<std::string_view, 7> kRestartValues{
    "no", "always", "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog"};

// A unit name as systemd spells it (systemd.unit(5)), and never one that reads as an
// option: the name comes from a cgroup path, which a delegated subtree may choose.
bool plain_service_name(std::string_view unit) {
  return unit.size() > 8 && unit.ends_with(".service") && unit.front() != '-' &&
         std::all_of(unit.begin(), unit.end(), [](unsigned char c) {
           return std::isalnum(c) || c == ':' || c == '-' || c == '_' || c == '.' || c == '\\' ||
                  c == '@';
         });
}

}  // namespace

std::optional<std::string> systemd_restart_policy(const std::string& unit,
                                                  const std::string& systemctl,
                                                  std::chrono::milliseconds timeout) {
  if (!plain_service_name(unit)) return std::nullopt;
  auto run = proc::spawn_captured({systemctl, "show", "-p", "Restart", "--value", "--", unit},
                                  std::chrono::steady_clock::now() + timeout);
  if (!run || run->timed_out || run->exit.exit_code() != 0) return std::nullopt;
  std::string_view answer = trim(run->output);
  if (std::find(kRestartValues.begin(), kRestartValues.end(), answer) == kRestartValues.end())
    return std::nullopt;
  return std::string(answer);
}

std::string system_service_of(std::string_view cgroup) {
  // Below user@UID.service runs the user's own manager: `systemctl` (the system's)
  // knows nothing of its units, and a same-named system unit is another one.
  if (cgroup.find("/user@") != std::string_view::npos) return "";
  std::string hint = proc::container_hint(cgroup);
  if (!hint.starts_with("systemd:") || !hint.ends_with(".service")) return "";
  return hint.substr(8);
}

}  // namespace gpureap::reclaim
