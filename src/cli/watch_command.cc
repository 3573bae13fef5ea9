// `gpureap watch`: the resident node agent. Parse -> node -> agent loop (src/agent)
// -> every event rendered by report/watch_events, one line each, as it happens.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <set>
#include <string_view>

#include "agent/agent.h"
#include "agent/http_server.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "inventory/agent_client.h"
#include "report/terminal_text.h"
#include "report/watch_events.h"
#include "util/pattern.h"
#include "util/queued_writer.h"
#include "util/text.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

/// The options as given (strings: checked by to_agent_options, so that an options
/// file re-read on SIGHUP goes through the same checks).
struct WatchFlags {
  std::string listen = agent::kDefaultListen;
  bool no_listen = false;
  std::string textfile;
  std::string tick = duration_flag(agent::kDefaultTick);
  std::string full_scan = duration_flag(agent::kDefaultFullScan);
  bool per_holder = false;
  std::string socket_group;
  std::string reap_after;
  std::string keep;
  bool reap_dry_run = false;
  std::string config;
};

void add_reloadable_options(CLI::App& app, WatchFlags& f) {
  app.add_option("--tick", f.tick,
                 "How often NVML and new processes are read (a parent's death is seen at once, "
                 "whatever the tick)")
      ->default_val(duration_flag(agent::kDefaultTick))
      ->type_name("DURATION");
  app.add_flag("--per-holder-metrics", f.per_holder,
               "Also export one series per holder (pid, command, user): opt-in, since pids churn "
               "and name users");
  app.add_option("--reap-orphans-after", f.reap_after,
                 "Free holders that have been orphaned for longer than this (e.g. 10m), through "
                 "free's engine and protections; off by default")
      ->type_name("DURATION");
  app.add_option("--keep", f.keep,
                 "Never reap a holder whose command line matches this regular expression (RE2)")
      ->type_name("REGEX");
  app.add_flag("--reap-dry-run", f.reap_dry_run,
               "Announce what --reap-orphans-after would free, and free nothing");
}

Result<std::chrono::milliseconds> positive_duration(const std::string& flag,
                                                    const std::string& text) {
  auto d = parse_duration(text);
  if (!d) return fail(fmt::format("{}: {}", flag, d.error().message));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  if (ms.count() <= 0) return fail(fmt::format("{}: must be more than 0 (got {})", flag, text));
  return ms;
}

Result<agent::AgentOptions> to_agent_options(const WatchFlags& f, const std::string& state_dir) {
  agent::AgentOptions o;
  o.state_dir = state_dir;
  auto tick = positive_duration("--tick", f.tick);
  if (!tick) return std::unexpected(tick.error());
  o.watch.tick = *tick;
  auto full = positive_duration("--full-scan-interval", f.full_scan);
  if (!full) return std::unexpected(full.error());
  o.watch.full_scan = *full;
  if (!f.no_listen) o.listen = f.listen;
  if (!f.textfile.empty()) o.textfile_dir = f.textfile;
  o.per_holder = f.per_holder;
  if (!f.socket_group.empty()) {
    if (const group* g = ::getgrnam(f.socket_group.c_str())) {
      o.socket_group = g->gr_gid;
    } else if (auto gid = parse_count(f.socket_group, "--socket-group", 0, 0xfffffffe); gid) {
      o.socket_group = static_cast<gid_t>(*gid);
    } else {
      return fail(fmt::format("--socket-group: no group named {}", f.socket_group));
    }
  }
  if (!f.reap_after.empty()) {
    auto after = positive_duration("--reap-orphans-after", f.reap_after);
    if (!after) return std::unexpected(after.error());
    o.reap_orphans_after = *after;
  }
  if (!f.keep.empty()) {
    auto pattern = Pattern::compile(f.keep);
    if (!pattern) return fail("--keep: " + pattern.error().message);
    o.keep_regex = f.keep;
  }
  o.reap_dry_run = f.reap_dry_run;
  if (o.reap_dry_run && !o.reap_orphans_after)
    return fail("--reap-dry-run: needs --reap-orphans-after (what would be reaped, and when)");
  o.version = version_string();
  return o;
}

/// The keys an options file may set (the reloadable options).
constexpr std::array<std::string_view, 5> kFileKeys{"tick", "per-holder-metrics",
                                                    "reap-orphans-after", "keep", "reap-dry-run"};

