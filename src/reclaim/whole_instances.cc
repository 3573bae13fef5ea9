#include "reclaim/whole_instances.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace gpureap::reclaim {
namespace {

bool any_member_targeted(const Plan& plan, const inventory::Instance& in) {
  return std::any_of(in.members.begin(), in.members.end(),
                     [&](const inventory::InstanceMember& m) { return plan.contains(m.id); });
}

const proc::ProcessEntry* entry_of(const CallerContext& ctx, pid_t pid) {
  for (const auto& e : ctx.table)
    if (e.id.pid == pid) return &e;
  return nullptr;
}

// May `e` join the plan as a process that holds no GPU? One verdict per process, never
// a protected one, never another user's without root.
bool may_add(const Plan& plan, const proc::ProcessEntry& e, const CallerContext& ctx) {
  if (e.kernel_thread || e.state == 'Z' || plan.contains(e.id) || plan.left_alone(e.id))
    return false;
  if (protection_reason(e.id.pid, e.comm, false, ctx, false)) return false;
  return ctx.euid == 0 || e.uid == ctx.euid;
}

}  // namespace

std::size_t add_live_launchers(Plan& plan, const inventory::Inventory& inv,
                               const CallerContext& ctx) {
  std::set<pid_t> gpu_holders;
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) gpu_holders.insert(gh.holder.id.pid);
  std::size_t added = 0;
  for (const auto& in : plan.instances) {
    if (!in.launcher_alive || in.launcher_pid <= 0 || !any_member_targeted(plan, in)) continue;
    const proc::ProcessEntry* launcher = entry_of(ctx, in.launcher_pid);
    if (!launcher || gpu_holders.contains(launcher->id.pid) || !may_add(plan, *launcher, ctx))
      continue;
    plan.targets.push_back(Target{launcher->id, launcher->comm,
                                  proc::read_cmdline(launcher->id.pid, ctx.proc_root),
                                  proc::user_name(launcher->uid), {}, 0,
                                  fmt::format("launcher of instance {}, whose workers this plan "
                                              "stops: never left running without them",
                                              in.key)});
    plan.targets.back().instance = in.key;
    ++added;
    // Its descendants that hold no GPU (a GPU holder among them is a member, or was
    // left alone: one verdict each), breadth first over the table.
    std::set<pid_t> tree{launcher->id.pid};
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& e : ctx.table) {
        if (tree.contains(e.id.pid) || !tree.contains(e.ppid)) continue;
        tree.insert(e.id.pid);
        grew = true;
        if (gpu_holders.contains(e.id.pid) || !may_add(plan, e, ctx)) continue;
        plan.targets.push_back(Target{e.id, e.comm, proc::read_cmdline(e.id.pid, ctx.proc_root),
                                      proc::user_name(e.uid), {}, 0,
                                      fmt::format("descendant of {} ({}), the launcher of "
                                                  "instance {}",
                                                  launcher->id.pid, launcher->comm, in.key)});
        plan.targets.back().instance = in.key;
        ++added;
      }
    }
  }
  return added;
}

std::vector<PartialInstance> partial_instances(const Plan& plan) {
  std::vector<PartialInstance> out;
  for (const auto& in : plan.instances) {
    if (!any_member_targeted(plan, in)) continue;
    for (const auto& m : in.members) {
      if (plan.contains(m.id)) continue;
      const Skipped* s = plan.left_alone(m.id);
      out.push_back({in.key, s ? fmt::format("pid {} ({}) is not in the plan: {}", m.id.pid,
                                             s->comm, s->reason)
                               : fmt::format("pid {} is not in the plan: it uses no selected GPU",
                                             m.id.pid)});
      break;
    }
    if (!out.empty() && out.back().key == in.key) continue;
    if (in.launcher_alive && in.launcher_pid > 0 &&
        std::none_of(plan.targets.begin(), plan.targets.end(),
                     [&](const Target& t) { return t.id.pid == in.launcher_pid; }))
      out.push_back({in.key, fmt::format("its launcher pid {} ({}) lives and is not in the plan "
                                         "(protected, or another user's)",
                                         in.launcher_pid, in.launcher_comm)});
  }
  return out;
}

}  // namespace gpureap::reclaim
