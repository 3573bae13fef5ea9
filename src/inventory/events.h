#pragma once
// What changed on the node, as events (`gpureap watch`): orphaned memory appeared,
// a zombie leader appeared, memory became unattributed, memory was freed, NVML went
// down or came back. EventDetector compares each new inventory with what it has
// already announced, so a state is announced once, not at every tick. The agent
// adds its own events (reaping) of the same type; report/watch_events renders them.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "proc/holder.h"

namespace gpureap::inventory {

enum class EventKind {
  orphaned_memory,      // holders on a GPU became orphaned (their parent or launcher died)
  zombie_leader,        // a holder's leader exited while its threads still hold the GPU
  unattributed_memory,  // memory no visible process explains (class in `unexplained`)
  memory_freed,         // memory announced above (orphaned/zombie/unattributed) is gone
  nvml_down,            // NVML stopped answering (or failed); `detail` says how
  nvml_up,              // NVML answers again
  reap_planned,         // --reap-dry-run: what the reaping policy would free
  reaped,               // the reaping policy freed holders (`detail`: the outcome)
  reap_failed,          // the reaping policy tried and memory stayed held
};

/// A holder as an event names it.
struct EventHolder {
  proc::ProcessId id;
  std::string comm;
  std::string user;
  std::optional<std::uint64_t> gpu_bytes;  // on the event's GPU; nullopt when unknown
};

/// The process whose death orphaned holders: as the agent last saw it alive.
struct DeadParent {
  pid_t pid = 0;
  std::string comm;
  std::string cmdline;
  double died_at = 0;  // wall clock, seconds since the epoch (when its pidfd fired)
};

struct Event {
  EventKind kind = EventKind::nvml_down;
  double time = 0;  // wall clock, seconds since the epoch
  std::optional<unsigned> gpu;  // NVML index; nullopt for node-wide events (NVML)
  std::string uuid;
  std::vector<EventHolder> holders;
  std::uint64_t bytes = 0;  // orphaned / unattributed / freed bytes on that GPU
  Unexplained unexplained = Unexplained::none;  // unattributed_memory: its class
  std::optional<DeadParent> parent;             // orphaned_memory: whose death, when known
  std::string detail;  // one sentence: NVML's problem, a reap's outcome, evidence
};

/// Remembers what was announced per GPU and turns each new inventory into the
/// events of the change.
class EventDetector {
 public:
  /// `dead_parents`: holder pid -> the parent (or process-group leader) whose
  /// death the agent saw, for the orphaned_memory event's `parent`.
  std::vector<Event> observe(const Inventory& inv, double now,
                             const std::map<pid_t, DeadParent>& dead_parents = {});

 private:
  struct GpuState;  // defined in events.cc
  std::map<std::string, std::shared_ptr<GpuState>> gpus_;  // by uuid (index when no uuid)
  bool nvml_down_ = false;
  bool first_ = true;
};

}  // namespace gpureap::inventory
