#include "report/watch_service.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "gpu/source_words.h"
#include "report/json.h"
#include "report/json_values.h"
#include "inventory/events.h"
#include "report/terminal_text.h"
#include "util/time_text.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

using nlohmann::ordered_json;

ordered_json head(const char* event, Level level, double time) {
  return event_head(event, level_name(level), time);
}


std::string reaping_text(const WatchStart& s) {
  if (!s.reap_orphans_after) return "reaping off";
  std::string text = "reaping orphans after " + duration_as_option(*s.reap_orphans_after);
  if (s.reap_dry_run) text += " (dry run: announced, nothing signalled)";
  if (!s.keep.empty()) text += " except '" + terminal_text(s.keep) + "'";
  return text;
}

// One change in words: "reaping orphans after 15m (was off)".
std::string change_text(const OptionChange& c) {
  auto value = [&](const std::string& v) -> std::string {
    if (c.key == "reap-orphans-after") return v.empty() ? "off" : "after " + v;
    if (c.key == "keep") return v.empty() ? "none" : "'" + terminal_text(v) + "'";
    if (c.key == "per-holder-metrics" || c.key == "reap-dry-run") return v == "true" ? "on" : "off";
    if (c.key == "listen") return v.empty() ? "off" : terminal_text(v);
    return v.empty() ? "none" : terminal_text(v);
  };
  const std::string& label = c.words.empty() ? c.key : c.words;
  std::string text = fmt::format("{} {} (was {})", label, value(c.after), value(c.before));
  // A reload that drops --keep (W3-12c): "never reaping holders matching none" read as
  // if nothing were reaped.
  if (c.key == "keep" && c.after.empty())
    text = fmt::format("no holder kept from reaping by --keep (was {})", value(c.before));
  if (!c.applies_now) text += " at the next start: a reload does not change it";
  return text;
}

}  // namespace

const char* level_name(Level level) {
  switch (level) {
    case Level::error:
      return "error";
    case Level::warning:
      return "warning";
    case Level::notice:
      return "notice";
    case Level::info:
      return "info";
  }
  return "info";
}

int syslog_priority(Level level) {
  switch (level) {
    case Level::error:
      return 3;
    case Level::warning:
      return 4;
    case Level::notice:
      return 5;
    case Level::info:
      return 6;
  }
  return 6;
}

Level event_level(inventory::EventKind kind) {
  using inventory::EventKind;
  switch (kind) {
    case EventKind::orphaned_memory:
    case EventKind::zombie_leader:
    case EventKind::unattributed_memory:
    case EventKind::ghost_gpu:
      return Level::warning;
    case EventKind::source_down:
    case EventKind::reap_failed:
      return Level::error;
    case EventKind::reap_planned:
    case EventKind::reaped:
      return Level::notice;
    case EventKind::memory_freed:
    case EventKind::source_up:
    case EventKind::ghost_gpu_gone:
      return Level::info;
  }
  return Level::warning;
}

std::string stamp(double time) {
  return rfc3339(WallTime(std::chrono::round<std::chrono::microseconds>(
      std::chrono::duration<double>(time))));
}

// "; the command line overrides listen, keep in FILE" (the file's keys it sets aside).
static std::string overrides_text(const WatchStart& s) {
  if (s.overridden.empty() || s.config.empty()) return "";
  std::string keys;
  for (const auto& k : s.overridden) keys += (keys.empty() ? "" : ", ") + k;
  return "; the command line overrides " + keys + " in " + terminal_text(s.config);
}

// "metrics on https://A/metrics (basic auth: 2 users)", or "no metrics listener".
static std::string listener_text(const WatchStart& s) {
  if (!s.listen) return "no metrics listener";
  std::string text = fmt::format("metrics on {}://{}/metrics", s.tls ? "https" : "http",
                                 terminal_text(*s.listen));
  if (s.users > 0)
    text += fmt::format(" (basic auth: {} user{})", s.users, s.users == 1 ? "" : "s");
  return text;
}

