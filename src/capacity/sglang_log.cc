#include "capacity/sglang_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include "capacity/model_source.h"
#include "util/line_reader.h"
#include "util/text.h"
#include "util/units.h"

namespace gpureap::capacity {
namespace {

// A value too large to be real (a corrupt or crafted log): kept as this marker, which
// finish() rejects naming the field, rather than converted with undefined behaviour or
// wrapped into a plausible-looking number.
constexpr std::uint64_t kOutOfRange = UINT64_MAX;

// SGLang's get_available_gpu_memory and KV sizes divide by 1 << 30 and print "GB".
std::uint64_t gib(double v) {
  if (v * (1ULL << 30) > static_cast<double>(kMaxSize)) return kOutOfRange;
  return static_cast<std::uint64_t>(std::llround(v * (1ULL << 30)));
}

// The number right after `key` in `line` ("avail mem=" -> 80.84).
std::optional<double> number_after(std::string_view line, std::string_view key) {
  auto at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + key.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc{} || end == rest.data() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  return value;
}

// A figure above 8 PiB is out of range (kOutOfRange, rejected by finish()).
std::optional<std::uint64_t> gib_after(std::string_view line, std::string_view key) {
  auto v = number_after(line, key);
  return v ? std::optional(gib(*v)) : std::nullopt;
}

// Counts above 2^53 (past exact doubles, and past any token count) are out of range;
// converting them would be undefined.
std::optional<std::uint64_t> count_after(std::string_view line, std::string_view key) {
  auto v = number_after(line, key);
  if (v && *v >= 0x1p53) return kOutOfRange;
  return v ? std::optional(static_cast<std::uint64_t>(*v)) : std::nullopt;
}

// 'value' after key= in the server_args repr.
std::optional<std::string> quoted_after(std::string_view line, std::string_view key) {
  auto at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + key.size());
  if (rest.empty() || (rest.front() != '\'' && rest.front() != '"')) return std::nullopt;
  const char quote = rest.front();
  rest.remove_prefix(1);
  auto close = rest.find(quote);
  if (close == std::string_view::npos) return std::nullopt;
  return std::string(rest.substr(0, close));
}

// The rank in a "[2025-11-04 05:27:13 DP0 TP3 EP0]" prefix; 0 without one.
int rank_of(std::string_view line) {
  if (line.empty() || line.front() != '[') return 0;
  std::string_view tag = line.substr(0, line.find(']'));
  for (auto at = tag.find("TP"); at != std::string_view::npos; at = tag.find("TP", at + 2)) {
    if (at > 0 && tag[at - 1] != ' ' && tag[at - 1] != '[') continue;
    int rank = 0;
    auto [end, ec] = std::from_chars(tag.data() + at + 2, tag.data() + tag.size(), rank);
    if (ec == std::errc{} && end != tag.data() + at + 2) return rank;
  }
  return 0;
}

template <typename T>
void first(std::optional<T>& slot, std::optional<T> value) {
  if (!slot && value) slot = value;
}

void read_line(std::string_view line, SglangRankStartup& r) {
  const bool contains_avail = line.find("avail mem=") != std::string_view::npos;
  if (line.find("Load weight begin") != std::string_view::npos) {
    first(r.free_before_load, gib_after(line, "avail mem="));
  } else if (line.find("Load weight end") != std::string_view::npos) {
    first(r.free_after_load, gib_after(line, "avail mem="));
    first(r.weight_load_usage, gib_after(line, "mem usage="));
  } else if (line.find("KV Cache is allocated") != std::string_view::npos) {
    first(r.kv_tokens, count_after(line, "#tokens:"));
    if (auto kv = gib_after(line, "KV size:")) {
      first(r.kv_bytes, kv);
    } else if (auto k = gib_after(line, "K size:"), v = gib_after(line, "V size:"); k && v) {
      first(r.kv_bytes, std::optional(*k + *v));
    }
  } else if (line.find("Memory pool end") != std::string_view::npos) {
    first(r.free_after_pool, gib_after(line, "avail mem="));
  } else if (contains_avail && line.find("graph end") != std::string_view::npos) {
    first(r.free_after_graphs, gib_after(line, "avail mem="));
  } else if (line.find("max_total_num_tokens=") != std::string_view::npos) {
    first(r.free_when_ready, gib_after(line, "available_gpu_mem="));
    first(r.max_running_requests, count_after(line, "max_running_requests="));
    if (auto ctx = count_after(line, "context_len="))
      first(r.context_len,
            std::optional(*ctx > static_cast<std::uint64_t>(kMaxContextLen)
                              ? std::int64_t{-1}  // out of range: rejected with the field named
                              : static_cast<std::int64_t>(*ctx)));
  }
}

template <typename T, typename Get>
std::optional<T> min_over(const std::vector<SglangRankStartup>& ranks, Get get) {
  std::optional<T> out;
  for (const auto& r : ranks)
    if (auto v = get(r); v) out = out ? std::min(*out, *v) : *v;
  return out;
}

}  // namespace

