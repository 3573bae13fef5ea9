#pragma once
// Internal to `gpureap-sim hold`: the validated plan every process of a holder
// tree shares (it is inherited across fork), and the report channel by which the
// tree tells the printing process who started and who registered.
//
// Report records, one write(2) each (atomic below PIPE_BUF):
//   "P <pid> <start> <role>"   a process was started (host pid)
//   "L <pid>"                  the tree's leader, when it is not the invoker
//   "H <pid> <gpu> <bytes>"    a holder registered its allocation
//   "E <pid> <message>"        a process of the tree failed

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/commands.h"
#include "sim/node_config.h"

namespace gpureap::sim {

struct HoldPlan {
  HoldOptions options;
  SimPaths paths;
  NodeConfig node;
  std::uint64_t bytes = 0;  // per holder; 0 with --client-only
  std::chrono::nanoseconds release_delay{0};
  std::uint64_t pinned_host = 0;  // --pinned-host: each holder mlock()s a little of it
  std::chrono::nanoseconds respawn_delay{0};  // a respawned worker holds after this (an import)
  std::chrono::nanoseconds stagger{0};        // worker k holds k times this after it starts
  std::vector<unsigned> worker_gpus;  // GPU of worker k
  bool server_holds = true;
  std::size_t expected_holders = 1;
  int report_fd = -1;  // write end, inherited by the whole tree
  int read_fd = -1;    // read end, only in the printing process
};

/// Sends one report record (without the newline).
void report(const HoldPlan& plan, const std::string& record);

/// Runs the holder tree in this process: the server (and its workers), or with
/// --pidns the parent of a PID namespace whose init is the server. When `printer`
/// is true this process also prints the ready line. Never returns.
[[noreturn]] void run_tree(HoldPlan& plan, bool printer);

/// Reads reports until every holder registered (10 s deadline), prints the ready
/// line with `leader` (0: the leader reported with "L"), and returns true; on
/// failure kills the processes started so far and returns false. With --orphan,
/// `kill_leader_first` makes the printer SIGKILL the leader before printing.
bool collect_and_print(HoldPlan& plan, pid_t leader, bool kill_leader_first);

}  // namespace gpureap::sim
