#pragma once
// MIG capability device nodes (issue 25). A process on a MIG device opens
// /dev/nvidia<minor of the physical GPU> and two capability nodes,
// /dev/nvidia-caps/nvidia-cap<N>, whose minors /proc/driver/nvidia-caps/mig-minors
// maps to `gpu<minor>/gi<id>/access` and `gpu<minor>/gi<id>/ci<id>/access`. Without
// nv_cap_enable_devfs=1 it opens
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>/ci<id>/access instead.
// Pure parsing: the callers read the files.

#include <compare>
#include <map>
#include <optional>
#include <string_view>

namespace gpureap::proc {

/// A MIG device as the driver's capability files name it: the physical GPU's minor,
/// the GPU instance, and the compute instance (unset for the GPU instance's own
/// capability).
struct MigAccess {
  unsigned gpu_minor = 0;
  unsigned gi = 0;
  std::optional<unsigned> ci;
  friend auto operator<=>(const MigAccess&, const MigAccess&) = default;
};

/// Parses /proc/driver/nvidia-caps/mig-minors: lines `gpu<M>/gi<G>/access <minor>` and
/// `gpu<M>/gi<G>/ci<C>/access <minor>` (others, such as `config 1`, are skipped, as
/// are malformed lines). Capability minor -> the MIG device it gives access to.
std::map<unsigned, MigAccess> parse_mig_minors(std::string_view text);

/// The MIG device a /proc/driver/nvidia/capabilities path names
/// (`.../gpu0/mig/gi1/ci0/access`, `.../gpu0/mig/gi1/access`), or nullopt.
std::optional<MigAccess> mig_access_of_capability_path(std::string_view path);

/// The same for a path relative to the capabilities directory (`gpu0/mig/gi1/ci0/access`).
std::optional<MigAccess> mig_access_of_capability(std::string_view relative);

}  // namespace gpureap::proc