std::string watch_started_line(const WatchStart& s, double time, const Style& style) {
  return fmt::format(
      "{} {} (pid {}): {}, status socket {}, watching {} GPU{}; {}; {}; {}\n",
      style.dim(stamp(time)), style.bold("gpureap watch started"), s.pid, listener_text(s),
      terminal_text(s.socket), s.gpus, s.gpus == 1 ? "" : "s", reaping_text(s),
      s.textfile ? "textfile " + terminal_text(*s.textfile) : std::string("no textfile"),
      s.config.empty() ? std::string("no options file")
                       : "options from " + terminal_text(s.config) + overrides_text(s));
}

std::string watch_started_json(const WatchStart& s, double time) {
  ordered_json doc = head("started", Level::info, time);
  doc["pid"] = s.pid;
  doc["listen"] = s.listen ? ordered_json(*s.listen) : ordered_json(nullptr);
  doc["tls"] = s.tls;
  doc["basic_auth_users"] = s.users;
  doc["socket"] = s.socket;
  doc["gpu_count"] = s.gpus;  // a count: "gpus" is a list of GPUs wherever it appears
  doc["textfile"] = s.textfile ? ordered_json(*s.textfile) : ordered_json(nullptr);
  doc["reap_orphans_after"] =
      s.reap_orphans_after ? ordered_json(std::chrono::duration<double>(*s.reap_orphans_after).count())
                           : ordered_json(nullptr);
  doc["reap_dry_run"] = s.reap_dry_run;
  doc["keep"] = text_or_null(s.keep);
  doc["config"] = text_or_null(s.config);
  doc["overridden"] = s.overridden;
  return json_line(doc);
}

std::string watch_reloaded_line(double time, const std::string& config,
                                const std::vector<OptionChange>& changes, const Style& style) {
  std::string what;
  for (const auto& c : changes) what += (what.empty() ? "" : "; ") + change_text(c);
  return fmt::format("{} {} {}: {}\n", style.dim(stamp(time)), style.bold("gpureap watch reloaded"),
                     config.empty() ? "(no options file)" : terminal_text(config),
                     what.empty() ? "nothing changed" : what);
}

std::string watch_reloaded_json(double time, const std::string& config,
                                const std::vector<OptionChange>& changes) {
  ordered_json doc = head("reloaded", Level::notice, time);
  doc["config"] = text_or_null(config);
  ordered_json list = ordered_json::array();
  for (const auto& c : changes)
    list.push_back({{"key", c.key},
                    {"before", text_or_null(c.before)},
                    {"after", text_or_null(c.after)},
                    {"applies", c.applies_now ? "now" : "next start"}});
  doc["changes"] = std::move(list);
  return json_line(doc);
}

std::string watch_reload_refused_line(double time, const std::string& config,
                                      const std::string& why, const Style& style) {
  return fmt::format("{} {} {}: {}; keeping the options in force\n", style.dim(stamp(time)),
                     style.yellow("gpureap watch did not reload"),
                     config.empty() ? "(no options file)" : terminal_text(config),
                     terminal_text(why));
}

std::string watch_reload_refused_json(double time, const std::string& config,
                                      const std::string& why) {
  ordered_json doc = head("reload_refused", Level::warning, time);
  doc["config"] = text_or_null(config);
  doc["reason"] = why;
  return json_line(doc);
}

std::string watch_source_line(double time, const SourceNotice& n, const Style& style) {
  if (n.yielded)
    return fmt::format(
        "{} {} (asked by {}): a GPU reset or MIG change can run; /proc is still watched, "
        "without memory figures; NVML is taken up again at {}, or sooner on SIGUSR2 or a "
        "resume request\n",
        style.dim(stamp(time)), style.yellow("NVML let go"), terminal_text(n.by), stamp(n.until));
  return fmt::format("{} {} ({}){}\n", style.dim(stamp(time)), style.green("NVML taken up again"),
                     terminal_text(n.by), n.note.empty() ? "" : ": " + terminal_text(n.note));
}

std::string watch_source_json(double time, const SourceNotice& n) {
  ordered_json doc = head(n.yielded ? gpu::source_words::kYielded : gpu::source_words::kResumed, Level::notice, time);
  doc["by"] = n.by;
  if (n.yielded)
    doc["until"] = n.until;
  else
    doc["note"] = text_or_null(n.note);
  return json_line(doc);
}

