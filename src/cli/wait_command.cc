// `gpureap wait`: block until the selected GPUs are free, for scripts that
// relaunch a server. Steps: parse -> wait (inventory, thresholds, NVML polling
// with a deadline) -> report (on timeout: who still holds what, as `status`).

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "cli/flags.h"
#include "report/json.h"
#include "report/wait_report.h"
#include "reclaim/plan.h"
#include "report/status_table.h"
#include "report/terminal_text.h"
#include "supervise/free_wait.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

int wait_usage_error(const std::string& message) {
  print_err(fmt::format("gpureap wait: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

// The flags were read straight into `options` (cli/flags.h).
int run_wait(const GlobalOptions& global, const supervise::FreeWaitOptions& options) {
  // 1. Wait.
  inventory::Node node = open_node(global);
  auto result = supervise::wait_until_free(node, options);
  for (const auto& w : result.warnings)
    print_err(fmt::format("gpureap wait: warning: {}\n", report::terminal_text(w)));

  // 3. Report.
  using Status = supervise::FreeWaitResult::Status;
  if (result.status == Status::bad_selection) return wait_usage_error(result.message);
  if (global.json) print_out(report::document_text(report::wait_json(result)));
  switch (result.status) {
    case Status::free:
      if (!global.json)
        print_out("gpureap wait: " + report::wait_free_text(result) + "\n");
      return kExitOk;
    case Status::timed_out: {
      print_err(fmt::format("gpureap wait: {}: {}\n", report::wait_timeout_text(options.timeout),
                            report::gpus_not_free_text(result)));
      if (!global.json && result.holders)
        print_out(report::status_table(*result.holders, stdout_style(global),
                                        reclaim::orphans_plan(*result.holders, node.proc_root())));
      return kExitTimeout;
    }
    case Status::ghost:
      print_err(fmt::format("gpureap wait: [ghost_gpu] {}\n", report::gpus_not_free_text(result)));
      return kExitGhost;
    case Status::source_failed:
    case Status::bad_selection:
      break;
  }
  print_err(fmt::format("gpureap wait: {}\n", report::wait_failure_text(result)));
  return kExitSystem;
}

}  // namespace

void add_wait_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [sub, options] = register_command<supervise::FreeWaitOptions>(
      app, "wait",
      "Block until the selected GPUs are free again. Free: used memory at most --below above\n"
      "each GPU's idle baseline. For scripts that relaunch a server: continue the moment the "
      "memory is really\n"
      "released, not after a guessed sleep. Polls NVML (a few ms apart, backing off), bounded by\n"
      "--timeout. On timeout, exits 5 and prints who still holds what (as `status`).\n\n"
      "Examples:\n"
      "  gpureap wait                          all GPUs, default threshold, 60 s at most\n"
      "  gpureap wait --gpu 0,3 --timeout 2m   two GPUs, two minutes\n"
      "  gpureap free --gpu 3 --yes; gpureap wait --gpu 3 && ./launch_server.sh",
      global, run, run_wait);
  add_gpu_selector(sub, "--gpu", options.gpus,
                   "GPUs to wait for: all, indices (0,3), a range (0-3), UUID or prefix, PCI bus "
                   "id, minor:N; a MIG device: 0/gi1/ci0, 0:1, MIG-<uuid>")
      ->default_str("all");
  add_optional_size(
      sub, "--below", options.below,
      "Free means used <= baseline + SIZE (default: max(64 MiB, 0.5% of the GPU's memory))");
  add_duration(sub, "--timeout", options.timeout,
               "Give up after DURATION (e.g. 90s, 5m; 0 checks once)");
  sub.footer(exit_status_help(kWaitExits));
}

}  // namespace gpureap::cli
