#pragma once
// Which GPU gpureap means. A DeviceId names a whole GPU by its NVML index, or one
// MIG device of it by the GPU instance and compute instance ids as well (issue 25):
// on a GPU in MIG mode every MIG device is a GPU to gpureap. Library code
// passes DeviceIds, never a bare index: the index is the NVML handle's number and
// is read only where NVML is called (gpu/nvml_library.cc) and where a format spells
// it (report/, the wires).

#include <fmt/format.h>

#include <compare>
#include <optional>
#include <string>
#include <vector>

namespace gpureap::gpu {

struct DeviceId {
  unsigned index = 0;  // NVML index of the (physical) GPU
  /// A MIG device of that GPU: its GPU instance and compute instance ids (both set).
  std::optional<unsigned> gi{}, ci{};

  bool mig() const { return gi.has_value(); }
  /// The physical GPU this device is (or is part of).
  DeviceId parent() const { return DeviceId{index, std::nullopt, std::nullopt}; }
  friend constexpr auto operator<=>(const DeviceId&, const DeviceId&) = default;
};

/// "3", or "3/gi1/ci0" for a MIG device: what a user types after --gpu to name this
/// device, and what every output prints after "GPU ".
std::string device_text(DeviceId id);

/// Device ids as a selector: "0,3,7" ("" for none). The one way every output writes
/// a list of GPUs, so what gpureap prints can be pasted after --gpu.
std::string device_list(const std::vector<DeviceId>& ids);

/// Sorts and removes duplicates.
void normalize(std::vector<DeviceId>& ids);

/// True when `id` is among `ids` (any order).
bool contains(const std::vector<DeviceId>& ids, DeviceId id);

}  // namespace gpureap::gpu

/// `fmt::format("GPU {}", id)` prints device_text(id).
template <>
struct fmt::formatter<gpureap::gpu::DeviceId> : fmt::formatter<std::string> {
  template <typename Context>
  auto format(gpureap::gpu::DeviceId id, Context& ctx) const {
    return fmt::formatter<std::string>::format(gpureap::gpu::device_text(id), ctx);
  }
};
