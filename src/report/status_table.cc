#include "report/status_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpu/gpu_select.h"
#include "gpu/vendor.h"
#include "report/instance_text.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "util/units.h"
#include "util/plural.h"
#include "util/plural.h"

namespace gpureap::report {
namespace {

std::string gpu_heading(const gpu::GpuInfo& info, const Style& style) {
  std::string line = style.bold(fmt::format("GPU {}", info.id));
  // From the driver, not from processes; escaped all the same (a simulated or
  // broken driver can return anything).
  if (!info.name.empty()) line += "  " + terminal_text(info.name);
  if (!info.pci_bus_id.empty()) line += "  " + terminal_text(info.pci_bus_id);
  if (info.minor) line += "  " + gpu::device_node_path(info);
  if (!info.uuid.empty()) line += "  " + style.dim(terminal_text(info.uuid));
  if (info.id.mig()) line += "  " + style.dim("MIG device of " + terminal_text(info.parent_uuid));
  return line;
}

std::string card_health_text(const gpu::GpuInfo& info) {
  std::vector<std::string> parts;
  if (info.power_limit_mw) {
    const unsigned cap = (*info.power_limit_mw + 500) / 1000;
    parts.push_back(info.power_mw ? fmt::format("power {} W of a {} W cap",
                                                (*info.power_mw + 500) / 1000, cap)
                                  : fmt::format("power cap {} W", cap));
  }
  if (info.clock_event_reasons) {
    const auto words = gpu::clock_event_words(*info.clock_event_reasons);
    parts.push_back(words.empty() ? std::string("clocks not held down")
                                  : fmt::format("clocks held down by {}", fmt::join(words, ", ")));
  }
  if (info.ecc_uncorrected)
    parts.push_back(fmt::format("{} since the driver loaded",
                                count_of(*info.ecc_uncorrected, "uncorrected ECC error")));
  if (parts.empty()) return "";
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string parent_text(const proc::Holder& h, const Style& style) {
  if (h.orphaned) return style.red(fmt::format("{} ORPHAN", h.ppid));
  if (h.detached) return style.yellow(fmt::format("{} DETACHED", h.ppid));
  return fmt::format("{}", h.ppid);
}

std::string_view lineage_tag(const proc::Holder& h) {
  return h.orphaned ? " ORPHAN" : h.detached ? " DETACHED" : "";
}

// "scheduler TP3", "worker DP1 TP0", "launcher", "-": what its command line says it is
// (proc/engine_role.h), at most 15 characters.
std::string role_text(const proc::Holder& h) {
  if (h.engine.role == proc::EngineRole::none) return "-";
  std::string ranks = proc::rank_label(h.engine.ranks);
  std::string text =
      std::string(proc::enum_name(h.engine.role)) + (ranks.empty() ? "" : " " + ranks);
  return terminal_text(text, 15);
}

std::string state_text(const proc::Holder& h) {
  std::string s(1, h.state);
  if (h.zombie_leader) s += "+threads";
  return s;
}

std::string age_text(const proc::Holder& h) {
  return format_duration(std::chrono::nanoseconds(static_cast<std::int64_t>(h.age_seconds * 1e9)));
}

// The container, or the gpureap run, a holder belongs to ("" for neither).
std::string container_tag(const proc::Holder& h) {
  return !h.container.empty() ? h.container : !h.run_id.empty() ? "gpureap-run:" + h.run_id : "";
}

// The rows sized to the terminal (or whole, --wide): ROLE before COMMAND, the
// container in a column of its own (only when some holder has one), COMMAND cut to
// what is left; FOUND BY, AGE, CONTAINER and USER give way, in that order, on a
// narrow terminal.
std::string fitted_rows(const std::vector<const inventory::GpuHolder*>& users, const Style& style,
                        std::string_view indent, TableWidth width) {
  const bool containers = std::any_of(users.begin(), users.end(), [](const auto* gh) {
    return !container_tag(gh->holder).empty();
  });
  std::vector<TableColumn> columns = {
      {"PID"},           {"USER", false, 4, 16}, {"STATE"},  {"AGE", true, 2},
      {"GPU MEM", true}, {"FOUND BY", false, 1}, {"PARENT"}, {"ROLE"}};
  if (containers) columns.push_back({"CONTAINER", false, 3, 24});
  columns.push_back({"COMMAND"});
  std::vector<std::vector<TableCell>> rows;
  for (const auto* gh : users) {
    const auto& h = gh->holder;
    std::vector<TableCell> row = {{std::to_string(h.id.pid)},
                                  {h.user},
                                  {state_text(h)},
                                  {age_text(h)},
                                  {gh->gpu_bytes ? format_bytes(*gh->gpu_bytes) : "?"},
                                  {found_by_text(h)},
                                  {fmt::format("{}{}", h.ppid, lineage_tag(h)), h.orphaned   ? "31"
                                                                                : h.detached ? "33"
                                                                                             : ""},
                                  {role_text(h)}};
    if (containers) row.push_back({container_tag(h), "33"});
    row.push_back({h.cmdline.empty() ? "[" + h.comm + "]" : h.cmdline});
    rows.push_back(std::move(row));
  }
  return render_table(columns, rows, style, indent, width);
}

// NVML's per-process SM sample of each holder that has one, on one line: a hint to a
// person (an idle holder reads 0 %), never evidence; empty when NVML gave none.
std::string sm_sample_line(const std::vector<const inventory::GpuHolder*>& users,
                           std::string_view indent) {
  std::string sampled;
  std::size_t shown = 0, more = 0;
  for (const auto* gh : users) {
    if (!gh->sm_percent) continue;
    if (shown == 10) {
      ++more;
      continue;
    }
    sampled += fmt::format("{}{} SM {} %", shown++ ? ", " : "", gh->holder.id.pid, *gh->sm_percent);
  }
  if (sampled.empty()) return {};
  if (more) sampled += fmt::format(" and {} more", more);
  return fmt::format("{}  NVML's latest per-process sample (a hint): {}\n", indent, sampled);
}

}  // namespace

std::string found_by_text(const proc::Holder& h) {
  std::string out;
  for (auto f : h.found_by) {
    if (!out.empty()) out += ",";
    out += f == proc::FoundBy::source ? "nvml" : f == proc::FoundBy::fd ? "fd" : "map";
  }
  return out;
}

std::string short_command(const proc::Holder& h, std::size_t width) {
  return terminal_text(h.cmdline.empty() ? "[" + h.comm + "]" : h.cmdline, width);
}

std::string holder_rows(const inventory::GpuView& view, const Style& style, std::string_view indent,
                        TableWidth width, const std::set<std::string>& said_once,
                        bool verbose) {
  std::string out;
  std::vector<const inventory::GpuHolder*> users, openers, clients;
  for (const auto& gh : view.holders)
    (gh.uses_gpu ? users : gh.client ? clients : openers).push_back(&gh);
  if (!users.empty() && !width.fixed()) {
    out += fitted_rows(users, style, indent, width);
  } else if (!users.empty()) {
    out += style.dim(fmt::format("{}{:<8} {:<10} {:<9} {:>8} {:>10}  {:<11} {:<12} {:<15} {}\n",
                                 indent, "PID", "USER", "STATE", "AGE", "GPU MEM", "FOUND BY",
                                 "PARENT", "ROLE", "COMMAND"));
    for (const auto* gh : users) {
      const auto& h = gh->holder;
      std::string tag = container_tag(h);
      std::string where = tag.empty() ? "" : style.yellow(" [" + terminal_text(tag) + "]");
      std::string parent = parent_text(h, style);
      // Pad on the visible text so colour codes don't break the columns.
      std::size_t parent_width = fmt::format("{}{}", h.ppid, lineage_tag(h)).size();
      out += fmt::format("{}{:<8} {:<10} {:<9} {:>8} {:>10}  {:<11} {}{} {:<15} {}{}\n", indent,
                         h.id.pid, terminal_text(h.user, 10), state_text(h), age_text(h),
                         gh->gpu_bytes ? format_bytes(*gh->gpu_bytes) : "?", found_by_text(h),
                         parent, std::string(parent_width < 12 ? 12 - parent_width : 0, ' '),
                         role_text(h), short_command(h, 60), where);
    }
  }
  if (!users.empty()) {
    // Why each is called orphaned or detached, in the words every view uses, and what
    // each orphan provenance permits; an instance's members say it once, under it. A
    // keeper says whose memory it keeps and how (docs/orphans.md, "Keepers").
    std::vector<const proc::Holder*> explained;
    for (const auto* gh : users) {
      const auto& h = gh->holder;
      if (h.keeper != proc::KeeperClass::none)
        out += style.dim(fmt::format("{}  keeper, {} (pid {}): {}\n", indent,
                                     proc::enum_name(h.keeper), h.id.pid,
                                     terminal_text(h.keeper_reason)));
      if (!said_once.contains(h.instance)) explained.push_back(&h);
    }
    for (const auto& line : verdict_lines(explained))
      out += style.dim(fmt::format("{}  {}\n", indent, line));
    if (std::string sampled = verbose ? sm_sample_line(users, indent) : ""; !sampled.empty())
      out += style.dim(sampled);
  }
  if (!openers.empty()) {
    std::string pids;
    for (std::size_t i = 0; i < openers.size() && i < 10; ++i)
      pids += fmt::format("{}{}", i ? ", " : "", openers[i]->holder.id.pid);
    if (openers.size() > 10) pids += fmt::format(" and {} more", openers.size() - 10);
    out += style.dim(fmt::format("{}also open here, memory on another GPU: {}\n", indent, pids));
  }
  if (verbose && !clients.empty()) {
    std::string who;
    for (std::size_t i = 0; i < clients.size() && i < 10; ++i)
      who += fmt::format("{}{} ({})", i ? ", " : "", clients[i]->holder.id.pid,
                         terminal_text(clients[i]->holder.comm));
    if (clients.size() > 10) who += fmt::format(" and {} more", clients.size() - 10);
    out += style.dim(fmt::format(
        "{}clients (the device open, no memory: monitors; never signalled unless named by "
        "--pid): {}\n",
        indent, who));
  }
  return out;
}

namespace {

// The instance a holder belongs to when that instance spans several GPUs and is worth
// a line of its own, or nullptr: its members are said once, under "Instances:".
const inventory::Instance* spanning_instance(const proc::Holder& h,
                                             const inventory::Inventory& inv) {
  if (h.instance.empty()) return nullptr;
  const auto* in = inventory::find_instance(inv.instances, h.instance);
  return in && worth_showing(*in) && in->gpus.size() > 1 ? in : nullptr;
}

// A GPU that is a row of the GPU table (issue 37): read cleanly (memory known, nothing
// unexplained, not busy, no problem), and every process using it a member of an
// instance that spans GPUs. Idle GPUs join them once one does.
bool compact_gpu(const inventory::GpuView& view, const inventory::Inventory& inv) {
  if (!view.info.problem.empty() || !view.info.memory ||
      view.unexplained != inventory::Unexplained::none ||
      view.busy.kind != inventory::Busy::none)
    return false;
  return std::all_of(view.holders.begin(), view.holders.end(), [&](const auto& gh) {
    return !gh.uses_gpu || spanning_instance(gh.holder, inv) != nullptr;
  });
}

bool any_held_compact(const inventory::Inventory& inv) {
  return std::any_of(inv.gpus.begin(), inv.gpus.end(), [&](const inventory::GpuView& v) {
    return compact_gpu(v, inv) &&
           std::any_of(v.holders.begin(), v.holders.end(),
                       [](const auto& gh) { return gh.uses_gpu; });
  });
}

// The GPU table: one row per holder of a compact GPU (the GPU's cells on its first row
// only), one row for an idle GPU. Who, by pid, rank and instance; why, under the
// instance; the GPU's identity and every holder's detail with -v or --json.
// A node with GPUs of two vendors (NVIDIA and AMD): the table names each GPU's.
bool mixed_vendors(const std::vector<const inventory::GpuView*>& views) {
  return std::any_of(views.begin(), views.end(), [&](const inventory::GpuView* v) {
    return gpu::vendor_of(v->info.uuid) != gpu::vendor_of(views.front()->info.uuid);
  });
}

std::string gpu_rows(const std::vector<const inventory::GpuView*>& views, const Style& style,
                     TableWidth width) {
  const bool vendor = mixed_vendors(views);
  std::vector<TableColumn> columns = {{"GPU"}};
  if (vendor) columns.push_back({"VENDOR"});
  columns.insert(columns.end(), {{"USED", true}, {"TOTAL", true}, {"STATE"}, {"INSTANCE"},
                                 {"PID"}, {"PARENT"}, {"ROLE"}});
  std::vector<std::vector<TableCell>> rows;
  for (const auto* view : views) {
    const auto gs = inventory::gpu_state(*view);
    const auto& m = view->info.memory;
    std::vector<TableCell> gpu = {{gpu::device_text(view->info.id)}};
    if (vendor) gpu.push_back({std::string(gpu::enum_name(gpu::vendor_of(view->info.uuid)))});
    gpu.insert(gpu.end(), {{m ? format_bytes(m->used) : "?"},
                           {m ? format_bytes(m->total) : "?"},
                           {std::string(inventory::enum_name(gs)),
                            gs == inventory::GpuState::free ? "32" : ""}});
    const std::vector<TableCell> blank(gpu.size(), TableCell{""});
    bool first = true;
    for (const auto& gh : view->holders) {
      if (!gh.uses_gpu) continue;
      const auto& h = gh.holder;
      std::vector<TableCell> row = first ? gpu : blank;
      row.push_back({h.instance});
      row.push_back({std::to_string(h.id.pid)});
      row.push_back({fmt::format("{}{}", h.ppid, lineage_tag(h)),
                     h.orphaned ? "31" : h.detached ? "33" : ""});
      row.push_back({role_text(h) == "-" ? h.comm : role_text(h)});
      rows.push_back(std::move(row));
      first = false;
    }
    if (first) {
      gpu.insert(gpu.end(), {{"-"}, {""}, {""}, {""}});
      rows.push_back(std::move(gpu));
    }
  }
  return style.bold("GPUs") + style.dim(" (their instances below; -v: each GPU and process)") +
         "\n" + render_table(columns, rows, style, "  ", width, 8);
}

// Where the answer came from, and what it cannot see: the agent, a driver that
// failed for some GPUs or all, a PID namespace.
std::string source_notes(const inventory::Inventory& inv, const Style& style) {
  std::string out;
  if (auto driver = driver_words(inv); !driver.empty()) out += style.dim(driver + "\n");
  if (inv.source == "agent")
    out += style.dim(fmt::format("answered by the gpureap agent (pid {})\n", inv.agent_pid));
  if (inv.source == "agent")
    for (const auto& why : inv.agent_degraded)
      out += style.yellow(fmt::format("! the agent is degraded: {}\n", terminal_text(why)));
  if (inv.source_state == gpu::SourceState::partial) {
    // Counted over the GPUs shown: `status --gpu 0` need not mention a lost GPU 1.
    std::size_t failed = 0;
    gpu::Vendor vendor = gpu::Vendor::nvidia;  // the vendor's words: NVML, amdgpu's sysfs
    for (const auto& view : inv.gpus)
      if (!view.info.problem.empty()) {
        ++failed;
        vendor = gpu::vendor_of(view.info.uuid);
      }
    if (failed > 0)
      out += style.yellow(fmt::format(
          "! {} could not read {} GPU{} (marked below); the other GPUs are shown in full.\n\n",
          gpu::driver_interface(vendor), failed, failed == 1 ? "" : "s"));
  } else if (inv.source_state != gpu::SourceState::ok) {
    out += style.yellow(fmt::format("! NVML: {}\n", terminal_text(inv.source_problem)));
    out +=
        "  Showing the /proc view only: holders of each /dev/nvidia<minor> node, no memory "
        "figures.\n\n";
  }
  if (!inv.host_pid_namespace)
    out += style.yellow(
        "! gpureap runs inside a PID namespace (container): processes of other namespaces are "
        "invisible here and NVML hides them too. Run it on the host for the full picture.\n\n");
  return out;
}

// What the GPU blocks count for the closing "what now" lines.
struct Tally {
  std::size_t orphans = 0;  // the orphans `free --orphans` would signal
  std::uint64_t orphan_bytes = 0;
  std::size_t orphans_unknown = 0;  // orphans whose memory NVML does not report
  bool needs_root = false;          // some are others' (free needs sudo)
  std::set<gpu::DeviceId> orphan_gpus, stuck_gpus, detached_gpus;
  std::set<std::string> orphan_instances;  // the instances of the orphans free would signal
  std::size_t detached = 0;                // re-parented, not a leak by the evidence
};

// An orphan `free --orphans` would signal, itself or (others') with sudo; a keeper of a
// dead owner's memory is one (its owner, whose device files it inherited, is gone).
bool freeable(const proc::Holder& h, const reclaim::Plan& free_orphans, Tally& tally) {
  if (!proc::stray(h)) return false;
  if (free_orphans.contains(h.id)) return true;
  bool others = std::any_of(free_orphans.skipped.begin(), free_orphans.skipped.end(),
                            [&](const reclaim::Skipped& s) {
                              return s.id == h.id && s.kind == reclaim::SkipKind::not_permitted;
                            });
  tally.needs_root = tally.needs_root || others;
  return others;
}

// Counts the GPU's users into the tally; returns how many use it.
std::size_t count_users(const inventory::GpuView& view, const reclaim::Plan& free_orphans,
                        Tally& tally) {
  std::size_t users = 0;
  for (const auto& gh : view.holders)
    if (gh.uses_gpu) {
      ++users;
      if (gh.holder.detached) {
        ++tally.detached;
        tally.detached_gpus.insert(view.info.id);
      }
      if (freeable(gh.holder, free_orphans, tally)) {
        ++tally.orphans;
        tally.orphan_bytes += gh.gpu_bytes.value_or(0);
        if (!gh.gpu_bytes) ++tally.orphans_unknown;
        tally.orphan_gpus.insert(view.info.id);
        tally.orphan_instances.insert(gh.holder.instance);
      }
    }
  return users;
}

// "used 70 GiB of 80 GiB  baseline 500 MiB  held, 2 holders (69 GiB)", or that the
// memory is unknown.
std::string memory_line(const inventory::GpuView& view, std::size_t users, const Style& style) {
  if (!view.info.memory)
    return fmt::format("  memory unknown  {} the node open\n",
                       count_of(view.holders.size(), "process has", "processes have"));
  const auto& m = *view.info.memory;
  // The one GPU state (inventory::gpu_state), in its own word as `top` and the JSON
  // say it; then who holds the GPU.
  const auto gs = inventory::gpu_state(view);
  const std::string word(inventory::enum_name(gs));
  std::string state = gs == inventory::GpuState::free   ? style.green(word)
                      : gs == inventory::GpuState::held ? word
                                                        : style.red(word);
  if (users > 0)
    state += fmt::format(", {} ({})", count_of(users, "holder"),
                         format_bytes(view.attributed_bytes));
  else if (gs != inventory::GpuState::free)
    state += ", no holder";
  return fmt::format("  used {} of {}  baseline {}{}  {}\n", format_bytes(m.used),
                     format_bytes(m.total), format_bytes(view.baseline.bytes),
                     view.baseline.recorded ? "" : " (est.)", state);
}

// Memory no visible process explains, and a GPU busy with no process.
std::string gpu_alarms(const inventory::GpuView& view, const Style& style, Tally& tally) {
  std::string out;
  if (view.unexplained != inventory::Unexplained::none) {
    out +=
        style.red(fmt::format("  ! {} not explained by any visible process [{}]\n",
                              format_bytes(view.unattributed_bytes), enum_name(view.unexplained)));
    out += fmt::format("    {}\n", terminal_text(view.unexplained_detail));
    if (view.unexplained == inventory::Unexplained::driver_held)
      tally.stuck_gpus.insert(view.info.id);
  }
  if (view.busy.kind != inventory::Busy::none) {
    const bool ghost = view.busy.kind == inventory::Busy::ghost;
    std::string line =
        fmt::format("  ! busy with no {}process [{}]\n",
                    view.busy.kind == inventory::Busy::orphan_computing ? "live " : "",
                    enum_name(view.busy.kind));
    out += ghost ? style.red(line) : style.yellow(line);
    out += fmt::format("    {}\n", terminal_text(view.busy.detail));
  }
  return out;
}

// One GPU's block: its heading, a failed query, memory and state, holders, alarms.
// With -v, the card's health line after the memory line (card_health_text).
std::string gpu_block(const inventory::GpuView& view, const Style& style,
                      const reclaim::Plan& free_orphans, TableWidth width,
                      const std::set<std::string>& said_once, Tally& tally, bool verbose) {
  std::string out = gpu_heading(view.info, style) + "\n";
  if (!view.info.problem.empty()) {
    out += style.red(fmt::format("  ! {}: {}\n", view.info.hung ? "NOT ANSWERING" : "QUERY FAILED",
                                 terminal_text(view.info.problem)));
  }
  const std::size_t users = count_users(view, free_orphans, tally);
  out += memory_line(view, users, style);
  if (verbose)
    if (std::string health = card_health_text(view.info); !health.empty()) {
      const bool worry = (view.info.clock_event_reasons &&
                          gpu::clock_events_worrying(*view.info.clock_event_reasons)) ||
                         view.info.ecc_uncorrected.value_or(0) > 0;
      out += (worry ? style.yellow("  ! " + health) : "  " + health) + "\n";
    }
  out += holder_rows(view, style, "    ", width, said_once, verbose);
  out += gpu_alarms(view, style, tally);
  return out;
}

// Processes with a GPU's node but no GPU's memory: a MIG parent's own node (blocks a
// reconfiguration or reset), or only nvidiactl/nvidia-uvm.
std::string other_holder_lines(const inventory::Inventory& inv, const Style& style) {
  std::string out;
  // A GPU in MIG mode: a process with its node but no capability of a MIG device uses
  // none (an NVML client, a process between two MIG devices); it is no holder of any
  // MIG device, but it does block a MIG reconfiguration or a reset of that GPU.
  std::vector<const proc::Holder*> shared_only;
  for (const auto& h : inv.other_holders) {
    std::set<gpu::DeviceId> parents;  // GPUs in MIG mode whose own node it holds
    for (const auto& view : inv.gpus)
      if (view.info.id.mig() && view.info.minor && h.gpu_minors.contains(*view.info.minor))
        parents.insert(view.info.id.parent());
    if (parents.empty()) {
      shared_only.push_back(&h);
      continue;
    }
    std::string gpus;
    for (const auto& p : parents) gpus += (gpus.empty() ? "" : ", ") + fmt::format("GPU {}", p);
    out += style.yellow(fmt::format(
               "\n! pid {} ({}) holds {}'s own device node but no MIG device of it: it uses no "
               "MIG device's memory, and it blocks a MIG reconfiguration or a reset of that "
               "GPU (an NVML client such as a monitoring agent, or a process not yet on a MIG "
               "device; `gpureap status --blockers` lists every blocker with its next step)",
               h.id.pid, terminal_text(h.comm), gpus)) +
           "\n";
  }
  if (!shared_only.empty()) {
    out += fmt::format("\nProcesses with nvidiactl/nvidia-uvm open but no GPU node ({}):",
                       shared_only.size());
    for (std::size_t i = 0; i < shared_only.size() && i < 10; ++i)
      out += fmt::format(" {} ({})", shared_only[i]->id.pid, terminal_text(shared_only[i]->comm));
    out += "\n";
  }
  return out;
}

// What the look may have missed: processes it could not inspect, and its warnings.
std::string inspection_notes(const inventory::Inventory& inv, const Style& style) {
  std::string out;
  if (!inv.problems.empty()) {
    out += style.yellow(fmt::format(
        "\n! {} not be inspected (pid {}: {}); holders among them may be "
        "missing. {}\n",
        count_of(inv.problems.size(), "process could", "processes could"), inv.problems.front().pid, terminal_text(inv.problems.front().what),
        inv.as_root
            ? "This is denied even to root here (a sandbox or security module restricts /proc)."
            : "Run as root to see every holder."));
  }
  if (!inv.warnings.empty()) {
    out += "\n";
    for (const auto& w : inv.warnings) out += style.yellow("! " + terminal_text(w)) + "\n";
  }
  return out;
}

// Shared-memory segments a killed server left.
std::string shm_note(const inventory::Inventory& inv, const Style& style) {
  if (inv.shm_leftovers.empty()) return "";
  std::uint64_t bytes = 0;
  for (const auto& l : inv.shm_leftovers) bytes += l.bytes;
  return style.yellow(fmt::format(
             "\n! {} shared-memory segment{} ({}) whose creator is gone, e.g. {} (pid {}): host "
             "memory a killed server left; remove with rm once no server of yours uses them",
             inv.shm_leftovers.size(), inv.shm_leftovers.size() == 1 ? "" : "s",
             format_bytes(bytes), terminal_text(inv.shm_leftovers.front().path),
             inv.shm_leftovers.front().creator)) +
         "\n";
}

// What now: the orphans and the command that frees them, the detached, stuck GPUs.
std::string what_now(const Tally& t, const inventory::Inventory& inv, const Style& style) {
  std::string out;
  auto gpu_list = [](const std::set<gpu::DeviceId>& s) {
    return gpu::device_list(std::vector<gpu::DeviceId>(s.begin(), s.end()));
  };
  if (t.orphans > 0) {
    // "holds 0 B" for memory NVML does not report would read as "holds nothing".
    std::string held = t.orphans_unknown == t.orphans ? "memory (NVML gives no figure)"
                       : t.orphans_unknown > 0        ? "at least " + format_bytes(t.orphan_bytes)
                                                      : format_bytes(t.orphan_bytes);
    out += "\n" + style.bold(fmt::format(
                      "{} (parent gone) {} {} on GPU {}.",
                      count_of(t.orphans, "orphaned process", "orphaned processes"),
                      agreeing(t.orphans, "holds", "hold"), held, gpu_list(t.orphan_gpus)));
    // All of one server, orphaned as a whole: free that server by name.
    const inventory::Instance* one =
        t.orphan_instances.size() == 1
            ? inventory::find_instance(inv.instances, *t.orphan_instances.begin())
            : nullptr;
    if (one && worth_showing(*one) && one->orphaned == one->members.size())
      out += fmt::format(" Free them: {}gpureap free --orphans --instance {}\n",
                         t.needs_root ? "sudo " : "", terminal_text(one->key));
    else
      out += fmt::format(" Free {}: {}gpureap free --orphans --gpu {}\n",
                         t.orphans == 1 ? "it" : "them", t.needs_root ? "sudo " : "",
                         gpu_list(t.orphan_gpus));
  }
  if (t.detached > 0)
    out += fmt::format(
        "{} detached process{} on GPU {}: re-parented, but not a leak by the evidence (the "
        "\"detached\" line above says why); --orphans leaves {} alone.\n",
        t.detached, t.detached == 1 ? "" : "es", gpu_list(t.detached_gpus),
        t.detached == 1 ? "it" : "them");
  if (!t.stuck_gpus.empty())
    out += style.bold(fmt::format("GPU {}: memory held by the driver with no process; see above.\n",
                                  gpu_list(t.stuck_gpus)));
  return out;
}

// status_table before the lines of prose are fitted: where the answer came from, the
// GPUs (a table of the compact ones, a block each for the rest), other holders, what
// the look may have missed, the instances, and what now.
std::string status_lines(const inventory::Inventory& inv, const Style& style,
                         const reclaim::Plan& free_orphans, TableWidth width, bool verbose,
                         bool compact_only) {
  // The evidence of an instance's members is said once, under the instance (issue 37).
  const InstanceEvidence evidence = instance_evidence(inv);
  std::set<std::string> said_once;
  for (const auto& [key, lines] : evidence) said_once.insert(key);
  // An instance that spans GPUs is said once: its GPUs are rows of one table (-v: blocks).
  // Once the table is shown every GPU is a row of it, in index order (issue 53 #9: a GPU
  // with a block of its own dropped out of the table); a GPU whose holders or marks need
  // more than a row keeps its block below the table.
  const bool compact = compact_only || (!verbose && any_held_compact(inv));
  Tally tally;
  std::vector<const inventory::GpuView*> rows;
  std::string blocks;
  for (const auto& view : inv.gpus) {
    std::string block = gpu_block(view, style, free_orphans, width, said_once, tally, verbose);
    if (compact) rows.push_back(&view);  // counted above; a row of the table
    if (!compact || (!compact_only && !compact_gpu(view, inv))) blocks += block;
  }
  std::sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) {
    return a->info.id < b->info.id;
  });
  std::string out =
      source_notes(inv, style) +
      (rows.empty() ? "" : gpu_rows(rows, style, width) + (blocks.empty() ? "" : "\n")) + blocks;
  if (inv.gpus.empty()) out += "No NVIDIA GPU found and no process holds an nvidia device node.\n";
  out += other_holder_lines(inv, style);
  out += inspection_notes(inv, style);
  out += instances_section(inv.instances, style, evidence);
  out += shm_note(inv, style);
  out += what_now(tally, inv, style);
  return out;
}

}  // namespace

std::string driver_words(const inventory::Inventory& inv) {
  std::string out;
  if (!inv.driver_version.empty()) out = "driver " + terminal_text(inv.driver_version, 32);
  if (!inv.cuda_version.empty())
    out += (out.empty() ? "" : ", ") + std::string("CUDA ") + terminal_text(inv.cuda_version, 16);
  return out;
}

std::string status_table(const inventory::Inventory& inv, const Style& style,
                         const reclaim::Plan& free_orphans, TableWidth width, bool verbose,
                         bool compact) {
  std::string out = status_lines(inv, style, free_orphans, width, verbose, compact);
  // Rows are cut to fit; the lines of prose are broken at words.
  return width.limit() ? wrap_lines(out, *width.limit()) : out;
}

}  // namespace gpureap::report
