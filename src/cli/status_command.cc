// `gpureap status`: who holds each GPU's memory, and why is it still held?
// Steps: resolve devices -> collect (NVML snapshot + /proc scan, concurrently)
// -> attribute -> select GPUs -> report.

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "report/json.h"
#include "reclaim/plan.h"
#include "report/status_table.h"
#include "report/terminal_text.h"

namespace gpureap::cli {
namespace {

struct StatusOptions {
  gpu::GpuSelector gpu = gpu::GpuSelector::every_gpu();
};

int run_status(const GlobalOptions& global, const StatusOptions& options) {
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

  // 3. Select.
  {
    auto chosen = inventory::select_gpus(options.gpu, inv);
    if (!chosen) {
      print_err(fmt::format("gpureap status: {}\n", report::terminal_text(chosen.error().message)));
      return kExitUsage;
    }
    inventory::keep_gpus(inv, *chosen);
  }

  // 4. Report.
  if (global.json) {
    print_out(report::json_text(report::status_json(inv)));
  } else {
    print_out(report::status_table(inv, stdout_style(global),
                                      reclaim::orphans_plan(inv, node.proc_root())));
  }
  return kExitOk;
}

}  // namespace

void add_status_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto options = std::make_shared<StatusOptions>();
  auto* sub = app.add_subcommand(
      "status",
      "Show who holds each GPU's memory and why it is still held (the default command).\n"
      "For every GPU: memory used/total against its idle baseline, every process holding it\n"
      "(found through NVML, open device files and memory mappings, so orphans and processes NVML\n"
      "does not list are found too), whether it is orphaned, its container, and memory that no\n"
      "visible process explains, with the likely reason.\n\n"
      "Examples:\n"
      "  gpureap status                 all GPUs, as a table\n"
      "  gpureap status --gpu 0,3       GPUs by index\n"
      "  gpureap status --gpu GPU-7282  by UUID prefix (also PCI bus id, or minor:N)\n"
      "  gpureap --json status          JSON (schema: docs/json-schema.md)");
  add_gpu_selector(*sub, "--gpu", options->gpu,
                   "GPUs to show: all, indices (0,3), a range (0-3), UUID or UUID prefix, PCI bus "
                   "id, minor:N")
      ->default_str("all");
  sub->footer(kStatusExitHelp);
  sub->callback([&run, &global, options] {
    run = [&global, options] { return run_status(global, *options); };
  });
}

}  // namespace gpureap::cli
