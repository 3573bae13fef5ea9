// `gpureap slurm prolog|epilog|health` on the simulated node with a stand-in scontrol (a
// shell script that records its arguments and answers `show node` from a file): the
// exit statuses, what is asked of Slurm and when, without a Slurm installation. The
// real daemons are in slurm_test.cc.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "harness.h"

namespace gpureap::e2e {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A stand-in scontrol in the node's directory: appends one line per call (its arguments
// joined by '|') to <dir>/scontrol.calls; `show node` prints <dir>/node.state; exits with
// the number in <dir>/scontrol.rc when that file exists.
class FakeSlurm {
 public:
  explicit FakeSlurm(const SimNode& node) : dir_(node.dir()) {
    std::ofstream(path("scontrol")) << "#!/bin/sh\n"
                                    << "d=" << dir_ << "\n"
                                    << "line=''; for a in \"$@\"; do line=\"$line|$a\"; done\n"
                                    << "echo \"${line#|}\" >> $d/scontrol.calls\n"
                                    << "[ -e $d/scontrol.rc ] && exit $(cat $d/scontrol.rc)\n"
                                    << "[ \"$2\" = show ] && cat $d/node.state\n"
                                    << "exit 0\n";
    ::chmod(path("scontrol").c_str(), 0755);
    set_state("IDLE", "");
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void set_state(const std::string& state, const std::string& reason) const {
    std::ofstream(path("node.state"))
        << "NodeName=gpu01 Arch=x86_64 State=" << state << " ThreadsPerCore=1"
        << (reason.empty() ? "" : " Reason=" + reason + " [root@2026-12-03T13:29:11]") << "\n";
  }
  std::string calls() const { return read_file(path("scontrol.calls")); }
  std::map<std::string, std::string> env(std::map<std::string, std::string> more = {}) const {
    more["GPUREAP_SCONTROL"] = path("scontrol");
    more["SLURMD_NODENAME"] = "gpu01";
    return more;
  }

 private:
  std::string dir_;
};

TEST(SlurmCommand, AnEpilogWithNothingLeftAsksNothingOfSlurm) {
  SimNode node;
  FakeSlurm slurm(node);
  auto r = node.gpureap({"slurm", "epilog"}, std::chrono::seconds(60),
                        slurm.env({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "0"}}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Nothing to do: no leftover of job 42"), std::string::npos) << r.out;
  EXPECT_EQ(slurm.calls(), "");
}

TEST(SlurmCommand, WhenHeldDecidesDrainAndExitStatus) {
  SimNode node;
  FakeSlurm slurm(node);
  node.hold({"--gpu", "2", "--bytes", "12GiB", "--stuck", "--daemon"}, false,
            {{"SLURM_JOB_ID", "42"}});
  auto env = slurm.env({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "2"}});
  const std::string reason = "gpureap: GPU 2 driver_held 12.0 GiB (after job 42)";
  const std::string drain = "update|nodename=gpu01|state=drain|reason=" + reason + "\n";
  // Later runs find no holder, only the memory: their baseline is an estimate (README,
  // "Baselines"), so the figure may differ; the GPU and the class do not.
  auto drains = [&] {
    std::string calls = slurm.calls();
    std::size_t n = 0;
    for (auto at = calls.find("state=drain|reason=gpureap: GPU 2 driver_held ");
         at != std::string::npos;
         at = calls.find("state=drain|reason=gpureap: GPU 2 driver_held ", at + 1))
      ++n;
    return n;
  };
  // drain (the epilog's default): drained, exit 0.
  auto r = node.gpureap({"--json", "slurm", "epilog", "--deadline", "10s"},
                        std::chrono::seconds(60), env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(slurm.calls(), drain);
  auto j = r.json();
  EXPECT_EQ(j["command"], "slurm epilog");
  EXPECT_EQ(j["job_gpus"], nlohmann::json::array({2}));
  EXPECT_EQ(j["held"][0]["classes"][0], "driver_held");
  EXPECT_EQ(j["node"]["action"], "drained");
  EXPECT_EQ(j["node"]["reason"], reason);
  EXPECT_FALSE(j["free"].is_null());
  // drain-fail: drained, and a non-zero exit (Slurm logs an epilog error, keeps our reason).
  auto df = node.gpureap({"slurm", "epilog", "--when-held", "drain-fail", "--deadline", "10s"},
                         std::chrono::seconds(60), env);
  EXPECT_EQ(df.exit_code, 1) << df.out << df.err;
  EXPECT_EQ(drains(), 2u) << slurm.calls();
  // fail: scontrol is not run; the exit status alone makes slurmd drain the node.
  auto f = node.gpureap({"slurm", "epilog", "--when-held", "fail", "--deadline", "10s"},
                        std::chrono::seconds(60), env);
  EXPECT_EQ(f.exit_code, 1) << f.out << f.err;
  EXPECT_EQ(drains(), 2u) << slurm.calls();
  // A drain that fails (the controller refuses): non-zero, so slurmd drains it anyway.
  std::ofstream(slurm.path("scontrol.rc")) << "1\n";
  auto refused =
      node.gpureap({"slurm", "epilog", "--deadline", "10s"}, std::chrono::seconds(60), env);
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.out.find("scontrol: "), std::string::npos) << refused.out;
}

TEST(SlurmCommand, SlurmsVariablesAreCheckedAsInput) {
  SimNode node;
  FakeSlurm slurm(node);
  auto none = node.gpureap({"slurm", "epilog"}, std::chrono::seconds(60), slurm.env());
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("SLURM_JOB_ID is not set"), std::string::npos) << none.err;
  auto bad = node.gpureap({"slurm", "epilog"}, std::chrono::seconds(60),
                          slurm.env({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "gpu0"}}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("SLURM_JOB_GPUS 'gpu0'"), std::string::npos) << bad.err;
  // A GPU the node does not have: nothing can be verified; drained, and said why.
  auto missing =
      node.gpureap({"slurm", "epilog", "--when-held", "drain-fail"}, std::chrono::seconds(60),
                   slurm.env({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "12"}}));
  EXPECT_EQ(missing.exit_code, 3) << missing.out << missing.err;
  EXPECT_NE(slurm.calls().find("reason=gpureap: GPUs not verified (after job 42): the job's GPUs "
                               "(minor:12)"),
            std::string::npos)
      << slurm.calls();
}

