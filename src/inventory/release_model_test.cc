// The release model (issue 35) on a fake clock: falling memory is releasing, flat memory
// is releasing within the budget since its holders exited and driver-held after it, and
// memory whose exit was not seen is no_holder until it was watched flat for a budget.

#include "inventory/release_model.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"
#include "util/test_temp_dir.h"

namespace gpureap::inventory {
namespace {

namespace tv = testing;
using namespace std::chrono_literals;
using Clock = util::Clock;

TEST(ReleaseBudget, GrowsWithPinnedHostMemoryAboveItsFloorAndTheOptionReplacesIt) {
  ReleaseBudget rule;
  EXPECT_EQ(rule.for_pinned(std::nullopt), kBudgetFloor) << "not known: the floor";
  EXPECT_EQ(rule.for_pinned(0), kBudgetFloor) << "device memory alone: the floor covers it";
  // sglang#32829: 243 GB pinned came back 25.9 s after the kill; 500 GiB needs more.
  EXPECT_EQ(rule.for_pinned(243'000'000'000ull), kBudgetFloor);
  EXPECT_EQ(rule.for_pinned(500ull << 30), 62000ms);
  ReleaseBudget fixed{1500ms};
  EXPECT_EQ(fixed.for_pinned(500ull << 30), 1500ms);
}

// W4-08: no figure stretches the rule past its ceiling (a 16 TiB locked reservation made it
// 1,968 s; a whole address space, 4.4 h).
TEST(ReleaseBudget, TheRuleHasACeiling) {
  ReleaseBudget rule;
  EXPECT_EQ(rule.for_pinned(16ull << 40), kBudgetCeiling);
  EXPECT_EQ(rule.for_pinned(128ull << 40), kBudgetCeiling);
  EXPECT_EQ(kBudgetCeiling, 120000ms);
}


TEST(JudgeRelease, AnExitSeenIsReleasingWithinTheBudgetAndDriverHeldAfterIt) {
  util::FakeClock clock;
  const ReleaseBudget budget{10s};
  ReleaseFacts f;
  f.last_exit = clock.now();
  f.watched_since = clock.now();
  f.pinned_bytes = 0;
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::releasing);
  clock.advance(9s);
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::releasing);
  clock.advance(1s);
  auto j = judge_release(f, clock.now(), budget);
  EXPECT_EQ(j.verdict, ReleaseVerdict::driver_held);
  EXPECT_DOUBLE_EQ(j.elapsed_s, 10.0);
  EXPECT_DOUBLE_EQ(j.budget_s, 10.0);
}

TEST(JudgeRelease, FallingMemoryIsReleasingPastTheBudget) {
  util::FakeClock clock;
  const ReleaseBudget budget{10s};
  ReleaseFacts f;
  f.last_exit = clock.now();
  f.watched_since = clock.now();
  clock.advance(20s);
  f.last_fall = clock.now() - 1s;
  auto j = judge_release(f, clock.now(), budget);
  EXPECT_EQ(j.verdict, ReleaseVerdict::releasing);
  EXPECT_TRUE(j.falling);
  clock.advance(kFallingWindow);
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::driver_held)
      << "flat again, past the budget";
}

TEST(JudgeRelease, AnExitNotSeenIsNoHolderUntilWatchedFlatForABudget) {
  util::FakeClock clock;
  const ReleaseBudget budget{10s};
  ReleaseFacts f;
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::no_holder)
      << "one look: nothing can be told";
  f.watched_since = clock.now();
  clock.advance(9s);
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::no_holder);
  clock.advance(1s);
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::driver_held)
      << "the exit was no later than the first look: a budget has passed";
  f.last_fall = clock.now();
  EXPECT_EQ(judge_release(f, clock.now(), budget).verdict, ReleaseVerdict::releasing);
}

