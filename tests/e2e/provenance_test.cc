// Evidence has a provenance (issue 34, docs/orphans.md): the shapes of defects-wave3
// that made the reaper kill healthy processes, end to end on the simulated node with
// real processes, real signals and the real agent. Each runs the agent with the most
// eager reaper and checks that nothing healthy is signalled, and that the agent and a
// direct scan give the same answer.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace provenance_test {

using namespace std::chrono_literals;
using nlohmann::json;



/// Runs `script` under bash with the node's environment and waits (bounded) for it to
/// end by itself; its exit status, or -1 when it had to be stopped.
int run_shell(const SimNode& node, const std::string& script) {
  WatchChild sh({"/bin/bash", "-c", script}, node.env());
  if (!SimNode::eventually([&] { return !sh.running(); }, 30s)) return -1;
  return sh.terminate();
}

bool root() { return ::geteuid() == 0; }

// W3-01(b): a job of a live shell whose environment carries a run id from elsewhere
// (sbatch from inside a `gpureap run`): its parent lives, so it is live, not "its run is
// gone"; the reaper leaves it.
TEST(Provenance, W3_01_AnInheritedRunIdNeverMakesALiveProcessAnOrphan) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  const std::string pidfile = node.dir() + "/b.pid";
  WatchChild shell({"/bin/bash", "-c",
                    "GPUREAP_RUN_ID=train-4242 python3 '" + kPyhold + "' 1 3 '" + pidfile +
                        "' & wait"},
                   node.env());
  const pid_t job = pid_in(pidfile);
  ASSERT_GT(job, 0) << shell.transcript();
  KillAtExit guard{{job}};
  auto status = node.gpureap({"--no-agent", "--json", "status", "--gpu", "1"});
  auto hs = holders_by_pid(status.json());
  ASSERT_TRUE(hs.contains(job)) << status.out;
  EXPECT_FALSE(hs[job]["orphaned"]) << hs[job].dump();
  EXPECT_EQ(node.gpureap({"--no-agent", "status", "--check"}).exit_code, 0);
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_TRUE(alive(job));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W3-01(a): a `gpureap run` inside a container (a new PID namespace): the run id holds
// the namespace's pid. Whether the run lives is read from the process tree.
TEST(Provenance, W3_01_ARunInsideAContainerIsLive) {
  if (!root()) GTEST_SKIP() << "unshare --pid needs root";
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  const std::string out = node.dir() + "/a.json";
  WatchChild container({"/usr/bin/unshare", "-p", "-f", "/bin/sh", "-c",
                        std::string("'") + GPUREAP_BIN + "' --no-agent run -- '" +
                            GPUREAP_SIM_BIN + "' hold --dir '" + node.dir() +
                            "' --gpu 0 --bytes 4GiB > '" + out + "'; true"},
                       node.env());
  pid_t server = 0;
  ASSERT_TRUE(SimNode::eventually(
      [&] {
        std::ifstream in(out);
        auto j = json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.contains("holders")) return false;
        server = j["holders"][0]["pid"].get<pid_t>();
        return true;
      },
      30s))
      << container.transcript();
  KillAtExit guard{{server}};
  WatchChild agent = start_eager_reaper(node);
  auto status = node.gpureap({"--no-agent", "--json", "status", "--gpu", "0"});
  auto hs = holders_by_pid(status.json());
  ASSERT_TRUE(hs.contains(server)) << status.out;
  EXPECT_FALSE(hs[server]["orphaned"]) << hs[server].dump();
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_TRUE(alive(server));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  // unshare --fork blocks SIGTERM while it waits for the container (util-linux 2.38), so
  // terminate() would wait out its 10 s: the server goes first, and the container ends.
  guard.now();
  container.terminate();
}

