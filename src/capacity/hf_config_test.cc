#include "capacity/hf_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "capacity/model_preset.h"

namespace gpureap::capacity {
namespace {

std::string fixture(const std::string& name) {
  const std::string path = std::string(GPUREAP_FIXTURES) + "/capacity/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Result<HfModel> parse_fixture(const std::string& name) {
  return parse_hf_config(fixture(name), name);
}

TEST(HfConfig, KimiK25ReadsTheNestedTextConfigAsMla) {
  auto model = parse_fixture("kimi-k2.5/config.json");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->spec.name, "Kimi-K2.5");  // from _name_or_path
  EXPECT_EQ(model->spec.kv.attention, Attention::mla);
  EXPECT_EQ(model->spec.kv.layers, 61);
  EXPECT_EQ(model->spec.context_len, 262'144);
  EXPECT_FALSE(model->spec.weights.has_value());
  EXPECT_EQ(kv_bytes_per_token(model->spec.kv, 8, KvDtype::bf16), 70'272u);
  // The geometry prices the same replicated share as the preset's text model.
  EXPECT_EQ(model->shape.routed_experts, 384);
  EXPECT_EQ(model->shape.dense_layers, 1);
  EXPECT_EQ(model->shape.q_lora_rank, 1536);
  const ModelPreset& thinking = **find_preset("Kimi-K2-Thinking");
  EXPECT_EQ(split_of(weight_inventory(model->shape, model->bytes)).replicated,
            split_of(weight_inventory(thinking.shape, thinking.bytes)).replicated);
}

TEST(HfConfig, Qwen3GqaGeometryAndDirectoryName) {
  auto model = parse_fixture("qwen3-8b/config.json");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->spec.name, "qwen3-8b");  // no _name_or_path: the directory
  EXPECT_EQ(model->spec.kv.attention, Attention::gqa);
  EXPECT_EQ(model->spec.kv.kv_heads, 8);
  EXPECT_EQ(model->spec.kv.head_dim, 128);
  EXPECT_EQ(model->spec.context_len, 40'960);
  EXPECT_EQ(kv_bytes_per_token(model->spec.kv, 1, KvDtype::bf16), 147'456u);
  EXPECT_EQ(kv_bytes_per_token(model->spec.kv, 16, KvDtype::bf16), 18'432u);
  EXPECT_TRUE(model->notes.empty());
}

TEST(HfConfig, LlamaDefaultsHeadDimFromHiddenSize) {
  auto model = parse_fixture("llama-3.1-70b/config.json");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->spec.kv.head_dim, 128);  // 8192 / 64
  EXPECT_EQ(kv_bytes_per_token(model->spec.kv, 8, KvDtype::bf16), 40'960u);
  // Same parameter inventory as the preset.
  const ModelPreset& preset = **find_preset("Llama-3.1-70B");
  EXPECT_EQ(checkpoint_bytes(weight_inventory(model->shape, model->bytes)),
            checkpoint_bytes(weight_inventory(preset.shape, preset.bytes)));
}

TEST(HfConfig, MultiHeadWhenKvHeadsAreAbsent) {
  auto model = parse_hf_config(
      R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
          "max_position_embeddings": 2048})",
      "mha.json");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->spec.kv.kv_heads, 4);
  EXPECT_EQ(model->spec.kv.head_dim, 64);
}

TEST(HfConfig, Fp8QuantizationPricesLinearsAtOneByte) {
  auto model = parse_hf_config(
      R"({"num_hidden_layers": 61, "num_attention_heads": 128, "hidden_size": 7168,
          "kv_lora_rank": 512, "qk_rope_head_dim": 64, "max_position_embeddings": 163840,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})",
      "dsv3.json");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_DOUBLE_EQ(model->bytes.linear, 1.0);
}

TEST(HfConfig, SlidingWindowIsNoted) {
  auto model = parse_hf_config(
      R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
          "max_position_embeddings": 2048, "layer_types": ["sliding_attention", "full_attention"]})",
      "gemma.json");
  ASSERT_TRUE(model);
  ASSERT_EQ(model->notes.size(), 1u);
  EXPECT_NE(model->notes[0].find("sliding-window"), std::string::npos);
}

TEST(HfConfigErrors, MissingFieldsAreNamedWithTheFile) {
  auto layers = parse_fixture("bad/missing_layers.json");
  ASSERT_FALSE(layers);
  EXPECT_EQ(layers.error().message,
            "bad/missing_layers.json: missing num_hidden_layers (a positive integer)");

  auto rope = parse_fixture("bad/mla_without_rope.json");
  ASSERT_FALSE(rope);
  EXPECT_NE(rope.error().message.find("missing qk_rope_head_dim"), std::string::npos);

  auto context = parse_fixture("bad/no_context.json");
  ASSERT_FALSE(context);
  EXPECT_NE(context.error().message.find("bad/no_context.json: missing max_position_embeddings"),
            std::string::npos);
  EXPECT_NE(context.error().message.find("--context-len"), std::string::npos);
}