// The tracker over looks: a holder seen, then gone with its memory still there.
Inventory look_with_holder(std::uint64_t pinned) {
  Inventory inv = tv::idle_node(1);
  tv::add_holder(inv.gpus[0], 4242, 40 * kGiB, tv::Lineage::orphaned);
  inv.gpus[0].holders[0].holder.pinned_host_bytes = pinned;
  inv.gpus[0].holders[0].holder.found_by.insert(proc::FoundBy::source);  // NVML lists it
  return inv;
}

Inventory look_without_holder(std::uint64_t left) {
  Inventory inv = tv::idle_node(1);
  // build_inventory's class for memory no process holds; the model judges it.
  tv::add_unexplained(inv.gpus[0], left, Unexplained::no_holder);
  return inv;
}

TEST(ReleaseTracker, AKilledHoldersFlatMemoryIsReleasingThenDriverHeldAfterItsBudget) {
  util::FakeClock clock;
  ReleaseTracker tracker;  // the rule: 2 s + 0.12 s/GiB, at least 30 s
  Inventory before = look_with_holder(300ull << 30);  // 300 GiB pinned: 38 s
  tracker.observe(before, clock.now());
  EXPECT_EQ(gpu_state(before.gpus[0]), GpuState::held);

  clock.advance(500ms);
  Inventory after = look_without_holder(40 * kGiB);
  tracker.observe(after, clock.now());
  EXPECT_EQ(gpu_state(after.gpus[0]), GpuState::releasing);
  EXPECT_EQ(after.gpus[0].unexplained_detail.find("reset"), std::string::npos)
      << after.gpus[0].unexplained_detail;
  EXPECT_NE(after.gpus[0].unexplained_detail.find("300 GiB of host memory pinned"),
            std::string::npos)
      << after.gpus[0].unexplained_detail;

  clock.advance(37s);
  Inventory later = look_without_holder(40 * kGiB);
  tracker.observe(later, clock.now());
  EXPECT_EQ(gpu_state(later.gpus[0]), GpuState::releasing) << "37 s of a 38 s budget";

  clock.advance(1s);
  Inventory past = look_without_holder(40 * kGiB);
  tracker.observe(past, clock.now());
  EXPECT_EQ(gpu_state(past.gpus[0]), GpuState::driver_held);
  EXPECT_NE(past.gpus[0].unexplained_detail.find("GPU reset"), std::string::npos);

  // Back at the baseline: the release is over; the next one starts afresh.
  Inventory freed = tv::idle_node(1);
  tracker.observe(freed, clock.now());
  EXPECT_EQ(gpu_state(freed.gpus[0]), GpuState::free);
  EXPECT_EQ(tracker.facts("GPU-0")->last_exit, std::nullopt);
}

// --release-budget 1ms (the tests' budget) is said so, not "release budget 0 s".
TEST(ReleaseTracker, ABudgetUnderASecondIsSaidInMilliseconds) {
  util::FakeClock clock;
  ReleaseTracker tracker(ReleaseBudget{250ms});
  Inventory before = look_with_holder(0);
  tracker.observe(before, clock.now());
  Inventory after = look_without_holder(40 * kGiB);
  tracker.observe(after, clock.now());
  EXPECT_EQ(gpu_state(after.gpus[0]), GpuState::releasing);
  EXPECT_NE(after.gpus[0].unexplained_detail.find("(release budget 250 ms)"), std::string::npos)
      << after.gpus[0].unexplained_detail;
  clock.advance(300ms);
  Inventory past = look_without_holder(40 * kGiB);
  tracker.observe(past, clock.now());
  EXPECT_EQ(gpu_state(past.gpus[0]), GpuState::driver_held);
  EXPECT_NE(past.gpus[0].unexplained_detail.find("release budget of 250 ms since"),
            std::string::npos)
      << past.gpus[0].unexplained_detail;
}

