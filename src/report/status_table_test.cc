// The status table's closing advice: it names only what `free --orphans` would act on.

#include "report/status_table.h"
#include "util/units.h"
#include "gpu/test_devices.h"

#include <gtest/gtest.h>

#include "util/test_golden.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gpureap::report {
namespace {


inventory::GpuHolder orphan(pid_t pid, const std::string& comm, std::uint64_t bytes) {
  inventory::GpuHolder gh;
  gh.holder.id = {pid, 1000};
  gh.holder.comm = comm;
  gh.holder.cmdline = comm;
  gh.holder.user = "me";
  gh.holder.ppid = 1;
  gh.holder.orphaned = true;
  gh.holder.orphan_reason = "re-parented to init (pid 1)";
  gh.gpu_bytes = bytes;
  return gh;
}

inventory::Inventory node_with(std::vector<inventory::GpuHolder> holders) {
  inventory::Inventory inv;
  inventory::GpuView view;
  view.info.id = gpu::dev(0);
  view.info.memory = gpu::GpuMemory{80 * kGiB, 0, std::nullopt};
  for (const auto& h : holders) {
    view.info.memory->used += h.gpu_bytes.value_or(0);
    view.attributed_bytes += h.gpu_bytes.value_or(0);
  }
  view.holders = std::move(holders);
  inv.gpus.push_back(std::move(view));
  return inv;
}

reclaim::Target target(const inventory::GpuHolder& gh) {
  return {gh.holder.id, gh.holder.comm, gh.holder.cmdline, gh.holder.user, gpu::devs({0}), *gh.gpu_bytes,
          "orphaned"};
}

reclaim::Skipped skipped(const inventory::GpuHolder& gh, reclaim::SkipKind kind) {
  return {gh.holder.id, gh.holder.comm, gpu::devs({0}), *gh.gpu_bytes, kind, "why"};
}

TEST(StatusTable, AProtectedOrphanIsNotOfferedToFree) {
  // defects-wave1 §1.7: "Free them:" for a protected nv-hostengine.
  auto dcgm = orphan(501, "nv-hostengine", 1 * kGiB);
  reclaim::Plan plan;
  plan.skipped.push_back(skipped(dcgm, reclaim::SkipKind::protected_process));
  std::string out = status_table(node_with({dcgm}), Style{}, plan);
  EXPECT_NE(out.find("501"), std::string::npos) << out;  // still shown, as an orphan
  EXPECT_EQ(out.find("gpureap free"), std::string::npos) << out;
  EXPECT_EQ(out.find("orphaned process"), std::string::npos) << out;
}

// Issue 53: the card's health with -v (nvidia-smi -q's power cap, clock event reasons,
// ECC errors), each part only where the driver can say; a worry is marked "!".
TEST(StatusTable, VerboseShowsTheCardsHealthWhereTheDriverSays) {
  inventory::Inventory inv = node_with({});
  gpu::GpuInfo& info = inv.gpus[0].info;
  info.power_mw = 75'000;
  info.power_limit_mw = 700'000;
  info.clock_event_reasons = 0x1;
  info.ecc_uncorrected = 0;
  const reclaim::Plan plan;
  std::string out = status_table(inv, Style{}, plan, {}, /*verbose*/ true);
  EXPECT_NE(out.find("\n  power 75 W of a 700 W cap; clocks not held down; 0 uncorrected ECC "
                     "errors since the driver loaded\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(status_table(inv, Style{}, plan).find("700 W cap"), std::string::npos)
      << "without -v: not shown";
  info.clock_event_reasons = 0x80 | 0x4;
  info.ecc_uncorrected = 1;
  out = status_table(inv, Style{}, plan, {}, true);
  EXPECT_NE(out.find("\n  ! power 75 W of a 700 W cap; clocks held down by power cap, power "
                     "brake; 1 uncorrected ECC error since the driver loaded\n"),
            std::string::npos)
      << out;
  info.power_limit_mw.reset();
  info.clock_event_reasons.reset();
  info.ecc_uncorrected.reset();  // a driver that cannot say: no line at all
  EXPECT_EQ(status_table(inv, Style{}, plan, {}, true).find("ECC"), std::string::npos);
}

TEST(StatusTable, OneFreeableOrphanIsSingularAndCountsAlone) {
  auto worker = orphan(502, "python3", 20 * kGiB), dcgm = orphan(503, "nv-hostengine", 1 * kGiB);
  reclaim::Plan plan;
  plan.targets.push_back(target(worker));
  plan.skipped.push_back(skipped(dcgm, reclaim::SkipKind::protected_process));
  std::string out = status_table(node_with({worker, dcgm}), Style{}, plan);
  EXPECT_NE(out.find("1 orphaned process (parent gone) holds 20.0 GiB on GPU 0. Free it: "
                     "gpureap free --orphans --gpu 0\n"),
            std::string::npos)
      << out;
}

// A keeper of a dead owner's memory (issue 52): its row carries the bytes, the line under it
// says whose memory and how it keeps it, and the closing advice offers free --orphans even
// when no lineage rule calls the keeper itself orphaned. Clients show only with -v.
TEST(StatusTable, AKeeperSaysWhoseMemoryItKeepsAndClientsShowWithVerbose) {
  auto keeper = orphan(600, "python3", 8 * kGiB);
  keeper.holder.orphaned = false;
  keeper.holder.orphan_reason.clear();
  keeper.holder.ppid = 77;
  keeper.holder.keeper = proc::KeeperClass::inheritor;
  keeper.holder.kept_owner = 599;
  keeper.holder.keeper_reason = "keeps 8.00 GiB of dead pid 599, whose device files it inherited";
  inventory::GpuHolder monitor;
  monitor.holder.id = {700, 1000};
  monitor.holder.comm = "nvitop";
  monitor.uses_gpu = false;
  monitor.client = true;
  reclaim::Plan plan;
  plan.targets.push_back(target(keeper));
  const auto inv = node_with({keeper, monitor});
  std::string out = status_table(inv, Style{}, plan, {}, /*verbose*/ true);
  EXPECT_NE(out.find("keeper, inheritor (pid 600): keeps 8.00 GiB of dead pid 599, whose device "
                     "files it inherited"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("holds 8.00 GiB on GPU 0. Free it: gpureap free --orphans --gpu 0"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("clients (the device open, no memory"), std::string::npos) << out;
  EXPECT_NE(out.find("700 (nvitop)"), std::string::npos) << out;
  EXPECT_EQ(status_table(inv, Style{}, plan).find("700"), std::string::npos);
}

// Issue 53: NVML's per-process SM sample, a hint on one -v line; holders NVML did not
// sample are not named (unknown is not 0 %), and a long list says how many it left out.
TEST(StatusTable, VerboseNamesEachSampledHoldersSmShareOnOneLine) {
  std::vector<inventory::GpuHolder> holders;
  for (pid_t pid = 500; pid < 513; ++pid) {
    holders.push_back(orphan(pid, "python3", 1 * kGiB));
    if (pid != 501) holders.back().sm_percent = pid == 500 ? 37U : 0U;
  }
  const auto inv = node_with(holders);
  std::string out = status_table(inv, Style{}, {}, {}, /*verbose*/ true);
  const std::string line = "NVML's latest per-process sample (a hint): 500 SM 37 %, 502 SM 0 %";
  EXPECT_NE(out.find(line), std::string::npos) << out;
  EXPECT_EQ(out.find("501 SM"), std::string::npos) << "no sample of 501: not named";
  EXPECT_NE(out.find(", 510 SM 0 % and 2 more\n"), std::string::npos) << out;
  EXPECT_EQ(status_table(inv, Style{}, {}).find("per-process sample"), std::string::npos)
      << "a -v line only";
  for (auto& gh : holders) gh.sm_percent.reset();
  EXPECT_EQ(status_table(node_with(holders), Style{}, {}, {}, true).find("per-process sample"),
            std::string::npos)
      << "no sample at all: no line";
}

TEST(StatusTable, OtherUsersOrphansAreFreedWithSudo) {
  auto mine = orphan(504, "python3", 20 * kGiB), theirs = orphan(505, "python3", 10 * kGiB);
  reclaim::Plan plan;
  plan.targets.push_back(target(mine));
  plan.skipped.push_back(skipped(theirs, reclaim::SkipKind::not_permitted));
  std::string out = status_table(node_with({mine, theirs}), Style{}, plan);
  EXPECT_NE(out.find("2 orphaned processes (parent gone) hold 30.0 GiB on GPU 0. Free them: "
                     "sudo gpureap free --orphans --gpu 0\n"),
            std::string::npos)
      << out;
}

// Issue 26 part 3: at a terminal's width no line is longer, the command takes the
// room left, the role comes before it and the container has a column of its own.
inventory::Inventory tp_server() {
  auto worker = orphan(28836, "python3", 20 * kGiB);
  worker.holder.cmdline =
      "/opt/torch/.venv/bin/python3 -m sglang.launch_server --model-path "
      "/models/Qwen3-235B-A22B-Instruct --tp-size 8 --mem-fraction-static 0.85 --port 30000";
  worker.holder.engine.role = proc::EngineRole::scheduler;
  worker.holder.engine.ranks.tp = 3;
  worker.holder.container = "k8s-pod:6b9a8f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/3f2a1b9c8d7e";
  worker.holder.found_by = {proc::FoundBy::source, proc::FoundBy::fd, proc::FoundBy::mapping};
  worker.holder.state = 'S';
  worker.holder.age_seconds = 70;
  auto inv = node_with({worker});
  inv.gpus[0].info.name = "NVIDIA H200";
  inv.gpus[0].info.pci_bus_id = "00000000:18:00.0";
  inv.gpus[0].info.uuid = "GPU-41b2d037-d879-9d76-f30c-3e3dadd0dd78";
  return inv;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos;
       start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  return out;
}

std::string row_of(const std::string& out, std::string_view pid) {
  for (const auto& l : lines_of(out))
    if (l.starts_with("    " + std::string(pid) + " ")) return l;
  return "";
}

TEST(StatusTable, AtTheTerminalsWidthNoLineIsLongerAndTheCommandFillsTheRoom) {
  auto inv = tp_server();
  const std::string cmd = inv.gpus[0].holders[0].holder.cmdline;
  std::size_t shown_at_80 = 0;
  for (std::size_t width : {80u, 160u}) {
    std::string out = status_table(inv, Style{}, {}, TableWidth{.columns = width});
    for (const auto& l : lines_of(out)) EXPECT_LE(l.size(), width) << out;
    std::string row = row_of(out, "28836");
    ASSERT_FALSE(row.empty()) << out;
    // Cut exactly at the edge, with an ellipsis: as long as the room allows.
    EXPECT_EQ(row.size(), width) << out;
    EXPECT_TRUE(row.ends_with("...")) << row;
    const auto at = row.find("/opt/torch");
    ASSERT_NE(at, std::string::npos) << row;
    EXPECT_EQ(cmd.substr(0, width - at - 3), row.substr(at, width - at - 3)) << row;
    // The role comes before the command.
    const auto role = row.find("scheduler TP3");
    ASSERT_NE(role, std::string::npos) << row;
    EXPECT_LT(role, at) << row;
    if (width == 80) shown_at_80 = width - at;
    if (width == 160) {
      EXPECT_GT(width - at, shown_at_80 + 20) << "the command grows with the terminal";
      EXPECT_NE(out.find("CONTAINER"), std::string::npos) << out;
      EXPECT_NE(row.find("k8s-pod:6b9a8f0e-1c2d..."), std::string::npos) << row;
      EXPECT_NE(out.find("FOUND BY"), std::string::npos) << out;
    }
  }
}

TEST(StatusTable, WideShowsTheWholeCommandAndContainer) {
  auto inv = tp_server();
  std::string out = status_table(inv, Style{}, {}, TableWidth{.columns = 80, .wide = true});
  std::string row = row_of(out, "28836");
  EXPECT_TRUE(row.ends_with(inv.gpus[0].holders[0].holder.cmdline)) << row;
  EXPECT_NE(row.find(inv.gpus[0].holders[0].holder.container), std::string::npos) << row;
}

TEST(StatusTable, NotATerminalKeepsTheFixedLayout) {
  auto inv = tp_server();
  std::string out = status_table(inv, Style{}, {});
  // The layout scripts read: the command cut at 60, the container after it.
  EXPECT_NE(out.find("    PID      USER       STATE          AGE    GPU MEM  FOUND BY    PARENT "
                     "      ROLE            COMMAND\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(inv.gpus[0].holders[0].holder.cmdline.substr(0, 57) + "... [k8s-pod:"),
            std::string::npos)
      << out;
}

// Issue 37: one instance over 4 GPUs (of 5) is said once: a row per GPU, its evidence
// under the instance; -v shows every GPU's block as before.
TEST(StatusTable, AnInstanceThatSpansGpusIsOneRowPerGpuAndItsEvidenceOnce) {
  inventory::Inventory inv;
  inventory::Instance in;
  in.key = "7969";
  in.kind = inventory::InstanceKind::process_group;
  in.pgid = 7969;
  in.engine = proc::Engine::sglang;
  in.orphaned = 4;
  for (unsigned g = 0; g < 5; ++g) {
    inventory::GpuView view;
    view.info.id = gpu::dev(g);
    view.info.uuid = "GPU-" + std::to_string(g);
    view.info.memory = gpu::GpuMemory{96 * kGiB, 2 * kMiB, std::nullopt};
    if (g < 4) {
      auto gh = orphan(7970 + static_cast<pid_t>(g), "sglang::schedul", 92 * kGiB);
      gh.holder.cmdline = "sglang::scheduler_TP" + std::to_string(g);
      gh.holder.instance = "7969";
      gh.holder.engine.role = proc::EngineRole::scheduler;
      view.info.memory->used += 92 * kGiB;
      view.attributed_bytes = 92 * kGiB;
      view.holders.push_back(gh);
      in.members.push_back({gh.holder.id, proc::EngineRole::scheduler, ""});
      in.gpus.push_back(gpu::dev(g));
    }
    inv.gpus.push_back(std::move(view));
  }
  in.bytes = 4 * 92 * kGiB;
  inv.instances = {in};
  const std::string out = status_table(inv, Style{}, {}, TableWidth{.columns = 80});
  for (const auto& l : lines_of(out)) EXPECT_LE(l.size(), 80u) << out;
  // The GPU table: the GPUs with their instance, pid and parent, and the idle GPU 4.
  EXPECT_NE(out.find("GPU"), std::string::npos) << out;
  EXPECT_EQ(out.find("GPU-"), std::string::npos) << "UUIDs are -v's: " << out;
  for (pid_t p = 7970; p < 7974; ++p) {
    bool row = false;
    for (const auto& l : lines_of(out))
      row = row || (l.find(" " + std::to_string(p) + " ") != std::string::npos &&
                    l.find("7969") != std::string::npos && l.find("1 ORPHAN") != std::string::npos);
    EXPECT_TRUE(row) << p << "\n" << out;
  }
  bool idle = false;
  for (const auto& l : lines_of(out)) idle = idle || (l.starts_with("  4 ") && l.find("free") != std::string::npos);
  EXPECT_TRUE(idle) << out;
  // Why, once, under the instance; what now, at the end.
  const std::string why = "re-parented to init (pid 1)";
  ASSERT_NE(out.find(why), std::string::npos) << out;
  EXPECT_EQ(out.find(why, out.find(why) + 1), std::string::npos) << out;
  EXPECT_NE(out.find("gpureap free --orphans --instance 7969"), std::string::npos) << out;
  EXPECT_LT(lines_of(out).size(), 20u) << out;
  // -v: each GPU's block, each holder's row.
  const std::string verbose = status_table(inv, Style{}, {}, TableWidth{.columns = 80}, true);
  for (unsigned g = 0; g < 5; ++g)
    EXPECT_NE(verbose.find("GPU-" + std::to_string(g)), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("sglang::scheduler_TP3"), std::string::npos) << verbose;
  // An instance on one GPU keeps the blocks.
  inv.instances[0].gpus = {gpu::dev(0)};
  EXPECT_NE(status_table(inv, Style{}, {}, TableWidth{.columns = 80}).find("GPU-0"),
            std::string::npos);
}

}  // namespace
}  // namespace gpureap::report

namespace gpureap::report {
namespace {

void expect_status_golden(const std::string& name, const std::string& text) {
  expect_golden_file(std::string(GPUREAP_FIXTURES) + "/status/" + name, text);
}

// Issue 53 #9, the review's mixed node at 80 columns: NVIDIA 0-3, MI300X 4-7; a vLLM
// TP-2 orphaned on GPU 6,7 (the table's reason to be) and a lone live job on GPU 5 (a
// block of its own). Every GPU is a row, in index order (GPU 5 was dropped from the
// table and printed after it), with a VENDOR column; GPU 5's block follows the table.
TEST(StatusTable, EveryGpuIsARowInIndexOrderWithItsVendorOnAMixedNode) {
  inventory::Inventory inv;
  inventory::Instance in;
  in.key = "18396";
  in.kind = inventory::InstanceKind::process_group;
  in.pgid = 18396;
  in.engine = proc::Engine::vllm;
  in.orphaned = 2;
  for (unsigned g = 0; g < 8; ++g) {
    inventory::GpuView view;
    view.info.id = gpu::dev(g);
    view.info.name = g < 4 ? "NVIDIA H200" : "AMD Instinct MI300X";
    // NVML's UUIDs; amdgpu's unique_id spelled as gpureap spells it.
    view.info.uuid = g < 4 ? "GPU-7282a2b4-0000-0000-0000-00000000000" + std::to_string(g)
                           : "GPU-00000000000000a" + std::to_string(g);
    view.info.memory = gpu::GpuMemory{192 * kGiB, 512 * kMiB, std::nullopt};
    if (g >= 6) {
      auto gh = orphan(18391 + static_cast<pid_t>(g), "VLLM::Worker_TP", 30 * kGiB);
      gh.holder.cmdline = "VLLM::Worker_TP" + std::to_string(g - 6);
      gh.holder.instance = "18396";
      gh.holder.provenance = proc::Provenance::inferred;
      gh.holder.engine.role = proc::EngineRole::worker;
      view.info.memory->used += 30 * kGiB;
      view.attributed_bytes = 30 * kGiB;
      view.holders.push_back(gh);
      in.members.push_back({gh.holder.id, proc::EngineRole::worker,
                            "TP" + std::to_string(g - 6)});
      in.gpus.push_back(gpu::dev(g));
    }
    if (g == 5) {
      inventory::GpuHolder job;
      job.holder.id = {18873, 1000};
      job.holder.comm = "python3";
      job.holder.cmdline = "python3 train.py --epochs 3";
      job.holder.user = "alice";
      job.holder.ppid = 18800;
      job.holder.instance = "18873";
      job.gpu_bytes = 30 * kGiB;
      view.info.memory->used += 30 * kGiB;
      view.attributed_bytes = 30 * kGiB;
      view.holders.push_back(job);
      inventory::Instance alone;
      alone.key = "18873";
      alone.members = {{job.holder.id, proc::EngineRole::none, ""}};
      alone.gpus = {gpu::dev(5)};
      inv.instances.push_back(alone);
    }
    inv.gpus.push_back(std::move(view));
  }
  in.bytes = 60 * kGiB;
  inv.instances.insert(inv.instances.begin(), in);
  const std::string out = status_table(inv, Style{}, {}, TableWidth{.columns = 80});
  expect_status_golden("mixed-node-80.txt", out);
  // What the golden shows, said: GPU 0..7 in order, each once as a row.
  std::size_t at = 0;
  for (unsigned g = 0; g < 8; ++g) {
    const auto row = out.find("\n  " + std::to_string(g) + " ", at);
    ASSERT_NE(row, std::string::npos) << g << "\n" << out;
    at = row + 1;
  }
  EXPECT_NE(out.find("VENDOR"), std::string::npos) << out;
  EXPECT_GT(out.find("GPU 5  AMD Instinct MI300X"), out.find("\n  7 ")) << "block after the table";
}

}  // namespace
}  // namespace gpureap::report
