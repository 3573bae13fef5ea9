// What blocks a reset or a MIG change: each kind of client typed, with its next step,
// on hand-built looks (test_views.h): a whole GPU, and a GPU in MIG mode whose two MIG
// devices are views of their own.

#include "inventory/reset_blockers.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"

namespace gpureap::inventory {
namespace {

using testing::add_holder;
using testing::idle_gpu;
using testing::Lineage;

// GPU 0 in MIG mode: MIG devices 0/gi1/ci0 and 0/gi2/ci0 on /dev/nvidia0.
GpuView mig_device(unsigned gi) {
  GpuView view = idle_gpu(0);
  view.info.id = gpu::DeviceId{0, gi, 0};
  view.info.uuid = "MIG-" + std::to_string(gi);
  view.info.parent_uuid = "GPU-0";
  view.info.pci_bus_id = "00000000:18:00.0";
  view.info.persistence_mode = false;
  return view;
}

Inventory mig_node() {
  Inventory inv;
  inv.gpus.push_back(mig_device(1));
  inv.gpus.push_back(mig_device(2));
  GpuView whole = idle_gpu(1);
  whole.info.pci_bus_id = "00000000:2A:00.0";
  whole.info.persistence_mode = false;
  inv.gpus.push_back(whole);
  return inv;
}

// A holder NVML lists (a context) on the view, with `bytes`.
GpuView& add_compute(GpuView& view, pid_t pid, std::uint64_t bytes) {
  add_holder(view, pid, bytes, Lineage::live);
  view.holders.back().holder.found_by.insert(proc::FoundBy::source);
  view.info.processes.push_back({static_cast<std::uint32_t>(pid), bytes});
  return view;
}

// A process with the view's node open that NVML lists nowhere (no memory, no context).
GpuView& add_client(GpuView& view, pid_t pid, std::string comm) {
  add_holder(view, pid, 0, Lineage::live);
  auto& gh = view.holders.back();
  gh.gpu_bytes.reset();
  gh.holder.comm = comm;
  gh.holder.argv = {"/usr/bin/" + comm};
  return view;
}

proc::Holder other(pid_t pid, std::string comm, std::set<unsigned> minors) {
  proc::Holder h;
  h.id = {pid, 1000};
  h.comm = std::move(comm);
  h.user = "root";
  h.gpu_minors = std::move(minors);
  return h;
}

const Blocker* find(const GpuBlockers& g, pid_t pid) {
  for (const auto& b : g.blockers)
    if (b.process.id.pid == pid) return &b;
  return nullptr;
}

TEST(ResetBlockers, AnIdleGpuWithPersistenceOffHasNone) {
  Inventory inv = mig_node();
  auto all = find_reset_blockers(inv);
  ASSERT_EQ(all.size(), 2u) << "MIG devices fold into their physical GPU";
  EXPECT_EQ(all[0].gpu, gpu::dev(0));
  EXPECT_TRUE(all[0].mig_mode);
  EXPECT_EQ(all[0].mig_devices, (std::vector<gpu::DeviceId>{{0, 1, 0}, {0, 2, 0}}));
  EXPECT_EQ(all[0].uuid, "GPU-0");
  EXPECT_EQ(all[0].pci_bus_id, "00000000:18:00.0");
  EXPECT_FALSE(all[0].blocked());
  EXPECT_TRUE(all[0].unknowns.empty());
  EXPECT_EQ(all[1].gpu, gpu::dev(1));
  EXPECT_FALSE(all[1].mig_mode);
  EXPECT_FALSE(all[1].blocked());
}

TEST(ResetBlockers, EveryClientOfAMigGpuIsTypedWithItsNextStep) {
  Inventory inv = mig_node();
  add_compute(inv.gpus[0], 500, 6 * kGiB);                     // on 0/gi1/ci0
  add_client(inv.gpus[1], 501, "python3");                     // a capability of 0/gi2/ci0 only
  inv.other_holders.push_back(other(502, "nv-hostengine", {0}));  // GPU 0's own node
  inv.other_holders.back().container = "systemd:nvidia-dcgm.service";
  inv.other_holders.push_back(other(503, "python3", {}));  // nvidiactl/uvm only
  inv.other_holders.push_back(other(504, "python3", {7}));  // a node of no known GPU
  inv.gpus[0].info.persistence_mode = true;

  auto g = reset_blockers_of(inv, gpu::DeviceId{0, 2, 0}, AgentSession{900});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->gpu, gpu::dev(0)) << "a MIG device stands for its physical GPU";
  ASSERT_EQ(g->blockers.size(), 6u);

