// `gpureap plan`: what a server launch will get from its KV-cache settings,
// before it is launched. Steps: parse the flags -> resolve the model (preset or
// config.json, weight bytes) -> measure the GPU (a start-up log, --gpu-memory or
// NVML) -> plan every fraction -> report (table or JSON). All arithmetic lives in
// src/capacity and the layout of the output in src/report/plan_report; this file
// reads files and NVML and prints.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capacity/hf_config.h"
#include "capacity/host_cache_flags.h"
#include "capacity/host_memory.h"
#include "capacity/kv_planner.h"
#include "capacity/launch_command.h"
#include "capacity/model_preset.h"
#include "capacity/model_source.h"
#include "capacity/plan_args.h"
#include "capacity/sglang_log.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "proc/proc_files.h"
#include "report/instance_text.h"
#include "report/json.h"
#include "report/plan_report.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

namespace cap = gpureap::capacity;
using report::PlanReport;

struct PlanOptions {
  std::string model;
  std::string gpu_memory;
  std::string tp;  // empty: not given (the log's, else 1)
  std::string mem_fraction;
  std::string kv_dtype;
  std::string hicache_size;
  std::string hicache_ratio;
  std::string hicache_host_memory_mode;  // from a launch command only
  bool hierarchical_cache = false;       // --enable-hierarchical-cache
  std::vector<std::string> host_offload;  // a vLLM launch's host-offload flags, as typed
  std::string host_memory;
  std::string context_len;
  std::string avg_prompt;
  std::string avg_output;
  std::string engine = "sglang";
  std::string weights;
  std::string from_log;
  std::vector<std::string> launch;  // `plan -- CMD...`: the server's launch command
  bool model_from_launch = false;
  // Which options were given.
  CLI::Option* tp_opt = nullptr;
  CLI::Option* ratio_opt = nullptr;
  CLI::Option* size_opt = nullptr;
  CLI::Option* context_opt = nullptr;
  CLI::Option* prompt_opt = nullptr;
  CLI::Option* output_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
  CLI::Option* engine_opt = nullptr;
};

// Given on gpureap's command line, or by the launch command after --.
bool given(const CLI::Option* opt, const std::string& value) {
  return opt->count() > 0 || !value.empty();
}

// Why a plan was not made: a usage error (exit 2) the user fixes by changing
// the command line, or a system error (exit 3): NVML, needed to measure the GPU
// when neither --gpu-memory nor --from-log is given, is unusable.
struct UsageError {
  std::string message;
  int exit_status = kExitUsage;
};

template <typename T>
using Step = std::expected<T, UsageError>;

std::unexpected<UsageError> usage(std::string message) {
  return std::unexpected(UsageError{std::move(message)});
}

// ---------------------------------------------------------------------------
// The GPU through NVML, when --gpu-memory and --from-log are both absent.

struct Measured {
  cap::GpuBudget gpu;
  std::string m0_origin;       // one line: where M0 came from
  std::string reserve_origin;  // one line: where the runtime reserve came from
  std::string proc_root;       // measured on this machine (NVML): its /proc, for host RAM
};

