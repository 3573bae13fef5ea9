#pragma once
// What `gpureap watch` says about itself, beside its events (watch_events.h): the
// start line that states the policy in force, the reload line that says what
// changed ("reaping orphans after 15m (was off)"), NVML let go and taken up again
// (around a GPU reset), the stop line; the STATUS= text systemd shows; and the
// severity of every line (JSON `level`, the journal's priority).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inventory/events.h"
#include "inventory/inventory.h"
#include "report/style.h"

namespace gpureap::report {

/// syslog's severities, the ones the agent uses.
enum class Level { error, warning, notice, info };
/// "error", "warning", "notice", "info": JSON `level`.
const char* level_name(Level level);
/// 3, 4, 5, 6: syslog(3)'s LOG_ERR … LOG_INFO, and the journal's PRIORITY.
int syslog_priority(Level level);
/// An event's severity: a leak or memory nobody explains is a warning, NVML down
/// and a failed reap an error, a reap a notice, memory freed and NVML up info.
Level event_level(inventory::EventKind kind);

/// The agent as it starts: where it serves, and the policy in force.
struct WatchStart {
  pid_t pid = 0;
  std::optional<std::string> listen;  // "ADDR:PORT" really bound; nullopt: no HTTP
  bool tls = false;                   // --web-config serves HTTPS
  std::size_t users = 0;              // --web-config's basic auth users; 0: none asked
  std::string socket;
  std::size_t gpus = 0;
  std::optional<std::string> textfile;
  std::optional<std::chrono::milliseconds> reap_orphans_after;  // nullopt: reaping off
  bool reap_dry_run = false;
  std::string keep;    // --keep's regular expression; "" none
  std::string config;  // the options file read; "" none
  /// Keys the file sets that the command line overrides ("listen"): never silently.
  std::vector<std::string> overridden;
};

/// "<RFC 3339> gpureap watch started (pid P): metrics on http[s]://A/metrics (basic
/// auth: N users, when asked), status
/// socket S, watching N GPUs; reaping orphans after 15m except 'REGEX' | reaping
/// off; textfile DIR | no textfile; options from FILE | no options file", then
/// "; the command line overrides listen in FILE" when it does.
std::string watch_started_line(const WatchStart& start, double time, const Style& style);
/// Every event line's <time> is "time" (RFC 3339), "time_unix" and "hostname"
/// (report::event_head).
/// {"schema_version":2,"event":"started","level":"info",<time>,"pid":P,"listen",
/// "tls","basic_auth_users","socket","gpu_count","textfile","reap_orphans_after" (seconds
/// or null),"reap_dry_run",
/// "keep","config"} on one line.
std::string watch_started_json(const WatchStart& start, double time);

/// One option a reload changed (agent/option_changes.h decides which apply now).
struct OptionChange {
  std::string key;     // the options file's key: "reap-orphans-after"
  std::string before;  // the value as the key takes it ("15m"); "" when off or unset
  std::string after;
  bool applies_now = false;  // false: at the next start
  std::string words;         // what the line calls it ("reaping orphans"); "": the key
};

/// "<RFC 3339> gpureap watch reloaded FILE: reaping orphans after 15m (was off);
/// listen 0.0.0.0:9847 (was 127.0.0.1:9847) at the next start", or ": nothing changed".
std::string watch_reloaded_line(double time, const std::string& config,
                                const std::vector<OptionChange>& changes, const Style& style);
/// {"schema_version":2,"event":"reloaded","level":"notice",<time>,"config":FILE,
/// "changes":[{"key","before","after","applies":"now"|"next start"}]}.
std::string watch_reloaded_json(double time, const std::string& config,
                                const std::vector<OptionChange>& changes);

/// A reload refused (an invalid or untrusted options file; SIGHUP or `systemctl
/// reload`): "<RFC 3339> gpureap watch did not reload FILE: WHY; keeping the options in
/// force".
std::string watch_reload_refused_line(double time, const std::string& config,
                                      const std::string& why, const Style& style);
/// {"schema_version":2,"event":"reload_refused","level":"warning",<time>,"config":FILE,
/// "reason":WHY}.
std::string watch_reload_refused_json(double time, const std::string& config,
                                      const std::string& why);

/// What `--gate` did (agent/gate.h): closed the node to new work (a Slurm drain),
/// opened it again, left it (closed already, or by someone else), what it would have
/// done (--gate-dry-run), or why it could not.
enum class GateStep { closed, opened, kept_closed, left_alone, would_close, would_open, failed };
/// Its name (util/enum_names.h): the JSON line's "step".
std::string_view enum_name(GateStep step);
struct GateNotice {
  std::string mode;    // "slurm"
  GateStep step = GateStep::closed;
  std::string target;  // "node gpu01"
  std::string detail;  // the reason set or found, or the error
  double seconds = 0;  // from the look's verdict to the step done
};
/// "<RFC 3339> gate slurm: drained node gpu01 (0.012 s after the verdict): gpureap: GPU 0 …".
std::string watch_gate_line(double time, const GateNotice& n, const Style& style);
/// {"schema_version":2,"event":"gate","level":…,<time>,"mode":…,"step":…,"target":…,
/// "detail":…,"seconds":S}.
std::string watch_gate_json(double time, const GateNotice& n);

/// NVML let go (`yielded`, until `until`) or taken up again, at whose request, and
/// what the asker said it did (a reset and its outcome).
struct SourceNotice {
  bool yielded = false;
  std::string by;
  double until = 0;
  std::string note;
};
std::string watch_source_line(double time, const SourceNotice& n, const Style& style);
/// {"schema_version":2,"event":<source_words::kYielded>|<kResumed>,"level":"notice",
/// <time>,"by":…,"until":T (yielded) | "note":… (resumed)}.
std::string watch_source_json(double time, const SourceNotice& n);

/// "<RFC 3339> gpureap watch stopped (pid P): WHY".
std::string watch_stopped_line(double time, pid_t pid, const std::string& why,
                               const Style& style);
/// {"schema_version":2,"event":"stopped","level":"info",<time>,"pid":P,"reason":WHY}.
std::string watch_stopped_json(double time, pid_t pid, const std::string& why);

/// systemd's STATUS= for the agent: "8 GPUs watched; 2 orphaned holders (16.0 GiB);
/// last event: orphaned_memory on GPU 3 at <RFC 3339>" (or "no event yet"); while
/// NVML is let go, "NVML let go for a GPU reset" first.
std::string watch_service_status(const inventory::Inventory& inv,
                                 const inventory::Event* last_event, bool source_yielded);

/// What /healthz says: degraded (503) with its reasons, or ok (200) with notes.
struct AgentHealth {
  pid_t pid = 0;
  std::vector<std::string> degraded;  // empty: healthy
  std::vector<std::string> notes;     // said, not degraded (NVML let go, ...)
};
/// {"status":"ok"|"degraded","pid":P,"reasons":[...],"notes":[...]} and a newline.
std::string agent_health_json(const AgentHealth& health);

/// `time` (seconds since the epoch) as RFC 3339 with the date: every agent line's stamp.
std::string stamp(double time);

}  // namespace gpureap::report
