// `gpureap status`: who holds each GPU's memory, and why is it still held?
// Steps: resolve devices -> collect (NVML snapshot + /proc scan, concurrently)
// -> attribute -> select GPUs -> report.
// `--summary` and `--check` (issue 27, docs/fleet-checks.md): the same look, judged by
// inventory::check_node and printed as one line (report/summary.h) within --deadline;
// `--check` also says it in the exit status (0 clean, 1 problem, 3 unknown).

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "cli/flags.h"
#include "inventory/node_check.h"
#include "inventory/reset_blockers.h"
#include "reclaim/plan.h"
#include "report/json.h"
#include "report/reset_blockers_report.h"
#include "report/status_csv.h"
#include "report/status_table.h"
#include "report/summary.h"
#include "report/terminal_text.h"
#include "util/answer_within.h"

namespace gpureap::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct StatusOptions {
  gpu::GpuSelector gpu = gpu::GpuSelector::every_gpu();
  bool summary = false;  // --summary: one line
  bool check = false;    // --check / --exit-code: one line, and the verdict as exit status
  bool wide = false;     // --wide: whole command lines
  bool verbose = false;  // -v: every GPU's block, not an instance's GPUs as rows
  bool blockers = false; // --blockers: what blocks a reset or MIG change of each GPU
  bool compact = false;  // --compact: the GPU table alone, a row per GPU (gpustat-sized)
  std::string format = "text";  // --format text | csv | csv-holders
  std::chrono::milliseconds deadline = inventory::kDefaultCheckDeadline;
  CLI::Option* deadline_opt = nullptr;
};

// The look of a check: the agent's answer, else NVML's, each bounded so that both and
// a ghost candidate's sampling window (inventory::kBusyWindow) fit before the deadline.
inventory::CollectOptions check_look(Clock::time_point deadline) {
  inventory::CollectOptions look;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const auto share = (left - inventory::kBusyWindow - std::chrono::milliseconds(500)) / 2;
  look.source_deadline = std::clamp(share, std::chrono::milliseconds(100), look.source_deadline);
  return look;
}

int check_exit(inventory::Verdict verdict) {
  switch (verdict) {
    case inventory::Verdict::clean:
      return kExitOk;
    case inventory::Verdict::problem:
      return kExitStillHeld;
    case inventory::Verdict::unknown:
      return kExitSystem;
  }
  return kExitSystem;
}

int run_check(const GlobalOptions& global, const StatusOptions& options) {
  const auto started = Clock::now();
  if (global.json) {
    print_err("gpureap status: --summary and --check print one line of text; --json prints the "
              "whole document (use one or the other)\n");
    return kExitUsage;
  }
  if (options.deadline <= std::chrono::milliseconds::zero()) {
    print_err("gpureap status: --deadline: must be more than 0\n");
    return kExitUsage;
  }
  AnswerWithin answer(started + options.deadline,
                      report::summary_unanswered(duration_flag(options.deadline)), print_out,
                      kExitSystem);

  // 1. The node; the first look asks the agent when one runs (its fresh answer).
  inventory::Node node = open_node(global);
  if (node.device_error()) {
    print_err(fmt::format("gpureap status: {}\n",
                          report::terminal_text(node.device_error()->message)));
    answer.answer(report::summary_devices_unreadable());
    return kExitSystem;
  }
  inventory::Inventory inv = node.look(check_look(started + options.deadline));
  (void)node.save_baselines();

  // 2. Select, 3. judge (the one rule: inventory::check_node), 4. one line.
  auto chosen = inventory::select_gpus(options.gpu, inv);
  if (!chosen) {
    print_err(fmt::format("gpureap status: --gpu: {}\n", report::terminal_text(chosen.error().message)));
    return kExitUsage;
  }
  inventory::keep_gpus(inv, *chosen);
  const inventory::NodeCheck check = inventory::check_node(inv);
  answer.answer(report::summary_line(check));
  return options.check ? check_exit(check.verdict()) : kExitOk;
}

