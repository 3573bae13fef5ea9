#pragma once
// `gpureap --version`'s text: what this binary is and which driver it talks to.

#include <string>
#include <string_view>

#include "gpu/gpu_source.h"

namespace gpureap::report {

/// "gpureap VERSION\nbuild: BUILD\ndriver: DRIVER\n": the driver's version as `snap`
/// reports it ("580.65 (NVML)"), else "unknown (not reported)" when GPUs are listed, else
/// "unknown (why)" (the source's problem, escaped).
std::string version_text(std::string_view version, std::string_view build,
                         const gpu::GpuSnapshot& snap);

}  // namespace gpureap::report
