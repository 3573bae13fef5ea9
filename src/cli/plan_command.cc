// `gpureap plan`: what a server launch will get from its KV-cache settings,
// before it is launched. Steps: parse the flags -> resolve the model (preset or
// config.json, weight bytes) -> measure the GPU (a start-up log, --gpu-memory or
// NVML) -> plan every fraction -> report (table or JSON). All arithmetic lives in
// src/capacity; this file reads files and NVML and owns the output.

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "capacity/hf_config.h"
#include "capacity/host_memory.h"
#include "capacity/kv_planner.h"
#include "capacity/model_preset.h"
#include "capacity/model_source.h"
#include "capacity/plan_args.h"
#include "capacity/sglang_log.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "report/json.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

namespace cap = gpureap::capacity;
using json = nlohmann::ordered_json;

struct PlanOptions {
  std::string model;
  std::string gpu_memory;
  int tp = 0;  // 0: not given (the log's, else 1)
  std::string mem_fraction;
  std::string kv_dtype;
  std::string hicache_size;
  double hicache_ratio = 0;
  std::string host_memory;
  std::int64_t context_len = 0;
  std::int64_t avg_prompt = 0;
  std::int64_t avg_output = 0;
  std::string engine = "sglang";
  std::string weights;
  std::string from_log;
  // Which options were given.
  CLI::Option* tp_opt = nullptr;
  CLI::Option* ratio_opt = nullptr;
  CLI::Option* context_opt = nullptr;
  CLI::Option* prompt_opt = nullptr;
  CLI::Option* output_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
};

// A failure the user fixes by changing the command line: exit 2.
struct UsageError {
  std::string message;
};

template <typename T>
using Step = std::expected<T, UsageError>;

std::unexpected<UsageError> usage(std::string message) {
  return std::unexpected(UsageError{std::move(message)});
}

// ---------------------------------------------------------------------------
// The GPU through NVML, when --gpu-memory and --from-log are both absent.

struct Measured {
  cap::GpuBudget gpu;
  std::string m0_origin;       // one line: where M0 came from
  std::string reserve_origin;  // one line: where the runtime reserve came from
  bool local = false;          // measured on this machine (NVML): host RAM may be read here
};

Step<Measured> measure_with_nvml(const GlobalOptions& global, int tp, std::uint64_t weights,
                                 std::vector<std::string>& notes) {
  auto source = open_gpu_source(global);
  const gpu::GpuSnapshot snap = source->snapshot(std::chrono::seconds(5));
  std::vector<const gpu::GpuInfo*> usable;
  for (const auto& g : snap.gpus)
    if (g.memory && g.memory->total > 0) usable.push_back(&g);
  if (usable.empty()) {
    return usage(fmt::format("no GPU found: pass --gpu-memory{}",
                             snap.problem.empty() ? "" : fmt::format(" ({})", snap.problem)));
  }
  // SGLang sizes every rank's pool from the tightest GPU; the launch uses the
  // first tp GPUs (CUDA_VISIBLE_DEVICES order aside).
  const std::size_t ranks = std::min<std::size_t>(usable.size(), static_cast<std::size_t>(tp));
  std::uint64_t total = usable[0]->memory->total;
  unsigned smallest = usable[0]->index;
  for (std::size_t i = 0; i < ranks; ++i) {
    const gpu::GpuInfo& g = *usable[i];
    if (g.memory->total < total) {
      total = g.memory->total;
      smallest = g.index;
    }
    // Memory in use now belongs to the server being replaced, or to something
    // that will still hold it at launch: say which the plan assumes.
    if (g.memory->used > cap::kGiB)
      notes.push_back(
          fmt::format("GPU {} has {} in use now; the plan assumes it is freed before the "
                      "launch (gpureap free)",
                      g.index, format_bytes(g.memory->used)));
  }
  if (usable.size() < static_cast<std::size_t>(tp))
    notes.push_back(fmt::format("only {} GPU(s) here; --tp {} is planned on GPUs like these",
                                usable.size(), tp));
  Measured m;
  m.gpu = cap::assumed_budget(total, tp, weights, fmt::format("GPU {} via NVML", smallest));
  m.m0_origin = fmt::format(
      "GPU {}'s {} (NVML) - {} assumed for the driver reservation, CUDA "
      "context{}",
      smallest, format_bytes(total), format_bytes(cap::pre_load_overhead(tp)),
      tp > 1 ? " and NCCL" : "");
  m.reserve_origin = "assumed (calibrate with --from-log)";
  m.local = true;
  return m;
}

