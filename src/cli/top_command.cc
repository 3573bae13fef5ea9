// `gpureap top`: the live view. Steps: parse -> terminal? -> node -> the session
// (top/session.h: look, rows, screen, keys; F frees the tagged set through free's own
// flow) until q or a signal. This file parses, opens the node, the terminal and the
// audit trail, and catches the signals.

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "inventory/baseline_store.h"
#include "reclaim/audited_control.h"
#include "reclaim/process_control.h"
#include "report/terminal_text.h"
#include "top/curses_view.h"
#include "top/session.h"
#include "util/signal_flags.h"

namespace gpureap::cli {
namespace {

constexpr std::chrono::milliseconds kMinInterval{100};

std::atomic<bool> g_top_interrupted{false};  // Ctrl-C: stops a free's waits, else quits
std::atomic<bool> g_top_stop{false};         // SIGTERM, SIGHUP: quit

int top_usage_error(const std::string& message) {
  print_err(fmt::format("gpureap top: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

// The F key's control: the system's, through an audit trail opened for this free.
int run_top(const GlobalOptions& global, const top::SessionOptions& o) {
  // 1. Parse: top is a screen, not a stream.
  if (global.json)
    return top_usage_error(
        "--json: top is interactive; `gpureap status --json` prints the same inventory for "
        "scripts");
  if (o.interval < kMinInterval)
    return top_usage_error(
        fmt::format("--interval {}ms: at least {}ms", o.interval.count(), kMinInterval.count()));
  if (::isatty(0) != 1 || ::isatty(1) != 1)
    return top_usage_error(
        "needs a terminal on stdin and stdout; `gpureap status` prints the same view once, "
        "`gpureap status --json` for scripts");

  // 2. The node (the agent answers each look when one watches this node).
  inventory::Node node = open_node(global);
  if (node.device_error()) {
    print_err(
        fmt::format("gpureap top: {}\n", report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }

  // 3. The screen, until q.
  SignalFlags signals;
  signals.raise_on(SIGINT, g_top_interrupted)
      .raise_on(SIGTERM, g_top_stop)
      .raise_on(SIGHUP, g_top_stop);
  auto view = top::CursesView::open(stdout_style(global).color);
  if (!view) {
    print_err(fmt::format("gpureap top: {}\n", report::terminal_text(view.error().message)));
    return kExitSystem;
  }
  const std::string proc_root = node.proc_root();
  top::TopSession session(
      {node, **view, g_top_stop, g_top_interrupted, [] { return inventory::state_dir(); },
       [proc_root](const std::string& state_dir, std::function<void(const std::string&)> warn) {
         return open_audited_control("top", reclaim::AuditActor::top,
                                     reclaim::AuditCaller::current(proc_root), proc_root,
                                     state_dir, std::move(warn));
       }},
      o);
  return session.run();
}

}  // namespace

void add_top_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [sub, o] = register_command<top::SessionOptions>(
      app, "top",
      "Live view of holders by instance; tag orphans and free them.\n"
      "Per GPU a memory bar (baseline, live holders, orphaned, memory no process explains)\n"
      "with utilization and a history (a running agent's last ten minutes, else since top\n"
      "started); below, the holders grouped by server instance, a worker under its parent,\n"
      "orphans and zombie leaders marked, ages ticking. Asks a running\n"
      "`gpureap watch` at each refresh, else scans. Keys: arrows move, enter folds an "
      "instance,\n"
      "s sorts, o shows orphans only, g one GPU, / finds text, space tags, F frees the tagged\n"
      "processes through free's own plan, lock, protections and audit trail: the plan is shown\n"
      "to confirm, then the release is watched until NVML reads the memory back at baseline\n"
      "(or the leftover is classified with the next step). ? lists the keys, q quits.\n"
      "Needs a terminal; NO_COLOR or --no-color draws without colour.\n\n"
      "Examples:\n"
      "  gpureap top                  watch, tag the orphans, free them\n"
      "  gpureap top --readonly       watch only: no tagging, no freeing\n"
      "  gpureap top --interval 2s    refresh every two seconds",
      global, run, run_top);
  add_duration(sub, "--interval", o.interval, "Time between looks (at least 100ms)");
  sub.add_flag("--readonly", o.readonly, "Watch only: the tag and free keys are off");
  sub.footer(exit_status_help(kTopExits));
}

}  // namespace gpureap::cli
