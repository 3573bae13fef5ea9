#pragma once
// Attribution: joins what NVML says (memory, its process hints) with what /proc
// says (who really has the device nodes open) into one view per GPU, and names
// the memory that no visible process explains.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/baseline_store.h"
#include "inventory/host_leftovers.h"
#include "inventory/import_witness.h"
#include "inventory/instances.h"
#include "proc/holder.h"
#include "proc/holder_scan.h"
#include "proc/lineage.h"

namespace gpureap::inventory {

/// A holder as seen on one GPU.
struct GpuHolder {
  proc::Holder holder;                     // found_by includes nvml when NVML lists it here
  std::optional<std::uint64_t> gpu_bytes;  // NVML's figure on this GPU; nullopt when unknown
  bool uses_gpu = true;  // false: only has the node open (NVML lists it on another GPU, or none)
  /// A client: it has the node open and holds no memory anywhere (a monitor: nvitop, DCGM,
  /// persistenced): NVML lists it on no GPU, it keeps no dead owner's memory, and NVML's
  /// list explains this GPU's memory. Never a target of a whole-GPU free (only --pid
  /// names it); status lists it with -v. uses_gpu is false.
  bool client = false;
  /// NVML's latest per-process SM sample of it on this GPU, percent: a hint shown to a
  /// person (status -v, --json), read by no rule; nullopt when NVML gives none.
  std::optional<unsigned> sm_percent{};
};

/// Why some used memory has no visible holder.
enum class Unexplained {
  none,
  outside_namespace,  // NVML lists pids this /proc does not show, or we are not in the host PID ns
  releasing,    // no holder; falling, or within the release budget since a holder exited
  driver_held,  // no holder anywhere, flat past the release budget: reset or reboot needed
  unknown,      // NVML gave no process list to reason with
  no_holder,    // no holder anywhere; not yet known whether releasing or driver-held (the
                // exit was not seen and it was not watched for a budget): never "reset"
};
// releasing, driver_held and no_holder are set by the release model (release_model.h).

/// Its name (util/enum_names.h), as the reports, the wire and the metrics spell it.
std::string_view enum_name(Unexplained u);

/// Ghost GPUs: a GPU whose SM utilization stays at or above kBusyThreshold while
/// no process uses it. One busy reading is not enough (utilization is an average
/// over the driver's last sample period, and a process may just have exited):
/// the business must last a window of samples (kBusySamples over kBusyWindow for
/// a one-shot look, kBusyTicks consecutive ticks for the agent).
inline constexpr unsigned kBusyThreshold = 50;  // percent
inline constexpr unsigned kBusySamples = 5;
inline constexpr std::chrono::milliseconds kBusyWindow{1000};
/// How old an opener NVML lists nowhere must be before it is called a client: NVML's list
/// and the /proc scan of one look are read side by side, and the agent answers with a
/// list up to a tick old, so a process that allocated since may be missing from it. A
/// younger opener stays a possible holder (wave-2 script 23: a fresh holder judged a
/// client against the agent's older list made `free --gpu 2` "nothing to do").
inline constexpr double kClientMinAgeSeconds = 5.0;
inline constexpr unsigned kBusyTicks = 3;

enum class Busy {
  none,
  ghost,              // busy for the whole window, no process uses it anywhere: reset or reboot
  outside_namespace,  // busy with no process this PID namespace can see: look on the host
  orphan_computing,   // busy, and its only users are orphans: they are still computing
};
/// Its name (util/enum_names.h), as the reports, the wire and the metrics spell it.
std::string_view enum_name(Busy b);

/// Why a GPU is busy with no (live, parented) process, with the evidence.
struct BusyWithoutProcess {
  Busy kind = Busy::none;
  std::vector<unsigned> samples;  // SM utilization percent, oldest first (the window)
  std::string detail;             // evidence and next step, one sentence each
};

struct GpuView {
  gpu::GpuInfo info;
  Baseline baseline;
  std::vector<GpuHolder> holders;            // users first (by bytes, descending), then openers
  std::vector<gpu::GpuProcess> source_unseen;  // NVML pids with no process in this /proc
  std::uint64_t attributed_bytes = 0;
  std::uint64_t unattributed_bytes = 0;  // used - baseline - attributed, never negative
  Unexplained unexplained = Unexplained::none;
  std::string unexplained_detail;  // evidence and next step, one sentence each
  BusyWithoutProcess busy;  // kind none unless the GPU is busy with no process using it
  /// The look's own re-reading of used memory (taken up to ~100 ms after `info.memory`,
  /// when memory was unexplained), a reading for the release model; not on the wire.
  std::optional<std::uint64_t> reread_used;
  /// The release model's answer (release_model.h, ReleaseTracker::observe): this GPU's
  /// memory fell by a step within the falling window, over every reading its looker saw.
  /// The one "falling" of every command, the engine and the agent; not on the wire.
  bool falling = false;

