#include "capacity/weight_estimate.h"

#include <gtest/gtest.h>

#include "capacity/model_preset.h"

namespace gpureap::capacity {
namespace {

constexpr double kGB = 1e9;
constexpr double kGiBd = 1073741824.0;

const ModelPreset& preset(std::string_view name) {
  return **find_preset(name);
}

std::uint64_t item_bytes(const std::vector<WeightItem>& items, std::string_view name) {
  for (const auto& item : items)
    if (item.name == name) return item.bytes;
  return 0;
}

TEST(WeightInventory, KimiK25TextMatchesTheReferenceSplitAtTp8) {
  ArchShape text = preset("Kimi-K2.5").shape;
  text.vision_params = 0;
  const auto items = weight_inventory(text, preset("Kimi-K2.5").bytes);
  // 1014.69B routed-expert parameters at 0.5625 B: 570.8 GB, 71.35 GB per rank.
  EXPECT_NEAR(item_bytes(items, "routed experts") / kGB, 570.76, 0.01);
  // fused_qkv_a_proj_with_mqa, replicated: 7168 x 2112 x 61 layers x 2 B.
  EXPECT_EQ(item_bytes(items, "attention down-projections (MLA)"), 7168ULL * 2112 * 61 * 2);
  EXPECT_NEAR(item_bytes(items, "router gates") / kGB, 0.330, 0.001);
  const WeightSplit split = split_of(items);
  EXPECT_NEAR(checkpoint_bytes(items) / kGB, 594.2, 0.1);  // text checkpoint
  EXPECT_NEAR(split.per_rank(8) / kGB, 76.31, 0.01);       // reference: 76.31 GB
  EXPECT_NEAR(split.per_rank(8) / kGiBd, 71.07, 0.01);     // = 71.07 GiB
}

TEST(WeightInventory, KimiK25PresetCountsTheVisionTowerOnEveryRank) {
  const ModelSpec spec = spec_of(preset("Kimi-K2.5"));
  ASSERT_TRUE(spec.weights.has_value());
  EXPECT_NEAR(spec.weights->per_rank(8) / kGiBd, 71.86, 0.01);
  EXPECT_NEAR(spec.weights->per_rank(8) / kGiBd - spec.weights->per_rank(16) / kGiBd,
              spec.weights->sharded / 16.0 / kGiBd, 1e-6);
}

TEST(WeightInventory, DenseBf16ModelsMatchTheirParameterCounts) {
  // Llama-3.1-70B: 70.55B parameters, 141.1 GB, all split by TP.
  const WeightSplit llama = split_of(weight_inventory(preset("Llama-3.1-70B").shape, kBf16Weights));
  EXPECT_NEAR(llama.total() / kGB, 141.1, 0.1);
  EXPECT_EQ(llama.replicated, 0u);
  EXPECT_NEAR(llama.per_rank(8) / kGB, 17.6, 0.05);
  // Qwen3-8B: 8.19B parameters, 16.4 GB.
  const WeightSplit qwen = split_of(weight_inventory(preset("Qwen3-8B").shape, kBf16Weights));
  EXPECT_NEAR(qwen.total() / kGB, 16.4, 0.05);
}

TEST(WeightInventory, DeepSeekV3AndKimiK2InFp8) {
  const auto dsv3_items =
      weight_inventory(preset("DeepSeek-V3").shape, preset("DeepSeek-V3").bytes);
  const WeightSplit dsv3 = split_of(dsv3_items);
  EXPECT_NEAR(checkpoint_bytes(dsv3_items) / kGB, 673.0, 1.0);  // ~673 GB main model
  EXPECT_NEAR(dsv3.per_rank(8) / kGB, 85.1, 0.5);               // ~85.1 GB per rank at TP 8
  const auto k2_items = weight_inventory(preset("Kimi-K2").shape, preset("Kimi-K2").bytes);
  const WeightSplit k2 = split_of(k2_items);
  EXPECT_NEAR(checkpoint_bytes(k2_items) / 1e12, 1.03, 0.01);  // ~1.03 TB
  EXPECT_GT(k2.per_rank(8) / kGB, 120.0);                      // does not fit 8 x 96 GB
}

TEST(SplitTotal, TakesTheReplicatedShareFromTheInventory) {
  const ModelPreset& kimi = preset("Kimi-K2-Thinking");
  const auto items = weight_inventory(kimi.shape, kimi.bytes);
  const WeightSplit inv = split_of(items);
  // The index states the checkpoint; the split adds SGLang's w_kc/w_vc copy.
  const WeightSplit split = split_total(checkpoint_bytes(items), kimi.shape, kimi.bytes);
  EXPECT_EQ(split.replicated, inv.replicated);
  EXPECT_EQ(split.sharded, inv.sharded);
  EXPECT_EQ(split.total(), inv.total());
  EXPECT_EQ(split.total() - checkpoint_bytes(items), item_bytes(items, "absorbed w_kc/w_vc copy"));
  // Never more replicated than the total.
  EXPECT_EQ(split_total(1000, kimi.shape, kimi.bytes).replicated, 1000u);
}

}  // namespace
}  // namespace gpureap::capacity
