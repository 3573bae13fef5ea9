#pragma once
// Hugging Face checkpoints as planner input: a config.json gives the geometry
// (its nested `text_config` when the model is multimodal, as Kimi-K2.5's is),
// and a model.safetensors.index.json gives the checkpoint's weight bytes in
// `metadata.total_size`. Pure parsers over the files' text.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/model_spec.h"
#include "capacity/weight_estimate.h"
#include "util/result.h"

namespace gpureap::capacity {

/// What a config.json says about a model.
struct HfModel {
  ModelSpec spec;                  // weights still unknown (nullopt)
  ArchShape shape;                 // for the replicated share of a stated total
  BytesPerParam bytes;             // guessed from quantization_config (fp8 -> 1 B linears)
  std::vector<std::string> notes;  // approximations the planner makes for this model
};

/// Parses config.json text. `source` is the path, used in errors ("config.json:
/// missing num_hidden_layers") and, with `_name_or_path`, for the model's name.
/// MLA is recognised by a non-null kv_lora_rank. Fails on invalid JSON and on a
/// missing or non-positive num_hidden_layers, num_attention_heads, hidden_size,
/// max_position_embeddings (or an equivalent context key), and for MLA
/// qk_rope_head_dim.
Result<HfModel> parse_hf_config(std::string_view text, std::string_view source);

/// `metadata.total_size` of a model.safetensors.index.json: the bytes of every
/// tensor in the checkpoint. Fails naming `source` when the field is missing.
Result<std::uint64_t> parse_safetensors_index(std::string_view text, std::string_view source);

}  // namespace gpureap::capacity
