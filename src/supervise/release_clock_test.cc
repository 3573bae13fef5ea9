// One release clock (issue 50, item 5): whether memory falls is the release model's answer
// alone (inventory/release_model.h: one step, one window, the node's clock), so every
// caller answers as the model does for the same readings. Each test hands one caller the
// scene of reclaim/test_release_scene.h (10 GiB, then 50 MiB or 200 MiB less) and compares
// its behaviour with model_says_falling. Before, a one-shot look and the model stepped
// by a quarter of the freed tolerance (102 MiB on 80 GiB), free's engine by 1 MiB and the
// agent's events by the whole tolerance (410 MiB), and wait asked nobody: 50 MiB was a
// fall to the engine only, 200 MiB a fall to everyone but the agent's events.

#include <gtest/gtest.h>

#include "inventory/events.h"
#include "inventory/release_model.h"
#include "reclaim/test_release_scene.h"
#include "supervise/free_wait.h"

namespace gpureap::supervise {
namespace {

using namespace std::chrono_literals;
using reclaim::testing::kLargeStep;
using reclaim::testing::kSmallStep;
using reclaim::testing::model_says_falling;
using reclaim::testing::TestMachine;

constexpr std::chrono::milliseconds kDrop{1000};

class ReleaseClock : public ::testing::TestWithParam<std::uint64_t> {
 protected:
  std::uint64_t step() const { return GetParam(); }
  bool model() const { return model_says_falling(step(), kDrop); }
};

TEST_P(ReleaseClock, TheModelItselfCallsOnlyTheLargeStepAFall) {
  EXPECT_EQ(model(), step() == kLargeStep);
}

// `gpureap status`: one look, whose own re-reading (25 ms later) reads the step.
TEST_P(ReleaseClock, AOneShotLookAnswersAsTheModel) {
  TestMachine m(1);
  reclaim::testing::stage_unlisted_holder(m, 7100001, step(), 10ms);
  inventory::Inventory inv = m.node().look();
  ASSERT_TRUE(inv.gpus[0].info.memory);
  EXPECT_EQ(inv.gpus[0].reread_used, reclaim::testing::kSceneHeld - step());
  EXPECT_EQ(inventory::gpu_state(inv.gpus[0]) == inventory::GpuState::releasing,
            model_says_falling(step(), 25ms))
      << inv.gpus[0].unexplained_detail;
}

// `gpureap free --gpu 0`: the engine waits while the model says falling and stops once
// it says settled (a falling window without a fall), never by a step of its own.
TEST_P(ReleaseClock, FreesEngineWaitsExactlyWhileTheModelSaysFalling) {
  TestMachine m(1);
  reclaim::testing::stage_unlisted_holder(m, 7100002, step(), kDrop);
  reclaim::ReclaimOptions o;
  o.selection.gpus = gpu::devs({0});
  auto report = m.free(o);
  ASSERT_FALSE(report.all_freed());
  // Settled is a window after the last move: after the first look without a fall, after
  // the drop with one.
  const double settled_without_fall = std::chrono::duration<double>(inventory::kFallingWindow).count();
  const double settled_after_fall =
      std::chrono::duration<double>(kDrop + inventory::kFallingWindow).count();
  const bool waited_for_the_fall = report.seconds >= settled_after_fall;
  EXPECT_EQ(waited_for_the_fall, model()) << report.seconds << " s";
  EXPECT_GE(report.seconds, settled_without_fall) << "settled only after a window";
}

// `gpureap wait --gpu 0 --timeout 2.5s`: its polls are the model's readings, on the node's
// clock (an event clock here: the wait takes no real time), and what it reports at the
// timeout is the model's word.
TEST_P(ReleaseClock, WaitsReportIsTheModelsWordOnTheNodesClock) {
  TestMachine m(1);
  reclaim::testing::stage_unlisted_holder(m, 7100003, step(), kDrop);
  FreeWaitOptions o;
  o.gpus = *gpu::GpuSelector::parse("0");
  o.timeout = 2500ms;
  const auto start = m.clock.now();
  auto result = wait_until_free(m.node(), o);
  EXPECT_EQ(result.status, FreeWaitResult::Status::timed_out) << result.message;
  EXPECT_GE(m.clock.now() - start, 2500ms) << "waited on the node's clock";
  ASSERT_TRUE(result.holders);
  const auto& view = result.holders->gpus.at(0);
  EXPECT_EQ(view.falling, model()) << view.unexplained_detail;
  EXPECT_EQ(inventory::gpu_state(view) == inventory::GpuState::releasing, model())
      << view.unexplained_detail;
}

// The agent: its ticks go through its tracker (no re-reading of its own), and its events
// restart the settle time of memory outside the namespace only when the model says it fell.
TEST_P(ReleaseClock, TheAgentsEventsAnswerAsTheModel) {
  TestMachine m(1);
  reclaim::testing::stage_unseen_pid(m, 7100004, step(), kDrop);
  inventory::EventDetector events(3000ms);
  inventory::CollectOptions tick;  // as agent/watcher.cc looks
  tick.reread_unexplained = false;
  tick.sample_busy = false;
  const auto start = m.clock.now();
  auto at = [&](std::chrono::milliseconds t) {
    m.clock.sleep_until(start + t);
    inventory::Inventory inv = m.node().look(tick);
    EXPECT_EQ(inv.gpus[0].unexplained, inventory::Unexplained::outside_namespace);
    return events.observe(inv, std::chrono::duration<double>(t).count());
  };
  EXPECT_TRUE(at(0ms).empty());
  EXPECT_TRUE(at(kDrop).empty());
  EXPECT_TRUE(at(2000ms).empty());
  // 3 s after the first tick: announced unless the step restarted the settle time.
  const bool announced = !at(3000ms).empty();
  EXPECT_EQ(announced, !model());
}

INSTANTIATE_TEST_SUITE_P(Steps, ReleaseClock, ::testing::Values(kSmallStep, kLargeStep),
                         [](const ::testing::TestParamInfo<std::uint64_t>& info) {
                           return info.param == kSmallStep ? std::string("Step50MiB")
                                                           : std::string("Step200MiB");
                         });

}  // namespace
}  // namespace gpureap::supervise
