#pragma once
// The records in the state directory (witnessed.json, runs/*.json, unheld.json, baselines):
// written whole or not at all, read only when this user wrote them. A record is evidence
// an unattended path acts on, so a file another user could have written or swapped is
// no record (W4-05).

#include <nlohmann/json_fwd.hpp>

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

/// Writes `records` (an array) as this boot's, `{"boot_id": ..., key: records}`, through
/// write_state_file; text a process gave (any bytes) is replaced, never a throw.
Result<void> write_boot_records(const std::string& path, const std::string& key,
                                const nlohmann::json& records);
/// The array under `key` of `path` when read_state_file gives it and it says this boot
/// (another boot's records, or a file that does not say which boot, name processes of that
/// boot: pids and start ticks repeat, W4-05); an empty array otherwise.
nlohmann::json read_boot_records(const std::string& path, const std::string& key,
                                 std::size_t max_bytes);

}  // namespace gpureap::inventory
