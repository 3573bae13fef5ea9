#include "capacity/kv_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/units.h"

namespace gpureap::capacity {
namespace {

// vLLM's KV blocks: 16 tokens, 64 with the MLA backends.
std::uint64_t vllm_block_tokens(const KvGeometry& kv) {
  return kv.attention == Attention::mla ? 64 : 16;
}

std::int64_t to_bytes(double v) {
  return static_cast<std::int64_t>(std::floor(v));
}

// Every number of a point, without its warnings.
PlanPoint compute(const PlanInput& in, double f) {
  PlanPoint p;
  p.mem_fraction = f;
  const std::uint64_t cell = bytes_per_token(in);
  const auto m0 = static_cast<double>(in.gpu.free_before_load);
  const auto weights = static_cast<double>(in.gpu.weights_per_rank);
  p.runtime_reserve_bytes = in.gpu.runtime_reserve;

  if (in.engine == Engine::sglang) {
    p.kv_budget_bytes = to_bytes(f * m0 - weights);
    p.kv_tokens = p.kv_budget_bytes > 0 ? static_cast<std::uint64_t>(p.kv_budget_bytes) / cell : 0;
    p.runtime_slack_bytes = static_cast<std::uint64_t>(to_bytes((1.0 - f) * m0));
    const std::uint64_t rows = sglang_max_running_requests(p.kv_tokens, in.context_len);
    p.max_running_requests = rows;
    p.req_to_token_bytes = sglang_req_to_token_bytes(rows, in.context_len);
    p.headroom_bytes = static_cast<std::int64_t>(p.runtime_slack_bytes) -
                       static_cast<std::int64_t>(p.req_to_token_bytes + p.runtime_reserve_bytes);
  } else {
    const auto total = static_cast<double>(in.gpu.total.value_or(in.gpu.free_before_load));
    p.kv_budget_bytes = to_bytes(f * total - weights - static_cast<double>(kVllmActivationPeak));
    const std::uint64_t block = vllm_block_tokens(in.kv);
    p.kv_tokens = p.kv_budget_bytes > 0
                      ? static_cast<std::uint64_t>(p.kv_budget_bytes) / (cell * block) * block
                      : 0;
    p.runtime_slack_bytes = static_cast<std::uint64_t>(to_bytes((1.0 - f) * total));
    // The CUDA context and NCCL (total - M0) were taken before vLLM's snapshot and
    // CUDA graphs are captured after the pool: both come out of the slack.
    const double outside = total - m0 + static_cast<double>(p.runtime_reserve_bytes);
    p.headroom_bytes = to_bytes((1.0 - f) * total - outside);
  }

  const std::uint64_t per_request = in.avg_prompt + in.avg_output;
  if (per_request > 0) {
    std::uint64_t running = p.kv_tokens / per_request;
    if (p.max_running_requests) running = std::min(running, *p.max_running_requests);
    p.running_requests = running;
  }
  p.full_context_requests = static_cast<double>(p.kv_tokens) /
                            static_cast<double>(std::max<std::int64_t>(in.context_len, 1));

  if (in.engine == Engine::sglang && (in.host_cache.size_per_rank || in.host_cache.ratio)) {
    HostCachePlan h;
    // pool_host/base.py: int(host_size * 1e9 // size_per_token), or
    // int(device_pool.size * ratio); per rank, every rank its own copy.
    h.tokens_per_rank =
        in.host_cache.size_per_rank
            ? *in.host_cache.size_per_rank / cell
            : static_cast<std::uint64_t>(static_cast<double>(p.kv_tokens) * *in.host_cache.ratio);
    h.bytes_per_rank = h.tokens_per_rank * cell;
    h.bytes_total = h.bytes_per_rank * static_cast<std::uint64_t>(in.tp);
    h.bytes_needed = h.bytes_total + kHostMemoryReserve;
    p.host_cache = h;
  }
  return p;
}

void add_warnings(const PlanInput& in, PlanPoint& p) {
  auto warn = [&p](std::string code, std::string message) {
    p.warnings.push_back({std::move(code), std::move(message)});
  };
  const char* flag =
      in.engine == Engine::sglang ? "--mem-fraction-static" : "--gpu-memory-utilization";

  if (p.kv_budget_bytes <= 0 || p.kv_tokens == 0) {
    warn(
        "no_kv_budget",
        fmt::format("no KV cache at {} {:.2f}: the weights ({} per GPU) take the whole budget "
                    "and the server refuses to start; use a fraction above {:.3f}",
                    flag, p.mem_fraction, format_bytes(in.gpu.weights_per_rank), min_fraction(in)));
  }
  if (p.headroom_bytes < static_cast<std::int64_t>(kPrefillMinHeadroom)) {
    auto safe = max_fraction_for_headroom(in, kLowHeadroom);
    const std::string advice =
        safe ? fmt::format("; {:.2f} or lower keeps {} free", *safe, format_bytes(kLowHeadroom))
             : std::string();
    if (p.headroom_bytes < 0) {
      warn("prefill_oom_risk",
           fmt::format("at {} {:.2f} the request table, CUDA graphs and workspaces need {} more "
                       "than the {} left outside the KV pool: the server runs out of memory while "
                       "capturing CUDA graphs or at its first prefill{}",
                       flag, p.mem_fraction, format_signed_bytes(-p.headroom_bytes),
                       format_bytes(p.runtime_slack_bytes), advice));
    } else {
      warn("prefill_oom_risk",
           fmt::format("only {} left outside the KV pool at {} {:.2f}: a large prefill batch needs "
                       "more for its activations and the server will run out of memory (the case "
                       "study crashed this way at 0.93 with 0.82 GiB){}",
                       format_signed_bytes(p.headroom_bytes), flag, p.mem_fraction, advice));
    }
  } else if (p.headroom_bytes < static_cast<std::int64_t>(kLowHeadroom)) {
    warn("low_headroom",
         fmt::format("{} left outside the KV pool at {} {:.2f}: enough for small prefills, "
                     "tight for long prompts at the default chunked-prefill size",
                     format_bytes(static_cast<std::uint64_t>(p.headroom_bytes)), flag,
                     p.mem_fraction));
  }
  if (p.kv_tokens > 0 && p.kv_tokens < static_cast<std::uint64_t>(in.context_len)) {
    warn("context_exceeds_pool",
         fmt::format("the pool holds {} tokens, less than one request at the full context of {}: "
                     "longer requests are rejected (a smaller --context-length also shrinks the "
                     "request table)",
                     p.kv_tokens, in.context_len));
  }
  if (in.engine == Engine::vllm && in.gpu.total &&
      p.mem_fraction * static_cast<double>(*in.gpu.total) >
          static_cast<double>(in.gpu.free_before_load)) {
    warn("exceeds_free_memory",
         fmt::format("{} {:.2f} asks for {} but only about {} is free at start-up: vLLM refuses "
                     "to start",
                     flag, p.mem_fraction,
                     format_bytes(static_cast<std::uint64_t>(p.mem_fraction *
                                                             static_cast<double>(*in.gpu.total))),
                     format_bytes(in.gpu.free_before_load)));
  }
  if (p.host_cache) {
    const HostCachePlan& h = *p.host_cache;
    if (in.host_memory && h.bytes_needed > *in.host_memory) {
      warn("host_ram_short",
           fmt::format("the host cache needs {:.1f} GB ({:.1f} GB per rank x {} ranks) plus "
                       "SGLang's 10 GiB reserve, {:.1f} GB in all, but only {:.1f} GB of host RAM "
                       "is available: SGLang fails with 'Not enough host memory available'",
                       static_cast<double>(h.bytes_total) / 1e9,
                       static_cast<double>(h.bytes_per_rank) / 1e9, in.tp,
                       static_cast<double>(h.bytes_needed) / 1e9,
                       static_cast<double>(*in.host_memory) / 1e9));
    }
    if (h.tokens_per_rank <= p.kv_tokens) {
      warn("hicache_not_larger_than_pool",
           fmt::format("the host cache ({} tokens) is no larger than the GPU pool ({} tokens): "
                       "it adds little; raise --hicache-size or --hicache-ratio above 1",
                       h.tokens_per_rank, p.kv_tokens));
    }
  }
}

}  // namespace

std::uint64_t pre_load_overhead(int tp) {
  return tp > 1 ? 2 * kGiB : kGiB;
}

GpuBudget assumed_budget(std::uint64_t total, int tp, std::uint64_t weights_per_rank,
                         std::string source) {
  const std::uint64_t overhead = pre_load_overhead(tp);
  return GpuBudget{.free_before_load = total > overhead ? total - overhead : 0,
                   .total = total,
                   .weights_per_rank = weights_per_rank,
                   .runtime_reserve = kDefaultRuntimeReserve,
                   .source = std::move(source)};
}

std::uint64_t sglang_max_running_requests(std::uint64_t kv_tokens, std::int64_t context_len) {
  const auto scaled = static_cast<std::uint64_t>(
      static_cast<double>(kv_tokens) / static_cast<double>(std::max<std::int64_t>(context_len, 1)) *
      512.0);
  return std::min<std::uint64_t>(std::max<std::uint64_t>(scaled, 2048), 4096);
}

std::uint64_t sglang_req_to_token_bytes(std::uint64_t rows, std::int64_t context_len) {
  return rows * static_cast<std::uint64_t>(context_len + 4) * 4;
}

std::uint64_t bytes_per_token(const PlanInput& in) {
  return kv_bytes_per_token(in.kv, in.tp, in.dtype);
}

Result<void> check_plan_input(const PlanInput& in) {
  ModelSpec model;
  model.name = in.model_name;
  model.kv = in.kv;
  if (auto ok = check_tensor_parallel(model, in.tp); !ok) return ok;
  if (in.context_len <= 0)
    return fail(
        fmt::format("--context-len {}: must be a positive number of tokens", in.context_len));
  if (in.kv.layers <= 0 || bytes_per_token(in) == 0)
    return fail(fmt::format("{}: the model's geometry gives no KV cache bytes", in.model_name));
  if (in.gpu.free_before_load == 0)
    return fail(fmt::format("{}: no GPU memory is left once the CUDA context and NCCL are set up",
                            in.gpu.source));
  const std::uint64_t budget_base = in.engine == Engine::vllm
                                        ? in.gpu.total.value_or(in.gpu.free_before_load)
                                        : in.gpu.free_before_load;
  if (in.gpu.weights_per_rank >= budget_base) {
    return fail(fmt::format(
        "{}'s weights take {} per GPU at --tp {}, more than the {} free before loading ({}): "
        "raise --tp or use GPUs with more memory",
        in.model_name, format_bytes(in.gpu.weights_per_rank), in.tp, format_bytes(budget_base),
        in.gpu.source));
  }
  if (in.host_cache.ratio && !(*in.host_cache.ratio > 0))
    return fail("--hicache-ratio: must be positive");
  return {};
}

PlanPoint plan_point(const PlanInput& in, double f) {
  PlanPoint p = compute(in, f);
  add_warnings(in, p);
  return p;
}

double min_fraction(const PlanInput& in) {
  if (in.engine == Engine::vllm) {
    const auto total = static_cast<double>(in.gpu.total.value_or(in.gpu.free_before_load));
    return (static_cast<double>(in.gpu.weights_per_rank) +
            static_cast<double>(kVllmActivationPeak)) /
           total;
  }
  return static_cast<double>(in.gpu.weights_per_rank) /
         static_cast<double>(std::max<std::uint64_t>(in.gpu.free_before_load, 1));
}

std::optional<double> max_fraction_for_headroom(const PlanInput& in, std::uint64_t headroom) {
  for (int percent = 100; percent >= 1; --percent) {
    const double f = percent / 100.0;
    const PlanPoint p = compute(in, f);
    if (p.kv_tokens == 0) return std::nullopt;  // lower fractions leave no pool at all
    if (p.headroom_bytes >= static_cast<std::int64_t>(headroom)) return f;
  }
  return std::nullopt;
}

}  // namespace gpureap::capacity
