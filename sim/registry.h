#pragma once
// Registrations on a simulated node, written by holder processes and read by the
// library, `list`, `cleanup` and the nvidia-smi stand-in.
//
//   D/procs/<pid>-<start>.json        every process `hold` started (role, pgid, comm)
//   D/allocs/g<gpu>-<pid>-<start>.json one GPU allocation (bytes, stuck, release delay)
//   D/allocs/g<gpu>-<pid>-<start>.lock an OFD write lock the holder keeps while its
//                                      files are open (how a caller in another PID
//                                      namespace, whose /proc cannot show the holder,
//                                      still knows whether it holds)
//   D/allocs/g<gpu>-<pid>-<start>.reads one byte per utilization read of a ghost
//                                      with a read limit (`hold --ghost-reads N`)
//   D/sessions/<pid>.lock              an NVML session (nvmlInit .. nvmlShutdown) of
//                                      that process: an OFD write lock held while it
//                                      is open, so a crashed client's is not counted
//   D/allocs/g<gpu>-<pid>-<start>.dead when the holder was first seen dead
//                                      (CLOCK_BOOTTIME ns; created once, atomically)
//
// A registration is never rewritten; a respawned process writes a new one. The
// file name carries the GPU so a per-GPU query reads only its own entries.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/node_config.h"

namespace gpureap::sim {

struct ProcRecord {
  pid_t pid = 0;  // host pid
  std::uint64_t start_time = 0;
  std::string role;  // server, worker, holder, daemon-launcher, pidns-parent, ...
  pid_t pgid = 0;
  std::string comm;
};

struct Allocation {
  pid_t pid = 0;  // host pid of the holder
  std::uint64_t start_time = 0;
  unsigned gpu = 0;
  std::uint64_t bytes = 0;
  bool stuck = false;   // stays after the holder dies (driver-held)
  bool client = false;  // a monitoring client: 0 bytes, not listed as a process
  unsigned util = 0;    // SM utilization percent the GPU shows while the holder lives
  bool ghost = false;   // after death the GPU stays busy at `util`, 0 bytes, no process
  unsigned ghost_reads = 0;  // ghost: busy for this many utilization reads; 0 until a reset
  std::chrono::nanoseconds release_delay{0};
  std::string comm;
  std::uint64_t pid_ns = 0;  // inode of the holder's /proc/self/ns/pid (0: not recorded)
  /// `hold --inheritor` / `--ipc-importer`: the allocation stays while anything references
  /// it, as the driver keeps memory while any reference to its owner's device file (or an
  /// import of it) lives: while the OFD lock of D/allocs/<name>.lock is held, which a child
  /// that inherited the holder's descriptors, or an importer that mapped the lock file,
  /// keeps after the holder died. Listed under the holder's pid, dead or not, as NVML lists
  /// a dead owner whose memory is kept. Other allocations end with their holder.
  bool referenced = false;
  /// `hold --ipc-importer`'s importer: the name of the allocation it imported. While the
  /// exporter lives NVML lists each with its own bytes; once the exporter is dead, the
  /// imported bytes are listed under the importer (measured on an H100, driver 580: the
  /// importer's entry went from 518 MiB, its context, to 4614 MiB when the 4 GiB
  /// exporter was SIGKILLed, and the exporter's pid was no longer listed).
  std::string imports;
  std::optional<unsigned> gi;  // `hold --mig GI`: on that GPU instance of a MIG GPU
  unsigned ci = 0;             // `hold --mig GI --ci C`: on that compute instance of it

