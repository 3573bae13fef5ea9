#include "report/replace_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "inventory/instances.h"
#include "report/device_json.h"
#include "proc/engine_role.h"
#include "proc/lineage.h"
#include "proc/proc_parse.h"
#include "proc/run_id.h"
#include "report/free_report.h"
#include "report/instance_text.h"
#include "report/status_table.h"
#include "report/terminal_text.h"
#include "util/plural.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

std::string server_word(const inventory::Instance& in) {
  if (in.engine == proc::Engine::none || in.engine == proc::Engine::python) return "instance";
  return std::string(proc::enum_name(in.engine)) + " server";
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
                       terminal_text(in.key), count_of(in.members.size(), "process", "processes"),
                       format_bytes(in.bytes), gpu::device_list(in.gpus));
  if (alone > 0)
    out += fmt::format("{}{}", out.empty() ? "" : "; and ",
                       count_of(alone, "process of no instance", "processes of no instance"));
  if (out.empty()) out = "nothing";
  return fmt::format("freed {} in {:.2f} s", out, report.seconds);
}

std::vector<gpu::DeviceId> freed_gpus(const reclaim::Plan& plan,
                                      const reclaim::ReclaimReport& report) {
  std::vector<gpu::DeviceId> ids;
  for (const auto& g : report.gpus)
    if (g.freed && std::any_of(plan.targets.begin(), plan.targets.end(), [&](const auto& t) {
          return std::find(t.gpus.begin(), t.gpus.end(), g.gpu) != t.gpus.end();
        }))
      ids.push_back(g.gpu);
  return ids;
}

std::string verified_line(const reclaim::Plan& plan, const reclaim::ReclaimReport& report,
                          const std::vector<unsigned>& ports) {
  // Only the GPUs it freed: one whose holders it left alone is not "back at baseline"
  // because the free's threshold counts their bytes (W5 #2: a live server on GPUs 4-7).
  std::string out =
      fmt::format("verified: GPU {} back at baseline", gpu::device_list(freed_gpus(plan, report)));
  if (!ports.empty()) {
    std::string list;
    for (unsigned p : ports) list += (list.empty() ? "" : ",") + std::to_string(p);
    out += fmt::format("; port {} closed", list);
  }
  return out;
}

std::vector<LeftAlone> left_alone(const reclaim::Plan& plan, const inventory::Inventory& inv) {
  std::vector<LeftAlone> out;
  for (const auto& s : plan.skipped) {
    if (s.gpu_bytes == 0) continue;  // a client, a monitor: it keeps no memory from CMD
    const proc::Holder* h = holder_of(inv, s.id);
    const std::string key = h ? h->instance : std::string();
    auto same = std::find_if(out.begin(), out.end(), [&](const LeftAlone& a) {
      return !key.empty() && a.instance == key;
    });
    if (same == out.end()) {
      LeftAlone a;
      a.instance = key;
      a.reason = s.reason;
      a.user = h ? h->user : std::string();
      out.push_back(std::move(a));
      same = std::prev(out.end());
    }
    same->pids.push_back(s.id.pid);
    if (same->comm.empty()) same->comm = s.comm;
    same->bytes += s.gpu_bytes;
    for (gpu::DeviceId g : s.gpus)
      if (std::find(same->gpus.begin(), same->gpus.end(), g) == same->gpus.end())
        same->gpus.push_back(g);
  }
  for (auto& a : out) std::sort(a.gpus.begin(), a.gpus.end());
  return out;
}

std::string left_alone_line(const LeftAlone& a, const inventory::Inventory& inv) {
  const auto* in = a.instance.empty() ? nullptr : inventory::find_instance(inv.instances, a.instance);
  const std::string who =
      in ? fmt::format("{} {} ({})", server_word(*in), terminal_text(a.instance),
                       count_of(a.pids.size(), "process", "processes"))
         : fmt::format("pid {} ({})", a.pids.front(), terminal_text(a.comm, 20));
  return fmt::format("left alone: {} of {}, {} on GPU {}: {}", who,
                     a.user.empty() ? "?" : terminal_text(a.user, 20), format_bytes(a.bytes),
                     gpu::device_list(a.gpus), terminal_text(a.reason));
}

std::string launched_line(const std::vector<std::string>& argv, pid_t pid,
                          const std::string& run_id) {
  std::string raw;
  for (const auto& a : argv) raw += a + '\0';
  // What the command line says it starts, as status names the instance (issue 53 #8):
  // an engine's server with its model and port; else the command line, not only argv[0].
  const proc::EngineIdentity who =
      proc::recognise_engine_cmdline(raw, argv.empty() ? "" : proc::default_run_name(argv[0]));
  std::string what = terminal_text(proc::format_cmdline(raw), 40);
  if (who.role == proc::EngineRole::launcher && who.engine != proc::Engine::none &&
      who.engine != proc::Engine::python) {
    what = std::string(proc::enum_name(who.engine)) + " server";
    if (who.model) what += ", model " + terminal_text(*who.model, 60);
    if (who.port) what += fmt::format(", port {}", *who.port);
    what += ",";
  }
  return fmt::format("launched {} as pid {}, run {}", what, pid, terminal_text(run_id));
}

