#include "capacity/resolve_plan.h"

#include <gtest/gtest.h>

namespace gpureap::capacity {
namespace {

constexpr std::uint64_t kCard = 97887ULL << 20;  // an RTX PRO 6000, as nvidia-smi shows it

// The case study on a stated card: Kimi-K2.5 on 8 GPUs at 0.88.
PlanArgs kimi_on_card() {
  PlanArgs a;
  a.model = "Kimi-K2.5";
  a.gpu_memory = "97887MiB";
  a.tp = "8";
  a.mem_fraction = "0.88";
  return a;
}

// A machine read must not be asked for when the flags say the card.
MachineReading never_read() {
  ADD_FAILURE() << "the machine was read";
  return {};
}

MachineReading eight_gpus() {
  MachineReading m;
  for (int i = 0; i < 8; ++i) m.gpus.push_back({std::to_string(i), kCard, 0, {}});
  m.meminfo = "MemTotal: 1000000000 kB\nMemAvailable: 400000000 kB\n";
  return m;
}

TEST(ResolvePlan, OnAStatedCardPlansTheFractionWithoutReadingTheMachine) {
  auto plan = resolve_plan(kimi_on_card(), never_read);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->points.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->points[0].mem_fraction, 0.88);
  EXPECT_GT(plan->points[0].kv_tokens, 0u);
  EXPECT_FALSE(plan->sweep);
  EXPECT_EQ(plan->input.tp, 8);
  EXPECT_EQ(plan->card_total, kCard);
  EXPECT_EQ(plan->engine_flag, "--mem-fraction-static");
  EXPECT_TRUE(plan->m0_origin.starts_with("--gpu-memory - ")) << plan->m0_origin;
}

TEST(ResolvePlan, ASweepPlansEveryFraction) {
  PlanArgs a = kimi_on_card();
  a.mem_fraction = "0.80:0.90:0.05";
  auto plan = resolve_plan(a, never_read);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_TRUE(plan->sweep);
  ASSERT_EQ(plan->points.size(), 3u);
  EXPECT_DOUBLE_EQ(plan->points[2].mem_fraction, 0.90);
}

TEST(ResolvePlan, WithoutACardReadsTheMachineOnceAndPlansOnItsSmallestGpu) {
  PlanArgs a = kimi_on_card();
  a.gpu_memory.clear();
  int reads = 0;
  auto plan = resolve_plan(a, [&] {
    ++reads;
    MachineReading m = eight_gpus();
    m.gpus[5].total = kCard - (1ULL << 30);  // the tightest of the eight
    return m;
  });
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(plan->card_total, kCard - (1ULL << 30));
  EXPECT_TRUE(plan->m0_origin.starts_with("GPU 5's ")) << plan->m0_origin;
  EXPECT_EQ(plan->input.gpu.source, "GPU 5 via NVML");
}

TEST(ResolvePlan, MemoryInUseIsNamedByItsInstanceOnceOrByItsGpu) {
  PlanArgs a = kimi_on_card();
  a.gpu_memory.clear();
  MachineReading m = eight_gpus();
  m.instance_notes = {"instance 4721 holds GPUs 0-1"};
  m.gpus[0].used = m.gpus[1].used = 20ULL << 30;
  m.gpus[0].instances = m.gpus[1].instances = {0};
  m.gpus[2].used = 5ULL << 30;  // no instance holds it
  m.gpus[3].used = 1ULL << 30;  // at most 1 GiB: the driver's own, not worth a note
  auto plan = resolve_plan(a, [&] { return m; });
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<std::string> expected = {
      "GPU 2 has 5.00 GiB in use now; the plan assumes it is freed before the launch (gpureap "
      "status --gpu 2 says by whom)",
      "instance 4721 holds GPUs 0-1"};
  std::vector<std::string> notes;
  for (const auto& n : plan->notes)
    if (n.starts_with("GPU ") || n.starts_with("instance ")) notes.push_back(n);
  EXPECT_EQ(notes, expected);
}

TEST(ResolvePlan, FewerGpusThanTheTpAreSaid) {
  PlanArgs a = kimi_on_card();
  a.gpu_memory.clear();
  MachineReading m = eight_gpus();
  m.gpus.resize(2);
  auto plan = resolve_plan(a, [&] { return m; });
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_NE(std::find(plan->notes.begin(), plan->notes.end(),
                      "only 2 GPU(s) here; --tp 8 is planned on GPUs like these"),
            plan->notes.end());
}

TEST(ResolvePlan, NoGpuMeasuredIsASystemErrorWithNvmlsReason) {
  PlanArgs a = kimi_on_card();
  a.gpu_memory.clear();
  auto plan = resolve_plan(a, [] {
    MachineReading m;
    m.problem = "libnvidia-ml.so.1: not found";
    return m;
  });
  ASSERT_FALSE(plan);
  EXPECT_TRUE(plan.error().system);
  EXPECT_EQ(plan.error().message,
            "no GPU could be measured through NVML (libnvidia-ml.so.1: not found); pass "
            "--gpu-memory (or --from-log)");
}

TEST(ResolvePlan, HostRamIsTheMachinesWhenItsGpusArePlanned) {
  PlanArgs a = kimi_on_card();
  a.gpu_memory.clear();
  a.hierarchical_cache = true;
  auto plan = resolve_plan(a, eight_gpus);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->input.host_memory, 400000000ULL * 1024);
  // A stated card is not this machine's: its RAM is not assumed.
  a.gpu_memory = "97887MiB";
  auto stated = resolve_plan(a, never_read);
  ASSERT_TRUE(stated) << stated.error().message;
  EXPECT_FALSE(stated->input.host_memory);
}