Step<Measured> measure_with_nvml(const GlobalOptions& global, int tp, std::uint64_t weights,
                                 std::vector<std::string>& notes) {
  inventory::Node node = open_node(global);
  // A look, not NVML alone: memory in use now is named by the server instance that
  // holds it, with the command that frees that instance and nothing else.
  const inventory::Inventory inv = node.look();
  std::vector<const gpu::GpuInfo*> usable;
  for (const auto& v : inv.gpus)
    if (v.info.memory && v.info.memory->total > 0) usable.push_back(&v.info);
  if (usable.empty()) {
    return std::unexpected(UsageError{
        fmt::format("no GPU could be measured through NVML{}; pass --gpu-memory (or --from-log)",
                    inv.source_problem.empty() ? "" : fmt::format(" ({})", inv.source_problem)),
        kExitSystem});
  }
  std::vector<const inventory::Instance*> in_use;
  // SGLang sizes every rank's pool from the tightest GPU; the launch uses the
  // first tp GPUs (CUDA_VISIBLE_DEVICES order aside).
  const std::size_t ranks = std::min<std::size_t>(usable.size(), static_cast<std::size_t>(tp));
  std::uint64_t total = usable[0]->memory->total;
  gpu::DeviceId smallest = usable[0]->id;
  for (std::size_t i = 0; i < ranks; ++i) {
    const gpu::GpuInfo& g = *usable[i];
    if (g.memory->total < total) {
      total = g.memory->total;
      smallest = g.id;
    }
    // Memory in use now belongs to the server being replaced, or to something
    // that will still hold it at launch: say which the plan assumes.
    if (g.memory->used <= cap::kGiB) continue;
    bool named = false;
    for (const auto& in : inv.instances) {
      if (std::find(in.gpus.begin(), in.gpus.end(), g.id) == in.gpus.end()) continue;
      named = true;
      if (std::find(in_use.begin(), in_use.end(), &in) == in_use.end()) in_use.push_back(&in);
    }
    if (!named)
      notes.push_back(fmt::format(
          "GPU {} has {} in use now; the plan assumes it is freed before the launch (gpureap "
          "status --gpu {} says by whom)",
          g.id, format_bytes(g.memory->used), g.id));
  }
  for (const auto* in : in_use) notes.push_back(report::in_use_before_launch(*in));
  if (usable.size() < static_cast<std::size_t>(tp))
    notes.push_back(fmt::format("only {} GPU(s) here; --tp {} is planned on GPUs like these",
                                usable.size(), tp));
  Measured m;
  m.gpu = cap::assumed_budget(total, tp, weights, fmt::format("GPU {} via NVML", smallest));
  m.m0_origin = fmt::format(
      "GPU {}'s {} (NVML) - {} assumed for the driver reservation, CUDA "
      "context{}",
      smallest, format_bytes(total), format_bytes(cap::pre_load_overhead(tp)),
      tp > 1 ? " and NCCL" : "");
  m.reserve_origin = "assumed (calibrate with --from-log)";
  m.proc_root = node.proc_root();
  return m;
}

// ---------------------------------------------------------------------------
// The command: flags -> model -> GPU -> plan every fraction.

// `plan -- CMD`: what the launch command says (capacity/launch_command.h), where
// gpureap's own flags say nothing.
Step<PlanOptions> with_launch(PlanOptions o) {
  if (o.launch.empty()) return o;
  auto f = cap::read_launch_command(o.launch);
  if (!f) return usage(f.error().message);
  auto fill = [](std::string& into, const std::string& from) {
    if (into.empty()) into = from;
  };
  o.model_from_launch = o.model.empty() && !f->model.empty();
  fill(o.model, f->model);
  fill(o.tp, f->tp);
  fill(o.mem_fraction, f->mem_fraction);
  fill(o.kv_dtype, f->kv_dtype);
  fill(o.context_len, f->context_len);
  // gpureap's --hicache-ratio wins over the command's --hicache-size (which would
  // override it), and its --hicache-size over the command's ratio.
  if (o.ratio_opt->count() == 0) fill(o.hicache_size, f->hicache_size);
  if (o.size_opt->count() == 0) fill(o.hicache_ratio, f->hicache_ratio);
  fill(o.hicache_host_memory_mode, f->hicache_host_memory_mode);
  o.hierarchical_cache = o.hierarchical_cache || f->hierarchical_cache;
  o.host_offload = f->host_offload;
  if (o.engine_opt->count() == 0) o.engine = f->engine;
  return o;
}

