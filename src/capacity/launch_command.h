#pragma once
// `gpureap plan -- <the launch command you use>`: what a server's own command line
// says of the plan's inputs. SGLang (`python -m sglang.launch_server`, `sglang
// serve`) and vLLM (`vllm serve MODEL`, `python -m vllm.entrypoints.openai.api_server`)
// name them with their own flags; this reads those flags, as typed, and nothing else.

#include <string>
#include <vector>

#include "util/result.h"

namespace gpureap::capacity {

/// The plan's inputs a launch command names, each as typed ("" when it does not).
struct LaunchFlags {
  std::string engine;         // "sglang" or "vllm"
  std::string model;          // --model-path / --model / `vllm serve MODEL`
  std::string tp;             // --tp-size, --tp, --tensor-parallel-size, -tp
  std::string mem_fraction;   // SGLang --mem-fraction-static, vLLM --gpu-memory-utilization
  std::string kv_dtype;       // --kv-cache-dtype
  std::string context_len;    // SGLang --context-length, vLLM --max-model-len
  std::string hicache_size;   // SGLang --hicache-size (GB per rank)
  std::string hicache_ratio;  // SGLang --hicache-ratio
  std::string hicache_host_memory_mode;  // SGLang --hicache-host-memory-mode
  bool hierarchical_cache = false;       // SGLang --enable-hierarchical-cache (a switch)
  /// vLLM's host-offload flags as typed ("--kv-offloading-size 64", "--cpu-offload-gb 8"):
  /// not planned, only named in a note.
  std::vector<std::string> host_offload;
};

/// Reads `argv` (the launch command, argv[0] first; `--flag value` and `--flag=value`
/// alike; an environment prefix `VAR=value` and `env` skipped). Fails, naming what
/// it saw, when the command is not an SGLang or vLLM server launch. Pure.
Result<LaunchFlags> read_launch_command(const std::vector<std::string>& argv);

}  // namespace gpureap::capacity
