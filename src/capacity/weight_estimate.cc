#include "capacity/weight_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gpureap::capacity {
namespace {

std::uint64_t priced(double params, double bytes_per_param) {
  const double bytes = std::round(params * bytes_per_param);
  return bytes < 0x1p64 ? static_cast<std::uint64_t>(bytes) : UINT64_MAX;
}

// The shape's integers as doubles: a config.json may hold any integer, and
// their products (3 * hidden * width * experts * layers) would overflow int64,
// which is undefined (found by fuzz/hf_config_fuzz.cc). Doubles are exact for
// every real model and merely large for absurd ones.
struct Dims {
  double hidden, layers, vocab, heads, kv_heads, head_dim, q_lora_rank, kv_lora_rank,
      qk_nope_head_dim, qk_rope_head_dim, v_head_dim, intermediate, dense_layers, routed_experts,
      shared_experts, moe_intermediate, vision_params;
  bool tied_embeddings;
};

}  // namespace

std::vector<WeightItem> weight_inventory(const ArchShape& a, const BytesPerParam& b) {
  const Dims s{static_cast<double>(a.hidden),           static_cast<double>(a.layers),
               static_cast<double>(a.vocab),            static_cast<double>(a.heads),
               static_cast<double>(a.kv_heads),         static_cast<double>(a.head_dim),
               static_cast<double>(a.q_lora_rank),      static_cast<double>(a.kv_lora_rank),
               static_cast<double>(a.qk_nope_head_dim), static_cast<double>(a.qk_rope_head_dim),
               static_cast<double>(a.v_head_dim),       static_cast<double>(a.intermediate),
               static_cast<double>(a.dense_layers),     static_cast<double>(a.routed_experts),
               static_cast<double>(a.shared_experts),   static_cast<double>(a.moe_intermediate),
               static_cast<double>(a.vision_params),    a.tied_embeddings};
  std::vector<WeightItem> items;
  auto add = [&](std::string name, double params, double bpp, bool sharded,
                 bool in_checkpoint = true) {
    if (params > 0) items.push_back({std::move(name), priced(params, bpp), sharded, in_checkpoint});
  };

  // Vocab-parallel embedding and lm_head: split across ranks.
  add("embedding + lm_head", s.vocab * s.hidden * (s.tied_embeddings ? 1 : 2), b.embedding, true);

  if (s.kv_lora_rank > 0) {
    // MLA (DeepseekV2AttentionMLA). fused_qkv_a_proj_with_mqa is a ReplicatedLinear
    // (hidden -> q_lora + kv_lora + rope); q_b, kv_b and o are split by heads.
    const double qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim;
    double replicated = s.hidden * (s.kv_lora_rank + s.qk_rope_head_dim);
    double sharded = s.kv_lora_rank * s.heads * (s.qk_nope_head_dim + s.v_head_dim) +
                           s.heads * s.v_head_dim * s.hidden;
    if (s.q_lora_rank > 0) {
      replicated += s.hidden * s.q_lora_rank;
      sharded += s.q_lora_rank * s.heads * qk_head;
    } else {
      sharded += s.hidden * s.heads * qk_head;
    }
    add("attention down-projections (MLA)", replicated * s.layers, b.linear, false);
    add("attention q_b/kv_b/o", sharded * s.layers, b.linear, true);
    // post_load_weights keeps w_kc/w_vc, a bf16 copy of kv_b_proj split by heads.
    add("absorbed w_kc/w_vc copy",
        s.kv_lora_rank * s.heads * (s.qk_nope_head_dim + s.v_head_dim) * s.layers, 2.0, true,
        /*in_checkpoint=*/false);
  } else {
    const double kv_heads = s.kv_heads > 0 ? s.kv_heads : s.heads;
    add("attention q/k/v/o",
        (2 * s.heads * s.head_dim * s.hidden + 2 * kv_heads * s.head_dim * s.hidden) * s.layers,
        b.linear, true);
  }

  // gate, up and down projections: 3 * hidden * width each.
  const double dense_layers = s.routed_experts > 0 ? s.dense_layers : s.layers;
  const double moe_layers = s.routed_experts > 0 ? s.layers - s.dense_layers : 0;
  add("dense MLP", 3 * s.hidden * s.intermediate * dense_layers, b.linear, true);
  add("routed experts", 3 * s.hidden * s.moe_intermediate * s.routed_experts * moe_layers,
      b.routed_experts, true);
  add("shared experts", 3 * s.hidden * s.moe_intermediate * s.shared_experts * moe_layers, b.linear,
      true);
  add("router gates", s.routed_experts * s.hidden * moe_layers, b.router, false);
  add("vision tower", s.vision_params, b.vision, false);
  return items;
}

WeightSplit split_of(const std::vector<WeightItem>& items) {
  WeightSplit split;
  for (const auto& item : items) (item.sharded ? split.sharded : split.replicated) += item.bytes;
  return split;
}

std::uint64_t checkpoint_bytes(const std::vector<WeightItem>& items) {
  std::uint64_t total = 0;
  for (const auto& item : items)
    if (item.in_checkpoint) total += item.bytes;
  return total;
}

WeightSplit split_total(std::uint64_t total, const ArchShape& shape, const BytesPerParam& bytes) {
  std::uint64_t replicated = 0;
  std::uint64_t copies = 0;
  for (const auto& item : weight_inventory(shape, bytes)) {
    if (!item.in_checkpoint)
      copies += item.bytes;
    else if (!item.sharded)
      replicated += item.bytes;
  }
  replicated = std::min(total, replicated);
  return WeightSplit{total - replicated + copies, replicated};
}

}  // namespace gpureap::capacity
