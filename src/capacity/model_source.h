#pragma once
// Where `--model` and `--weights` point: a preset name, a Hugging Face
// config.json (or the directory holding it), and the checkpoint's weight bytes
// from --weights, the model.safetensors.index.json beside config.json, or the
// preset's inventory. Reads the files it is pointed at; every error names the
// flag and the path.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/model_spec.h"
#include "capacity/weight_estimate.h"
#include "util/result.h"

namespace gpureap::capacity {

struct ResolvedModel {
  ModelSpec spec;
  ArchShape shape;  // prices the replicated share of a stated total
  BytesPerParam bytes;
  std::vector<std::string> notes;  // approximations made for this model
  std::string config_path;         // empty for a preset
};

/// The largest config.json or safetensors index read: 64 MiB. A config is a few
/// KB; the largest index we know (DeepSeek-V3's, ~92k tensors) is under 10 MB.
/// A larger file is refused before any of it is read.
inline constexpr std::uint64_t kMaxModelFileBytes = 64ULL << 20;

/// The whole of a regular file of at most `max_bytes`; fails with
/// "<flag> <path>: no such file", "...: not a regular file", "...: N bytes,
/// more than the ... read from a model file" or "...: cannot read the file".
/// An open regular file: the caller owns `fd`; `size` as fstat saw it.
struct OpenFile {
  int fd = -1;
  std::uint64_t size = 0;
};

/// Opens `path` for reading (O_CLOEXEC) and checks it is a regular file. Failures
/// start "<flag> <path>: " (no such file, cannot open, not a regular file).
Result<OpenFile> open_regular_file(const std::string& path, std::string_view flag);

Result<std::string> read_text_file(const std::string& path, std::string_view flag,
                                   std::uint64_t max_bytes = kMaxModelFileBytes);

/// --model: a preset name (matched as find_preset does), else a path to a
/// config.json or to a directory holding one. A name that is neither fails
/// listing the presets. Weights are set for presets only.
Result<ResolvedModel> resolve_model(const std::string& arg);

/// Fills model.spec.weights: `weights_arg` (a size with a unit, the checkpoint's
/// total, or a path to a safetensors index) when given, else the index beside
/// config.json, else the preset's inventory. A stated total is split with
/// split_total. Fails when `required` and nothing gives the bytes.
Result<void> resolve_weights(ResolvedModel& model, const std::string& model_arg,
                             const std::string& weights_arg, bool required);

}  // namespace gpureap::capacity
