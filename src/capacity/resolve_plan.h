#pragma once
// `gpureap plan`'s inputs resolved into a plan (issue 36: the command is a thin face):
//
//   the launch command after -- (where plan's own flags say nothing)
//     -> the flags parsed and checked (engine, dtype, host cache, sizes, counts)
//     -> the model (a preset, a config.json; its weights)
//     -> the GPU: a start-up log (--from-log), else --gpu-memory, else this machine's
//        GPUs as NVML reads them (asked for only then)
//     -> every fraction planned (--mem-fraction, a sweep, or the log's).
//
// Pure but for the files it names (a config.json, a log, an index of weights): the
// machine is read by the caller (cli/plan_command.cc), and report/plan_report.h lays
// the plan out.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capacity/kv_planner.h"
#include "capacity/sglang_log.h"

namespace gpureap::capacity {

/// plan's flags as typed: values stay text until resolved, since a launch command
/// after -- fills the ones not given, in the engine's own spelling.
struct PlanArgs {
  std::string model;
  std::string gpu_memory;
  std::string tp;  // empty: not given (the log's, else 1)
  std::string mem_fraction;
  std::string kv_dtype;
  std::string hicache_size;
  std::string hicache_ratio;
  std::string hicache_host_memory_mode;   // from a launch command only
  bool hierarchical_cache = false;        // --enable-hierarchical-cache
  std::vector<std::string> host_offload;  // a vLLM launch's host-offload flags, as typed
  std::string host_memory;
  std::string context_len;
  std::string avg_prompt;
  std::string avg_output;
  std::string engine = "sglang";
  std::string weights;
  std::string from_log;
  std::vector<std::string> launch;  // `plan -- CMD...`: the server's launch command
  /// Which flags were on gpureap's command line (given, even empty, they win over the
  /// launch command's).
  struct Given {
    bool tp = false;
    bool hicache_ratio = false;
    bool hicache_size = false;
    bool context_len = false;
    bool avg_prompt = false;
    bool avg_output = false;
    bool kv_dtype = false;
    bool engine = false;
  } given;
};

/// Everything `plan` shows: the planner's input, one point per fraction, and where each
/// measured or assumed figure came from (one line each).
struct LaunchPlan {
  PlanInput input;
  std::string engine_flag;  // --mem-fraction-static or --gpu-memory-utilization
  std::string weights_origin;
  std::string m0_origin;
  std::string reserve_origin;
  std::optional<std::uint64_t> card_total;
  std::optional<Calibration> calibration;
  std::string log_path;      // --from-log, when calibrated
  std::string hicache_text;  // the flag as typed, for the heading
  std::vector<std::string> notes;
  std::vector<Warning> warnings;  // not tied to a fraction
  std::vector<PlanPoint> points;  // at least one
  bool sweep = false;             // several fractions: a table, one row each
};

/// One GPU of this machine whose memory NVML read.
struct MeasuredGpu {
  std::string id;  // as users select it ("3")
  std::uint64_t total = 0;
  std::uint64_t used = 0;
  /// The server instances holding memory on it: indexes into MachineReading::instance_notes.
  std::vector<std::size_t> instances;
};

/// This machine as a plan given neither --from-log nor --gpu-memory reads it.
struct MachineReading {
  std::vector<MeasuredGpu> gpus;  // those with a total, in order
  std::string problem;            // why NVML read none ("" when it gave no reason)
  /// Per server instance holding a GPU: the note naming it and the command that frees it.
  std::vector<std::string> instance_notes;
  std::string meminfo;  // this machine's /proc/meminfo, for host RAM
};

/// Why no plan: the message, and whether the GPU could not be measured (exit 3) rather
/// than a command line to fix (exit 2).
struct PlanError {
  std::string message;
  bool system = false;
};

/// The plan `args` describe; `read_machine` is called at most once, only when the GPU
/// must be measured here.
std::expected<LaunchPlan, PlanError> resolve_plan(
    PlanArgs args, const std::function<MachineReading()>& read_machine);

}  // namespace gpureap::capacity
