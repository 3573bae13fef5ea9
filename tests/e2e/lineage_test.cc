// The orphan rule end to end (docs/orphans.md, issue 22 §1): a leak is orphaned by
// evidence; a live pipeline job, a detached server with live workers and a live
// `gpureap run`'s member are not, and neither `free --orphans` nor the reaper
// touches them. Real processes on the simulated node.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace lineage_test {

using namespace std::chrono_literals;
using nlohmann::json;

TEST(Lineage, W2_08_PipelineJobIsAttachedNeverAnOrphan) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  // An interactive shell (job control on) runs `cat /dev/null | python infer.py`
  // in the background and waits: the job's group leader (cat) exits at once; the
  // python holder's parent is the live shell.
  const std::string node_file = node.dir() + "/dev/nvidia3";
  std::string script =
      "set -m; /bin/cat /dev/null | /usr/bin/python3 -c \"import os,sys,time; sys.stdin.read(); "
      "f=open('" +
      node_file + "'); print(os.getpid(), flush=True); time.sleep(120)\" & wait";
  WatchChild shell({"/bin/bash", "-c", script}, node.env());
  auto line = shell.next_line(30s);
  ASSERT_TRUE(line) << shell.transcript();
  KillAtExit guard{{std::stoi(line->text)}};
  const pid_t python = guard.pids[0];

  auto status = node.gpureap({"--no-agent", "--json", "status", "--gpu", "3"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  auto hs = holders_by_pid(status.json());
  ASSERT_TRUE(hs.contains(python)) << status.out;
  EXPECT_EQ(hs[python]["ppid"], shell.pid());
  EXPECT_NE(hs[python]["pgid"], python);
  EXPECT_FALSE(hs[python]["orphaned"]) << hs[python].dump();
  EXPECT_FALSE(hs[python]["detached"]) << hs[python].dump();

  auto plan = node.gpureap({"--no-agent", "free", "--orphans", "--gpu", "3", "--dry-run"});
  EXPECT_EQ(plan.exit_code, 4) << "nothing to do: " << plan.out << plan.err;

  WatchChild agent = start_eager_reaper(node);
  EXPECT_EQ(reaped_besides_a_control(node, agent, 0), "") << agent.transcript();
  EXPECT_TRUE(alive(python));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(Lineage, DetachedServerWithLiveWorkersIsDetachedNotAnOrphan) {
  // ux-wave3-review §3.4: a server whose launching shell exited (it is re-parented)
  // holds GPU 0 and leads two live workers on GPU 0 and GPU 1.
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  auto held = node.hold({"--gpu", "0", "--children", "2", "--parent-holds", "--bytes", "30GiB",
                         "--comm", "sglang-server"});
  auto status = node.gpureap({"--no-agent", "--json", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  auto hs = holders_by_pid(status.json());
  ASSERT_TRUE(hs.contains(held.leader)) << status.out;
  const json& server = hs[held.leader];
  EXPECT_FALSE(server["orphaned"]) << server.dump();
  EXPECT_TRUE(server["detached"]) << server.dump();
  EXPECT_NE(server["detached_reason"].get<std::string>().find("leads 2 live GPU workers"),
            std::string::npos)
      << server.dump();
  for (const auto& [pid, gpu] : held.holders) {
    if (pid == held.leader) continue;
    EXPECT_FALSE(hs[pid]["orphaned"]) << hs[pid].dump();
    EXPECT_FALSE(hs[pid]["detached"]) << "its parent, the server, is alive: " << hs[pid].dump();
  }
  auto text = node.gpureap({"--no-agent", "status"});
  EXPECT_NE(text.out.find("DETACHED"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("free --orphans"), std::string::npos)
      << "no advice to free a healthy server: " << text.out;

  auto plan = node.gpureap({"--no-agent", "free", "--orphans", "--gpu", "0", "--dry-run"});
  EXPECT_EQ(plan.exit_code, 4) << plan.out << plan.err;

  WatchChild agent = start_eager_reaper(node);
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  EXPECT_TRUE(alive(held.leader));
  for (const auto& [pid, gpu] : held.holders) EXPECT_TRUE(alive(pid)) << pid;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(Lineage, CaseStudyWorkersOfAKilledServerStayOrphaned) {
  // The seed: a TP-8 server SIGKILLed; its 8 workers (its process group) hold 8 GPUs.
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--bytes", "20GiB", "--children", "8", "--orphan"});
  auto status = node.gpureap({"--no-agent", "--json", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  auto hs = holders_by_pid(status.json());
  ASSERT_EQ(held.holders.size(), 8u);
  for (const auto& [pid, gpu] : held.holders) {
    ASSERT_TRUE(hs.contains(pid)) << status.out;
    EXPECT_TRUE(hs[pid]["orphaned"]) << hs[pid].dump();
    EXPECT_EQ(hs[pid]["orphan_evidence"], "siblings") << hs[pid].dump();
    EXPECT_EQ(hs[pid]["provenance"], "inferred") << hs[pid].dump();
  }
  auto text = node.gpureap({"--no-agent", "status"});
  EXPECT_NE(text.out.find("8 orphaned processes"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("orphaned (inferred), pid "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("a person may free it; nothing unattended will"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("the workers of a server that is gone"), std::string::npos) << text.out;
}

TEST(Lineage, SingleWorkerSeenDyingByTheAgentIsOrphanedWitnessed) {
  // The agent watches the server (vLLM's launcher by its title, leading its group)
  // before it is killed.
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent =
      WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "100ms"});
  ASSERT_TRUE(agent.next_line(30s)) << agent.transcript();
  auto held = node.crash_watched({"--gpu", "2", "--bytes", "4GiB", "--children", "1"});
  ASSERT_EQ(held.holders.size(), 1u);
  const pid_t worker = held.holders[0].first;
  auto event = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "orphaned_memory"; }, 20s);
  ASSERT_TRUE(event) << agent.transcript();
  auto s = node.gpureap({"--json", "status", "--gpu", "2"});
  auto hs = holders_by_pid(s.json());
  ASSERT_TRUE(hs.contains(worker)) << s.out;
  EXPECT_TRUE(hs[worker]["orphaned"]) << hs[worker].dump();
  EXPECT_EQ(hs[worker]["orphan_evidence"], "witnessed") << hs[worker].dump();
  EXPECT_EQ(hs[worker]["provenance"], "witnessed") << hs[worker].dump();
  // When: the death the agent saw, as its event said (to the millisecond).
  ASSERT_TRUE(hs[worker]["orphaned_since"].is_number()) << hs[worker].dump();
  ASSERT_TRUE((*event)["parent"]["died_at"].is_number()) << event->dump();
  EXPECT_NEAR(hs[worker]["orphaned_since"].get<double>(),
              (*event)["parent"]["died_at"].get<double>(), 0.0005)
      << hs[worker].dump() << event->dump();
  // The same worker, by a direct look: the agent keeps what it saw die in the state
  // directory, so the direct look reaches the same verdict, provenance and time (W3-07).
  auto direct = node.gpureap({"--no-agent", "--json", "status", "--gpu", "2"});
  auto dh = holders_by_pid(direct.json());
  ASSERT_TRUE(dh.contains(worker)) << direct.out;
  EXPECT_TRUE(dh[worker]["orphaned"]) << dh[worker].dump();
  EXPECT_EQ(dh[worker]["provenance"], "witnessed") << dh[worker].dump();
  EXPECT_TRUE(dh[worker]["orphaned_since"].is_number()) << dh[worker].dump();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(Lineage, AnOrphanByItsGroupAloneIsAnnouncedButNeverReaped) {
  // A lone plain worker whose server died before the agent started: one look sees
  // only its dead group leader. Announced, freed by a person, never by the reaper.
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  auto held = node.hold({"--gpu", "3", "--bytes", "4GiB", "--children", "1", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  WatchChild agent = start_eager_reaper(node);
  auto announced = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "orphaned_memory"; }, 20s);
  ASSERT_TRUE(announced) << agent.transcript();
  EXPECT_NE((*announced)["detail"].get<std::string>().find("launcher unknown"), std::string::npos)
      << announced->dump();
  EXPECT_EQ(reaped_besides_a_control(node, agent, 0), "") << agent.transcript();
  EXPECT_TRUE(alive(held.holders[0].first));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  // A person's free --orphans does act on it.
  auto freed = node.gpureap({"--no-agent", "free", "--orphans", "--gpu", "3", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(held.holders[0].first));
}

TEST(Lineage, W2_10_LiveRunMemberIsDetachedAndNotReaped) {
  // The server dies inside a live `gpureap run`; its worker is adopted by the run's
  // gpureap-reaper, which tears it down when the run ends.
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  WatchChild agent = start_eager_reaper(node);
  const std::string script = std::string(GPUREAP_SIM_BIN) +
                             " hold --dir \"$GPUREAP_SIM_DIR\" --gpu 1 --bytes 2GiB --children 2 "
                             "--same-gpu --orphan --detach; exec sleep 30";
  WatchChild run = WatchChild::gpureap(node, {"run", "--", "/bin/sh", "-c", script});
  auto line = run.next_line(30s);
  ASSERT_TRUE(line) << run.transcript();
  auto ready = json::parse(line->text);
  std::vector<pid_t> workers;
  for (const auto& h : ready["holders"]) workers.push_back(h["pid"].get<pid_t>());
  ASSERT_EQ(workers.size(), 2u);
  KillAtExit guard{workers};

  auto status = node.gpureap({"--no-agent", "--json", "status", "--gpu", "1"});
  auto hs = holders_by_pid(status.json());
  for (pid_t w : workers) {
    ASSERT_TRUE(hs.contains(w)) << status.out;
    EXPECT_FALSE(hs[w]["orphaned"]) << hs[w].dump();
    EXPECT_TRUE(hs[w]["detached"]) << hs[w].dump();
    EXPECT_NE(hs[w]["detached_reason"].get<std::string>().find("live gpureap run"),
              std::string::npos)
        << hs[w].dump();
  }
  EXPECT_EQ(reaped_besides_a_control(node, agent, 3), "") << agent.transcript();
  for (pid_t w : workers) EXPECT_TRUE(alive(w)) << w;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

}  // namespace
}  // namespace gpureap::e2e
