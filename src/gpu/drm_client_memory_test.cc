#include "gpu/drm_client_memory.h"

#include <gtest/gtest.h>

namespace gpureap::gpu {
namespace {

proc::Holder drm_holder(pid_t pid, std::vector<proc::DrmClient> clients) {
  proc::Holder h;
  h.id.pid = pid;
  h.drm_clients = std::move(clients);
  return h;
}

GpuInfo gpu_at(unsigned index, std::string pci) {
  GpuInfo g;
  g.id = DeviceId{index};
  g.pci_bus_id = std::move(pci);
  g.processes_known = true;
  return g;
}

TEST(DrmClientMemory, AClientSharedOverForkCountsOnceForItsFirstHolder) {
  GpuSnapshot snap;
  snap.gpus = {gpu_at(0, "0000:03:00.0"), gpu_at(1, "0000:0c:00.0")};
  std::vector<proc::Holder> holders = {
      // 100 and its child 101 share client 5 (an inherited fd); 101 has its own 6 too.
      drm_holder(100, {{"amdgpu", "0000:03:00.0", 5, 1000}}),
      drm_holder(101, {{"amdgpu", "0000:03:00.0", 5, 1000}, {"amdgpu", "0000:03:00.0", 6, 300}}),
      // 102: a client on the other GPU, and one without memory figures.
      drm_holder(102, {{"amdgpu", "0000:0c:00.0", 1, 50}, {"amdgpu", "0000:03:00.0", 9, {}}}),
  };
  add_drm_client_memory(snap, holders);
  ASSERT_EQ(snap.gpus[0].processes.size(), 2U);
  EXPECT_EQ(snap.gpus[0].processes[0].pid, 100U);
  EXPECT_EQ(snap.gpus[0].processes[0].used_bytes, 1000U);
  EXPECT_EQ(snap.gpus[0].processes[1].pid, 101U);
  EXPECT_EQ(snap.gpus[0].processes[1].used_bytes, 300U);
  ASSERT_EQ(snap.gpus[1].processes.size(), 1U);
  EXPECT_EQ(snap.gpus[1].processes[0].pid, 102U);
  EXPECT_EQ(snap.gpus[1].processes[0].used_bytes, 50U);
}

TEST(DrmClientMemory, TheSourcesOwnFigureIsKept) {
  GpuSnapshot snap;
  snap.gpus = {gpu_at(0, "00000000:03:00.0")};  // NVML's spelling of the address
  snap.gpus[0].processes = {{100, 4096, ProcessKind::compute}, {101, std::nullopt, ProcessKind::compute}};
  add_drm_client_memory(snap, {drm_holder(100, {{"amdgpu", "0000:03:00.0", 1, 7}}),
                               drm_holder(101, {{"amdgpu", "0000:03:00.0", 2, 8}}),
                               drm_holder(103, {{"amdgpu", "0000:03:00.0", 3, 0}})});
  ASSERT_EQ(snap.gpus[0].processes.size(), 2U);  // 103: 0 bytes is no use
  EXPECT_EQ(snap.gpus[0].processes[0].used_bytes, 4096U);
  EXPECT_EQ(snap.gpus[0].processes[1].used_bytes, 8U);
}

}  // namespace
}  // namespace gpureap::gpu
