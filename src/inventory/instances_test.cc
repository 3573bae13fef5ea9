// Server instances: holders grouped by their gpureap run, else their process group (and
// container); the launcher read from the group leader's /proc files.

#include "inventory/instances.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gpu/test_devices.h"
#include "inventory/inventory.h"
#include "inventory/node.h"

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
  // pgid 7 in two containers is two instances, each named by its container (W4-11(e)).
  ASSERT_NE(find_instance(found, "7@docker:aaa"), nullptr);
  ASSERT_NE(find_instance(found, "7@docker:bbb"), nullptr);
  EXPECT_EQ(find_instance(found, "7"), nullptr);
  const Instance* alone = find_instance(found, "40");
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->kind, InstanceKind::process);
  EXPECT_FALSE(alone->bytes_known);
  EXPECT_EQ(find_instance(found, "nope"), nullptr);
}

// W4-11(e): two containers whose `gpureap run --name sglang` are both sglang-1 inside their
// namespaces. Each instance has a key of its own, its holders carry it (so the evidence
// under a heading is that instance's, and `--instance` names one), and a host instance
// sharing the key keeps the bare one.
TEST_F(Instances, W4_11_TwoContainersRunsWithOneIdAreTwoKeys) {
  auto a0 = holder(100, 100, "sglang::scheduler_TP0", 4);
  auto a1 = holder(101, 100, "sglang::scheduler_TP1", 4);
  auto b0 = holder(200, 200, "sglang::scheduler_TP0", 4);
  auto b1 = holder(201, 200, "sglang::scheduler_TP1", 4);
  for (auto* h : {&a0, &a1}) h->holder.container = "docker:aaaaaaaaaaaa";
  for (auto* h : {&b0, &b1}) h->holder.container = "docker:bbbbbbbbbbbb";
  auto host = holder(300, 300, "python3 serve.py", 4);
  for (auto* h : {&a0, &a1, &b0, &b1, &host}) h->holder.run_id = "sglang-1";
  a0.holder.orphaned = a1.holder.orphaned = true;
  auto inv = node_with({{a0, a1}, {b0, b1}, {host}});
  auto found = find_instances(inv, proc_.string());
  ASSERT_EQ(found.size(), 3u);
  const Instance* a = find_instance(found, "sglang-1@docker:aaaaaaaaaaaa");
  const Instance* b = find_instance(found, "sglang-1@docker:bbbbbbbbbbbb");
  const Instance* h = find_instance(found, "sglang-1");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(a->orphaned, 2u);
  EXPECT_EQ(b->orphaned, 0u);
  EXPECT_EQ(h->members.size(), 1u);
  for (const auto& gh : inv.gpus[0].holders)
    EXPECT_EQ(gh.holder.instance, "sglang-1@docker:aaaaaaaaaaaa");
  for (const auto& gh : inv.gpus[1].holders)
    EXPECT_EQ(gh.holder.instance, "sglang-1@docker:bbbbbbbbbbbb");
  EXPECT_EQ(inv.gpus[2].holders[0].holder.instance, "sglang-1");
  EXPECT_EQ(keys_in_containers(found, "sglang-1"),
            (std::vector<std::string>{"sglang-1@docker:aaaaaaaaaaaa",
                                      "sglang-1@docker:bbbbbbbbbbbb"}));
  EXPECT_TRUE(keys_in_containers(found, "sglang").empty());
}

