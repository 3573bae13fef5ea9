// `free --pid N` without --gpu: the named processes say which GPUs (issue 14).

#include <gtest/gtest.h>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace free_pid_test {

using namespace std::chrono_literals;

TEST(FreePid, WithoutGpuTheNamedProcessesChooseTheGpus) {
  SimNode node({"--gpus", "4", "--memory", "96GiB"});
  auto target = node.hold({"--gpu", "2", "--bytes", "6GiB"});
  auto other = node.hold({"--gpu", "3", "--bytes", "5GiB"});
  const pid_t pid = target.holders.at(0).first;

  auto r = node.gpureap({"--json", "free", "--pid", std::to_string(pid), "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto report = r.json();
  ASSERT_EQ(report.at("gpus").size(), 1u) << r.out;
  EXPECT_EQ(report.at("gpus")[0].at("index"), 2) << "only the GPU the named process uses";
  EXPECT_EQ(report.at("gpus")[0].at("freed"), true);
  EXPECT_FALSE(alive(pid));
  EXPECT_TRUE(alive(other.holders.at(0).first)) << "a holder of another GPU is left alone";
}

TEST(FreePid, AProcessThatUsesNoGpuIsNothingToDo) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  auto held = node.hold({"--gpu", "1", "--bytes", "2GiB"});
  // Our own pid: alive, but it uses no GPU.
  auto r = node.gpureap({"free", "--pid", std::to_string(::getpid()), "--yes"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("no such process uses a GPU"), std::string::npos) << r.err;
  EXPECT_TRUE(alive(held.holders.at(0).first));
}

TEST(FreePid, NoGpuAndNoPidIsAUsageError) {
  SimNode node({"--gpus", "1"});
  auto r = node.gpureap({"free", "--yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--pid"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gpureap::e2e
