#pragma once
// Built-in models, so `gpureap plan --model Kimi-K2.5` needs no download. Each
// preset states the published geometry (from the model's config.json) and the
// checkpoint's quantization; its weight bytes come from the parameter inventory
// in weight_estimate.h, so the figure for any --tp follows from the same
// arithmetic (docs/plan.md lists the inventories).

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/model_spec.h"
#include "capacity/weight_estimate.h"
#include "util/result.h"

namespace gpureap::capacity {

struct ModelPreset {
  std::string name;                  // canonical name, e.g. "Kimi-K2.5"
  std::vector<std::string> aliases;  // other accepted spellings (Hugging Face ids)
  ArchShape shape;
  BytesPerParam bytes;
  KvGeometry kv;
  std::int64_t context_len = 0;
  std::string quantization;  // one line, for --help and docs
};

/// Every built-in preset, in the order --help lists them.
std::span<const ModelPreset> model_presets();

/// The preset named `name`: matched case-insensitively against the canonical
/// name and the aliases, with or without an "org/" prefix. Fails naming `name`
/// and listing the presets when none matches.
Result<const ModelPreset*> find_preset(std::string_view name);

/// The planner's view of a preset: geometry, context length, and the weight
/// split from its inventory, with `weights_origin` saying so.
ModelSpec spec_of(const ModelPreset& preset);

}  // namespace gpureap::capacity