// W3-02: launch.sh starts two independent `nohup` servers and ends (DESIGN's own
// detached example), (a) before the agent started and (b) while it watches.
TEST(Provenance, W3_02_ALauncherScriptsNohupServersAreDetachedAndNeverReaped) {
  SimNode node({"--gpus", "5", "--memory", "80GiB"});
  auto launcher = [&](const std::string& tag, int g1, int g2) {
    const std::string path = node.dir() + "/launch-" + tag + ".sh";
    std::ofstream(path) << "#!/bin/bash\n"
                        << "nohup python3 '" << kPyhold << "' " << g1 << " 8 '" << node.dir()
                        << "/" << tag << "-1.pid' > /dev/null 2>&1 &\n"
                        << "nohup python3 '" << kPyhold << "' " << g2 << " 8 '" << node.dir()
                        << "/" << tag << "-2.pid' > /dev/null 2>&1 &\n"
                        << "sleep 1.5\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  };
  const std::string a = launcher("a", 0, 1);
  ASSERT_EQ(run_shell(node, "set -m; '" + a + "'"), 0);
  KillAtExit guard{{pid_in(node.dir() + "/a-1.pid"), pid_in(node.dir() + "/a-2.pid")}};
  auto direct = holders_by_pid(node.gpureap({"--no-agent", "--json", "status"}).json());
  for (pid_t p : guard.pids) {
    ASSERT_TRUE(direct.contains(p));
    EXPECT_FALSE(direct[p]["orphaned"]) << direct[p].dump();
    EXPECT_TRUE(direct[p]["detached"]) << direct[p].dump();
  }
  WatchChild agent = start_eager_reaper(node);
  const std::string b = launcher("b", 2, 3);
  ASSERT_EQ(run_shell(node, "setsid '" + b + "'"), 0);
  guard.pids.push_back(pid_in(node.dir() + "/b-1.pid"));
  guard.pids.push_back(pid_in(node.dir() + "/b-2.pid"));
  EXPECT_EQ(reaped_besides_a_control(node, agent, 4), "") << agent.transcript();
  for (pid_t p : guard.pids) EXPECT_TRUE(alive(p)) << p;
  EXPECT_EQ(node.gpureap({"status", "--check"}).exit_code, 0);
  EXPECT_EQ(node.gpureap({"--no-agent", "status", "--check"}).exit_code, 0);
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W3-03: a container whose PID 1 is an interactive shell runs a live pipeline; the shell
// started its stages and lives: they are its jobs, not adoptees.
TEST(Provenance, W3_03_AContainerShellsPipelineIsItsOwn) {
  if (!root()) GTEST_SKIP() << "unshare --pid needs root";
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  const std::string a = node.dir() + "/a.pid", b = node.dir() + "/b.pid";
  WatchChild container({"/usr/bin/unshare", "-p", "-f", "/bin/bash", "-c",
                        "set -m; cat /etc/hostname | python3 '" + kPyhold + "' 0 4 '" + a +
                            "' | python3 '" + kPyhold + "' 1 4 '" + b + "'; sleep 1"},
                       node.env());
  KillAtExit guard{{pid_in(a), pid_in(b)}};
  ASSERT_GT(guard.pids[0], 0);
  ASSERT_GT(guard.pids[1], 0);
  std::this_thread::sleep_for(500ms);  // the first stage (cat) has exited
  auto hs = holders_by_pid(node.gpureap({"--no-agent", "--json", "status"}).json());
  for (pid_t p : guard.pids) {
    ASSERT_TRUE(hs.contains(p));
    EXPECT_FALSE(hs[p]["orphaned"]) << hs[p].dump();
  }
  EXPECT_EQ(node.gpureap({"--no-agent", "status", "--check"}).exit_code, 0);
  WatchChild agent = start_eager_reaper(node);
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  for (pid_t p : guard.pids) EXPECT_TRUE(alive(p)) << p;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  guard.now();  // the pipeline first: unshare blocks SIGTERM (W3_01_ARunInsideAContainerIsLive)
  container.terminate();
}

// W3-07: a login shell starts a job and exits while the agent watches. The agent and a
// direct scan give the same answer to `status --check` and `free --orphans`. The shell
// exits only once the agent has answered with its job (a loaded machine may take longer
// than any fixed pause to start python): a shell that ended before the agent saw its job
// is "launcher unknown", honestly, and not this defect's shape.
TEST(Provenance, W3_07_TheAgentAndADirectScanAgree) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "100ms"});
  ASSERT_TRUE(agent.next_line(30s)) << agent.transcript();
  const std::string pidfile = node.dir() + "/a.pid", go = node.dir() + "/go";
  ASSERT_EQ(run_shell(node, "setsid -f bash -c \"python3 '" + kPyhold + "' 0 4 '" + pidfile +
                                "' & while [ ! -e '" + go + "' ]; do sleep 0.05; done\"" +
                                " < /dev/null > /dev/null 2>&1"),
            0);
  KillAtExit guard{{pid_in(pidfile)}};
  ASSERT_GT(guard.pids[0], 0);
  auto holder = [&](bool direct) {
    std::vector<std::string> args = {"--json", "status", "--gpu", "0"};
    if (direct) args.insert(args.begin(), "--no-agent");
    auto s = node.gpureap(args);
    auto j = json::parse(s.out, nullptr, false);
    if (j.is_discarded() || (!direct && j.value("source", "") != "agent")) return json();
    auto hs = holders_by_pid(j);
    return hs.contains(guard.pids[0]) ? hs[guard.pids[0]] : json();
  };
  // The agent answers with the job, found by its open device node, while its shell lives.
  ASSERT_TRUE(SimNode::eventually(
      [&] {
        json h = holder(false);
        return h.is_object() && h["ppid"] != 1 &&
               std::ranges::count(h["found_by"], json("fd")) == 1;
      },
      20s))
      << holder(false).dump();
  std::ofstream{go} << "go\n";
  // The agent saw the shell end: a launcher finishing, its job detached.
  EXPECT_TRUE(SimNode::eventually([&] { return holder(true).value("detached", false); }, 20s))
      << holder(true).dump();
  const int check_agent = node.gpureap({"status", "--check"}).exit_code;
  const int check_direct = node.gpureap({"--no-agent", "status", "--check"}).exit_code;
  const int free_agent =
      node.gpureap({"free", "--orphans", "--gpu", "0", "--dry-run"}).exit_code;
  const int free_direct =
      node.gpureap({"--no-agent", "free", "--orphans", "--gpu", "0", "--dry-run"}).exit_code;
  EXPECT_EQ(check_agent, check_direct);
  EXPECT_EQ(free_agent, free_direct);
  EXPECT_EQ(check_direct, 0);
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W3-10: an orphaned SGLang server's workers whose environment names the agent's pid as
// "their run" are not hidden: announced, counted by --check, and inferred (one look), so
// offered to a person; the reaper leaves them.
TEST(Provenance, W3_10_ARunIdInTheEnvironmentHidesNoLeak) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  auto held = node.hold({"--gpu", "1", "--bytes", "6GiB", "--children", "2", "--orphan", "--title",
                         "sglang::scheduler_TP{k}"},
                        false, {{"GPUREAP_RUN_ID", "x-" + std::to_string(agent.pid())}});
  auto announced = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "orphaned_memory"; }, 20s);
  ASSERT_TRUE(announced) << agent.transcript();
  EXPECT_EQ(node.gpureap({"status", "--check"}).exit_code, 1);
  EXPECT_EQ(node.gpureap({"--no-agent", "status", "--check"}).exit_code, 1);
  auto hs = holders_by_pid(node.gpureap({"--json", "status"}).json());
  for (const auto& [pid, gpu] : held.holders) {
    ASSERT_TRUE(hs.contains(pid));
    EXPECT_TRUE(hs[pid]["orphaned"]) << hs[pid].dump();
    EXPECT_EQ(hs[pid]["provenance"], "inferred") << hs[pid].dump();
  }
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// A `gpureap run` SIGKILLed in cgroup mode: its server stays in the run's cgroup with no
// run above it. That is owned evidence: the reaper frees it.
TEST(Provenance, AKilledRunsServerInItsCgroupIsOwnedAndReaped) {
  if (!root()) GTEST_SKIP() << "a run's own cgroup needs a writable cgroup v2";
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild run = WatchChild::gpureap(
      node, {"run", "--", GPUREAP_SIM_BIN, "hold", "--dir", node.dir(), "--gpu", "2", "--bytes",
             "2GiB"});
  auto ready = run.wait_for_json([](const json& j) { return j.contains("holders"); }, 30s);
  ASSERT_TRUE(ready) << run.transcript();
  const pid_t server = (*ready)["holders"][0]["pid"].get<pid_t>();
  KillAtExit guard{{server}};
  auto before = holders_by_pid(node.gpureap({"--no-agent", "--json", "status", "--gpu", "2"}).json());
  ASSERT_TRUE(before.contains(server));
  if (!before[server]["container"].is_string() ||
      before[server]["container"].get<std::string>().find("gpureap-run:") == std::string::npos)
    GTEST_SKIP() << "no cgroup of its own here (subreaper mode): " << before[server].dump();
  EXPECT_FALSE(before[server]["orphaned"]) << before[server].dump();
  ASSERT_EQ(::kill(run.pid(), SIGKILL), 0);  // the run's gpureap (ours); its reaper follows
  ASSERT_TRUE(SimNode::eventually([&] {
    auto hs = holders_by_pid(node.gpureap({"--no-agent", "--json", "status", "--gpu", "2"}).json());
    return hs.contains(server) && hs[server]["provenance"] == "owned";
  })) << node.gpureap({"--no-agent", "status", "--gpu", "2"}).out;
  WatchChild agent = start_eager_reaper(node);
  auto reaped = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "reaped"; }, 20s);
  EXPECT_TRUE(reaped) << agent.transcript();
  EXPECT_FALSE(alive(server));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

}  // namespace provenance_test
}  // namespace gpureap::e2e
