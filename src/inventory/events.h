#pragma once
// What changed on the node, as events (`gpureap watch`): orphaned memory appeared,
// a zombie leader appeared, memory became unattributed, memory was freed, NVML went
// down or came back. EventDetector compares each new inventory with what it has
// already announced, so a state is announced once, not at every tick. The agent
// adds its own events (reaping) of the same type; report/watch_events renders them.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/vendor.h"
#include "inventory/inventory.h"
#include "proc/holder.h"
#include "proc/lineage.h"

namespace gpureap::inventory {

enum class EventKind {
  orphaned_memory,      // holders on a GPU became orphaned (their parent or launcher died)
  zombie_leader,        // a holder's leader exited while its threads still hold the GPU
  unattributed_memory,  // memory no visible process explains (class in `unexplained`)
  memory_freed,         // memory announced above (orphaned/zombie/unattributed) is gone
  source_down,            // NVML stopped answering (or failed); `detail` says how
  source_up,              // NVML answers again
  reap_planned,         // --reap-dry-run: what the reaping policy would free
  reaped,               // the reaping policy freed holders (`detail`: the outcome)
  reap_failed,          // the reaping policy tried and memory stayed held
  ghost_gpu,       // a GPU became a ghost: busy with no process (Busy::ghost, evidence in detail)
  ghost_gpu_gone,  // a ghost GPU announced above is no longer busy without a process
};
/// Its name (util/enum_names.h): the `event` of `gpureap --json watch`, the metrics'
/// `kind` label ("orphaned_memory", "memory_freed", ...).
std::string_view enum_name(EventKind k);

/// A holder as an event names it.
struct EventHolder {
  proc::ProcessId id;
  std::string comm;
  std::string user;
  std::optional<std::uint64_t> gpu_bytes;  // on the event's GPU; nullopt when unknown
  std::string container;  // proc::Holder::container ("k8s-pod:<uid>/<id>", "docker:…"); "" if none
  std::string instance;   // proc::Holder::instance: the key of its server instance, "" if none
  bool orphaned = false;  // the look's one lineage verdict (proc::Holder::orphaned)
  proc::Provenance provenance = proc::Provenance::none;  // how that verdict is known
};

/// The process whose death orphaned holders: as the agent last saw it alive.
using DeadParent = proc::DeadParent;

struct Event {
  EventKind kind = EventKind::source_down;
  double time = 0;              // wall clock, seconds since the epoch
  std::optional<gpu::DeviceId> gpu;  // nullopt for node-wide events, and for an instance's
  /// The GPUs the event is about: {gpu} for a GPU's event; every GPU of an instance
  /// whose holders were orphaned at once (one event for a tensor-parallel crash); empty
  /// for node-wide events.
  std::vector<gpu::DeviceId> gpus;
  std::string uuid;
  std::vector<EventHolder> holders;
  std::uint64_t bytes = 0;                      // orphaned / unattributed / freed bytes on that GPU
  Unexplained unexplained = Unexplained::none;  // unattributed_memory: its class
  std::optional<DeadParent> parent;             // orphaned_memory: whose death, when known
  /// orphaned_memory: the server instance its holders all belong to, when they do and it
  /// is worth naming (report::worth_showing: several processes, or a known engine).
  std::optional<Instance> instance;
  std::string detail;  // one sentence: NVML's problem, a reap's outcome, evidence
};

/// How long memory that no process explains must stay unexplained, and not
/// falling, before unattributed_memory announces it. A release takes 0.2-2 s
/// (free's "stalled" rule, D16, waits 3 s too), and between a holder's death and
/// the next NVML reading the inventory shows its memory as unexplained for a moment:
/// announcing at once would cry "driver_held" at every free.
inline constexpr std::chrono::milliseconds kUnattributedSettle{3000};

/// The vendors whose side of the node reads none of its GPUs (each listed GPU of
/// that vendor failed or hung), each side judged alone: on a mixed NVIDIA+AMD node
/// NVML reading none of its GPUs is NVML down, whatever amdgpu's sysfs reads (W4-07).
std::vector<gpu::Vendor> sides_down(const Inventory& inv);

/// The source is down: it lists no GPU, or a vendor's side cannot read any of its
/// GPUs (sides_down). The node-wide source_down/source_up events, the source's up
/// metric (gpu/source_words.h) and the agent's /healthz follow this one rule.
bool source_down(const Inventory& inv);

/// Why the source is down, for /healthz's reasons: "NVML cannot read any GPU: ..."
/// or, on a mixed node, the side named with its GPUs ("NVML cannot read any of its
/// GPUs (GPU 0, 1): only the other GPUs and the /proc view are live").
std::string source_down_text(const Inventory& inv);

/// How long a freed GPU of an instance waits for its other members to go (a kill of
/// a server's workers ends them within a look or two), before it is said alone.
inline constexpr double kInstanceFreedWait = 2.0;

/// Remembers what was announced per GPU and turns each new inventory into the
/// events of the change. The rules (docs/json-schema.md, "gpureap watch events"):
///  - orphaned_memory: the set of orphaned holders using a GPU grew; the event
///    names the new ones. zombie_leader: likewise for zombie leaders.
///  - unattributed_memory: the GPU's class became one other than none and
///    releasing, or its bytes grew past the freed tolerance, and stayed so for
///    `unattributed_settle`. `releasing` is never announced (it is every free).
///  - memory_freed: everything announced on the GPU (holders gone, unattributed
///    class back to none or no larger than announced) is gone and nothing is
///    pending; `bytes` is what was announced and went away. When the holders that
///    went were all of one announced instance, its GPUs are one event (gpus, the
///    instance), said once none of its GPUs is still releasing and no member is
///    left, or kInstanceFreedWait after its first GPU was freed (issue 37).
///  - ghost_gpu / ghost_gpu_gone: the GPU's busy class became ghost (the window
///    of kBusyTicks ticks is the inventory's) / stopped being one.
///  - source_down / source_up: node-wide when NVML lists no GPU or a vendor's side
///    reads none of its GPUs (one line, not one per GPU, the side named on a mixed
///    node); per GPU (gpu set) otherwise.
/// While a GPU's memory is unknown (NVML down or that GPU hung or failing) its
/// memory state is frozen: nothing is announced or freed for it until NVML
/// answers again; then what changed meanwhile is announced.
/// The first observe() starts from nothing, so it announces what is already bad.
/// A state is announced once; one that goes away and comes back, again.
class EventDetector {
 public:
  /// How long an orphan whose bytes the driver has not listed yet waits for them before
  /// it is announced without (seconds).
  static constexpr double kUnmeasuredWait = 2.0;
  explicit EventDetector(std::chrono::milliseconds unattributed_settle = kUnattributedSettle);
  ~EventDetector();
  EventDetector(EventDetector&&) noexcept;
  EventDetector& operator=(EventDetector&&) noexcept;