/// Every line of an options file is blank, a comment or `key = value` with a key
/// of kFileKeys: CLI11's reader drops what it does not know, and a dropped
/// `keep` (misspelt, or under an INI `[section]`) would get the holder it
/// protects reaped (W2-05). The error names the line and the key. A file that
/// cannot be read is left to CLI11, which says why.
Result<void> check_options_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = trim(line);
    if (text.empty() || text.front() == '#' || text.front() == ';') continue;
    auto where = [&] { return fmt::format("--config {}, line {}", path, number); };
    if (text.front() == '[')
      return fail(
          fmt::format("{}: sections are not read ({}): put the keys at the top of the "
                      "file, without a section",
                      where(), report::terminal_text(text)));
    const auto eq = text.find('=');
    if (eq == std::string_view::npos)
      return fail(fmt::format("{}: expected `key = value`, got '{}'", where(),
                              report::terminal_text(text)));
    std::string_view key = trim(text.substr(0, eq));
    if (key.size() >= 2 && key.front() == '"' && key.back() == '"')
      key = key.substr(1, key.size() - 2);
    if (std::find(kFileKeys.begin(), kFileKeys.end(), key) == kFileKeys.end())
      return fail(fmt::format("{}: unknown key '{}' (the file takes {})", where(),
                              report::terminal_text(key), fmt::join(kFileKeys, ", ")));
  }
  return {};
}

/// The options file (TOML/INI, `key = value`, CLI11's reader): its keys override
/// the defaults, the command line overrides both.
Result<WatchFlags> read_options_file(const std::string& path, const WatchFlags& given,
                                     const std::set<std::string>& on_command_line) {
  if (auto checked = check_options_file(path); !checked) return std::unexpected(checked.error());
  CLI::App app("gpureap watch options file");
  WatchFlags file = given;
  add_reloadable_options(app, file);
  app.set_config("--config", path, "", true);
  app.allow_config_extras(false);
  try {
    app.parse(std::vector<std::string>{});
  } catch (const CLI::ParseError& e) {
    return fail(fmt::format("--config {}: {}", path, e.what()));
  }
  WatchFlags merged = given;
  auto take = [&](const char* name, auto WatchFlags::*field) {
    if (!on_command_line.contains(name)) merged.*field = file.*field;
  };
  take("tick", &WatchFlags::tick);
  take("per-holder-metrics", &WatchFlags::per_holder);
  take("reap-orphans-after", &WatchFlags::reap_after);
  take("keep", &WatchFlags::keep);
  take("reap-dry-run", &WatchFlags::reap_dry_run);
  return merged;
}

/// The reloadable options in force, for the line a reload prints: each key of
/// the options file with its value (given as text).
std::string reloadable_in_force(const WatchFlags& f) {
  return fmt::format(
      "tick={}, per-holder-metrics={}, reap-orphans-after={}, keep={}, "
      "reap-dry-run={}",
      f.tick, f.per_holder, f.reap_after.empty() ? "off" : f.reap_after,
      f.keep.empty() ? "(none)" : "'" + f.keep + "'", f.reap_dry_run);
}

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

void on_stop(int) { g_stop.store(true); }
void on_hup(int) { g_reload.store(true); }

// Event lines waiting for stdout; past this many the next ones are dropped.
constexpr std::size_t kEventQueueLines = 1024;

