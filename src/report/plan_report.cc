#include "report/plan_report.h"

#include "report/json.h"
#include "report/json_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "util/units.h"

namespace gpureap::report {
namespace {

namespace cap = gpureap::capacity;
using json = nlohmann::ordered_json;

std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

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

std::string heading(const capacity::LaunchPlan& r) {
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

std::string render_warnings(const std::vector<cap::Warning>& warnings, const Style& style) {
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

std::string render_machine(const capacity::LaunchPlan& r) {
  const cap::PlanInput& in = r.input;
  std::string out = "Per GPU\n";
  out += row("free before load (M0)", format_bytes(in.gpu.free_before_load), r.m0_origin);
  out += row("weights", format_bytes(in.gpu.weights_per_rank), r.weights_origin);
  out += row("bytes per token", grouped(cap::bytes_per_token(in)) + " B", cell_formula(in));
  return out;
}

std::string render_point(const capacity::LaunchPlan& r, const cap::PlanPoint& p, const Style& style) {
  const cap::PlanInput& in = r.input;
  const bool sglang = in.engine == cap::Engine::sglang;
  std::string out;
  const std::string base = sglang ? "M0" : "total";
  out += row("KV budget", format_signed_bytes(p.kv_budget_bytes),
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
  out += row("headroom for prefill", format_signed_bytes(p.headroom_bytes),
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
    out += row("host RAM per rank", decimal_gb(h.bytes_per_rank), format_bytes(h.bytes_per_rank));
    out +=
        row(fmt::format("host RAM, {} ranks", in.tp), decimal_gb(h.bytes_total),
            fmt::format("+ 10 GiB SGLang keeps free = {} needed{}", decimal_gb(h.bytes_needed),
                        in.host_memory ? fmt::format("; {} available", decimal_gb(*in.host_memory))
                                       : std::string()));
    out +=
        "  The host cache keeps evicted prefixes for later reuse; a running request keeps its KV\n"
        "  in the GPU pool, so it raises the prefix-hit rate, not the running requests above.\n";
  }
  return out;
}

std::string render_sweep(const capacity::LaunchPlan& r, const Style& style) {
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
                       format_signed_bytes(p.kv_budget_bytes), grouped(p.kv_tokens),
                       format_signed_bytes(p.headroom_bytes),
                       p.running_requests ? grouped(*p.running_requests) : "-");
    if (hicache)
      out += fmt::format("  {:>11}  {:>10}", grouped(p.host_cache->tokens_per_rank),
                         decimal_gb(p.host_cache->bytes_total));
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

json warnings_json(const std::vector<cap::Warning>& warnings) {
  json out = json::array();
  for (const auto& w : warnings) out.push_back({{"code", w.code}, {"message", w.message}});
  return out;
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
      {"max_running_requests", or_null<json>(p.max_running_requests)},
      {"running_requests", or_null<json>(p.running_requests)},
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

}  // namespace

std::string decimal_gb(std::uint64_t bytes) {
  return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
}

std::string plan_report_text(const capacity::LaunchPlan& r, const Style& style) {
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

json plan_report_json(const capacity::LaunchPlan& r) {
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
      {"schema_version", kSchemaVersion},
      {"command", "plan"},
      {"engine", in.engine == cap::Engine::sglang ? "sglang" : "vllm"},
      {"model", model},
      {"tp", in.tp},
      {"kv_dtype", std::string(cap::kv_dtype_name(in.dtype))},
      {"gpu_memory_bytes", or_null<json>(r.card_total)},
      {"free_before_load_bytes", in.gpu.free_before_load},
      {"free_before_load_source", r.m0_origin},
      {"weights_bytes", in.gpu.weights_per_rank},
      {"weights_source", r.weights_origin},
      {"runtime_reserve_bytes", in.gpu.runtime_reserve},
      {"runtime_reserve_source", r.reserve_origin},
      {"bytes_per_token", cap::bytes_per_token(in)},
      {"avg_prompt_tokens", in.avg_prompt},
      {"avg_output_tokens", in.avg_output},
      {"host_memory_bytes", or_null<json>(in.host_memory)},
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
                        {"runtime_reserve_bytes", or_null<json>(c.runtime_reserve)},
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

}  // namespace gpureap::report
