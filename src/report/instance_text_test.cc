#include "report/instance_text.h"

#include <gtest/gtest.h>

#include "report/replace_report.h"

namespace gpureap::report {
namespace {

// A vLLM TP-2 server on GPU 6,7 whose launcher 18396 serves on port 8001.
inventory::Instance live_tp2() {
  inventory::Instance in;
  in.key = "18396";
  in.engine = proc::Engine::vllm;
  in.launcher_pid = 18396;
  in.launcher_alive = true;
  in.port = 8001;
  in.members = {{{18397, 1}, proc::EngineRole::worker, "TP0"},
                {{18398, 2}, proc::EngineRole::worker, "TP1"}};
  return in;
}

// Issue 53 #4: stopping a live server is said as such, in the plan and in the question.
TEST(InstanceText, ALiveInstanceSaysThatStoppingItStopsTheServer) {
  EXPECT_EQ(live_instance_note(live_tp2()),
            "LIVE: serving on port 8001 (launcher pid 18396 alive); stopping it stops the "
            "server");
  auto orphaned = live_tp2();
  orphaned.launcher_alive = false;
  orphaned.orphaned = 2;
  EXPECT_EQ(live_instance_note(orphaned), "");
}

// `free --gpu 6` cuts a live TP-2 in half: the plan names what keeps running.
TEST(InstanceText, APlanThatCutsALiveInstanceNamesWhatKeepsRunning) {
  const auto in = live_tp2();
  EXPECT_EQ(cut_instance_note(in, {{18397, 1}}),
            "cuts instance 18396 in part: worker TP1 (pid 18398) and its launcher (pid 18396) "
            "keep running");
  EXPECT_EQ(cut_instance_note(in, {{18396, 0}, {18397, 1}, {18398, 2}}), "") << "taken whole";
  auto orphaned = in;
  orphaned.orphaned = 2;
  EXPECT_EQ(cut_instance_note(orphaned, {{18397, 1}}), "") << "not live";
}

TEST(InstanceText, TheReplaceQuestionSaysStopForALiveServerAndFreeForAnOrphan) {
  reclaim::Plan plan;
  plan.instances = {live_tp2()};
  plan.targets.resize(3);
  EXPECT_EQ(replace_question(plan, "vllm serve Qwen"),
            "Stop vllm server 18396 (3 processes) and launch vllm serve Qwen?");
  plan.instances[0].launcher_alive = false;
  plan.instances[0].orphaned = 2;
  EXPECT_EQ(replace_question(plan, "vllm serve Qwen"),
            "Free vllm server 18396 (orphaned, 3 processes) and launch vllm serve Qwen?");
  plan.instances.push_back(live_tp2());
  plan.targets.resize(7);
  EXPECT_EQ(replace_question(plan, "x"),
            "Stop 1 live server and free 1 orphaned one (7 processes), then launch x?");
}

}  // namespace
}  // namespace gpureap::report
