#pragma once
// Calibration from a real SGLang start-up log. Each TP rank prints what it
// measured while starting (SGLang's "GB" are GiB: it divides by 1 << 30):
//
//   [.. TP0] Load weight begin. avail mem=93.58 GB
//   [.. TP0] Load weight end. type=..., dtype=..., avail mem=21.62 GB, mem usage=71.96 GB.
//   [.. TP0] KV Cache is allocated. #tokens: 160469, KV size: 10.50 GB
//   [.. TP0] Memory pool end. avail mem=9.12 GB
//   [.. TP0] Capture cuda graph end. Time elapsed: 13.81 s. mem usage=3.61 GB. avail mem=5.48 GB.
//   [.. TP0] max_total_num_tokens=160469, ..., max_running_requests=2048, context_len=262144,
//            available_gpu_mem=5.48 GB
//
// plus the `server_args=ServerArgs(...)` line with mem_fraction_static, tp_size
// and kv_cache_dtype. From these the planner takes M0, the weights as loaded and
// the runtime reserve of *that* machine, and predicts other settings from them.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/kv_planner.h"
#include "capacity/model_spec.h"
#include "util/result.h"

namespace gpureap::capacity {

/// What one TP rank printed while starting up; byte counts.
struct SglangRankStartup {
  int rank = 0;
  std::optional<std::uint64_t> free_before_load;   // Load weight begin: avail mem
  std::optional<std::uint64_t> free_after_load;    // Load weight end: avail mem
  std::optional<std::uint64_t> weight_load_usage;  // Load weight end: mem usage
  std::optional<std::uint64_t> kv_tokens;          // KV Cache is allocated: #tokens
  std::optional<std::uint64_t> kv_bytes;           // KV size, or K size + V size
  std::optional<std::uint64_t> free_after_pool;    // Memory pool end: avail mem
  std::optional<std::uint64_t> free_after_graphs;  // Capture cuda graph end: avail mem
  std::optional<std::uint64_t> free_when_ready;    // max_total_num_tokens=...: available_gpu_mem
  std::optional<std::uint64_t> max_running_requests;
  std::optional<std::int64_t> context_len;
};

/// One start-up of an SGLang server as its log tells it.
struct SglangStartup {
  std::vector<SglangRankStartup> ranks;  // by rank
  std::optional<double> mem_fraction;    // server_args mem_fraction_static
  std::optional<int> tp_size;
  std::optional<std::string> kv_cache_dtype;
  std::optional<std::string> model_path;
};

/// Reads a log one line at a time (a server's log can be gigabytes; only the
/// last start-up is kept). When the log holds several start-ups (restarts
/// appended), each `server_args=` line starts a new one and discards the one
/// before; within a start-up the first value of each field per rank wins (a
/// speculative draft model loads after the target). Lines without a
/// "[... TPn]" tag count as rank 0. Memory is bounded: lines are read cut to
/// kMaxLineBytes by read_sglang_log, and at most kMaxRanks ranks are kept.
class SglangLogParser {
 public:
  /// Longer lines are cut: a server_args line is a few KB.
  static constexpr std::size_t kMaxLineBytes = 1 << 20;
  /// Lines tagged with further ranks are ignored (no launch has this many).
  static constexpr std::size_t kMaxRanks = 4096;

  /// One line, without its '\n' (a trailing '\r' is ignored).
  void add_line(std::string_view line);
  /// The start-up read so far. Fails naming `source` when no rank printed the
  /// "Load weight end ... avail mem" line.
  Result<SglangStartup> finish(std::string_view source) const;

 private:
  SglangStartup startup_;  // the server_args fields of the current start-up
  std::string error_;      // a server_args value out of range, reported by finish()
  std::map<int, SglangRankStartup> ranks_;
};

/// Parses a whole log held in memory (tests, fuzzing); as SglangLogParser.
Result<SglangStartup> parse_sglang_log(std::string_view text, std::string_view source);

/// Streams the log at `path` through SglangLogParser; memory does not grow with
/// the file. Every failure starts "<flag> <path>: " (no such file, not a
/// regular file, cannot read it, no start-up in it).
Result<SglangStartup> read_sglang_log(const std::string& path, std::string_view flag);

/// What a log says about its machine, in the planner's terms.
struct Calibration {
  std::uint64_t free_before_load = 0;            // M0: minimum over the ranks
  std::uint64_t weights_per_rank = 0;            // M0 - free after load: weights as loaded
  std::optional<std::uint64_t> runtime_reserve;  // graphs + workspaces, when the log has them
  double mem_fraction = 0;                       // the fraction the logged launch used
  std::uint64_t kv_tokens = 0;                   // tokens the logged launch got
  std::uint64_t predicted_kv_tokens = 0;         // the planner's figure for that launch
  KvDtype kv_dtype = KvDtype::bf16;
  std::optional<int> tp;
  std::optional<std::int64_t> context_len;
  std::vector<std::string> notes;  // how each figure was derived
  std::vector<Warning> warnings;   // calibration_mismatch when the log and the model disagree
};

/// Derives the calibration from a parsed log and the model's KV geometry.
/// `context_len` is the model's default, used when the log does not state one.
/// M0 comes from "Load weight begin", else avail + usage of "Load weight end",
/// else (free after load - pool) / (1 - f). Fails naming `source` when neither
/// M0 nor the KV pool can be recovered.
Result<Calibration> calibrate(const SglangStartup& log, const KvGeometry& kv,
                              std::int64_t context_len, std::string_view source);

}  // namespace gpureap::capacity