void SglangLogParser::add_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find("server_args=") != std::string_view::npos) {
    // A (re)start: what came before belongs to an earlier start-up.
    startup_ = SglangStartup{};
    ranks_.clear();
    error_.clear();
    // Checked here, not later against flags: the log, not a flag, said it.
    if (auto f = number_after(line, "mem_fraction_static=")) {
      if (*f > 0 && *f <= 1)
        startup_.mem_fraction = f;
      else
        error_ = fmt::format("server_args mem_fraction_static={} is outside (0, 1]", *f);
    }
    if (auto tp = number_after(line, "tp_size=")) {
      if (*tp >= 1 && *tp <= kMaxTensorParallel && *tp == std::floor(*tp))
        startup_.tp_size = static_cast<int>(*tp);
      else if (error_.empty())
        error_ = fmt::format("server_args tp_size={} is out of range (1 to {})", *tp,
                             kMaxTensorParallel);
    }
    startup_.kv_cache_dtype = quoted_after(line, "kv_cache_dtype=");
    startup_.model_path = quoted_after(line, "model_path=");
    return;
  }
  const int rank = rank_of(line);
  if (auto it = ranks_.find(rank); it != ranks_.end()) {
    read_line(line, it->second);
    return;
  }
  // A rank is kept from its first line that says something, up to kMaxRanks.
  SglangRankStartup r;
  r.rank = rank;
  read_line(line, r);
  if (!r.free_before_load && !r.free_after_load && !r.weight_load_usage && !r.kv_tokens &&
      !r.kv_bytes && !r.free_after_pool && !r.free_after_graphs && !r.free_when_ready &&
      !r.max_running_requests && !r.context_len)
    return;
  if (ranks_.size() < kMaxRanks) ranks_.emplace(rank, r);
}

Result<SglangStartup> SglangLogParser::finish(std::string_view source) const {
  if (!error_.empty()) return fail(fmt::format("{}: {}", source, error_));
  for (const auto& [rank, r] : ranks_) {
    const std::pair<const char*, const std::optional<std::uint64_t>*> fields[] = {
        {"Load weight begin avail mem", &r.free_before_load},
        {"Load weight end avail mem", &r.free_after_load},
        {"Load weight end mem usage", &r.weight_load_usage},
        {"#tokens", &r.kv_tokens},
        {"KV size", &r.kv_bytes},
        {"Memory pool end avail mem", &r.free_after_pool},
        {"cuda graph end avail mem", &r.free_after_graphs},
        {"available_gpu_mem", &r.free_when_ready},
        {"max_running_requests", &r.max_running_requests}};
    for (const auto& [name, value] : fields)
      if (*value && **value == kOutOfRange)
        return fail(fmt::format(
            "{}: TP{} {} is out of range (a size above 8 PiB or a count above 2^53)", source,
            rank, name));
    if (r.context_len && *r.context_len < 1)
      return fail(fmt::format("{}: TP{} context_len is out of range (1 to {})", source, rank,
                              kMaxContextLen));
  }
  SglangStartup out = startup_;
  for (const auto& [rank, r] : ranks_)
    if (r.free_after_load || r.kv_tokens) out.ranks.push_back(r);
  if (std::ranges::none_of(out.ranks, [](const auto& r) { return r.free_after_load.has_value(); }))
    return fail(fmt::format(
        "{}: no SGLang start-up found (expected a 'Load weight end. ... avail mem=' line)",
        source));
  return out;
}

