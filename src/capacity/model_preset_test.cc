#include "capacity/model_preset.h"

#include <gtest/gtest.h>

namespace gpureap::capacity {
namespace {

TEST(ModelPresets, TheIssuesModelsArePresent) {
  for (const char* name : {"Kimi-K2.5", "Kimi-K2", "DeepSeek-V3", "Llama-3.1-70B", "Qwen3-8B"}) {
    auto preset = find_preset(name);
    ASSERT_TRUE(preset) << name;
    const ModelSpec spec = spec_of(**preset);
    EXPECT_EQ(spec.name, name);
    EXPECT_GT(spec.kv.layers, 0);
    EXPECT_GT(spec.context_len, 0);
    ASSERT_TRUE(spec.weights.has_value());
    EXPECT_GT(spec.weights->total(), 0u);
    EXPECT_NE(spec.weights_origin.find("preset"), std::string::npos);
  }
}

TEST(ModelPresets, MatchCaseInsensitivelyAndByHuggingFaceId) {
  EXPECT_EQ((*find_preset("kimi-k2.5"))->name, "Kimi-K2.5");
  EXPECT_EQ((*find_preset("moonshotai/Kimi-K2.5"))->name, "Kimi-K2.5");
  EXPECT_EQ((*find_preset("meta-llama/Llama-3.1-70B-Instruct"))->name, "Llama-3.1-70B");
  EXPECT_EQ((*find_preset("Qwen/Qwen3-8B"))->name, "Qwen3-8B");
  EXPECT_EQ((*find_preset("deepseek-ai/DeepSeek-V3"))->name, "DeepSeek-V3");
}

TEST(ModelPresets, UnknownModelIsAnErrorNamingItAndListingPresets) {
  auto unknown = find_preset("Mistral-Large");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("--model Mistral-Large: unknown model"),
            std::string::npos);
  EXPECT_NE(unknown.error().message.find("Kimi-K2.5"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("config.json"), std::string::npos);
}

TEST(ModelPresets, Geometry) {
  const ModelSpec kimi = spec_of(**find_preset("Kimi-K2.5"));
  EXPECT_EQ(kimi.kv.attention, Attention::mla);
  EXPECT_EQ(kv_bytes_per_token(kimi.kv, 8, KvDtype::bf16), 70'272u);
  EXPECT_EQ(kimi.context_len, 262'144);
  const ModelSpec llama = spec_of(**find_preset("Llama-3.1-70B"));
  EXPECT_EQ(kv_bytes_per_token(llama.kv, 1, KvDtype::bf16), 327'680u);
  const ModelSpec dsv3 = spec_of(**find_preset("DeepSeek-V3"));
  EXPECT_EQ(kv_bytes_per_token(dsv3.kv, 8, KvDtype::bf16), 70'272u);
}

}  // namespace
}  // namespace gpureap::capacity
