#include "report/summary.h"

#include <fmt/format.h>

#include "gpu/gpu_source.h"

namespace gpureap::report {
namespace {

// A finding's phrase; the GPU list follows it after " GPU ".
std::string_view phrase(inventory::Finding f) {
  switch (f) {
    case inventory::Finding::orphaned_memory:
      return "orphaned memory on";
    case inventory::Finding::driver_held:
      return "driver-held memory on";
    case inventory::Finding::ghost:
      return "ghost";
    case inventory::Finding::not_measured:
      return "NVML cannot read";
    case inventory::Finding::outside_namespace:
      return "holders outside this namespace on";
    case inventory::Finding::unattributed:
      return "unattributed memory on";
    case inventory::Finding::no_holder:
      return "memory no process holds on";
  }
  return "?";
}

// "orphaned memory on GPU 3,5; driver-held memory on GPU 2": the findings that are
// (or are not) problems, in the check's order.
std::string items(const inventory::NodeCheck& check, bool problems) {
  std::string out;
  for (const auto& [finding, gpus] : check.found) {
    if (inventory::is_problem(finding) != problems) continue;
    if (!out.empty()) out += "; ";
    out += fmt::format("{} GPU {}", phrase(finding), gpu::device_list(gpus));
  }
  return out;
}

}  // namespace

std::string summary_line(const inventory::NodeCheck& check) {
  switch (check.verdict()) {
    case inventory::Verdict::clean:
      // A release in progress is no leak (exit 0), but not an idle GPU either.
      if (!check.releasing.empty())
        return fmt::format("clean: {} GPU{}, no leak; memory still releasing on GPU {}",
                           check.gpus, check.gpus == 1 ? "" : "s",
                           gpu::device_list(check.releasing));
      return fmt::format("clean: {} GPU{}, no leak", check.gpus, check.gpus == 1 ? "" : "s");
    case inventory::Verdict::problem: {
      std::string line = "problem: " + items(check, true);
      std::string unknown = items(check, false);
      if (check.source_unusable)  // W3-13: orphans /proc shows, while NVML as a whole is out
        unknown = fmt::format("NVML unusable ({}){}{}", gpu::enum_name(*check.source_unusable),
                              unknown.empty() ? "" : "; ", unknown);
      if (!unknown.empty()) line += "; unknown: " + unknown;
      return line;
    }
    case inventory::Verdict::unknown:
      if (check.source_unusable)
        return fmt::format("unknown: NVML unusable ({})", gpu::enum_name(*check.source_unusable));
      return "unknown: " + items(check, false);
  }
  return "unknown: ?";
}

std::string summary_devices_unreadable() {
  return "unknown: device directory unreadable";
}

std::string summary_unanswered(std::string_view deadline) {
  return fmt::format("unknown: no answer within {}", deadline);
}

}  // namespace gpureap::report
