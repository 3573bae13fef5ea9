#pragma once
// `gpureap watch`'s options as the agent holds them (resolved from the command line and
// the options file by agent/option_texts.h), a leaf so that option_changes and each
// owner of the agent include it without the agent's loop.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/service_notify.h"
#include "agent/watcher.h"
#include "agent/web_config.h"
#include "inventory/events.h"
#include "inventory/node.h"
#include "reclaim/audit.h"

namespace gpureap::agent {

/// Opens a node for the reaper's thread (the CLI's open_node: the same NVML library,
/// device directory, proc root and interrupt flag as the agent's).
using ReapNodeFn = std::function<std::unique_ptr<inventory::Node>()>;

/// How long the agent lets go of NVML when asked without a duration (SIGUSR1):
/// long enough for a GPU reset or a MIG change, short enough that a forgotten
/// request does not leave the node unwatched.
inline constexpr std::chrono::milliseconds kDefaultSourceYield{120000};
/// The longest yield a request may ask for.
inline constexpr std::chrono::milliseconds kMaxSourceYield{3600000};

/// Where the agent's own operating problems go, one sentence each, said once per
/// change of state (the textfile cannot be written; it can again): the CLI
/// prints them on stderr (library code never prints).
using ProblemSink = std::function<void(const std::string&)>;

/// Where events go (the CLI renders and prints them: library code never prints).
/// Must not wait for the output (a stalled reader would stop the agent); false
/// when the event was dropped instead, counted in gpureap_events_dropped_total.
using EventSink = std::function<bool(const inventory::Event&)>;

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
  /// The reaper's own node (agent/reaper.h: a reap runs on its own thread, with its own
  /// NVML client), opened for each reap. Required once reaping is switched on.
  ReapNodeFn reap_node;
  /// systemd's notify socket (Type=notify): ready, status, reload, stop, watchdog.
  /// nullptr: not under such a unit.
  std::shared_ptr<ServiceNotifier> notifier;
};

}  // namespace gpureap::agent