Result<SglangStartup> parse_sglang_log(std::string_view text, std::string_view source) {
  SglangLogParser parser;
  for_each_line(text, [&](std::string_view line) { parser.add_line(line); });
  return parser.finish(source);
}

Result<SglangStartup> read_sglang_log(const std::string& path, std::string_view flag) {
  auto opened = open_regular_file(path, flag);
  if (!opened) return std::unexpected(opened.error());
  const int fd = opened->fd;
  SglangLogParser parser;
  const int err = for_each_line(fd, SglangLogParser::kMaxLineBytes,
                                [&](std::string_view line) { parser.add_line(line); });
  ::close(fd);
  if (err != 0)
    return fail(fmt::format("{} {}: cannot read the file: {}", flag, path, std::strerror(err)),
                err);
  auto log = parser.finish(path);
  if (!log) return fail(fmt::format("{} {}", flag, log.error().message));
  return log;
}

namespace {

// The free memory before the weights loaded (M0), lowest rank, from whichever lines
// the log has; a note says which.
Result<std::uint64_t> recover_free_before_load(const SglangStartup& log, std::uint64_t after_load,
                                               std::uint64_t pool, Calibration& c,
                                               std::string_view source) {
  const auto& ranks = log.ranks;
  if (auto m0 = min_over<std::uint64_t>(ranks, [](auto& r) { return r.free_before_load; })) {
    c.notes.push_back("'Load weight begin' avail mem, lowest rank");
    return *m0;
  }
  if (auto sum = min_over<std::uint64_t>(ranks, [](auto& r) -> std::optional<std::uint64_t> {
        if (r.free_after_load && r.weight_load_usage)
          return *r.free_after_load + *r.weight_load_usage;
        return std::nullopt;
      })) {
    c.notes.push_back("'Load weight end' avail mem + mem usage, lowest rank");
    return *sum;
  }
  if (log.mem_fraction && *log.mem_fraction < 1.0 && after_load > pool) {
    c.notes.push_back("(free after load - KV pool) / (1 - mem_fraction_static)");
    return static_cast<std::uint64_t>(static_cast<double>(after_load - pool) /
                                      (1.0 - *log.mem_fraction));
  }
  return fail(
      fmt::format("{}: cannot recover the free memory before loading (no 'Load weight "
                  "begin' line, no 'mem usage', no mem_fraction_static)",
                  source));
}

// The fraction (stated, else implied by the pool), and the KV tokens it predicts,
// warned about when they do not match the log's pool.
void fraction_and_prediction(const SglangStartup& log, std::uint64_t after_load, std::uint64_t pool,
                             std::uint64_t cell, Calibration& c, std::string_view source) {
  // The fraction: stated in server_args, else implied by the pool SGLang sized:
  // pool = free_after_load - (1 - f) * M0.
  const double m0d = static_cast<double>(c.free_before_load);
  const double implied = 1.0 - (static_cast<double>(after_load) - static_cast<double>(pool)) / m0d;
  c.mem_fraction = log.mem_fraction.value_or(implied);
  if (!log.mem_fraction)
    c.notes.push_back(fmt::format("fraction {:.3f} implied by the pool", implied));

  const double budget = c.mem_fraction * m0d - static_cast<double>(c.weights_per_rank);
  // budget is below M0 (< 2^63) since the fraction is at most 1; the implied
  // one is not bounded, so guard the conversion (found by fuzz/sglang_log_fuzz.cc).
  c.predicted_kv_tokens =
      budget > 0 ? static_cast<std::uint64_t>(std::min(budget, 0x1p63)) / cell : 0;
  const double logged_cell = static_cast<double>(pool) / static_cast<double>(c.kv_tokens);
  if (std::abs(logged_cell / static_cast<double>(cell) - 1.0) > 0.03 ||
      std::abs(static_cast<double>(c.predicted_kv_tokens) / static_cast<double>(c.kv_tokens) -
               1.0) > 0.03) {
    c.warnings.push_back(
        {"calibration_mismatch",
         fmt::format("{}: the log's pool ({} tokens, {:.0f} bytes each) does not match this model "
                     "({} bytes per token; {} tokens predicted from the log's memory lines): is "
                     "--model the model that wrote the log?",
                     source, c.kv_tokens, logged_cell, cell, c.predicted_kv_tokens)});
  }
}

// Runtime reserve: what left the free memory between the pool and "ready",
// less the req_to_token table, which the planner recomputes per fraction.
// Per rank, then the largest: the rank with the least left decides.
void measure_runtime_reserve(const SglangStartup& log, std::uint64_t tokens, std::uint64_t cell,
                             std::int64_t context_len, Calibration& c) {
  const auto& ranks = log.ranks;
  std::optional<std::uint64_t> outside;
  std::optional<std::uint64_t> ready_seen;
  for (const auto& r : ranks) {
    auto ready = r.free_when_ready ? r.free_when_ready : r.free_after_graphs;
    if (!ready || !r.free_after_load) continue;
    const std::uint64_t rank_pool = r.kv_bytes.value_or(r.kv_tokens.value_or(tokens) * cell);
    if (*r.free_after_load <= rank_pool + *ready) continue;
    const std::uint64_t rank_outside = *r.free_after_load - rank_pool - *ready;
    if (!outside || rank_outside > *outside) {
      outside = rank_outside;
      ready_seen = ready;
    }
  }
  c.context_len = min_over<std::int64_t>(ranks, [](auto& r) { return r.context_len; });
  if (!outside) {
    c.notes.push_back("no 'available_gpu_mem' or graph-capture line: runtime reserve assumed");
    return;
  }
  const std::int64_t ctx = c.context_len.value_or(context_len);
  auto rows = min_over<std::uint64_t>(ranks, [](auto& r) { return r.max_running_requests; });
  const std::uint64_t table =
      sglang_req_to_token_bytes(rows.value_or(sglang_max_running_requests(c.kv_tokens, ctx)), ctx);
  c.runtime_reserve = *outside > table ? *outside - table : 0;
  c.notes.push_back(fmt::format(
      "runtime reserve {} = free after load - KV pool - free when "
      "ready ({}) - req_to_token ({})",
      format_bytes(*c.runtime_reserve), format_bytes(*ready_seen), format_bytes(table)));
}

}  // namespace

