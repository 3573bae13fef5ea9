#pragma once
// The audit file: DIR/audit.jsonl in the state directory, one record per line
// (report/audit_format.h), mode 0600, bounded: at kRotateBytes it becomes
// audit.jsonl.1 (the older .1 becomes .2, the older .2 is dropped), so the trail
// never holds more than about three times that. Several gpureap processes append at
// once (a person's free, the agent's reaper, an epilog): each line is one write(2)
// with O_APPEND, so lines never interleave, and the size check, the rotation and the
// write happen under an flock of the file, so two writers never both rotate. Writing
// waits at most 100 ms for that lock (held for microseconds by a writer): a writer that
// does not get it appends without rotating (a later write rotates).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reclaim/audit.h"
#include "util/result.h"

namespace gpureap::audit {

inline constexpr std::string_view kAuditFileName = "audit.jsonl";
/// The size at which the file is rotated.
inline constexpr std::uint64_t kRotateBytes = 1024 * 1024;
/// Rotated files kept beside the current one: audit.jsonl.1 and audit.jsonl.2.
inline constexpr int kRotatedKept = 2;

/// Appends `line` (one whole record, ending in '\n') to DIR/audit.jsonl, rotating
/// first when the line would take the file past `rotate_at`. Never follows a symbolic
/// link; refuses a file that is not a regular file owned by this user. Fails with the
/// reason; never blocks on another writer.
Result<void> append_audit_line(const std::string& dir, std::string_view line,
                               std::uint64_t rotate_at = kRotateBytes);

/// One record as read back, with the line it was read from (what `log --json` prints).
struct StoredRecord {
  reclaim::AuditRecord record;
  std::string line;  // without its '\n'
};

struct AuditReading {
  std::vector<StoredRecord> records;  // oldest first, over the rotated files and the current
  std::vector<std::string> files;     // the files read, oldest first (none: no record yet)
  /// Lines that are not records, by file ("3 lines of DIR/audit.jsonl.1 are not audit
  /// records; skipped"). A last line cut short (a writer killed mid-line, or one
  /// being written) is skipped silently.
  std::vector<std::string> warnings;
};

/// Reads DIR/audit.jsonl.2, .1 and audit.jsonl (those that exist), oldest first. Fails
/// only when a file that exists cannot be read (permission, not a regular file).
Result<AuditReading> read_audit_log(const std::string& dir);

}  // namespace gpureap::audit
