#pragma once
// The audit trail: every signal gpureap sends to a process it does not own (free, the
// agent's reaper, the Slurm hooks, run's teardown) becomes one record, and every free
// ends with a record of its verdict. The records are values; an AuditSink takes them
// (audit/recorder.h: a JSON-lines file in the state directory and the journal, or
// syslog; tests capture them). Signals reach processes only through an AuditedControl
// (audited_control.h), which writes the records through an AuditTrail; free_selection
// and tear_down accept no other control. docs/audit.md describes the records.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gpu/device_id.h"
#include "proc/holder.h"
#include "reclaim/release_wait.h"
#include "reclaim/target_lineage.h"
#include "util/result.h"
#include "util/time_text.h"

namespace gpureap::reclaim {

/// What sent the signal (the record's `actor`).
enum class AuditActor { free, watch_reaper, slurm_epilog, slurm_prolog, run_teardown, top };
/// "free", "watch-reaper", "slurm-epilog", "slurm-prolog", "run-teardown", "top".
std::string_view enum_name(AuditActor actor);

/// How the signal left gpureap.
/// gpureap never kill(2)s a process it did not start: a bare pid may have been reused.
enum class Delivery {
  pidfd,        // pidfd_send_signal on a pidfd verified against the target's identity
  cgroup_kill,  // a write of 1 to cgroup.kill (SIGKILL to the whole cgroup subtree)
};
/// "pidfd", "cgroup.kill".
std::string_view enum_name(Delivery via);

/// What the kernel said.
enum class SignalResult {
  delivered,     // sent (the process may still ignore SIGTERM)
  already_gone,  // it had exited (ESRCH)
  refused,       // not sent: the error says why (EPERM, ...)
};
/// "delivered", "already_gone", "refused".
std::string_view enum_name(SignalResult result);

/// The last record of a free or a teardown: what the measurements said.
enum class AuditVerdict { freed, still_held, unmeasured, interrupted };
/// "freed", "still_held", "unmeasured", "interrupted".
std::string_view enum_name(AuditVerdict verdict);

/// Who asked: the gpureap process that acts, and the person or service behind it.
struct AuditCaller {
  pid_t pid = 0;
  uid_t uid = 0;                   // real uid
  std::string user;                // its name (the number when it has none)
  std::optional<uid_t> login_uid;  // /proc/self/loginuid: the login session's user, kept by
                                   // the kernel across sudo and su; nullopt when unset
  std::string sudo_user;           // $SUDO_USER (a hint: the caller's own environment)
  std::string tty;                 // controlling terminal ("pts/3"), "" when none
  std::string cgroup;              // its cgroup ("/system.slice/gpureap-watch.service")
  std::string command;             // its command line ("gpureap free --gpu 0 --yes")
  std::string job_id;              // the Slurm job a hook runs for
  std::string run_id;              // the `gpureap run` whose teardown this is