Result<Calibration> calibrate(const SglangStartup& log, const KvGeometry& kv,
                              std::int64_t context_len, std::string_view source) {
  Calibration c;
  c.tp = log.tp_size;
  if (log.kv_cache_dtype && log.kv_cache_dtype->starts_with("fp8")) c.kv_dtype = KvDtype::fp8_e4m3;
  const std::uint64_t cell = kv_bytes_per_token(kv, c.tp.value_or(1), c.kv_dtype);

  // SGLang all-reduces the free memory with MIN across ranks before sizing the
  // pool, so the tightest rank decides.
  const auto& ranks = log.ranks;
  auto after_load = min_over<std::uint64_t>(ranks, [](auto& r) { return r.free_after_load; });
  auto tokens = min_over<std::uint64_t>(ranks, [](auto& r) { return r.kv_tokens; });
  auto pool_bytes = min_over<std::uint64_t>(ranks, [](auto& r) { return r.kv_bytes; });
  if (!after_load)
    return fail(
        fmt::format("{}: no 'Load weight end. ... avail mem=' line to calibrate from", source));
  if (!tokens || *tokens == 0)
    return fail(
        fmt::format("{}: no 'KV Cache is allocated. #tokens:' line to calibrate from", source));
  c.kv_tokens = *tokens;
  const std::uint64_t pool = pool_bytes.value_or(*tokens * cell);

  auto m0 = recover_free_before_load(log, *after_load, pool, c, source);
  if (!m0) return std::unexpected(m0.error());
  c.free_before_load = *m0;
  if (*after_load >= c.free_before_load)
    return fail(
        fmt::format("{}: free memory after loading ({}) is not below the free memory "
                    "before ({})",
                    source, format_bytes(*after_load), format_bytes(c.free_before_load)));
  c.weights_per_rank = c.free_before_load - *after_load;
  fraction_and_prediction(log, *after_load, pool, cell, c, source);
  measure_runtime_reserve(log, *tokens, cell, context_len, c);
  return c;
}

}  // namespace gpureap::capacity