Step<PlanReport> build_plan(const GlobalOptions& global, const PlanOptions& o) {
  PlanReport r;
  if (o.model.empty())
    return usage("--model is required: a preset, a config.json, or a launch command after -- "
                 "that names its model (--model-path, vllm serve MODEL)");
  cap::PlanInput& in = r.input;

  // 1. Flags.
  if (o.engine == "vllm") {
    in.engine = cap::Engine::vllm;
    if (!o.from_log.empty())
      return usage("--from-log reads SGLang logs; it cannot calibrate --engine vllm");
    if (o.hierarchical_cache || !o.hicache_size.empty() || given(o.ratio_opt, o.hicache_ratio))
      return usage(
          "--enable-hierarchical-cache/--hicache-size/--hicache-ratio are SGLang's hierarchical "
          "cache; vLLM has none");
    // vLLM's own host offload (KV cache to CPU memory, weights to CPU) is not modelled.
    if (!o.host_offload.empty()) {
      std::string flags;
      for (const auto& f : o.host_offload) flags += (flags.empty() ? "" : ", ") + f;
      r.notes.push_back(fmt::format(
          "vLLM's host offload ({}) is not planned: the figures are the GPU pool's alone", flags));
    }
  }
  r.engine_flag =
      in.engine == cap::Engine::sglang ? "--mem-fraction-static" : "--gpu-memory-utilization";
  if (given(o.dtype_opt, o.kv_dtype)) {
    auto dtype = cap::parse_kv_dtype(o.kv_dtype);
    if (!dtype) return usage(dtype.error().message);
    in.dtype = *dtype;
  }
  if (in.engine == cap::Engine::sglang) {
    // SGLang builds the host cache only with its switch on (capacity/host_cache_flags.h).
    auto hicache = cap::decide_host_cache({.enabled = o.hierarchical_cache,
                                           .size = o.hicache_size,
                                           .ratio = o.hicache_ratio,
                                           .host_memory_mode = o.hicache_host_memory_mode});
    if (!hicache) return usage(hicache.error().message);
    in.host_cache = hicache->request;
    r.hicache_text = hicache->text;
    r.notes.insert(r.notes.end(), hicache->notes.begin(), hicache->notes.end());
  }
  if (!o.host_memory.empty()) {
    auto size = cap::parse_size_flag("--host-memory", o.host_memory);
    if (!size) return usage(size.error().message);
    in.host_memory = *size;
  }
  std::optional<std::uint64_t> card;
  if (!o.gpu_memory.empty()) {
    auto size = cap::parse_size_flag("--gpu-memory", o.gpu_memory);
    if (!size) return usage(size.error().message);
    card = *size;
  }
  if (o.prompt_opt->count() > 0) {
    auto n = cap::parse_token_count("--avg-prompt", o.avg_prompt, 0);
    if (!n) return usage(n.error().message);
    in.avg_prompt = static_cast<std::uint64_t>(*n);
  }
  if (o.output_opt->count() > 0) {
    auto n = cap::parse_token_count("--avg-output", o.avg_output, 0);
    if (!n) return usage(n.error().message);
    in.avg_output = static_cast<std::uint64_t>(*n);
  }
  std::optional<std::int64_t> context_flag;
  if (given(o.context_opt, o.context_len)) {
    auto n = cap::parse_token_count("--context-len", o.context_len, 1);
    if (!n) return usage(n.error().message);
    context_flag = *n;
  }
  std::optional<int> tp_flag;
  if (given(o.tp_opt, o.tp)) {
    auto tp = cap::parse_tensor_parallel(o.tp);
    if (!tp) return usage(tp.error().message);
    tp_flag = *tp;
  }

  // 2. The model.
  std::string model_arg = o.model;
  auto model = cap::resolve_model(model_arg);
  // A launch command names a checkpoint (a Hugging Face id, a directory elsewhere):
  // its last part may be a preset's name ("moonshotai/Kimi-K2.5").
  if (!model && o.model_from_launch && model_arg.find('/') != std::string::npos)
    if (auto preset = cap::resolve_model(model_arg.substr(model_arg.rfind('/') + 1))) {
      model_arg = model_arg.substr(model_arg.rfind('/') + 1);
      model = std::move(preset);
    }
  if (!model) return usage(model.error().message);
  if (auto ok = cap::resolve_weights(*model, model_arg, o.weights, /*required=*/o.from_log.empty());
      !ok)
    return usage(ok.error().message);
  in.model_name = model->spec.name;
  in.kv = model->spec.kv;
  in.context_len = context_flag.value_or(model->spec.context_len);
  r.notes.insert(r.notes.end(), model->notes.begin(), model->notes.end());

  // 3. The GPU: a start-up log, else --gpu-memory, else NVML.
  std::optional<cap::Calibration> calibration;
  if (!o.from_log.empty()) {
    auto log = cap::read_sglang_log(o.from_log, "--from-log");
    if (!log) return usage(log.error().message);
    auto c = cap::calibrate(*log, in.kv, in.context_len, o.from_log);
    if (!c) return usage(fmt::format("--from-log {}", c.error().message));
    if (c->tp && tp_flag && *c->tp != *tp_flag)
      return usage(
          fmt::format("--tp {} differs from the log's tp_size {}: a calibration holds for "
                      "the layout that wrote the log",
                      *tp_flag, *c->tp));
    // The log's dtype is what it measured; the flag is what to predict.
    if (!given(o.dtype_opt, o.kv_dtype)) in.dtype = c->kv_dtype;
    if (!context_flag && c->context_len) in.context_len = *c->context_len;
    calibration = std::move(c).value();
  }
  in.tp = tp_flag ? *tp_flag : calibration && calibration->tp ? *calibration->tp : 1;
  if (auto ok = cap::check_tensor_parallel(model->spec, in.tp); !ok)
    return usage(ok.error().message);

  Measured measured;
  if (calibration) {
    const cap::Calibration& c = *calibration;
    measured.gpu.free_before_load = c.free_before_load;
    measured.gpu.total = card;
    measured.gpu.weights_per_rank = c.weights_per_rank;
    measured.gpu.runtime_reserve = c.runtime_reserve.value_or(cap::kDefaultRuntimeReserve);
    measured.gpu.source = fmt::format("--from-log {}", o.from_log);
    measured.m0_origin = fmt::format("measured: {}", c.notes.front());
    measured.reserve_origin =
        c.runtime_reserve ? "measured from the log" : "assumed (not in the log)";
    r.weights_origin = "measured: M0 - 'Load weight end' avail mem";
    r.warnings = c.warnings;
    r.log_path = o.from_log;
  } else {
    const std::uint64_t weights = model->spec.weights->per_rank(in.tp);
    r.weights_origin = model->spec.weights_origin;
    if (card) {
      measured.gpu =
          cap::assumed_budget(*card, in.tp, weights, fmt::format("--gpu-memory {}", o.gpu_memory));
      measured.m0_origin = fmt::format(
          "--gpu-memory - {} assumed for the driver reservation, CUDA "
          "context{}",
          format_bytes(cap::pre_load_overhead(in.tp)), in.tp > 1 ? " and NCCL" : "");
      measured.reserve_origin = "assumed (calibrate with --from-log)";
    } else {
      auto m = measure_with_nvml(global, in.tp, weights, r.notes);
      if (!m) return std::unexpected(m.error());
      measured = std::move(*m);
      card = measured.gpu.total;
    }
  }
  in.gpu = measured.gpu;
  r.m0_origin = measured.m0_origin;
  r.reserve_origin = measured.reserve_origin;
  r.card_total = card;
  r.calibration = calibration;
  if (in.engine == cap::Engine::vllm && !in.gpu.total)
    return usage("--engine vllm sizes its pool from the card's total memory: pass --gpu-memory");

  // Host RAM: the flag, else this machine's when the GPUs are this machine's.
  if (!in.host_memory && !measured.proc_root.empty() &&
      (in.host_cache.size_per_rank || in.host_cache.ratio)) {
    in.host_memory =
        cap::parse_mem_available(proc::read_small_file(measured.proc_root + "/meminfo"));
    if (in.host_memory) r.notes.push_back("host RAM available: MemAvailable of this machine");
  }
  if (in.dtype == cap::KvDtype::fp8_e4m3 && in.kv.attention == cap::Attention::mla)
    r.notes.push_back("fp8_e4m3 KV needs an MLA attention backend that supports it on this GPU");

  if (auto ok = cap::check_plan_input(in); !ok) return usage(ok.error().message);

  // 4. Plan every fraction.
  std::string fraction_text = o.mem_fraction;
  if (fraction_text.empty()) {
    if (!calibration)
      return usage(fmt::format(
          "--mem-fraction is required (the {} to plan, or a sweep FROM:TO:STEP)", r.engine_flag));
    fraction_text = fmt::format("{}", calibration->mem_fraction);
  }
  auto fractions = cap::parse_mem_fraction(fraction_text);
  if (!fractions) return usage(fractions.error().message);
  r.sweep = fractions->size() > 1;
  for (double f : *fractions) r.points.push_back(cap::plan_point(in, f));
  if (!r.sweep && r.points.front().kv_tokens == 0)
    return usage(r.points.front().warnings.front().message);
  return r;
}

