#include "reclaim/free_flow.h"

#include <algorithm>

namespace gpureap::reclaim {

FreeOutcome free_selection(inventory::Node& node, AuditedControl& control,
                           const inventory::Inventory& inv, const CallerContext& caller,
                           const ReclaimOptions& options, const FreeSteps& steps) {
  const Selection& sel = options.selection;
  FreeOutcome out;
  out.plan = make_plan(inv, sel, caller);
  if (steps.amend) steps.amend(out.plan);

  // "Nothing to do" needs a measurement: without NVML, no holder in /proc does not mean
  // no memory held (driver-held memory, holders in other namespaces); nor does a selected
  // GPU NVML cannot read (its memory could be driver-held).
  for (const auto& v : inv.gpus)
    if (inventory::is_selected(sel.gpus, v.info.id) &&
        inventory::gpu_state(v) == inventory::GpuState::not_measured)
      out.unreadable.push_back(v.info.id);
  if (out.plan.targets.empty() && (!gpu::lists_gpus(inv.source_state) || !out.unreadable.empty())) {
    out.verdict = FreeVerdict::not_measured;
    return out;
  }
  switch (nothing_to_do(inv, sel, out.plan)) {
    case NothingToDo::idle:
      out.verdict = FreeVerdict::nothing_idle;
      return out;
    case NothingToDo::only_unmatched:
      out.verdict = FreeVerdict::nothing_matched;
      return out;
    case NothingToDo::no:
      break;
  }
  if (steps.go_ahead && !steps.go_ahead(out.plan)) {
    out.verdict = FreeVerdict::stopped;
    return out;
  }

  for (const auto& v : inv.gpus) control.trail().know_gpu(v.info.id, v.info.uuid);
  out.report = reclaim(node, control, inv, out.plan, options, steps.progress);
  const ReclaimReport& r = *out.report;
  AuditVerdict audit = AuditVerdict::freed;
  if (r.interrupted) {
    out.verdict = FreeVerdict::interrupted;
    audit = AuditVerdict::interrupted;
  } else if (r.all_freed()) {
    out.verdict = FreeVerdict::freed;
  } else {
    // Not freed only because NVML cannot read those GPUs: not measured, not "still held".
    const bool unmeasured_only =
        !r.gpus.empty() && std::all_of(r.gpus.begin(), r.gpus.end(), [](const GpuRelease& g) {
          return g.freed || !g.measured;
        });
    out.verdict = unmeasured_only ? FreeVerdict::unmeasured : FreeVerdict::still_held;
    audit = unmeasured_only ? AuditVerdict::unmeasured : AuditVerdict::still_held;
  }
  control.trail().verdict(audit, r.gpus, r.seconds);
  return out;
}

}  // namespace gpureap::reclaim
