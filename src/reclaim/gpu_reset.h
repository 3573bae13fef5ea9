#pragma once
// Opt-in GPU reset for driver-held memory: check the preconditions nvidia-smi's
// manual lists, then run `nvidia-smi --gpu-reset -i <bus id>` and keep its exact
// message. gpureap never changes GPU settings itself (persistence mode, MIG,
// clocks): a blocker is reported with the command that would clear it.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"

namespace gpureap::reclaim {

struct ResetOutcome {
  gpu::DeviceId gpu;
  std::vector<std::string> blockers;  // preconditions not met: reset not attempted
  std::vector<std::string> notes;     // facts not checked, for the operator
  bool attempted = false;
  std::string command;  // the command line run
  std::string output;   // nvidia-smi's stdout+stderr, verbatim
  int exit_code = -1;
  bool succeeded = false;  // exit 0
};

/// The nvidia-smi to run: $GPUREAP_NVIDIA_SMI, else "nvidia-smi" from PATH.
std::string nvidia_smi_path();

/// How long a running agent is asked to let go of NVML for one reset (it takes
/// NVML up again as soon as the reset is over, or at this deadline).
inline constexpr std::chrono::milliseconds kResetSourceYield{180000};

/// Checks the preconditions for resetting `view`'s GPU (root, its bus id, and no
/// blocker of its physical GPU by inventory::reset_blockers_of, the rule `status
/// --blockers` prints: a MIG device's reset is its whole GPU's); runs the reset when
/// they hold. Disconnects `gpus` first (our own NVML session is a client too).
/// With `agent_socket` (a running `gpureap watch`, whose NVML session is a client
/// as well): asks the agent to let go of NVML first and to take it up again after,
/// telling it how the reset went; an agent that does not answer is no blocker of
/// its own (its session is then "in use", in nvidia-smi's words).
ResetOutcome reset_gpu(const inventory::GpuView& view, const inventory::Inventory& inv,
                       gpu::GpuSource& gpus,
                       const std::optional<std::string>& agent_socket = std::nullopt);

}  // namespace gpureap::reclaim
