#pragma once
// DRM fdinfo as evidence of per-process GPU memory (nvtop's parse_drm_fdinfo_*
// callbacks, applied after the one /proc sweep): the clients the scan read from
// each holder's fds on a vendor's DRM nodes (proc::Holder::drm_clients) are
// joined to the snapshot's GPUs by PCI address (drm-pdev).

#include <vector>

#include "gpu/gpu_source.h"
#include "proc/holder.h"

namespace gpureap::gpu {

/// For each GPU of `snapshot` with a PCI address: the holders (sorted by pid, as the
/// scan gives them) whose DRM clients are on that device and say their device memory.
/// Each client (drm-pdev, drm-client-id) counts once across every process, for the first
/// holder that has it: an fd inherited over fork is one client ("userspace should make
/// sure to not double account", drm-usage-stats.rst). A pid the source does not list on
/// that GPU is added with the sum of its clients' bytes when it is above 0; a listed
/// pid without a figure gets it; a listed pid with a figure (KFD's, NVML's) keeps it.
/// A NVIDIA snapshot's holders have no DRM clients: nothing changes.
void add_drm_client_memory(GpuSnapshot& snapshot, const std::vector<proc::Holder>& holders);

}  // namespace gpureap::gpu
