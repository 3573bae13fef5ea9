#include "capacity/plan_args.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string>

#include "util/text.h"
#include "util/units.h"

namespace gpureap::capacity {
namespace {

// The whole of `text` as a number, or nullopt.
std::optional<double> whole_number(std::string_view text) {
  text = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

double round6(double v) {
  return std::round(v * 1e6) / 1e6;
}

Result<double> fraction(std::string_view whole, std::string_view part, const char* what) {
  auto value = whole_number(part);
  if (!value)
    return fail(fmt::format("--mem-fraction {}: {} '{}' is not a number", whole, what, trim(part)));
  return *value;
}

Result<void> check_fraction(std::string_view whole, double f) {
  if (!(f > 0.0 && f <= 1.0))
    return fail(
        fmt::format("--mem-fraction {}: {} is outside (0, 1]; it is the share of the "
                    "GPU's free memory that weights and KV cache may use",
                    whole, f));
  return {};
}

}  // namespace

Result<std::uint64_t> parse_size_flag(std::string_view flag, std::string_view text) {
  auto size = parse_size(text, /*require_unit=*/true);
  if (!size) return fail(fmt::format("{} {}: {}", flag, trim(text), size.error().message));
  if (*size == 0) return fail(fmt::format("{} {}: must be larger than zero", flag, trim(text)));
  return *size;
}

Result<std::vector<double>> parse_mem_fraction(std::string_view text) {
  std::vector<std::string_view> parts;
  std::string_view rest = text;
  for (auto colon = rest.find(':'); colon != std::string_view::npos; colon = rest.find(':')) {
    parts.push_back(rest.substr(0, colon));
    rest.remove_prefix(colon + 1);
  }
  parts.push_back(rest);

  if (parts.size() == 1) {
    auto f = fraction(text, parts[0], "value");
    if (!f) return std::unexpected(f.error());
    if (auto ok = check_fraction(text, *f); !ok) return std::unexpected(ok.error());
    return std::vector<double>{*f};
  }
  if (parts.size() != 3)
    return fail(
        fmt::format("--mem-fraction {}: expected F or FROM:TO:STEP (e.g. 0.80:0.95:0.01)", text));
  auto from = fraction(text, parts[0], "FROM");
  if (!from) return std::unexpected(from.error());
  auto to = fraction(text, parts[1], "TO");
  if (!to) return std::unexpected(to.error());
  auto step = fraction(text, parts[2], "STEP");
  if (!step) return std::unexpected(step.error());
  // The sweep's values are rounded to six decimals, so its ends are checked
  // rounded: 4e-11 as FROM would give a fraction of 0 (found by fuzz/units_fuzz.cc).
  *from = round6(*from);
  *to = round6(*to);
  if (auto ok = check_fraction(text, *from); !ok) return std::unexpected(ok.error());
  if (auto ok = check_fraction(text, *to); !ok) return std::unexpected(ok.error());
  if (*from > *to)
    return fail(fmt::format("--mem-fraction {}: FROM {} is above TO {}", text, *from, *to));
  if (!(*step > 0)) return fail(fmt::format("--mem-fraction {}: STEP must be positive", text));
  // The half-step slack keeps TO in the sweep despite binary rounding.
  const double count = std::floor((*to - *from) / *step + 1e-6) + 1;
  if (count > 1000)
    return fail(fmt::format("--mem-fraction {}: {} points; at most 1000", text, count));
  std::vector<double> values;
  for (int i = 0; i < static_cast<int>(count); ++i) values.push_back(round6(*from + i * *step));
  return values;
}

Result<KvDtype> parse_kv_dtype(std::string_view text) {
  const std::string_view t = trim(text);
  if (t == "bf16" || t == "auto" || t == "bfloat16" || t == "fp16" || t == "float16")
    return KvDtype::bf16;
  if (t == "fp8_e4m3" || t == "fp8" || t == "fp8_e5m2") return KvDtype::fp8_e4m3;
  return fail(fmt::format("--kv-dtype {}: expected bf16 or fp8_e4m3", t));
}

Result<std::uint64_t> parse_hicache_size(std::string_view text) {
  if (auto gb = whole_number(text)) {
    if (!(*gb > 0))
      return fail(
          fmt::format("--hicache-size {}: must be larger than zero (GB per rank)", trim(text)));
    if (*gb * 1e9 > static_cast<double>(kMaxSize))
      return fail(fmt::format("--hicache-size {}: too large (at most {:.0f} GB per rank)",
                              trim(text), static_cast<double>(kMaxSize) / 1e9));
    return static_cast<std::uint64_t>(std::llround(*gb * 1e9));
  }
  return parse_size_flag("--hicache-size", text);
}

Result<int> parse_tensor_parallel(std::string_view text) {
  auto tp = parse_count(text, "--tp", 1, kMaxTensorParallel);
  if (!tp) return std::unexpected(tp.error());
  return static_cast<int>(*tp);
}

Result<std::int64_t> parse_token_count(std::string_view flag, std::string_view text,
                                       std::int64_t min) {
  auto n = parse_count(text, flag, static_cast<std::uint64_t>(min),
                       static_cast<std::uint64_t>(kMaxContextLen));
  if (!n) return std::unexpected(n.error());
  return static_cast<std::int64_t>(*n);
}

Result<double> parse_hicache_ratio(std::string_view text) {
  auto ratio = parse_real(text, "--hicache-ratio", 0, 1000);
  if (!ratio) return std::unexpected(ratio.error());
  if (!(*ratio > 0))
    return fail(fmt::format("--hicache-ratio {}: must be larger than zero", trim(text)));
  return *ratio;
}

}  // namespace gpureap::capacity
