#include "capacity/model_spec.h"

#include <gtest/gtest.h>

namespace gpureap::capacity {
namespace {

// Qwen3-8B: 36 layers, 32 query heads, 8 KV heads of 128.
const KvGeometry kQwen3_8B = gqa_geometry(36, 32, 8, 128);

// Kimi-K2.5 / DeepSeek-V3: 61 layers, latent 512 + rope 64.
const KvGeometry kKimi = mla_geometry(61, 64, 512, 64);

TEST(KvBytesPerToken, MlaIsTheLatentPlusRopeKeyPerLayerOnEveryRank) {
  EXPECT_EQ(kv_bytes_per_token(kKimi, 1, KvDtype::bf16), 70'272u);  // 61 * 576 * 2
  EXPECT_EQ(kv_bytes_per_token(kKimi, 8, KvDtype::bf16), 70'272u);  // not split by TP
  EXPECT_EQ(kv_bytes_per_token(kKimi, 8, KvDtype::fp8_e4m3), 35'136u);
}

TEST(KvBytesPerToken, GqaSplitsKvHeadsAcrossRanks) {
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 1, KvDtype::bf16), 147'456u);  // 8 * 256 * 36 * 2
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 2, KvDtype::bf16), 73'728u);
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 4, KvDtype::bf16), 36'864u);
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 8, KvDtype::bf16), 18'432u);
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 8, KvDtype::fp8_e4m3), 9'216u);
}

TEST(KvBytesPerToken, GqaReplicatesHeadsWhenTpExceedsKvHeads) {
  // tp 16 and 32 > 8 KV heads: each rank still keeps one whole head, so bytes
  // per token per rank stop falling (and the 16 ranks hold 2 copies of each).
  EXPECT_EQ(kv_heads_per_rank(kQwen3_8B, 16), 1);
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 16, KvDtype::bf16), 18'432u);
  EXPECT_EQ(kv_bytes_per_token(kQwen3_8B, 32, KvDtype::bf16), 18'432u);
  // Llama-3.1-70B: 80 layers x 8 KV heads x 128.
  const KvGeometry llama = gqa_geometry(80, 64, 8, 128);
  EXPECT_EQ(kv_bytes_per_token(llama, 1, KvDtype::bf16), 327'680u);
  EXPECT_EQ(kv_bytes_per_token(llama, 8, KvDtype::bf16), 40'960u);
  EXPECT_EQ(kv_bytes_per_token(llama, 16, KvDtype::bf16), 40'960u);
}

TEST(KvBytesPerToken, DistinctValueHeadDim) {
  KvGeometry g = kQwen3_8B;
  g.v_head_dim = 64;
  EXPECT_EQ(kv_bytes_per_token(g, 1, KvDtype::bf16), 8u * (128 + 64) * 36 * 2);
}

TEST(WeightSplit, PerRankDividesOnlyTheShardedBytes) {
  WeightSplit w{.sharded = 800, .replicated = 30};
  EXPECT_EQ(w.total(), 830u);
  EXPECT_EQ(w.per_rank(1), 830u);
  EXPECT_EQ(w.per_rank(8), 130u);
}

TEST(CheckTensorParallel, NamesTheFlagWhenTpDoesNotSplitTheModel) {
  ModelSpec qwen;
  qwen.name = "Qwen3-8B";
  qwen.kv = kQwen3_8B;
  EXPECT_TRUE(check_tensor_parallel(qwen, 1));
  EXPECT_TRUE(check_tensor_parallel(qwen, 8));
  EXPECT_TRUE(check_tensor_parallel(qwen, 16));  // replicated KV heads
  auto three = check_tensor_parallel(qwen, 3);
  ASSERT_FALSE(three);
  EXPECT_NE(three.error().message.find("--tp 3"), std::string::npos);
  EXPECT_FALSE(check_tensor_parallel(qwen, 0));
  EXPECT_FALSE(check_tensor_parallel(qwen, 64));  // 32 query heads
  KvGeometry twelve = kQwen3_8B;
  twelve.attention_heads = 48;
  twelve.kv_heads = 12;
  ModelSpec odd;
  odd.name = "m";
  odd.kv = twelve;
  auto eight = check_tensor_parallel(odd, 8);
  ASSERT_FALSE(eight);  // 8 neither divides 12 nor is a multiple of it
  EXPECT_NE(eight.error().message.find("12 KV heads"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::capacity
