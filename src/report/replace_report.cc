#include "report/replace_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "proc/lineage.h"
#include "report/instance_text.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

std::string server_word(const inventory::Instance& in) {
  if (in.engine == proc::Engine::none || in.engine == proc::Engine::python) return "instance";
  return std::string(proc::enum_name(in.engine)) + " server";
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

const proc::Holder* holder_of(const inventory::Inventory& inv, const proc::ProcessId& id) {
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders)
      if (gh.holder.id == id) return &gh.holder;
  return nullptr;
}

}  // namespace

std::string freed_line(const reclaim::Plan& plan, const reclaim::ReclaimReport& report) {
  std::string out;
  std::size_t alone = 0;
  for (const auto& t : plan.targets) alone += t.instance.empty() ? 1 : 0;
  for (const auto& in : plan.instances)
    out += fmt::format("{}{} {} ({}, {} on GPU {})", out.empty() ? "" : "; ", server_word(in),
                       terminal_text(in.key), plural(in.members.size(), "process", "processes"),
                       format_bytes(in.bytes), gpu::device_list(in.gpus));
  if (alone > 0)
    out += fmt::format("{}{}", out.empty() ? "" : "; and ",
                       plural(alone, "process of no instance", "processes of no instance"));
  if (out.empty()) out = "nothing";
  return fmt::format("freed {} in {:.2f} s", out, report.seconds);
}

std::string verified_line(const reclaim::ReclaimReport& report, const std::vector<unsigned>& ports) {
  std::vector<gpu::DeviceId> ids;
  for (const auto& g : report.gpus) ids.push_back(g.gpu);
  std::string out = fmt::format("verified: GPU {} back at baseline", gpu::device_list(ids));
  if (!ports.empty()) {
    std::string list;
    for (unsigned p : ports) list += (list.empty() ? "" : ",") + std::to_string(p);
    out += fmt::format("; port {} closed", list);
  }
  return out;
}

std::string launched_line(const std::string& command, pid_t pid, const std::string& run_id) {
  return fmt::format("launched {} as pid {}, run {}", terminal_text(command, 40), pid,
                     terminal_text(run_id));
}

std::string open_port_text(const supervise::OpenPort& port) {
  if (port.pid == 0)
    return fmt::format("port {} is still listened on (by no process this /proc shows)", port.port);
  return fmt::format("port {} is still listened on by pid {} ({})", port.port, port.pid,
                     terminal_text(port.comm, 20));
}

std::string replace_plan_text(const reclaim::Plan& plan, const inventory::Inventory& inv) {
  std::string out;
  for (const auto& in : plan.instances) {
    out += "  " + instance_heading(in) + "\n";
    // The evidence, once per instance: the distinct orphan reasons of its members.
    std::set<std::string> reasons;
    for (const auto& v : inv.gpus)
      for (const auto& gh : v.holders)
        if (gh.holder.instance == in.key && gh.holder.orphaned)
          reasons.insert(gh.holder.orphan_reason);
    for (const auto& r : reasons) out += "    orphaned: " + terminal_text(r) + "\n";
    std::size_t others = 0;
    for (const auto& t : plan.targets) {
      if (t.instance != in.key) continue;
      const bool member =
          std::any_of(in.members.begin(), in.members.end(),
                      [&](const inventory::InstanceMember& m) { return m.id == t.id; });
      if (!member) ++others;
    }
    if (others > 0)
      out += fmt::format("    and {} of its processes that hold no GPU (launcher, helpers)\n",
                         others);
  }
  for (const auto& t : plan.targets)
    if (t.instance.empty())
      out += fmt::format("  pid {} ({}): {}\n", t.id.pid, terminal_text(t.comm, 20),
                         terminal_text(t.why));
  for (const auto& s : plan.skipped)
    out += fmt::format("  left alone: pid {} ({}): {}\n", s.id.pid, terminal_text(s.comm, 20),
                       terminal_text(s.reason));
  return out;
}

std::string needs_confirmation(const reclaim::Plan& plan, const inventory::Inventory& inv,
                               supervise::ReplaceMode mode) {
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) {
      if (!gh.uses_gpu) continue;
      const proc::Holder& h = gh.holder;
      if (plan.contains(h.id) && !proc::unattended_may_act(h))
        return fmt::format("pid {} ({}) is {}", h.id.pid, terminal_text(h.comm, 20),
                           h.orphaned ? "orphaned only by inference: " + h.orphan_reason
                                      : "not orphaned (its server may be alive)");
    }
  // A launcher that lives while every GPU member is orphaned with strong evidence is
  // the server of a run whose gpureap is gone (owned): part of the leak, not live.
  for (const auto& in : plan.instances)
    if (in.launcher_alive && in.orphaned < in.members.size())
      return fmt::format("instance {} is live: its launcher pid {} runs", terminal_text(in.key),
                         in.launcher_pid);
  for (const auto& s : plan.skipped) {
    if (s.kind != reclaim::SkipKind::not_matched || s.gpu_bytes == 0) continue;
    const proc::Holder* h = holder_of(inv, s.id);
    if (mode == supervise::ReplaceMode::replace_orphans && !(h && h->orphaned)) continue;  // not asked to free it
    if (h && h->orphaned)
      return fmt::format("pid {} ({}) holds {} and is orphaned only by inference: {}", s.id.pid,
                         terminal_text(s.comm, 20), format_bytes(s.gpu_bytes),
                         terminal_text(h->orphan_reason));
    return fmt::format("pid {} ({}) holds {} and is not orphaned{}", s.id.pid,
                       terminal_text(s.comm, 20), format_bytes(s.gpu_bytes),
                       h && !h->instance.empty()
                           ? fmt::format(" (instance {})", terminal_text(h->instance))
                           : std::string());
  }
  return "";
}


}  // namespace gpureap::report
