#pragma once
// The node the top/ tests look at: the case study on two GPUs. GPU 0 holds a crashed
// SGLang server's two tensor-parallel workers (orphaned, one instance, launcher gone);
// GPU 1 a live server's one worker (its own process, not worth a heading).

#include "inventory/test_views.h"

namespace gpureap::top::testing {

using namespace gpureap::inventory::testing;

inline constexpr pid_t kOrphanA = 4722;
inline constexpr pid_t kOrphanB = 4723;
inline constexpr pid_t kLive = 5001;

inline inventory::Inventory case_study() {
  inventory::Inventory inv;
  inventory::GpuView g0 = idle_gpu(0);
  add_holder(g0, kOrphanA, 20 * kGiB, Lineage::orphaned);
  add_holder(g0, kOrphanB, 20 * kGiB, Lineage::orphaned);
  inventory::GpuView g1 = idle_gpu(1);
  add_holder(g1, kLive, 30 * kGiB, Lineage::live);
  g1.info.utilization_gpu = 87;
  for (auto& gh : g0.holders) {
    gh.holder.instance = "4721";
    gh.holder.pgid = 4721;
    gh.holder.comm = "sglang::schedul";
    gh.holder.cmdline = "sglang::scheduler_TP" + std::to_string(gh.holder.id.pid - kOrphanA);
    gh.holder.engine.engine = proc::Engine::sglang;
    gh.holder.engine.role = proc::EngineRole::scheduler;
  }
  g0.holders[0].holder.container = "docker:3f2a1b";
  g0.holders[1].holder.container = "docker:3f2a1b";
  g1.holders[0].holder.instance = "5001";
  g1.holders[0].holder.user = "bob";
  g1.holders[0].holder.cmdline = "python3 train.py --epochs 90";
  inv.gpus = {g0, g1};

  inventory::Instance crashed;
  crashed.key = "4721";
  crashed.kind = inventory::InstanceKind::process_group;
  crashed.pgid = 4721;
  crashed.engine = proc::Engine::sglang;
  crashed.launcher_pid = 4721;
  crashed.container = "docker:3f2a1b";
  crashed.members = {{{kOrphanA, 1000}, proc::EngineRole::scheduler, "TP0"},
                     {{kOrphanB, 1000}, proc::EngineRole::scheduler, "TP1"}};
  crashed.gpus = {gpu::dev(0)};
  crashed.bytes = 40 * kGiB;
  crashed.orphaned = 2;
  inventory::Instance lone;
  lone.key = "5001";
  lone.kind = inventory::InstanceKind::process;
  lone.members = {{{kLive, 1000}, proc::EngineRole::none, ""}};
  lone.gpus = {gpu::dev(1)};
  lone.bytes = 30 * kGiB;
  inv.instances = {crashed, lone};
  return inv;
}

/// The case study plus, on GPU 1, a live server whose members form a tree: 7000 (the
/// API server) leads 7001 (the engine core, parent of workers 7002 and 7003) and 7004.
/// Worker 7004 uses the most memory.
inline inventory::Inventory with_server_tree() {
  inventory::Inventory inv = case_study();
  inventory::Instance server;
  server.key = "7000";
  server.kind = inventory::InstanceKind::process_group;
  server.pgid = 7000;
  server.engine = proc::Engine::vllm;
  server.launcher_pid = 7000;
  server.gpus = {gpu::dev(1)};
  const std::vector<std::pair<pid_t, pid_t>> tree = {
      {7000, 4000}, {7001, 7000}, {7002, 7001}, {7003, 7001}, {7004, 7000}};
  for (auto [pid, ppid] : tree) {
    const std::uint64_t bytes = (pid == 7004 ? 9 : 1) * kGiB;
    add_holder(inv.gpus[1], pid, bytes, Lineage::live);
    auto& h = inv.gpus[1].holders.back().holder;
    h.ppid = ppid;
    h.pgid = 7000;
    h.instance = "7000";
    h.engine.engine = proc::Engine::vllm;
    h.cmdline = "vllm-" + std::to_string(pid);
    server.members.push_back({{pid, 1000}, proc::EngineRole::none, ""});
    server.bytes += bytes;
  }
  inv.instances.push_back(server);
  return inv;
}

}  // namespace gpureap::top::testing
