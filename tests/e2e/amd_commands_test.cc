// More commands on a simulated AMD node (issue 39, "Everything works on an AMD node"):
// `status --check`, the Slurm prolog and health check, and the seed's restart with
// `run --replace`. SimNode's environment points gpureap at the node's sysfs tree
// (GPUREAP_SYSFS_ROOT, as `gpureap-sim node --vendor amd` prints it); `top` on an AMD
// node is in top_test.cc (its tmux driver is there).

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "harness.h"

namespace gpureap::e2e {
namespace amd_commands_test {

constexpr std::uint64_t GiB = 1ULL << 30;

// scontrol's stand-in: logs its calls, answers `show node` with `state`.
std::map<std::string, std::string> fake_slurm(const SimNode& node, const std::string& state,
                                              std::map<std::string, std::string> more) {
  const std::string scontrol = node.dir() + "/scontrol";
  std::ofstream(scontrol) << "#!/bin/sh\nline=''; for a in \"$@\"; do line=\"$line|$a\"; done\n"
                          << "echo \"${line#|}\" >> " << node.dir() << "/scontrol.calls\n"
                          << "[ \"$2\" = show ] && echo 'NodeName=gpu01 Arch=x86_64 State="
                          << state << " ThreadsPerCore=1'\nexit 0\n";
  ::chmod(scontrol.c_str(), 0755);
  more["GPUREAP_SCONTROL"] = scontrol;
  more["SLURMD_NODENAME"] = "gpu01";
  return more;
}

std::string scontrol_calls(const SimNode& node) {
  std::ifstream in(node.dir() + "/scontrol.calls");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Amd, StatusCheckSaysCleanThenNamesTheOrphanedGpus) {
  SimNode node({"--vendor", "amd", "--gpus", "4", "--memory", "192GiB"});
  auto clean = node.gpureap({"status", "--check"});
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  auto live = node.hold({"--gpu", "0", "--bytes", "10GiB"}, /*foreground=*/true);
  ASSERT_EQ(live.holders.size(), 1u);
  auto crashed = node.hold({"--gpu", "2", "--children", "2", "--bytes", "80GiB", "--orphan",
                            "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(crashed.holders.size(), 2u);
  auto dirty = node.gpureap({"status", "--check"});
  EXPECT_EQ(dirty.exit_code, 1) << dirty.out << dirty.err;
  EXPECT_NE(dirty.out.find("problem: orphaned memory on GPU 2,3"), std::string::npos) << dirty.out;
  EXPECT_EQ(dirty.out.find("GPU 0"), std::string::npos) << "a live holder is no problem: "
                                                         << dirty.out;
}

// The prolog on an AMD GPU (SLURM_JOB_GPUS as render minors, gres.conf's
// File=/dev/dri/renderD[128-...]): a dirty GPU drains the node and fails the job.
TEST(Amd, ThePrologOnADirtyGpuDrainsTheNode) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  auto clean_env = fake_slurm(node, "IDLE", {{"SLURM_JOB_ID", own_job_id(45)}, {"SLURM_JOB_GPUS", "128"}});
  auto clean = node.gpureap({"slurm", "prolog"}, std::chrono::seconds(60), clean_env);
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  auto orphan = node.hold({"--gpu", "1", "--bytes", "8GiB", "--children", "1", "--orphan",
                           "--comm", "VLLM::Worker_TP0"});
  ASSERT_EQ(orphan.holders.size(), 1u);
  auto env = fake_slurm(node, "IDLE", {{"SLURM_JOB_ID", own_job_id(46)}, {"SLURM_JOB_GPUS", "129"}});
  auto dirty = node.gpureap({"slurm", "prolog"}, std::chrono::seconds(60), env);
  EXPECT_EQ(dirty.exit_code, 1) << dirty.out << dirty.err;
  const std::string calls = scontrol_calls(node);
  EXPECT_NE(calls.find("state=drain"), std::string::npos) << calls;
  EXPECT_NE(calls.find("reason=gpureap: GPU 1 live_holder 8.00 GiB pid "), std::string::npos)
      << calls;
  EXPECT_TRUE(alive(orphan.holders[0].first)) << "the prolog frees nothing by inference";
}

// The health check: VRAM stranded with no process (ROCm/rocm-systems#8263) drains the node.
TEST(Amd, TheHealthCheckDrainsANodeWithStrandedVram) {
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  auto stuck = node.hold({"--gpu", "1", "--bytes", "46GiB", "--stuck"});
  ASSERT_EQ(stuck.holders.size(), 1u);
  ASSERT_EQ(::kill(stuck.holders[0].first, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(stuck.holders[0].first); }));
  auto health = node.gpureap(
      {"--json", "--release-budget", "100ms", "slurm", "health", "--persist", "200ms"},
      std::chrono::seconds(60), fake_slurm(node, "IDLE", {}));
  EXPECT_EQ(health.exit_code, 1) << health.out << health.err;
  EXPECT_EQ(health.json()["node"]["action"], "drained") << health.out;
  const std::string calls = scontrol_calls(node);
  EXPECT_NE(calls.find("state=drain|reason=gpureap: GPU 1 driver_held "), std::string::npos)
      << calls;
}

// The seed's restart on an AMD node: `run --replace` frees the crashed server's instance
// (its workers orphaned, TP-2 on GPUs 0-1), verifies the release in mem_info_vram_used and
// its port closed, then launches; a live server on GPU 3 is kept.
TEST(Amd, RunReplaceFreesTheCrashedInstanceVerifiesAndLaunches) {
  SimNode node({"--vendor", "amd", "--gpus", "4", "--memory", "192GiB"});
  auto crashed = node.hold({"--gpu", "0", "--children", "2", "--bytes", "80GiB", "--orphan",
                            "--listen", "--title", "sglang::scheduler_TP{k}", "--server-title",
                            "python3 -m sglang.launch_server --model-path org/M --tp 2 --port 30000",
                            "--release-delay", "300ms"});
  ASSERT_EQ(crashed.holders.size(), 2u);
  auto live = node.hold({"--gpu", "3", "--children", "1", "--bytes", "8GiB", "--title",
                         "VLLM::Worker_TP{k}", "--server-title", "vllm serve org/Model-B"});
  ASSERT_EQ(live.holders.size(), 1u);
  const std::string marker = node.dir() + "/launched";
  const std::string key = std::to_string(crashed.leader);
  auto r = node.gpureap({"run", "--replace", key, "--yes", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << r.err;
  EXPECT_NE(r.err.find("gpureap run: freed sglang server " + key + " (2 processes, 160 GiB on "
                       "GPU 0,1) in "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("gpureap run: verified: GPU 0,1 back at baseline; port " +
                       std::to_string(crashed.listen_port) + " closed"),
            std::string::npos)
      << r.err;
  for (const auto& [pid, gpu] : crashed.holders) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_TRUE(alive(live.holders[0].first));
  const auto s = node.gpureap({"status", "--json"}).json();
  for (unsigned i : {0u, 1u})
    EXPECT_LE(s["gpus"][i]["memory"]["used_bytes"].get<std::uint64_t>(), GiB) << s["gpus"][i].dump();
}

}  // namespace amd_commands_test
}  // namespace gpureap::e2e