// ---------------------------------------------------------------------------
// Output: the table and the JSON.

std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string signed_bytes(std::int64_t b) {
  return b < 0 ? "-" + format_bytes(static_cast<std::uint64_t>(-b))
               : format_bytes(static_cast<std::uint64_t>(b));
}

std::string gb(std::uint64_t bytes) {
  return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
}

struct PlanReport {
  cap::PlanInput input;
  std::string engine_flag;
  std::string weights_origin;
  std::string m0_origin;
  std::string reserve_origin;
  std::optional<std::uint64_t> card_total;
  std::optional<cap::Calibration> calibration;
  std::string log_path;
  std::string hicache_text;  // the flag as typed, for the heading
  std::vector<std::string> notes;
  std::vector<cap::Warning> warnings;  // not tied to a fraction
  std::vector<cap::PlanPoint> points;
  bool sweep = false;
};

std::string cell_formula(const cap::PlanInput& in) {
  const int b = cap::kv_dtype_bytes(in.dtype);
  if (in.kv.attention == cap::Attention::mla)
    return fmt::format("MLA: {} layers x ({} + {}) x {} B, a full copy on every rank", in.kv.layers,
                       in.kv.kv_lora_rank, in.kv.qk_rope_head_dim, b);
  const int heads = cap::kv_heads_per_rank(in.kv, in.tp);
  return fmt::format("{} KV head(s) per rank{} x ({} + {}) x {} layers x {} B", heads,
                     in.tp > in.kv.kv_heads ? " (replicated: tp > KV heads)" : "", in.kv.head_dim,
                     in.kv.v_head_dim, in.kv.layers, b);
}

std::string heading(const PlanReport& r) {
  const cap::PlanInput& in = r.input;
  std::string s = fmt::format("{}, TP {}, {}, KV {}", in.model_name, in.tp,
                              in.engine == cap::Engine::sglang ? "SGLang" : "vLLM",
                              cap::kv_dtype_name(in.dtype));
  if (!r.sweep) s += fmt::format(", {} {:.2f}", r.engine_flag, r.points.front().mem_fraction);
  if (!r.hicache_text.empty()) s += ", host cache " + r.hicache_text;
  return s + "\n";
}

std::string row(std::string_view label, std::string_view value, std::string_view note = {}) {
  if (note.empty()) return fmt::format("  {:<36}{:>12}\n", label, value);
  return fmt::format("  {:<36}{:>12}  {}\n", label, value, note);
}

std::string render_warnings(const std::vector<cap::Warning>& warnings, const report::Style& style) {
  std::string out;
  for (const auto& w : warnings)
    out += fmt::format("{} [{}] {}\n",
                       w.code == "prefill_oom_risk" || w.code == "no_kv_budget" ||
                               w.code == "host_ram_short" || w.code == "exceeds_free_memory"
                           ? style.red("warning")
                           : style.yellow("warning"),
                       w.code, w.message);
  return out;
}

std::string render_machine(const PlanReport& r) {
  const cap::PlanInput& in = r.input;
  std::string out = "Per GPU\n";
  out += row("free before load (M0)", format_bytes(in.gpu.free_before_load), r.m0_origin);
  out += row("weights", format_bytes(in.gpu.weights_per_rank), r.weights_origin);
  out += row("bytes per token", grouped(cap::bytes_per_token(in)) + " B", cell_formula(in));
  return out;
}

