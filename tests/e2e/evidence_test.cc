// Evidence the kernel attests (issue 49, docs/orphans.md's table of evidence): the
// shapes of defects-wave4 in which a name, an environment variable or an old file
// decided what the reaper or `free --orphans` did, end to end on the simulated node
// with real processes, real signals and the real agent (the most eager reaper).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness.h"
#include "proc/proc_events.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace evidence_test {

using namespace std::chrono_literals;
using nlohmann::json;



json holder_of(const SimNode& node, pid_t pid, bool direct) {
  std::vector<std::string> args = {"--json", "status"};
  if (direct) args.insert(args.begin(), "--no-agent");
  auto hs = holders_by_pid(node.gpureap(args).json());
  return hs.contains(pid) ? hs[pid] : json();
}

// W4-01: a process that holds GPU 0 (its command line names an engine) starts a server on
// GPU 1 with start_new_session=True, then exits 0 while the agent watches. The server
// leads its own session: detached on purpose, never reaped.
TEST(Evidence, W4_01_ASetsidServerOfAStarterThatExitedNormallyIsSpared) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  const std::string pidfile = node.dir() + "/server.pid", go = node.dir() + "/go";
  const std::string code =
      "import subprocess, sys, os, time  # python3 -m vllm.entrypoints.openai.api_server\n"
      "subprocess.Popen(['python3', '" + kPyhold + "', '1', '6', '" + pidfile +
      "'], start_new_session=True, stdin=subprocess.DEVNULL)\n"
      "while not os.path.exists('" + go + "'): time.sleep(0.05)\n"
      "sys.exit(0)\n";
  WatchChild starter({"/usr/bin/python3", "-c", code}, node.env());
  const pid_t server = pid_in(pidfile);
  ASSERT_GT(server, 0) << starter.transcript();
  KillAtExit guard{{server}};
  ASSERT_TRUE(node.agent_sees({server}));
  std::ofstream{go} << "go\n";
  ASSERT_TRUE(SimNode::eventually([&] { return !starter.running(); }, 20s));
  EXPECT_EQ(starter.terminate(), 0);
  EXPECT_TRUE(SimNode::eventually(
      [&] { return holder_of(node, server, false).value("detached", false); }, 20s))
      << holder_of(node, server, false).dump();
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_TRUE(alive(server));
  json h = holder_of(node, server, true);
  EXPECT_FALSE(h.value("orphaned", true)) << h.dump();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// A launcher script SIGKILLed while it `wait`s on its GPU workers (in its process
// group): the kernel says it was killed, so its workers are witnessed orphans, reaped.
TEST(Evidence, ALauncherScriptKilledWhileWaitingOnItsWorkersIsAWitnessedCrash) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  const std::string script = node.dir() + "/launch.sh";
  std::ofstream(script) << "#!/bin/bash\n"
                        << "python3 '" << kPyhold << "' 0 4 '" << node.dir() << "/w1.pid' &\n"
                        << "python3 '" << kPyhold << "' 1 4 '" << node.dir() << "/w2.pid' &\n"
                        << "wait\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const std::string launcher_pid = node.dir() + "/launch.pid";
  // Job control gives the script a process group of its own; its workers stay in it.
  WatchChild shell({"/bin/bash", "-c", "set -m; '" + script + "' & echo $! > '" + launcher_pid +
                                           "'; wait"},
                   node.env());
  const pid_t launcher = pid_in(launcher_pid);
  KillAtExit guard{{pid_in(node.dir() + "/w1.pid"), pid_in(node.dir() + "/w2.pid")}};
  ASSERT_GT(launcher, 0);
  ASSERT_TRUE(node.agent_sees(guard.pids));
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  auto reaped = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "reaped"; }, 20s);
  EXPECT_TRUE(reaped) << agent.transcript();
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(guard.pids[0]) && !alive(guard.pids[1]); }));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  shell.terminate();
}

