#include "capacity/launch_command.h"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <utility>

namespace gpureap::capacity {
namespace {

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The engine a command starts, and where its own arguments begin; "" when neither.
std::pair<std::string, std::size_t> engine_of(const std::vector<std::string>& argv) {
  std::size_t i = 0;
  // `env A=B`, `A=B` (a shell's prefix), as typed before the program.
  while (i < argv.size() &&
         (base_name(argv[i]) == "env" ||
          (argv[i].find('=') != std::string::npos && !argv[i].starts_with("-"))))
    ++i;
  for (; i < argv.size(); ++i) {
    const std::string_view word = argv[i];
    const std::string_view base = base_name(word);
    if (base == "vllm" && i + 1 < argv.size() && argv[i + 1] == "serve") return {"vllm", i + 2};
    if (base == "sglang" && i + 1 < argv.size() && argv[i + 1] == "serve") return {"sglang", i + 2};
    if (word == "-m" && i + 1 < argv.size()) {
      const std::string_view module = argv[i + 1];
      if (module.starts_with("sglang.launch_server")) return {"sglang", i + 2};
      if (module.starts_with("vllm.entrypoints")) return {"vllm", i + 2};
      return {"", 0};
    }
    // An interpreter and its own options come first (python3 -u -m ...); the script
    // or program that is not one of these ends the search.
    if (!(base.starts_with("python") || word.starts_with("-"))) return {"", 0};
  }
  return {"", 0};
}

}  // namespace

Result<LaunchFlags> read_launch_command(const std::vector<std::string>& argv) {
  if (argv.empty())
    return fail("plan --: no launch command after --");
  auto [engine, start] = engine_of(argv);
  if (engine.empty())
    return fail(fmt::format(
        "plan -- {}: not an SGLang or vLLM server launch (python -m sglang.launch_server ..., "
        "sglang serve ..., vllm serve MODEL ...)",
        argv.front()));
  LaunchFlags f;
  f.engine = engine;
  // Each engine's own names for the plan's inputs.
  const bool vllm = engine == "vllm";
  std::string offload_size, offload_backend, cpu_offload, swap_space;
  const std::array<std::pair<std::string_view, std::string*>, 17> names = {{
      {"--model-path", &f.model},
      {"--model", &f.model},
      {"--tp-size", &f.tp},
      {"--tp", &f.tp},
      {"--tensor-parallel-size", &f.tp},
      {"-tp", &f.tp},
      {vllm ? "--gpu-memory-utilization" : "--mem-fraction-static", &f.mem_fraction},
      {"--kv-cache-dtype", &f.kv_dtype},
      {vllm ? "--max-model-len" : "--context-length", &f.context_len},
      {"--hicache-size", &f.hicache_size},
      {"--hicache-ratio", &f.hicache_ratio},
      {"--hicache-host-memory-mode", &f.hicache_host_memory_mode},
      // vLLM: the KV cache offloaded to CPU memory (CacheConfig.kv_offloading_size, GiB),
      // weights offloaded (--cpu-offload-gb), the older swap space.
      {"--kv-offloading-size", vllm ? &offload_size : nullptr},
      {"--kv-offloading-backend", vllm ? &offload_backend : nullptr},
      {"--cpu-offload-gb", vllm ? &cpu_offload : nullptr},
      {"--served-model-name", nullptr},  // a name, not the checkpoint
      {"--swap-space", vllm ? &swap_space : nullptr},
  }};
  for (std::size_t i = start; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (!word.starts_with("-")) {
      // `vllm serve MODEL`: its first positional word is the model.
      if (vllm && f.model.empty() && i == start) f.model = word;
      continue;
    }
    const auto eq = word.find('=');
    const std::string_view name = std::string_view(word).substr(0, eq);
    // SGLang's switch takes no value (argparse store_true).
    if (!vllm && word == "--enable-hierarchical-cache") {
      f.hierarchical_cache = true;
      continue;
    }
    for (const auto& [flag, into] : names) {
      if (name != flag) continue;
      std::string value;
      if (eq != std::string::npos)
        value = word.substr(eq + 1);
      else if (i + 1 < argv.size() && !argv[i + 1].starts_with("--"))
        value = argv[++i];
      else
        return fail(fmt::format("plan --: {} without a value", flag));
      if (into) *into = value;
      break;
    }
  }
  for (const auto& [flag, value] : {std::pair<std::string_view, const std::string&>{
                                        "--kv-offloading-size", offload_size},
                                    {"--kv-offloading-backend", offload_backend},
                                    {"--cpu-offload-gb", cpu_offload},
                                    {"--swap-space", swap_space}})
    if (!value.empty()) f.host_offload.push_back(fmt::format("{} {}", flag, value));
  return f;
}

}  // namespace gpureap::capacity
