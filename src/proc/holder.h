#pragma once
// A process that holds a GPU device node, as the /proc scan found it.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

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
enum class NodeKind { gpu, ctl, uvm, uvm_tools, modeset, other };

struct DeviceNode {
  NodeKind kind = NodeKind::other;
  std::optional<unsigned> minor;  // set for NodeKind::gpu
  std::string path;               // as found in the device directory
  friend bool operator<(const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; }
  friend bool operator==(const DeviceNode& a, const DeviceNode& b) { return a.path == b.path; }
};

enum class FoundBy { nvml, fd, mapping };

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
  bool orphaned = false;
  std::string orphan_reason;         // e.g. "re-parented to init (pid 1)"
  std::string cgroup;                // v2 path, or the most telling v1 path
  std::string container;             // "docker:3f2a1b…", "k8s-pod:…", "lxc:129", "systemd:foo.service"; empty if none
  std::string run_id;                // the `gpureap run` it belongs to ("" if none)
  std::vector<pid_t> nspid;          // NSpid line: host pid first, innermost last
  std::string comm;
  std::string cmdline;               // NULs turned into spaces; "[comm]" when empty
  double age_seconds = 0;
  std::set<FoundBy> found_by;
  std::set<DeviceNode> nodes;        // device nodes it holds
  std::set<unsigned> gpu_minors;     // minors of the GPU nodes it holds
  std::string wchan;                 // filled on request (leftover evidence)
};

/// Something the scan could not read; reported instead of guessed.
struct ScanProblem {
  pid_t pid = 0;
  std::string what;  // e.g. "fd table unreadable (permission denied): run as root"
};

}  // namespace gpureap::proc
