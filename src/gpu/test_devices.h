#pragma once
// Tests name GPUs by their index: gpu::dev(3), gpu::devs({0, 3}); and gtest prints a
// DeviceId as gpureap does ("3").

#include <initializer_list>
#include <ostream>
#include <vector>

#include "gpu/device_id.h"

namespace gpureap::gpu {

inline constexpr DeviceId dev(unsigned index) { return DeviceId{index}; }

inline std::vector<DeviceId> devs(std::initializer_list<unsigned> indices) {
  std::vector<DeviceId> out;
  for (unsigned i : indices) out.push_back(DeviceId{i});
  return out;
}

inline void PrintTo(const DeviceId& id, std::ostream* os) { *os << device_text(id); }

}  // namespace gpureap::gpu
