#pragma once
// The agent's file descriptors: its limit, what it has open, and how many pidfds
// it may spend watching processes. Any local user can start processes that hold a
// GPU's node (mode 0666 on every NVIDIA node): a pidfd for each, unbounded, ran a
// root agent out of descriptors and blinded it (W3-04).

#include <cstddef>
#include <cstdint>
#include <optional>

namespace gpureap::agent {

/// What RLIMIT_NOFILE was and is after raise_descriptor_limit().
struct DescriptorLimit {
  std::uint64_t before = 0;  // the soft limit at start
  std::uint64_t soft = 0;    // the soft limit now in force
  std::uint64_t hard = 0;
};

/// Raises RLIMIT_NOFILE's soft limit to its hard limit (systemd's default soft
/// limit is 1024 for select(2)'s sake; the agent polls, it never selects).
/// Never fails: a limit that cannot be raised stays as it was.
DescriptorLimit raise_descriptor_limit();

/// The descriptors this process has open (/proc/self/fd), nullopt when unreadable.
std::optional<std::size_t> open_descriptors();

/// The pidfds the watcher may hold under a soft limit of `limit`: the limit less
/// what the rest of the agent may need at once (a scan's directories, the HTTP
/// server's connections and their duplicates, control clients, the NVML worker's
/// pipes: 384), a quarter of a limit too small for that, never fewer than 16.
std::size_t pidfd_budget(std::uint64_t limit);

}  // namespace gpureap::agent
