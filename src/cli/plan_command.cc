// `gpureap plan`: what a server launch will get from its KV-cache settings,
// before it is launched. Steps: parse the flags -> resolve the plan
// (capacity::resolve_plan: the model, the GPU from a start-up log, --gpu-memory or this
// machine's NVML, every fraction) -> report (table or JSON). All arithmetic lives in
// src/capacity and the layout of the output in src/report/plan_report; this file reads
// this machine when asked and prints.

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "capacity/model_preset.h"
#include "capacity/resolve_plan.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "proc/proc_files.h"
#include "report/instance_text.h"
#include "report/json.h"
#include "report/plan_report.h"
#include "report/terminal_text.h"

namespace gpureap::cli {
namespace {

namespace cap = gpureap::capacity;

struct PlanOptions {
  cap::PlanArgs args;
  const CLI::App* sub = nullptr;  // which options were given (PlanArgs::given)
};

// This machine's GPUs through a look, not NVML alone: memory in use now is named by the
// server instance that holds it, with the command that frees that instance and nothing
// else.
cap::MachineReading read_machine(const GlobalOptions& global) {
  inventory::Node node = open_node(global);
  const inventory::Inventory inv = node.look();
  cap::MachineReading machine;
  machine.problem = inv.source_problem;
  for (const auto& in : inv.instances)
    machine.instance_notes.push_back(report::in_use_before_launch(in));
  for (const auto& v : inv.gpus) {
    const gpu::GpuInfo& g = v.info;
    if (!g.memory || g.memory->total == 0) continue;
    cap::MeasuredGpu m{fmt::format("{}", g.id), g.memory->total, g.memory->used, {}};
    for (std::size_t i = 0; i < inv.instances.size(); ++i)
      if (std::ranges::find(inv.instances[i].gpus, g.id) != inv.instances[i].gpus.end())
        m.instances.push_back(i);
    machine.gpus.push_back(std::move(m));
  }
  machine.meminfo = proc::read_small_file(node.proc_root() + "/meminfo");
  return machine;
}

int run_plan(const GlobalOptions& global, const PlanOptions& o) {
  cap::PlanArgs args = o.args;
  auto given = [&o](const char* name) { return o.sub->count(name) > 0; };
  args.given = {.tp = given("--tp"),
                .hicache_ratio = given("--hicache-ratio"),
                .hicache_size = given("--hicache-size"),
                .context_len = given("--context-len"),
                .avg_prompt = given("--avg-prompt"),
                .avg_output = given("--avg-output"),
                .kv_dtype = given("--kv-dtype"),
                .engine = given("--engine")};
  auto plan = cap::resolve_plan(std::move(args), [&global] { return read_machine(global); });
  if (!plan) {
    print_err(fmt::format("gpureap plan: {}\n", report::terminal_text(plan.error().message)));
    return plan.error().system ? kExitSystem : kExitUsage;
  }
  if (global.json) {
    print_out(report::document_text(report::plan_report_json(*plan)));
  } else {
    print_out(report::plan_report_text(*plan, stdout_style(global)));
  }
  return kExitOk;
}

std::string presets_help() {
  std::string out;
  for (const auto& p : cap::model_presets())
    out += fmt::format("  {:<18}{}\n", p.name, p.quantization);
  return out;
}

// plan's --help: what it plans and how, with examples.
constexpr const char* kPlanDescription =
    "Plan KV-cache capacity for a (re)launch: tokens, requests, headroom.\n"
    "SGLang sizes its KV pool as  f x M0 - weights  per GPU, where f is\n"
    "--mem-fraction-static and M0 the GPU's free memory before the weights load (the card\n"
    "minus the driver's reservation, the CUDA context and NCCL). Each token costs a fixed\n"
    "number of bytes (MLA models keep a full copy on every rank; GQA models split their KV\n"
    "heads, one whole head per rank once --tp exceeds them). What f leaves outside the pool\n"
    "holds the request table, CUDA graphs and the activations of a prefill batch: below about\n"
    "1 GiB of headroom a large prefill runs out of memory. The host cache\n"
    "(--enable-hierarchical-cache, as SGLang: 2 x the GPU pool, or --hicache-size GB per rank)\n"
    "keeps evicted prefixes in RAM on every rank; it raises the prefix-hit rate, not the\n"
    "number of requests running at once.\n\n"
    "Examples (the case study: Kimi-K2.5 on 8 x RTX PRO 6000, 97887 MiB each):\n"
    "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 \\\n"
    "      --mem-fraction 0.88\n"
    "      ~160K tokens per GPU, 5.5 GiB headroom; at 0.93 it warns of a prefill OOM\n"
    "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 \\\n"
    "      --mem-fraction 0.80:0.95:0.01 --avg-prompt 1000 --avg-output 4100\n"
    "      a sweep, as a table\n"
    "  gpureap plan --model Kimi-K2.5 --gpu-memory 97887MiB --tp 8 \\\n"
    "      --mem-fraction 0.88 --kv-dtype fp8_e4m3 \\\n"
    "      --enable-hierarchical-cache --hicache-size 48 --host-memory 408GB\n"
    "  gpureap plan --model Kimi-K2.5 --from-log sglang.log --mem-fraction 0.93\n"
    "      calibrated from the log's last start-up, predicted for another fraction\n"
    "  gpureap plan --gpu-memory 97887MiB -- python -m sglang.launch_server \\\n"
    "      --model-path moonshotai/Kimi-K2.5 --tp-size 8 --mem-fraction-static 0.88\n"
    "      the flags of the launch command you use (the engine's own names)\n"
    "  gpureap plan --model ./Qwen3-8B/config.json --tp 2 --mem-fraction 0.9\n"
    "      GPU memory read through NVML; weights from model.safetensors.index.json";

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [sub, o] =
      register_command<PlanOptions>(app, "plan", kPlanDescription, global, run, run_plan);
  o.sub = &sub;
  cap::PlanArgs& a = o.args;
  sub.footer(
      "Presets (weights from a parameter inventory; docs/plan.md shows it):\n" + presets_help() +
      "\nJSON (--json): bytes_per_token, weights_bytes, kv_budget_bytes, kv_tokens,\n"
      "headroom_bytes, running_requests, host_cache_tokens, host_ram_bytes, warnings[] (code,\n"
      "message); a sweep puts one object per fraction under points[]. Schema: docs/plan.md.\n\n" +
      exit_status_help(kPlanExits));
  // Every value is kept as typed: resolve_plan parses it after the launch command's fill-in.
  auto text = [&sub](const std::string& names, std::string& into, const std::string& description,
                     const std::string& type) {
    return sub.add_option(names, into, description)->type_name(type);
  };
  text("--model", a.model,
       "A preset name (Presets below) or a Hugging Face config.json (or its directory); "
       "required unless the launch command after -- names it",
       "MODEL");
  text("--gpu-memory", a.gpu_memory,
       "Memory of one GPU with a unit, as nvidia-smi shows it (97887MiB, 96GiB); "
       "default: read through NVML",
       "SIZE");
  text("--tp,--tp-size,--tensor-parallel-size", a.tp,
       "Tensor-parallel size (default 1, or the log's)", "N");
  text("--mem-fraction,--mem-fraction-static", a.mem_fraction,
       "--mem-fraction-static to plan (0.88), or a sweep FROM:TO:STEP (0.80:0.95:0.01); "
       "default with --from-log: the log's",
       "FRACTION");
  text("--kv-dtype,--kv-cache-dtype", a.kv_dtype, "KV cache dtype: bf16 (default) or fp8_e4m3",
       "DTYPE");
  sub.add_flag("--enable-hierarchical-cache", a.hierarchical_cache,
               "SGLang's host cache (HiCache) on, as SGLang's switch: sized by --hicache-size, "
               "else --hicache-ratio, else SGLang's default ratio 2");
  auto* size = text("--hicache-size", a.hicache_size,
                    "Host cache per rank, in GB like SGLang's flag (48), or with a unit; "
                    "overrides the ratio. Only with --enable-hierarchical-cache",
                    "SIZE");
  size->excludes(text("--hicache-ratio", a.hicache_ratio,
                      "Host cache as a multiple of the GPU pool (SGLang's default 2). "
                      "Only with --enable-hierarchical-cache",
                      "RATIO"));
  text("--host-memory", a.host_memory,
       "Available host RAM with a unit (408GB); default: this machine's when the GPUs "
       "are read here",
       "SIZE");
  text("--context-len,--context-length,--max-model-len", a.context_len,
       "Server context length (default: the model's)", "TOKENS");
  text("--avg-prompt", a.avg_prompt, "Average prompt tokens per request", "TOKENS");
  text("--avg-output", a.avg_output, "Average output tokens per request", "TOKENS");
  text("--engine", a.engine, "sglang (default) or vllm (--gpu-memory-utilization)", "ENGINE")
      ->check(CLI::IsMember({"sglang", "vllm"}));
  text("--weights", a.weights,
       "Checkpoint bytes with a unit (600GB), or a model.safetensors.index.json", "SIZE");
  text("--from-log", a.from_log,
       "An SGLang server log: calibrate M0, weights and runtime reserve from its start-up", "PATH");
  sub.add_option("launch", a.launch,
                 "After --: the server's launch command (python -m sglang.launch_server ..., "
                 "vllm serve MODEL ...); its --model-path, --tp-size, --mem-fraction-static, "
                 "--kv-cache-dtype, --context-length, --enable-hierarchical-cache, "
                 "--hicache-size/--hicache-ratio (vLLM: --tensor-parallel-size, "
                 "--gpu-memory-utilization, --max-model-len) are planned, gpureap's own flags "
                 "winning")
      ->type_name("CMD");
}

}  // namespace gpureap::cli
