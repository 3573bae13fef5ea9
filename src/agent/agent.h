#pragma once
// `gpureap watch`: the resident node agent. One loop thread owns the Watcher and
// everything it knows; the HTTP server's thread and the control socket's clients
// ask the loop for what they need (a fresh look, the metrics text), so there is
// no shared mutable state beyond the request queue.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/option_changes.h"
#include "agent/service_notify.h"
#include "agent/web_config.h"
#include "agent/watcher.h"
#include "inventory/events.h"
#include "inventory/node.h"
#include "reclaim/audit.h"
#include "report/metrics.h"
#include "report/watch_service.h"
#include "util/result.h"

namespace gpureap::agent {

/// Where the agent's own operating problems go, one sentence each, said once per
/// change of state (the textfile cannot be written; it can again): the CLI
/// prints them on stderr (library code never prints).
using ProblemSink = std::function<void(const std::string&)>;

struct AgentOptions {
  WatchOptions watch;
  std::optional<std::string> listen;        // ADDR:PORT for /metrics; nullopt: no HTTP
  WebConfig web;                            // --web-config: TLS and basic auth (none: plain HTTP)
  std::optional<std::string> textfile_dir;  // node_exporter textfile collector directory
  bool per_holder = false;                  // per-holder metric series
  std::string state_dir;                    // the lock and the control socket live here
  std::optional<gid_t> socket_group;        // 0660 + this group; nullopt: 0600 (root)
  std::optional<std::chrono::milliseconds> reap_orphans_after;  // nullopt: never reap
  std::string keep_regex;                   // holders whose command line matches are never reaped
  bool reap_dry_run = false;
  std::vector<std::string> gate;  // --gate modes (agent/gate.h); none: the node is never closed
  bool gate_dry_run = false;
  std::string version;   // for gpureap_build_info
  ProblemSink problems;  // nullptr: not said
  /// Where the reaper's signals and verdicts are recorded (actor watch-reaper). Required:
  /// run_agent fails without one.
  std::shared_ptr<reclaim::AuditSink> audit;
  /// systemd's notify socket (Type=notify): ready, status, reload, stop, watchdog.
  /// nullptr: not under such a unit.
  std::shared_ptr<ServiceNotifier> notifier;
};

/// How long the agent lets go of NVML when asked without a duration (SIGUSR1):
/// long enough for a GPU reset or a MIG change, short enough that a forgotten
/// request does not leave the node unwatched.
inline constexpr std::chrono::milliseconds kDefaultSourceYield{120000};
/// The longest yield a request may ask for.
inline constexpr std::chrono::milliseconds kMaxSourceYield{3600000};

/// The agent letting go of NVML (so that a GPU reset finds no client) or taking
/// it up again.
struct SourceYield {
  bool yielded = false;  // true: let go; false: resumed
  std::string by;        // who asked ("SIGUSR1", "pid 4242 gpureap"), or "the deadline"
  double until = 0;      // yielded: wall clock seconds when it resumes by itself
  std::string note;      // resumed: what the asker said it did ("reset GPU 0: succeeded")
};

/// Where events go (the CLI renders and prints them: library code never prints).
/// Must not wait for the output (a stalled reader would stop the agent); false
/// when the event was dropped instead, counted in gpureap_events_dropped_total.
using EventSink = std::function<bool(const inventory::Event&)>;

/// Called once the agent listens: the HTTP address really bound (port 0 picks
/// one; nullopt without --listen) and the number of GPUs it watches.
using StartedFn = std::function<void(const std::optional<std::string>& listen, std::size_t gpus)>;

/// The flags the CLI's signal handlers set; the loop reads and clears them.
struct AgentSignals {
  const std::atomic<bool>& stop;  // SIGTERM, SIGINT
  std::atomic<bool>& reload;      // SIGHUP
  std::atomic<bool>& yield_source;  // SIGUSR1: let go of NVML for kDefaultSourceYield
  std::atomic<bool>& resume_source; // SIGUSR2: take it up again now
};

/// What the agent says about itself, besides events (the CLI prints it).
struct AgentHooks {
  StartedFn started;
  /// SIGHUP: the options re-read (the CLI says why when it cannot: the old stay).
  std::function<Result<AgentOptions>()> reload_options;
  /// The reload applied: what changed (empty: nothing).
  std::function<void(const std::vector<OptionChange>&)> reloaded;
  std::function<void(const SourceYield&)> nvml;
  /// What --gate did (called from the gate's own thread).
  std::function<void(const report::GateNotice&)> gate;
  /// The loop ended (a stop signal): the agent is about to close everything.
  std::function<void()> stopping;
};

/// Runs until `signals.stop` is set and returns 0; `reload` set calls
/// hooks.reload_options and applies what a running agent can (option_changes.h).
/// Fails before the loop starts: another agent holds the lock (its pid named), the
/// socket or the listen address cannot be bound, the --textfile directory cannot
/// be written.
Result<void> run_agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
                       const AgentSignals& signals, const AgentHooks& hooks);

}  // namespace gpureap::agent