TEST(ReleaseTracker, MemoryThatFallsStaysReleasingAndAFreshLookSaysNoHolder) {
  util::FakeClock clock;
  ReleaseTracker tracker(ReleaseBudget{3s});
  Inventory first = look_without_holder(40 * kGiB);
  tracker.observe(first, clock.now());
  EXPECT_EQ(gpu_state(first.gpus[0]), GpuState::no_holder) << "the exit was not seen";
  EXPECT_NE(first.gpus[0].unexplained_detail.find("may still be releasing"), std::string::npos);
  EXPECT_EQ(first.gpus[0].unexplained_detail.find("reset"), std::string::npos);

  for (int i = 1; i <= 5; ++i) {
    clock.advance(1s);
    Inventory falling = look_without_holder((40 - 4 * i) * kGiB);
    tracker.observe(falling, clock.now());
    EXPECT_EQ(gpu_state(falling.gpus[0]), GpuState::releasing) << "tick " << i;
  }
  clock.advance(kFallingWindow);
  Inventory flat = look_without_holder(20 * kGiB);
  tracker.observe(flat, clock.now());
  EXPECT_EQ(gpu_state(flat.gpus[0]), GpuState::driver_held) << "watched 7 s, flat 2 s";

  // Another looker (a one-shot status) has seen nothing: it cannot tell.
  ReleaseTracker fresh(ReleaseBudget{3s});
  Inventory one = look_without_holder(20 * kGiB);
  fresh.observe(one, clock.now());
  EXPECT_EQ(gpu_state(one.gpus[0]), GpuState::no_holder);
}

TEST(ReleaseTracker, RecordOnlyLeavesTheVerdictOfAnotherLooker) {
  util::FakeClock clock;
  ReleaseTracker tracker(ReleaseBudget{3s});
  Inventory agents = look_without_holder(40 * kGiB);
  agents.gpus[0].unexplained = Unexplained::driver_held;
  tracker.observe(agents, clock.now(), /*judge=*/false);
  EXPECT_EQ(gpu_state(agents.gpus[0]), GpuState::driver_held);
  // The agent watched it past a budget: this looker's next direct look agrees.
  clock.advance(1s);
  Inventory direct = look_without_holder(40 * kGiB);
  tracker.observe(direct, clock.now());
  EXPECT_EQ(gpu_state(direct.gpus[0]), GpuState::driver_held);
}

// W4-04: a client with the node open and no NVML entry (DCGM's nv-hostengine, kept open for
// good; nvidia-smi, now and then) neither holds the memory nor restarts the release: the
// budget counts from the exit of the holder NVML listed, and the verdict names the clients
// a reset needs gone.
TEST(ReleaseTracker, ClientsWithTheNodeOpenNeitherHideNorRestartARelease) {
  util::FakeClock clock;
  ReleaseTracker tracker(ReleaseBudget{4s});
  Inventory before = look_with_holder(0);
  tv::add_client(before.gpus[0], 77, "nv-hostengine");
  tracker.observe(before, clock.now());

  auto look = [&](bool smi) {
    Inventory inv = look_without_holder(40 * kGiB);
    tv::add_client(inv.gpus[0], 77, "nv-hostengine");
    if (smi) tv::add_client(inv.gpus[0], 91, "nvidia-smi");
    tracker.observe(inv, clock.now());
    return inv;
  };
  clock.advance(1s);
  EXPECT_EQ(gpu_state(look(true).gpus[0]), GpuState::releasing) << "1 s after the exit";
  clock.advance(2s);
  EXPECT_EQ(gpu_state(look(false).gpus[0]), GpuState::releasing) << "nvidia-smi exited";
  clock.advance(2s);
  Inventory past = look(false);
  EXPECT_EQ(gpu_state(past.gpus[0]), GpuState::driver_held)
      << "5 s after the holder's exit; nvidia-smi's exit 2 s ago restarts nothing";
  EXPECT_NE(past.gpus[0].unexplained_detail.find("since its last holder exited"),
            std::string::npos);
  EXPECT_NE(past.gpus[0].unexplained_detail.find("pid 77 (nv-hostengine)"), std::string::npos)
      << past.gpus[0].unexplained_detail;
}

