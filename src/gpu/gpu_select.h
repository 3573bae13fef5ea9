#pragma once
// GPU selectors, as users type them after --gpu.

#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"
#include "util/result.h"

namespace gpureap::gpu {

/// Resolves a comma-separated list of selectors against the GPUs NVML sees and
/// returns the selected GPU indices, sorted and without duplicates. Each item
/// (surrounding spaces ignored) is one of:
///   all                                 every GPU
///   3                                   an NVML index
///   GPU-7282...                         a UUID, or a unique prefix with at least
///                                       4 characters after "GPU-" (any case)
///   00000000:18:00.0, 0000:18:00.0,     a PCI bus id with an 8- or 4-digit
///   18:00.0                             domain or none (domain 0), any case
///   minor:5, /dev/nvidia5               a device minor number
/// Fails, quoting the item, on an empty or malformed item, an index out of
/// range, an ambiguous UUID prefix (naming the candidates) or an item that
/// matches no GPU (listing the GPUs there are).
Result<std::vector<unsigned>> select_gpus(std::string_view spec, const std::vector<GpuInfo>& gpus);

/// GPU indices as a selector: "0,3,7" ("" for none). The one way every output
/// writes a list of GPUs, so what gpureap prints can be pasted after --gpu.
std::string index_list(const std::vector<unsigned>& indices);

}  // namespace gpureap::gpu
