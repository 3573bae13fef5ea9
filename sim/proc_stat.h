#pragma once
// /proc readers the simulated driver needs: a process's identity (pid, start time)
// and whether it can still hold GPU memory.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpureap::sim {

/// The fields of /proc/PID/stat the simulator uses.
struct ProcStat {
  pid_t pid = 0;
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  long num_threads = 0;
  std::uint64_t start_time = 0;  // field 22, clock ticks since boot
};

/// Parses the text of /proc/PID/stat. The comm may contain spaces and ')', so the
/// fields are read after the *last* ')'. Returns nullopt on malformed text.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

/// Reads /proc/<pid>/stat; nullopt when the process is gone (ENOENT/ESRCH).
std::optional<ProcStat> read_proc_stat(pid_t pid);

/// True while a process can hold GPU memory: it exists, started at `start_time`
/// (a reused pid does not hold), and is not a pure zombie. A zombie *leader* whose
/// other threads still run keeps the shared fd table, so it holds (stat shows Z
/// with num_threads >= 2); a pure zombie (Z, one thread) has closed its files.
bool holds_resources(const ProcStat& stat, std::uint64_t start_time);
bool holds_resources(pid_t pid, std::uint64_t start_time);

/// This process's pid as seen by /proc (the host's PID namespace when /proc was
/// mounted there), which differs from getpid() inside a child PID namespace.
pid_t host_pid();

/// This process's start time (/proc/self/stat field 22).
std::uint64_t self_start_time();

}  // namespace gpureap::sim
