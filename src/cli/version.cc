// `gpureap --version`: what this binary is (version, commit, build) and, when NVML
// answers, which driver it talks to (report/version_text). The version and commit come
// from a header that packaging/version.cmake writes at build time.

#include <fmt/format.h>

#include <chrono>

#include "cli/command.h"
#include "cli/environment.h"
#include "gpureap_version.h"
#include "report/version_text.h"

#ifndef GPUREAP_BUILD_TYPE
#define GPUREAP_BUILD_TYPE "unknown"
#endif

namespace gpureap::cli {

std::string version_string() {
  return fmt::format("{} (commit {})", GPUREAP_VERSION, GPUREAP_COMMIT);
}

std::string commit_date() {
  return GPUREAP_COMMIT_DATE;
}

std::string version_text(const GlobalOptions& global, std::string_view linkage) {
  // The driver as NVML reports it, through the same source every command uses (a
  // watchdog child, so a hung driver costs the deadline, not a hang).
  gpu::GpuSnapshot snap = open_gpu_source(global)->snapshot(std::chrono::milliseconds(2000));
  return report::version_text(version_string(), fmt::format("{}, {}", GPUREAP_BUILD_TYPE, linkage),
                              snap);
}

}  // namespace gpureap::cli
