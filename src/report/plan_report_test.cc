#include "report/plan_report.h"

#include <gtest/gtest.h>

#include "capacity/model_source.h"
#include "capacity/plan_args.h"
#include "report/json.h"

namespace gpureap::report {
namespace {

namespace cap = gpureap::capacity;

// What `gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8` builds
// (cli/plan_command.cc), before any fraction is planned.
capacity::LaunchPlan kimi() {
  capacity::LaunchPlan r;
  cap::PlanInput& in = r.input;
  auto model = cap::resolve_model("Kimi-K2.5");
  EXPECT_TRUE(model.has_value());
  in.model_name = model->spec.name;
  in.kv = model->spec.kv;
  in.context_len = model->spec.context_len;
  in.tp = 8;
  const std::uint64_t card = 97887ULL << 20U;
  in.gpu = cap::assumed_budget(card, in.tp, model->spec.weights->per_rank(in.tp),
                               "--gpu-memory 97887MiB");
  r.engine_flag = "--mem-fraction-static";
  r.weights_origin = model->spec.weights_origin;
  r.m0_origin = "--gpu-memory - 2.00 GiB assumed for the driver reservation, CUDA context and NCCL";
  r.reserve_origin = "assumed (calibrate with --from-log)";
  r.card_total = card;
  r.notes = model->notes;
  return r;
}

// --mem-fraction `fractions`: one point, or a sweep.
capacity::LaunchPlan planned(capacity::LaunchPlan r, std::string_view fractions) {
  const auto parsed = cap::parse_mem_fraction(fractions);
  EXPECT_TRUE(parsed.has_value());
  r.sweep = parsed->size() > 1;
  for (double f : *parsed) r.points.push_back(cap::plan_point(r.input, f));
  return r;
}

// The figures of the case study (docs/plan.md), byte for byte as `plan` printed
// them before its rendering moved here from cli/plan_command.cc.
TEST(PlanReportText, OneFraction) {
  EXPECT_EQ(plan_report_text(planned(kimi(), "0.88"), Style{}),
            R"txt(Kimi-K2.5, TP 8, SGLang, KV bf16, --mem-fraction-static 0.88

Per GPU
  free before load (M0)                   93.6 GiB  --gpu-memory - 2.00 GiB assumed for the driver reservation, CUDA context and NCCL
  weights                                 71.9 GiB  preset inventory: routed experts INT4 (group 32, bf16 scales), everything else bf16; MoonViT counted on every rank
  bytes per token                         70,272 B  MLA: 61 layers x (512 + 64) x 2 B, a full copy on every rank
  KV budget                               10.5 GiB  0.88 x M0 - weights
  KV tokens                                160,472
  runtime slack outside the pool          11.2 GiB  (1 - 0.88) x M0
    req_to_token table                    2.00 GiB  2,048 slots x 262,148 tokens x 4 B
    CUDA graphs, workspaces               3.75 GiB  assumed (calibrate with --from-log)
  headroom for prefill                    5.48 GiB  ok

Requests (one pool per GPU, shared by the TP group)
  running requests                               -  pass --avg-prompt/--avg-output
  at the full context (262,144)               0.61
  request slots                              2,048  SGLang's max_running_requests

warning [context_exceeds_pool] the pool holds 160472 tokens, less than one request at the full context of 262144: longer requests are rejected (a smaller --context-length also shrinks the request table)
)txt");
}

TEST(PlanReportText, SweepWithHostCache) {
  // ... --avg-prompt 1000 --avg-output 4100 --hicache-ratio 2 --host-memory 408GB
  capacity::LaunchPlan r = kimi();
  r.input.avg_prompt = 1000;
  r.input.avg_output = 4100;
  r.input.host_cache.ratio = 2;
  r.input.host_memory = 408'000'000'000ULL;
  r.hicache_text = "--hicache-ratio 2";
  EXPECT_EQ(plan_report_text(planned(r, "0.80:0.95:0.05"), Style{}),
            R"txt(Kimi-K2.5, TP 8, SGLang, KV bf16, host cache --hicache-ratio 2

Per GPU
  free before load (M0)                   93.6 GiB  --gpu-memory - 2.00 GiB assumed for the driver reservation, CUDA context and NCCL
  weights                                 71.9 GiB  preset inventory: routed experts INT4 (group 32, bf16 scales), everything else bf16; MoonViT counted on every rank
  bytes per token                         70,272 B  MLA: 61 layers x (512 + 64) x 2 B, a full copy on every rank

  fraction   KV budget   KV tokens    headroom   running  host tokens    host RAM  status
      0.80    3.01 GiB      46,066    13.0 GiB         9       92,132     51.8 GB  ok
      0.85    7.69 GiB     117,570    8.29 GiB        23      235,140    132.2 GB  ok
      0.90    12.4 GiB     189,074    3.61 GiB        37      378,148    212.6 GB  ok
      0.95    17.1 GiB     260,577   -1.07 GiB        51      521,154    293.0 GB  OOM at start-up

  running: requests of 1,000 + 4,100 tokens the pool holds at once
  highest fraction keeping 2.00 GiB of headroom: 0.91
  The host cache keeps evicted prefixes; it does not raise the running requests.
)txt");
}

TEST(PlanReportText, FailingLaunchesInRedOnATerminal) {
  const std::string text =
      plan_report_text(planned(kimi(), "0.90:0.95:0.05"), Style{.color = true});
  EXPECT_NE(text.find("\x1b[32mok\x1b[0m"), std::string::npos) << text;
  EXPECT_NE(text.find("\x1b[31mOOM at start-up\x1b[0m"), std::string::npos) << text;
}

TEST(PlanReportJson, OneFractionAtTheTopLevel) {
  EXPECT_EQ(json_text(plan_report_json(planned(kimi(), "0.88"))), R"json({
  "schema_version": 2,
  "command": "plan",
  "engine": "sglang",
  "model": {
    "name": "Kimi-K2.5",
    "attention": "mla",
    "layers": 61,
    "context_len": 262144,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64
  },
  "tp": 8,
  "kv_dtype": "bf16",
  "gpu_memory_bytes": 102641958912,
  "free_before_load_bytes": 100494475264,
  "free_before_load_source": "--gpu-memory - 2.00 GiB assumed for the driver reservation, CUDA context and NCCL",
  "weights_bytes": 77158414464,
  "weights_source": "preset inventory: routed experts INT4 (group 32, bf16 scales), everything else bf16; MoonViT counted on every rank",
  "runtime_reserve_bytes": 4026531840,
  "runtime_reserve_source": "assumed (calibrate with --from-log)",
  "bytes_per_token": 70272,
  "avg_prompt_tokens": 0,
  "avg_output_tokens": 0,
  "host_memory_bytes": null,
  "calibration": null,
  "notes": [],
  "mem_fraction": 0.88,
  "kv_budget_bytes": 11276723768,
  "kv_tokens": 160472,
  "runtime_slack_bytes": 12059337031,
  "req_to_token_bytes": 2147516416,
  "headroom_bytes": 5885288775,
  "max_running_requests": 2048,
  "running_requests": null,
  "full_context_requests": 0.612152099609375,
  "host_cache_tokens": null,
  "host_ram_per_rank_bytes": null,
  "host_ram_bytes": null,
  "host_ram_needed_bytes": null,
  "warnings": [
    {
      "code": "context_exceeds_pool",
      "message": "the pool holds 160472 tokens, less than one request at the full context of 262144: longer requests are rejected (a smaller --context-length also shrinks the request table)"
    }
  ]
}
)json");
}

TEST(PlanReportJson, SweepPutsEachFractionUnderPoints) {
  const auto j = plan_report_json(planned(kimi(), "0.80:0.95:0.05"));
  ASSERT_EQ(j["points"].size(), 4U);
  EXPECT_EQ(j["points"][3]["mem_fraction"], 0.95);
  EXPECT_LT(j["points"][3]["headroom_bytes"].get<std::int64_t>(), 0);
  EXPECT_FALSE(j.contains("kv_tokens"));
}

}  // namespace
}  // namespace gpureap::report
