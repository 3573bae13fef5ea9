#include "gpu/nvml_process_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>

namespace gpureap::gpu {
namespace {

// Offsets shared by every layout: pid at 0, usedGpuMemory at 8 (after padding).
constexpr std::size_t kPidOffset = 0;
constexpr std::size_t kUsedOffset = 8;

// One past the last byte the driver changed; 0 when it wrote nothing.
std::size_t written_extent(std::span<const std::byte> buffer) {
  auto last = std::find_if(buffer.rbegin(), buffer.rend(),
                           [](std::byte b) { return b != kProcessBufferFill; });
  return static_cast<std::size_t>(buffer.rend() - last);
}

// The last field of every layout (usedGpuMemory for 16, computeInstanceId for
// 24, usedGpuCcProtectedMemory for 32) has a high byte of 0x00 or 0xFF in any
// real value, so a correct write ends exactly at count * stride.
bool stride_fits(std::size_t stride, std::size_t extent, unsigned count, std::size_t buffer_size) {
  return count * stride <= buffer_size && extent == count * stride;
}

}  // namespace

Result<std::vector<GpuProcess>> decode_process_buffer(std::span<const std::byte> buffer,
                                                      unsigned count, std::size_t declared_stride,
                                                      ProcessKind kind) {
  if (count == 0) return std::vector<GpuProcess>{};
  const std::size_t extent = written_extent(buffer);
  const std::array<std::size_t, 4> candidates{declared_stride, 24, 32, 16};
  std::size_t stride = 0;
  for (std::size_t s : candidates) {
    if (stride_fits(s, extent, count, buffer.size())) {
      stride = s;
      break;
    }
  }
  if (stride == 0) {
    return fail(fmt::format(
        "implausible process list: {} entries but the driver wrote {} bytes (expected {} for "
        "{}-byte entries)",
        count, extent, std::size_t{count} * declared_stride, declared_stride));
  }

  std::vector<GpuProcess> processes;
  processes.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    const std::byte* entry = buffer.data() + std::size_t{i} * stride;
    std::uint32_t pid = 0;
    unsigned long long used = 0;
    std::memcpy(&pid, entry + kPidOffset, sizeof pid);
    std::memcpy(&used, entry + kUsedOffset, sizeof used);
    if (pid == 0 || pid > kMaxPlausiblePid) {
      return fail(fmt::format("implausible process list: entry {} has pid {} ({}-byte entries)", i,
                              pid, stride));
    }
    processes.push_back(GpuProcess{pid, nvml_bytes(used), kind});
  }
  return processes;
}

std::vector<GpuProcess> merge_processes(const std::vector<GpuProcess>& processes) {
  std::vector<GpuProcess> merged;
  std::unordered_map<std::uint32_t, std::size_t> position;
  for (const GpuProcess& p : processes) {
    auto [it, inserted] = position.try_emplace(p.pid, merged.size());
    if (inserted) {
      merged.push_back(p);
    } else if (!merged[it->second].used_bytes) {
      merged[it->second].used_bytes = p.used_bytes;
    }
  }
  return merged;
}

}  // namespace gpureap::gpu
