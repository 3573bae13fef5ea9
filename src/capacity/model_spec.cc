#include "capacity/model_spec.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpureap::capacity {

KvGeometry mla_geometry(int layers, int attention_heads, int kv_lora_rank, int qk_rope_head_dim) {
  KvGeometry kv;
  kv.attention = Attention::mla;
  kv.layers = layers;
  kv.attention_heads = attention_heads;
  kv.kv_lora_rank = kv_lora_rank;
  kv.qk_rope_head_dim = qk_rope_head_dim;
  return kv;
}

KvGeometry gqa_geometry(int layers, int attention_heads, int kv_heads, int head_dim) {
  KvGeometry kv;
  kv.attention = Attention::gqa;
  kv.layers = layers;
  kv.attention_heads = attention_heads;
  kv.kv_heads = kv_heads;
  kv.head_dim = head_dim;
  kv.v_head_dim = head_dim;
  return kv;
}

int kv_dtype_bytes(KvDtype dtype) {
  return dtype == KvDtype::bf16 ? 2 : 1;
}

std::string_view kv_dtype_name(KvDtype dtype) {
  return dtype == KvDtype::bf16 ? "bf16" : "fp8_e4m3";
}

std::uint64_t WeightSplit::per_rank(int tp) const {
  return sharded / static_cast<std::uint64_t>(std::max(tp, 1)) + replicated;
}

int kv_heads_per_rank(const KvGeometry& kv, int tp) {
  if (kv.attention == Attention::mla) return 1;
  return std::max(1, kv.kv_heads / std::max(tp, 1));
}

std::uint64_t kv_bytes_per_token(const KvGeometry& kv, int tp, KvDtype dtype) {
  const auto bytes = static_cast<std::uint64_t>(kv_dtype_bytes(dtype));
  const auto layers = static_cast<std::uint64_t>(kv.layers);
  if (kv.attention == Attention::mla)
    return layers * static_cast<std::uint64_t>(kv.kv_lora_rank + kv.qk_rope_head_dim) * bytes;
  return static_cast<std::uint64_t>(kv_heads_per_rank(kv, tp)) *
         static_cast<std::uint64_t>(kv.head_dim + kv.v_head_dim) * layers * bytes;
}

Result<void> check_tensor_parallel(const ModelSpec& model, int tp) {
  if (tp < 1) return fail(fmt::format("--tp {}: must be at least 1", tp));
  const int heads = model.kv.attention_heads;
  if (heads > 0 && heads % tp != 0)
    return fail(
        fmt::format("--tp {}: does not divide {}'s {} attention heads", tp, model.name, heads));
  const int kv_heads = model.kv.kv_heads;
  if (model.kv.attention == Attention::gqa && kv_heads > 0) {
    // QKVParallelLinear either splits the KV heads (tp divides them) or gives
    // each rank one whole head, replicated tp / kv_heads times.
    bool ok = tp <= kv_heads ? kv_heads % tp == 0 : tp % kv_heads == 0;
    if (!ok)
      return fail(
          fmt::format("--tp {}: {} has {} KV heads; tp must divide them or be a multiple of them",
                      tp, model.name, kv_heads));
  }
  return {};
}

}  // namespace gpureap::capacity