std::string_view enum_name(GateStep step) {
  switch (step) {
    case GateStep::closed: return "closed";
    case GateStep::opened: return "opened";
    case GateStep::kept_closed: return "kept_closed";
    case GateStep::left_alone: return "left_alone";
    case GateStep::would_close: return "would_close";
    case GateStep::would_open: return "would_open";
    case GateStep::failed: return "failed";
  }
  return {};
}

static std::string_view gate_step_words(GateStep step) {
  switch (step) {
    case GateStep::closed: return "closed";
    case GateStep::opened: return "opened again";
    case GateStep::kept_closed: return "already closed by gpureap, kept so";
    case GateStep::left_alone: return "left alone (closed by someone else)";
    case GateStep::would_close: return "would close (--gate-dry-run)";
    case GateStep::would_open: return "would open again (--gate-dry-run)";
    case GateStep::failed: return "could not act";
  }
  return {};
}

std::string watch_gate_line(double time, const GateNotice& n, const Style& style) {
  const std::string words(gate_step_words(n.step));
  const std::string what = n.step == GateStep::failed   ? style.red(words)
                           : n.step == GateStep::opened ? style.green(words)
                                                        : style.yellow(words);
  return fmt::format("{} gate {}: {} {} ({:.3f} s after the verdict){}\n", style.dim(stamp(time)),
                     terminal_text(n.mode), terminal_text(n.target), what, n.seconds,
                     n.detail.empty() ? "" : ": " + terminal_text(n.detail));
}

std::string watch_gate_json(double time, const GateNotice& n) {
  ordered_json doc = head("gate",
                          n.step == GateStep::failed    ? Level::error
                          : n.step == GateStep::closed ? Level::warning
                                                        : Level::notice,
                          time);
  doc["mode"] = n.mode;
  doc["step"] = enum_name(n.step);
  doc["target"] = n.target;
  doc["detail"] = n.detail;
  doc["seconds"] = n.seconds;
  return json_line(doc);
}

std::string watch_stopped_line(double time, pid_t pid, const std::string& why,
                               const Style& style) {
  return fmt::format("{} {} (pid {}): {}\n", style.dim(stamp(time)),
                     style.bold("gpureap watch stopped"), pid, terminal_text(why));
}

std::string watch_stopped_json(double time, pid_t pid, const std::string& why) {
  ordered_json doc = head("stopped", Level::info, time);
  doc["pid"] = pid;
  doc["reason"] = why;
  return json_line(doc);
}

std::string watch_service_status(const inventory::Inventory& inv,
                                 const inventory::Event* last_event, bool source_yielded) {
  std::set<proc::ProcessId> orphans;
  std::uint64_t bytes = 0;
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders)
      if (gh.holder.orphaned && gh.uses_gpu) {
        orphans.insert(gh.holder.id);
        bytes += gh.gpu_bytes.value_or(0);
      }
  std::string text = source_yielded ? "NVML let go for a GPU reset; " : "";
  text += fmt::format("{} GPU{} watched; ", inv.gpus.size(), inv.gpus.size() == 1 ? "" : "s");
  text += orphans.empty() ? std::string("no orphaned holder")
                          : fmt::format("{} orphaned holder{} ({})", orphans.size(),
                                        orphans.size() == 1 ? "" : "s", format_bytes(bytes));
  if (last_event) {
    text += fmt::format("; last event: {}", enum_name(last_event->kind));
    if (last_event->gpu) text += fmt::format(" on GPU {}", *last_event->gpu);
    text += " at " + stamp(last_event->time);
  } else {
    text += "; no event yet";
  }
  return text;
}

std::string agent_health_json(const AgentHealth& health) {
  ordered_json doc;
  doc["status"] = health.degraded.empty() ? "ok" : "degraded";
  doc["pid"] = health.pid;
  doc["reasons"] = health.degraded;
  doc["notes"] = health.notes;
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace gpureap::report
