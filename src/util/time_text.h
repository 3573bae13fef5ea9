#pragma once
// Wall-clock time as text: RFC 3339 with the date, the sub-second and the UTC offset
// ("2025-06-01T14:03:07.412907+02:00"), the form an operator can paste into
// `journalctl --since` and a script can sort. Knows nothing of GPUs.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace gpureap {

using WallTime = std::chrono::system_clock::time_point;

/// `t` in the local time zone (TZ) as RFC 3339 with microseconds and the offset
/// ("+00:00" for UTC, never "Z", so every record has the same width).
std::string rfc3339(WallTime t);

/// The local date and time of `t` to the millisecond, for tables:
/// "2025-06-01 14:03:07.412".
std::string local_time_text(WallTime t);

/// Reads a time as an operator or a record writes it:
///   2025-06-01T14:03:07.412907+02:00   RFC 3339 (also Z / z, and a space for the T)
///   2025-06-01T14:03:07  2025-06-01 14:03  local time (seconds and fraction optional)
///   2025-06-01                         local midnight
/// nullopt for anything else (a field out of range, trailing text).
std::optional<WallTime> parse_time(std::string_view text);

}  // namespace gpureap
