// Server instances (issue 24): two tensor-parallel servers, one crashed and one live,
// are two instances with their ranks; `free --instance` frees only the crashed one.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace instances_test {

using json = nlohmann::json;

const json* instance_of(const json& status, pid_t pgid) {
  for (const auto& in : status.at("instances"))
    if (in.at("key") == std::to_string(pgid)) return &in;
  return nullptr;
}

TEST(Instances, TwoServersAreTwoInstancesAndFreeInstanceFreesOnlyTheCrashedOne) {
  SimNode node({"--gpus", "6", "--memory", "96GiB"});
  auto crashed =
      node.hold({"--gpu", "0", "--children", "4", "--bytes", "8GiB", "--orphan", "--listen",
                 "--title", "sglang::scheduler_TP{k}", "--server-title",
                 "python3 -m sglang.launch_server --model-path org/Model-A --port 30000"});
  auto live =
      node.hold({"--gpu", "4", "--children", "2", "--bytes", "8GiB", "--title",
                 "VLLM::Worker_TP{k}", "--server-title", "vllm serve org/Model-B --port 8000"});
  ASSERT_EQ(crashed.holders.size(), 4u);
  ASSERT_EQ(live.holders.size(), 2u);

  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json status = s.json();
  const json* a = instance_of(status, crashed.leader);
  const json* b = instance_of(status, live.leader);
  ASSERT_NE(a, nullptr) << s.out;
  ASSERT_NE(b, nullptr) << s.out;
  EXPECT_EQ((*a)["engine"], "sglang");
  EXPECT_EQ((*a)["launcher"]["alive"], false);
  EXPECT_EQ((*a)["orphaned"], 4);
  EXPECT_EQ((*a)["gpus"], json::array({0, 1, 2, 3}));
  ASSERT_EQ((*a)["members"].size(), 4u);
  EXPECT_EQ((*a)["members"][3]["ranks"], "TP3");
  EXPECT_EQ((*a)["members"][3]["role"], "scheduler");
  // Its workers still hold the server's port: a relaunch's "port in use", explained.
  ASSERT_NE(crashed.listen_port, 0u);
  EXPECT_EQ((*a)["listening_ports"], json::array({crashed.listen_port})) << a->dump();
  EXPECT_EQ((*b)["listening_ports"], json::array()) << "a live launcher: not looked up";
  EXPECT_EQ((*b)["engine"], "vllm");
  EXPECT_EQ((*b)["launcher"]["alive"], true);
  EXPECT_EQ((*b)["model"], "org/Model-B");
  EXPECT_EQ((*b)["port"], 8000);
  EXPECT_EQ((*b)["orphaned"], 0);
  // Each holder points to its instance.
  for (const auto& g : status["gpus"])
    for (const auto& h : g["holders"])
      EXPECT_EQ(h["instance"], std::to_string(h["pid"] == live.holders[0].first ||
                                                      h["pid"] == live.holders[1].first
                                                  ? live.leader
                                                  : crashed.leader));

  // The table: a header line per instance, and the command that frees the crashed one.
  auto text = node.gpureap({"status"});
  EXPECT_NE(
      text.out.find("sglang server, process group " + std::to_string(crashed.leader) +
                    ", launcher gone, still listening on port " +
                    std::to_string(crashed.listen_port) + ": 4 processes (scheduler TP0..TP3)"),
      std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("still listening on port " + std::to_string(crashed.listen_port)),
            std::string::npos)
      << text.out;
  EXPECT_NE(
      text.out.find("free it: gpureap free --orphans --instance " + std::to_string(crashed.leader)),
      std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("model org/Model-B, port 8000"), std::string::npos) << text.out;

  auto freed =
      node.gpureap({"--json", "free", "--instance", std::to_string(crashed.leader), "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  const json report = freed.json();
  ASSERT_EQ(report["plan"]["instances"].size(), 1u) << freed.out;
  EXPECT_EQ(report["plan"]["instances"][0]["key"], std::to_string(crashed.leader));
  EXPECT_EQ(report["gpus"].size(), 4u) << "the instance's GPUs, without --gpu";
  for (const auto& [pid, gpu] : crashed.holders) EXPECT_FALSE(alive(pid)) << pid;
  for (const auto& [pid, gpu] : live.holders) EXPECT_TRUE(alive(pid)) << "live server " << pid;
  EXPECT_TRUE(alive(live.leader));
}

TEST(Instances, AnInstanceThatIsNotThereIsNothingToDoAndAWideSelectionLeavesOthersAlone) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  auto one = node.hold({"--gpu", "0", "--children", "1", "--bytes", "2GiB"});
  auto two = node.hold({"--gpu", "1", "--children", "1", "--bytes", "2GiB"});
  auto missing = node.gpureap({"free", "--instance", "999999", "--yes"});
  EXPECT_EQ(missing.exit_code, 4) << missing.err;
  EXPECT_NE(missing.err.find("--instance 999999"), std::string::npos) << missing.err;
  // --gpu all with --instance: only that instance's holders are signalled.
  auto r =
      node.gpureap({"free", "--gpu", "all", "--instance", std::to_string(one.leader), "--yes"});
  EXPECT_NE(r.exit_code, 2) << r.err;
  EXPECT_FALSE(alive(one.holders[0].first));
  EXPECT_TRUE(alive(two.holders[0].first)) << r.out;
}

// Host leftovers (issue 24, item 6): an SGLang shared-memory segment whose creator is gone
// is reported by status; one whose creator runs is not. Nothing is removed.
TEST(Instances, ShmSegmentsOfDeadCreatorsAreReportedNotRemoved) {
  SimNode node({"--gpus", "1", "--memory", "96GiB"});
  const std::string shm = node.dir() + "/dev/shm";
  std::filesystem::create_directories(shm);
  // A pid that is gone: a child we started and reaped.
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = shm + "/sgl_shm_scheduler_" + std::to_string(gone) + "_ab12";
  const std::string live = shm + "/sgl_shm_scheduler_" + std::to_string(::getpid()) + "_cd34";
  std::ofstream(dead) << std::string(8192, 'x');
  std::ofstream(live) << "y";
  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json doc = s.json();
  ASSERT_EQ(doc["shm_leftovers"].size(), 1u) << doc["shm_leftovers"].dump();
  EXPECT_EQ(doc["shm_leftovers"][0]["path"], dead);
  EXPECT_EQ(doc["shm_leftovers"][0]["creator_pid"], gone);
  EXPECT_EQ(doc["shm_leftovers"][0]["bytes"], 8192);
  auto text = node.gpureap({"status"});
  EXPECT_NE(text.out.find("1 shared-memory segment (8.00 KiB) whose creator is gone"),
            std::string::npos)
      << text.out;
  EXPECT_TRUE(std::filesystem::exists(dead)) << "reported, never removed";
}


// Issue 24 items 5 and 7: a torchrun-like agent that restarts killed workers is the
// respawner, named for what it is with its own stop step, both in the respawner list and
// in the next step of each GPU it keeps held; it is signalled only when asked.
TEST(Instances, ATorchrunAgentThatRestartsWorkersIsNamedWithItsStopStep) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  auto job = node.hold({"--gpu", "0", "--children", "2", "--bytes", "4GiB", "--respawn",
                        "--respawn-limit", "40", "--server-title",
                        "python3 /usr/bin/torchrun --nproc-per-node 2 train.py", "--title",
                        "python3 -u train.py --local-rank {k}"});
  ASSERT_EQ(job.holders.size(), 2u);
  auto r = node.gpureap({"--json", "free", "--gpu", "0,1", "--yes", "--timeout", "2s"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // respawned: not freed
  const json doc = r.json();
  ASSERT_EQ(doc["respawners"].size(), 1u) << doc["respawners"].dump();
  const json& agent = doc["respawners"][0];
  EXPECT_EQ(agent["pid"], job.leader);
  EXPECT_EQ(agent["included"], false);
  const std::string hint = agent["stop_hint"];
  EXPECT_NE(hint.find("torchrun's elastic agent"), std::string::npos) << hint;
  EXPECT_NE(hint.find("kill " + std::to_string(job.leader)), std::string::npos) << hint;
  ASSERT_FALSE(doc["leftovers"].empty());
  for (const auto& l : doc["leftovers"]) {
    if (l["class"] != "live_holder") continue;
    EXPECT_EQ(l["next_step"], hint) << l.dump();
    EXPECT_NE(l["evidence"].dump().find("its parent pid " + std::to_string(job.leader)),
              std::string::npos)
        << l.dump();
  }
  EXPECT_TRUE(alive(job.leader)) << "a respawner is signalled only when asked";
  // Asked: the agent goes first, then its workers, and both GPUs are freed.
  auto stop = node.gpureap({"--json", "free", "--gpu", "0,1", "--yes", "--stop-respawners"});
  EXPECT_EQ(stop.exit_code, 0) << stop.out << stop.err;
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(job.leader); }));
}

// Issue 24 items 5 and 7: an MPI-like job (an `orted` daemon and its ranks) is one
// instance whose launcher is the daemon, named as MPI; its ranks carry no role of
// their own, and nothing is signalled by looking.
TEST(Instances, AnMpiDaemonAndItsRanksAreOneMpiInstance) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  auto job = node.hold({"--gpu", "0", "--children", "2", "--bytes", "4GiB", "--server-title",
                        "orted --hnp-uri 1234.0;tcp://10.0.0.1:5000", "--title",
                        "python3 ring.py {k}"});
  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json status = s.json();
  const json* in = instance_of(status, job.leader);
  ASSERT_NE(in, nullptr) << s.out;
  EXPECT_EQ((*in)["engine"], "mpi") << in->dump();
  EXPECT_EQ((*in)["launcher"]["pid"], job.leader) << in->dump();
  EXPECT_EQ((*in)["launcher"]["alive"], true);
  EXPECT_EQ((*in)["members"].size(), 2u);
  auto text = node.gpureap({"status"});
  EXPECT_NE(text.out.find("mpi"), std::string::npos) << text.out;
  EXPECT_TRUE(alive(job.leader));
}

}  // namespace instances_test
}  // namespace gpureap::e2e
