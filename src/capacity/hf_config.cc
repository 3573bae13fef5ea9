#include "capacity/hf_config.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "util/units.h"

namespace gpureap::capacity {
namespace {

using nlohmann::json;

Result<json> parse_json(std::string_view text, std::string_view source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail(fmt::format("{}: not valid JSON", source));
  if (!doc.is_object()) return fail(fmt::format("{}: expected a JSON object", source));
  return doc;
}

// An integer field: nullopt when absent or null; an error when present but not
// an integer from 0 to `max` (a geometry field: kMaxModelDim; a context length:
// kMaxContextLen), so no later product of them can overflow.
Result<std::optional<std::int64_t>> int_field(const json& obj, const char* key,
                                              std::string_view source,
                                              std::int64_t max = kMaxModelDim) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<std::int64_t>{};
  // An unsigned integer above 2^63-1 reads as negative through get<int64_t>.
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<std::uint64_t>() > INT64_MAX) ||
      it->get<std::int64_t>() < 0)
    return fail(
        fmt::format("{}: {} must be a non-negative integer, not {}", source, key, it->dump()));
  if (it->get<std::int64_t>() > max)
    return fail(fmt::format("{}: {} {} is out of range (at most {})", source, key, it->dump(), max));
  return std::optional<std::int64_t>{it->get<std::int64_t>()};
}

Result<std::int64_t> required_int(const json& obj, const char* key, std::string_view source) {
  auto value = int_field(obj, key, source);
  if (!value) return std::unexpected(value.error());
  if (!*value || **value <= 0)
    return fail(fmt::format("{}: missing {} (a positive integer)", source, key));
  return **value;
}

bool optional_bool(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

std::string optional_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::int64_t optional_int(const json& obj, const char* key, std::int64_t fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return fallback;
  return it->get<std::int64_t>();
}

// The name a user would recognise: `_name_or_path`, else the directory holding
// config.json, else the file name.
std::string model_name(const json& doc, std::string_view source) {
  if (auto it = doc.find("_name_or_path"); it != doc.end() && it->is_string()) {
    std::string name = it->get<std::string>();
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
    if (!name.empty()) return name;
  }
  std::string_view path = source;
  auto slash = path.rfind('/');
  std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (file == "config.json" && slash != std::string_view::npos && slash > 0) {
    std::string_view dir = path.substr(0, slash);
    auto dir_slash = dir.rfind('/');
    return std::string(dir_slash == std::string_view::npos ? dir : dir.substr(dir_slash + 1));
  }
  return std::string(file);
}

// SGLang's get_context_length looks at these keys, in this order.
constexpr std::array kContextKeys{"max_position_embeddings", "max_sequence_length", "seq_length",
                                  "max_seq_len", "model_max_length"};

bool has_layer_type(const json& cfg, std::string_view type) {
  auto it = cfg.find("layer_types");
  if (it == cfg.end() || !it->is_array()) return false;
  for (const auto& t : *it)
    if (t.is_string() && t.get<std::string>() == type) return true;
  return false;
}

// The context length: the first of kContextKeys set.
Result<std::int64_t> context_length(const json& cfg, const std::string& where) {
  for (const char* key : kContextKeys) {
    auto value = int_field(cfg, key, where, kMaxContextLen);
    if (!value) return std::unexpected(value.error());
    if (*value && **value > 0) return **value;
  }
  return fail(fmt::format(
      "{}: missing max_position_embeddings (the context length; pass --context-len)", where));
}

// The optional sizes feed the weight estimate's products: bounded like the rest.
Result<void> check_optional_sizes(const json& cfg, const std::string& where) {
  for (const char* key :
       {"vocab_size", "intermediate_size", "n_routed_experts", "num_experts", "num_local_experts",
        "n_shared_experts", "moe_intermediate_size", "first_k_dense_replace", "q_lora_rank",
        "qk_nope_head_dim", "v_head_dim"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || !it->is_number_integer()) continue;  // optional_int ignores these
    if (auto ok = int_field(cfg, key, where); !ok) return std::unexpected(ok.error());
  }
  return {};
}

// The sizes the weight estimate reads (the attention's are read with the KV geometry).
void read_shape(const json& cfg, std::int64_t layers, std::int64_t heads, std::int64_t hidden,
                ArchShape& shape) {
  shape.hidden = hidden;
  shape.layers = layers;
  shape.heads = heads;
  shape.vocab = optional_int(cfg, "vocab_size", 0);
  shape.tied_embeddings = optional_bool(cfg, "tie_word_embeddings");
  shape.intermediate = optional_int(cfg, "intermediate_size", 0);
  shape.routed_experts =
      optional_int(cfg, "n_routed_experts",
                   optional_int(cfg, "num_experts", optional_int(cfg, "num_local_experts", 0)));
  shape.shared_experts = optional_int(cfg, "n_shared_experts", 0);
  shape.moe_intermediate = optional_int(cfg, "moe_intermediate_size", 0);
  shape.dense_layers = optional_int(cfg, "first_k_dense_replace", 0);
}

// The attention's KV geometry: MLA when kv_lora_rank is set, else GQA (MHA when
// num_key_value_heads is absent).
Result<void> read_attention(const json& cfg, const std::string& where, std::int64_t heads,
                            std::int64_t hidden, KvGeometry& kv, ArchShape& shape) {
  auto kv_lora = int_field(cfg, "kv_lora_rank", where);
  if (!kv_lora) return std::unexpected(kv_lora.error());
  if (*kv_lora && **kv_lora > 0) {
    auto rope = required_int(cfg, "qk_rope_head_dim", where);
    if (!rope) return std::unexpected(rope.error());
    kv.attention = Attention::mla;
    kv.kv_lora_rank = static_cast<int>(**kv_lora);
    kv.qk_rope_head_dim = static_cast<int>(*rope);
    shape.kv_lora_rank = **kv_lora;
    shape.qk_rope_head_dim = *rope;
    shape.q_lora_rank = optional_int(cfg, "q_lora_rank", 0);
    shape.qk_nope_head_dim = optional_int(cfg, "qk_nope_head_dim", 0);
    shape.v_head_dim = optional_int(cfg, "v_head_dim", 0);
    return {};
  }
  auto kv_heads = int_field(cfg, "num_key_value_heads", where);
  if (!kv_heads) return std::unexpected(kv_heads.error());
  auto head_dim = int_field(cfg, "head_dim", where);
  if (!head_dim) return std::unexpected(head_dim.error());
  kv.attention = Attention::gqa;
  // Absent num_key_value_heads means plain multi-head attention.
  kv.kv_heads = static_cast<int>(*kv_heads && **kv_heads > 0 ? **kv_heads : heads);
  kv.head_dim = static_cast<int>(*head_dim && **head_dim > 0 ? **head_dim : hidden / heads);
  kv.v_head_dim = static_cast<int>(optional_int(cfg, "v_head_dim", kv.head_dim));
  if (kv.head_dim <= 0)
    return fail(
        fmt::format("{}: missing head_dim (hidden_size / num_attention_heads is 0)", where));
  shape.kv_heads = kv.kv_heads;
  shape.head_dim = kv.head_dim;
  return {};
}

// FP8 weights, and the layers counted as full attention (an upper bound).
void read_quantization_and_notes(const json& doc, const json& cfg, HfModel& model) {
  // quantization_config sits at the top level even when text_config is nested.
  const json* quant = nullptr;
  if (auto it = doc.find("quantization_config"); it != doc.end() && it->is_object())
    quant = &*it;
  else if (auto jt = cfg.find("quantization_config"); jt != cfg.end() && jt->is_object())
    quant = &*jt;
  if (quant && optional_string(*quant, "quant_method") == "fp8") model.bytes.linear = 1.0;

  if (optional_bool(cfg, "use_sliding_window") || has_layer_type(cfg, "sliding_attention"))
    model.notes.push_back(
        "sliding-window layers are counted as full attention (bytes per token "
        "is an upper bound)");
  if (has_layer_type(cfg, "linear_attention"))
    model.notes.push_back(
        "linear-attention layers are counted as full attention (bytes per "
        "token is an upper bound)");
}

}  // namespace

