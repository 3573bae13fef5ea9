#pragma once
// Hand-built GPU views for the unit tests of what reads an inventory (the fleet checks'
// rule, inventory/node_check.h, and its summary line, report/summary.h): an idle GPU,
// then holders by lineage, unexplained memory, a ghost or an unreadable GPU on top, so
// that each state of inventory::gpu_state is one line of a test.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/test_devices.h"
#include "inventory/inventory.h"
#include "util/units.h"

namespace gpureap::inventory::testing {

inline constexpr std::uint64_t kTestTotal = 80 * kGiB;
inline constexpr std::uint64_t kTestBaseline = 512 * kMiB;

/// GPU `index` at its recorded baseline with no holder (GpuState::free).
inline GpuView idle_gpu(unsigned index) {
  GpuView view;
  view.info.id = gpu::dev(index);
  view.info.minor = index;
  view.info.uuid = "GPU-" + std::to_string(index);
  view.info.memory = gpu::GpuMemory{kTestTotal, kTestBaseline, std::nullopt};
  view.info.processes_known = true;
  view.baseline = {kTestBaseline, true};
  return view;
}

enum class Lineage { live, detached, orphaned };

/// Adds a holder `pid` that uses `bytes` of the GPU (or, `uses_gpu` false, only has its
/// node open, its memory on another GPU).
inline GpuView& add_holder(GpuView& view, pid_t pid, std::uint64_t bytes, Lineage lineage,
                           bool uses_gpu = true) {
  GpuHolder gh;
  gh.holder.id = {pid, 1000};
  gh.holder.comm = "python3";
  gh.holder.cmdline = "python3 -m sglang.launch_server";
  gh.holder.user = "me";
  gh.holder.ppid = lineage == Lineage::live ? 4000 : 1;
  gh.holder.orphaned = lineage == Lineage::orphaned;
  gh.holder.detached = lineage == Lineage::detached;
  if (gh.holder.orphaned) gh.holder.orphan_reason = "re-parented to init (pid 1)";
  if (gh.holder.detached)
    gh.holder.detached_reason = "re-parented to init (pid 1); it leads 2 live GPU workers";
  gh.uses_gpu = uses_gpu;
  if (uses_gpu) {
    gh.gpu_bytes = bytes;
    if (view.info.memory) view.info.memory->used += bytes;
    view.attributed_bytes += bytes;
  }
  view.holders.push_back(std::move(gh));
  return view;
}

/// Adds a client `pid`: it has the GPU's node open and NVML lists it nowhere (a
/// monitoring agent, nvidia-persistenced, nvidia-smi), so it holds no memory here.
inline GpuView& add_client(GpuView& view, pid_t pid, std::string comm) {
  GpuHolder gh;
  gh.holder.id = {pid, 1000};
  gh.holder.comm = std::move(comm);
  gh.holder.user = "root";
  gh.holder.ppid = 1;
  gh.holder.found_by.insert(proc::FoundBy::fd);
  gh.uses_gpu = true;  // build_inventory: NVML lists it on no other GPU
  view.holders.push_back(std::move(gh));
  return view;
}

/// Adds `bytes` above the baseline that no visible process explains, classified `why`.
inline GpuView& add_unexplained(GpuView& view, std::uint64_t bytes, Unexplained why) {
  view.info.memory->used += bytes;
  view.unattributed_bytes += bytes;
  view.unexplained = why;
  view.unexplained_detail = "why, and what to do";
  return view;
}

/// Busy for the whole window with no process using it (Busy::ghost).
inline GpuView& make_ghost(GpuView& view) {
  view.busy.kind = Busy::ghost;
  view.busy.samples = {100, 100, 100, 100, 100};
  return view;
}

/// NVML could not read the GPU (GpuState::not_measured).
inline GpuView& make_unreadable(GpuView& view) {
  view.info.memory.reset();
  view.info.problem = "nvmlDeviceGetMemoryInfo_v2(GPU " + gpu::device_text(view.info.id) +
                      "): GPU is lost";
  return view;
}

/// A node of `gpus` idle GPUs, 0..gpus-1, NVML answering.
inline Inventory idle_node(unsigned gpus) {
  Inventory inv;
  for (unsigned i = 0; i < gpus; ++i) inv.gpus.push_back(idle_gpu(i));
  return inv;
}

}  // namespace gpureap::inventory::testing