std::string render_point(const PlanReport& r, const cap::PlanPoint& p, const report::Style& style) {
  const cap::PlanInput& in = r.input;
  const bool sglang = in.engine == cap::Engine::sglang;
  std::string out;
  const std::string base = sglang ? "M0" : "total";
  out += row("KV budget", signed_bytes(p.kv_budget_bytes),
             fmt::format("{:.2f} x {} - weights{}", p.mem_fraction, base,
                         sglang ? "" : " - activation peak (2 GiB, assumed)"));
  out += row("KV tokens", style.bold(grouped(p.kv_tokens)));
  out += row("runtime slack outside the pool", format_bytes(p.runtime_slack_bytes),
             fmt::format("(1 - {:.2f}) x {}", p.mem_fraction, base));
  if (sglang && p.max_running_requests)
    out += row("  req_to_token table", format_bytes(p.req_to_token_bytes),
               fmt::format("{} slots x {} tokens x 4 B", grouped(*p.max_running_requests),
                           grouped(static_cast<std::uint64_t>(in.context_len + 4))));
  if (!sglang && in.gpu.total)
    out += row("  CUDA context, NCCL", format_bytes(*in.gpu.total - in.gpu.free_before_load));
  out += row("  CUDA graphs, workspaces", format_bytes(p.runtime_reserve_bytes), r.reserve_origin);
  const bool oom = p.headroom_bytes < static_cast<std::int64_t>(cap::kPrefillMinHeadroom);
  const bool low = p.headroom_bytes < static_cast<std::int64_t>(cap::kLowHeadroom);
  out += row("headroom for prefill", signed_bytes(p.headroom_bytes),
             oom   ? style.red("PREFILL OUT-OF-MEMORY RISK (< 1 GiB)")
             : low ? style.yellow("tight (< 2 GiB)")
                   : style.green("ok"));

  out += "\nRequests (one pool per GPU, shared by the TP group)\n";
  if (p.running_requests)
    out += row(
        fmt::format("running at {} + {} tokens", grouped(in.avg_prompt), grouped(in.avg_output)),
        style.bold(grouped(*p.running_requests)),
        "pool / (prompt + output); admission's reserve for new tokens lowers it");
  else
    out += row("running requests", "-", "pass --avg-prompt/--avg-output");
  out += row(
      fmt::format("at the full context ({})", grouped(static_cast<std::uint64_t>(in.context_len))),
      fmt::format("{:.2f}", p.full_context_requests));
  if (p.max_running_requests)
    out += row("request slots", grouped(*p.max_running_requests), "SGLang's max_running_requests");

  if (p.host_cache) {
    const cap::HostCachePlan& h = *p.host_cache;
    out += fmt::format("\nHost cache ({})\n", r.hicache_text);
    out += row("tokens per rank", grouped(h.tokens_per_rank),
               "distinct prefix tokens; every rank caches the same ones");
    out += row("host RAM per rank", gb(h.bytes_per_rank), format_bytes(h.bytes_per_rank));
    out += row(fmt::format("host RAM, {} ranks", in.tp), gb(h.bytes_total),
               fmt::format("+ 10 GiB SGLang keeps free = {} needed{}", gb(h.bytes_needed),
                           in.host_memory ? fmt::format("; {} available", gb(*in.host_memory))
                                          : std::string()));
    out +=
        "  The host cache keeps evicted prefixes for later reuse; a running request keeps its KV\n"
        "  in the GPU pool, so it raises the prefix-hit rate, not the running requests above.\n";
  }
  return out;
}

