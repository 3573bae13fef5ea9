// AMD GPUs end to end (issue 39): a simulated AMD node (`gpureap-sim node --vendor
// amd`: a KFD sysfs tree and DRM nodes written by a simulated amdgpu driver process),
// real holder processes, real signals, real /proc. gpureap reads it through
// gpu::AmdSource ($GPUREAP_SYSFS_ROOT), with no ROCm library.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace amd_test {

constexpr std::uint64_t GiB = 1ULL << 30;

// gpureap pointed at the node's sysfs tree, as `gpureap-sim node --vendor amd` prints.
CommandResult amd(const SimNode& node, const std::vector<std::string>& args) {
  return node.gpureap(args, std::chrono::seconds(60),
                      {{"GPUREAP_SYSFS_ROOT", node.dir() + "/sys"}});
}

const nlohmann::json* holder_of(const nlohmann::json& gpu, pid_t pid) {
  for (const auto& h : gpu["holders"])
    if (h["pid"] == pid) return &h;
  return nullptr;
}

TEST(Amd, OrphanedTensorParallelWorkersAreNamedWithTheirVramAndFreedVerified) {
  SimNode node({"--vendor", "amd", "--gpus", "4", "--memory", "192GiB"});
  // vLLM TP-2 whose server was SIGKILLed (vllm#34816, ROCm/ATOM#1511); ROCm's teardown is
  // slower than CUDA's: the memory comes back 300 ms after each worker's death.
  auto crashed = node.hold({"--gpu", "0", "--children", "2", "--bytes", "80GiB", "--orphan",
                            "--title", "VLLM::Worker_TP{k}", "--server-title",
                            "vllm serve org/Model --tensor-parallel-size 2", "--release-delay",
                            "300ms"});
  ASSERT_EQ(crashed.holders.size(), 2u);
  // A live holder on GPU 3: its parent (this test) lives.
  auto live = node.hold({"--gpu", "3", "--bytes", "20GiB"}, /*foreground=*/true);
  ASSERT_EQ(live.holders.size(), 1u);

  auto s = amd(node, {"status", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const auto status = s.json();
  ASSERT_EQ(status["gpus"].size(), 4u) << s.out;
  const auto& g0 = status["gpus"][0];
  EXPECT_EQ(g0["minor"], 128);  // renderD128
  EXPECT_EQ(g0["name"], "AMD Instinct MI300X");
  EXPECT_EQ(g0["vendor"], "amd");
  EXPECT_TRUE(g0["uuid"].get<std::string>().starts_with("GPU-")) << g0["uuid"];
  EXPECT_EQ(g0["memory"]["total_bytes"], 192 * GiB);
  for (const auto& [pid, gpu] : crashed.holders) {
    const auto* h = holder_of(status["gpus"][gpu], pid);
    ASSERT_NE(h, nullptr) << "worker " << pid << " on GPU " << gpu << ": " << s.out;
    EXPECT_EQ((*h)["gpu_bytes"], 80 * GiB);  // KFD's vram_<gpu_id>
    EXPECT_EQ((*h)["orphaned"], true) << h->dump();
    EXPECT_EQ((*h)["uses_gpu"], true);
    const std::string devices = (*h)["devices"].dump();
    EXPECT_NE(devices.find("/dev/kfd"), std::string::npos) << devices;
    EXPECT_NE(devices.find("/dev/dri/renderD12" + std::to_string(8 + gpu)), std::string::npos)
        << devices;
    EXPECT_EQ(status["gpus"][gpu]["unattributed_bytes"], 0) << status["gpus"][gpu].dump();
  }
  const auto* kept = holder_of(status["gpus"][3], live.holders[0].first);
  ASSERT_NE(kept, nullptr) << s.out;
  EXPECT_EQ((*kept)["orphaned"], false);
  EXPECT_EQ((*kept)["gpu_bytes"], 20 * GiB);

  // The instance spans GPUs 0-1: a row per GPU with its rank; -v, each worker's title.
  auto text = amd(node, {"status"});
  EXPECT_NE(text.out.find("worker TP1"), std::string::npos) << text.out;
  auto verbose = amd(node, {"status", "-v"});
  EXPECT_NE(verbose.out.find("VLLM::Worker_TP1"), std::string::npos) << verbose.out;
  EXPECT_NE(text.out.find("orphaned"), std::string::npos) << text.out;

  // free --orphans: the workers signalled, the release measured in mem_info_vram_used.
  auto r = amd(node, {"free", "--orphans", "--all", "--yes", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto freed = r.json();
  ASSERT_EQ(freed["gpus"].size(), 4u) << r.out;
  for (const auto& g : freed["gpus"]) {
    EXPECT_TRUE(g["freed"]) << g.dump();
    // Back at baseline, plus what the live holder it left alone on GPU 3 keeps.
    EXPECT_LE(g["memory_after_bytes"].get<std::uint64_t>(),
              g["baseline_bytes"].get<std::uint64_t>() +
                  g.value("left_alone_bytes", std::uint64_t{0}) + 512 * 1024 * 1024)
        << g.dump();
    EXPECT_EQ(g.value("left_alone_bytes", std::uint64_t{0}), g["index"] == 3 ? 20 * GiB : 0)
        << g.dump();
  }
  for (const auto& [pid, gpu] : crashed.holders) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_TRUE(alive(live.holders[0].first));

  const auto after = amd(node, {"status", "--json"}).json();
  EXPECT_TRUE(after["gpus"][0]["holders"].empty()) << after["gpus"][0].dump();
  EXPECT_EQ(after["gpus"][3]["holders"].size(), 1u);
  // wait: GPUs 0 and 1 are free, GPU 3 is not.
  EXPECT_EQ(amd(node, {"wait", "--gpu", "0,1", "--timeout", "5s"}).exit_code, 0);
  auto busy = amd(node, {"wait", "--gpu", "3", "--timeout", "300ms"});
  EXPECT_NE(busy.exit_code, 0) << busy.out << busy.err;
}

TEST(Amd, TheAgentAnnouncesTheOrphanedWorkers) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  auto env = node.env();
  env["GPUREAP_SYSFS_ROOT"] = node.dir() + "/sys";
  WatchChild agent({GPUREAP_BIN, "--json", "watch", "--no-listen", "--tick", "200ms"}, env);
  auto started = agent.next_line(std::chrono::seconds(20));
  ASSERT_TRUE(started) << agent.transcript();
  auto first = nlohmann::json::parse(started->text, nullptr, false);
  ASSERT_TRUE(first.is_object()) << started->text;
  EXPECT_EQ(first.value("gpu_count", 0), 2) << started->text;
  auto held = node.hold({"--gpu", "0", "--children", "2", "--bytes", "80GiB", "--orphan",
                         "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(held.holders.size(), 2u);
  auto e = agent.wait_for_json(
      [](const nlohmann::json& j) { return j.value("event", "") == "orphaned_memory"; },
      std::chrono::seconds(20));
  ASSERT_TRUE(e) << agent.transcript();
  EXPECT_EQ((*e)["gpus"], nlohmann::json::array({0, 1})) << e->dump();
  EXPECT_EQ((*e)["bytes"], 160 * GiB) << e->dump();
  ASSERT_EQ((*e)["holders"].size(), 2u) << e->dump();
  EXPECT_EQ((*e)["instance"]["engine"], "vllm") << e->dump();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(Amd, StrandedVramWithNoProcessIsDriverHeld) {
  // ROCm/rocm-systems#8263: VRAM "inaccessible, with no procs actively using them".
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  auto held = node.hold({"--gpu", "1", "--children", "1", "--bytes", "46GiB", "--orphan",
                         "--stuck", "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(held.holders.size(), 1u);
  // Driver-held once flat past the release budget (docs/release.md), 500 ms here.
  auto r = amd(node, {"free", "--orphans", "--gpu", "1", "--reset", "--yes", "--json", "--timeout",
                      "2s", "--release-budget", "500ms"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto j = r.json();
  ASSERT_EQ(j["leftovers"].size(), 1u) << r.out;
  EXPECT_EQ(j["leftovers"][0]["class"], "driver_held") << j["leftovers"].dump(1);
  EXPECT_FALSE(alive(held.holders[0].first));
  // A reset is reported, never run: nvidia-smi is NVIDIA's, and amd-smi's is not modelled.
  ASSERT_EQ(j["resets"].size(), 1u) << r.out;
  EXPECT_EQ(j["resets"][0]["attempted"], false);
  EXPECT_NE(j["resets"][0]["blockers"].dump().find("does not reset AMD GPUs"), std::string::npos)
      << j["resets"].dump();
  // No process left in KFD's view, the memory still used.
  const auto s = amd(node, {"status", "--json"}).json();
  EXPECT_TRUE(s["gpus"][1]["holders"].empty());
  EXPECT_GE(s["gpus"][1]["memory"]["used_bytes"].get<std::uint64_t>(), 46 * GiB);
}

// Issue 39: Slurm puts an AMD job's GPUs in ROCR_VISIBLE_DEVICES; a ROCm UUID there names
// the job's GPU as one in CUDA_VISIBLE_DEVICES does on NVIDIA.
TEST(Amd, TheEpilogTakesTheJobsGpuFromRocrVisibleDevices) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  const std::string scontrol = node.dir() + "/scontrol";
  std::ofstream(scontrol) << "#!/bin/sh\necho \"$@\" >> " << node.dir() << "/scontrol.calls\n"
                          << "[ \"$2\" = show ] && echo 'NodeName=gpu01 Arch=x86_64 State=IDLE "
                             "ThreadsPerCore=1'\nexit 0\n";
  ::chmod(scontrol.c_str(), 0755);
  const std::map<std::string, std::string> sysfs = {{"GPUREAP_SYSFS_ROOT", node.dir() + "/sys"}};
  auto status = node.gpureap({"--json", "status"}, std::chrono::seconds(60), sysfs);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const std::string uuid = status.json()["gpus"][1]["uuid"].get<std::string>();
  ASSERT_EQ(status.json()["gpus"][1]["vendor"], "amd") << uuid;
  auto job = node.hold({"--gpu", "1", "--bytes", "8GiB", "--daemon"}, false,
                       {{"SLURM_JOB_ID", own_job_id(44)}});
  ASSERT_EQ(job.holders.size(), 1u);
  auto env = sysfs;
  env.insert({{"GPUREAP_SCONTROL", scontrol},
              {"SLURMD_NODENAME", "gpu01"},
              {"SLURM_JOB_ID", own_job_id(44)},
              {"ROCR_VISIBLE_DEVICES", uuid}});
  auto r = node.gpureap({"--json", "slurm", "epilog", "--deadline", "20s"},
                        std::chrono::seconds(60), env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.json()["job_gpus"], nlohmann::json::array({1})) << r.out;
  EXPECT_FALSE(alive(job.holders[0].first));
}

}  // namespace amd_test
}  // namespace gpureap::e2e

namespace gpureap::e2e {
namespace amd_test {

// The seed's restart on an AMD node: the crashed server's worker is freed (verified in
// mem_info_vram_used) before the new server starts.
TEST(Amd, RunFreeFirstReclaimsAnOrphanedWorkerThenStarts) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  auto held = node.hold({"--gpu", "1", "--bytes", "64GiB", "--children", "1", "--orphan",
                         "--title", "VLLM::Worker_TP{k}", "--release-delay", "200ms"});
  ASSERT_EQ(held.holders.size(), 1u);
  const std::string marker = node.dir() + "/started";
  // --yes: an orphan known by its title alone is an inference, which run acts on only
  // when told to (docs/orphans.md).
  auto r = amd(node, {"run", "--gpu", "1", "--free-first", "--yes", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << r.err;
  EXPECT_FALSE(alive(held.holders[0].first));
  const auto s = amd(node, {"status", "--json"}).json();
  EXPECT_LE(s["gpus"][1]["memory"]["used_bytes"].get<std::uint64_t>(), GiB) << s["gpus"][1].dump();
}

}  // namespace amd_test
}  // namespace gpureap::e2e

namespace gpureap::e2e {
namespace amd_test {

// The Slurm epilog on an AMD node: the job's GPUs come as device minors (gres.conf's
// File=/dev/dri/renderD[128-...] numbers, as File=/dev/nvidia[0-7] gives NVIDIA's), its
// escaped worker (SLURM_JOB_ID in its environment, daemonized) is freed and verified, another
// job's worker on another GPU is kept.
TEST(Amd, TheSlurmEpilogFreesAJobsEscapedWorkerOnItsGpu) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  const std::string scontrol = node.dir() + "/scontrol";
  std::ofstream(scontrol) << "#!/bin/sh\necho \"$@\" >> " << node.dir() << "/scontrol.calls\n"
                          << "[ \"$2\" = show ] && echo 'NodeName=gpu01 Arch=x86_64 State=IDLE "
                             "ThreadsPerCore=1'\nexit 0\n";
  ::chmod(scontrol.c_str(), 0755);
  auto job = node.hold({"--gpu", "1", "--bytes", "8GiB", "--daemon"}, false,
                       {{"SLURM_JOB_ID", own_job_id(42)}});
  auto other = node.hold({"--gpu", "0", "--bytes", "8GiB", "--daemon"}, false,
                         {{"SLURM_JOB_ID", own_job_id(43)}});
  ASSERT_EQ(job.holders.size(), 1u);
  ASSERT_EQ(other.holders.size(), 1u);
  auto r = node.gpureap({"--json", "slurm", "epilog", "--deadline", "20s"},
                        std::chrono::seconds(60),
                        {{"GPUREAP_SYSFS_ROOT", node.dir() + "/sys"},
                         {"GPUREAP_SCONTROL", scontrol},
                         {"SLURMD_NODENAME", "gpu01"},
                         {"SLURM_JOB_ID", own_job_id(42)},
                         {"SLURM_JOB_GPUS", "129"}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = r.json();
  EXPECT_EQ(j["job_gpus"], nlohmann::json::array({1})) << r.out;
  EXPECT_TRUE(j["held"].empty()) << r.out;
  EXPECT_FALSE(alive(job.holders[0].first));
  EXPECT_TRUE(alive(other.holders[0].first)) << "another job's worker on another GPU";
}

}  // namespace amd_test
}  // namespace gpureap::e2e
