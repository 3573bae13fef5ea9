#include "report/version_text.h"

#include <fmt/format.h>

#include "report/terminal_text.h"

namespace gpureap::report {

std::string version_text(std::string_view version, std::string_view build,
                         const gpu::GpuSnapshot& snap) {
  std::string driver;
  if (!snap.driver_version.empty())
    driver = snap.driver_version + " (NVML)";
  else if (gpu::lists_gpus(snap.state))
    driver = "unknown (not reported)";
  else
    driver = fmt::format("unknown ({})", snap.problem.empty() ? std::string("NVML unusable")
                                                           : terminal_text(snap.problem));
  return fmt::format("gpureap {}\nbuild: {}\ndriver: {}\n", version, build, driver);
}

}  // namespace gpureap::report