std::string render_sweep(const PlanReport& r, const report::Style& style) {
  const cap::PlanInput& in = r.input;
  const bool hicache = !r.points.empty() && r.points[0].host_cache.has_value();
  std::string out = fmt::format("\n  {:>8}  {:>10}  {:>10}  {:>10}  {:>8}", "fraction", "KV budget",
                                "KV tokens", "headroom", "running");
  if (hicache) out += fmt::format("  {:>11}  {:>10}", "host tokens", "host RAM");
  out += "  status\n";
  for (const auto& p : r.points) {
    std::string status = style.green("ok");
    auto has = [&p](std::string_view code) {
      return std::ranges::any_of(p.warnings, [&](const cap::Warning& w) { return w.code == code; });
    };
    if (has("no_kv_budget"))
      status = style.red("no KV cache: weights do not fit");
    else if (has("prefill_oom_risk") && p.headroom_bytes < 0)
      status = style.red("OOM at start-up");
    else if (has("prefill_oom_risk"))
      status = style.red("PREFILL OOM RISK");
    else if (has("exceeds_free_memory"))
      status = style.red("over free memory");
    else if (has("low_headroom"))
      status = style.yellow("tight headroom");
    if (has("host_ram_short")) status += ", " + style.red("host RAM short");
    out += fmt::format("  {:>8.2f}  {:>10}  {:>10}  {:>10}  {:>8}", p.mem_fraction,
                       signed_bytes(p.kv_budget_bytes), grouped(p.kv_tokens),
                       signed_bytes(p.headroom_bytes),
                       p.running_requests ? grouped(*p.running_requests) : "-");
    if (hicache)
      out += fmt::format("  {:>11}  {:>10}", grouped(p.host_cache->tokens_per_rank),
                         gb(p.host_cache->bytes_total));
    out += "  " + status + "\n";
  }
  out += fmt::format("\n  running: requests of {} + {} tokens the pool holds at once{}\n",
                     grouped(in.avg_prompt), grouped(in.avg_output),
                     in.avg_prompt + in.avg_output == 0 ? " (pass --avg-prompt/--avg-output)" : "");
  if (auto safe = cap::max_fraction_for_headroom(in, cap::kLowHeadroom))
    out += fmt::format("  highest fraction keeping {} of headroom: {:.2f}\n",
                       format_bytes(cap::kLowHeadroom), *safe);
  if (hicache)
    out += "  The host cache keeps evicted prefixes; it does not raise the running requests.\n";
  return out;
}

std::string render_text(const PlanReport& r, const report::Style& style) {
  std::string out = style.bold(heading(r));
  if (r.calibration) {
    const cap::Calibration& c = *r.calibration;
    out += fmt::format(
        "calibrated from {}: the logged launch at {:.2f} got {} tokens (this "
        "model predicts {})\n",
        r.log_path, c.mem_fraction, grouped(c.kv_tokens), grouped(c.predicted_kv_tokens));
  }
  out += "\n" + render_machine(r);
  if (r.sweep) {
    out += render_sweep(r, style);
  } else {
    out += render_point(r, r.points.front(), style);
  }
  std::vector<cap::Warning> all = r.warnings;
  if (!r.sweep)
    all.insert(all.end(), r.points.front().warnings.begin(), r.points.front().warnings.end());
  if (!r.notes.empty() || !all.empty()) out += "\n";
  for (const auto& note : r.notes) out += fmt::format("note: {}\n", note);
  out += render_warnings(all, style);
  return out;
}

json warnings_json(const std::vector<cap::Warning>& warnings) {
  json out = json::array();
  for (const auto& w : warnings) out.push_back({{"code", w.code}, {"message", w.message}});
  return out;
}

template <typename T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json point_json(const cap::PlanPoint& p) {
  json j{
      {"mem_fraction", p.mem_fraction},
      {"kv_budget_bytes", p.kv_budget_bytes},
      {"kv_tokens", p.kv_tokens},
      {"runtime_slack_bytes", p.runtime_slack_bytes},
      {"req_to_token_bytes", p.req_to_token_bytes},
      {"runtime_reserve_bytes", p.runtime_reserve_bytes},
      {"headroom_bytes", p.headroom_bytes},
      {"max_running_requests", or_null(p.max_running_requests)},
      {"running_requests", or_null(p.running_requests)},
      {"full_context_requests", p.full_context_requests},
      {"host_cache_tokens", nullptr},
      {"host_ram_per_rank_bytes", nullptr},
      {"host_ram_bytes", nullptr},
      {"host_ram_needed_bytes", nullptr},
      {"warnings", warnings_json(p.warnings)},
  };
  if (p.host_cache) {
    j["host_cache_tokens"] = p.host_cache->tokens_per_rank;
    j["host_ram_per_rank_bytes"] = p.host_cache->bytes_per_rank;
    j["host_ram_bytes"] = p.host_cache->bytes_total;
    j["host_ram_needed_bytes"] = p.host_cache->bytes_needed;
  }
  return j;
}

