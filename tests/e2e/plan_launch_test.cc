// `gpureap plan -- <launch command>` and the engines' own flag names (issue 28 part 3):
// the same plan as gpureap's own flags give.

#include <gtest/gtest.h>

#include "harness.h"

namespace gpureap::e2e {
namespace plan_launch_test {

using nlohmann::json;

// A plan's document without its "time": two runs of the same plan differ in nothing else.
json untimed(const CommandResult& r) {
  json j = r.json();
  j.erase("time");
  return j;
}

TEST(PlanLaunch, AnSglangLaunchCommandPlansAsGpureapsOwnFlagsDo) {
  SimNode node({"--gpus", "1"});
  auto own = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--gpu-memory", "97887MiB",
                           "--tp", "8", "--mem-fraction", "0.88", "--context-len", "32768"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  auto launch = node.gpureap({"--json", "plan", "--gpu-memory", "97887MiB", "--", "python", "-m",
                              "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5",
                              "--tp-size", "8", "--mem-fraction-static", "0.85",
                              "--context-length", "32768", "--port", "30000",
                              "--mem-fraction-static=0.88"});
  ASSERT_EQ(launch.exit_code, 0) << launch.err;
  EXPECT_EQ(untimed(launch), untimed(own));
  // The engine's names as gpureap's own flags; gpureap's flag wins over the command's.
  auto aliases = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--gpu-memory",
                               "97887MiB", "--tp-size", "8", "--mem-fraction-static", "0.88",
                               "--context-length", "32768"});
  EXPECT_EQ(untimed(aliases), untimed(own)) << aliases.err;
  auto wins = node.gpureap({"--json", "plan", "--mem-fraction", "0.88", "--gpu-memory",
                            "97887MiB", "--", "python", "-m", "sglang.launch_server",
                            "--model-path", "Kimi-K2.5", "--tp", "8", "--mem-fraction-static",
                            "0.5", "--context-length", "32768"});
  EXPECT_EQ(untimed(wins), untimed(own)) << wins.err;
}

TEST(PlanLaunch, AVllmServeCommandIsPlannedAsVllm) {
  SimNode node({"--gpus", "1"});
  auto own = node.gpureap({"--json", "plan", "--engine", "vllm", "--model", "Qwen3-8B",
                           "--gpu-memory", "80GiB", "--tp", "2", "--mem-fraction", "0.9",
                           "--max-model-len", "32768", "--kv-cache-dtype", "fp8"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  auto launch = node.gpureap({"--json", "plan", "--gpu-memory", "80GiB", "--", "vllm", "serve",
                              "Qwen/Qwen3-8B", "--tensor-parallel-size", "2",
                              "--gpu-memory-utilization", "0.9", "--max-model-len", "32768",
                              "--kv-cache-dtype", "fp8"});
  ASSERT_EQ(launch.exit_code, 0) << launch.err;
  EXPECT_EQ(untimed(launch), untimed(own));
}

// The seed's relaunch flag (issue 37): the switch alone plans SGLang's default ratio 2; a
// size without the switch is ignored, as SGLang ignores it, and said so.
TEST(PlanLaunch, TheHierarchicalCacheSwitchPlansTheHostCacheAndASizeWithoutItIsIgnored) {
  SimNode node({"--gpus", "1"});
  const std::vector<std::string> launch = {
      "--json", "plan", "--gpu-memory", "97887MiB", "--", "python3", "-m",
      "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5", "--tp", "8",
      "--mem-fraction-static", "0.85"};
  auto on_args = launch;
  on_args.push_back("--enable-hierarchical-cache");
  auto on = node.gpureap(on_args);
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(on.json()["kv_tokens"], 117570);
  EXPECT_EQ(on.json()["host_cache_tokens"], 235140);
  EXPECT_EQ(on.json()["host_ram_bytes"], 132190064640ULL);
  auto text = node.gpureap(std::vector<std::string>(on_args.begin() + 1, on_args.end()));
  EXPECT_NE(text.out.find("host cache --hicache-ratio 2 (SGLang's default)"), std::string::npos)
      << text.out;

  auto off_args = launch;
  off_args.insert(off_args.end(), {"--hicache-size", "48"});
  auto off = node.gpureap(off_args);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(off.json()["host_cache_tokens"].is_null()) << off.out;
  ASSERT_EQ(off.json()["notes"].size(), 1u) << off.out;
  EXPECT_EQ(off.json()["notes"][0],
            "--hicache-size 48 is ignored: SGLang builds a host cache only with "
            "--enable-hierarchical-cache (add it to plan one)");
  // gpureap's own flags read the same way.
  auto own = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--gpu-memory", "97887MiB",
                           "--tp", "8", "--mem-fraction", "0.85", "--enable-hierarchical-cache"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.json()["host_cache_tokens"], 235140);
  // vLLM has no hierarchical cache; its own host offload is named, not planned.
  auto vllm = node.gpureap({"--json", "plan", "--gpu-memory", "80GiB", "--", "vllm", "serve",
                            "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.9",
                            "--kv-offloading-size", "64"});
  ASSERT_EQ(vllm.exit_code, 0) << vllm.err;
  EXPECT_NE(vllm.json()["notes"].dump().find(
                "vLLM's host offload (--kv-offloading-size 64) is not planned"),
            std::string::npos)
      << vllm.out;
}

TEST(PlanLaunch, ACommandThatIsNoServerLaunchIsAUsageError) {
  SimNode node({"--gpus", "1"});
  auto r = node.gpureap({"plan", "--gpu-memory", "80GiB", "--", "python3", "train.py"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not an SGLang or vLLM server launch"), std::string::npos) << r.err;
  auto none = node.gpureap({"plan", "--gpu-memory", "80GiB", "--mem-fraction", "0.9"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--model is required"), std::string::npos) << none.err;
}

}  // namespace plan_launch_test
}  // namespace gpureap::e2e
