// `gpureap wait`: block until the selected GPUs are free, for scripts that
// relaunch a server. Steps: parse -> wait (inventory, thresholds, NVML polling
// with a deadline) -> report (on timeout: who still holds what, as `status`).

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "report/json.h"
#include "report/status_table.h"
#include "report/terminal_text.h"
#include "supervise/free_wait.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

struct WaitOptions {
  std::string gpu = "all";
  std::string below;  // empty: the freed tolerance, max(64 MiB, 0.5% of the GPU's memory)
  std::string timeout = "60s";
};

int usage_error(const std::string& message) {
  print_err(fmt::format("gpureap wait: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

std::string gpu_list(const supervise::FreeWaitResult& r) {
  std::string out;
  for (const auto& g : r.gpus) out += (out.empty() ? "" : ",") + std::to_string(g.index);
  return out;
}

nlohmann::json wait_json(const supervise::FreeWaitResult& r) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"used_bytes", g.used ? nlohmann::json(*g.used) : nlohmann::json(nullptr)},
                    {"baseline_bytes", g.baseline},
                    {"baseline_recorded", g.baseline_recorded},
                    {"threshold_bytes", g.threshold},
                    {"free", g.freed_after.has_value()},
                    {"freed_after_seconds",
                     g.freed_after ? nlohmann::json(*g.freed_after) : nlohmann::json(nullptr)}});
  }
  nlohmann::json j = {{"schema_version", report::kSchemaVersion},
                      {"command", "wait"},
                      {"free", r.status == supervise::FreeWaitResult::Status::free},
                      {"timed_out", r.status == supervise::FreeWaitResult::Status::timed_out},
                      {"seconds", r.seconds},
                      {"gpus", gpus}};
  j["warnings"] = r.warnings;
  if (r.holders) j["status"] = report::status_json(*r.holders);
  if (!r.message.empty()) j["error"] = r.message;
  return j;
}

int run_wait(const GlobalOptions& global, const WaitOptions& o) {
  // 1. Parse.
  supervise::FreeWaitOptions options;
  options.gpus = o.gpu;
  auto timeout = parse_duration(o.timeout);
  if (!timeout) return usage_error("--timeout: " + timeout.error().message);
  options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*timeout);
  if (!o.below.empty()) {
    auto below = parse_size(o.below);
    if (!below) return usage_error("--below: " + below.error().message);
    options.below = *below;
  }

  // 2. Wait.
  inventory::Node node = open_node(global);
  auto result = supervise::wait_until_free(node, options);
  for (const auto& w : result.warnings)
    print_err(fmt::format("gpureap wait: warning: {}\n", report::terminal_text(w)));

  // 3. Report.
  using Status = supervise::FreeWaitResult::Status;
  if (result.status == Status::bad_selection) return usage_error(result.message);
  if (global.json) print_out(report::json_text(wait_json(result)));
  switch (result.status) {
    case Status::free:
      if (!global.json)
        print_out(fmt::format("gpureap wait: GPU {} free after {}\n", gpu_list(result),
                              format_duration(std::chrono::nanoseconds(
                                  static_cast<long long>(result.seconds * 1e9)))));
      return kExitOk;
    case Status::timed_out: {
      std::string still;
      for (const auto& g : result.gpus) {
        if (g.freed_after) continue;
        still +=
            fmt::format("{}GPU {} {} used (free means at most {})", still.empty() ? "" : "; ",
                        g.index, g.used ? format_bytes(*g.used) : "?", format_bytes(g.threshold));
      }
      print_err(fmt::format("gpureap wait: {}: {}\n",
                            options.timeout.count() == 0
                                ? std::string("not free at the one check (--timeout 0)")
                                : "timed out after " + format_duration(options.timeout),
                            still));
      if (!global.json && result.holders)
        print_out(report::status_table(*result.holders, stdout_style(global)));
      return kExitTimeout;
    }
    case Status::nvml_failed:
    case Status::bad_selection:
      break;
  }
  print_err(fmt::format("gpureap wait: {}\n", report::terminal_text(result.message)));
  return kExitSystem;
}

}  // namespace

void add_wait_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto options = std::make_shared<WaitOptions>();
  auto* sub = app.add_subcommand(
      "wait",
      "Block until the selected GPUs are free: used memory at most --below above each GPU's idle\n"
      "baseline. For scripts that relaunch a server: continue the moment the memory is really\n"
      "released, not after a guessed sleep. Polls NVML (a few ms apart, backing off), bounded by\n"
      "--timeout. On timeout, exits 5 and prints who still holds what (as `status`).\n\n"
      "Examples:\n"
      "  gpureap wait                          all GPUs, default threshold, 60 s at most\n"
      "  gpureap wait --gpu 0,3 --timeout 2m   two GPUs, two minutes\n"
      "  gpureap free --gpu 3 --yes; gpureap wait --gpu 3 && ./launch_server.sh");
  sub->add_option("--gpu", options->gpu,
                  "GPUs to wait for: all, indices (0,3), UUID or prefix, PCI bus id, minor:N")
      ->default_val("all");
  sub->add_option(
      "--below", options->below,
      "Free means used <= baseline + SIZE (default: max(64 MiB, 0.5% of the GPU's memory))");
  sub->add_option("--timeout", options->timeout,
                  "Give up after DURATION (e.g. 90s, 5m; 0 checks once)")
      ->default_val("60s");
  sub->footer(kWaitExitHelp);
  sub->callback([&run, &global, options] {
    run = [&global, options] { return run_wait(global, *options); };
  });
}

}  // namespace gpureap::cli