json render_json(const PlanReport& r) {
  const cap::PlanInput& in = r.input;
  json model{{"name", in.model_name},
             {"attention", in.kv.attention == cap::Attention::mla ? "mla" : "gqa"},
             {"layers", in.kv.layers},
             {"context_len", in.context_len}};
  if (in.kv.attention == cap::Attention::mla) {
    model["kv_lora_rank"] = in.kv.kv_lora_rank;
    model["qk_rope_head_dim"] = in.kv.qk_rope_head_dim;
  } else {
    model["kv_heads"] = in.kv.kv_heads;
    model["kv_heads_per_rank"] = cap::kv_heads_per_rank(in.kv, in.tp);
    model["head_dim"] = in.kv.head_dim;
    model["v_head_dim"] = in.kv.v_head_dim;
  }
  json j{
      {"engine", in.engine == cap::Engine::sglang ? "sglang" : "vllm"},
      {"model", model},
      {"tp", in.tp},
      {"kv_dtype", std::string(cap::kv_dtype_name(in.dtype))},
      {"gpu_memory_bytes", or_null(r.card_total)},
      {"free_before_load_bytes", in.gpu.free_before_load},
      {"free_before_load_source", r.m0_origin},
      {"weights_bytes", in.gpu.weights_per_rank},
      {"weights_source", r.weights_origin},
      {"runtime_reserve_bytes", in.gpu.runtime_reserve},
      {"runtime_reserve_source", r.reserve_origin},
      {"bytes_per_token", cap::bytes_per_token(in)},
      {"avg_prompt_tokens", in.avg_prompt},
      {"avg_output_tokens", in.avg_output},
      {"host_memory_bytes", or_null(in.host_memory)},
      {"calibration", nullptr},
      {"notes", r.notes},
  };
  if (r.calibration) {
    const cap::Calibration& c = *r.calibration;
    j["calibration"] = {{"log", r.log_path},
                        {"mem_fraction", c.mem_fraction},
                        {"kv_tokens", c.kv_tokens},
                        {"predicted_kv_tokens", c.predicted_kv_tokens},
                        {"free_before_load_bytes", c.free_before_load},
                        {"weights_bytes", c.weights_per_rank},
                        {"runtime_reserve_bytes", or_null(c.runtime_reserve)},
                        {"notes", c.notes}};
  }
  if (r.sweep) {
    json points = json::array();
    for (const auto& p : r.points) points.push_back(point_json(p));
    j["points"] = points;
    j["warnings"] = warnings_json(r.warnings);
  } else {
    json p = point_json(r.points.front());
    std::vector<cap::Warning> all = r.warnings;
    all.insert(all.end(), r.points.front().warnings.begin(), r.points.front().warnings.end());
    p["warnings"] = warnings_json(all);
    j.update(p);
  }
  return j;
}

// ---------------------------------------------------------------------------
// The command: flags -> model -> GPU -> plan every fraction.

