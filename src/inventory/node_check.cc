#include "inventory/node_check.h"

#include <algorithm>
#include <map>

#include "inventory/events.h"

namespace gpureap::inventory {

// A finding that is a GPU state or an event has its word: one spelling per value.
std::string_view enum_name(Finding f) {
  switch (f) {
    case Finding::orphaned_memory:
      return enum_name(EventKind::orphaned_memory);
    case Finding::driver_held:
      return enum_name(GpuState::driver_held);
    case Finding::ghost:
      return enum_name(GpuState::ghost);
    case Finding::not_measured:
      return enum_name(GpuState::not_measured);
    case Finding::outside_namespace:
      return enum_name(GpuState::outside_namespace);
    case Finding::unattributed:
      return "unattributed";
    case Finding::no_holder:
      return enum_name(GpuState::no_holder);
  }
  return {};
}

std::string_view enum_name(Verdict v) {
  switch (v) {
    case Verdict::clean:
      return "clean";
    case Verdict::problem:
      return "problem";
    case Verdict::unknown:
      return "unknown";
  }
  return {};
}

bool is_problem(Finding f) {
  return f == Finding::orphaned_memory || f == Finding::driver_held || f == Finding::ghost;
}

std::vector<Finding> gpu_findings(const GpuView& view) {
  std::vector<Finding> out;
  // An orphan found through /proc counts also where NVML cannot read the GPU: its
  // evidence is the process, not the memory figure.
  if (std::any_of(view.holders.begin(), view.holders.end(),
                  [](const GpuHolder& gh) { return gh.uses_gpu && gh.holder.orphaned; }))
    out.push_back(Finding::orphaned_memory);
  switch (gpu_state(view)) {
    case GpuState::free:
    case GpuState::held:       // by live or detached processes: a busy node is healthy
    case GpuState::releasing:  // a release in progress is not a leak (yet)
      break;
    case GpuState::driver_held:
      out.push_back(Finding::driver_held);
      break;
    case GpuState::ghost:
      out.push_back(Finding::ghost);
      break;
    case GpuState::not_measured:
      out.push_back(Finding::not_measured);
      break;
    case GpuState::outside_namespace:
      out.push_back(Finding::outside_namespace);
      break;
    case GpuState::unknown:
      out.push_back(Finding::unattributed);
      break;
    case GpuState::no_holder:
      out.push_back(Finding::no_holder);
      break;
  }
  return out;
}

Verdict NodeCheck::verdict() const {
  if (std::any_of(found.begin(), found.end(), [](const auto& f) { return is_problem(f.first); }))
    return Verdict::problem;
  if (source_unusable || !found.empty()) return Verdict::unknown;
  return Verdict::clean;
}

NodeCheck check_node(const Inventory& inv) {
  NodeCheck out;
  // NVML unusable as a whole (a driver reload, a hang): the views are built from the
  // device nodes /proc shows (named by minor), without memory. Their orphans are still
  // evidence (W3-13); "not measured" is said once, as source_unusable.
  const bool source_ok = gpu::lists_gpus(inv.source_state);
  if (!source_ok) out.source_unusable = inv.source_state;
  if (source_ok) out.gpus = inv.gpus.size();
  std::map<Finding, std::vector<gpu::DeviceId>> by_finding;  // in Finding order
  for (const auto& view : inv.gpus) {
    for (Finding f : gpu_findings(view))
      if (source_ok || f == Finding::orphaned_memory) by_finding[f].push_back(view.info.id);
    if (source_ok && gpu_state(view) == GpuState::releasing) out.releasing.push_back(view.info.id);
  }
  gpu::normalize(out.releasing);
  for (auto& [finding, gpus] : by_finding) {
    gpu::normalize(gpus);
    out.found.emplace_back(finding, std::move(gpus));
  }
  return out;
}

}  // namespace gpureap::inventory