Result<HfModel> parse_hf_config(std::string_view text, std::string_view source) {
  auto doc = parse_json(text, source);
  if (!doc) return std::unexpected(doc.error());
  // Multimodal checkpoints (Kimi-K2.5, Llava-style) nest the language model.
  const json& cfg = doc->contains("text_config") && (*doc)["text_config"].is_object()
                        ? (*doc)["text_config"]
                        : *doc;
  const std::string where =
      &cfg == &*doc ? std::string(source) : fmt::format("{} (text_config)", source);

  HfModel model;
  model.spec.name = model_name(*doc, source);

  auto layers = required_int(cfg, "num_hidden_layers", where);
  if (!layers) return std::unexpected(layers.error());
  auto heads = required_int(cfg, "num_attention_heads", where);
  if (!heads) return std::unexpected(heads.error());
  auto hidden = required_int(cfg, "hidden_size", where);
  if (!hidden) return std::unexpected(hidden.error());
  auto context = context_length(cfg, where);
  if (!context) return std::unexpected(context.error());
  if (auto ok = check_optional_sizes(cfg, where); !ok) return std::unexpected(ok.error());

  read_shape(cfg, *layers, *heads, *hidden, model.shape);
  KvGeometry& kv = model.spec.kv;
  kv.layers = static_cast<int>(*layers);
  kv.attention_heads = static_cast<int>(*heads);
  if (auto ok = read_attention(cfg, where, *heads, *hidden, kv, model.shape); !ok)
    return std::unexpected(ok.error());
  model.spec.context_len = *context;
  read_quantization_and_notes(*doc, cfg, model);
  return model;
}

Result<std::uint64_t> parse_safetensors_index(std::string_view text, std::string_view source) {
  auto doc = parse_json(text, source);
  if (!doc) return std::unexpected(doc.error());
  auto meta = doc->find("metadata");
  if (meta == doc->end() || !meta->is_object())
    return fail(fmt::format("{}: missing metadata.total_size", source));
  auto total = meta->find("total_size");
  if (total == meta->end()) return fail(fmt::format("{}: missing metadata.total_size", source));
  // Some exporters write the size as a string.
  // A whole byte count from 1 to kMaxSize: "-5" (stoull would wrap it to 16 EiB),
  // 1e30 and 1e-300 are errors, not 0 B or 16 EiB of weights.
  std::optional<std::uint64_t> value;
  if (total->is_string()) {
    const std::string& text = total->get_ref<const std::string&>();
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc{} && end == text.data() + text.size() && !text.empty()) value = v;
  } else if (total->is_number_unsigned()) {
    value = total->get<std::uint64_t>();
  } else if (total->is_number_integer()) {
    if (total->get<std::int64_t>() > 0) value = static_cast<std::uint64_t>(total->get<std::int64_t>());
  } else if (total->is_number_float()) {
    const double d = total->get<double>();
    if (std::isfinite(d) && d >= 1 && d <= static_cast<double>(kMaxSize) && d == std::floor(d))
      value = static_cast<std::uint64_t>(d);
  }
  if (value && *value > 0 && *value <= kMaxSize) return *value;
  return fail(fmt::format(
      "{}: metadata.total_size must be a whole positive byte count (at most 8 PiB), not {}",
      source, total->dump()));
}

}  // namespace gpureap::capacity
