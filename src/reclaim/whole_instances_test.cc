// An instance is freed whole or not at all (issue 37): a plan that stops a live server's
// workers takes its launcher and helpers too; a plan that would cut it in two is named.

#include "reclaim/whole_instances.h"

#include <gtest/gtest.h>

#include "reclaim/test_machine.h"

namespace gpureap::reclaim {
namespace whole_instances_test {

using testing::FakeProc;
using testing::kGiB;
using testing::TestMachine;

// A live vLLM TP-2: launcher 500 (no GPU), workers 501 on GPU 0 and 502 on GPU 1, a
// helper 503 (no GPU), all in process group 500.
struct LiveServer {
  TestMachine m{2};
  LiveServer() {
    FakeProc launcher;
    launcher.pid = 500;
    launcher.comm = "vllm";
    launcher.cmdline = "vllm serve M --port 8001";
    m.spawn(launcher);
    for (auto [pid, gpu] : {std::pair{501, 0u}, std::pair{502, 1u}}) {
      FakeProc w;
      w.pid = pid;
      w.comm = "VLLM::Worker_TP";
      w.ppid = 500;
      w.gpu = gpu;
      w.bytes = 8 * kGiB;
      m.spawn(w);
      m.set_parent(w, 500, 500, 500);
    }
    FakeProc helper;
    helper.pid = 503;
    helper.comm = "tokenizer";
    helper.ppid = 500;
    m.spawn(helper);
    m.set_parent(helper, 500, 500, 500);
  }
  Plan plan_of(std::vector<gpu::DeviceId> gpus) {
    const inventory::Inventory inv = m.node().look();
    Selection sel;
    sel.gpus = std::move(gpus);
    const auto ctx = CallerContext::current(m.node().proc_root());
    Plan plan = make_plan(inv, sel, ctx);
    add_live_launchers(plan, inv, ctx);
    return plan;
  }
};

bool plan_targets(const Plan& plan, pid_t pid) {
  return std::any_of(plan.targets.begin(), plan.targets.end(),
                     [&](const Target& t) { return t.id.pid == pid; });
}

TEST(WholeInstances, AStoppedServersLauncherAndHelpersJoinThePlan) {
  LiveServer s;
  const Plan plan = s.plan_of(gpu::devs({0, 1}));
  ASSERT_EQ(plan.instances.size(), 1u);
  EXPECT_TRUE(plan_targets(plan, 501) && plan_targets(plan, 502));
  EXPECT_TRUE(plan_targets(plan, 500)) << "the launcher is never left without its workers";
  EXPECT_TRUE(plan_targets(plan, 503)) << "nor its helpers";
  EXPECT_TRUE(partial_instances(plan).empty());
}

TEST(WholeInstances, APlanThatCutsAnInstanceInTwoIsNamedAndTheOtherWorkerIsNotAdded) {
  LiveServer s;
  const Plan plan = s.plan_of(gpu::devs({0}));
  EXPECT_TRUE(plan_targets(plan, 501));
  EXPECT_FALSE(plan_targets(plan, 502)) << "a GPU holder joins a plan only by its own selection";
  const auto partial = partial_instances(plan);
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_EQ(partial[0].key, "500");
  EXPECT_NE(partial[0].why.find("pid 502 is not in the plan: it uses no selected GPU"),
            std::string::npos)
      << partial[0].why;
}

}  // namespace whole_instances_test
}  // namespace gpureap::reclaim
