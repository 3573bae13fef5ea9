#include "reclaim/fresh_look.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "gpu/gpu_select.h"
#include "proc/process_table.h"

namespace gpureap::reclaim {
namespace {

const Target* find_target(const Plan& plan, const proc::ProcessId& id) {
  auto t = std::find_if(plan.targets.begin(), plan.targets.end(),
                        [&](const Target& x) { return x.id == id; });
  return t == plan.targets.end() ? nullptr : &*t;
}

// The nearest ancestor of `id` in `table` that is one of `among`, or nullopt. The walk
// is bounded by the table's size (a table read while processes re-parent can hold a
// cycle for an instant).
std::optional<proc::ProcessId> ancestor_among(const std::vector<proc::ProcessEntry>& table,
                                              const proc::ProcessId& id,
                                              const std::set<proc::ProcessId>& among) {
  const proc::ProcessEntry* e = proc::find_process(table, id);
  for (std::size_t steps = 0; e && e->ppid > 1 && steps < table.size(); ++steps) {
    e = proc::find_process(table, e->ppid);
    if (e && among.contains(e->id)) return e->id;
  }
  return std::nullopt;
}

// Why a target that used a GPU is not one in the fresh plan.
std::string holder_refusal(const Target& t, const Plan& fresh_plan) {
  auto s = std::find_if(fresh_plan.skipped.begin(), fresh_plan.skipped.end(),
                        [&](const Skipped& x) { return x.id == t.id; });
  if (s != fresh_plan.skipped.end())
    return fmt::format("no longer matches the selection (read just before the signal): {}",
                       s->reason);
  const Target* now = find_target(fresh_plan, t.id);
  if (now)  // still a target, but only as some holder's descendant: it uses no GPU now
    return fmt::format("no longer holds GPU {} (read just before the signal; now {})",
                       gpu::device_list(t.gpus), now->why);
  return fmt::format("no longer holds GPU {} (read just before the signal)",
                     gpu::device_list(t.gpus));
}

}  // namespace

Confirmation confirm_targets(const Plan& plan, const std::vector<proc::ProcessEntry>& planned_table,
                             const inventory::Inventory& fresh, const Selection& selection,
                             const CallerContext& now) {
  const Plan fresh_plan = make_plan(fresh, selection, now);
  auto gone = [&](const Target& t) { return proc::find_process(now.table, t.id) == nullptr; };

  std::set<proc::ProcessId> planned_holders, confirmed_holders;
  for (const auto& t : plan.targets)
    if (!t.gpus.empty()) planned_holders.insert(t.id);

  Confirmation out;
  out.plan.skipped = plan.skipped;
  std::vector<bool> keep(plan.targets.size(), false);
  // Holders first: a descendant is confirmed by a confirmed holder.
  for (std::size_t i = 0; i < plan.targets.size(); ++i) {
    const Target& t = plan.targets[i];
    if (t.gpus.empty()) continue;
    const Target* again = find_target(fresh_plan, t.id);
    if (gone(t) || (again && !again->gpus.empty())) {
      keep[i] = true;
      if (!gone(t)) confirmed_holders.insert(t.id);
      continue;
    }
    out.refused.push_back({t, holder_refusal(t, fresh_plan)});
  }
  for (std::size_t i = 0; i < plan.targets.size(); ++i) {
    const Target& t = plan.targets[i];
    if (!t.gpus.empty()) continue;
    auto planned_from = ancestor_among(planned_table, t.id, planned_holders);
    if (!planned_from || gone(t) || find_target(fresh_plan, t.id) ||
        ancestor_among(now.table, t.id, confirmed_holders)) {
      keep[i] = true;
      continue;
    }
    const Target* holder = find_target(plan, *planned_from);
    out.refused.push_back(
        {t, fmt::format("no longer a descendant of a process being freed (it was planned as "
                        "one of pid {} ({}); read just before the signal)",
                        planned_from->pid, holder ? holder->comm : "?")});
  }
  for (std::size_t i = 0; i < plan.targets.size(); ++i)
    if (keep[i]) out.plan.targets.push_back(plan.targets[i]);
  return out;
}

Action not_signalled_action(const Unconfirmed& u, double at) {
  return Action{u.target.id, u.target.comm, Signal::none,           "",
                at,          std::nullopt,  Outcome::not_signalled, u.reason,
                std::nullopt};
}

}  // namespace gpureap::reclaim
