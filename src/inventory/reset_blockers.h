#pragma once
// What blocks a GPU reset or a MIG reconfiguration of a physical GPU (issue 25, item 6).
// The driver refuses `nvidia-smi --gpu-reset`, `nvidia-smi mig -dgi/-cgi` and
// mig-parted's changes with "In use by another client" while any process has the GPU
// open, compute or not (DCGM#276, mig-parted#181), and nvidia-smi lists only the
// processes with a context: a monitoring agent, the k8s device plugin or a leaked file
// descriptor stay invisible. This names every one of them, typed, each with its next
// step. One rule: `status --blockers` prints it and `free --reset` checks it before it
// resets. gpureap never changes GPU or MIG settings itself. Pure: reads an inventory.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device_id.h"
#include "inventory/inventory.h"
#include "proc/holder.h"

namespace gpureap::inventory {

enum class BlockerClass {
  compute,            // memory or a context on the GPU or one of its MIG devices
  compute_elsewhere,  // computes on another GPU and has this one's node open (CUDA opens
                      // the node of every GPU it may use)
  source_client,        // the GPU's node (or a MIG capability of it) open, no memory on it:
                      // a monitoring agent, nvidia-smi, the device plugin, a leaked fd
  driver_client,      // nvidiactl / nvidia-uvm open and no GPU node: may be a client of any GPU
  gpureap_agent,      // the running `gpureap watch`: its NVML session, let go on request
  persistence_mode,   // persistence mode on: a reset needs it off
};
/// Its name (util/enum_names.h), as `--json` and the tables spell it.
std::string_view enum_name(BlockerClass c);

struct Blocker {
  BlockerClass cls = BlockerClass::compute;
  /// The process (pid 0 for persistence_mode). For gpureap_agent only its pid is known
  /// when the agent answered the look (it never lists its own NVML helper).
  proc::Holder process;
  /// compute: the devices it holds memory on (MIG devices, or the whole GPU);
  /// compute_elsewhere: the GPUs it computes on.
  std::vector<gpu::DeviceId> devices;
  std::optional<std::uint64_t> bytes;  // compute: NVML's figures summed; nullopt when none
  std::string known_as;  // what a known program is ("DCGM host engine"); "" otherwise
  std::string what;      // what it holds, one phrase ("has GPU 0's node open, no memory on it")
  std::string next_step;  // as concrete as the evidence allows: a command, or what to do
};

/// One physical GPU and what blocks resetting or reconfiguring it.
struct GpuBlockers {
  gpu::DeviceId gpu;  // the physical GPU (never a MIG device)
  std::string uuid;   // the physical GPU's
  std::string pci_bus_id;
  bool mig_mode = false;
  std::vector<gpu::DeviceId> mig_devices;  // the MIG devices the look shows
  std::vector<Blocker> blockers;           // by class, then pid
  /// Why "nothing blocks" cannot be said even when `blockers` is empty, one sentence
  /// each: NVML did not answer, persistence mode unknown, a PID namespace hides
  /// processes. (Processes the scan could not inspect are the inventory's problems,
  /// shown as status shows them: a warning, as for `status --check`.)
  std::vector<std::string> unknowns;
  bool blocked() const { return !blockers.empty(); }
};

/// The running agent, when the look came from it (Inventory::source "agent"): its
/// NVML session is a client of every GPU.
struct AgentSession {
  pid_t pid = 0;
};

/// Every physical GPU of `inv` (MIG devices folded into their GPU, in the look's order),
/// with what blocks a reset or a MIG change of it:
/// - a process NVML lists on the GPU or one of its MIG devices, or one holding memory
///   there: compute, next step `gpureap free --gpu <its devices>`;
/// - a process with the GPU's node or a MIG capability of it open and no memory there
///   (a holder NVML lists nowhere, an "other holder" of a GPU in MIG mode): nvml_client;
/// - a process NVML lists on another GPU with this one's node open: compute_elsewhere,
///   next step `gpureap free --pid PID`;
/// - processes with nvidiactl/nvidia-uvm only: driver_client, on every GPU;
/// - `agent` (a running `gpureap watch`): gpureap_agent, next step its yield (SIGUSR1);
/// - persistence mode on: persistence_mode, next step `nvidia-smi -pm 0 -i BUS`.
/// A process's next step is its service's or container's stop command when it runs in
/// one (proc::container_stop_command), else `kill PID`; a known GPU infrastructure
/// program (free never signals it) is never told to `gpureap free`. NVML pids this /proc
/// does not show are compute blockers described by NVML alone.
std::vector<GpuBlockers> find_reset_blockers(const Inventory& inv,
                                             std::optional<AgentSession> agent = std::nullopt);

/// The blockers of the physical GPU `gpu` is (or is part of); nullopt when `inv` has
/// no view of it.
std::optional<GpuBlockers> reset_blockers_of(const Inventory& inv, gpu::DeviceId gpu,
                                             std::optional<AgentSession> agent = std::nullopt);

/// What a known GPU program is ("DCGM host engine"), by its comm (cut to 15 characters
/// by the kernel) or the name it was started as; "" for one not known.
std::string known_program(const proc::Holder& h);

}  // namespace gpureap::inventory