  /// The calling process as PROC_ROOT/self shows it, and its environment.
  static AuditCaller current(const std::string& proc_root);
};

/// The signalled process, as read just after its verified handle was opened.
struct AuditTarget {
  proc::ProcessId id;
  std::string comm;
  std::optional<uid_t> uid;  // effective uid; nullopt when it could not be read
  std::string user;
  std::string cgroup;
  std::string container;  // proc::container_hint: "docker:…", "k8s-pod:…", "systemd:…"
  std::string instance;   // the key of the server instance it belongs to ("" if none)
  std::string cmdline;    // its command line as planned ("" when not known)
  /// What the lineage rule said of it when planned (reclaim/target_lineage.h); nullopt
  /// for a target that holds no GPU, and in a record written before it was kept.
  std::optional<TargetLineage> lineage;
};

/// `pid`'s comm, uid, user, cgroup and container read from PROC_ROOT/PID (what can be
/// read: a process that exits meanwhile leaves fields empty). `comm` and `user` when
/// given win (the plan's, read at discovery).
AuditTarget describe_process(const proc::ProcessId& id, const std::string& proc_root,
                             std::string comm = {}, std::string user = {});

/// A GPU as recorded: its index (what --gpu takes) and UUID (stable across reboots).
struct AuditGpu {
  gpu::DeviceId id;
  std::string uuid;  // "" when unknown
  std::string parent_uuid{};  // a MIG device: its GPU's UUID ("" when unknown or a whole GPU)
  friend bool operator==(const AuditGpu&, const AuditGpu&) = default;
};

struct SignalRecord {
  AuditTarget target;
  std::vector<AuditGpu> gpus;  // the GPUs it used (empty: none known)
  std::uint64_t bytes = 0;     // NVML's figure for it over those GPUs (0: unknown)
  int signal = 0;
  Delivery via = Delivery::pidfd;
  SignalResult result = SignalResult::delivered;
  std::string error;  // refused: the kernel's reason
};

/// One selected GPU at the end.
struct VerdictGpu {
  AuditGpu gpu;
  bool freed = false;
  bool measured = true;                      // false: NVML could not read it at the end
  std::uint64_t before_bytes = 0;            // used before the first signal
  std::optional<std::uint64_t> after_bytes;  // the last reading
};

struct VerdictRecord {
  AuditVerdict verdict = AuditVerdict::freed;
  std::vector<VerdictGpu> gpus;
  std::size_t signals = 0;  // signal records this operation wrote
  double seconds = 0;       // from the first signal to the verdict
};

struct AuditRecord {
  WallTime time;
  std::string host;
  AuditActor actor = AuditActor::free;
  std::string op;  // one operation (a free, a reap, a teardown): "<caller pid>-<start ms>"
  AuditCaller caller;
  std::variant<SignalRecord, VerdictRecord> what;
};

/// Where records go. write() must neither throw nor block for long: a record that
/// cannot be written is the sink's own problem to report (once), never the signal's.
class AuditSink {
 public:
  virtual ~AuditSink() = default;
  virtual void write(const AuditRecord& record) noexcept = 0;
};

/// The recorder of one operation: who acts, for whom, and where records go.
class AuditTrail {
 public:
  using WallClock = std::function<WallTime()>;

  /// `wall_clock` dates the records (default: the system clock); the operation's id is
  /// the caller's pid and the time of construction.
  AuditTrail(AuditSink& sink, AuditActor actor, AuditCaller caller, WallClock wall_clock = {});

  AuditActor actor() const { return actor_; }
  const std::string& op() const { return op_; }
  /// Signal records written so far.
  std::size_t signals() const { return signals_; }

  /// UUIDs for the GPUs records name (from the look the operation started with); a MIG
  /// device's `parent_uuid` is its GPU's, which `gpureap log --gpu MIG-GPU-…` matches.
  void know_gpu(gpu::DeviceId id, std::string uuid, std::string parent_uuid = "");

  /// Records one signal sent (or refused) to `target`.
  void signal(const AuditTarget& target, const std::vector<gpu::DeviceId>& gpus,
              std::uint64_t bytes, int sig, Delivery via, const Result<void>& sent);

  /// Records the operation's verdict over `gpus` (the selected GPUs' last readings).
  void verdict(AuditVerdict verdict, const std::vector<GpuRelease>& gpus, double seconds);

 private:
  AuditRecord record() const;
  AuditGpu gpu(gpu::DeviceId id) const;

  AuditSink& sink_;
  AuditActor actor_;
  AuditCaller caller_;
  WallClock wall_clock_;
  std::string host_;
  std::string op_;
  std::map<gpu::DeviceId, AuditGpu> uuids_;
  std::size_t signals_ = 0;
};

/// A sink that keeps every record (tests; nothing in the binary uses it).
class CapturedAudit final : public AuditSink {
 public:
  void write(const AuditRecord& record) noexcept override {
    try {
      records.push_back(record);
    } catch (...) {
    }
  }
  std::vector<AuditRecord> records;
};

}  // namespace gpureap::reclaim
