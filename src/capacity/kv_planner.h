#pragma once
// The KV-cache capacity planner: what a launch with a given --mem-fraction-static
// (SGLang) or --gpu-memory-utilization (vLLM) gets per GPU, before it is
// launched. Pure arithmetic over the model's geometry and the GPU's memory;
// docs/plan.md derives every formula from the engines' source.
//
// SGLang (model_runner_kv_cache_mixin.py, profile_max_num_token):
//   M0        free memory per GPU measured after NCCL init, before the weights load
//   kv_budget = f * M0 - weights_per_rank          (= free_after_load - (1 - f) * M0)
//   kv_tokens = floor(kv_budget / bytes_per_token)
//   slack     = (1 - f) * M0: req_to_token pool, CUDA graphs, workspaces, activations
//   headroom  = slack - req_to_token - runtime_reserve: what a prefill batch can use
// vLLM (v1 gpu_worker.determine_available_memory):
//   kv_budget = f * total - weights - activation_peak; (1 - f) * total holds the CUDA
//   context, NCCL and the CUDA graphs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capacity/model_spec.h"
#include "util/result.h"

namespace gpureap::capacity {

inline constexpr std::uint64_t kGiB = 1ULL << 30;

/// Memory a rank spends before SGLang measures M0: the CUDA context, and with
/// tp > 1 the NCCL communicators and custom all-reduce buffers. Assumed, not
/// measured (1 GiB alone, 2 GiB with tp > 1); --from-log replaces it.
std::uint64_t pre_load_overhead(int tp);

/// CUDA graphs, attention-backend workspaces and allocator slack that live
/// outside the pool once the server is up, beside the req_to_token pool: 3.75
/// GiB, fitted to the case study's 5.47 GiB headroom at f = 0.88 (Kimi-K2.5, TP 8).
/// An assumption for other models; --from-log measures it.
inline constexpr std::uint64_t kDefaultRuntimeReserve = 3 * kGiB + 3 * kGiB / 4;

/// Below this headroom a large prefill batch runs out of memory: the case study
/// crashed at f = 0.93 with 0.82 GiB left.
inline constexpr std::uint64_t kPrefillMinHeadroom = kGiB;
/// Below this headroom the launch works but long prompts are at risk.
inline constexpr std::uint64_t kLowHeadroom = 2 * kGiB;
/// SGLang keeps this much host RAM free when it sizes the host cache
/// (HICACHE_HOST_MEMORY_RESERVE_BYTES).
inline constexpr std::uint64_t kHostMemoryReserve = 10 * kGiB;
/// vLLM's profile run at max_num_batched_tokens: activations counted inside the
/// budget. Assumed.
inline constexpr std::uint64_t kVllmActivationPeak = 2 * kGiB;

enum class Engine { sglang, vllm };

/// What is known, measured or assumed, about one GPU of the launch.
struct GpuBudget {
  std::uint64_t free_before_load = 0;  // M0, the minimum over the ranks
  std::optional<std::uint64_t> total;  // the card's memory (vLLM's fractions are of this)
  std::uint64_t weights_per_rank = 0;  // everything the weight load charges against M0
  std::uint64_t runtime_reserve = kDefaultRuntimeReserve;
  std::string source;  // where M0 came from, for messages ("--gpu-memory 96GiB")
};

/// SGLang's hierarchical cache: at most one of the two.
struct HostCacheRequest {
  std::optional<std::uint64_t> size_per_rank;  // --hicache-size, bytes per rank
  std::optional<double> ratio;                 // --hicache-ratio, host tokens / device tokens
};

struct PlanInput {
  Engine engine = Engine::sglang;
  std::string model_name;
  KvGeometry kv;
  std::int64_t context_len = 0;
  int tp = 1;
  KvDtype dtype = KvDtype::bf16;
  GpuBudget gpu;
  std::uint64_t avg_prompt = 0;  // tokens; prompt + output == 0: no running estimate
  std::uint64_t avg_output = 0;
  HostCacheRequest host_cache;
  std::optional<std::uint64_t> host_memory;  // available host RAM; nullopt: not checked
};

struct HostCachePlan {
  std::uint64_t tokens_per_rank = 0;  // distinct tokens: every rank caches the same ones
  std::uint64_t bytes_per_rank = 0;
  std::uint64_t bytes_total = 0;   // tp copies in stock SGLang
  std::uint64_t bytes_needed = 0;  // bytes_total + SGLang's 10 GiB free-RAM reserve
};

/// A condition the user should act on; `code` is stable for scripts.
struct Warning {
  std::string code;  // prefill_oom_risk, low_headroom, no_kv_budget, context_exceeds_pool,
                     // host_ram_short, hicache_not_larger_than_pool, exceeds_free_memory
  std::string message;
};

/// The planner's answer for one fraction. Byte counts are per GPU.
struct PlanPoint {
  double mem_fraction = 0;
  std::int64_t kv_budget_bytes = 0;  // negative: the weights do not leave room
  std::uint64_t kv_tokens = 0;
  std::uint64_t runtime_slack_bytes = 0;  // (1 - f) * M0 (vLLM: (1 - f) * total)
  std::uint64_t req_to_token_bytes = 0;   // SGLang's per-request token table (0 for vLLM)
  std::uint64_t runtime_reserve_bytes = 0;
  std::int64_t headroom_bytes = 0;                    // left for prefill activations
  std::optional<std::uint64_t> max_running_requests;  // SGLang's req_to_token rows
  std::optional<std::uint64_t> running_requests;      // at the average lengths
  double full_context_requests = 0;  // requests of context_len tokens the pool holds
  std::optional<HostCachePlan> host_cache;
  std::vector<Warning> warnings;
};

/// The budget of a card with `total` bytes when nothing was measured:
/// M0 = total - pre_load_overhead(tp), the default runtime reserve.
GpuBudget assumed_budget(std::uint64_t total, int tp, std::uint64_t weights_per_rank,
                         std::string source);

/// SGLang's request slots when --max-running-requests is not given:
/// min(max(tokens / context_len * 512, 2048), 4096) (init_memory).
std::uint64_t sglang_max_running_requests(std::uint64_t kv_tokens, std::int64_t context_len);

/// Bytes of SGLang's req_to_token table: one int32 row of context_len + 4 slots
/// per request slot, allocated outside the KV budget.
std::uint64_t sglang_req_to_token_bytes(std::uint64_t rows, std::int64_t context_len);

/// Bytes one token's KV cache takes per GPU for this input.
std::uint64_t bytes_per_token(const PlanInput& in);

/// Checks the input before planning: positive M0 and context, tensor
/// parallelism that splits the model, and weights that fit in the free memory.
/// Errors name the input to change.
Result<void> check_plan_input(const PlanInput& in);

/// The plan at fraction f (in (0, 1]). Never fails: a fraction too small for the
/// weights yields a negative budget, zero tokens and a `no_kv_budget` warning.
PlanPoint plan_point(const PlanInput& in, double f);

/// The smallest fraction that leaves any KV budget: weights / M0 for SGLang.
double min_fraction(const PlanInput& in);

/// The largest fraction, in steps of 0.01, whose headroom stays at or above
/// `headroom`; nullopt when none does.
std::optional<double> max_fraction_for_headroom(const PlanInput& in, std::uint64_t headroom);

}  // namespace gpureap::capacity
