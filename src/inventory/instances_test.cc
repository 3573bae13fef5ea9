// Server instances: holders grouped by their gpureap run, else their process group (and
// container); the launcher read from the group leader's /proc files.

#include "inventory/instances.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gpu/test_devices.h"
#include "inventory/inventory.h"

namespace gpureap::inventory {
namespace {

namespace fs = std::filesystem;

GpuHolder holder(pid_t pid, pid_t pgid, const std::string& title, std::uint64_t bytes) {
  GpuHolder gh;
  gh.holder.id = {pid, 1000 + static_cast<std::uint64_t>(pid)};
  gh.holder.pgid = pgid;
  gh.holder.comm = title.substr(0, 15);
  gh.holder.cmdline = title;
  gh.holder.engine = proc::recognise_engine_cmdline(title, gh.holder.comm);
  gh.gpu_bytes = bytes;
  return gh;
}

Inventory node_with(std::vector<std::vector<GpuHolder>> per_gpu) {
  Inventory inv;
  unsigned i = 0;
  for (auto& holders : per_gpu) {
    GpuView v;
    v.info.id = gpu::dev(i++);
    v.holders = std::move(holders);
    inv.gpus.push_back(std::move(v));
  }
  return inv;
}

class Instances : public ::testing::Test {
 protected:
  void SetUp() override {
    proc_ = fs::temp_directory_path() / ("gpureap-instances-" + std::to_string(::getpid()));
    fs::create_directories(proc_);
  }
  void TearDown() override { fs::remove_all(proc_); }
  // A live group leader in the fixture /proc: stat (pgid = its pid) and cmdline.
  void leader(pid_t pid, const std::string& comm, const std::string& cmdline_nul) {
    fs::create_directories(proc_ / std::to_string(pid));
    std::ofstream(proc_ / std::to_string(pid) / "stat")
        << pid << " (" << comm << ") S 1 " << pid << " " << pid
        << " 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 5000 0 0\n";
    std::ofstream(proc_ / std::to_string(pid) / "cmdline") << cmdline_nul;
  }
  fs::path proc_;
};

TEST_F(Instances, ATensorParallelServerIsOneInstanceWithRanksAndItsLauncher) {
  using namespace std::string_literals;
  leader(4721, "python3",
         "python3\0-m\0sglang.launch_server\0--model-path\0moonshotai/Kimi-K2.5\0--port\0"
         "30000\0"s);
  auto inv = node_with({{holder(4722, 4721, "sglang::scheduler_TP0", 90)},
                        {holder(4723, 4721, "sglang::scheduler_TP1", 90)},
                        {holder(5001, 5000, "VLLM::Worker_TP0", 40)}});
  auto found = find_instances(inv, proc_.string());
  ASSERT_EQ(found.size(), 2u);
  const Instance& sg = found[0];
  EXPECT_EQ(sg.key, "4721");
  EXPECT_EQ(sg.kind, InstanceKind::process_group);
  EXPECT_EQ(sg.engine, proc::Engine::sglang);
  EXPECT_TRUE(sg.launcher_alive);
  EXPECT_EQ(sg.launcher_comm, "python3");
  EXPECT_EQ(sg.model, "moonshotai/Kimi-K2.5");
  EXPECT_EQ(sg.port, 30000u);
  EXPECT_EQ(sg.gpus, gpu::devs({0, 1}));
  EXPECT_EQ(sg.bytes, 180u);
  ASSERT_EQ(sg.members.size(), 2u);
  EXPECT_EQ(sg.members[1].role, proc::EngineRole::scheduler);
  EXPECT_EQ(sg.members[1].ranks, "TP1");
  EXPECT_EQ(inv.gpus[1].holders[0].holder.instance, "4721");
  // The vLLM worker's group leader is not in this /proc: its launcher is gone.
  const Instance& vl = found[1];
  EXPECT_EQ(vl.key, "5000");
  EXPECT_FALSE(vl.launcher_alive);
  EXPECT_EQ(vl.launcher_pid, 5000);
  EXPECT_EQ(vl.engine, proc::Engine::vllm);
  EXPECT_FALSE(vl.model);
}

TEST_F(Instances, ARunGroupsAcrossProcessGroupsAndContainersNeverMerge) {
  auto a = holder(10, 10, "python3 serve.py", 5);
  a.holder.run_id = "serve-9";
  auto b = holder(20, 20, "python3 worker.py", 5);
  b.holder.run_id = "serve-9";
  auto c = holder(30, 7, "python3 x.py", 1);
  c.holder.container = "docker:aaa";
  auto d = holder(31, 7, "python3 x.py", 1);
  d.holder.container = "docker:bbb";
  auto outside = holder(40, 0, "python3 y.py", 2);
  outside.gpu_bytes.reset();
  auto inv = node_with({{a, c}, {b, d, outside}});
  auto found = find_instances(inv, proc_.string());
  ASSERT_EQ(found.size(), 4u);
  const Instance* run = find_instance(found, "serve-9");
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->kind, InstanceKind::run);
  EXPECT_EQ(run->members.size(), 2u);
  EXPECT_EQ(run->gpus, gpu::devs({0, 1}));
  std::size_t sevens = 0;
  for (const auto& in : found) sevens += in.key == "7";
  EXPECT_EQ(sevens, 2u) << "pgid 7 in two containers is two instances";
  const Instance* alone = find_instance(found, "40");
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->kind, InstanceKind::process);
  EXPECT_FALSE(alone->bytes_known);
  EXPECT_EQ(find_instance(found, "nope"), nullptr);
}

TEST(InstanceKindNames, EveryValueHasOne) {
  for (auto k : {InstanceKind::run, InstanceKind::process_group, InstanceKind::process})
    EXPECT_FALSE(enum_name(k).empty());
}

}  // namespace
}  // namespace gpureap::inventory
