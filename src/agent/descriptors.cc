#include "agent/descriptors.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>

namespace gpureap::agent {

DescriptorLimit raise_descriptor_limit() {
  DescriptorLimit out;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return out;
  out.before = out.soft = limit.rlim_cur;
  out.hard = limit.rlim_max;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) out.soft = raised.rlim_cur;
  }
  return out;
}

std::optional<std::size_t> open_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::size_t n = 0;
  while (const dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // not the directory's own descriptor
}

std::size_t pidfd_budget(std::uint64_t limit) {
  // The rest of the agent at its busiest: 128 HTTP connections, each duplicated
  // (http_server.cc), a few dozen control clients, a scan's few directories per
  // worker, the NVML worker's pipes, stdio, the lock, the audit trail.
  constexpr std::uint64_t kReserve = 384;
  constexpr std::uint64_t kFloor = 16;
  const std::uint64_t budget = limit > 2 * kReserve ? limit - kReserve : limit / 4;
  return static_cast<std::size_t>(std::max(kFloor, budget));
}

}  // namespace gpureap::agent