// The 50 ms shape (issue 49): a launcher's workers take their GPUs and the launcher is
// SIGKILLed before the agent's next tick, so no look ever saw the workers hold a GPU nor
// watched the launcher as a holder's parent. The kernel's events saw the forks and the
// kill: the agent looks at the killed launcher's children at once, announces them as
// witnessed orphans and reaps them, with no tick in between (its tick is an hour).
// Ordering is forced, not timed: no tick falls between the allocation and the kill, and
// the launcher lies a zombie (this test reaps it at the end), so the agent reads its
// names whenever it drains the events. Needs the proc connector (root, initial namespaces).
TEST(Evidence, ALauncherKilledBetweenTicksRightAfterItsWorkersAllocatedIsWitnessedByTheEvents) {
  if (::geteuid() != 0 || !proc::proc_events_apply("/proc") || !proc::ProcEvents::open())
    GTEST_SKIP() << "the kernel's process events need root in the initial namespaces";
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = WatchChild::gpureap(
      node, {"--json", "watch", "--no-listen", "--tick", "1h", "--reap-orphans-after", "300ms"});
  auto started = agent.next_line(30s);
  ASSERT_TRUE(started && started->text.find("\"started\"") != std::string::npos)
      << agent.transcript();
  const std::string script = node.dir() + "/launch.sh";
  std::ofstream(script) << "python3 '" << kPyhold << "' 0 4 '" << node.dir() << "/w1.pid' &\n"
                        << "python3 '" << kPyhold << "' 1 4 '" << node.dir() << "/w2.pid' &\n"
                        << "wait\n";
  // bash leading a process group of its own; its workers stay in it.
  WatchChild launcher({"/usr/bin/python3", "-c",
                       "import os, sys; os.setpgid(0, 0); os.execv('/bin/bash', ['bash', sys.argv[1]])",
                       script},
                      node.env());
  KillAtExit guard{{pid_in(node.dir() + "/w1.pid"), pid_in(node.dir() + "/w2.pid")}};
  ASSERT_GT(guard.pids[0], 0) << launcher.transcript();
  ASSERT_GT(guard.pids[1], 0) << launcher.transcript();
  // Both workers hold their GPUs (each wrote its pid after its allocation); no look of
  // the agent's since its start has seen them.
  ASSERT_EQ(::kill(launcher.pid(), SIGKILL), 0);
  auto announced = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "orphaned_memory"; }, 20s);
  ASSERT_TRUE(announced) << agent.transcript();
  EXPECT_EQ((*announced)["provenance"], "witnessed") << announced->dump();
  EXPECT_EQ((*announced)["parent"]["pid"], launcher.pid()) << announced->dump();
  auto reaped = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "reaped"; }, 20s);
  EXPECT_TRUE(reaped) << agent.transcript();
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(guard.pids[0]) && !alive(guard.pids[1]); }));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W4-02: a job whose processes inherited GPUREAP_RUN_ID runs two servers; X crashed (its
// workers orphaned), Y is healthy. Freeing X's orphans leaves Y's live launcher alone
// and names it as live.
TEST(Evidence, W4_02_FreeingOrphansNeverWidensToALiveProcessOfTheSameRunId) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  const std::map<std::string, std::string> job{{"GPUREAP_RUN_ID", "train-4242"}};
  auto x = node.hold({"--gpu", "0", "--children", "2", "--bytes", "4GiB", "--orphan", "--title",
                      "sglang::scheduler_TP{k}"},
                     false, job);
  auto y = node.hold({"--gpu", "2", "--children", "2", "--bytes", "4GiB", "--title",
                      "sglang::scheduler_TP{k}"},
                     true, job);
  ASSERT_TRUE(alive(y.leader));
  auto freed = node.gpureap({"--no-agent", "free", "--orphans", "--gpu", "0,1", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  for (const auto& [pid, gpu] : x.holders)
    EXPECT_TRUE(SimNode::eventually([&] { return !alive(pid); })) << pid;
  EXPECT_TRUE(alive(y.leader)) << freed.out;
  for (const auto& [pid, gpu] : y.holders) EXPECT_TRUE(alive(pid)) << pid;
  EXPECT_NE(freed.out.find("shares GPUREAP_RUN_ID=train-4242"), std::string::npos) << freed.out;
}

// W4-05: a witness record of another boot (no boot id) for a live process whose parent
// lives: dropped at load; the process is live, never reaped.
TEST(Evidence, W4_05_AStaleWitnessRecordNeverMakesALiveProcessAnOrphan) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  const std::string pidfile = node.dir() + "/h.pid";
  WatchChild shell({"/bin/bash", "-c", "python3 '" + kPyhold + "' 2 5 '" + pidfile + "' & wait"},
                   node.env());
  const pid_t h = pid_in(pidfile);
  ASSERT_GT(h, 0) << shell.transcript();
  KillAtExit guard{{h}};
  const std::string state = node.env().at("GPUREAP_STATE_DIR");
  auto record = [&](pid_t pid, std::uint64_t start) {
    return json{{"holder_pid", pid}, {"holder_start", start}, {"pid", 3121}, {"comm", "python3"},
                {"cmdline", "python3 -m sglang.launch_server --model-path M --tp 2"},
                {"died_at", 1.0}, {"was_parent", true}, {"held_gpu", false},
                {"gpu_children", 2}, {"run_supervisor", false}};
  };
  {
    std::ofstream out(state + "/witnessed.json");
    out << json{{"witnessed", {record(h, start_time_of(h)), record(4000123, 7)}}}.dump() << "\n";
  }
  std::filesystem::permissions(state + "/witnessed.json", std::filesystem::perms::owner_read |
                                                              std::filesystem::perms::owner_write);
  json direct = holder_of(node, h, true);
  EXPECT_FALSE(direct.value("orphaned", true)) << direct.dump();
  EXPECT_EQ(node.gpureap({"--no-agent", "status", "--check"}).exit_code, 0);
  WatchChild agent = start_eager_reaper(node);
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_TRUE(alive(h));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

/// A child subreaper named `name` (PR_SET_NAME) that starts `argv` and reaps what it
/// adopts, as the defect's supervisor does.
WatchChild supervisor(const SimNode& node, const std::string& name,
                      const std::vector<std::string>& argv) {
  std::vector<std::string> cmd = {
      "/usr/bin/python3", "-c",
      "import ctypes, os, sys, subprocess, time\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
      "libc.prctl(36, 1, 0, 0, 0)\n"
      "subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)\n"
      "while True:\n"
      "    try: os.wait()\n"
      "    except ChildProcessError: time.sleep(0.2)\n",
      name};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return WatchChild(cmd, node.env());
}

// W4-06: a crashed server's workers adopted by a process that calls itself
// gpureap-reaper are no live run's members: the agent's witness decides, as it does
// under any other name.
TEST(Evidence, W4_06_AProcessNamedGpureapReaperHidesNoCrash) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  const std::string out = node.dir() + "/b.json";
  WatchChild sup = supervisor(
      node, "gpureap-reaper",
      {"/bin/sh", "-c",
       std::string("exec '") + GPUREAP_SIM_BIN + "' hold --dir '" + node.dir() +
           "' --gpu 2 --children 2 --bytes 4GiB --title 'sglang::scheduler_TP{k}' "
           "--server-title 'python3 -m sglang.launch_server --model-path M --tp 2' > '" + out +
           "'"});
  json ready;
  ASSERT_TRUE(SimNode::eventually(
      [&] {
        std::ifstream in(out);
        ready = json::parse(in, nullptr, false);
        return !ready.is_discarded() && ready.contains("holders");
      },
      20s))
      << sup.transcript();
  std::vector<pid_t> workers;
  for (const auto& h : ready["holders"]) workers.push_back(h["pid"].get<pid_t>());
  KillAtExit guard{workers};
  ASSERT_TRUE(node.agent_sees(workers));
  ASSERT_EQ(::kill(ready["leader"].get<pid_t>(), SIGKILL), 0);
  auto reaped = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "reaped"; }, 20s);
  EXPECT_TRUE(reaped) << agent.transcript();
  for (pid_t w : workers) EXPECT_TRUE(SimNode::eventually([&] { return !alive(w); })) << w;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  sup.terminate();
}

// W3-10, as the evidence model asks: a crash the agent witnessed, the workers'
// environment naming a made-up run (the agent's own pid): the label ranks below the
// witness, and the reaper frees them.
TEST(Evidence, W3_10_AMadeUpRunIdRanksBelowAWitnessedCrash) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  auto held = node.crash_watched(
      {"--gpu", "1", "--bytes", "6GiB", "--children", "2", "--title", "sglang::scheduler_TP{k}"},
      {{"GPUREAP_RUN_ID", "x-" + std::to_string(agent.pid())}});
  auto reaped = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "reaped"; }, 20s);
  EXPECT_TRUE(reaped) << agent.transcript();
  for (const auto& [pid, gpu] : held.holders)
    EXPECT_TRUE(SimNode::eventually([&] { return !alive(pid); })) << pid;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

}  // namespace evidence_test
}  // namespace gpureap::e2e
