// The nvidia-smi stand-in: reset preconditions, persistence, queries, logging.

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "sim_test_support.h"

namespace simtest {
namespace {

using namespace std::chrono_literals;

std::string read_smi_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(SimNvidiaSmi, ResetNeedsAnIdleGpuNoPersistenceAndRoot) {
  SimNode node;
  Nvml nvml;
  std::string smi = node.dir() + "/bin/nvidia-smi";  // argv[0] dispatch through the symlink
  const std::string bus0 = "00000000:18:00.0";

  // A live holder: in use, exit 255, nothing freed.
  auto live = node.hold({"--gpu", "0", "--bytes", "1GiB", "--detach"});
  auto r = run({smi, "--gpu-reset", "-i", bus0});
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "GPU " + bus0 + ": In use by another client");
  EXPECT_NE(r.out.find("1 device is currently being used by one or more other processes"),
            std::string::npos);
  ASSERT_EQ(node.sim({"cleanup", "--dir", node.dir()}).exit_code, 0);

  // Stuck memory with no process: the reset is the way out.
  auto stuck = node.hold({"--gpu", "0", "--bytes", "6GiB", "--stuck"});
  ::kill(stuck.invoker, SIGKILL);
  ::waitpid(stuck.invoker, nullptr, 0);
  EXPECT_EQ(nvml.used(0), kBaseline + 6 * kGiB);

  // Persistence mode counts as a client.
  ASSERT_EQ(node.sim({"persistence", "--dir", node.dir(), "--gpu", "0", "on"}).exit_code, 0);
  // This test's own NVML session is a client too: closed around each reset.
  r = nvml.without_session([&] { return run({smi, "-r", "-i", "0"}); });
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.out.find("In use by another client"), std::string::npos);
  r = run({smi, "-pm", "0", "-i", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Disabled persistence mode for GPU " + bus0), std::string::npos);

  // Not root: Insufficient Permissions, exit 4.
  // The nobody user must reach the stand-in: a checkout inside a directory other users
  // cannot enter (mktemp -d, a 0700 home) hides it, and that step is skipped, said below.
  ::chmod(node.dir().c_str(), 0755);
  const bool as_nobody = ::geteuid() == 0 && user_can_execute(65534, smi);
  if (::geteuid() == 0 && !as_nobody)
    std::cerr << "note: uid 65534 cannot reach " << smi << "; the non-root step is skipped\n";
  if (as_nobody) {
    r = nvml.without_session([&] { return run({smi, "-r", "-i", "0"}, 65534); });
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_NE(r.out.find("Insufficient Permissions"), std::string::npos) << r.out;
    EXPECT_EQ(nvml.used(0), kBaseline + 6 * kGiB);
  }

  r = nvml.without_session([&] { return run({smi, "-r", "-i", "0"}); });
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("GPU " + bus0 + " was successfully reset."), std::string::npos) << r.out;
  EXPECT_EQ(nvml.used(0), kBaseline);

  // Every invocation was logged, in order.
  auto log = read_smi_text(node.dir() + "/nvidia-smi.log");
  EXPECT_NE(log.find("nvidia-smi --gpu-reset -i " + bus0 + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("nvidia-smi -pm 0 -i 0\n"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), as_nobody ? 5 : 4) << log;
}

TEST(SimNvidiaSmi, ClientOnlyAndForkedFdHoldersBlockTheReset) {
  SimNode node;
  node.hold({"--gpu", "1", "--client-only", "--detach"});
  auto r = run({SIM_BIN, "nvidia-smi", "--dir", node.dir(), "-r", "-i", "1"});
  EXPECT_EQ(r.exit_code, 255) << r.out;
  // Other GPUs stay resettable.
  r = run({SIM_BIN, "nvidia-smi", "--dir", node.dir(), "-r", "-i", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(SimNvidiaSmi, QueryGpuPrintsCsvLikeTheSeedCommand) {
  SimNode node;
  node.hold({"--gpu", "3", "--bytes", "90GiB", "--detach"});
  auto r = run(
      {node.dir() + "/bin/nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "0, 2 MiB\n1, 2 MiB\n2, 2 MiB\n3, 92162 MiB\n");
  r = run({node.dir() + "/bin/nvidia-smi", "--query-compute-apps=pid,used_memory",
           "--format=csv,noheader,nounits"});
  EXPECT_NE(r.out.find(", 92160\n"), std::string::npos) << r.out;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "init_fail"}).exit_code, 0);
  r = run({node.dir() + "/bin/nvidia-smi"});
  EXPECT_EQ(r.exit_code, 9);
  EXPECT_NE(r.out.find("couldn't communicate with the NVIDIA driver"), std::string::npos);
}

TEST(SimCleanup, KillsEveryRegisteredProcessIncludingRespawners) {
  SimNode node;
  auto a = node.hold({"--gpu", "0", "--children", "3", "--bytes", "1GiB", "--respawn", "--detach"});
  auto b = node.hold({"--gpu", "3", "--bytes", "1GiB", "--ignore-term", "--daemon"});
  auto r = node.sim({"cleanup", "--dir", node.dir()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (pid_t p : a.pids) EXPECT_FALSE(alive(p)) << p;
  for (pid_t p : b.pids) EXPECT_FALSE(alive(p)) << p;
  auto list = node.sim({"list", "--dir", node.dir(), "--json"});
  auto j = nlohmann::json::parse(list.out);
  for (const auto& p : j["processes"])
    EXPECT_TRUE(p["state"].get<std::string>().starts_with("dead"));
}

}  // namespace
}  // namespace simtest
