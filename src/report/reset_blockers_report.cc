#include "report/reset_blockers_report.h"

#include <fmt/format.h>

#include "report/device_json.h"
#include "report/json.h"
#include "report/terminal_text.h"
#include "util/enum_names.h"
#include "util/units.h"
#include "util/plural.h"

namespace gpureap::report {
// A named namespace: report/ is compiled in batches (unity build).
namespace blockers_report {

constexpr std::size_t kCommandWidth = 60;

std::string heading(const inventory::GpuBlockers& g) {
  std::string where = g.pci_bus_id.empty() ? std::string() : g.pci_bus_id;
  if (g.mig_mode)
    where += (where.empty() ? "" : ", ") +
             (g.mig_devices.empty() ? std::string("in MIG mode")
                                    : "MIG " + gpu::device_list(g.mig_devices));
  return where.empty() ? fmt::format("GPU {}", g.gpu) : fmt::format("GPU {} ({})", g.gpu, where);
}

// pid, user and command of a process blocker; "" for persistence mode.
std::string process_text(const inventory::Blocker& b) {
  if (b.cls == inventory::BlockerClass::persistence_mode) return "";
  const auto& h = b.process;
  std::string command = h.cmdline.empty() ? h.comm : h.cmdline;
  if (command.empty()) command = "(not in this /proc)";
  std::string text = terminal_text(command, kCommandWidth);
  if (!b.known_as.empty() && b.known_as != command) text += " (" + b.known_as + ")";
  return fmt::format("pid {:<7} {:<8} {}", h.id.pid, terminal_text(h.user.empty() ? "-" : h.user, 8),
                     text);
}

std::string devices_text(const inventory::Blocker& b) {
  if (b.devices.empty()) return "";
  std::string text = fmt::format("  on {}", gpu::device_list(b.devices));
  if (b.bytes) text += fmt::format(", {}", format_bytes(*b.bytes));
  return text;
}

}  // namespace blockers_report

std::string blockers_table(const std::vector<inventory::GpuBlockers>& gpus,
                           const inventory::Inventory& inv, const Style& style,
                           TableWidth width) {
  using namespace blockers_report;
  std::string out;
  bool any = false;
  for (const auto& g : gpus) {
    if (!g.blocked()) {
      if (g.unknowns.empty()) {
        out += style.green(fmt::format("Nothing blocks a reset or MIG change of {}.", heading(g))) +
               "\n";
      } else {
        out += style.yellow(fmt::format("{}: no blocker seen, but cannot tell:", heading(g))) + "\n";
        for (const auto& u : g.unknowns) out += "  ! " + terminal_text(u) + "\n";
      }
      continue;
    }
    any = true;
    out += style.bold(fmt::format("{}: {} blocker{} of a reset or MIG change", heading(g),
                                  g.blockers.size(), g.blockers.size() == 1 ? "" : "s")) +
           "\n";
    for (const auto& b : g.blockers) {
      const std::string cls = style.red(fmt::format("{:<17}", enum_name(b.cls)));
      if (b.cls == inventory::BlockerClass::persistence_mode) {  // a setting, not a process
        out += fmt::format("  {} {}\n", cls, terminal_text(b.what));
      } else {
        out += fmt::format("  {} {}{}\n", cls, process_text(b), devices_text(b));
        out += fmt::format("  {:<17} {}\n", "", terminal_text(b.what));
      }
      out += fmt::format("  {:<17} next: {}\n", "", terminal_text(b.next_step));
    }
    for (const auto& u : g.unknowns) out += style.yellow("  ! " + terminal_text(u)) + "\n";
  }
  if (!inv.problems.empty())
    out += style.yellow(fmt::format(
               "! {} not be inspected (pid {}: {}); clients among them may be "
               "missing.",
               count_of(inv.problems.size(), "process could", "processes could"), inv.problems.front().pid,
               terminal_text(inv.problems.front().what))) +
           "\n";
  if (any)
    out += "gpureap never changes GPU or MIG settings: each next step is yours to run "
           "(docs/mig.md, \"What blocks a MIG change or a reset\").\n";
  if (const auto columns = width.limit()) return wrap_lines(out, *columns, Hang::description);
  return out;
}

nlohmann::ordered_json blockers_json(const std::vector<inventory::GpuBlockers>& gpus,
                                     const inventory::Inventory& inv) {
  auto text_or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
  };
  nlohmann::ordered_json problems = nlohmann::ordered_json::array();
  for (const auto& p : inv.problems) problems.push_back({{"pid", p.pid}, {"what", p.what}});
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& g : gpus) {
    nlohmann::ordered_json blockers = nlohmann::ordered_json::array();
    for (const auto& b : g.blockers) {
      const bool process = b.cls != inventory::BlockerClass::persistence_mode;
      const auto& h = b.process;
      auto if_process = [&](nlohmann::ordered_json v) {
        return process ? v : nlohmann::ordered_json(nullptr);
      };
      blockers.push_back({
          {"class", std::string(enum_name(b.cls))},
          {"pid", if_process(h.id.pid)},
          {"start_time", h.id.start_time != 0 ? nlohmann::ordered_json(h.id.start_time)
                                              : nlohmann::ordered_json(nullptr)},
          {"user", text_or_null(h.user)},
          {"comm", text_or_null(h.comm)},
          {"cmdline", text_or_null(h.cmdline)},
          {"container", text_or_null(h.container)},
          {"known_as", text_or_null(b.known_as)},
          {"devices", b.devices},
          {"gpu_bytes", b.bytes ? nlohmann::ordered_json(*b.bytes) : nlohmann::ordered_json(nullptr)},
          {"what", b.what},
          {"next_step", b.next_step},
      });
    }
    list.push_back({
        {"gpu", g.gpu},
        {"uuid", text_or_null(g.uuid)},
        {"pci_bus_id", text_or_null(g.pci_bus_id)},
        {"mig_mode", g.mig_mode},
        {"mig_devices", g.mig_devices},
        {"blocked", g.blocked()},
        {"blockers", blockers},
        {"unknowns", g.unknowns},
    });
  }
  return {
      {"schema_version", kSchemaVersion},
      {"command", "status --blockers"},
      {"nvml", {{"state", std::string(enum_name(inv.source_state))}}},
      {"gpus", list},
      {"problems", problems},
      {"source", inv.source},
      {"agent_pid", inv.source == "agent" ? nlohmann::ordered_json(inv.agent_pid)
                                          : nlohmann::ordered_json(nullptr)},
  };
}

}  // namespace gpureap::report
