// `gpureap watch`: the resident node agent. Parse -> node -> agent loop (src/agent)
// -> every event rendered by report/watch_events, one line each, as it happens.

#include <expected>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <set>
#include <string_view>

#include "agent/agent.h"
#include "agent/option_table.h"
#include "agent/option_texts.h"
#include "agent/http_server.h"
#include "agent/options_file.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "inventory/agent_client.h"
#include "report/terminal_text.h"
#include "report/watch_events.h"
#include "report/watch_service.h"
#include "util/pattern.h"
#include "util/queued_writer.h"
#include "util/signal_flags.h"
#include "util/signal_name.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

/// Where `gpureap watch` reads its options when --config is not given (read when
/// it exists; absent is fine). docs/watch.md, "Options file and SIGHUP".
constexpr const char* kDefaultConfig = "/etc/gpureap/watch.conf";

/// The options as given (agent::OptionTexts, checked by agent::resolve_options, so that
/// an options file, read at start and re-read on SIGHUP, goes through the same checks as
/// the command line), and what only the command line has.
struct WatchFlags : agent::OptionTexts {
  std::string config;
  /// Keys the options file sets that the command line overrides (said in the start line).
  std::vector<std::string> overridden;
};

/// Every option of `watch` but --config, from the one table (agent/option_table.h), on
/// the command line and in the options file alike: its key is the long name without the
/// dashes, and the command line wins.
void add_file_options(CLI::App& app, WatchFlags& f) {
  for (const auto& row : agent::watch_option_table()) {
    const std::string name = "--" + row.key;
    if (row.flag) {
      app.add_flag(name, f.*(row.flag), row.help);
      continue;
    }
    CLI::Option* option = row.list ? app.add_option(name, f.*(row.list), row.help)
                                   : app.add_option(name, f.*(row.text), row.help);
    option->type_name(row.type_name);
    if (!row.default_text.empty()) option->default_val(row.default_text);
  }
}

/// The options file (TOML/INI, `key = value`, CLI11's reader): its keys override
/// the defaults, the command line overrides both.
Result<WatchFlags> read_options_file(const std::string& path, const WatchFlags& given,
                                     const std::set<std::string>& on_command_line) {
  if (auto trusted = agent::check_file_owner("--config", path,
                                      "steers the agent (reaping, --keep, the listener)");
      !trusted)
    return std::unexpected(trusted.error());
  const std::vector<std::string> keys = agent::watch_option_keys();
  auto in_file =
      agent::check_options_file(path, std::vector<std::string_view>(keys.begin(), keys.end()));
  if (!in_file) return std::unexpected(in_file.error());
  CLI::App app("gpureap watch options file");
  WatchFlags file = given;
  add_file_options(app, file);
  app.set_config("--config", path, "", true);
  app.allow_config_extras(false);
  try {
    app.parse(std::vector<std::string>{});
  } catch (const CLI::ParseError& e) {
    return fail(fmt::format("--config {}: {}", path, e.what()));
  }
  WatchFlags merged = given;
  merged.overridden.clear();
  for (const auto& row : agent::watch_option_table()) {
    if (on_command_line.contains(row.key)) {
      if (in_file->contains(row.key)) merged.overridden.push_back(row.key);
      continue;
    }
    if (row.text) merged.*(row.text) = file.*(row.text);
    if (row.flag) merged.*(row.flag) = file.*(row.flag);
    if (row.list) merged.*(row.list) = file.*(row.list);
  }
  return merged;
}

/// The options file in force: --config's (which must exist), else kDefaultConfig
/// when it exists, else none ("").
std::string config_path(const WatchFlags& given, bool explicit_config) {
  if (explicit_config) return given.config;
  return ::access(kDefaultConfig, F_OK) == 0 ? kDefaultConfig : "";
}

/// The flags with the options file's keys merged in (`path` "": the flags alone).
Result<WatchFlags> with_options_file(const std::string& path, const WatchFlags& given,
                                     const std::set<std::string>& on_command_line) {
  if (path.empty()) return given;
  return read_options_file(path, given, on_command_line);
}

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_reload{false};
std::atomic<bool> g_yield{false};
std::atomic<bool> g_resume{false};

// Event lines waiting for stdout; past this many the next ones are dropped.
constexpr std::size_t kEventQueueLines = 1024;

// The agent's options from the flags (agent::resolve_options), with this binary's version.
Result<agent::AgentOptions> agent_options(const WatchFlags& flags, const std::string& state) {
  auto options = agent::resolve_options(flags, state);
  if (options) options->version = version_string();
  return options;
}

// What the agent starts with: its state directory, the options file found, the flags
// with that file under the command line, and the agent's options from them.
struct StartingOptions {
  std::string state;
  std::string config;
  WatchFlags flags;
  agent::AgentOptions options;
};

