// `gpureap run --replace KEY -- CMD` and a safe `--free-first` (issue 37): the seed's
// restart on a node that also serves a live vLLM TP-2 on GPUs 6-7, whose workers and
// launcher must survive everything that is not a confirmed plan to stop it whole.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "harness.h"

namespace gpureap::e2e {
namespace replace_test {

struct Scene {
  HoldResult sglang;  // orphaned: its launcher was SIGKILLed; workers on GPUs 0-3
  HoldResult vllm;    // live: launcher and 2 workers on GPUs 6-7
};

Scene seed_scene(SimNode& node, const std::vector<std::string>& sglang_extra = {}) {
  std::vector<std::string> sglang = {"--gpu", "0", "--children", "4", "--bytes", "8GiB",
                                     "--orphan", "--listen", "--title", "sglang::scheduler_TP{k}",
                                     "--server-title",
                                     "python3 -m sglang.launch_server --model-path "
                                     "moonshotai/Kimi-K2.5 --tp 4 --port 30000"};
  sglang.insert(sglang.end(), sglang_extra.begin(), sglang_extra.end());
  Scene s;
  s.sglang = node.hold(sglang);
  s.vllm = node.hold({"--gpu", "6", "--children", "2", "--bytes", "8GiB", "--title",
                      "VLLM::Worker_TP{k}", "--server-title",
                      "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --port 8001"});
  EXPECT_EQ(s.sglang.holders.size(), 4u);
  EXPECT_EQ(s.vllm.holders.size(), 2u);
  return s;
}

void expect_whole(const HoldResult& server, const std::string& why) {
  EXPECT_TRUE(alive(server.leader)) << "launcher " << server.leader << ": " << why;
  for (const auto& [pid, gpu] : server.holders)
    EXPECT_TRUE(alive(pid)) << "worker " << pid << " on GPU " << gpu << ": " << why;
}

void expect_gone(const HoldResult& server) {
  for (const auto& [pid, gpu] : server.holders)
    EXPECT_TRUE(SimNode::eventually([pid] { return !alive(pid); })) << "worker " << pid;
}

TEST(Replace, FreesThatInstanceVerifiesAndLaunchesInThreeLines) {
  SimNode node;
  Scene s = seed_scene(node);
  const std::string key = std::to_string(s.sglang.leader);
  // status says why the instance is orphaned once, under the instance, not per GPU.
  auto status = node.gpureap({"--no-agent", "status"});
  const std::string why = "its title names a worker of a server that is gone";
  const auto first = status.out.find(why);
  ASSERT_NE(first, std::string::npos) << status.out;
  EXPECT_EQ(status.out.find(why, first + 1), std::string::npos) << status.out;
  EXPECT_LT(status.out.find("Instances:"), first) << status.out;

  const std::string marker = node.dir() + "/launched";
  auto r = node.gpureap({"run", "--replace", key, "--yes", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << r.err;
  EXPECT_TRUE(r.out.empty()) << "stdout is CMD's: " << r.out;
  expect_gone(s.sglang);
  expect_whole(s.vllm, "not in --replace's instance");
  // freed / verified / launched, nothing else.
  EXPECT_NE(r.err.find("gpureap run: freed sglang server " + key + " (4 processes, 32.0 GiB on "
                       "GPU 0,1,2,3) in "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("gpureap run: verified: GPU 0,1,2,3 back at baseline; port " +
                       std::to_string(s.sglang.listen_port) + " closed"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("gpureap run: launched /bin/touch /"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 3) << r.err;
}

// An orphan known by its title alone is *inferred* evidence, which
// proc::unattended_may_act refuses: without a terminal and without --yes, nothing.
TEST(Replace, WithoutATerminalOrYesAnInferredOrphanIsRefusedAndNothingSignalled) {
  SimNode node;
  Scene s = seed_scene(node);
  const std::string marker = node.dir() + "/launched";
  auto r = node.gpureap(
      {"run", "--replace", std::to_string(s.sglang.leader), "--", "/bin/touch", marker});
  // 75 (EX_TEMPFAIL): refused for now, not the usage error a unit's
  // RestartPreventExitStatus=2 treats as final (W4-03).
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_NE(r.err.find("No terminal to ask on: pass --yes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was signalled"), std::string::npos) << r.err;
  // The refusal names its plan by a command that shows it (ux-wave5-review #12), and that
  // command, pasted, plans exactly the instance's workers.
  const std::string key = std::to_string(s.sglang.leader);
  const std::string shown = "gpureap free --instance " + key + " --dry-run";
  EXPECT_NE(r.err.find("(the plan: `" + shown + "`)"), std::string::npos) << r.err;
  // Each process by its command line, not the kernel's 15-character cut.
  EXPECT_NE(r.err.find("(sglang::scheduler_TP"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(sglang::schedul)"), std::string::npos) << r.err;
  auto plan = node.gpureap({"--no-agent", "free", "--instance", key, "--dry-run"});
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  const auto planned = [&plan](pid_t pid) {
    return std::regex_search(plan.out, std::regex("\\b" + std::to_string(pid) + "\\b"));
  };
  for (const auto& [pid, gpu] : s.sglang.holders) EXPECT_TRUE(planned(pid)) << pid << plan.out;
  for (const auto& [pid, gpu] : s.vllm.holders) EXPECT_FALSE(planned(pid)) << pid << plan.out;
  expect_whole(s.vllm, "untouched");
  for (const auto& [pid, gpu] : s.sglang.holders) EXPECT_TRUE(alive(pid)) << pid;
}

TEST(Replace, AnUnknownKeyStartsNothing) {
  SimNode node;
  const std::string marker = node.dir() + "/launched";
  auto r = node.gpureap({"run", "--replace", "999999", "--yes", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_NE(r.err.find("--replace 999999: no such instance"), std::string::npos) << r.err;
  auto both = node.gpureap({"run", "--replace", "1", "--free-first", "--gpu", "0", "--", "true"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

TEST(Replace, FreeFirstWithoutATerminalOrYesLeavesTheLiveServerWhole) {
  SimNode node;
  Scene s = seed_scene(node);
  const std::string marker = node.dir() + "/launched";
  auto r = node.gpureap({"run", "--gpu", "all", "--free-first", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_NE(r.err.find("nothing was signalled"), std::string::npos) << r.err;
  expect_whole(s.vllm, "--free-first may not signal a live server unconfirmed");
}

TEST(Replace, FreeFirstConfirmedStopsALiveServerWholeOrNotAtAll) {
  SimNode node;
  Scene s = seed_scene(node);
  const std::string marker = node.dir() + "/launched";
  // GPU 6 alone would leave its TP1 worker on GPU 7 (and the launcher) without TP0.
  auto part = node.gpureap({"run", "--gpu", "6", "--free-first", "--yes", "--", "/bin/touch",
                            marker});
  EXPECT_EQ(part.exit_code, 2) << part.err;
  EXPECT_NE(part.err.find("freed whole or not at all"), std::string::npos) << part.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  expect_whole(s.vllm, "a partial plan signals nothing");
  // Both of its GPUs, confirmed: the workers and the launcher, never the launcher alone.
  auto whole = node.gpureap({"run", "--gpu", "6,7", "--free-first", "--yes", "--", "/bin/touch",
                             marker});
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_TRUE(std::filesystem::exists(marker));
  expect_gone(s.vllm);
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(s.vllm.leader); }))
      << "the launcher of the workers it stopped: " << whole.err;
  for (const auto& [pid, gpu] : s.sglang.holders) EXPECT_TRUE(alive(pid)) << pid;
}

// Issue 53 #6: `--json run --replace` leaves one JSON document on stderr, nothing before
// it, and the document records what was freed; a refusal is one document too.
TEST(Replace, JsonRunLeavesOneDocumentThatRecordsWhatWasFreed) {
  SimNode node;
  Scene s = seed_scene(node);
  const std::string key = std::to_string(s.sglang.leader);
  const std::string marker = node.dir() + "/launched";
  auto refused = node.gpureap({"--json", "run", "--replace", key, "--", "/bin/touch", marker});
  EXPECT_EQ(refused.exit_code, 75) << refused.err;
  nlohmann::json no;
  ASSERT_NO_THROW(no = nlohmann::json::parse(refused.err)) << refused.err;
  EXPECT_EQ(no.at("started"), false) << refused.err;
  EXPECT_EQ(no.at("exit_code"), 75) << refused.err;
  EXPECT_TRUE(no.at("replace").at("freed").is_null()) << refused.err;
  EXPECT_NE(no.at("replace").at("messages").dump().find("No terminal to ask on"),
            std::string::npos)
      << refused.err;

  auto r = node.gpureap({"--json", "run", "--replace", key, "--yes", "--", "/bin/touch", marker});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(r.err)) << "one document, nothing else: " << r.err;
  EXPECT_EQ(doc.at("started"), true);
  EXPECT_FALSE(doc.at("cmd").at("pid").is_null()) << r.err;
  const auto& replaced = doc.at("replace");
  EXPECT_EQ(replaced.at("flag"), "--replace " + key);
  EXPECT_EQ(replaced.at("verified_gpus"), nlohmann::json::array({0, 1, 2, 3})) << r.err;
  EXPECT_EQ(replaced.at("ports_closed"), nlohmann::json::array({s.sglang.listen_port})) << r.err;
  const auto& freed = replaced.at("freed");
  ASSERT_TRUE(freed.is_object()) << r.err;
  std::set<int> signalled;
  for (const auto& a : freed.at("actions")) signalled.insert(a.at("pid").get<int>());
  for (const auto& [pid, gpu] : s.sglang.holders)
    EXPECT_TRUE(signalled.contains(pid)) << "worker " << pid << " on GPU " << gpu << ": " << r.err;
  for (const auto& g : freed.at("gpus")) EXPECT_EQ(g.at("freed"), true) << g.dump();
  expect_gone(s.sglang);
  expect_whole(s.vllm, "not in --replace's instance");
}

// A 6 s release is waited out through the release model (issue 35), not refused as
// driver-held.
TEST(Replace, ASlowReleaseIsWaitedOutNotRefused) {
  SimNode node;
  Scene s = seed_scene(node, {"--release-delay", "6s"});
  const std::string marker = node.dir() + "/launched";
  auto r = node.gpureap({"run", "--replace", std::to_string(s.sglang.leader), "--yes",
                         "--timeout", "30s", "--", "/bin/touch", marker},
                        std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << r.err;
  EXPECT_NE(r.err.find("verified: GPU 0,1,2,3 back at baseline"), std::string::npos) << r.err;
  expect_whole(s.vllm, "not in --replace's instance");
}

// Issue 37's goal: the seed restart, read at 80 columns, is at most 40 lines. The seed:
// an SGLang TP-8 server on 8 GPUs (92 GiB each) whose launcher was SIGKILLed, its
// workers orphaned and still listening on its port. The transcript: `gpureap status`,
// then `gpureap run --replace KEY --yes -- CMD`. No line is wider than the terminal.
TEST(Replace, TheSeedRestartReadsInFortyLinesAtEightyColumns) {
  SimNode node;
  HoldResult seed = node.hold(
      {"--gpu", "0", "--children", "8", "--bytes", "92GiB", "--orphan", "--listen", "--title",
       "sglang::scheduler_TP{k}", "--server-title",
       "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 "
       "--mem-fraction-static 0.85 --port 30000 --trust-remote-code"});
  ASSERT_EQ(seed.holders.size(), 8u);
  const std::map<std::string, std::string> at80 = {{"COLUMNS", "80"}};
  auto status = node.gpureap({"--no-agent", "status"}, std::chrono::seconds(60), at80);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  // Who, why and what now, each said once (read with the lines' breaks undone).
  std::string text;
  for (std::size_t i = 0; i < status.out.size(); ++i) {
    if (status.out[i] != '\n') {
      text += status.out[i];
      continue;
    }
    text += ' ';
    while (i + 1 < status.out.size() && status.out[i + 1] == ' ') ++i;
  }
  const std::string key = std::to_string(seed.leader);
  EXPECT_NE(text.find("gpureap free --orphans --instance " + key), std::string::npos)
      << status.out;
  EXPECT_NE(text.find("gpureap run --replace " + key + " -- CMD"), std::string::npos)
      << status.out;
  EXPECT_NE(text.find("scheduler TP7"), std::string::npos) << status.out;
  EXPECT_NE(text.find("still listening on port " + std::to_string(seed.listen_port)),
            std::string::npos)
      << status.out;
  const std::string why = "its title names a worker of a server that is gone";
  ASSERT_NE(text.find(why), std::string::npos) << status.out;
  EXPECT_EQ(text.find(why, text.find(why) + 1), std::string::npos) << status.out;

  // -v keeps every GPU's block (its UUID) and every holder's row.
  auto verbose = node.gpureap({"--no-agent", "status", "-v"}, std::chrono::seconds(60), at80);
  EXPECT_EQ(verbose.exit_code, 0) << verbose.err;
  for (unsigned gpu = 0; gpu < 8; ++gpu)
    EXPECT_NE(verbose.out.find("sglang::scheduler_TP" + std::to_string(gpu)), std::string::npos)
        << verbose.out;
  EXPECT_NE(verbose.out.find("GPU-"), std::string::npos) << verbose.out;
  EXPECT_EQ(status.out.find("GPU-"), std::string::npos) << "the UUIDs are -v's: " << status.out;

  const std::string marker = node.dir() + "/launched";
  auto run = node.gpureap(
      {"run", "--replace", key, "--yes", "--", "/bin/touch", marker}, std::chrono::seconds(60),
      at80);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(std::filesystem::exists(marker));

  const std::string transcript = "$ gpureap status\n" + status.out + "$ gpureap run --replace " +
                                 key + " --yes -- /bin/touch ...\n" + run.out + run.err;
  std::size_t lines = 0, widest = 0, start = 0;
  for (std::size_t nl; (nl = transcript.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++lines;
    // Code points (no colour: not a terminal, and NO_COLOR is not needed for a pipe).
    const auto line = transcript.substr(start, nl - start);
    widest = std::max(widest, static_cast<std::size_t>(std::count_if(
                                  line.begin(), line.end(), [](char c) { return (c & 0xC0) != 0x80; })));
  }
  EXPECT_LE(lines, 40u) << transcript;
  EXPECT_LE(widest, 80u) << transcript;
  std::cerr << "the seed restart at 80 columns: " << lines << " lines, widest " << widest << "\n";
}

}  // namespace replace_test
}  // namespace gpureap::e2e