  std::string name() const;  // "g<gpu>-<pid>-<start>"
};

/// The inode of this process's PID namespace (/proc/self/ns/pid); 0 when unknown.
std::uint64_t own_pid_namespace();

/// Takes the allocation's lock (D/allocs/<name>.lock) for as long as this process's
/// files stay open: the descriptor (returned) is never closed, and is inherited by
/// children forked afterwards. Call before register_allocation.
Result<int> lock_allocation(const SimPaths& paths, const Allocation& alloc);

/// Opens this process's NVML session: D/sessions/<pid>.lock, locked (OFD) until
/// close_nvml_session or the process's exit. Returns the descriptor, -1 when the
/// file cannot be written (the session is then not seen by a reset).
int open_nvml_session(const SimPaths& paths);
/// Closes it: the lock released, the file removed.
void close_nvml_session(const SimPaths& paths, int fd);
/// The pids of the NVML sessions open now (their lock held), other than `except`'s:
/// the clients a GPU reset finds "in use".
std::vector<pid_t> open_nvml_sessions(const SimPaths& paths, pid_t except);

/// Writes D/procs/<pid>-<start>.json.
Result<void> register_process(const SimPaths& paths, const ProcRecord& record);
/// Writes D/allocs/g<gpu>-<pid>-<start>.json (atomically: readers never see half).
Result<void> register_allocation(const SimPaths& paths, const Allocation& alloc);
/// Every process record, in registration order (by file mtime, then name).
std::vector<ProcRecord> read_process_records(const SimPaths& paths);

/// CLOCK_BOOTTIME in nanoseconds: one clock for every process on the machine.
std::int64_t boottime_ns();

enum class AllocState {
  held,       // the holder lives: counted and listed
  releasing,  // holder dead, within its release delay: counted, not listed
  stuck,      // holder dead, memory driver-held until a GPU reset: counted, not listed
  ghost,      // holder dead, GPU still busy (utilization) with no memory, until a reset
  released,   // gone
};
const char* to_string(AllocState state);

/// Parsed registrations, cached by file name (they are immutable), with each
/// holder's state evaluated on demand. Once a holder is seen dead it stays dead
/// (pid + start time never come back), so only live holders cost a /proc read.
class AllocationTable {
 public:
  explicit AllocationTable(SimPaths paths) : paths_(std::move(paths)) {}

  struct Entry {
    Allocation alloc;
    AllocState state = AllocState::held;
    std::optional<std::chrono::nanoseconds> release_left;  // releasing: time left
    // The holder can be named to the caller (its /proc shows it).
    // The real driver (>= 535.113) translates pids into the caller's namespace and
    // drops those it cannot see: their memory still counts.
    bool visible = true;
    /// Held although its holder is dead: a keeper references it (Allocation::referenced).
    bool kept = false;
  };

  /// Re-reads D/allocs (only the files of `gpu` when given) and evaluates each
  /// allocation now. A holder first seen dead gets its .dead sidecar here.
  std::vector<Entry> evaluate(std::optional<unsigned> gpu = std::nullopt);

 private:
  struct Cached {
    Allocation alloc;
    bool dead = false;
    std::optional<std::int64_t> dead_at_ns;
  };
  std::int64_t dead_at(const std::string& name, Cached& c);

  SimPaths paths_;
  std::map<std::string, Cached> cache_;
};

/// What the driver reports for one GPU, from the evaluated entries of that GPU.
struct GpuUsage {
  std::uint64_t counted_bytes = 0;  // held + releasing + stuck
  struct Process {
    pid_t pid;
    std::uint64_t bytes;
    unsigned util = 0;  // its holders' `hold --util` (the busiest): its per-process SM sample
  };
  std::vector<Process> processes;  // live, non-client holders
  unsigned utilization = 0;        // SM percent: the busiest live holder or ghost
  std::vector<std::string> ghosts_with_reads;  // ghost entries that count their reads
};

/// Records one utilization read of each ghost in `usage` that has a read limit.
void count_ghost_reads(const SimPaths& paths, const GpuUsage& usage);
/// `gi` set: only the allocations on that GPU instance (a MIG device's own view); unset:
/// every allocation on the GPU. `ci` set as well: the processes only of that compute
/// instance, while the bytes stay the GPU instance's (its compute instances share its
/// memory).
GpuUsage summarize(const std::vector<AllocationTable::Entry>& entries, unsigned gpu,
                   std::optional<unsigned> gi = std::nullopt,
                   std::optional<unsigned> ci = std::nullopt);

}  // namespace gpureap::sim
