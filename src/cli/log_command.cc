// `gpureap log`: who signalled what, from the audit file (docs/audit.md). Steps:
// parse -> read the audit file and its rotated predecessors -> select -> report
// (a table, or with --json the records' own lines).

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "audit/recorder.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "cli/flags.h"
#include "inventory/baseline_store.h"
#include "report/audit_format.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

struct LogOptions {
  std::optional<pid_t> pid;
  gpu::GpuSelector gpu;
  std::string since;
  bool wide = false;
};

int log_usage_error(const std::string& message) {
  print_err(fmt::format("gpureap log: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

// --since: a duration back from now ("2h", "30m") or a time ("2025-06-01 14:00",
// RFC 3339).
Result<WallTime> since_time(const std::string& text) {
  if (auto back = parse_duration(text))
    return std::chrono::time_point_cast<WallTime::duration>(std::chrono::system_clock::now() -
                                                            *back);
  if (auto when = parse_time(text)) return *when;
  return fail(fmt::format(
      "--since '{}': expected a duration back from now (30m, 2h) or a time (2025-06-01, "
      "2025-06-01 14:00, 2025-06-01T14:00:00+02:00)",
      text));
}

int run_log(const GlobalOptions& global, const LogOptions& o) {
  // 1. Parse.
  audit::LogFilter filter;
  filter.pid = o.pid;
  filter.gpus = o.gpu;
  if (!o.since.empty()) {
    auto since = since_time(o.since);
    if (!since) return log_usage_error(since.error().message);
    filter.since = *since;
  }

  // 2. Read.
  auto state = inventory::state_dir();
  if (!state) {
    print_err(fmt::format("gpureap log: {}\n", report::terminal_text(state.error().message)));
    return kExitSystem;
  }
  auto reading = audit::read_audit_log(*state);
  if (!reading) {
    print_err(fmt::format("gpureap log: {}\n", report::terminal_text(reading.error().message)));
    return kExitSystem;
  }
  for (const auto& w : reading->warnings)
    print_err(fmt::format("gpureap log: warning: {}\n", report::terminal_text(w)));

  // 3. Select and report.
  auto selected = audit::select_records(reading->records, filter);
  if (global.json) {
    std::string out;
    for (const auto* r : selected) out += r->line + "\n";
    print_out(out);
    return kExitOk;
  }
  if (reading->files.empty()) {
    print_out(fmt::format("No audit records in {}: gpureap has signalled nothing here yet.\n",
                          report::terminal_text(*state)));
    return kExitOk;
  }
  if (selected.empty()) {
    print_out(fmt::format("No audit record matches ({} record{} in {}).\n", reading->records.size(),
                          reading->records.size() == 1 ? "" : "s", report::terminal_text(*state)));
    return kExitOk;
  }
  std::vector<reclaim::AuditRecord> records;
  records.reserve(selected.size());
  for (const auto* r : selected) records.push_back(r->record);
  print_out(report::audit_table(records, stdout_style(global), stdout_table_width(o.wide)));
  return kExitOk;
}

}  // namespace

void add_log_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [sub, o] = register_command<LogOptions>(
      app, "log",
      "Show the audit trail of every signal gpureap sent. Each record: when; which\n"
      "command (free, the agent's reaper, a Slurm hook, run's teardown) and who ran it;\n"
      "the process signalled, its user, GPUs and memory; the signal, how it was\n"
      "delivered and what the kernel said; and each free's verdict at the end. Read\n"
      "from the audit file in the state directory (audit.jsonl, rotated at 1 MiB, two\n"
      "older files kept); the same records go to the journal, or to syslog.\n\n"
      "Examples:\n"
      "  gpureap log                     all records, oldest first\n"
      "  gpureap log --pid 4242          who signalled 4242, and the outcome\n"
      "  gpureap log --gpu 3 --since 2h  signals on GPU 3 in the last 2 hours\n"
      "  gpureap log --since 2025-06-01  from that day's midnight (local)\n"
      "  gpureap --json log --pid 4242   the records as stored (JSON lines)\n"
      "  journalctl -t gpureap GPUREAP_TARGET_PID=4242    (the journal)",
      global, run, run_log);
  add_optional_pid(sub, "--pid", o.pid, "Only signals to this process id (and their free's verdict)");
  add_gpu_selector(sub, "--gpu", o.gpu,
                   "Only signals to processes on these GPUs: indices (0,3), a range (0-3), a UUID "
                   "or prefix");
  sub.add_option("--since", o.since,
                 "Only records from this time on: a duration back from now (30m, 2h) or a time "
                 "(2025-06-01, 2025-06-01 14:00, RFC 3339)")
      ->type_name("WHEN");
  sub.add_flag("-w,--wide", o.wide,
               "Whole command lines, however wide the rows (on a terminal the table is "
               "otherwise cut to its width, $COLUMNS or TIOCGWINSZ; not on one it is whole)");
  sub.footer(exit_status_help(kLogExits));
}

}  // namespace gpureap::cli
