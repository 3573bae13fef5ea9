#pragma once
// `gpureap watch`: the resident node agent. One loop thread owns the Watcher and
// everything it knows, and hands each look to small owners (agent/exporter.h,
// agent/answers.h, agent/witness_keeper.h, agent/reaper.h, agent/gate.h). The HTTP
// server's thread and the control socket's clients ask the loop for what they need (a
// fresh look, the metrics text) through the request queue; the reaper and the gate act
// on threads of their own, from copies of a look, and never hold the loop up.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/option_changes.h"
#include "agent/options.h"
#include "agent/service_notify.h"
#include "agent/watcher.h"
#include "inventory/events.h"
#include "inventory/node.h"
#include "report/watch_service.h"
#include "util/result.h"

namespace gpureap::agent {

/// The agent letting go of NVML (so that a GPU reset finds no client) or taking
/// it up again.
struct SourceYield {
  bool yielded = false;  // true: let go; false: resumed
  std::string by;        // who asked ("SIGUSR1", "pid 4242 gpureap"), or "the deadline"
  double until = 0;      // yielded: wall clock seconds when it resumes by itself
  std::string note;      // resumed: what the asker said it did ("reset GPU 0: succeeded")
};

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
