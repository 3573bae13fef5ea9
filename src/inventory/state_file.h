#pragma once
// The agent's and the runs' records in the state directory (witnessed.json, runs/*.json):
// written whole or not at all, read only when this user wrote them. A record is evidence
// an unattended path acts on, so a file another user could have written or swapped is
// no record (W4-05).

#include <optional>
#include <string>

#include "util/result.h"

namespace gpureap::inventory {

/// Writes `text` to `path` atomically (a temp file beside it, mode 0600, renamed over
/// the old one); never follows a symlink.
Result<void> write_state_file(const std::string& path, const std::string& text);

/// The text of `path` when it is a regular file (not a symlink) of at most `max_bytes`,
/// owned by this process's effective user and writable by nobody else; nullopt
/// otherwise (missing, refused, unreadable).
std::optional<std::string> read_state_file(const std::string& path, std::size_t max_bytes);

/// This boot's identity (/proc/sys/kernel/random/boot_id, a random UUID the kernel makes
/// at boot); "" when unreadable. Pids and start times repeat across boots, so a record
/// of a process is another boot's unless it carries this.
std::string boot_id();

}  // namespace gpureap::inventory