  /// True when used memory is within the freed tolerance of the baseline.
  bool at_baseline() const;
  /// NVML's bytes of the orphaned holders that use this GPU (0 when none, or none has
  /// a figure): the metrics' gpureap_gpu_memory_orphaned_bytes and status's
  /// orphaned_bytes.
  std::uint64_t orphaned_bytes() const;
  std::uint64_t used() const { return info.memory ? info.memory->used : 0; }
};

/// What a look says about one GPU: the one rule that free, the Slurm hooks and the
/// plan's "nothing to do" read, so that no caller decides "is this GPU idle?" its own way.
/// In this order: memory NVML could not read is not measured (never free); a GPU busy
/// with no process is a ghost whatever its memory; memory within the freed tolerance of
/// the baseline with no process using the GPU (openers do not count) is free; memory above
/// it, or any user, is held by processes when they explain it, and
/// otherwise the Unexplained class says by whom.
enum class GpuState {
  not_measured,       // NVML gave no memory figure: nothing can be concluded
  ghost,              // busy with no process (Busy::ghost): reset or reboot
  free,               // at baseline, nothing unexplained, no process uses it (openers aside)
  held,               // processes use it and explain its memory
  releasing,          // Unexplained::releasing
  driver_held,        // Unexplained::driver_held
  outside_namespace,  // Unexplained::outside_namespace
  unknown,            // Unexplained::unknown
  no_holder,          // Unexplained::no_holder: may still be releasing; `wait` tells
};
/// Its name (util/enum_names.h), as the reports, the wire and the metrics spell it.
std::string_view enum_name(GpuState s);
GpuState gpu_state(const GpuView& view);

/// Which node a look describes, as the command that took it resolved it (absolute
/// paths): a running agent's answer is used only by a command that names the same node
/// (W2-02). Every field the GPU source or the holder scan reads from counts.
struct NodeIdentity {
  std::string dev_dir;       // where the NVIDIA device nodes are
  std::string proc_root;     // where /proc is
  std::string nvml_library;  // what is dlopen()ed: a path, or a bare soname the loader finds
  std::string sim_dir;       // $GPUREAP_SIM_DIR (the simulated NVML reads it); "" when unset
  friend bool operator==(const NodeIdentity&, const NodeIdentity&) = default;
};

struct Inventory {
  gpu::SourceState source_state = gpu::SourceState::ok;
  std::string source_problem;
  std::string driver_version;
  std::string cuda_version;  // "12.4": the CUDA version the driver supports; "" if unknown
  bool host_pid_namespace = true;
  bool as_root = false;  // the scan ran with euid 0 (unreadable entries are then sandbox limits)
  std::vector<GpuView> gpus;
  std::vector<proc::Holder> other_holders;  // hold nvidiactl/uvm only, or a node of no known GPU
  std::vector<proc::ScanProblem> problems;
  /// The GPU holders grouped into server instances (inventory/instances.h); each
  /// holder's Holder::instance is the key of its own. Set by Node::look.
  std::vector<Instance> instances;
  /// Launchers the agent saw die (its witnesses) that led a process group this look
  /// still shows: their command lines, read while they lived, name a crashed server's
  /// model and port (find_instances). Empty without an agent.
  std::vector<proc::DeadParent> dead_launchers;
  /// Shared-memory segments whose creators are gone (inventory/host_leftovers.h); filled
  /// by `status` only.
  std::vector<ShmLeftover> shm_leftovers;
  /// Things gpureap ignored or refused that the user should know about, one
  /// sentence each: device nodes that are not the NVIDIA driver's
  /// (proc::DeviceSet::warnings), implausible recorded baselines and a refused
  /// state directory (BaselineStore::warnings). Set by collect_inventory.
  std::vector<std::string> warnings;
  std::size_t processes_scanned = 0;
  /// Who took this inventory: "scan" (this process, directly) or "agent" (a
  /// running `gpureap watch`, asked over its socket: inventory/agent_client.h).
  std::string source = "scan";
  pid_t agent_pid = 0;  // source == "agent": the agent's pid
  /// source == "agent": why the agent is degraded (what its /healthz says with a
  /// 503), one sentence each; empty: it is not.
  std::vector<std::string> agent_degraded;
  NodeIdentity node;    // the node looked at (inventory::Node::identity())
  /// Every process, from this look's own listing of /proc (CollectOptions::process_table):
  /// free's plans read it (reclaim::CallerContext::of) instead of listing /proc again.
  /// Not set otherwise, nor in an agent's answer (never on the wire).
  std::optional<std::vector<proc::ProcessEntry>> process_table;
};

/// Builds the per-GPU view. `later_used` (index -> used bytes read after the
/// scan) is kept as each view's `reread_used`, a reading for the release model, which
/// alone decides whether memory falls (release_model.h): memory no process holds is
/// `no_holder` here, never `releasing`.
/// Records idle baselines into `baselines` (the caller saves the store).
/// `host_pid_namespace`: in_host_pid_namespace() of the node's proc root (memory no
/// visible process explains is then outside this namespace when false).
Inventory build_inventory(gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                          BaselineStore& baselines, bool host_pid_namespace,
                          const std::vector<gpu::MemoryReading>& later_used = {},
                          const std::vector<ImportRecord>& imports = {});

/// True when NVML lists the holder on this GPU: it has a context and may compute.
bool computes_here(const GpuHolder& h);

/// The processes with the GPU's node open that the driver does not list on it (clients:
/// monitoring agents, nvidia-persistenced, NVML users, workers of other GPUs), "pid N
/// (comm), ..."; "" when none. They hold no memory here, but a reset needs them gone.
std::string client_list(const GpuView& view);

/// True when the view reads busy (SM utilization >= kBusyThreshold) while no
/// process, or only orphans, compute on it (openers NVML does not list, such as
/// monitoring agents, compute nothing): a ghost candidate worth sampling again.
bool busy_without_live_user(const GpuView& view);

/// Classifies each busy GPU of `inv` from its SM utilization samples (index ->
/// readings, oldest first, the snapshot's own reading last): a ghost when at
/// least `required` samples were taken and the last `required` are all busy with
/// no process using the GPU in the host PID namespace; outside_namespace when we
/// are not in it; orphan_computing when only orphans use it.
void classify_busy(Inventory& inv, const std::map<gpu::DeviceId, std::vector<unsigned>>& samples,
                   unsigned required);

/// True when this process runs in the initial (host) PID namespace: inode of
/// /proc/self/ns/pid == PROC_PID_INIT_INO (0xEFFFFFFC). There NVML pids match /proc.
bool in_host_pid_namespace(const std::string& proc_root);

}  // namespace gpureap::inventory