// The options in force at the start, or the exit status (said on stderr) when they
// cannot be had: 3 without a state directory, 2 for a bad file or flag.
std::expected<StartingOptions, int> starting_options(const WatchFlags& given, bool explicit_config,
                                                     const std::set<std::string>& on_command_line) {
  auto state = inventory::state_dir();
  if (!state) {
    print_err(fmt::format("gpureap watch: {} (the agent keeps its lock and socket there)\n",
                          report::terminal_text(state.error().message)));
    return std::unexpected(kExitSystem);
  }
  std::string config = config_path(given, explicit_config);
  auto flags = with_options_file(config, given, on_command_line);
  if (!flags) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(flags.error().message)));
    return std::unexpected(kExitUsage);
  }
  auto options = agent_options(*flags, *state);
  if (!options) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(options.error().message)));
    return std::unexpected(kExitUsage);
  }
  return StartingOptions{std::move(*state), std::move(config), std::move(*flags),
                         std::move(*options)};
}

// The start line's facts that the options give (the listen address and GPU count come
// when the agent has started).
report::WatchStart watch_start(const StartingOptions& s) {
  report::WatchStart start;
  start.pid = ::getpid();
  start.socket = inventory::agent_socket_path(s.state);
  start.textfile = s.options.textfile_dir;
  start.tls = s.options.web.tls();
  start.users = s.options.web.users.size();
  start.reap_orphans_after = s.options.reap_orphans_after;
  start.reap_dry_run = s.options.reap_dry_run;
  start.keep = s.options.keep_regex;
  start.config = s.config;
  start.overridden = s.flags.overridden;
  return start;
}

int run_watch(const GlobalOptions& global, const WatchFlags& given, bool explicit_config,
              const std::set<std::string>& on_command_line) {
  auto starting = starting_options(given, explicit_config, on_command_line);
  if (!starting) return starting.error();
  const std::string* state = &starting->state;
  std::string& config = starting->config;
  agent::AgentOptions* options = &starting->options;

  // The agent's looks are its own: asking the agent socket would ask itself.
  inventory::Node node = open_node(global, *state, FirstLook::scan);
  if (node.device_error()) {
    print_err(fmt::format("gpureap watch: {}\n",
                          report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }

  SignalFlags caught;
  caught.raise_on(SIGTERM, g_stop, &g_stop_signal).raise_on(SIGINT, g_stop, &g_stop_signal);
  caught.raise_on(SIGHUP, g_reload).raise_on(SIGUSR1, g_yield).raise_on(SIGUSR2, g_resume);
  // timeout(1) sends SIGTERM to the agent, then to its process group; systemd, to the
  // main process and then the unit's cgroup. One arriving after the default handlers
  // were put back (the NVML helper is still being waited for) killed a stopping agent.
  caught.keep_until_exit();
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the agent
  node.set_interrupt_flag(&g_stop);

  options->problems = [](const std::string& problem) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(problem)));
  };
  // The reaper's signals are recorded (docs/audit.md), as free's are.
  options->audit = open_audit("watch", *state);
  // Each reap runs on the reaper's thread with a node of its own (its own NVML client),
  // stopped by the same signal as the agent.
  options->reap_node = [&global, dir = *state] {
    auto reap_node = std::make_unique<inventory::Node>(open_node(global, dir, FirstLook::scan));
    reap_node->set_interrupt_flag(&g_stop);
    return reap_node;
  };
  // Under a Type=notify unit: READY=1, STATUS=, RELOADING=1, STOPPING=1, WATCHDOG=1.
  std::string notify_problem;
  options->notifier = agent::ServiceNotifier::from_environment(&notify_problem);
  if (!notify_problem.empty()) options->problems(notify_problem);

  const bool json = global.json;
  const report::Style style = stdout_style(global);
  // Events go through a queue written by a thread of its own: a reader that
  // stops reading (journald under pressure, a paused pipe) costs lines, counted
  // and owned up to in place, never the agent's loop or its SIGTERM (W2-06).
  QueuedWriter out(STDOUT_FILENO, kEventQueueLines, [json, style](std::uint64_t dropped) {
    return json ? report::watch_dropped_json(dropped) : report::watch_dropped_line(dropped, style);
  });
  agent::EventSink sink = [&out, json, style](const inventory::Event& event) {
    return out.push(json ? report::watch_event_json(event)
                         : report::watch_event_line(event, style));
  };

  agent::AgentHooks hooks;
  hooks.reload_options = [&]() -> Result<agent::AgentOptions> {
    // The file is looked for again: /etc/gpureap/watch.conf may have been written
    // since the start.
    config = config_path(given, explicit_config);
    auto merged = with_options_file(config, given, on_command_line);
    auto fresh = merged ? agent_options(*merged, *state)
                        : Result<agent::AgentOptions>(std::unexpected(merged.error()));
    if (!fresh) {
      print_err(fmt::format("gpureap watch: SIGHUP: {}; keeping the options in force\n",
                            report::terminal_text(fresh.error().message)));
      // And an event in the agent's log, where the reloads it applied are said.
      const double now = agent::wall_now();
      out.push(json ? report::watch_reload_refused_json(now, config, fresh.error().message)
                    : report::watch_reload_refused_line(now, config, fresh.error().message,
                                                        style));
    }
    return fresh;
  };
  hooks.reloaded = [&](const std::vector<agent::OptionChange>& changes) {
    const double now = agent::wall_now();
    out.push(json ? report::watch_reloaded_json(now, config, changes)
                  : report::watch_reloaded_line(now, config, changes, style));
  };
  hooks.nvml = [&](const agent::SourceYield& y) {
    const report::SourceNotice notice{y.yielded, y.by, y.until, y.note};
    const double now = agent::wall_now();
    out.push(json ? report::watch_source_json(now, notice)
                  : report::watch_source_line(now, notice, style));
  };
  hooks.gate = [&](const report::GateNotice& n) {
    const double now = agent::wall_now();
    out.push(json ? report::watch_gate_json(now, n) : report::watch_gate_line(now, n, style));
  };
  hooks.stopping = [&] {
    const int sig = g_stop_signal.load();
    const std::string why = sig == SIGINT || sig == SIGTERM ? signal_name(sig) : "stopped";
    const double now = agent::wall_now();
    out.push(json ? report::watch_stopped_json(now, ::getpid(), why)
                  : report::watch_stopped_line(now, ::getpid(), why, style));
  };
  report::WatchStart start = watch_start(*starting);
  hooks.started = [&](const std::optional<std::string>& listen, std::size_t gpus) {
    start.listen = listen;
    start.gpus = gpus;
    const double now = agent::wall_now();
    out.push(json ? report::watch_started_json(start, now)
                  : report::watch_started_line(start, now, style));
  };
  const agent::AgentSignals signals{g_stop, g_reload, g_yield, g_resume};
  auto ran = agent::run_agent(node, std::move(*options), sink, signals, hooks);
  if (!ran) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(ran.error().message)));
    return kExitSystem;
  }
  return kExitOk;
}

}  // namespace

