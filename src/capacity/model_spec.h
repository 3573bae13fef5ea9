#pragma once
// What the KV-cache planner needs to know about a model: the attention geometry
// that sizes one token's cache, the context length, and the weight bytes each
// tensor-parallel rank holds. Presets and Hugging Face config.json files both
// produce a ModelSpec; the planner never looks at anything else.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gpureap::capacity {

/// Upper bounds on what a command line, config.json or log may say. Each is far
/// above any real model or launch, and low enough that the planner's products
/// (bytes per token x tokens x requests) stay well inside 64 bits.
inline constexpr std::int64_t kMaxContextLen = 1LL << 30;  // tokens (largest today: ~10M)
inline constexpr int kMaxTensorParallel = 1024;            // ranks
inline constexpr std::int64_t kMaxModelDim = 1LL << 20;    // layers, heads, head and hidden sizes

/// How the model's attention stores its cache.
/// mla: multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one compressed
///      latent plus a rope key per token and layer, independent of head count.
/// gqa: grouped-query (or plain multi-head) attention: K and V per KV head.
enum class Attention { mla, gqa };

/// The geometry that sizes the KV cache.
struct KvGeometry {
  Attention attention = Attention::gqa;
  int layers = 0;           // layers that keep a KV cache (num_hidden_layers)
  int attention_heads = 0;  // query heads; tensor parallelism must divide them
  // mla
  int kv_lora_rank = 0;
  int qk_rope_head_dim = 0;
  // gqa
  int kv_heads = 0;
  int head_dim = 0;
  int v_head_dim = 0;
};

/// An MLA geometry: `layers` layers of a kv_lora_rank latent plus a rope key.
KvGeometry mla_geometry(int layers, int attention_heads, int kv_lora_rank, int qk_rope_head_dim);

/// A grouped-query (or, with kv_heads == attention_heads, multi-head) geometry
/// whose V heads are as wide as its K heads.
KvGeometry gqa_geometry(int layers, int attention_heads, int kv_heads, int head_dim);

/// Element type of the KV cache (SGLang --kv-cache-dtype).
enum class KvDtype { bf16, fp8_e4m3 };

/// Bytes per cached element: 2 for bf16, 1 for fp8_e4m3 (stored as uint8).
int kv_dtype_bytes(KvDtype dtype);

/// "bf16" or "fp8_e4m3".
std::string_view kv_dtype_name(KvDtype dtype);

/// Weight bytes split by how tensor parallelism places them: `sharded` bytes are
/// divided among the ranks (column/row-parallel linears, vocab-parallel
/// embedding, experts under TP or EP), `replicated` bytes sit whole on every
/// rank (MLA down-projections, MoE router gates, a data-parallel vision tower).
struct WeightSplit {
  std::uint64_t sharded = 0;
  std::uint64_t replicated = 0;

  /// The checkpoint's bytes: sharded + replicated.
  std::uint64_t total() const { return sharded + replicated; }
  /// Bytes one rank holds at tensor parallelism `tp` (>= 1): sharded / tp + replicated.
  std::uint64_t per_rank(int tp) const;
};

/// A model as the planner sees it.
struct ModelSpec {
  std::string name;
  KvGeometry kv;
  std::int64_t context_len = 0;        // the server's default context length
  std::optional<WeightSplit> weights;  // nullopt until a preset, flag or index supplies them
  std::string weights_origin;          // one line: how the weight figure was obtained
};

/// KV heads one rank stores under attention tensor parallelism `tp`, as SGLang's
/// ModelConfig.get_num_kv_heads computes it: max(1, kv_heads / tp). When tp
/// exceeds the KV heads, every rank keeps one whole head (heads are replicated).
int kv_heads_per_rank(const KvGeometry& kv, int tp);

/// Bytes one token's KV cache takes on one rank (SGLang get_cell_size_per_token):
///   mla: layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes, the same on
///        every rank (each rank keeps a full copy of the latent);
///   gqa: kv_heads_per_rank * (head_dim + v_head_dim) * layers * dtype bytes.
std::uint64_t kv_bytes_per_token(const KvGeometry& kv, int tp, KvDtype dtype);

/// Checks that tensor parallelism `tp` can split this model the way SGLang's
/// linear layers require: tp >= 1, tp divides the query heads, and for gqa tp
/// divides the KV heads or is a multiple of them. The error names `--tp`.
Result<void> check_tensor_parallel(const ModelSpec& model, int tp);

}  // namespace gpureap::capacity
