#pragma once
// Sizes and durations as users type them ("20GiB", "300ms") and as we print them.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gpureap {

/// Parses a byte size with a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or
/// KB, MB, GB, TB (powers of 1000). A bare number is rejected when
/// `require_unit` is true, so "96" cannot silently mean 96 bytes.
Result<std::uint64_t> parse_size(std::string_view text, bool require_unit = true);

/// Parses a duration: a number with ns, us, ms, s, m or h ("300ms", "1.5s").
/// A bare number means seconds.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

/// "92.1 GiB", "512 MiB", "0 B": binary units, three significant digits.
std::string format_bytes(std::uint64_t bytes);

/// "0.42 s", "12 ms", "3m05s": a human-readable elapsed time.
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace gpureap