TEST(SlurmCommand, APrologOnADirtyGpuDrainsAndFailsUnlessOrphansMayBeFreed) {
  SimNode node;
  FakeSlurm slurm(node);
  // An engine worker's title: an orphan the prolog may free unattended (docs/orphans.md).
  auto orphans = node.hold(
      {"--gpu", "1", "--bytes", "8GiB", "--children", "1", "--orphan", "--comm", "VLLM::Worker_TP0"});
  auto env = slurm.env({{"SLURM_JOB_ID", "43"}, {"SLURM_JOB_GPUS", "1"}});
  auto dirty = node.gpureap({"slurm", "prolog"}, std::chrono::seconds(60), env);
  EXPECT_EQ(dirty.exit_code, 1) << dirty.out << dirty.err;
  EXPECT_NE(slurm.calls().find("reason=gpureap: GPU 1 live_holder 8.00 GiB pid "),
            std::string::npos)
      << slurm.calls();
  EXPECT_NE(slurm.calls().find("(before job 43)"), std::string::npos) << slurm.calls();
  EXPECT_TRUE(alive(orphans.holders[0].first));
  auto freed = node.gpureap({"slurm", "prolog", "--free-orphans"}, std::chrono::seconds(60), env);
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(orphans.holders[0].first));
}

TEST(SlurmCommand, HealthDrainsKeepsResumesAndLeavesOthersAlone) {
  SimNode node;
  FakeSlurm slurm(node);
  auto stuck = node.hold({"--gpu", "3", "--bytes", "20GiB", "--stuck"});
  ASSERT_EQ(::kill(stuck.holders[0].first, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(stuck.holders[0].first); }));
  auto health = [&] {
    return node.gpureap({"--json", "slurm", "health", "--persist", "200ms"},
                        std::chrono::seconds(60), slurm.env());
  };
  auto drained = health();
  EXPECT_EQ(drained.exit_code, 1) << drained.out << drained.err;
  EXPECT_EQ(drained.json()["node"]["action"], "drained");
  EXPECT_NE(slurm.calls().find("state=drain|reason=gpureap: GPU 3 driver_held "), std::string::npos)
      << slurm.calls();
  slurm.set_state("IDLE+DRAIN", "gpureap: GPU 3 driver_held 20.0 GiB");
  EXPECT_EQ(health().json()["node"]["action"], "kept_drained");
  slurm.set_state("IDLE+DRAIN", "Kill task failed");
  EXPECT_EQ(health().json()["node"]["action"], "left_alone");
  auto reset = run_command({node.dir() + "/bin/nvidia-smi", "-r", "-i", "3"}, node.env(),
                           std::chrono::seconds(30));
  ASSERT_EQ(reset.exit_code, 0) << reset.out;
  EXPECT_EQ(health().json()["node"]["action"], "left_alone");  // still someone else's
  slurm.set_state("MIXED+DRAIN", "gpureap: GPU 3 driver_held 20.0 GiB");
  auto resumed = health();
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(resumed.json()["node"]["action"], "resumed");
  EXPECT_NE(slurm.calls().find("update|nodename=gpu01|state=resume\n"), std::string::npos)
      << slurm.calls();
  slurm.set_state("IDLE", "");
  EXPECT_EQ(health().json()["node"]["action"], "none");
}

}  // namespace
}  // namespace gpureap::e2e