Step<PlanReport> build_plan(const GlobalOptions& global, const PlanOptions& o) {
  PlanReport r;
  cap::PlanInput& in = r.input;

  // 1. Flags.
  if (o.engine == "vllm") {
    in.engine = cap::Engine::vllm;
    if (!o.from_log.empty())
      return usage("--from-log reads SGLang logs; it cannot calibrate --engine vllm");
    if (!o.hicache_size.empty() || o.ratio_opt->count() > 0)
      return usage("--hicache-size/--hicache-ratio are SGLang's hierarchical cache; vLLM has none");
  }
  r.engine_flag =
      in.engine == cap::Engine::sglang ? "--mem-fraction-static" : "--gpu-memory-utilization";
  if (o.dtype_opt->count() > 0) {
    auto dtype = cap::parse_kv_dtype(o.kv_dtype);
    if (!dtype) return usage(dtype.error().message);
    in.dtype = *dtype;
  }
  if (!o.hicache_size.empty()) {
    auto size = cap::parse_hicache_size(o.hicache_size);
    if (!size) return usage(size.error().message);
    in.host_cache.size_per_rank = *size;
    r.hicache_text = fmt::format("--hicache-size {} ({} per rank)", o.hicache_size, gb(*size));
  } else if (o.ratio_opt->count() > 0) {
    if (!(o.hicache_ratio > 0))
      return usage(fmt::format("--hicache-ratio {}: must be positive", o.hicache_ratio));
    in.host_cache.ratio = o.hicache_ratio;
    r.hicache_text = fmt::format("--hicache-ratio {}", o.hicache_ratio);
  }
  if (!o.host_memory.empty()) {
    auto size = cap::parse_size_flag("--host-memory", o.host_memory);
    if (!size) return usage(size.error().message);
    in.host_memory = *size;
  }
  std::optional<std::uint64_t> card;
  if (!o.gpu_memory.empty()) {
    auto size = cap::parse_size_flag("--gpu-memory", o.gpu_memory);
    if (!size) return usage(size.error().message);
    card = *size;
  }
  if (o.prompt_opt->count() > 0 && o.avg_prompt < 0)
    return usage(fmt::format("--avg-prompt {}: must be zero or more tokens", o.avg_prompt));
  if (o.output_opt->count() > 0 && o.avg_output < 0)
    return usage(fmt::format("--avg-output {}: must be zero or more tokens", o.avg_output));
  in.avg_prompt = static_cast<std::uint64_t>(std::max<std::int64_t>(o.avg_prompt, 0));
  in.avg_output = static_cast<std::uint64_t>(std::max<std::int64_t>(o.avg_output, 0));
  if (o.context_opt->count() > 0 && o.context_len <= 0)
    return usage(
        fmt::format("--context-len {}: must be a positive number of tokens", o.context_len));

  // 2. The model.
  auto model = cap::resolve_model(o.model);
  if (!model) return usage(model.error().message);
  if (auto ok = cap::resolve_weights(*model, o.model, o.weights, /*required=*/o.from_log.empty());
      !ok)
    return usage(ok.error().message);
  in.model_name = model->spec.name;
  in.kv = model->spec.kv;
  in.context_len = o.context_opt->count() > 0 ? o.context_len : model->spec.context_len;
  r.notes = model->notes;

  // 3. The GPU: a start-up log, else --gpu-memory, else NVML.
  std::optional<cap::Calibration> calibration;
  if (!o.from_log.empty()) {
    auto log = cap::read_sglang_log(o.from_log, "--from-log");
    if (!log) return usage(log.error().message);
    auto c = cap::calibrate(*log, in.kv, in.context_len, o.from_log);
    if (!c) return usage(fmt::format("--from-log {}", c.error().message));
    if (c->tp && o.tp_opt->count() > 0 && *c->tp != o.tp)
      return usage(
          fmt::format("--tp {} differs from the log's tp_size {}: a calibration holds for "
                      "the layout that wrote the log",
                      o.tp, *c->tp));
    // The log's dtype is what it measured; the flag is what to predict.
    if (o.dtype_opt->count() == 0) in.dtype = c->kv_dtype;
    if (o.context_opt->count() == 0 && c->context_len) in.context_len = *c->context_len;
    calibration = std::move(c).value();
  }
  in.tp = o.tp_opt->count() > 0 ? o.tp : calibration && calibration->tp ? *calibration->tp : 1;
  if (auto ok = cap::check_tensor_parallel(model->spec, in.tp); !ok)
    return usage(ok.error().message);

  Measured measured;
  if (calibration) {
    const cap::Calibration& c = *calibration;
    measured.gpu.free_before_load = c.free_before_load;
    measured.gpu.total = card;
    measured.gpu.weights_per_rank = c.weights_per_rank;
    measured.gpu.runtime_reserve = c.runtime_reserve.value_or(cap::kDefaultRuntimeReserve);
    measured.gpu.source = fmt::format("--from-log {}", o.from_log);
    measured.m0_origin = fmt::format("measured: {}", c.notes.front());
    measured.reserve_origin =
        c.runtime_reserve ? "measured from the log" : "assumed (not in the log)";
    r.weights_origin = "measured: M0 - 'Load weight end' avail mem";
    r.warnings = c.warnings;
    r.log_path = o.from_log;
  } else {
    const std::uint64_t weights = model->spec.weights->per_rank(in.tp);
    r.weights_origin = model->spec.weights_origin;
    if (card) {
      measured.gpu =
          cap::assumed_budget(*card, in.tp, weights, fmt::format("--gpu-memory {}", o.gpu_memory));
      measured.m0_origin = fmt::format(
          "--gpu-memory - {} assumed for the driver reservation, CUDA "
          "context{}",
          format_bytes(cap::pre_load_overhead(in.tp)), in.tp > 1 ? " and NCCL" : "");
      measured.reserve_origin = "assumed (calibrate with --from-log)";
    } else {
      auto m = measure_with_nvml(global, in.tp, weights, r.notes);
      if (!m) return std::unexpected(m.error());
      measured = std::move(*m);
      card = measured.gpu.total;
    }
  }
  in.gpu = measured.gpu;
  r.m0_origin = measured.m0_origin;
  r.reserve_origin = measured.reserve_origin;
  r.card_total = card;
  r.calibration = calibration;
  if (in.engine == cap::Engine::vllm && !in.gpu.total)
    return usage("--engine vllm sizes its pool from the card's total memory: pass --gpu-memory");

  // Host RAM: the flag, else this machine's when the GPUs are this machine's.
  if (!in.host_memory && measured.local && (in.host_cache.size_per_rank || in.host_cache.ratio)) {
    std::ifstream meminfo("/proc/meminfo");
    std::ostringstream text;
    text << meminfo.rdbuf();
    in.host_memory = cap::parse_mem_available(text.str());
    if (in.host_memory) r.notes.push_back("host RAM available: MemAvailable of this machine");
  }
  if (in.dtype == cap::KvDtype::fp8_e4m3 && in.kv.attention == cap::Attention::mla)
    r.notes.push_back("fp8_e4m3 KV needs an MLA attention backend that supports it on this GPU");

  if (auto ok = cap::check_plan_input(in); !ok) return usage(ok.error().message);

  // 4. Plan every fraction.
  std::string fraction_text = o.mem_fraction;
  if (fraction_text.empty()) {
    if (!calibration)
      return usage(fmt::format(
          "--mem-fraction is required (the {} to plan, or a sweep FROM:TO:STEP)", r.engine_flag));
    fraction_text = fmt::format("{}", calibration->mem_fraction);
  }
  auto fractions = cap::parse_mem_fraction(fraction_text);
  if (!fractions) return usage(fractions.error().message);
  r.sweep = fractions->size() > 1;
  for (double f : *fractions) r.points.push_back(cap::plan_point(in, f));
  if (!r.sweep && r.points.front().kv_tokens == 0)
    return usage(r.points.front().warnings.front().message);
  return r;
}