// Issue 53 #8: a server started by `gpureap run` keeps its launcher, model and port (its
// members' parent, the run's command), named by its whole command line; a run whose
// gpureap is gone says so while its server lives; a parent that is no engine launcher
// (the run's gpureap-reaper) is no launcher.
TEST_F(Instances, ARunsLauncherIsItsMembersEngineParentAndAGoneRunIsSaid) {
  using namespace std::string_literals;
  leader(600, "python3 -m sgla",
         "python3\0-m\0sglang.launch_server\0--model-path\0moonshotai/Kimi-K2.5\0--port\0"
         "30000\0"s);
  leader(700, "gpureap-reaper", "gpureap-reaper\0"s);
  auto a = holder(601, 601, "sglang::scheduler_TP0", 90);
  auto b = holder(602, 601, "sglang::scheduler_TP1", 90);
  auto c = holder(701, 701, "python3 train.py", 10);
  for (auto* h : {&a, &b}) {
    h->holder.run_id = "serve-595";
    h->holder.ppid = 600;
    h->holder.run_gone = true;
  }
  c.holder.run_id = "train-9";
  c.holder.ppid = 700;
  auto inv = node_with({{a}, {b}, {c}});
  auto found = find_instances(inv, proc_.string());
  const Instance* run = find_instance(found, "serve-595");
  ASSERT_NE(run, nullptr);
  EXPECT_TRUE(run->launcher_alive);
  EXPECT_EQ(run->launcher_pid, 600);
  EXPECT_EQ(run->launcher_cmdline,
            "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --port 30000");
  EXPECT_EQ(run->model, "moonshotai/Kimi-K2.5");
  EXPECT_EQ(run->port, 30000u);
  EXPECT_TRUE(run->run_gone);
  const Instance* train = find_instance(found, "train-9");
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->launcher_pid, 0) << "the reaper is no launcher";
  EXPECT_FALSE(train->run_gone);
}

// A wrapper (`timeout`, a job script) made the group; the server it ran was SIGKILLed and
// its workers orphaned, while the wrapper's other child still holds a GPU: the orphans
// are the crashed server, the live holder another instance, and the live wrapper is no
// launcher of theirs.
TEST_F(Instances, OrphansAndLiveHoldersOfOneGroupAreTwoInstances) {
  using namespace std::string_literals;
  leader(300, "timeout", "timeout\0" "120\0python3\0-m\0unittest\0"s);
  auto w0 = holder(311, 300, "sglang::scheduler_TP0", 8);
  auto w1 = holder(312, 300, "sglang::scheduler_TP1", 8);
  w0.holder.orphaned = w1.holder.orphaned = true;
  auto runner = holder(301, 300, "python3 -m unittest", 1);
  auto inv = node_with({{w0, w1, runner}});
  auto found = find_instances(inv, proc_.string());
  ASSERT_EQ(found.size(), 2u);
  const Instance* crashed = find_instance(found, "300");
  const Instance* live = find_instance(found, "300-live");
  ASSERT_NE(crashed, nullptr);
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(crashed->members.size(), 2u);
  EXPECT_EQ(crashed->orphaned, 2u);
  EXPECT_FALSE(crashed->launcher_alive) << "timeout is not the workers' launcher";
  EXPECT_EQ(crashed->launcher_pid, 0);
  EXPECT_EQ(crashed->engine, proc::Engine::sglang);
  EXPECT_EQ(live->members.size(), 1u);
  EXPECT_TRUE(live->launcher_alive);
  EXPECT_EQ(live->launcher_comm, "timeout");
}

// Issue 53 #9: `status --gpu 3` lists GPU 3's servers (each with all its GPUs), not the
// vLLM instance on GPU 6,7.
TEST_F(Instances, KeepingAGpuKeepsOnlyTheInstancesThatUseIt) {
  auto inv = node_with({{}, {}, {}, {holder(30, 30, "python3 a.py", 1)}, {}, {},
                        {holder(61, 60, "VLLM::Worker_TP0", 5)},
                        {holder(62, 60, "VLLM::Worker_TP1", 5), holder(31, 30, "python3 a.py", 1)}});
  inv.instances = find_instances(inv, proc_.string());
  ASSERT_EQ(inv.instances.size(), 2u);
  keep_gpus(inv, {gpu::dev(3)});
  ASSERT_EQ(inv.gpus.size(), 1u);
  ASSERT_EQ(inv.instances.size(), 1u);
  EXPECT_EQ(inv.instances[0].key, "30");
  EXPECT_EQ(inv.instances[0].gpus, gpu::devs({3, 7})) << "every GPU it uses";
}

TEST(InstanceKindNames, EveryValueHasOne) {
  for (auto k : {InstanceKind::run, InstanceKind::process_group, InstanceKind::process})
    EXPECT_FALSE(enum_name(k).empty());
}

}  // namespace
}  // namespace gpureap::inventory