int run_watch(const GlobalOptions& global, const WatchFlags& given,
              const std::set<std::string>& on_command_line) {
  auto state = inventory::state_dir();
  if (!state) {
    print_err(fmt::format("gpureap watch: {} (the agent keeps its lock and socket there)\n",
                          report::terminal_text(state.error().message)));
    return kExitSystem;
  }
  WatchFlags flags = given;
  if (!flags.config.empty()) {
    auto merged = read_options_file(flags.config, given, on_command_line);
    if (!merged) {
      print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(merged.error().message)));
      return kExitUsage;
    }
    flags = std::move(*merged);
  }
  auto options = to_agent_options(flags, *state);
  if (!options) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(options.error().message)));
    return kExitUsage;
  }

  // The agent's looks are its own: asking the agent socket would ask itself.
  inventory::Node node = open_node(global, *state, FirstLook::scan);
  if (node.device_error()) {
    print_err(fmt::format("gpureap watch: {}\n",
                          report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }

  struct sigaction stop {};
  stop.sa_handler = on_stop;
  ::sigaction(SIGTERM, &stop, nullptr);
  ::sigaction(SIGINT, &stop, nullptr);
  struct sigaction hup {};
  hup.sa_handler = on_hup;
  ::sigaction(SIGHUP, &hup, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the agent
  node.set_interrupt_flag(&g_stop);

  options->problems = [](const std::string& problem) {
    print_err(fmt::format("gpureap watch: {}\n", report::terminal_text(problem)));
  };
  // The reaper's signals are recorded (docs/audit.md), as free's are.
  options->audit = open_audit("watch", *state);

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
  auto reload = [&]() -> Result<agent::AgentOptions> {
    auto merged = flags.config.empty() ? Result<WatchFlags>(given)
                                       : read_options_file(flags.config, given, on_command_line);
    if (!merged) {
      print_err(fmt::format("gpureap watch: SIGHUP: {}; keeping the options in force\n",
                            report::terminal_text(merged.error().message)));
      return std::unexpected(merged.error());
    }
    auto fresh = to_agent_options(*merged, *state);
    if (!fresh)
      print_err(fmt::format("gpureap watch: SIGHUP: {}; keeping the options in force\n",
                            report::terminal_text(fresh.error().message)));
    else if (!flags.config.empty())
      print_err(fmt::format("gpureap watch: reloaded {}: {}\n", report::terminal_text(flags.config),
                            report::terminal_text(reloadable_in_force(*merged))));
    return fresh;
  };
  std::string socket = inventory::agent_socket_path(*state);
  auto started = [&](const std::optional<std::string>& listen, std::size_t gpus) {
    out.push(json ? report::watch_started_json(::getpid(), listen, socket, gpus)
                  : report::watch_started_line(::getpid(), listen, socket, gpus, style));
  };
  auto ran = agent::run_agent(node, std::move(*options), sink, g_stop, g_reload, reload, started);
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
      "of /proc every --full-scan-interval. SIGTERM or SIGINT stop it; SIGHUP re-reads "
      "--config.\n\n"
      "Examples:\n"
      "  gpureap watch                                  metrics on http://127.0.0.1:9847/metrics\n"
      "  gpureap --json watch --no-listen               events as JSON lines only\n"
      "  gpureap watch --textfile /var/lib/prometheus/node-exporter\n"
      "  gpureap watch --reap-orphans-after 10m --keep 'jupyter'   free long-orphaned holders\n"
      "Metrics, events and the port: docs/watch.md.");
  sub->add_option("--listen", flags->listen,
                  "Serve /metrics on ADDR:PORT (loopback by default; port 0 picks a free port)")
      ->default_val(agent::kDefaultListen)
      ->type_name("ADDRESS");
  sub->add_flag("--no-listen", flags->no_listen, "Serve no HTTP at all");
  sub->add_option("--textfile", flags->textfile,
                  "Also write the metrics to DIR/gpureap.prom at every change (node_exporter's "
                  "textfile collector; atomic rename)")
      ->type_name("DIR");
  sub->add_option("--full-scan-interval", flags->full_scan,
                  "How often all of /proc is scanned, as a safety net")
      ->default_val(duration_flag(agent::kDefaultFullScan))
      ->type_name("DURATION");
  sub->add_option("--socket-group", flags->socket_group,
                  "Let this group's members ask the agent (socket mode 0660); they see what their "
                  "own scan would show them, never more. Default: root only (0600)")
      ->type_name("GROUP");
  add_reloadable_options(*sub, *flags);
  sub->add_option("--config", flags->config,
                  "Options file (`key = value` lines: tick, per-holder-metrics, "
                  "reap-orphans-after, keep, reap-dry-run); the command line wins; SIGHUP "
                  "re-reads it")
      ->type_name("PATH");
  sub->footer(kWatchExitHelp);
  sub->callback([&run, &global, flags, sub] {
    std::set<std::string> given;
    for (const char* name : {"tick", "per-holder-metrics", "reap-orphans-after", "keep",
                             "reap-dry-run"})
      if (sub->count(std::string("--") + name) > 0) given.insert(name);
    run = [&global, flags, given] { return run_watch(global, *flags, given); };
  });
}

}  // namespace gpureap::cli