  const Blocker* compute = find(*g, 500);
  ASSERT_NE(compute, nullptr);
  EXPECT_EQ(compute->cls, BlockerClass::compute);
  EXPECT_EQ(compute->devices, (std::vector<gpu::DeviceId>{{0, 1, 0}}));
  EXPECT_EQ(compute->bytes, 6 * kGiB);
  EXPECT_EQ(compute->next_step, "gpureap free --gpu 0/gi1/ci0");

  const Blocker* cap = find(*g, 501);
  ASSERT_NE(cap, nullptr);
  EXPECT_EQ(cap->cls, BlockerClass::source_client);
  EXPECT_EQ(cap->what, "has a capability of MIG device 0/gi2/ci0 open, no memory on it");
  EXPECT_EQ(cap->next_step, "kill 501");

  const Blocker* dcgm = find(*g, 502);
  ASSERT_NE(dcgm, nullptr);
  EXPECT_EQ(dcgm->cls, BlockerClass::source_client);
  EXPECT_EQ(dcgm->known_as, "DCGM host engine");
  EXPECT_EQ(dcgm->what, "has GPU 0's own node open and no MIG device of it");
  EXPECT_EQ(dcgm->next_step, "systemctl stop nvidia-dcgm.service");

  const Blocker* ctl = find(*g, 503);
  ASSERT_NE(ctl, nullptr);
  EXPECT_EQ(ctl->cls, BlockerClass::driver_client);
  EXPECT_EQ(find(*g, 504), nullptr) << "a node of another GPU blocks nothing here";

  const Blocker* agent = find(*g, 900);
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(agent->cls, BlockerClass::gpureap_agent);
  EXPECT_NE(agent->next_step.find("kill -USR1 900"), std::string::npos) << agent->next_step;
  EXPECT_NE(agent->next_step.find("systemctl kill -s USR1 --kill-whom=main gpureap-watch"),
            std::string::npos);

  EXPECT_EQ(g->blockers.back().cls, BlockerClass::persistence_mode);
  EXPECT_EQ(g->blockers.back().next_step, "nvidia-smi -pm 0 -i 00000000:18:00.0");
  // By class: compute, nvml_client..., driver_client, agent, persistence.
  EXPECT_EQ(g->blockers.front().process.id.pid, 500);

  // The other physical GPU: only the driver client and the agent, which may hold any GPU.
  auto whole = reset_blockers_of(inv, gpu::dev(1), AgentSession{900});
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->blockers.size(), 2u);
  EXPECT_EQ(whole->blockers[0].cls, BlockerClass::driver_client);
  EXPECT_EQ(whole->blockers[1].cls, BlockerClass::gpureap_agent);
}

TEST(ResetBlockers, AWholeGpusClientsAndItsComputeProcessesAreToldApart) {
  Inventory inv = testing::idle_node(2);
  for (auto& v : inv.gpus) v.info.persistence_mode = false;
  add_compute(inv.gpus[0], 600, 2 * kGiB);
  add_client(inv.gpus[0], 601, "dcgm-exporter");
  inv.gpus[0].holders.back().holder.container = "k8s-pod:1234-abcd/0123456789ab";
  add_client(inv.gpus[0], 602, "nvidia-smi");
  // A CUDA process computing on GPU 1 with GPU 0's node open as well.
  add_compute(inv.gpus[1], 603, kGiB);
  add_holder(inv.gpus[0], 603, 0, Lineage::live, /*uses_gpu=*/false);

  auto g = reset_blockers_of(inv, gpu::dev(0));
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->mig_mode);
  ASSERT_EQ(g->blockers.size(), 4u);
  EXPECT_EQ(find(*g, 600)->cls, BlockerClass::compute);
  EXPECT_EQ(find(*g, 600)->next_step, "gpureap free --gpu 0");
  EXPECT_EQ(find(*g, 601)->cls, BlockerClass::source_client);
  EXPECT_EQ(find(*g, 601)->known_as, "DCGM exporter");
  EXPECT_EQ(find(*g, 601)->next_step, "delete its pod (pod uid 1234-abcd)");
  EXPECT_EQ(find(*g, 602)->what, "has /dev/nvidia0 open, no memory or context on it");
  EXPECT_EQ(find(*g, 602)->next_step, "kill 602");
  const Blocker* elsewhere = find(*g, 603);
  EXPECT_EQ(elsewhere->cls, BlockerClass::compute_elsewhere);
  EXPECT_EQ(elsewhere->devices, gpu::devs({1}));
  EXPECT_TRUE(elsewhere->next_step.starts_with("gpureap free --pid 603")) << elsewhere->next_step;
  EXPECT_TRUE(g->unknowns.empty());
}

