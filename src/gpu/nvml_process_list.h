#pragma once
// Decoding NVML's process lists: pure functions over the bytes a driver wrote,
// so the layout traps (anchors.md b.4) are tested without a driver.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/gpu_info.h"
#include "util/result.h"

namespace gpureap::gpu {

/// Byte value a process-list buffer is filled with before the call, so that the
/// extent the driver wrote can be measured afterwards.
inline constexpr std::byte kProcessBufferFill{0xAA};

/// The largest pid Linux can hand out (PID_MAX_LIMIT on 64-bit kernels).
inline constexpr std::uint32_t kMaxPlausiblePid = 4'194'304;

/// Decodes `count` entries of a legacy *RunningProcesses buffer (pre-filled
/// with kProcessBufferFill). The stride the driver really used is measured
/// from the written extent: `declared_stride` (24 for _v3/_v2, 16 for the
/// unsuffixed call) is tried first, then 24, 32 (the R535.43 layout) and 16,
/// because some drivers wrote a layout other than the one their symbol names
/// (nvitop#75, nvitop PR #226). Fails, naming the extent, when no stride fits
/// or a decoded pid is implausible (0 or above PID_MAX_LIMIT).
Result<std::vector<GpuProcess>> decode_process_buffer(std::span<const std::byte> buffer,
                                                      unsigned count, std::size_t declared_stride,
                                                      ProcessKind kind);

/// Merges the compute, graphics and MPS lists of one GPU: one entry per pid,
/// in first-seen order, keeping the first kind seen and the first known size.
std::vector<GpuProcess> merge_processes(const std::vector<GpuProcess>& processes);

/// NVML's "value not available" (~0ULL) as nullopt.
inline std::optional<std::uint64_t> nvml_bytes(unsigned long long value) {
  if (value == ~0ULL) return std::nullopt;
  return value;
}

}  // namespace gpureap::gpu