void add_watch_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto flags = std::make_shared<WatchFlags>();
  auto* sub = app.add_subcommand(
      "watch",
      "Run the node agent: events, metrics and instant `status` answers. In the foreground, it\n"
      "keeps an up-to-date inventory of every GPU, announces\n"
      "orphaned, zombie-held and unexplained memory the moment it appears (one line per event;\n"
      "JSON lines with --json), exports Prometheus metrics, and answers `gpureap status` (and the\n"
      "first look of `free` and `wait`) instantly over <state dir>/agent.sock.\n"
      "It reads NVML and new processes every --tick, watches each holder's parent through a\n"
      "pidfd (an orphan is announced within milliseconds of its parent's death) and re-scans all\n"
      "of /proc every --full-scan-interval. Every option is also a key of the options file\n"
      "(/etc/gpureap/watch.conf, or --config). SIGTERM or SIGINT stop it; SIGHUP re-reads the\n"
      "options file; SIGUSR1 makes it let go of NVML for 2 minutes (a GPU reset needs no\n"
      "client), SIGUSR2 takes it up again. Under systemd it is a Type=notify service.\n\n"
      "Examples:\n"
      "  gpureap watch                                  metrics on http://127.0.0.1:9847/metrics\n"
      "  gpureap --json watch --no-listen               events as JSON lines only\n"
      "  gpureap watch --textfile /var/lib/prometheus/node-exporter\n"
      "  gpureap watch --reap-orphans-after 10m --keep 'jupyter'   free long-orphaned holders\n"
      "Metrics, events, the options file and the port: docs/watch.md.");
  add_file_options(*sub, *flags);
  sub->add_option("--config", flags->config,
                  "Options file: `key = value` lines, one key per option above (listen, tick, "
                  "reap-orphans-after, keep, ...); the command line wins; SIGHUP re-reads it. "
                  "Default: /etc/gpureap/watch.conf when it exists")
      ->type_name("FILE");
  sub->footer(exit_status_help(kWatchExits));
  sub->callback([&run, &global, flags, sub] {
    std::set<std::string> given;
    for (const auto& row : agent::watch_option_table())
      if (sub->count("--" + row.key) > 0) given.insert(row.key);
    const bool explicit_config = sub->count("--config") > 0;
    run = [&global, flags, given, explicit_config] {
      return run_watch(global, *flags, explicit_config, given);
    };
  });
}

}  // namespace gpureap::cli