TEST(ResetBlockers, KnownInfrastructureWithAContextIsStoppedNotFreed) {
  // free never signals GPU infrastructure it knows by name: its next step is its service.
  Inventory inv = testing::idle_node(1);
  inv.gpus[0].info.persistence_mode = false;
  add_compute(inv.gpus[0], 700, kGiB);
  auto& h = inv.gpus[0].holders.back().holder;
  h.comm = "nvidia-persiste";  // the kernel's 15 characters
  h.container = "systemd:nvidia-persistenced.service";
  auto g = reset_blockers_of(inv, gpu::dev(0));
  ASSERT_EQ(g->blockers.size(), 1u);
  EXPECT_EQ(g->blockers[0].cls, BlockerClass::compute);
  EXPECT_EQ(g->blockers[0].known_as, "NVIDIA persistence daemon");
  EXPECT_EQ(g->blockers[0].next_step, "systemctl stop nvidia-persistenced.service");
}

TEST(ResetBlockers, AProcessInAnLxcGuestIsKilledThereByItsPidThere) {
  Inventory inv = testing::idle_node(1);
  inv.gpus[0].info.persistence_mode = false;
  add_client(inv.gpus[0], 800, "python3");
  auto& h = inv.gpus[0].holders.back().holder;
  h.container = "lxc:129";
  h.nspid = {800, 42};
  auto g = reset_blockers_of(inv, gpu::dev(0));
  EXPECT_EQ(g->blockers[0].next_step,
            "kill 42 inside LXC container 129 (Proxmox: pct exec 129 -- kill 42)");
}

TEST(ResetBlockers, TheAgentIsOneBlockerEvenWhenItsHelperIsSeen) {
  Inventory inv = testing::idle_node(1);
  inv.gpus[0].info.persistence_mode = false;
  add_client(inv.gpus[0], 901, "gpureap");
  inv.gpus[0].holders.back().holder.ppid = 900;  // the agent's NVML helper
  auto g = reset_blockers_of(inv, gpu::dev(0), AgentSession{900});
  ASSERT_EQ(g->blockers.size(), 1u);
  EXPECT_EQ(g->blockers[0].cls, BlockerClass::gpureap_agent);
  EXPECT_EQ(g->blockers[0].process.id.pid, 900);
  // Without the agent's answer the helper is a client like any other, named.
  auto direct = reset_blockers_of(inv, gpu::dev(0));
  ASSERT_EQ(direct->blockers.size(), 1u);
  EXPECT_EQ(direct->blockers[0].cls, BlockerClass::source_client);
  EXPECT_EQ(direct->blockers[0].known_as, "gpureap");
}

TEST(ResetBlockers, WhatCannotBeSeenIsSaidAndAnUnseenNvmlPidIsACompute) {
  Inventory inv = testing::idle_node(1);  // persistence mode unknown
  inv.gpus[0].source_unseen.push_back({4211, kGiB, gpu::ProcessKind::compute});
  inv.problems.push_back({77, "fd table unreadable (permission denied)"});
  auto g = reset_blockers_of(inv, gpu::dev(0));
  ASSERT_EQ(g->blockers.size(), 1u);
  EXPECT_EQ(g->blockers[0].cls, BlockerClass::compute);
  EXPECT_EQ(g->blockers[0].process.id.pid, 4211);
  EXPECT_TRUE(g->blockers[0].next_step.starts_with("run gpureap on the host"));
  ASSERT_EQ(g->unknowns.size(), 1u) << "uninspected processes are the look's warning";
  EXPECT_NE(g->unknowns[0].find("persistence mode is unknown"), std::string::npos);

  Inventory down = testing::idle_node(1);
  down.source_state = gpu::SourceState::hung;
  down.gpus[0].info.processes_known = false;
  add_client(down.gpus[0], 300, "python3");
  auto d = reset_blockers_of(down, gpu::dev(0));
  ASSERT_EQ(d->blockers.size(), 1u);
  EXPECT_EQ(d->blockers[0].cls, BlockerClass::compute) << "no process list: it may compute";
  EXPECT_NE(d->unknowns.front().find("NVML is unusable (hung)"), std::string::npos);
}

TEST(ResetBlockers, KnownProgramsAreNamedByCommOrTheNameTheyStartedAs) {
  proc::Holder h;
  h.comm = "nvidia-device-p";
  EXPECT_EQ(known_program(h), "Kubernetes NVIDIA device plugin");
  h.comm = "main";
  h.argv = {"/usr/bin/dcgm-exporter", "-f", "x.csv"};
  EXPECT_EQ(known_program(h), "DCGM exporter");
  h.argv = {"python3"};
  EXPECT_EQ(known_program(h), "");
}

}  // namespace
}  // namespace gpureap::inventory
