#pragma once
// What the agent saw die, kept in its state directory (`witnessed.json`), so that a
// direct look (`--no-agent`, a command on a node whose agent just restarted, a
// restarted agent itself) reaches the agent's verdict and not a guess from one
// snapshot: the agent and a direct scan give the same state (W3-07). Each record is
// keyed by the holder's identity (pid and start time): it never applies to a process
// that later reused the pid. The directory is the checked state directory (only its
// owner writes there); the file is opened without following a symlink.

#include <sys/types.h>

#include <map>
#include <string>

#include "proc/lineage.h"
#include "util/result.h"

namespace gpureap::inventory {

inline constexpr const char* kWitnessFile = "witnessed.json";

/// Writes `dead_parents` (holder pid -> what the agent saw die) to `<dir>/witnessed.json`
/// atomically (a temp file renamed over the old one), with this boot's id. Entries
/// without the holder's start time are left out: they could name a later process.
Result<void> save_witnesses(const std::string& dir, const std::map<pid_t, proc::DeadParent>& dead);

/// Reads `<dir>/witnessed.json`; a missing, unreadable or malformed file (or entry) is
/// no record (a direct look then decides from what it sees, as before). So is a file of
/// another boot (or one that names none: inventory::boot_id()), one another user owns
/// or could write (inventory/state_file.h), and a record whose holder (pid and start
/// time) no longer runs under `proc_root` (W4-05).
std::map<pid_t, proc::DeadParent> load_witnesses(const std::string& dir,
                                                 const std::string& proc_root = "/proc");

}  // namespace gpureap::inventory