TEST(HfConfigErrors, NestedTextConfigErrorsSayWhere) {
  auto model = parse_hf_config(R"({"text_config": {"hidden_size": 64}})", "vl/config.json");
  ASSERT_FALSE(model);
  EXPECT_EQ(model.error().message,
            "vl/config.json (text_config): missing num_hidden_layers (a positive integer)");
}

TEST(HfConfigErrors, WrongTypesAndInvalidJson) {
  auto typed = parse_fixture("bad/wrong_type.json");
  ASSERT_FALSE(typed);
  EXPECT_NE(typed.error().message.find("num_hidden_layers must be a non-negative integer"),
            std::string::npos);
  auto truncated = parse_fixture("bad/truncated.json");
  ASSERT_FALSE(truncated);
  EXPECT_EQ(truncated.error().message, "bad/truncated.json: not valid JSON");
  auto array = parse_hf_config("[1, 2]", "list.json");
  ASSERT_FALSE(array);
  EXPECT_EQ(array.error().message, "list.json: expected a JSON object");
}

TEST(SafetensorsIndex, TotalSize) {
  auto total = parse_safetensors_index(fixture("qwen3-8b/model.safetensors.index.json"), "index");
  ASSERT_TRUE(total) << total.error().message;
  EXPECT_EQ(*total, 16'381'470'720u);
  EXPECT_EQ(*parse_safetensors_index(R"({"metadata": {"total_size": "1234"}})", "s"), 1234u);
}

TEST(SafetensorsIndex, MissingTotalIsAnErrorNamingTheFile) {
  auto missing = parse_safetensors_index(fixture("bad/index_without_total.json"), "bad/index.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "bad/index.json: missing metadata.total_size");
  auto negative = parse_safetensors_index(R"({"metadata": {"total_size": -5}})", "i.json");
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.error().message.find("positive byte count"), std::string::npos);
}

TEST(HfConfigErrors, OutOfRangeNumbersNameTheFieldInsteadOfOverflowing) {
  auto config = [](const std::string& extra) {
    return R"({"num_hidden_layers": 36, "num_attention_heads": 32, "hidden_size": 4096,
               "num_key_value_heads": 8, "max_position_embeddings": 40960)" +
           extra + "}";
  };
  ASSERT_TRUE(parse_hf_config(config(R"(, "head_dim": 128)"), "c.json"));
  // head_dim 2^31-1 used to overflow int math into "no KV cache at 0.90"; a context of
  // 2^63-1 gave a 24 KiB request table; a uint64 above 2^63 read as negative.
  for (const char* extra :
       {R"(, "head_dim": 2147483647)", R"(, "head_dim": 18446744073709551615)",
        R"(, "v_head_dim": 1099511627776)", R"(, "vocab_size": 9223372036854775807)",
        R"(, "num_key_value_heads": 4294967296)"}) {
    auto model = parse_hf_config(config(extra), "c.json");
    ASSERT_FALSE(model) << extra;
    EXPECT_EQ(model.error().message.rfind("c.json: ", 0), 0u) << model.error().message;
  }
  auto context = parse_hf_config(
      R"({"num_hidden_layers": 36, "num_attention_heads": 32, "hidden_size": 4096,
          "max_position_embeddings": 9223372036854775807})",
      "c.json");
  ASSERT_FALSE(context);
  EXPECT_NE(context.error().message.find("max_position_embeddings"), std::string::npos);
  EXPECT_NE(context.error().message.find("out of range"), std::string::npos);
}

TEST(SafetensorsIndex, TotalSizeMustBeAWholeByteCountInRange) {
  EXPECT_EQ(*parse_safetensors_index(R"({"metadata": {"total_size": 1.6e10}})", "i"), 16'000'000'000u);
  // 1e30 and 1e-300 gave "weights 0 B"; "-5" wrapped to 16 EiB through stoull.
  for (const char* bad : {"1e30", "1e-300", "\"-5\"", "\"1e3\"", "\"\"", "0", "1.5",
                          "18446744073709551615", "\" 12\""}) {
    auto total = parse_safetensors_index(fmt::format(R"({{"metadata": {{"total_size": {}}}}})", bad),
                                         "i.json");
    ASSERT_FALSE(total) << bad;
    EXPECT_NE(total.error().message.find("i.json: metadata.total_size"), std::string::npos)
        << total.error().message;
  }
}

}  // namespace
}  // namespace gpureap::capacity
