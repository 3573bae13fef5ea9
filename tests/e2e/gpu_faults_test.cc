// One GPU that fails or hangs must not blind gpureap for the others (D6): the
// simulated driver's query_fail / hang_query modes limited to GPU 1, with
// holders on GPUs 1 and 2, and every command a user would run.

#include <gtest/gtest.h>

#include "harness.h"
#include "util/units.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace gpu_faults_test {

using namespace std::chrono_literals;

class GpuFault : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto r = node_.sim({"mode", "--dir", node_.dir(), GetParam(), "--gpu", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  bool hang() const { return std::string(GetParam()) == "hang_query"; }
  SimNode node_;
};

TEST_P(GpuFault, StatusListsEveryGpuWithTheFaultyOneMarked) {
  node_.hold({"--gpu", "1", "--bytes", "4GiB"});
  node_.hold({"--gpu", "2", "--bytes", "5GiB"});
  auto r = node_.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();
  EXPECT_EQ(j["nvml"]["state"], "partial");
  ASSERT_EQ(j["gpus"].size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    const auto& g = j["gpus"][i];
    EXPECT_EQ(g["index"], i);
    EXPECT_TRUE(g["uuid"].is_string()) << "identity still answers: GPU " << i;
    if (i == 1) {
      EXPECT_EQ(g["nvml"]["state"], hang() ? "hung" : "query_failed");
      EXPECT_TRUE(g["nvml"]["problem"].get<std::string>().find("GPU 1") != std::string::npos);
      EXPECT_TRUE(g["memory"].is_null());
      EXPECT_EQ(g["holders"].size(), 1u) << "its holder is still found through /proc";
    } else {
      EXPECT_EQ(g["nvml"]["state"], "ok");
      ASSERT_FALSE(g["memory"].is_null()) << "GPU " << i;
    }
  }
  EXPECT_EQ(j["gpus"][2]["attributed_bytes"], 5 * kGiB);

  auto table = node_.gpureap({"status"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find(hang() ? "NOT ANSWERING" : "QUERY FAILED"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("GPU 7"), std::string::npos) << table.out;
}

TEST_P(GpuFault, OtherGpusAreSelectedWaitedForAndFreed) {
  auto zero = node_.gpureap({"status", "--gpu", "0", "--json"});
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  ASSERT_EQ(zero.json()["gpus"].size(), 1u);
  EXPECT_EQ(zero.json()["gpus"][0]["index"], 0);

  auto wait = node_.gpureap({"wait", "--gpu", "2", "--timeout", "0"});
  EXPECT_EQ(wait.exit_code, 0) << wait.err;

  auto held = node_.hold({"--gpu", "2", "--bytes", "5GiB"});
  auto free = node_.gpureap({"free", "--gpu", "2", "--yes", "--grace", "1s"});
  EXPECT_EQ(free.exit_code, 0) << free.out << free.err;
  EXPECT_NE(free.out.find("freed"), std::string::npos) << free.out;
  EXPECT_FALSE(alive(held.holders.at(0).first));
}

TEST_P(GpuFault, TheFaultyGpuIsNeverVerifiedFree) {
  auto held = node_.hold({"--gpu", "1", "--bytes", "4GiB"});
  auto wait = node_.gpureap({"wait", "--gpu", "1", "--timeout", "0"});
  EXPECT_EQ(wait.exit_code, 3) << wait.err;
  EXPECT_NE(wait.err.find("GPU 1"), std::string::npos) << wait.err;

  auto free = node_.gpureap({"free", "--gpu", "1", "--yes", "--grace", "1s", "--timeout", "3s"});
  EXPECT_EQ(free.exit_code, 3) << free.out << free.err;
  EXPECT_NE(free.out.find("NOT VERIFIED"), std::string::npos) << free.out;
  EXPECT_NE(free.out.find("nvml_failed"), std::string::npos) << free.out;
  EXPECT_FALSE(alive(held.holders.at(0).first)) << "its holder, found through /proc, was freed";
}

// With no holder on it, a GPU NVML cannot read is not "nothing to do" (exit 4): its
// memory was not measured, so free says so and exits 3.
TEST_P(GpuFault, NoHolderOnAnUnreadableGpuIsNotNothingToDo) {
  auto free = node_.gpureap({"free", "--gpu", "1", "--yes", "--timeout", "3s"});
  EXPECT_EQ(free.exit_code, 3) << free.out << free.err;
  EXPECT_NE(free.err.find("NVML cannot read GPU 1"), std::string::npos) << free.err;
  auto ok_if_nothing = node_.gpureap({"free", "--gpu", "1", "--yes", "--ok-if-nothing"});
  EXPECT_EQ(ok_if_nothing.exit_code, 3) << "--ok-if-nothing does not make it measured";
  auto other = node_.gpureap({"free", "--gpu", "2", "--yes"});
  EXPECT_EQ(other.exit_code, 4) << "the readable GPU is still nothing to do: " << other.err;
}

// defects-wave1 §1.7: 16 lost GPUs gave 32 NVML errors on one line. Each GPU NVML
// cannot read gets its own line, naming that GPU only.
TEST(ManyGpuFaults, WaitNamesEachLostGpuOnItsOwnLine) {
  SimNode node({"--gpus", "16", "--memory", "80GiB"});
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "query_fail"}).exit_code, 0);
  auto wait = node.gpureap({"wait", "--timeout", "0"});
  EXPECT_EQ(wait.exit_code, 3) << wait.err;
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = wait.err.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(wait.err.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 17u) << wait.err;
  EXPECT_EQ(lines[0], "gpureap wait: NVML cannot read GPU 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15:");
  for (unsigned i = 0; i < 16; ++i) {
    const std::string& line = lines[i + 1];
    EXPECT_TRUE(line.starts_with("  GPU " + std::to_string(i) + ": ")) << line;
    EXPECT_NE(line.find("(GPU " + std::to_string(i) + "): GPU is lost"), std::string::npos) << line;
    EXPECT_EQ(line.find(std::to_string((i + 1) % 16) + "):"), std::string::npos) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GpuFault, ::testing::Values("query_fail", "hang_query"));

}  // namespace
}  // namespace gpureap::e2e