  /// `now`: wall clock seconds (Event::time, and the settle time of unattributed
  /// memory). `dead_parents`: holder pid -> the parent (or process-group leader)
  /// whose death the agent saw, for the orphaned_memory event's `parent`.
  std::vector<Event> observe(const Inventory& inv, double now,
                             const std::map<pid_t, DeadParent>& dead_parents = {});

 private:
  struct GpuState;  // defined in events.cc
  void observe_gpu(const GpuView& view, GpuState& st, double now,
                   const std::map<pid_t, DeadParent>& dead_parents, std::vector<Event>& out);
  /// Holds back the fresh holders the driver has not measured yet (up to kUnmeasuredWait,
  /// counted in `unmeasured_since`): the orphaned_memory and zombie_leader events alike.
  static void wait_for_measure(const GpuView& view,
                               std::map<proc::ProcessId, double>& unmeasured_since,
                               double now, std::vector<const GpuHolder*>& fresh);
  // observe_gpu's steps, in its order.
  static void observe_orphans(const GpuView& view, GpuState& st, double now,
                              const std::map<pid_t, DeadParent>& dead_parents,
                              std::vector<Event>& out);
  static void observe_zombies(const GpuView& view, GpuState& st, double now,
                              std::vector<Event>& out);
  void observe_unexplained(const GpuView& view, GpuState& st, double now,
                           std::vector<Event>& out) const;
  static void observe_ghost(const GpuView& view, GpuState& st, double now, std::vector<Event>& out);
  void observe_freed(const GpuView& view, GpuState& st, double now, std::vector<Event>& out);

  /// A GPU's memory_freed of one instance's holders, summed over its GPUs until none
  /// of them is still releasing.
  struct InstanceFreed {
    Event event;
    std::size_t holders = 0;
    std::string label;              // "orphaned holder", ...
    std::vector<std::string> rest;  // what a GPU not back at its baseline still has
    double first = 0;               // when its first GPU was freed
  };
  std::vector<Event> freed_by_instance(std::vector<Event> events, double now);

  double settle_seconds_;
  std::map<std::string, std::unique_ptr<GpuState>> gpus_;  // by uuid (index when no uuid)
  std::map<std::string, Instance> announced_instances_;     // orphaned, by key
  std::map<std::string, InstanceFreed> instance_freed_;     // by instance key
  bool source_down_ = false;
};

}  // namespace gpureap::inventory
