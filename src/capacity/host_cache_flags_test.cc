// SGLang's hierarchical-cache switch (issue 37 item 4): the host cache is planned only
// with --enable-hierarchical-cache, at SGLang's default ratio 2 unless sized; without
// the switch --hicache-size/--hicache-ratio are said to be ignored. Figures as in
// docs/plan.md ("The host cache").

#include "capacity/host_cache_flags.h"

#include <gtest/gtest.h>

#include "capacity/model_preset.h"

namespace gpureap::capacity {
namespace {

constexpr std::uint64_t kSeedCard = 97887ULL << 20;  // RTX PRO 6000: nvidia-smi's total

HostCacheFlags flags(bool enabled, std::string size = "", std::string ratio = "",
                     std::string mode = "") {
  HostCacheFlags f;
  f.enabled = enabled;
  f.size = std::move(size);
  f.ratio = std::move(ratio);
  f.host_memory_mode = std::move(mode);
  return f;
}

PlanInput hicache_kimi_tp8() {
  const ModelSpec spec = spec_of(**find_preset("Kimi-K2.5"));
  PlanInput in;
  in.model_name = spec.name;
  in.kv = spec.kv;
  in.context_len = spec.context_len;
  in.tp = 8;
  in.gpu = assumed_budget(kSeedCard, 8, spec.weights->per_rank(8), "--gpu-memory 97887MiB");
  return in;
}

TEST(HostCacheFlags, TheSwitchAlonePlansSglangsDefaultRatioOfTwo) {
  auto d = decide_host_cache(flags(true));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE(d->request.ratio.has_value());
  EXPECT_EQ(*d->request.ratio, 2.0);
  EXPECT_FALSE(d->request.size_per_rank.has_value());
  EXPECT_EQ(d->text, "--hicache-ratio 2 (SGLang's default)");
  EXPECT_TRUE(d->notes.empty());

  // The seed's relaunch (Kimi-K2.5, TP 8, --mem-fraction-static 0.85): 117,570 GPU
  // tokens per rank, so 235,140 host tokens per rank, 16.5 GB per rank, 132.2 GB for
  // 8 ranks, 142.9 GB with SGLang's 10 GiB reserve.
  PlanInput in = hicache_kimi_tp8();
  in.host_cache = d->request;
  const PlanPoint p = plan_point(in, 0.85);
  ASSERT_EQ(p.kv_tokens, 117'570u);
  ASSERT_TRUE(p.host_cache.has_value());
  EXPECT_EQ(p.host_cache->tokens_per_rank, 235'140u);
  EXPECT_EQ(p.host_cache->bytes_per_rank, 16'523'758'080u);
  EXPECT_EQ(p.host_cache->bytes_total, 132'190'064'640u);
  EXPECT_EQ(p.host_cache->bytes_needed, 142'927'482'880u);
  // With FP8 KV (--kv-cache-dtype fp8_e4m3): twice the tokens, on the GPU and on the
  // host, in the same bytes (the ratio is of the pool).
  in.dtype = KvDtype::fp8_e4m3;
  const PlanPoint fp8 = plan_point(in, 0.85);
  EXPECT_EQ(fp8.kv_tokens, 235'140u);
  EXPECT_EQ(fp8.host_cache->tokens_per_rank, 470'280u);
  EXPECT_EQ(fp8.host_cache->bytes_total, 132'190'064'640u);
}

TEST(HostCacheFlags, SizeOverridesTheRatioAndZeroMeansUseTheRatio) {
  auto sized = decide_host_cache(flags(true, "48", "3"));
  ASSERT_TRUE(sized) << sized.error().message;
  EXPECT_EQ(sized->request.size_per_rank, 48'000'000'000u);
  EXPECT_FALSE(sized->request.ratio.has_value());
  EXPECT_EQ(sized->text, "--hicache-size 48 (48.0 GB per rank)");
  ASSERT_EQ(sized->notes.size(), 1u);
  EXPECT_NE(sized->notes[0].find("--hicache-ratio 3 is ignored"), std::string::npos);
  // SGLang's best-practices command: --hicache-ratio 2 --hicache-size 0.
  auto zero = decide_host_cache(flags(true, "0", "2"));
  ASSERT_TRUE(zero) << zero.error().message;
  EXPECT_EQ(zero->request.ratio, 2.0);
  EXPECT_EQ(zero->text, "--hicache-ratio 2");
  EXPECT_TRUE(zero->notes.empty());
  auto buffer = decide_host_cache(flags(true, "", "", "buffer_only"));
  ASSERT_TRUE(buffer);
  EXPECT_EQ(buffer->request.ratio, 1.2);
}

TEST(HostCacheFlags, SizeOrRatioWithoutTheSwitchIsIgnoredAndSaidSo) {
  auto d = decide_host_cache(flags(false, "48"));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_FALSE(d->request.size_per_rank || d->request.ratio);
  EXPECT_TRUE(d->text.empty());
  ASSERT_EQ(d->notes.size(), 1u);
  EXPECT_EQ(d->notes[0],
            "--hicache-size 48 is ignored: SGLang builds a host cache only with "
            "--enable-hierarchical-cache (add it to plan one)");
  // The plan then has no host cache at all (the review's 683,060 host tokens are gone).
  PlanInput in = hicache_kimi_tp8();
  in.host_cache = d->request;
  EXPECT_FALSE(plan_point(in, 0.88).host_cache.has_value());

  auto both = decide_host_cache(flags(false, "48", "2"));
  ASSERT_TRUE(both);
  EXPECT_NE(both->notes[0].find("--hicache-size 48 and --hicache-ratio 2 are ignored"),
            std::string::npos)
      << both->notes[0];
  // Nothing given, nothing said.
  auto none = decide_host_cache(flags(false));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->notes.empty());
}

TEST(HostCacheFlags, BadValuesAreErrorsEvenWhenIgnored) {
  auto bad = decide_host_cache(flags(false, "", "inf"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--hicache-ratio"), std::string::npos);
  auto mode = decide_host_cache(flags(true, "", "", "disk"));
  ASSERT_FALSE(mode);
  EXPECT_NE(mode.error().message.find("--hicache-host-memory-mode disk"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::capacity