int run_plan(const GlobalOptions& global, const PlanOptions& flags) {
  auto options = with_launch(flags);
  auto report = options ? build_plan(global, *options) : std::unexpected(options.error());
  if (!report) {
    print_err(fmt::format("gpureap plan: {}\n", report::terminal_text(report.error().message)));
    return report.error().exit_status;
  }
  if (global.json) {
    print_out(report::document_text(report::plan_report_json(*report)));
  } else {
    print_out(report::plan_report_text(*report, stdout_style(global)));
  }
  return kExitOk;
}

std::string presets_help() {
  std::string out;
  for (const auto& p : cap::model_presets())
    out += fmt::format("  {:<18}{}\n", p.name, p.quantization);
  return out;
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand(
      "plan",
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
      "      GPU memory read through NVML; weights from model.safetensors.index.json");
  sub->footer(
      "Presets (weights from a parameter inventory; docs/plan.md shows it):\n" + presets_help() +
      "\nJSON (--json): bytes_per_token, weights_bytes, kv_budget_bytes, kv_tokens,\n"
      "headroom_bytes, running_requests, host_cache_tokens, host_ram_bytes, warnings[] (code,\n"
      "message); a sweep puts one object per fraction under points[]. Schema: docs/plan.md.\n\n" +
      exit_status_help(kPlanExits));
  sub->add_option("--model", o->model,
                  "A preset name (Presets below) or a Hugging Face config.json (or its directory); "
                  "required unless the launch command after -- names it")
      ->type_name("MODEL");
  sub->add_option("--gpu-memory", o->gpu_memory,
                  "Memory of one GPU with a unit, as nvidia-smi shows it (97887MiB, 96GiB); "
                  "default: read through NVML")
      ->type_name("SIZE");
  o->tp_opt = sub->add_option("--tp,--tp-size,--tensor-parallel-size", o->tp, "Tensor-parallel size (default 1, or the log's)")
                  ->type_name("N");
  sub->add_option("--mem-fraction,--mem-fraction-static", o->mem_fraction,
                  "--mem-fraction-static to plan (0.88), or a sweep FROM:TO:STEP (0.80:0.95:0.01); "
                  "default with --from-log: the log's")
      ->type_name("FRACTION");
  o->dtype_opt =
      sub->add_option("--kv-dtype,--kv-cache-dtype", o->kv_dtype, "KV cache dtype: bf16 (default) or fp8_e4m3")
          ->type_name("DTYPE");
  sub->add_flag("--enable-hierarchical-cache", o->hierarchical_cache,
                "SGLang's host cache (HiCache) on, as SGLang's switch: sized by --hicache-size, "
                "else --hicache-ratio, else SGLang's default ratio 2");
  o->size_opt =
      sub->add_option("--hicache-size", o->hicache_size,
                      "Host cache per rank, in GB like SGLang's flag (48), or with a unit; "
                      "overrides the ratio. Only with --enable-hierarchical-cache")
          ->type_name("SIZE");
  o->ratio_opt = sub->add_option("--hicache-ratio", o->hicache_ratio,
                                 "Host cache as a multiple of the GPU pool (SGLang's default 2). "
                                 "Only with --enable-hierarchical-cache")
                     ->type_name("RATIO");
  o->size_opt->excludes(o->ratio_opt);
  sub->add_option("--host-memory", o->host_memory,
                  "Available host RAM with a unit (408GB); default: this machine's when the GPUs "
                  "are read here")
      ->type_name("SIZE");
  o->context_opt = sub->add_option("--context-len,--context-length,--max-model-len", o->context_len,
                                   "Server context length (default: the model's)")
                       ->type_name("TOKENS");
  o->prompt_opt =
      sub->add_option("--avg-prompt", o->avg_prompt, "Average prompt tokens per request")
          ->type_name("TOKENS");
  o->output_opt =
      sub->add_option("--avg-output", o->avg_output, "Average output tokens per request")
          ->type_name("TOKENS");
  o->engine_opt =
      sub->add_option("--engine", o->engine, "sglang (default) or vllm (--gpu-memory-utilization)")
      ->check(CLI::IsMember({"sglang", "vllm"}))
      ->type_name("ENGINE");
  sub->add_option("--weights", o->weights,
                  "Checkpoint bytes with a unit (600GB), or a model.safetensors.index.json")
      ->type_name("SIZE");
  sub->add_option(
         "--from-log", o->from_log,
         "An SGLang server log: calibrate M0, weights and runtime reserve from its start-up")
      ->type_name("PATH");
  sub->add_option("launch", o->launch,
                  "After --: the server's launch command (python -m sglang.launch_server ..., "
                  "vllm serve MODEL ...); its --model-path, --tp-size, --mem-fraction-static, "
                  "--kv-cache-dtype, --context-length, --enable-hierarchical-cache, "
                  "--hicache-size/--hicache-ratio (vLLM: --tensor-parallel-size, "
                  "--gpu-memory-utilization, --max-model-len) are planned, gpureap's own flags "
                  "winning")
      ->type_name("CMD");
  sub->callback([&run, &global, o] { run = [&global, o] { return run_plan(global, *o); }; });
}

}  // namespace gpureap::cli
