#pragma once
// The records in the state directory (witnessed.json, runs/*.json, unheld.json, baselines):
// written whole or not at all, read only when this user wrote them. A record is evidence
// an unattended path acts on, so a file another user could have written or swapped is
// no record (W4-05).

#include <optional>
#include <string>

#include "util/result.h"

namespace gpureap::inventory {

/// Writes `text` to `path` atomically: a temp file beside it written with write(2),
/// fsync'ed and closed (each checked, mode 0600, never through a symlink), then renamed
/// over the old one; on any failure the temp file is removed and the old file stays.
/// Every file of the state directory is written so (baselines, witnesses, runs,
/// sightings).
Result<void> write_state_file(const std::string& path, const std::string& text);

/// The text of `path` when it is a regular file (not a symlink) of at most `max_bytes`,
/// owned by this process's effective user and writable by nobody else; nullopt
/// otherwise (missing, refused, unreadable).
std::optional<std::string> read_state_file(const std::string& path, std::size_t max_bytes);

/// This boot's identity (`<proc_root>/sys/kernel/random/boot_id`, a random UUID the
/// kernel makes at boot); "" when unreadable. Pids and start times repeat across boots, so
/// a record of a process (or a sighting of memory) is another boot's unless it carries
/// this.
std::string boot_id(const std::string& proc_root = "/proc");

}  // namespace gpureap::inventory
