#pragma once
// Sizes and durations as users type them ("20GiB", "300ms") and as we print them.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gpureap {

/// The largest size parse_size accepts: 2^53 bytes (8 PiB), far above any GPU's
/// or host's memory and still exact in a double, so sums and products of sizes
/// in the planner cannot wrap.
inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kGiB = 1ULL << 30;
inline constexpr std::uint64_t kMaxSize = 1ULL << 53;

/// Parses a byte size with a unit: B, KiB, MiB, GiB, TiB (powers of 1024) or
/// KB, MB, GB, TB (powers of 1000). A bare number is rejected when
/// `require_unit` is true, so "96" cannot silently mean 96 bytes. Negative,
/// non-finite (inf, nan) and sizes above kMaxSize are rejected.
Result<std::uint64_t> parse_size(std::string_view text, bool require_unit = true);

/// Parses a whole decimal number in [min, max]: digits only (an optional
/// leading '+'), no sign, no exponent, no hex, no spaces inside. Empty text,
/// "-1", "1.5", "0x10", "1e3" and anything above `max` (however many digits)
/// are errors that name `what` (the option, e.g. "--pid") and the text.
Result<std::uint64_t> parse_count(std::string_view text, std::string_view what, std::uint64_t min,
                                  std::uint64_t max);

/// Parses a finite decimal number in [min, max] (exponents allowed: "2.5",
/// "1e-3"); inf, nan and values outside the range are errors naming `what`.
Result<double> parse_real(std::string_view text, std::string_view what, double min, double max);

/// Parses a duration: a number with ns, us, ms, s, m or h ("300ms", "1.5s").
/// A bare number means seconds.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

/// A duration more than 0 (parse_duration's), in milliseconds; the error starts with
/// `what` (an option's name): "--tick: must be more than 0 (got 0s)".
Result<std::chrono::milliseconds> parse_positive_duration(std::string_view text,
                                                          std::string_view what);

/// "92.1 GiB", "512 MiB", "0 B": binary units, three significant digits.
std::string format_bytes(std::uint64_t bytes);
/// format_bytes with a minus sign below zero: "-1.50 GiB" (a shortfall).
std::string format_signed_bytes(std::int64_t bytes);

/// A duration as an option takes it, in its largest whole unit: "15m", "2h", "30s",
/// "500ms" (parse_duration reads it back).
std::string duration_as_option(std::chrono::milliseconds d);

/// "0.42 s", "12 ms", "3m05s": a human-readable elapsed time.
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace gpureap
