#pragma once
// `--gate slurm`: the node drained through scontrol (cluster/scontrol.h, the wrapper the
// Slurm hooks use) with a reason starting "gpureap:", and resumed only while its drain
// reason is gpureap's own: the NHC rule of `gpureap slurm health`
// (cluster::decide_health_action), so a drain an administrator set is never lifted and
// never overwritten. With dry_run it reads the node's state and says what it would do.

#include <chrono>
#include <memory>
#include <string>

#include "agent/gate.h"
#include "cluster/scontrol.h"

namespace gpureap::agent {

/// Each scontrol call's bound (a controller that does not answer costs this, on the
/// gate's thread only).
inline constexpr std::chrono::milliseconds kSlurmGateTimeout{10000};

std::unique_ptr<NodeAction> make_slurm_gate(cluster::Scontrol scontrol, std::string node,
                                            bool dry_run);

}  // namespace gpureap::agent