// Issue 50: the first sighting outlives the process that saw it. Each tracker stands for a
// one-shot command (`status --check`, the Slurm health check) run later on the same boot,
// reading the state directory the earlier one wrote; the clock is the fake's.
TEST(ReleaseTracker, AFirstSightingOutlivesTheProcessThatSawIt) {
  TestTempDir dir("gpureap-sighting-test");
  util::FakeClock clock;
  auto one_shot = [&](std::uint64_t left, const std::string& boot = "boot-a") {
    ReleaseTracker tracker(ReleaseBudget{3s});
    tracker.keep_sightings(SightingStore::load(dir.dir(), boot));
    Inventory inv = left ? look_without_holder(left) : tv::idle_node(1);
    tracker.observe(inv, clock.now());
    return inv.gpus[0];
  };
  EXPECT_EQ(gpu_state(one_shot(40 * kGiB)), GpuState::no_holder) << "the first look";
  clock.advance(2s);
  GpuView second = one_shot(40 * kGiB);
  // Still no holder (as the agent's own flat stretch): no exit or fall was seen, and a
  // "releasing" GPU is clean to `status --check`; the record only carries the clock on.
  EXPECT_EQ(gpu_state(second), GpuState::no_holder) << second.unexplained_detail;
  EXPECT_NE(second.unexplained_detail.find("first seen 2.0 s ago"), std::string::npos)
      << second.unexplained_detail;
  clock.advance(3s);
  GpuView third = one_shot(40 * kGiB);
  EXPECT_EQ(gpu_state(third), GpuState::driver_held) << "5 s flat, past the 3 s budget";
  EXPECT_NE(third.unexplained_detail.find("GPU reset"), std::string::npos);
  EXPECT_EQ(gpu_state(one_shot(40 * kGiB, "boot-b")), GpuState::no_holder)
      << "another boot's record is none";

  // Memory that grew past the record is other memory: a stretch of its own.
  ReleaseTracker grown(ReleaseBudget{3s});
  grown.keep_sightings(SightingStore::load(dir.dir(), "boot-b"));
  clock.advance(10s);
  Inventory more = look_without_holder(60 * kGiB);
  grown.observe(more, clock.now());
  EXPECT_EQ(gpu_state(more.gpus[0]), GpuState::no_holder);

  // Back at the baseline: the record goes, and memory stuck later starts afresh.
  EXPECT_EQ(gpu_state(one_shot(0, "boot-b")), GpuState::free);
  clock.advance(10s);
  EXPECT_EQ(gpu_state(one_shot(40 * kGiB, "boot-b")), GpuState::no_holder)
      << "the memory that came back is never counted";
}

// W4-08: only the holders NVML listed on the GPU count: a process that only had the node
// open (any CUDA or NVML client) and exits adds neither an exit nor its pinned memory.
TEST(ReleaseTracker, AClientsPinnedMemoryDoesNotStretchTheBudget) {
  util::FakeClock clock;
  ReleaseTracker tracker;  // the rule: 30 s here
  Inventory before = look_with_holder(0);
  tv::add_client(before.gpus[0], 88, "python3");
  before.gpus[0].holders.back().holder.pinned_host_bytes = 16ull << 40;
  tracker.observe(before, clock.now());
  clock.advance(1s);
  Inventory after = look_without_holder(40 * kGiB);  // the holder and the client gone
  tracker.observe(after, clock.now());
  EXPECT_EQ(gpu_state(after.gpus[0]), GpuState::releasing);
  ASSERT_NE(tracker.facts("GPU-0"), nullptr);
  EXPECT_EQ(tracker.facts("GPU-0")->pinned_bytes, 0u);
  clock.advance(kBudgetFloor);
  Inventory past = look_without_holder(40 * kGiB);
  tracker.observe(past, clock.now());
  EXPECT_EQ(gpu_state(past.gpus[0]), GpuState::driver_held) << past.gpus[0].unexplained_detail;
}

}  // namespace
}  // namespace gpureap::inventory
