// A node with NVIDIA and AMD GPUs end to end (issue 39, docs/amd.md "A mixed node"):
// `gpureap-sim node --gpus 2 --amd-gpus 2` (NVML's stand-in answers for GPUs 0-1, the
// simulated amdgpu driver's sysfs tree shows GPUs 2-3), real holder processes, real
// signals, real /proc. gpureap reads it through gpu::MixedSource: the device directory
// has nvidiactl and $GPUREAP_SYSFS_ROOT's KFD topology lists GPUs.

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "harness.h"
#include "prometheus_harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace mixed_test {

constexpr std::uint64_t GiB = 1ULL << 30;

const nlohmann::json* holder_of(const nlohmann::json& gpu, pid_t pid) {
  for (const auto& h : gpu["holders"])
    if (h["pid"] == pid) return &h;
  return nullptr;
}

const nlohmann::json* gpu_entry(const nlohmann::json& gpus, unsigned index) {
  for (const auto& g : gpus)
    if (g["index"] == index) return &g;
  return nullptr;
}

TEST(Mixed, StatusListsBothVendorsNvidiasFirstWithStableIndices) {
  SimNode node({"--gpus", "2", "--amd-gpus", "2", "--memory", "192GiB"});
  auto nv = node.hold({"--gpu", "1", "--bytes", "10GiB"}, /*foreground=*/true);
  auto am = node.hold({"--gpu", "3", "--bytes", "20GiB"}, /*foreground=*/true);
  ASSERT_EQ(nv.holders.size(), 1u);
  ASSERT_EQ(am.holders.size(), 1u);

  auto s = node.gpureap({"status", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const auto status = s.json();
  ASSERT_EQ(status["gpus"].size(), 4u) << s.out;
  const char* vendors[] = {"nvidia", "nvidia", "amd", "amd"};
  const unsigned minors[] = {0, 1, 128, 129};  // /dev/nvidia<N>, /dev/dri/renderD<N>
  for (unsigned i = 0; i < 4; ++i) {
    const auto& g = status["gpus"][i];
    EXPECT_EQ(g["index"], i) << g.dump();
    EXPECT_EQ(g["vendor"], vendors[i]) << g.dump();
    EXPECT_EQ(g["minor"], minors[i]) << g.dump();
    EXPECT_EQ(g["memory"]["total_bytes"], 192 * GiB) << g.dump();
  }
  EXPECT_EQ(status["gpus"][2]["name"], "AMD Instinct MI300X");

  // Each holder on its own GPU, with its memory from its own vendor's driver.
  const auto* h1 = holder_of(status["gpus"][1], nv.holders[0].first);
  ASSERT_NE(h1, nullptr) << s.out;
  EXPECT_EQ((*h1)["gpu_bytes"], 10 * GiB);
  EXPECT_NE((*h1)["devices"].dump().find("/dev/nvidia1"), std::string::npos) << h1->dump();
  const auto* h3 = holder_of(status["gpus"][3], am.holders[0].first);
  ASSERT_NE(h3, nullptr) << s.out;
  EXPECT_EQ((*h3)["gpu_bytes"], 20 * GiB);  // KFD's vram_<gpu_id>
  EXPECT_NE((*h3)["devices"].dump().find("/dev/dri/renderD129"), std::string::npos)
      << h3->dump();
  for (unsigned i : {0u, 2u}) EXPECT_TRUE(status["gpus"][i]["holders"].empty()) << i;
  for (unsigned i : {1u, 3u})
    EXPECT_EQ(status["gpus"][i]["unattributed_bytes"], 0) << status["gpus"][i].dump();

  // Stable: the same GPU at the same index on every look, and a selector names it.
  const auto again = node.gpureap({"status", "--json"}).json();
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(again["gpus"][i]["uuid"], status["gpus"][i]["uuid"]);
  auto one = node.gpureap({"status", "--json", "--gpu", "3"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(one.json()["gpus"].size(), 1u) << one.out;
  EXPECT_EQ(one.json()["gpus"][0]["uuid"], status["gpus"][3]["uuid"]);
  auto by_uuid = node.gpureap(
      {"status", "--json", "--gpu", status["gpus"][2]["uuid"].get<std::string>()});
  ASSERT_EQ(by_uuid.exit_code, 0) << by_uuid.err;
  EXPECT_EQ(by_uuid.json()["gpus"][0]["index"], 2) << by_uuid.out;

  // A device node names its own vendor's GPU.
  auto by_node = node.gpureap({"status", "--json", "--gpu", "/dev/dri/renderD129,/dev/nvidia0"});
  ASSERT_EQ(by_node.exit_code, 0) << by_node.err;
  ASSERT_EQ(by_node.json()["gpus"].size(), 2u) << by_node.out;
  EXPECT_EQ(by_node.json()["gpus"][0]["index"], 0) << by_node.out;
  EXPECT_EQ(by_node.json()["gpus"][1]["index"], 3) << by_node.out;

  // The text heading names each GPU's own node.
  auto text = node.gpureap({"status", "-v"});
  EXPECT_NE(text.out.find("/dev/dri/renderD129"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("/dev/nvidia1"), std::string::npos) << text.out;
}

// An orphaned TP-2 on the AMD GPUs and an orphaned worker on NVIDIA's GPU 0, a live holder
// on NVIDIA's GPU 1: a free of the AMD GPUs only (NVML not asked to verify), then of the
// rest (NVML's GPU verified); the live holder kept throughout.
TEST(Mixed, AFreeOnEachVendorIsVerifiedAndALiveHolderKept) {
  SimNode node({"--gpus", "2", "--amd-gpus", "2", "--memory", "192GiB"});
  auto amd_orphans = node.hold({"--gpu", "2", "--children", "2", "--bytes", "80GiB", "--orphan",
                                "--title", "VLLM::Worker_TP{k}", "--release-delay", "300ms"});
  ASSERT_EQ(amd_orphans.holders.size(), 2u);
  std::set<unsigned> amd_gpus;  // the workers report in any order
  for (const auto& [pid, gpu] : amd_orphans.holders) amd_gpus.insert(gpu);
  EXPECT_EQ(amd_gpus, (std::set<unsigned>{2, 3}));
  auto nv_orphan = node.hold({"--gpu", "0", "--children", "1", "--bytes", "30GiB", "--orphan",
                              "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(nv_orphan.holders.size(), 1u);
  auto live = node.hold({"--gpu", "1", "--bytes", "20GiB"}, /*foreground=*/true);
  ASSERT_EQ(live.holders.size(), 1u);

  const auto status = node.gpureap({"status", "--json"}).json();
  for (const auto& [pid, gpu] : amd_orphans.holders) {
    const auto* h = holder_of(status["gpus"][gpu], pid);
    ASSERT_NE(h, nullptr) << pid << " on GPU " << gpu << ": " << status.dump();
    EXPECT_EQ((*h)["orphaned"], true) << h->dump();
    EXPECT_EQ((*h)["gpu_bytes"], 80 * GiB);
    EXPECT_EQ(status["gpus"][gpu]["vendor"], "amd");
  }
  const auto* kept = holder_of(status["gpus"][1], live.holders[0].first);
  ASSERT_NE(kept, nullptr) << status.dump();
  EXPECT_EQ((*kept)["orphaned"], false);

  auto freed_amd = node.gpureap({"free", "--orphans", "--gpu", "2,3", "--yes", "--json"});
  ASSERT_EQ(freed_amd.exit_code, 0) << freed_amd.out << freed_amd.err;
  const auto a = freed_amd.json();
  ASSERT_EQ(a["gpus"].size(), 2u) << freed_amd.out;
  for (unsigned i : {2u, 3u}) {
    const auto* g = gpu_entry(a["gpus"], i);
    ASSERT_NE(g, nullptr) << freed_amd.out;
    EXPECT_TRUE((*g)["freed"]) << g->dump();  // mem_info_vram_used back at baseline
    EXPECT_LE((*g)["memory_after_bytes"].get<std::uint64_t>(),
              (*g)["baseline_bytes"].get<std::uint64_t>() + 512 * 1024 * 1024)
        << g->dump();
  }
  for (const auto& [pid, gpu] : amd_orphans.holders) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_TRUE(alive(nv_orphan.holders[0].first)) << "not selected: --gpu 2,3";

  auto freed_nv = node.gpureap({"free", "--orphans", "--all", "--yes", "--json"});
  ASSERT_EQ(freed_nv.exit_code, 0) << freed_nv.out << freed_nv.err;
  const auto n = freed_nv.json();
  const auto* g0 = gpu_entry(n["gpus"], 0);
  ASSERT_NE(g0, nullptr) << freed_nv.out;
  EXPECT_TRUE((*g0)["freed"]) << g0->dump();  // NVML's used memory back at baseline
  EXPECT_LE((*g0)["memory_after_bytes"].get<std::uint64_t>(),
            (*g0)["baseline_bytes"].get<std::uint64_t>() + 512 * 1024 * 1024)
      << g0->dump();
  EXPECT_FALSE(alive(nv_orphan.holders[0].first));
  EXPECT_TRUE(alive(live.holders[0].first));

  const auto after = node.gpureap({"status", "--json"}).json();
  for (unsigned i : {0u, 2u, 3u}) EXPECT_TRUE(after["gpus"][i]["holders"].empty()) << i;
  EXPECT_EQ(after["gpus"][1]["holders"].size(), 1u);
  EXPECT_EQ(node.gpureap({"wait", "--gpu", "0,2,3", "--timeout", "5s"}).exit_code, 0);
}

// The agent's loop (NVML's prefetched snapshot, amdgpu's read at once) on a mixed node: it
// announces the orphaned workers on the AMD GPUs (and only their GPUs: not the NVIDIA GPU
// a live holder keeps).
TEST(Mixed, TheAgentAnnouncesAnOrphanOnTheAmdGpusNotTheNvidiaLiveHolder) {
  SimNode node({"--gpus", "2", "--amd-gpus", "2", "--memory", "192GiB"});
  auto live = node.hold({"--gpu", "0", "--bytes", "20GiB"}, /*foreground=*/true);
  ASSERT_EQ(live.holders.size(), 1u);
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "200ms"});
  auto started = agent.next_line(std::chrono::seconds(20));
  ASSERT_TRUE(started) << agent.transcript();
  auto first = nlohmann::json::parse(started->text, nullptr, false);
  ASSERT_TRUE(first.is_object()) << started->text;
  EXPECT_EQ(first.value("gpu_count", 0), 4) << started->text;
  auto held = node.hold({"--gpu", "2", "--children", "2", "--bytes", "80GiB", "--orphan",
                         "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(held.holders.size(), 2u);
  auto e = agent.wait_for_json(
      [](const nlohmann::json& j) { return j.value("event", "") == "orphaned_memory"; },
      std::chrono::seconds(20));
  ASSERT_TRUE(e) << agent.transcript();
  EXPECT_EQ((*e)["gpus"], nlohmann::json::array({2, 3})) << e->dump();
  EXPECT_EQ((*e)["bytes"], 160 * GiB) << e->dump();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  EXPECT_TRUE(alive(live.holders[0].first));
}

TEST(Mixed, TheMetricsSayEachGpusVendor) {
  SimNode node({"--gpus", "2", "--amd-gpus", "2", "--memory", "192GiB"});
  auto agent = start_listening_agent(node, {"--tick", "200ms"});
  ASSERT_NE(agent.port, 0);
  auto orphan = node.hold({"--gpu", "3", "--children", "1", "--bytes", "40GiB", "--orphan",
                           "--title", "VLLM::Worker_TP{k}"});
  ASSERT_EQ(orphan.holders.size(), 1u);
  // The orphaned bytes reach GPU 3's series, labelled with its vendor.
  std::string body, line3;
  const bool seen = SimNode::eventually(
      [&] {
        body = http_get(agent.port, "/metrics").body;
        std::istringstream in(body);
        for (std::string line; std::getline(in, line);)
          if (line.starts_with("gpureap_gpu_memory_orphaned_bytes{gpu=\"3\"")) line3 = line;
        return line3.ends_with(" " + std::to_string(40 * GiB));
      },
      std::chrono::seconds(20));
  ASSERT_TRUE(seen) << line3 << "\n" << body;
  EXPECT_NE(line3.find("vendor=\"amd\""), std::string::npos) << line3;
  EXPECT_NE(line3.find("minor=\"129\""), std::string::npos) << line3;
  std::istringstream in(body);
  bool nvidia_seen = false;
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("gpureap_gpu_memory_orphaned_bytes{gpu=\"1\"")) {
      nvidia_seen = true;
      EXPECT_NE(line.find("vendor=\"nvidia\""), std::string::npos) << line;
    }
  EXPECT_TRUE(nvidia_seen) << body;
  EXPECT_EQ(agent.child->terminate(), 0) << agent.child->transcript();
}

}  // namespace mixed_test
}  // namespace gpureap::e2e
