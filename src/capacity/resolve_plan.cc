#include "capacity/resolve_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "capacity/host_cache_flags.h"
#include "capacity/host_memory.h"
#include "capacity/launch_command.h"
#include "capacity/model_source.h"
#include "capacity/plan_args.h"
#include "util/units.h"

namespace gpureap::capacity {
namespace {

template <typename T>
using Step = std::expected<T, PlanError>;

std::unexpected<PlanError> usage(std::string message) {
  return std::unexpected(PlanError{std::move(message)});
}

// Given on gpureap's command line, or by the launch command after --.
bool given(bool on_command_line, const std::string& value) {
  return on_command_line || !value.empty();
}

// `plan -- CMD`: what the launch command says (capacity/launch_command.h), where
// gpureap's own flags say nothing. Sets `model_from_launch`.
Step<PlanArgs> with_launch(PlanArgs o, bool& model_from_launch) {
  model_from_launch = false;
  if (o.launch.empty()) return o;
  auto f = read_launch_command(o.launch);
  if (!f) return usage(f.error().message);
  auto fill = [](std::string& into, const std::string& from) {
    if (into.empty()) into = from;
  };
  model_from_launch = o.model.empty() && !f->model.empty();
  fill(o.model, f->model);
  fill(o.tp, f->tp);
  fill(o.mem_fraction, f->mem_fraction);
  fill(o.kv_dtype, f->kv_dtype);
  fill(o.context_len, f->context_len);
  // gpureap's --hicache-ratio wins over the command's --hicache-size (which would
  // override it), and its --hicache-size over the command's ratio.
  if (!o.given.hicache_ratio) fill(o.hicache_size, f->hicache_size);
  if (!o.given.hicache_size) fill(o.hicache_ratio, f->hicache_ratio);
  fill(o.hicache_host_memory_mode, f->hicache_host_memory_mode);
  o.hierarchical_cache = o.hierarchical_cache || f->hierarchical_cache;
  o.host_offload = f->host_offload;
  if (!o.given.engine) o.engine = f->engine;
  return o;
}

// What the flags say of the engine: vLLM takes neither a log nor SGLang's host cache.
Step<void> read_engine(const PlanArgs& o, LaunchPlan& r) {
  if (o.engine != "vllm") return {};
  r.input.engine = Engine::vllm;
  if (!o.from_log.empty())
    return usage("--from-log reads SGLang logs; it cannot calibrate --engine vllm");
  if (o.hierarchical_cache || !o.hicache_size.empty() ||
      given(o.given.hicache_ratio, o.hicache_ratio))
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
  return {};
}

// What plan's flags say (the engine, the dtype, the host cache, sizes and counts), into
// `r`'s input; the values the later steps weigh against the log and the model.
struct FlagValues {
  std::optional<std::uint64_t> card;    // --gpu-memory
  std::optional<std::int64_t> context;  // --context-len
  std::optional<int> tp;                // --tp
};

Step<void> read_host_cache(const PlanArgs& o, LaunchPlan& r) {
  PlanInput& in = r.input;
  if (given(o.given.kv_dtype, o.kv_dtype)) {
    auto dtype = parse_kv_dtype(o.kv_dtype);
    if (!dtype) return usage(dtype.error().message);
    in.dtype = *dtype;
  }
  if (in.engine == Engine::sglang) {
    // SGLang builds the host cache only with its switch on (capacity/host_cache_flags.h).
    auto hicache = decide_host_cache({.enabled = o.hierarchical_cache,
                                      .size = o.hicache_size,
                                      .ratio = o.hicache_ratio,
                                      .host_memory_mode = o.hicache_host_memory_mode});
    if (!hicache) return usage(hicache.error().message);
    in.host_cache = hicache->request;
    r.hicache_text = hicache->text;
    r.notes.insert(r.notes.end(), hicache->notes.begin(), hicache->notes.end());
  }
  if (!o.host_memory.empty()) {
    auto size = parse_size_flag("--host-memory", o.host_memory);
    if (!size) return usage(size.error().message);
    in.host_memory = *size;
  }
  return {};
}

Step<FlagValues> read_flags(const PlanArgs& o, LaunchPlan& r) {
  FlagValues v;
  PlanInput& in = r.input;
  if (auto ok = read_engine(o, r); !ok) return std::unexpected(ok.error());
  r.engine_flag =
      in.engine == Engine::sglang ? "--mem-fraction-static" : "--gpu-memory-utilization";
  if (auto ok = read_host_cache(o, r); !ok) return std::unexpected(ok.error());
  if (!o.gpu_memory.empty()) {
    auto size = parse_size_flag("--gpu-memory", o.gpu_memory);
    if (!size) return usage(size.error().message);
    v.card = *size;
  }
  if (o.given.avg_prompt) {
    auto n = parse_token_count("--avg-prompt", o.avg_prompt, 0);
    if (!n) return usage(n.error().message);
    in.avg_prompt = static_cast<std::uint64_t>(*n);
  }
  if (o.given.avg_output) {
    auto n = parse_token_count("--avg-output", o.avg_output, 0);
    if (!n) return usage(n.error().message);
    in.avg_output = static_cast<std::uint64_t>(*n);
  }
  if (given(o.given.context_len, o.context_len)) {
    auto n = parse_token_count("--context-len", o.context_len, 1);
    if (!n) return usage(n.error().message);
    v.context = *n;
  }
  if (given(o.given.tp, o.tp)) {
    auto tp = parse_tensor_parallel(o.tp);
    if (!tp) return usage(tp.error().message);
    v.tp = *tp;
  }
  return v;
}

// The model: a preset or a config.json, with its weights. A launch command names a
// checkpoint (a Hugging Face id, a directory elsewhere): its last part may be a preset's
// name ("moonshotai/Kimi-K2.5").
Step<ResolvedModel> read_model(const PlanArgs& o, bool model_from_launch) {
  std::string model_arg = o.model;
  auto model = resolve_model(model_arg);
  if (!model && model_from_launch && model_arg.find('/') != std::string::npos)
    if (auto preset = resolve_model(model_arg.substr(model_arg.rfind('/') + 1))) {
      model_arg = model_arg.substr(model_arg.rfind('/') + 1);
      model = std::move(preset);
    }
  if (!model) return usage(model.error().message);
  if (auto ok = resolve_weights(*model, model_arg, o.weights, /*required=*/o.from_log.empty()); !ok)
    return usage(ok.error().message);
  return std::move(model).value();
}

// --from-log: the calibration of the log's last start-up; its dtype and context length
// where the flags say nothing. nullopt without --from-log.
Step<std::optional<Calibration>> calibration_from_log(const PlanArgs& o, PlanInput& in,
                                                      const FlagValues& flags) {
  if (o.from_log.empty()) return std::nullopt;
  auto log = read_sglang_log(o.from_log, "--from-log");
  if (!log) return usage(log.error().message);
  auto c = calibrate(*log, in.kv, in.context_len, o.from_log);
  if (!c) return usage(fmt::format("--from-log {}", c.error().message));
  if (c->tp && flags.tp && *c->tp != *flags.tp)
    return usage(
        fmt::format("--tp {} differs from the log's tp_size {}: a calibration holds for "
                    "the layout that wrote the log",
                    *flags.tp, *c->tp));
  // The log's dtype is what it measured; the flag is what to predict.
  if (!given(o.given.kv_dtype, o.kv_dtype)) in.dtype = c->kv_dtype;
  if (!flags.context && c->context_len) in.context_len = *c->context_len;
  return std::optional<Calibration>(std::move(c).value());
}

// Where the GPU's figures came from, and the budget itself.
struct Measured {
  GpuBudget gpu;
  std::string m0_origin;       // one line: where M0 came from
  std::string reserve_origin;  // one line: where the runtime reserve came from
  bool here = false;           // measured on this machine (NVML): its host RAM applies
};

Measured from_log(const Calibration& c, std::optional<std::uint64_t> card, const std::string& log) {
  Measured m;
  m.gpu.free_before_load = c.free_before_load;
  m.gpu.total = card;
  m.gpu.weights_per_rank = c.weights_per_rank;
  m.gpu.runtime_reserve = c.runtime_reserve.value_or(kDefaultRuntimeReserve);
  m.gpu.source = fmt::format("--from-log {}", log);
  m.m0_origin = fmt::format("measured: {}", c.notes.front());
  m.reserve_origin = c.runtime_reserve ? "measured from the log" : "assumed (not in the log)";
  return m;
}

Measured from_card(std::uint64_t card, int tp, std::uint64_t weights, const std::string& text) {
  Measured m;
  m.gpu = assumed_budget(card, tp, weights, fmt::format("--gpu-memory {}", text));
  m.m0_origin = fmt::format(
      "--gpu-memory - {} assumed for the driver reservation, CUDA "
      "context{}",
      format_bytes(pre_load_overhead(tp)), tp > 1 ? " and NCCL" : "");
  m.reserve_origin = "assumed (calibrate with --from-log)";
  return m;
}

// The GPU as this machine's NVML reads it: SGLang sizes every rank's pool from the
// tightest GPU, and the launch uses the first tp GPUs (CUDA_VISIBLE_DEVICES order aside).
Step<Measured> from_machine(const MachineReading& machine, int tp, std::uint64_t weights,
                            std::vector<std::string>& notes) {
  const auto& usable = machine.gpus;
  if (usable.empty()) {
    return std::unexpected(PlanError{
        fmt::format("no GPU could be measured through NVML{}; pass --gpu-memory (or --from-log)",
                    machine.problem.empty() ? "" : fmt::format(" ({})", machine.problem)),
        true});
  }
  std::vector<std::size_t> in_use;
  const std::size_t ranks = std::min<std::size_t>(usable.size(), static_cast<std::size_t>(tp));
  std::uint64_t total = usable[0].total;
  std::string smallest = usable[0].id;
  for (std::size_t i = 0; i < ranks; ++i) {
    const MeasuredGpu& g = usable[i];
    if (g.total < total) {
      total = g.total;
      smallest = g.id;
    }
    // Memory in use now belongs to the server being replaced, or to something
    // that will still hold it at launch: say which the plan assumes.
    if (g.used <= kGiB) continue;
    for (std::size_t in : g.instances)
      if (std::find(in_use.begin(), in_use.end(), in) == in_use.end()) in_use.push_back(in);
    if (g.instances.empty())
      notes.push_back(fmt::format(
          "GPU {} has {} in use now; the plan assumes it is freed before the launch (gpureap "
          "status --gpu {} says by whom)",
          g.id, format_bytes(g.used), g.id));
  }
  for (std::size_t in : in_use) notes.push_back(machine.instance_notes.at(in));
  if (usable.size() < static_cast<std::size_t>(tp))
    notes.push_back(fmt::format("only {} GPU(s) here; --tp {} is planned on GPUs like these",
                                usable.size(), tp));
  Measured m;
  m.gpu = assumed_budget(total, tp, weights, fmt::format("GPU {} via NVML", smallest));
  m.m0_origin = fmt::format(
      "GPU {}'s {} (NVML) - {} assumed for the driver reservation, CUDA "
      "context{}",
      smallest, format_bytes(total), format_bytes(pre_load_overhead(tp)),
      tp > 1 ? " and NCCL" : "");
  m.reserve_origin = "assumed (calibrate with --from-log)";
  m.here = true;
  return m;
}

// 4. Every fraction planned: --mem-fraction's (one, or a sweep), else the log's.
Step<void> plan_fractions(const PlanArgs& o, LaunchPlan& r) {
  std::string fraction_text = o.mem_fraction;
  if (fraction_text.empty()) {
    if (!r.calibration)
      return usage(fmt::format(
          "--mem-fraction is required (the {} to plan, or a sweep FROM:TO:STEP)", r.engine_flag));
    fraction_text = fmt::format("{}", r.calibration->mem_fraction);
  }
  auto fractions = parse_mem_fraction(fraction_text);
  if (!fractions) return usage(fractions.error().message);
  r.sweep = fractions->size() > 1;
  for (double f : *fractions) r.points.push_back(plan_point(r.input, f));
  if (!r.sweep && r.points.front().kv_tokens == 0)
    return usage(r.points.front().warnings.front().message);
  return {};
}

}  // namespace

std::expected<LaunchPlan, PlanError> resolve_plan(
    PlanArgs flags, const std::function<MachineReading()>& read_machine) {
  bool model_from_launch = false;
  auto merged = with_launch(std::move(flags), model_from_launch);
  if (!merged) return std::unexpected(merged.error());
  const PlanArgs& o = *merged;
  LaunchPlan r;
  if (o.model.empty())
    return usage(
        "--model is required: a preset, a config.json, or a launch command after -- "
        "that names its model (--model-path, vllm serve MODEL)");
  PlanInput& in = r.input;

  // 1. Flags.
  auto values = read_flags(o, r);
  if (!values) return std::unexpected(values.error());
  std::optional<std::uint64_t> card = values->card;

  // 2. The model.
  auto model = read_model(o, model_from_launch);
  if (!model) return std::unexpected(model.error());
  in.model_name = model->spec.name;
  in.kv = model->spec.kv;
  in.context_len = values->context.value_or(model->spec.context_len);
  r.notes.insert(r.notes.end(), model->notes.begin(), model->notes.end());

  // 3. The GPU: a start-up log, else --gpu-memory, else NVML.
  auto calibrated = calibration_from_log(o, in, *values);
  if (!calibrated) return std::unexpected(calibrated.error());
  r.calibration = std::move(*calibrated);
  in.tp = values->tp ? *values->tp : r.calibration && r.calibration->tp ? *r.calibration->tp : 1;
  if (auto ok = check_tensor_parallel(model->spec, in.tp); !ok) return usage(ok.error().message);

  Measured measured;
  std::optional<MachineReading> machine;
  if (r.calibration) {
    measured = from_log(*r.calibration, card, o.from_log);
    r.weights_origin = "measured: M0 - 'Load weight end' avail mem";
    r.warnings = r.calibration->warnings;
    r.log_path = o.from_log;
  } else {
    const std::uint64_t weights = model->spec.weights->per_rank(in.tp);
    r.weights_origin = model->spec.weights_origin;
    if (card) {
      measured = from_card(*card, in.tp, weights, o.gpu_memory);
    } else {
      machine = read_machine();
      auto m = from_machine(*machine, in.tp, weights, r.notes);
      if (!m) return std::unexpected(m.error());
      measured = std::move(*m);
      card = measured.gpu.total;
    }
  }
  in.gpu = measured.gpu;
  r.m0_origin = measured.m0_origin;
  r.reserve_origin = measured.reserve_origin;
  r.card_total = card;
  if (in.engine == Engine::vllm && !in.gpu.total)
    return usage("--engine vllm sizes its pool from the card's total memory: pass --gpu-memory");

  // Host RAM: the flag, else this machine's when the GPUs are this machine's.
  if (!in.host_memory && measured.here && (in.host_cache.size_per_rank || in.host_cache.ratio)) {
    in.host_memory = parse_mem_available(machine->meminfo);
    if (in.host_memory) r.notes.push_back("host RAM available: MemAvailable of this machine");
  }
  if (in.dtype == KvDtype::fp8_e4m3 && in.kv.attention == Attention::mla)
    r.notes.push_back("fp8_e4m3 KV needs an MLA attention backend that supports it on this GPU");

  if (auto ok = check_plan_input(in); !ok) return usage(ok.error().message);

  // 4. Plan every fraction.
  if (auto ok = plan_fractions(o, r); !ok) return std::unexpected(ok.error());
  return r;
}

}  // namespace gpureap::capacity
