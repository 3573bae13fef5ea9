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

#include "agent/watcher.h"
#include "inventory/events.h"
#include "inventory/node.h"
#include "reclaim/audit.h"
#include "report/metrics.h"
#include "util/result.h"

namespace gpureap::agent {

/// Where the agent's own operating problems go, one sentence each, said once per
/// change of state (the textfile cannot be written; it can again): the CLI
/// prints them on stderr (library code never prints).
using ProblemSink = std::function<void(const std::string&)>;

struct AgentOptions {
  WatchOptions watch;
  std::optional<std::string> listen;        // ADDR:PORT for /metrics; nullopt: no HTTP
  std::optional<std::string> textfile_dir;  // node_exporter textfile collector directory
  bool per_holder = false;                  // per-holder metric series
  std::string state_dir;                    // the lock and the control socket live here
  std::optional<gid_t> socket_group;        // 0660 + this group; nullopt: 0600 (root)
  std::optional<std::chrono::milliseconds> reap_orphans_after;  // nullopt: never reap
  std::string keep_regex;                   // holders whose command line matches are never reaped
  bool reap_dry_run = false;
  std::string version;   // for gpureap_build_info
  ProblemSink problems;  // nullptr: not said
  /// Where the reaper's signals and verdicts are recorded (actor watch-reaper). Required:
  /// run_agent fails without one.
  std::shared_ptr<reclaim::AuditSink> audit;
};

/// Where events go (the CLI renders and prints them: library code never prints).
/// Must not wait for the output (a stalled reader would stop the agent); false
/// when the event was dropped instead, counted in gpureap_events_dropped_total.
using EventSink = std::function<bool(const inventory::Event&)>;

/// Called once the agent listens: the HTTP address really bound (port 0 picks
/// one; nullopt without --listen) and the number of GPUs it watches.
using StartedFn = std::function<void(const std::optional<std::string>& listen, std::size_t gpus)>;

/// Runs until `stop` is set (SIGTERM/SIGINT) and returns 0; `reload` set (SIGHUP)
/// calls `reload_options` and applies what it returns. Fails before the loop
/// starts: another agent holds the lock (its pid named), the socket or the
/// listen address cannot be bound, the --textfile directory cannot be written.
Result<void> run_agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
                       const std::atomic<bool>& stop, std::atomic<bool>& reload,
                       const std::function<Result<AgentOptions>()>& reload_options,
                       const StartedFn& started);

}  // namespace gpureap::agent
