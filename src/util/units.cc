#include "util/units.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>

#include "util/text.h"

namespace gpureap {
namespace {

struct Unit {
  std::string_view name;
  double factor;
};

// Longest names first so "GiB" is not read as "G" + "iB".
constexpr std::array kSizeUnits{
    Unit{"TiB", 1099511627776.0},
    Unit{"GiB", 1073741824.0},
    Unit{"MiB", 1048576.0},
    Unit{"KiB", 1024.0},
    Unit{"TB", 1e12},
    Unit{"GB", 1e9},
    Unit{"MB", 1e6},
    Unit{"KB", 1e3},
    Unit{"kB", 1e3},
    Unit{"B", 1.0},
};

constexpr std::array kDurationUnits{
    Unit{"ns", 1.0}, Unit{"us", 1e3}, Unit{"ms", 1e6},
    Unit{"s", 1e9},  Unit{"m", 60e9}, Unit{"h", 3600e9},
};

// Splits "20GiB" into 20 and "GiB". Fails on an empty or negative number.
Result<std::pair<double, std::string_view>> split_number(std::string_view text,
                                                         std::string_view what) {
  text = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end == text.data())
    return fail(fmt::format("invalid {} '{}': expected a number with a unit", what, text));
  if (value < 0 || !std::isfinite(value))
    return fail(fmt::format("invalid {} '{}': must be a non-negative number", what, text));
  return std::pair{value, trim(std::string_view(end, text.data() + text.size()))};
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text, bool require_unit) {
  auto parts = split_number(text, "size");
  if (!parts) return std::unexpected(parts.error());
  auto [value, unit] = *parts;
  if (unit.empty()) {
    if (require_unit)
      return fail(fmt::format(
          "invalid size '{}': add a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", trim(text)));
    if (value > static_cast<double>(kMaxSize))
      return fail(fmt::format("invalid size '{}': too large (at most 8 PiB)", trim(text)));
    return static_cast<std::uint64_t>(value);
  }
  for (const auto& u : kSizeUnits) {
    if (unit == u.name) {
      double bytes = value * u.factor;
      if (bytes > static_cast<double>(kMaxSize))
        return fail(fmt::format("invalid size '{}': too large (at most 8 PiB)", trim(text)));
      return static_cast<std::uint64_t>(std::llround(bytes));
    }
  }
  return fail(fmt::format(
      "invalid size '{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
      trim(text), unit));
}

Result<std::uint64_t> parse_count(std::string_view text, std::string_view what, std::uint64_t min,
                                  std::uint64_t max) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  auto expected = [&] {
    return fail(fmt::format("{} '{}': expected a whole number from {} to {}", what, text, min, max));
  };
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return expected();
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  // result_out_of_range: more than 2^64-1, which is above any max.
  if (ec == std::errc::result_out_of_range || (ec == std::errc{} && value > max))
    return fail(fmt::format("{} {}: too large (at most {})", what, text, max));
  if (ec != std::errc{} || end != digits.data() + digits.size()) return expected();
  if (value < min) return fail(fmt::format("{} {}: must be at least {}", what, text, min));
  return value;
}

Result<double> parse_real(std::string_view text, std::string_view what, double min, double max) {
  std::string_view t = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec == std::errc::result_out_of_range)
    return fail(fmt::format("{} {}: out of range ({} to {})", what, text, min, max));
  if (ec != std::errc{} || t.empty() || end != t.data() + t.size() || !std::isfinite(value))
    return fail(fmt::format("{} '{}': expected a finite number from {} to {}", what, text, min, max));
  if (value < min || value > max)
    return fail(fmt::format("{} {}: out of range ({} to {})", what, text, min, max));
  return value;
}

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  auto parts = split_number(text, "duration");
  if (!parts) return std::unexpected(parts.error());
  auto [value, unit] = *parts;
  double factor = 1e9;
  if (!unit.empty()) {
    factor = 0;
    for (const auto& u : kDurationUnits)
      if (unit == u.name) factor = u.factor;
    if (factor == 0)
      return fail(fmt::format("invalid duration '{}': unknown unit '{}' (use ns, us, ms, s, m, h)",
                              trim(text), unit));
  }
  double ns = value * factor;
  if (ns > 1e18) return fail(fmt::format("invalid duration '{}': too long", trim(text)));
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

Result<std::chrono::milliseconds> parse_positive_duration(std::string_view text,
                                                          std::string_view what) {
  auto d = parse_duration(text);
  if (!d) return fail(fmt::format("{}: {}", what, d.error().message));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  if (ms.count() <= 0) return fail(fmt::format("{}: must be more than 0 (got {})", what, text));
  return ms;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  std::size_t i = 0;
  while (v >= 1024.0 && i + 1 < names.size()) {
    v /= 1024.0;
    ++i;
  }
  if (i == 0) return fmt::format("{} B", bytes);
  if (v >= 100) return fmt::format("{:.0f} {}", v, names[i]);
  if (v >= 10) return fmt::format("{:.1f} {}", v, names[i]);
  return fmt::format("{:.2f} {}", v, names[i]);
}

std::string format_signed_bytes(std::int64_t bytes) {
  return bytes < 0 ? "-" + format_bytes(static_cast<std::uint64_t>(-bytes))
                   : format_bytes(static_cast<std::uint64_t>(bytes));
}

std::string duration_as_option(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_duration(std::chrono::nanoseconds d) {
  double s = std::chrono::duration<double>(d).count();
  if (s < 0) s = 0;
  if (s < 1.0) return fmt::format("{:.0f} ms", s * 1000);
  if (s < 60) return fmt::format("{:.2f} s", s);
  auto total = static_cast<long long>(s);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  if (total < 86400) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  return fmt::format("{}d{:02}h", total / 86400, (total % 86400) / 3600);
}

}  // namespace gpureap
