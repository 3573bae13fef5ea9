#pragma once
// Weight bytes from a model's shape: a parameter inventory of a decoder-only
// transformer (dense or DeepSeek-style MoE, GQA or MLA attention), each tensor
// priced at its checkpoint's bytes per parameter and marked sharded or
// replicated the way SGLang's model code places it under tensor parallelism
// (python/sglang/srt/models/deepseek_v2.py, llama.py). The presets' weight
// figures come from here, and so does the replicated share when a checkpoint
// only states its total size.

#include <cstdint>
#include <string>
#include <vector>

#include "capacity/model_spec.h"

namespace gpureap::capacity {

/// The dimensions that decide a transformer's parameter count.
struct ArchShape {
  std::int64_t hidden = 0;
  std::int64_t layers = 0;
  std::int64_t vocab = 0;
  bool tied_embeddings = false;
  std::int64_t heads = 0;
  // gqa attention
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  // mla attention (used when kv_lora_rank > 0)
  std::int64_t q_lora_rank = 0;  // 0: queries projected directly from the hidden state
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  // feed-forward
  std::int64_t intermediate = 0;    // dense MLP width
  std::int64_t dense_layers = 0;    // leading dense layers of an MoE model (first_k_dense_replace)
  std::int64_t routed_experts = 0;  // 0: a dense model
  std::int64_t shared_experts = 0;
  std::int64_t moe_intermediate = 0;
  // a vision tower, counted whole on every rank
  std::int64_t vision_params = 0;
};

/// Checkpoint bytes per parameter of each kind of tensor.
struct BytesPerParam {
  double routed_experts = 2.0;  // e.g. 0.5625 for INT4 with a bf16 scale per 32
  double linear = 2.0;          // attention and dense/shared MLP projections
  double embedding = 2.0;       // token embedding and lm_head
  double router = 2.0;          // MoE gate
  double vision = 2.0;
};

/// bf16 everywhere.
inline constexpr BytesPerParam kBf16Weights{};

/// One line of the inventory.
struct WeightItem {
  std::string name;
  std::uint64_t bytes = 0;  // across all ranks
  bool sharded = true;
  bool in_checkpoint = true;  // false: a copy the engine makes while loading
};

/// Every tensor group of the model, with its bytes and placement.
/// SGLang also keeps MLA's absorbed w_kc/w_vc (a bf16 copy of kv_b_proj), counted
/// as a sharded item. Norms and biases (well under 0.1%) are left out.
std::vector<WeightItem> weight_inventory(const ArchShape& shape, const BytesPerParam& bytes);

/// Sums an inventory into the sharded and replicated bytes the ranks hold once
/// loaded (checkpoint tensors and the engine's copies).
WeightSplit split_of(const std::vector<WeightItem>& items);

/// The bytes of the checkpoint's own tensors (what a safetensors index totals).
std::uint64_t checkpoint_bytes(const std::vector<WeightItem>& items);

/// Splits a checkpoint's stated total (from a safetensors index or --weights)
/// into the sharded and replicated bytes loaded: the replicated share comes from
/// the inventory (capped at the total), the rest is taken as sharded, and the
/// engine's load-time copies are added as sharded.
WeightSplit split_total(std::uint64_t total, const ArchShape& shape, const BytesPerParam& bytes);

}  // namespace gpureap::capacity
