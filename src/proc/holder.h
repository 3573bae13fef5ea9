#pragma once
// A process that holds a GPU device node, as the /proc scan found it.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "proc/drm_fdinfo.h"
#include "proc/mig_caps.h"
#include "proc/engine_role.h"

namespace gpureap::proc {

/// A process's identity: the pid alone can be reused, (pid, start time) cannot.
/// start_time is /proc/PID/stat field 22, clock ticks since boot.
struct ProcessId {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  /// Inode of a pidfd for the process on pidfs (Linux >= 6.8: unique per process
  /// for the life of the system), taken at discovery; 0 when unknown. Start times
  /// count 10 ms clock ticks, so only this tells apart a pid reused within the
  /// same tick. Not part of equality: ids from different sources still compare.
  std::uint64_t pidfs_ino = 0;
  friend bool operator==(const ProcessId& a, const ProcessId& b) {
    return a.pid == b.pid && a.start_time == b.start_time;
  }
  friend auto operator<=>(const ProcessId& a, const ProcessId& b) {
    if (auto c = a.pid <=> b.pid; c != 0) return c;
    return a.start_time <=> b.start_time;
  }
};

/// Which device node a holder has: a GPU's /dev/nvidia<minor>, or a shared node.
enum class NodeKind { gpu, ctl, uvm, uvm_tools, modeset, other, mig_cap };

struct DeviceNode {
  NodeKind kind = NodeKind::other;
  std::optional<unsigned> minor;  // set for NodeKind::gpu and mig_cap (the capability's)
  std::string path;               // as found in the device directory
  /// mig_cap: the MIG device /dev/nvidia-caps/nvidia-cap<minor> gives access to.
  std::optional<MigAccess> mig{};
  /// A DRM node (amdgpu's card/render nodes): its vendor's reader of an fd's fdinfo
  /// (proc/drm_fdinfo.h); the scan keeps what it reads in Holder::drm_clients.
  FdinfoReader fdinfo = nullptr;
  friend bool operator<(const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; }
  friend bool operator==(const DeviceNode& a, const DeviceNode& b) { return a.path == b.path; }
};

enum class FoundBy { source, fd, mapping };

/// Why a holder is called orphaned (proc/lineage.h), strongest last.
enum class OrphanEvidence {
  none,       // not orphaned
  group,      // re-parented, its process-group leader gone, launcher unknown (one-shot): the
              // weakest; a person's `free --orphans` acts on it, nothing unattended does
  title,      // an engine worker's title, re-parented: its server is gone (one-shot)
  siblings,   // re-parented with others of its process group, whose leader is gone (one-shot)
  run_gone,   // a process of a `gpureap run` whose gpureap is gone (owned: its cgroup;
              // inferred: only GPUREAP_RUN_ID in its environment, a hint)
  witnessed,  // the agent saw its parent die, and that parent was the workers' server
};

/// How a lineage verdict is known (DESIGN "Evidence has a provenance"; docs/orphans.md).
/// Unattended paths (the reaper, the Slurm hooks, `run --free-first` without a question)
/// act only on `owned` and `witnessed`; `inferred` is reported and offered to a person.
enum class Provenance {
  none,       // no verdict to back (not orphaned)
  inferred,   // read from one snapshot: re-parented siblings, a worker title, adoption
  witnessed,  // the agent saw the workers' server alive and saw it die (its pidfd)
  owned,      // gpureap holds it: the process sits in a `gpureap run`'s own cgroup
};

/// How a process keeps GPU memory whose owner, as NVML names it, is dead (exited, a
/// zombie, or listed with no process): docs/orphans.md, "Keepers". The keeper is that
/// memory's holder, credited with its bytes.
enum class KeeperClass {
  none,
  inheritor,  // it holds the dead owner's device files: forked from it (its process group or
              // session is the owner's, or the agent saw the owner fork it), NVML lists it nowhere
  importer,   // it imported the owner's memory (CUDA IPC): the agent saw the owner die and, at
              // the same look, NVML's figure for it grow by about the owner's bytes
              // (inventory/import_witness.h); no look alone can tell it
};

/// The names of NodeKind, FoundBy, OrphanEvidence, Provenance and KeeperClass (util/enum_names.h): "uvm_tools",
/// "mapping", "run_gone", ... as the agent's wire and `--json` spell them.
std::string_view enum_name(NodeKind kind);
std::string_view enum_name(FoundBy found_by);
std::string_view enum_name(OrphanEvidence evidence);
std::string_view enum_name(Provenance provenance);
std::string_view enum_name(KeeperClass keeper);

/// The verdict in words, spelled once for every view (status, its Instances block, free's
/// and run --replace's plans, top, events, the log): "orphaned (inferred)", "orphaned
/// (witnessed)", "orphaned (owned)"; "orphaned" without a provenance. The words are
/// defined in gpureap(1) EVIDENCE and docs/orphans.md.
std::string orphan_verdict(Provenance provenance);
/// The same from a provenance's name ("inferred", as JSON and audit records keep it).
std::string orphan_verdict(std::string_view provenance);
/// What a provenance permits, in one line: "inferred (one look): a person may free it;
/// nothing unattended will". "" for none.
std::string_view provenance_allows(Provenance provenance);

struct ThreadState {
  pid_t tid = 0;
  char state = '?';
};

struct Holder {
  ProcessId id;
  uid_t uid = 0;
  std::string user;                  // name, or the number when unknown
  char state = '?';                  // leader's state letter
  std::vector<ThreadState> threads;  // every thread's state (task/*/stat), by tid
  bool zombie_leader = false;        // leader Z with live threads: still a holder
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  // Lineage. Raw facts the scan read:
  bool reparented = false;         // its starter is gone (proc/lineage.h reparent_reason)
  std::string reparent_reason;     // e.g. "re-parented to init (pid 1)"
  bool group_leader_gone = false;  // pgid != pid and no process pgid exists
  /// Of a live `gpureap run`: a live gpureap-reaper (the run's child subreaper, which
  /// dies with its gpureap) is among its ancestors. Read from the process tree, never
  /// from a pid number in an environment variable (W3-01, W3-10).
  bool run_alive = false;
  /// Names a run (its cgroup, or GPUREAP_RUN_ID) and no live run's reaper is above it.
  bool run_gone = false;
  /// The run is known from the run's own cgroup (`gpureap-run-<id>`, which only the
  /// run or root creates), not from the environment (inherited, copied, forgeable).
  bool run_in_cgroup = false;
  /// For a run named only by GPUREAP_RUN_ID: the topmost process of its ancestry that
  /// carries the same id (the run's command), when init adopted it (its run's reaper
  /// died with the run); 0 otherwise. A job a live shell or slurmstepd started with an
  /// inherited id has a live parent without the id: 0 (W3-01).
  pid_t run_left_to_init = 0;
  bool ignores_sighup = false;  // SigIgn has SIGHUP: `nohup`, detached on purpose
  // Derived by proc::classify_lineage from those (and what the agent saw die):
  bool orphaned = false;  // a leak, by evidence: --orphans and the reaper act on it
  OrphanEvidence orphan_evidence = OrphanEvidence::none;
  Provenance provenance = Provenance::none;  // how the orphan verdict is known
  /// The parent the agent saw die (its pid; 0 when none was seen): the holders of one
  /// dead parent are one instance, in whatever process groups (inventory/instances.h).
  pid_t dead_parent = 0;
  std::string orphan_reason;    // e.g. "parent python3 (pid 4721), which held GPU 0, died 3 s ago"
  /// When it became an orphan, seconds since the epoch: when the parent (or group leader)
  /// the agent saw die died (OrphanEvidence::witnessed); unknown otherwise.
  std::optional<double> orphaned_since;
  /// Set by the inventory's join (inventory::build_inventory), which knows NVML's owners:
  /// it keeps the memory of dead `kept_owner` (keeper_reason: "keeps 8.51 GiB of dead pid
  /// 1667, whose device files it inherited"). `free --orphans` selects a keeper as it does
  /// an orphan; what acts unattended needs owned or witnessed evidence of the keeping
  /// (keeper_provenance) or of the keeper's own orphaning (unattended_may_act).
  KeeperClass keeper = KeeperClass::none;
  /// How the keeping is known: witnessed when the agent saw the owner die (an inheritor's
  /// dead parent, an importer's witness record), inferred when one look tells it (an
  /// inheritor by its process group or session); none when no keeper. With witnessed (or
  /// owned) evidence the unattended paths take a keeper as the memory's holder.
  Provenance keeper_provenance = Provenance::none;
  pid_t kept_owner = 0;
  std::string keeper_reason;
  bool detached = false;        // re-parented, but not a leak (or no evidence that it is)
  std::string detached_reason;  // e.g. "re-parented to init (pid 1); it leads 2 live GPU workers"
  std::string cgroup;           // v2 path, or the most telling v1 path
  std::string
      container;  // "docker:3f2a1b…", "k8s-pod:…", "lxc:129", "systemd:foo.service"; empty if none
  std::string run_id;        // the `gpureap run` it belongs to ("" if none)
  std::vector<pid_t> nspid;  // NSpid line: host pid first, innermost last
  std::string comm;
  std::string cmdline;  // NULs turned into spaces; "[comm]" when empty
  std::vector<std::string> argv;  // /proc/PID/cmdline split at NULs; empty when it is
  double age_seconds = 0;
  std::set<FoundBy> found_by;
  std::set<DeviceNode> nodes;     // device nodes it holds
  std::set<unsigned> gpu_minors;  // minors of the GPU nodes it holds
  /// The MIG devices its capability nodes give it access to (issue 25): a process on
  /// a MIG device holds its GPU's node and these; one with the GPU's node alone uses
  /// no MIG device of it (an NVML client, a process between two MIG devices).
  std::set<MigAccess> mig_access;
  /// The DRM clients its fds on DRM nodes are, one per drm-client-id (dup'd and
  /// inherited fds share one), as the node's FdinfoReader read them.
  std::vector<DrmClient> drm_clients;
  std::string wchan;              // filled on request (leftover evidence)
  /// Host memory it has pinned or locked and resident (VmPin, and VmLck capped by VmRSS, of
  /// /proc/PID/status, bytes: StatusInfo::resident_pinned_bytes): the driver unpins it after
  /// the process is gone, the slow phase of a release (inventory/release_model.h).
  std::uint64_t pinned_host_bytes = 0;
  EngineIdentity engine;          // what its command line says it is (proc/engine_role.h)
  std::string instance;           // the key of its instance (inventory/instances.h), if any
};

/// A holder's verdict in words (orphan_verdict), "detached" or "" when neither.
std::string verdict_words(const Holder& h);

/// Something the scan could not read; reported instead of guessed.
struct ScanProblem {
  pid_t pid = 0;
  std::string what;  // e.g. "fd table unreadable (permission denied): run as root"
};

}  // namespace gpureap::proc