// `--blockers`: what blocks a reset or MIG change of each selected physical GPU (a MIG
// device selects its GPU). Exit 0 when nothing does, 1 when something does, 3 when
// nothing was seen but NVML or a PID namespace kept something from view.
int run_blockers(const GlobalOptions& global, const StatusOptions& options) {
  // 1. The node, 2. one look (the agent's answer when one runs: then its NVML session
  // is one of the blockers).
  inventory::Node node = open_node(global);
  if (node.device_error()) {
    print_err(fmt::format("gpureap status: {}\n",
                          report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }
  const inventory::Inventory inv = node.look();
  (void)node.save_baselines();

  // 3. The blockers of every physical GPU (inventory/reset_blockers.h), then --gpu.
  std::optional<inventory::AgentSession> agent;
  if (inv.source == "agent") agent = inventory::AgentSession{inv.agent_pid};
  auto all = inventory::find_reset_blockers(inv, agent);
  auto chosen = inventory::select_gpus(options.gpu, inv);
  if (!chosen) {
    print_err(fmt::format("gpureap status: {}\n", report::terminal_text(chosen.error().message)));
    return kExitUsage;
  }
  std::erase_if(all, [&](const inventory::GpuBlockers& g) {
    return std::none_of(chosen->begin(), chosen->end(),
                        [&](gpu::DeviceId id) { return id.parent() == g.gpu; });
  });

  // 4. Report; the exit status says it to scripts.
  if (global.json)
    print_out(report::document_text(report::blockers_json(all, inv)));
  else
    print_out(report::blockers_table(all, inv, stdout_style(global),
                                     stdout_table_width(options.wide)));
  const bool blocked = std::any_of(all.begin(), all.end(),
                                   [](const inventory::GpuBlockers& g) { return g.blocked(); });
  const bool unknown = std::any_of(all.begin(), all.end(), [](const inventory::GpuBlockers& g) {
    return !g.unknowns.empty();
  });
  return blocked ? kExitStillHeld : unknown ? kExitSystem : kExitOk;
}

int run_status(const GlobalOptions& global, const StatusOptions& options) {
  if (options.blockers && (options.summary || options.check)) {
    print_err("gpureap status: --blockers: not with --summary or --check (one question at a "
              "time)\n");
    return kExitUsage;
  }
  if (options.summary || options.check) return run_check(global, options);
  if (options.deadline_opt && options.deadline_opt->count() > 0) {
    print_err("gpureap status: --deadline bounds --summary and --check only\n");
    return kExitUsage;
  }
  if (options.format != "text" &&
      (global.json || options.summary || options.check || options.blockers)) {
    print_err("gpureap status: --format: not with --json, --summary, --check or --blockers\n");
    return kExitUsage;
  }
  if (options.compact && options.verbose) {
    print_err("gpureap status: --compact: not with -v (one row per GPU, or every GPU's block)\n");
    return kExitUsage;
  }
  if (options.blockers) return run_blockers(global, options);

  // 1. The node: the nvidia device nodes (by device identity), NVML, baselines.
  // A refused state directory is a warning in the output, not a failure.
  inventory::Node node = open_node(global);
  if (node.device_error()) {
    print_err(fmt::format("gpureap status: {}\n",
                          report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }

  // 2. Collect and attribute.
  inventory::Inventory inv = node.look();
  (void)node.save_baselines();  // a read-only state dir only costs us the learnt baseline
  // The host memory the same crashes leave: /dev/shm segments of dead creators.
  inv.shm_leftovers = inventory::find_shm_leftovers(node.dev_dir() + "/shm", node.proc_root());

  // 3. Select.
  {
    auto chosen = inventory::select_gpus(options.gpu, inv);
    if (!chosen) {
      print_err(fmt::format("gpureap status: --gpu: {}\n", report::terminal_text(chosen.error().message)));
      return kExitUsage;
    }
    inventory::keep_gpus(inv, *chosen);
  }

  // 4. Report.
  if (options.format == "csv" || options.format == "csv-holders") {
    const auto doc = report::status_json(inv);
    print_out(options.format == "csv" ? report::status_gpus_csv(doc)
                                      : report::status_holders_csv(doc));
  } else if (global.json) {
    print_out(report::document_text(report::status_json(inv)));
  } else {
    print_out(report::status_table(inv, stdout_style(global),
                                   reclaim::orphans_plan(inv, node.proc_root()),
                                   stdout_table_width(options.wide), options.verbose,
                                   options.compact));
  }
  return kExitOk;
}

}  // namespace

void add_status_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [sub, options] = register_command<StatusOptions>(
      app, "status",
      "Show who holds each GPU's memory and why (the default command).\n"
      "For every GPU: memory used/total against its idle baseline, every process holding it\n"
      "(found through NVML, open device files and memory mappings, so orphans and processes NVML\n"
      "does not list are found too), whether it is orphaned, its container, and memory that no\n"
      "visible process explains, with the likely reason.\n"
      "With --summary, one line per node for fleet checks, the same bytes on every healthy node\n"
      "(clush -b folds them): 'clean: 8 GPUs, no leak', 'problem: orphaned memory on GPU 3,5',\n"
      "'unknown: NVML unusable (hung)'; --check also exits 0 clean, 1 problem, 3 unknown\n"
      "(node-problem-detector, NHC; grammar and configs: docs/fleet-checks.md).\n"
      "With --blockers, what blocks a GPU reset or a MIG reconfiguration of each physical GPU\n"
      "(the driver's 'In use by another client'): processes with memory on it or on one of its\n"
      "MIG devices, clients with its node open and no memory (monitoring agents, nvidia-smi,\n"
      "DCGM, the device plugin), nvidiactl/nvidia-uvm clients, the running gpureap agent,\n"
      "persistence mode; each with its next step. gpureap changes no GPU or MIG setting.\n\n"
      "Examples:\n"
      "  gpureap status                 all GPUs, as a table\n"
      "  gpureap status --gpu 0,3       GPUs by index\n"
      "  gpureap status --gpu GPU-7282  by UUID prefix (also PCI bus id, or minor:N)\n"
      "  gpureap --json status          JSON (schema: docs/json-schema.md)\n"
      "  gpureap status --compact       a row per GPU, nothing else per GPU\n"
      "  gpureap status --format csv    a row per GPU, --json's columns (csv-holders: holders)\n"
      "  gpureap status --check         one line; exit 0 clean, 1 problem, 3 unknown\n"
      "  gpureap status --blockers --gpu 0   what blocks resetting or re-partitioning GPU 0\n"
      "  clush -b -w node[1-3] gpureap status --summary   a fleet, identical lines folded",
      global, run, run_status);
  add_gpu_selector(sub, "--gpu", options.gpu,
                   "GPUs to show: all, indices (0,3), a range (0-3), UUID or UUID prefix, PCI bus "
                   "id, minor:N; a MIG device: 0/gi1/ci0, 0:1, MIG-<uuid>")
      ->default_str("all");
  sub.add_flag("-w,--wide", options.wide,
               "Whole command lines, however wide the rows (the table is otherwise cut to the "
               "terminal's width, $COLUMNS or TIOCGWINSZ)");
  sub.add_flag("-v,--verbose", options.verbose,
               "Every GPU's block (UUID, bus id, device node, baseline, the card's health: "
               "power cap, clock event reasons, ECC errors) with a row per "
               "process, also for a server instance that spans GPUs (shown as one row per "
               "GPU and said once under its instance otherwise), and the clients: processes "
               "with a GPU's device open and no memory (monitors), which free never signals "
               "unless --pid names them");
  sub.add_flag("--compact", options.compact,
               "The GPU table alone: one row per GPU in index order (its holders' pids and "
               "roles), the instances and what now, without the per-GPU blocks");
  sub.add_option("--format", options.format,
                 "text (the default), csv (a row per GPU: --json's GPU keys), csv-holders (a "
                 "row per holder and GPU: --json's holder keys)")
      ->type_name("FORMAT")
      ->check(CLI::IsMember({"text", "csv", "csv-holders"}))
      ->default_str("text");
  sub.add_flag("--summary", options.summary,
               "One line for the node: clean, problem (orphaned or driver-held memory, a ghost "
               "GPU) or unknown, with the GPUs; no pid, time or figure that varies");
  sub.add_flag("--check,--exit-code", options.check,
               "Print the --summary line and exit 0 clean, 1 problem, 3 unknown (a "
               "node-problem-detector or NHC check)");
  sub.add_flag("--blockers", options.blockers,
               "What blocks a GPU reset or MIG reconfiguration of each GPU (a MIG device "
               "selects its GPU), with the next step for each; exit 0 none, 1 some, 3 cannot "
               "tell (NVML)");
  options.deadline_opt =
      add_duration(sub, "--deadline", options.deadline,
                   "--summary/--check: answer within this long; past it the line is 'unknown: "
                   "no answer within ...' (exit 3). Set it below the caller's own timeout");
  sub.footer(exit_status_help(kStatusExits));
}

}  // namespace gpureap::cli
