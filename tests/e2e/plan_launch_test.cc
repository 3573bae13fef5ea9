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