std::string open_port_text(const supervise::OpenPort& port) {
  if (port.pid == 0)
    return fmt::format("port {} is still listened on (by no process this /proc shows)", port.port);
  return fmt::format("port {} is still listened on by pid {} ({})", port.port, port.pid,
                     terminal_text(port.comm, 20));
}

std::string replace_question(const reclaim::Plan& plan, std::string_view command) {
  const std::size_t n = plan.targets.size();
  const std::string processes = count_of(n, "process", "processes");
  std::size_t live = 0, orphaned = 0;
  for (const auto& in : plan.instances) {
    if (!live_instance_note(in).empty())
      ++live;
    else
      ++orphaned;
  }
  const std::string cmd = terminal_text(command, 40);
  if (plan.instances.size() == 1) {
    const auto& in = plan.instances.front();
    const bool is_live = live == 1;
    return fmt::format("{} {} server {} ({}{}) and launch {}?", is_live ? "Stop" : "Free",
                       proc::enum_name(in.engine) == std::string_view("none")
                           ? std::string("the")
                           : std::string(proc::enum_name(in.engine)),
                       terminal_text(in.key), is_live ? "" : "orphaned, ", processes, cmd);
  }
  if (live > 0)
    return fmt::format("Stop {}{} ({}), then launch {}?",
                       count_of(live, "live server"),
                       orphaned ? " and free " + count_of(orphaned, "orphaned one")
                                : std::string(),
                       processes, cmd);
  return fmt::format("Free {} ({}) and launch {}?",
                     orphaned ? count_of(orphaned, "orphaned instance") : std::string("them"),
                     processes, cmd);
}

std::string replace_plan_text(const reclaim::Plan& plan, const inventory::Inventory& inv) {
  std::string out;
  for (const auto& in : plan.instances) {
    out += "  " + instance_heading(in) + "\n";
    // The evidence, once per instance, in status's words: the distinct orphan reasons of
    // its members and what their provenance permits.
    std::vector<const proc::Holder*> orphans;
    for (const auto& v : inv.gpus)
      for (const auto& gh : v.holders)
        if (gh.holder.instance == in.key && gh.holder.orphaned) orphans.push_back(&gh.holder);
    for (const auto& line : verdict_lines(orphans)) out += "    " + line + "\n";
    if (auto note = live_instance_note(in); !note.empty()) out += "    " + note + "\n";
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

nlohmann::ordered_json replace_json(const ReplaceRecord& r) {
  using J = nlohmann::ordered_json;
  J left = J::array();
  for (const auto& a : r.left_alone)
    left.push_back({{"instance", a.instance.empty() ? J(nullptr) : J(a.instance)},
                    {"pids", a.pids},
                    {"user", a.user},
                    {"gpus", a.gpus},
                    {"bytes", a.bytes},
                    {"reason", a.reason}});
  const bool freed = r.plan && r.report;
  return {{"flag", r.flag},
          {"freed", freed ? free_json(*r.plan, *r.report, false) : J(nullptr)},
          {"verified_gpus", freed ? J(freed_gpus(*r.plan, *r.report)) : J::array()},
          {"ports_closed", r.ports},
          {"left_alone", left},
          {"messages", r.said}};
}

std::string needs_confirmation(const reclaim::Plan& plan, const inventory::Inventory& inv,
                               supervise::ReplaceMode mode) {
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) {
      if (!gh.uses_gpu) continue;
      const proc::Holder& h = gh.holder;
      if (plan.contains(h.id) && !proc::unattended_may_act(h))
        // Named by its command line (its title): the kernel's 15-character name cuts
        // `sglang::scheduler_TP0` to `sglang::schedul` (ux-wave5-review #12).
        return fmt::format("pid {} ({}) is {}", h.id.pid, short_command(h, 40),
                           h.orphaned ? "orphaned only by inference: " + terminal_text(h.orphan_reason)
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
    // --replace-orphans frees what it may and treats the rest as a live holder is treated
    // (W4-03): another user's orphan known by inference only, on any GPU, is said as
    // left alone (left_alone_line), never a refusal that keeps CMD from starting.
    if (mode == supervise::ReplaceMode::replace_orphans) continue;
    const std::string name = h ? short_command(*h, 40) : terminal_text(s.comm, 20);
    if (h && h->orphaned)
      return fmt::format("pid {} ({}) holds {} and is orphaned only by inference: {}", s.id.pid,
                         name, format_bytes(s.gpu_bytes), terminal_text(h->orphan_reason));
    return fmt::format("pid {} ({}) holds {} and is not orphaned{}", s.id.pid, name,
                       format_bytes(s.gpu_bytes),
                       h && !h->instance.empty()
                           ? fmt::format(" (instance {})", terminal_text(h->instance))
                           : std::string());
  }
  return "";
}

std::string plan_command(supervise::ReplaceMode mode, std::string_view instance,
                         const std::vector<gpu::DeviceId>& gpus) {
  const std::string on = gpus.empty() ? "--all" : "--gpu " + gpu::device_list(gpus);
  switch (mode) {
    case supervise::ReplaceMode::replace:
      return fmt::format("gpureap free --instance {} --dry-run", terminal_text(instance));
    case supervise::ReplaceMode::replace_orphans:
      return fmt::format("gpureap free --orphans {} --dry-run", on);
    case supervise::ReplaceMode::free_first:
      break;
  }
  return fmt::format("gpureap free {} --dry-run", on);
}

}  // namespace gpureap::report
