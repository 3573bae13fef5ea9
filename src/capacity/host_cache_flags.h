#pragma once
// SGLang's hierarchical cache (HiCache) as its flags switch it on and size it, from
// gpureap's own flags or a launch command alike. SGLang's rules (server_args.py,
// sgl-project/sglang; docs/plan.md quotes them):
//   --enable-hierarchical-cache   off by default: without it no host pool is built,
//                                 whatever --hicache-size/--hicache-ratio say
//   --hicache-ratio R             host pool = R x the device pool; 2.0 by default
//                                 (1.2 with --hicache-host-memory-mode buffer_only)
//   --hicache-size GB             GB per rank; overrides the ratio; 0 (the default)
//                                 means "use the ratio"
// Pure: no I/O.

#include <string>
#include <vector>

#include "capacity/kv_planner.h"
#include "util/result.h"

namespace gpureap::capacity {

/// SGLang's defaults (server_args.py: hicache_ratio "Defaults to 2.0 in cache mode,
/// 1.2 in buffer_only mode"; hicache_size 0).
inline constexpr double kSglangHicacheRatio = 2.0;
inline constexpr double kSglangHicacheBufferOnlyRatio = 1.2;

/// The hierarchical-cache flags as given, each as typed ("" when not given).
struct HostCacheFlags {
  bool enabled = false;          // --enable-hierarchical-cache
  std::string size;              // --hicache-size
  std::string ratio;             // --hicache-ratio
  std::string host_memory_mode;  // --hicache-host-memory-mode (SGLang's default: cache)
};

/// What SGLang would build from those flags.
struct HostCacheDecision {
  HostCacheRequest request;  // neither set: no host cache
  std::string text;          // for the plan's heading: "--hicache-ratio 2 (SGLang's default)"
  std::vector<std::string> notes;  // flags that SGLang would ignore, said once each
};

/// Decides the host cache the way SGLang does. A value given is checked even when it
/// is ignored (a typo stays an error, exit 2, naming the flag).
Result<HostCacheDecision> decide_host_cache(const HostCacheFlags& flags);

}  // namespace gpureap::capacity