TEST(ResolvePlan, TheLaunchCommandFillsWhatTheFlagsLeaveAndItsModelMayBeAPreset) {
  PlanArgs a;
  a.gpu_memory = "97887MiB";
  a.mem_fraction = "0.85";  // gpureap's own flag wins over the command's 0.88
  a.launch = {"python",    "-m", "sglang.launch_server",  "--model-path", "moonshotai/Kimi-K2.5",
              "--tp-size", "8",  "--mem-fraction-static", "0.88"};
  auto plan = resolve_plan(a, never_read);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->input.tp, 8);
  EXPECT_EQ(plan->input.model_name, "Kimi-K2.5");
  EXPECT_DOUBLE_EQ(plan->points.at(0).mem_fraction, 0.85);
}

TEST(ResolvePlan, UsageErrorsNameWhatToChange) {
  PlanArgs no_model = kimi_on_card();
  no_model.model.clear();
  auto plan = resolve_plan(no_model, never_read);
  ASSERT_FALSE(plan);
  EXPECT_FALSE(plan.error().system);
  EXPECT_TRUE(plan.error().message.starts_with("--model is required")) << plan.error().message;

  PlanArgs vllm_log = kimi_on_card();
  vllm_log.engine = "vllm";
  vllm_log.from_log = "sglang.log";
  plan = resolve_plan(vllm_log, never_read);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message,
            "--from-log reads SGLang logs; it cannot calibrate --engine vllm");

  PlanArgs no_fraction = kimi_on_card();
  no_fraction.mem_fraction.clear();
  plan = resolve_plan(no_fraction, never_read);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message,
            "--mem-fraction is required (the --mem-fraction-static to plan, or a sweep "
            "FROM:TO:STEP)");

  // Given empty on the command line is given: an error, not the default.
  PlanArgs empty_tp = kimi_on_card();
  empty_tp.tp.clear();
  empty_tp.given.tp = true;
  plan = resolve_plan(empty_tp, never_read);
  ASSERT_FALSE(plan);
  EXPECT_TRUE(plan.error().message.find("--tp") != std::string::npos) << plan.error().message;
}

}  // namespace
}  // namespace gpureap::capacity
