#include "capacity/model_preset.h"
#include "util/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace gpureap::capacity {
namespace {

// Block-FP8 (e4m3 with one fp32 scale per 128x128 block), as in the DeepSeek-V3
// and Kimi-K2-Instruct checkpoints: 1 + 4/16384 bytes per parameter.
constexpr double kBlockFp8 = 1.0 + 4.0 / 16384.0;
// compressed-tensors pack-quantized INT4, symmetric, group_size 32, one bf16
// scale per group: 0.5 + 2/32 bytes per parameter (Kimi-K2-Thinking, Kimi-K2.5).
constexpr double kInt4Group32 = 0.5 + 2.0 / 32.0;

// A DeepSeek-V3-style model: MLA attention (hidden 7168, 61 layers), MoE
// feed-forward after `dense_layers` dense layers.
ArchShape mla_moe(std::int64_t vocab, std::int64_t heads, std::int64_t dense_layers,
                  std::int64_t routed_experts) {
  ArchShape s;
  s.hidden = 7168;
  s.layers = 61;
  s.vocab = vocab;
  s.heads = heads;
  s.q_lora_rank = 1536;
  s.kv_lora_rank = 512;
  s.qk_nope_head_dim = 128;
  s.qk_rope_head_dim = 64;
  s.v_head_dim = 128;
  s.intermediate = 18432;
  s.dense_layers = dense_layers;
  s.routed_experts = routed_experts;
  s.shared_experts = 1;
  s.moe_intermediate = 2048;
  return s;
}

// A Llama-style dense model with 128-wide heads.
ArchShape dense_gqa(std::int64_t hidden, std::int64_t layers, std::int64_t vocab,
                    std::int64_t heads, std::int64_t kv_heads, std::int64_t intermediate) {
  ArchShape s;
  s.hidden = hidden;
  s.layers = layers;
  s.vocab = vocab;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = 128;
  s.intermediate = intermediate;
  return s;
}

BytesPerParam quantized(double routed_experts, double linear) {
  BytesPerParam b;
  b.routed_experts = routed_experts;
  b.linear = linear;
  return b;
}

ModelPreset preset(std::string name, std::vector<std::string> aliases, ArchShape shape,
                   BytesPerParam bytes, KvGeometry kv, std::int64_t context_len,
                   std::string quantization) {
  ModelPreset p;
  p.name = std::move(name);
  p.aliases = std::move(aliases);
  p.shape = shape;
  p.bytes = bytes;
  p.kv = kv;
  p.context_len = context_len;
  p.quantization = std::move(quantization);
  return p;
}

std::vector<ModelPreset> build_presets() {
  // The text model of Kimi-K2, K2-Thinking and K2.5 (config text_config,
  // model_type kimi_k2 / deepseek_v3): 61 layers, the first dense, 384 routed
  // experts plus one shared, 64 MLA heads, vocabulary 163,840.
  const ArchShape kimi_text = mla_moe(163840, 64, 1, 384);
  ArchShape kimi_k25 = kimi_text;
  // MoonViT and its projector, about 0.42B bf16 parameters (0.85 GB), counted
  // whole on every rank: the data-parallel encoder layout, and the figure that
  // matches the weights the case study's own numbers imply (docs/plan.md).
  kimi_k25.vision_params = 425'000'000;
  const KvGeometry kimi_kv = mla_geometry(61, 64, 512, 64);

  return {
      preset("Kimi-K2.5", {"moonshotai/Kimi-K2.5", "kimi-k25", "kimi_k25"}, kimi_k25,
             quantized(kInt4Group32, 2.0), kimi_kv, 262144,
             "routed experts INT4 (group 32, bf16 scales), everything else bf16; MoonViT "
             "counted on every rank"),
      preset("Kimi-K2", {"moonshotai/Kimi-K2-Instruct", "Kimi-K2-Instruct"}, kimi_text,
             quantized(kBlockFp8, kBlockFp8), kimi_kv, 131072,
             "block-FP8 linears (128x128 fp32 scales), bf16 embedding and router"),
      preset("Kimi-K2-Thinking", {"moonshotai/Kimi-K2-Thinking"}, kimi_text,
             quantized(kInt4Group32, 2.0), kimi_kv, 262144,
             "routed experts INT4 (group 32, bf16 scales), everything else bf16"),
      preset("DeepSeek-V3",
             {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324", "DeepSeek-V3-0324"},
             mla_moe(129280, 128, 3, 256), quantized(kBlockFp8, kBlockFp8),
             mla_geometry(61, 128, 512, 64), 163840,
             "block-FP8 linears (128x128 fp32 scales), bf16 embedding and router; MTP layer "
             "not loaded"),
      preset("Llama-3.1-70B",
             {"meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B",
              "Llama-3.1-70B-Instruct", "Meta-Llama-3.1-70B-Instruct"},
             dense_gqa(8192, 80, 128256, 64, 8, 28672), kBf16Weights, gqa_geometry(80, 64, 8, 128),
             131072, "bf16"),
      preset("Qwen3-8B", {"Qwen/Qwen3-8B"}, dense_gqa(4096, 36, 151936, 32, 8, 12288), kBf16Weights,
             gqa_geometry(36, 32, 8, 128), 40960, "bf16"),
  };
}

const std::vector<ModelPreset>& presets() {
  static const std::vector<ModelPreset> kPresets = build_presets();
  return kPresets;
}

// "moonshotai/Kimi-K2.5" and "Kimi-K2.5" name the same preset.
std::string_view without_org(std::string_view s) {
  auto slash = s.rfind('/');
  return slash == std::string_view::npos ? s : s.substr(slash + 1);
}

}  // namespace

std::span<const ModelPreset> model_presets() {
  return presets();
}

Result<const ModelPreset*> find_preset(std::string_view name) {
  const std::string wanted = ascii_lower(without_org(name));
  for (const auto& preset : presets()) {
    if (ascii_lower(preset.name) == wanted) return &preset;
    for (const auto& alias : preset.aliases)
      if (ascii_lower(without_org(alias)) == wanted) return &preset;
  }
  std::string names;
  for (const auto& preset : presets()) names += (names.empty() ? "" : ", ") + preset.name;
  return fail(fmt::format(
      "--model {}: unknown model (presets: {}; or pass a Hugging Face config.json)", name, names));
}

ModelSpec spec_of(const ModelPreset& preset) {
  ModelSpec spec;
  spec.name = preset.name;
  spec.kv = preset.kv;
  spec.context_len = preset.context_len;
  spec.weights = split_of(weight_inventory(preset.shape, preset.bytes));
  spec.weights_origin = "preset inventory: " + preset.quantization;
  return spec;
}

}  // namespace gpureap::capacity
