// MIG (issue 25), on the simulated node: every MIG device is a GPU to gpureap. GPU 0
// is in MIG mode with two MIG devices (0/gi1/ci0, 0/gi2/ci0); its own handle answers
// memory and process queries with "Insufficient Permissions", as inside a container.

#include <gtest/gtest.h>

#include "harness.h"

namespace gpureap::e2e {
namespace mig_test {

using json = nlohmann::json;

const json* gpu_of(const json& status, const std::string& id) {
  for (const auto& g : status.at("gpus"))
    if (g.at("index").dump() == id || g.at("index") == id) return &g;
  return nullptr;
}

TEST(Mig, EachMigDeviceIsAGpuAndFreeTouchesOnlyTheOneSelected) {
  SimNode node({"--gpus", "2", "--memory", "96GiB", "--mig", "0:2"});
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB"});
  auto two = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});
  auto whole = node.hold({"--gpu", "1", "--bytes", "2GiB"});
  // A process with GPU 0's node open and no capability: no MIG device's holder.
  auto client = node.hold({"--gpu", "0", "--client-only"});

  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json status = s.json();
  ASSERT_EQ(status["gpus"].size(), 3u) << status["gpus"].dump();
  const json* a = gpu_of(status, "0/gi1/ci0");
  const json* b = gpu_of(status, "0/gi2/ci0");
  const json* c = gpu_of(status, "1");
  ASSERT_NE(a, nullptr) << s.out;
  ASSERT_NE(b, nullptr) << s.out;
  ASSERT_NE(c, nullptr) << s.out;
  EXPECT_TRUE((*a)["uuid"].get<std::string>().starts_with("MIG-")) << a->dump();
  ASSERT_EQ((*a)["holders"].size(), 1u) << a->dump();
  EXPECT_EQ((*a)["holders"][0]["pid"], one.holders[0].first);
  EXPECT_EQ((*a)["memory"]["used_bytes"], 6ULL << 30);
  ASSERT_EQ((*b)["holders"].size(), 1u) << b->dump();
  EXPECT_EQ((*b)["holders"][0]["pid"], two.holders[0].first);
  // The capability-less client is nobody's holder, and is named for what it blocks.
  bool listed = false;
  for (const auto& h : status["other_holders"]) listed = listed || h["pid"] == client.leader;
  EXPECT_TRUE(listed) << status["other_holders"].dump();
  auto text = node.gpureap({"status"});
  EXPECT_NE(text.out.find("pid " + std::to_string(client.leader) +
                          " (gpureap-sim) holds GPU 0's own device node but no MIG device of it"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("GPU 0/gi1/ci0  NVIDIA H200 MIG"), std::string::npos) << text.out;

  // Freed by its MIG UUID (a prefix): that MIG device only, verified on its own memory.
  const std::string uuid = (*a)["uuid"];
  auto r = node.gpureap({"--json", "free", "--gpu", uuid.substr(0, 12), "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json result = r.json();
  ASSERT_EQ(result["gpus"].size(), 1u) << result.dump();
  EXPECT_EQ(result["gpus"][0]["index"], "0/gi1/ci0") << result["gpus"].dump();
  EXPECT_EQ(result["gpus"][0]["freed"], true) << result["gpus"].dump();
  EXPECT_FALSE(alive(one.holders[0].first));
  EXPECT_TRUE(alive(two.holders[0].first)) << "the other MIG device of the same GPU";
  EXPECT_TRUE(alive(whole.holders[0].first));
  EXPECT_TRUE(alive(client.leader)) << "no MIG device's holder: not in the plan";

  // nvidia-smi's GPU:GPU-instance form; the GPU index is all its MIG devices.
  auto dry = node.gpureap({"--json", "free", "--gpu", "0", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  const json plan = dry.json()["plan"];
  ASSERT_EQ(plan["targets"].size(), 1u) << plan.dump();
  EXPECT_EQ(plan["targets"][0]["pid"], two.holders[0].first);
  auto by_gi = node.gpureap({"free", "--gpu", "0:2", "--yes"});
  EXPECT_EQ(by_gi.exit_code, 0) << by_gi.out << by_gi.err;
  EXPECT_FALSE(alive(two.holders[0].first));
  EXPECT_TRUE(alive(whole.holders[0].first));
}

TEST(Mig, AMigDeviceThatIsNotThereIsAUsageErrorListingTheDevices) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  auto r = node.gpureap({"free", "--gpu", "0/gi5/ci0", "--yes"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("0/gi1/ci0"), std::string::npos) << r.err;
}

}  // namespace mig_test
}  // namespace gpureap::e2e
