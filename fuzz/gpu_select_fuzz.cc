// --gpu selectors against a node of eight GPUs with real-looking ids.

#include <fmt/format.h>

#include <vector>

#include "fuzz/fuzz_input.h"
#include "gpu/gpu_select.h"
#include "gpu/test_devices.h"

namespace {

const std::vector<gpureap::gpu::GpuInfo>& node() {
  static const std::vector<gpureap::gpu::GpuInfo> gpus = [] {
    std::vector<gpureap::gpu::GpuInfo> out;
    for (unsigned i = 0; i < 8; ++i) {
      gpureap::gpu::GpuInfo g;
      g.id = gpureap::gpu::DeviceId{i};
      g.name = "NVIDIA H200";
      // Two share a long UUID prefix, so ambiguous prefixes are reachable.
      g.uuid = fmt::format("GPU-41b2d0{}{}-5c1e-8f0a-2b6d-9e7c3a1f4d{:02x}", i < 2 ? 3 : i, i % 2,
                           i);
      g.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + 0x10 * i);
      if (i != 5) g.minor = i;  // one GPU without a known minor
      out.push_back(g);
    }
    return out;
  }();
  return gpus;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  if (auto picked = gpu::select_gpus(fuzz::as_text(data, size), node())) {
    for (std::size_t i = 0; i < picked->size(); ++i) {
      fuzz::check((*picked)[i].index < node().size());
      fuzz::check(i == 0 || (*picked)[i - 1] < (*picked)[i]);  // sorted, no duplicates
    }
  }
  (void)gpu::select_gpus(fuzz::as_text(data, size), {});
  return 0;
}
