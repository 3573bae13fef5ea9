#pragma once
// Opt-in GPU reset for driver-held memory: check the preconditions nvidia-smi's
// manual lists, then run `nvidia-smi --gpu-reset -i <bus id>` and keep its exact
// message. gpureap never changes GPU settings itself (persistence mode, MIG,
// clocks): a blocker is reported with the command that would clear it.

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

/// Checks the preconditions for resetting `view`'s GPU; runs the reset when
/// they hold. Disconnects `gpus` first (our own NVML session is a client too).
ResetOutcome reset_gpu(const inventory::GpuView& view, const inventory::Inventory& inv,
                       gpu::GpuSource& gpus);

}  // namespace gpureap::reclaim
