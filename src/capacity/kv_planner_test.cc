#include "capacity/kv_planner.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "capacity/model_preset.h"

namespace gpureap::capacity {
namespace {

// The case studies' machine: 8 x RTX PRO 6000 Blackwell, nvidia-smi total 97887 MiB.
constexpr std::uint64_t kRtxPro6000 = 97887ULL << 20;

PlanInput preset_input(std::string_view name, int tp, std::uint64_t card = kRtxPro6000) {
  const ModelSpec spec = spec_of(**find_preset(name));
  PlanInput in;
  in.model_name = spec.name;
  in.kv = spec.kv;
  in.context_len = spec.context_len;
  in.tp = tp;
  in.gpu = assumed_budget(card, tp, spec.weights->per_rank(tp), "--gpu-memory 97887MiB");
  return in;
}

bool has_warning(const PlanPoint& p, std::string_view code) {
  return std::ranges::any_of(p.warnings, [&](const Warning& w) { return w.code == code; });
}

double ratio(std::uint64_t got, double want) {
  return static_cast<double>(got) / want;
}

TEST(CaseStudy, KimiK25At085HoldsAbout116kTokens) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  ASSERT_TRUE(check_plan_input(in));
  const PlanPoint p = plan_point(in, 0.85);
  EXPECT_NEAR(ratio(p.kv_tokens, 116'000), 1.0, 0.05) << p.kv_tokens;
  // "only about 28 concurrent requests" at a 4,100-token average response.
  PlanInput with_lengths = in;
  with_lengths.avg_output = 4100;
  EXPECT_EQ(plan_point(with_lengths, 0.85).running_requests, 28u);
  EXPECT_FALSE(has_warning(p, "prefill_oom_risk"));
}

TEST(CaseStudy, KimiK25At088HoldsAbout159kTokensWithRoomForPrefill) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  const PlanPoint p = plan_point(in, 0.88);
  EXPECT_NEAR(ratio(p.kv_tokens, 159'000), 1.0, 0.05) << p.kv_tokens;
  // The second case study logged 5.47 GB of headroom at 0.88.
  EXPECT_NEAR(static_cast<double>(p.headroom_bytes) / kGiB, 5.47, 0.25);
  EXPECT_FALSE(has_warning(p, "prefill_oom_risk"));
  EXPECT_FALSE(has_warning(p, "low_headroom"));
  EXPECT_FALSE(has_warning(p, "no_kv_budget"));
}

TEST(CaseStudy, Fp8KvDoublesTheTokensAtTheSameFraction) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  const PlanPoint bf16 = plan_point(in, 0.88);
  in.dtype = KvDtype::fp8_e4m3;
  EXPECT_EQ(bytes_per_token(in), 35'136u);
  const PlanPoint fp8 = plan_point(in, 0.88);
  EXPECT_NEAR(ratio(fp8.kv_tokens, 2.0 * static_cast<double>(bf16.kv_tokens)), 1.0, 1e-4);
  EXPECT_NEAR(ratio(fp8.kv_tokens, 318'000), 1.0, 0.05) << fp8.kv_tokens;
  EXPECT_EQ(fp8.kv_budget_bytes, bf16.kv_budget_bytes);  // same budget, half the cell
}

TEST(CaseStudy, At093HeadroomIsUnderOneGibAndPrefillOomIsFlagged) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  const PlanPoint p = plan_point(in, 0.93);
  EXPECT_LT(p.headroom_bytes, static_cast<std::int64_t>(kGiB));
  EXPECT_GT(p.headroom_bytes, 0);
  EXPECT_NEAR(static_cast<double>(p.headroom_bytes) / kGiB, 0.82, 0.25);
  EXPECT_TRUE(has_warning(p, "prefill_oom_risk"));
  // The warning says which fraction is safe.
  auto it = std::ranges::find(p.warnings, std::string("prefill_oom_risk"), &Warning::code);
  EXPECT_NE(it->message.find("0.91 or lower"), std::string::npos) << it->message;
}

TEST(CaseStudy, HeadroomFallsByTheFractionTimesM0) {
  // Both logged headrooms (5.47 at 0.88, 0.82 at 0.93) differ by 0.05 * M0.
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  const double drop = static_cast<double>(plan_point(in, 0.88).headroom_bytes -
                                          plan_point(in, 0.93).headroom_bytes);
  EXPECT_NEAR(drop / kGiB, 0.05 * static_cast<double>(in.gpu.free_before_load) / kGiB, 0.01);
}

TEST(KvPlanner, BudgetIsFractionOfFreeMemoryMinusWeights) {
  PlanInput in = preset_input("Qwen3-8B", 1);
  in.gpu = GpuBudget{};
  in.gpu.free_before_load = 80 * kGiB;
  in.gpu.weights_per_rank = 16 * kGiB;
  in.gpu.runtime_reserve = 2 * kGiB;
  const PlanPoint p = plan_point(in, 0.5);
  EXPECT_EQ(p.kv_budget_bytes, static_cast<std::int64_t>(24 * kGiB));
  EXPECT_EQ(p.kv_tokens, 24 * kGiB / 147'456);
  EXPECT_EQ(p.runtime_slack_bytes, 40 * kGiB);
  // 174,762 tokens / 40,960 * 512 = 2184 rows of 40,964 int32 slots.
  EXPECT_EQ(p.max_running_requests, 2184u);
  EXPECT_EQ(p.req_to_token_bytes, 2184u * 40'964 * 4);
  EXPECT_EQ(p.headroom_bytes,
            static_cast<std::int64_t>(40 * kGiB - p.req_to_token_bytes - 2 * kGiB));
}

TEST(KvPlanner, RunningRequestsUsePromptPlusOutputAndAreCappedBySlots) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  in.avg_prompt = 1000;
  in.avg_output = 4100;
  const PlanPoint p = plan_point(in, 0.88);
  EXPECT_EQ(p.running_requests, p.kv_tokens / 5100);
  in.avg_prompt = 1;
  in.avg_output = 0;
  EXPECT_EQ(plan_point(in, 0.88).running_requests, 2048u);  // the req_to_token rows
  in.avg_prompt = 0;
  EXPECT_FALSE(plan_point(in, 0.88).running_requests.has_value());
}

TEST(KvPlanner, TooSmallAFractionLeavesNoBudget) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  const PlanPoint p = plan_point(in, 0.70);
  EXPECT_LT(p.kv_budget_bytes, 0);
  EXPECT_EQ(p.kv_tokens, 0u);
  EXPECT_TRUE(has_warning(p, "no_kv_budget"));
  EXPECT_NEAR(min_fraction(in), 0.768, 0.005);
}

TEST(KvPlanner, ContextLongerThanThePoolIsFlagged) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  EXPECT_TRUE(has_warning(plan_point(in, 0.85), "context_exceeds_pool"));  // 117K < 262,144
  EXPECT_FALSE(has_warning(plan_point(preset_input("Qwen3-8B", 1), 0.85), "context_exceeds_pool"));
}

TEST(KvPlanner, LowHeadroomBetweenOneAndTwoGib) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  const PlanPoint p = plan_point(in, 0.92);  // about 1.7 GiB
  EXPECT_TRUE(has_warning(p, "low_headroom"));
  EXPECT_FALSE(has_warning(p, "prefill_oom_risk"));
}

TEST(KvPlanner, MaxFractionForHeadroom) {
  const PlanInput in = preset_input("Kimi-K2.5", 8);
  auto f = max_fraction_for_headroom(in, kLowHeadroom);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(*f, 0.91);
  EXPECT_GE(plan_point(in, *f).headroom_bytes, static_cast<std::int64_t>(kLowHeadroom));
  EXPECT_LT(plan_point(in, *f + 0.01).headroom_bytes, static_cast<std::int64_t>(kLowHeadroom));
}

TEST(KvPlanner, WeightsLargerThanTheGpuAreAnErrorNamingTheInput) {
  // Kimi-K2-Instruct in block FP8 needs ~121 GiB per rank at TP 8.
  const PlanInput in = preset_input("Kimi-K2", 8);
  auto ok = check_plan_input(in);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("Kimi-K2's weights"), std::string::npos) << ok.error().message;
  EXPECT_NE(ok.error().message.find("--gpu-memory 97887MiB"), std::string::npos);
  EXPECT_NE(ok.error().message.find("--tp 8"), std::string::npos);
  // A small card fails the same way for a model that fits a large one.
  EXPECT_FALSE(check_plan_input(preset_input("Llama-3.1-70B", 1, 80ULL << 30)));
  EXPECT_TRUE(check_plan_input(preset_input("Llama-3.1-70B", 4, 80ULL << 30)));
}

TEST(KvPlanner, BadTensorParallelismIsAnError) {
  auto ok = check_plan_input(preset_input("Qwen3-8B", 3));
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("--tp 3"), std::string::npos);
}

TEST(HostCache, SizeIsGbPerRankAndEveryRankHoldsACopy) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  in.host_cache.size_per_rank = 48'000'000'000;  // --hicache-size 48
  in.host_memory = 408'000'000'000;              // "408 GB of available host memory"
  const PlanPoint p = plan_point(in, 0.88);
  ASSERT_TRUE(p.host_cache.has_value());
  EXPECT_EQ(p.host_cache->tokens_per_rank, 683'060u);  // 48e9 / 70,272
  EXPECT_EQ(p.host_cache->bytes_per_rank, 683'060ULL * 70'272);
  EXPECT_EQ(p.host_cache->bytes_total, 8 * p.host_cache->bytes_per_rank);  // ~384 GB
  EXPECT_EQ(p.host_cache->bytes_needed, p.host_cache->bytes_total + 10 * kGiB);
  EXPECT_FALSE(has_warning(p, "host_ram_short"));  // 394.7 GB <= 408 GB
  // The GPU pool, and so the running requests, do not change.
  PlanInput without = in;
  without.host_cache = {};
  EXPECT_EQ(plan_point(without, 0.88).kv_tokens, p.kv_tokens);
  EXPECT_EQ(plan_point(without, 0.88).running_requests, p.running_requests);
}

TEST(HostCache, FirstCaseStudys300GbPerRankIsShortOfHostRam) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  in.host_cache.size_per_rank = 300'000'000'000;
  in.host_memory = 408'000'000'000;
  const PlanPoint p = plan_point(in, 0.85);
  EXPECT_EQ(p.host_cache->tokens_per_rank, 300'000'000'000u / 70'272);  // 4.27M
  EXPECT_TRUE(has_warning(p, "host_ram_short"));
  // 300 GB meant in total is 37.5 GB per rank: 533,640 tokens, and it fits.
  in.host_cache.size_per_rank = 37'500'000'000;
  const PlanPoint total = plan_point(in, 0.85);
  EXPECT_EQ(total.host_cache->tokens_per_rank, 533'640u);
  EXPECT_FALSE(has_warning(total, "host_ram_short"));
}

TEST(HostCache, RatioScalesTheDevicePoolAndFp8HalvesTheBytes) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  in.host_cache.ratio = 2.0;
  const PlanPoint p = plan_point(in, 0.88);
  EXPECT_EQ(p.host_cache->tokens_per_rank, 2 * p.kv_tokens);
  in.host_cache = {.size_per_rank = 48'000'000'000, .ratio = {}};
  in.dtype = KvDtype::fp8_e4m3;
  EXPECT_EQ(plan_point(in, 0.88).host_cache->tokens_per_rank, 1'366'120u);
}

TEST(HostCache, NoLargerThanTheDevicePoolIsFlagged) {
  PlanInput in = preset_input("Kimi-K2.5", 8);
  in.host_cache.ratio = 0.5;
  EXPECT_TRUE(has_warning(plan_point(in, 0.88), "hicache_not_larger_than_pool"));
}

TEST(Vllm, BudgetIsAFractionOfTotalMemoryAndTokensComeInBlocks) {
  PlanInput in = preset_input("Llama-3.1-70B", 8, 80ULL << 30);
  in.engine = Engine::vllm;
  ASSERT_TRUE(check_plan_input(in));
  const PlanPoint p = plan_point(in, 0.9);
  const double want = 0.9 * (80ULL << 30) - static_cast<double>(in.gpu.weights_per_rank) -
                      static_cast<double>(kVllmActivationPeak);
  EXPECT_NEAR(static_cast<double>(p.kv_budget_bytes), want, 1.0);
  EXPECT_EQ(p.kv_tokens % 16, 0u);
  EXPECT_EQ(p.kv_tokens, static_cast<std::uint64_t>(want) / (40'960 * 16) * 16);
  EXPECT_EQ(p.req_to_token_bytes, 0u);
  EXPECT_FALSE(p.max_running_requests.has_value());
  // 0.99 of the total is more than is free after the CUDA context.
  EXPECT_TRUE(has_warning(plan_point(in, 0.99), "exceeds_free_memory"));
  EXPECT_FALSE(has_warning(p, "exceeds_free_memory"));
}

}  // namespace
}  // namespace gpureap::capacity
