// `gpureap plan -- <launch command>`: real SGLang and vLLM command lines.

#include "capacity/launch_command.h"

#include <gtest/gtest.h>

namespace gpureap::capacity {
namespace {

TEST(LaunchCommand, SglangLaunchServer) {
  auto f = read_launch_command({"python", "-m", "sglang.launch_server", "--model-path", "X",
                                "--tp-size", "8", "--mem-fraction-static", "0.85",
                                "--context-length", "32768", "--port", "30000"});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->engine, "sglang");
  EXPECT_EQ(f->model, "X");
  EXPECT_EQ(f->tp, "8");
  EXPECT_EQ(f->mem_fraction, "0.85");
  EXPECT_EQ(f->context_len, "32768");
  EXPECT_EQ(f->kv_dtype, "");
}

TEST(LaunchCommand, VllmServe) {
  auto f = read_launch_command({"vllm", "serve", "X", "--tensor-parallel-size", "8",
                                "--max-model-len", "32768", "--kv-cache-dtype", "fp8"});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->engine, "vllm");
  EXPECT_EQ(f->model, "X");
  EXPECT_EQ(f->tp, "8");
  EXPECT_EQ(f->context_len, "32768");
  EXPECT_EQ(f->kv_dtype, "fp8");
  EXPECT_EQ(f->mem_fraction, "");
}

TEST(LaunchCommand, TheCaseStudysCommandWithAnEnvironmentAndEqualsSigns) {
  auto f = read_launch_command({"env", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
                                "/opt/torch/.venv/bin/python3", "-u", "-m", "sglang.launch_server",
                                "--model-path=/models/Kimi-K2.5", "--tp=8", "--trust-remote-code",
                                "--mem-fraction-static=0.88", "--kv-cache-dtype", "fp8_e4m3",
                                "--enable-hierarchical-cache", "--hicache-size", "48"});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->model, "/models/Kimi-K2.5");
  EXPECT_EQ(f->tp, "8");
  EXPECT_EQ(f->mem_fraction, "0.88");
  EXPECT_EQ(f->kv_dtype, "fp8_e4m3");
  EXPECT_EQ(f->hicache_size, "48");
  EXPECT_TRUE(f->hierarchical_cache);
}

TEST(LaunchCommand, TheHierarchicalCacheSwitchTakesNoValue) {
  // The switch is followed by another flag's value-less word: it consumes nothing.
  auto f = read_launch_command({"python3", "-m", "sglang.launch_server", "--model-path", "M",
                                "--enable-hierarchical-cache", "--tp", "8"});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_TRUE(f->hierarchical_cache);
  EXPECT_EQ(f->tp, "8");
  auto off = read_launch_command({"python3", "-m", "sglang.launch_server", "--model-path", "M",
                                  "--hicache-ratio", "3", "--hicache-host-memory-mode",
                                  "buffer_only"});
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->hierarchical_cache);
  EXPECT_EQ(off->hicache_ratio, "3");
  EXPECT_EQ(off->hicache_host_memory_mode, "buffer_only");
}

TEST(LaunchCommand, VllmHostOffloadFlagsAreNamedNotPlanned) {
  auto f = read_launch_command({"vllm", "serve", "M", "--kv-offloading-size", "64",
                                "--kv-offloading-backend", "native", "--cpu-offload-gb=8"});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->host_offload,
            (std::vector<std::string>{"--kv-offloading-size 64", "--kv-offloading-backend native",
                                      "--cpu-offload-gb 8"}));
  auto none = read_launch_command({"vllm", "serve", "M"});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->host_offload.empty());
}

TEST(LaunchCommand, VllmNamesItsFractionGpuMemoryUtilizationAndSglangServeWorks) {
  auto v = read_launch_command({"python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                                "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.9", "-tp", "2"});
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->engine, "vllm");
  EXPECT_EQ(v->model, "Qwen/Qwen3-8B");
  EXPECT_EQ(v->mem_fraction, "0.9");
  EXPECT_EQ(v->tp, "2");
  auto s = read_launch_command({"sglang", "serve", "--model-path", "M", "--tp", "4"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->engine, "sglang");
  EXPECT_EQ(s->tp, "4");
  // --mem-fraction-static is SGLang's: in a vLLM command it is not vLLM's fraction.
  auto mixed = read_launch_command({"vllm", "serve", "M", "--mem-fraction-static", "0.5"});
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->mem_fraction, "");
}

TEST(LaunchCommand, OtherCommandsAndMissingValuesAreErrors) {
  auto other = read_launch_command({"python3", "train.py", "--tp-size", "8"});
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("not an SGLang or vLLM server launch"), std::string::npos);
  EXPECT_FALSE(read_launch_command({}));
  auto missing = read_launch_command({"vllm", "serve", "M", "--max-model-len"});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("--max-model-len without a value"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::capacity