int run_plan(const GlobalOptions& global, const PlanOptions& options) {
  auto report = build_plan(global, options);
  if (!report) {
    print_err(fmt::format("gpureap plan: {}\n", report::terminal_text(report.error().message)));
    return kExitUsage;
  }
  if (global.json) {
    print_out(report::json_text(render_json(*report)));
  } else {
    print_out(render_text(*report, stdout_style(global)));
  }
  return kExitOk;
}

std::string presets_help() {
  std::string out;
  for (const auto& p : cap::model_presets())
    out += fmt::format("  {:<18}{}\n", p.name, p.quantization);
  return out;
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand(
      "plan",
      "Plan KV-cache capacity before a (re)launch: tokens per GPU, running requests, headroom.\n"
      "SGLang sizes its KV pool as  f x M0 - weights  per GPU, where f is\n"
      "--mem-fraction-static and M0 the GPU's free memory before the weights load (the card\n"
      "minus the driver's reservation, the CUDA context and NCCL). Each token costs a fixed\n"
      "number of bytes (MLA models keep a full copy on every rank; GQA models split their KV\n"
      "heads, one whole head per rank once --tp exceeds them). What f leaves outside the pool\n"
      "holds the request table, CUDA graphs and the activations of a prefill batch: below about\n"
      "1 GiB of headroom a large prefill runs out of memory. The host cache (--hicache-size, GB\n"
      "per rank) keeps evicted prefixes in RAM on every rank; it raises the prefix-hit rate, not\n"
      "the number of requests running at once.\n\n"
      "Examples (the case study: Kimi-K2.5 on 8 x RTX PRO 6000, nvidia-smi total 97887 MiB):\n"
      "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 --mem-fraction 0.88\n"
      "      ~160K tokens per GPU, 5.5 GiB headroom; at 0.93 it warns of a prefill OOM\n"
      "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 --mem-fraction 0.80:0.95:0.01 "
      "\\\n"
      "      --avg-prompt 1000 --avg-output 4100          a sweep, as a table\n"
      "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 --mem-fraction 0.88 \\\n"
      "      --kv-dtype fp8_e4m3 --hicache-size 48 --host-memory 408GB\n"
      "  gpureap plan --model Kimi-K2.5 --from-log sglang.log --mem-fraction 0.93\n"
      "      calibrated from the last start-up in the log, predicted for another fraction\n"
      "  gpureap plan --model ./Qwen3-8B/config.json --tp 2 --mem-fraction 0.9\n"
      "      GPU memory read through NVML; weights from model.safetensors.index.json");
  sub->footer(
      "Presets (weights from a parameter inventory; docs/plan.md shows it):\n" + presets_help() +
      "\nJSON (--json): bytes_per_token, weights_bytes, kv_budget_bytes, kv_tokens,\n"
      "headroom_bytes, running_requests, host_cache_tokens, host_ram_bytes, warnings[] (code,\n"
      "message); a sweep puts one object per fraction under points[]. Schema: docs/plan.md.\n\n"
      "Exit status:\n"
      "  0  planned (warnings such as prefill_oom_risk are in the output)\n"
      "  2  usage error, or a launch that cannot start (weights do not fit, no KV budget)");
  sub->add_option("--model", o->model,
                  "A preset name (Presets below) or a Hugging Face config.json (or its directory)")
      ->required();
  sub->add_option("--gpu-memory", o->gpu_memory,
                  "Memory of one GPU with a unit, as nvidia-smi shows it (97887MiB, 96GiB); "
                  "default: read through NVML");
  o->tp_opt = sub->add_option("--tp", o->tp, "Tensor-parallel size (default 1, or the log's)");
  sub->add_option("--mem-fraction", o->mem_fraction,
                  "--mem-fraction-static to plan (0.88), or a sweep FROM:TO:STEP (0.80:0.95:0.01); "
                  "default with --from-log: the log's");
  o->dtype_opt =
      sub->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: bf16 (default) or fp8_e4m3");
  auto* size =
      sub->add_option("--hicache-size", o->hicache_size,
                      "Host cache per rank, in GB like SGLang's flag (48), or with a unit");
  o->ratio_opt =
      sub->add_option("--hicache-ratio", o->hicache_ratio,
                      "Host cache as a multiple of the GPU pool (SGLang's default is 2)");
  size->excludes(o->ratio_opt);
  sub->add_option("--host-memory", o->host_memory,
                  "Available host RAM with a unit (408GB); default: this machine's when the GPUs "
                  "are read here");
  o->context_opt = sub->add_option("--context-len", o->context_len,
                                   "Server context length (default: the model's)");
  o->prompt_opt =
      sub->add_option("--avg-prompt", o->avg_prompt, "Average prompt tokens per request");
  o->output_opt =
      sub->add_option("--avg-output", o->avg_output, "Average output tokens per request");
  sub->add_option("--engine", o->engine, "sglang (default) or vllm (--gpu-memory-utilization)")
      ->check(CLI::IsMember({"sglang", "vllm"}));
  sub->add_option("--weights", o->weights,
                  "Checkpoint bytes with a unit (600GB), or a model.safetensors.index.json");
  sub->add_option(
      "--from-log", o->from_log,
      "An SGLang server log: calibrate M0, weights and runtime reserve from its start-up");
  sub->callback([&run, &global, o] { run = [&global, o] { return run_plan(global, *o); }; });
}

}  // namespace gpureap::cli
