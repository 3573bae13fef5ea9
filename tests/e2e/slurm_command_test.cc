// `gpureap slurm prolog|epilog|health` on the simulated node with a stand-in scontrol (a
// shell script that records its arguments and answers `show node` from a file): the
// exit statuses, what is asked of Slurm and when, without a Slurm installation. The
// real daemons are in slurm_test.cc.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "harness.h"
#include "watch_child.h"
#include "proc/cgroup_fs.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace slurm_command_test {

// Job ids of this test process's own (harness.h own_job_id): an epilog frees every process
// on the machine with its SLURM_JOB_ID, and other tests run at once under `ctest -j`.
const std::string kJob42 = own_job_id(42), kJob43 = own_job_id(43), kJob44 = own_job_id(44),
                  kJob90042 = own_job_id(142), kJob90043 = own_job_id(143),
                  kJob90060 = own_job_id(160);

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

// A job running on this node, as the epilog and the health check tell it: a process
// named slurmstepd whose command line is "slurmstepd: [<id>.0]" (a copy of sleep exec'd
// under that argv[0]). Job ids far above the real-Slurm tests' own. Killed by pid.
class RunningJob {
 public:
  RunningJob(const SimNode& node, const std::string& id) {
    const std::string bin = node.dir() + "/slurmstepd";
    std::filesystem::copy_file("/bin/sleep", bin,
                               std::filesystem::copy_options::overwrite_existing);
    ::chmod(bin.c_str(), 0755);
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_ = spawn_child({"/bin/bash", "-c", "exec -a 'slurmstepd: [" + id + ".0]' " + bin + " 600"},
                       {}, null, null, true);
    ::close(null);
    // Running once its command line is the step's (after bash's exec).
    EXPECT_TRUE(SimNode::eventually([&] {
      std::ifstream in("/proc/" + std::to_string(pid_) + "/cmdline");
      std::string cmdline(std::istreambuf_iterator<char>(in), {});
      return cmdline.starts_with("slurmstepd: [" + id + ".0]");
    }));
  }
  ~RunningJob() {
    ::kill(pid_, SIGKILL);  // our own unreaped child: the pid is still ours
    ::waitpid(pid_, nullptr, 0);
  }
  RunningJob(const RunningJob&) = delete;
  RunningJob& operator=(const RunningJob&) = delete;

 private:
  pid_t pid_ = -1;
};

// A cgroup v2 directory of the test's own (a stand-in for slurmstepd.scope), removed
// with what is below it at the end, once its members (the test's holders) are gone.
// Declared before the SimNode, so that the node's holders are killed first.
class JobCgroups {
 public:
  JobCgroups() {
    auto mount = proc::cgroup2_mount("/proc");
    if (!mount || ::geteuid() != 0) return;
    name_ = "gpureap-e2e-slurm-" + std::to_string(::getpid());
    if (::mkdir((mount->mount_point + "/" + name_).c_str(), 0755) != 0)
      name_.clear();
    else
      root_ = mount->mount_point + "/" + name_;
  }
  ~JobCgroups() {
    if (root_.empty()) return;
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec)) dirs.push_back(it->path());
    std::sort(dirs.begin(), dirs.end(), [](auto& a, auto& b) { return a.size() > b.size(); });
    dirs.push_back(root_);
    for (const auto& d : dirs)
      SimNode::eventually([&] { return ::rmdir(d.c_str()) == 0 || errno == ENOENT; });
  }
  bool usable() const { return !root_.empty(); }
  /// A name below the cgroup2 mount, as `gpureap-sim hold --cgroup` takes it.
  std::string step(const std::string& job) const { return name_ + "/job_" + job + "/step_0"; }

 private:
  std::string name_, root_;
};

TEST(SlurmCommand, AnEpilogWithNothingLeftAsksNothingOfSlurm) {
  SimNode node;
  FakeSlurm slurm(node);
  auto r = node.gpureap({"--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60),
                        slurm.env({{"SLURM_JOB_ID", kJob42}, {"SLURM_JOB_GPUS", "0"}}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Nothing to do: no leftover of job " + kJob42), std::string::npos) << r.out;
  EXPECT_EQ(slurm.calls(), "");
}

// Issue 35: the job's server takes 6 s to give its memory back after it is killed (a
// release, not driver-held memory): the epilog waits through it within its deadline and
// neither drains the node nor fails. The default release budget (at least 30 s) applies.
TEST(SlurmCommand, AnEpilogDoesNotDrainDuringARelease) {
  SimNode node;
  FakeSlurm slurm(node);
  node.hold({"--gpu", "2", "--bytes", "60GiB", "--release-delay", "6s", "--daemon"}, false,
            {{"SLURM_JOB_ID", kJob42}});
  auto r = node.gpureap({"slurm", "epilog"}, std::chrono::seconds(90),
                        slurm.env({{"SLURM_JOB_ID", kJob42}, {"SLURM_JOB_GPUS", "2"}}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(slurm.calls().find("state=drain"), std::string::npos) << slurm.calls();
  EXPECT_EQ(r.out.find("driver_held"), std::string::npos) << r.out;
}

TEST(SlurmCommand, WhenHeldDecidesDrainAndExitStatus) {
  SimNode node;
  FakeSlurm slurm(node);
  node.hold({"--gpu", "2", "--bytes", "12GiB", "--stuck", "--daemon"}, false,
            {{"SLURM_JOB_ID", kJob42}});
  auto env = slurm.env({{"SLURM_JOB_ID", kJob42}, {"SLURM_JOB_GPUS", "2"}});
  const std::string reason = "gpureap: GPU 2 driver_held 12.0 GiB (after job " + kJob42 + ")";
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
  auto r = node.gpureap({"--json", "--release-budget", "100ms", "slurm", "epilog", "--deadline", "10s"},
                        std::chrono::seconds(60), env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(slurm.calls(), drain);
  expect_document_head(r.out, "slurm epilog");
  auto j = r.json();
  EXPECT_EQ(j["command"], "slurm epilog");
  EXPECT_EQ(j["job_gpus"], nlohmann::json::array({2}));
  EXPECT_EQ(j["held"][0]["classes"][0], "driver_held");
  EXPECT_EQ(j["node"]["action"], "drained");
  EXPECT_EQ(j["node"]["reason"], reason);
  EXPECT_FALSE(j["free"].is_null());
  // The epilog's signals are in the audit trail under its name and the job's id, with
  // the verdict that drained the node (docs/audit.md).
  {
    std::ifstream audit(node.env().at("GPUREAP_STATE_DIR") + "/audit.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(audit, line);) records.push_back(nlohmann::json::parse(line));
    ASSERT_GE(records.size(), 2u);
    EXPECT_EQ(records.front()["record"], "signal");
    EXPECT_EQ(records.front()["actor"], "slurm-epilog");
    EXPECT_EQ(records.front()["caller"]["job_id"], kJob42);
    EXPECT_EQ(records.front()["gpus"][0]["index"], 2);
    EXPECT_EQ(records.back()["record"], "verdict");
    EXPECT_EQ(records.back()["verdict"], "still_held");
  }
  // drain-fail: drained, and a non-zero exit (Slurm logs an epilog error, keeps our reason).
  auto df = node.gpureap({"--release-budget", "100ms", "slurm", "epilog", "--when-held", "drain-fail", "--deadline", "10s"},
                         std::chrono::seconds(60), env);
  EXPECT_EQ(df.exit_code, 1) << df.out << df.err;
  EXPECT_EQ(drains(), 2u) << slurm.calls();
  // fail: scontrol is not run; the exit status alone makes slurmd drain the node.
  auto f = node.gpureap({"--release-budget", "100ms", "slurm", "epilog", "--when-held", "fail", "--deadline", "10s"},
                        std::chrono::seconds(60), env);
  EXPECT_EQ(f.exit_code, 1) << f.out << f.err;
  EXPECT_EQ(drains(), 2u) << slurm.calls();
  // A drain that fails (the controller refuses): non-zero, so slurmd drains it anyway.
  std::ofstream(slurm.path("scontrol.rc")) << "1\n";
  auto refused =
      node.gpureap({"--release-budget", "100ms", "slurm", "epilog", "--deadline", "10s"}, std::chrono::seconds(60), env);
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.out.find("scontrol: "), std::string::npos) << refused.out;
}

// MIG GRES (issue 25): the job's GPU is a MIG device, named by its MIG UUID in
// CUDA_VISIBLE_DEVICES; SLURM_JOB_GPUS counts MIG GRES ("0"), which taken as a minor
// would be every MIG device of GPU 0. The other MIG device's holder is an orphan the
// epilog would free, were that MIG device the job's.
TEST(SlurmCommand, AnEpilogOnAMigDeviceFreesThatMigDeviceOnly) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  FakeSlurm slurm(node);
  auto status = node.gpureap({"--json", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  std::string uuid;
  const auto gpus = status.json()["gpus"];
  for (const auto& g : gpus)
    if (g["index"] == "0/gi1/ci0") uuid = g["uuid"];
  ASSERT_TRUE(uuid.starts_with("MIG-")) << status.out;
  auto job = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB", "--daemon"}, false,
                       {{"SLURM_JOB_ID", kJob42}});
  auto neighbour = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB", "--children", "1", "--same-gpu",
                              "--orphan", "--comm", "VLLM::Worker_TP0"});
  auto r = node.gpureap({"--json", "--release-budget", "100ms", "slurm", "epilog", "--deadline", "20s"},
                        std::chrono::seconds(60),
                        slurm.env({{"SLURM_JOB_ID", kJob42},
                                   {"SLURM_JOB_GPUS", "0"},
                                   {"CUDA_VISIBLE_DEVICES", uuid}}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = r.json();
  EXPECT_EQ(j["job_gpus"], nlohmann::json::array({"0/gi1/ci0"})) << r.out;
  EXPECT_EQ(j["checked_gpus"], nlohmann::json::array({"0/gi1/ci0"})) << r.out;
  EXPECT_TRUE(j["held"].empty()) << r.out;
  EXPECT_FALSE(alive(job.holders[0].first));
  EXPECT_TRUE(alive(neighbour.holders[0].first)) << "the other MIG device's orphan";
  EXPECT_EQ(slurm.calls(), "");
  // Said: SLURM_JOB_GPUS was not taken as device minors.
  EXPECT_NE(r.out.find("SLURM_JOB_GPUS '0' left out"), std::string::npos) << r.out;
}

TEST(SlurmCommand, SlurmsVariablesAreCheckedAsInput) {
  SimNode node;
  FakeSlurm slurm(node);
  auto none = node.gpureap({"--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60), slurm.env());
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("SLURM_JOB_ID is not set"), std::string::npos) << none.err;
  auto bad = node.gpureap({"--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60),
                          slurm.env({{"SLURM_JOB_ID", kJob42}, {"SLURM_JOB_GPUS", "gpu0"}}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("SLURM_JOB_GPUS 'gpu0'"), std::string::npos) << bad.err;
  // A GPU the node does not have: nothing can be verified; drained, and said why.
  auto missing =
      node.gpureap({"--release-budget", "100ms", "slurm", "epilog", "--when-held", "drain-fail"}, std::chrono::seconds(60),
                   slurm.env({{"SLURM_JOB_ID", kJob42}, {"SLURM_JOB_GPUS", "12"}}));
  EXPECT_EQ(missing.exit_code, 3) << missing.out << missing.err;
  EXPECT_NE(slurm.calls().find("reason=gpureap: GPUs not verified (after job " + kJob42 +
                               "): the job's GPUs (minor:12)"),
            std::string::npos)
      << slurm.calls();
}

TEST(SlurmCommand, APrologOnADirtyGpuDrainsAndFailsUnlessOrphansMayBeFreed) {
  SimNode node;
  FakeSlurm slurm(node);
  // An engine worker's title, its server gone before anyone watched: an orphan by
  // inference (one look), which the prolog reports and never frees (docs/orphans.md).
  auto orphans = node.hold(
      {"--gpu", "1", "--bytes", "8GiB", "--children", "1", "--orphan", "--comm", "VLLM::Worker_TP0"});
  auto env = slurm.env({{"SLURM_JOB_ID", kJob43}, {"SLURM_JOB_GPUS", "1"}});
  auto dirty = node.gpureap({"slurm", "prolog"}, std::chrono::seconds(60), env);
  EXPECT_EQ(dirty.exit_code, 1) << dirty.out << dirty.err;
  EXPECT_NE(slurm.calls().find("reason=gpureap: GPU 1 live_holder 8.00 GiB pid "),
            std::string::npos)
      << slurm.calls();
  EXPECT_NE(slurm.calls().find("(before job " + kJob43 + ")"), std::string::npos) << slurm.calls();
  EXPECT_TRUE(alive(orphans.holders[0].first));
  const std::string audit_file = node.env().at("GPUREAP_STATE_DIR") + "/audit.jsonl";
  EXPECT_FALSE(std::filesystem::exists(audit_file)) << "the first prolog signalled nothing";
  auto inferred = node.gpureap({"slurm", "prolog", "--free-orphans"}, std::chrono::seconds(60), env);
  EXPECT_EQ(inferred.exit_code, 1) << inferred.out << inferred.err;
  EXPECT_TRUE(alive(orphans.holders[0].first)) << "an inference is never acted on unattended";
  EXPECT_FALSE(std::filesystem::exists(audit_file)) << "nothing signalled on an inference";

  // The same shape on GPU 2, its server's death seen by the agent: witnessed, freed.
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "100ms"});
  ASSERT_TRUE(agent.next_line(std::chrono::seconds(30))) << agent.transcript();
  auto witnessed = node.crash_watched(
      {"--gpu", "2", "--bytes", "8GiB", "--children", "1", "--comm", "VLLM::Worker_TP0"});
  ASSERT_TRUE(SimNode::eventually([&] {
    auto hs = holders_by_pid(node.gpureap({"--no-agent", "--json", "status", "--gpu", "2"}).json());
    auto it = hs.find(witnessed.holders[0].first);
    return it != hs.end() && it->second["provenance"] == "witnessed";
  })) << agent.transcript() << node.gpureap({"--no-agent", "status", "--gpu", "2"}).out;
  auto env2 = slurm.env({{"SLURM_JOB_ID", kJob44}, {"SLURM_JOB_GPUS", "2"}});
  auto freed = node.gpureap({"slurm", "prolog", "--free-orphans"}, std::chrono::seconds(60), env2);
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(witnessed.holders[0].first));
  EXPECT_TRUE(alive(orphans.holders[0].first));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  std::ifstream audit(audit_file);
  std::string line;
  ASSERT_TRUE(std::getline(audit, line));
  auto record = nlohmann::json::parse(line);
  EXPECT_EQ(record["actor"], "slurm-prolog");
  EXPECT_EQ(record["caller"]["job_id"], kJob44);
  EXPECT_EQ(record["target"]["pid"], witnessed.holders[0].first);
}

TEST(SlurmCommand, HealthDrainsKeepsResumesAndLeavesOthersAlone) {
  SimNode node;
  FakeSlurm slurm(node);
  auto stuck = node.hold({"--gpu", "3", "--bytes", "20GiB", "--stuck"});
  ASSERT_EQ(::kill(stuck.holders[0].first, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(stuck.holders[0].first); }));
  auto health = [&] {
    return node.gpureap({"--json", "--release-budget", "100ms", "slurm", "health", "--persist", "200ms"},
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

// W2-11: a worker of running job 90043 that lost its environment (apptainer --cleanenv,
// env -i) and its parent is still job 90043's by its cgroup: job 90042's epilog on the
// same GPU leaves it alone, and the health check does not drain the node for it.
TEST(SlurmCommand, W2_11_ARunningJobsCgroupKeepsItsWorkerOutOfOtherJobsLeftovers) {
  JobCgroups cgroups;
  if (!cgroups.usable()) GTEST_SKIP() << "needs root and a writable cgroup v2";
  SimNode node;
  FakeSlurm slurm(node);
  std::optional<RunningJob> running;
  running.emplace(node, kJob90043);
  auto worker = node.hold({"--gpu", "0", "--bytes", "4GiB", "--children", "1", "--orphan",
                           "--cgroup", cgroups.step(kJob90043)});
  const pid_t pid = worker.holders.at(0).first;
  auto health = node.gpureap({"--json", "--release-budget", "100ms", "slurm", "health", "--persist", "100ms"},
                             std::chrono::seconds(60), slurm.env());
  EXPECT_EQ(health.exit_code, 0) << health.out << health.err;
  expect_document_head(health.out, "slurm health");
  EXPECT_TRUE(health.json()["healthy"]) << health.out;
  auto epilog = node.gpureap({"--json", "--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60),
                             slurm.env({{"SLURM_JOB_ID", kJob90042}, {"SLURM_JOB_GPUS", "0"}}));
  EXPECT_EQ(epilog.exit_code, 0) << epilog.out << epilog.err;
  EXPECT_TRUE(alive(pid)) << epilog.out;
  EXPECT_EQ(slurm.calls().find("state=drain"), std::string::npos) << slurm.calls();
  // Once job 90043 has ended, its own epilog frees it.
  running.reset();
  auto own = node.gpureap({"--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60),
                          slurm.env({{"SLURM_JOB_ID", kJob90043}, {"SLURM_JOB_GPUS", "0"}}));
  EXPECT_EQ(own.exit_code, 0) << own.out << own.err;
  EXPECT_FALSE(alive(pid)) << own.out;
}

// W2-12: a worker of job 90042 on a GPU outside SLURM_JOB_GPUS (no ConstrainDevices) whose
// main thread exited: its environment and command line are read from its live thread, so
// `free --env` and `--match` plan it and the epilog frees it.
TEST(SlurmCommand, W2_12_AZombieLeadersEnvironmentIsReadFromALiveThread) {
  SimNode node;
  FakeSlurm slurm(node);
  auto zombie = node.hold({"--gpu", "1", "--bytes", "6GiB", "--zombie-leader"}, false,
                          {{"SLURM_JOB_ID", kJob90042}});
  const pid_t pid = zombie.holders.at(0).first;
  ASSERT_TRUE(SimNode::eventually([&] { return state_of(pid) == 'Z'; }));
  for (const auto& selector : std::vector<std::vector<std::string>>{
           {"--env", "SLURM_JOB_ID=" + kJob90042}, {"--match", "gpureap-sim hold"}}) {
    std::vector<std::string> args = {"--no-agent", "--json", "free", "--gpu", "1", "--dry-run"};
    args.insert(args.end(), selector.begin(), selector.end());
    auto plan = node.gpureap(args);
    EXPECT_EQ(plan.exit_code, 0) << selector[0] << plan.out << plan.err;
    auto j = plan.json();
    ASSERT_EQ(j["plan"]["targets"].size(), 1u) << selector[0] << j["plan"].dump(1);
    EXPECT_EQ(j["plan"]["targets"][0]["pid"], pid);
  }
  auto epilog = node.gpureap({"--release-budget", "100ms", "slurm", "epilog"}, std::chrono::seconds(60),
                             slurm.env({{"SLURM_JOB_ID", kJob90042}, {"SLURM_JOB_GPUS", "0"}}));
  EXPECT_EQ(epilog.exit_code, 0) << epilog.out << epilog.err;
  EXPECT_EQ(epilog.out.find("Nothing to do"), std::string::npos) << epilog.out;
  auto after = node.gpureap({"--no-agent", "--json", "status", "--gpu", "1"});
  // Holders are listed per GPU (the old loop read a top-level "holders", which does not
  // exist, from a dangling temporary: it could not fail).
  const auto after_doc = after.json();
  ASSERT_EQ(after_doc.at("gpus").size(), 1u) << after.out;
  for (const auto& h : after_doc.at("gpus").at(0).at("holders")) EXPECT_NE(h.at("pid"), pid) << after.out;
}

// W2-13: while a free holds the lock (an epilog freeing a finished job's worker), the
// health check waits for it, then looks; a free that outlasts the health check's deadline
// makes it skip: exit 0, nothing asked of Slurm. Never a drain for memory being freed.
TEST(SlurmCommand, W2_13_HealthWaitsForAFreeInProgressOrSkips) {
  SimNode node;
  FakeSlurm slurm(node);
  auto leftover = node.hold({"--gpu", "2", "--bytes", "3GiB"}, false, {{"SLURM_JOB_ID", kJob90060}});
  const pid_t pid = leftover.holders.at(0).first;
  // The epilog's lock, held here: the same file, the same flock.
  const std::string lock_path = node.env().at("GPUREAP_STATE_DIR") + "/free.lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  // A deadline that leaves no time to wait: skipped.
  auto skipped =
      node.gpureap({"--json", "--release-budget", "100ms", "slurm", "health", "--persist", "100ms", "--deadline", "1s"},
                   std::chrono::seconds(60), slurm.env());
  EXPECT_EQ(skipped.exit_code, 0) << skipped.out << skipped.err;
  EXPECT_FALSE(skipped.json()["skipped"].is_null()) << skipped.out;
  EXPECT_FALSE(skipped.json()["healthy"]) << skipped.out;
  EXPECT_EQ(slurm.calls(), "");
  // With time to wait: it waits on the lock (it has the file open), the "epilog" frees the
  // worker and lets go, then the health check looks and finds the node healthy.
  std::map<std::string, std::string> env = node.env();
  for (const auto& [k, v] : slurm.env()) env[k] = v;
  const std::string out_path = node.dir() + "/health.out";
  int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_t health = spawn_child({GPUREAP_BIN, "--json", "slurm", "health", "--persist", "100ms"}, env,
                             out, out, true);
  ::close(out);
  auto waits_on_lock = [&] {
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(health) + "/fd", ec))
      if (std::filesystem::read_symlink(fd.path(), ec) == lock_path) return true;
    return false;
  };
  EXPECT_TRUE(SimNode::eventually(waits_on_lock));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(SimNode::eventually([&] { return !alive(pid); }));
  ::close(lock);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(health, &wstatus, 0), health);
  const std::string report = read_file(out_path);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << report;
  EXPECT_NE(report.find("\"healthy\": true"), std::string::npos) << report;
  EXPECT_EQ(slurm.calls().find("state=drain"), std::string::npos) << slurm.calls();
}

// W2-15: a GPU selector the node does not have, or any other mistake in the health
// arguments (a typo in GPUREAP_HEALTH_ARGS), is the site's usage error: exit 2 naming the
// option, and the node is neither drained nor resumed for it.
TEST(SlurmCommand, W2_15_AHealthUsageErrorNeverDrains) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  FakeSlurm slurm(node);
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--gpu", "9"}, {"--persist", "3x"}, {"--persit", "3s"}}) {
    std::vector<std::string> args = {"slurm", "health"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto r = node.gpureap(args, std::chrono::seconds(60), slurm.env());
    EXPECT_EQ(r.exit_code, 2) << bad[0] << r.out << r.err;
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
  slurm.set_state("IDLE+DRAIN", "gpureap: GPU 3 driver_held 20.0 GiB");
  auto drained =
      node.gpureap({"--release-budget", "100ms", "slurm", "health", "--gpu", "9"}, std::chrono::seconds(60), slurm.env());
  EXPECT_EQ(drained.exit_code, 2) << drained.out << drained.err;
  EXPECT_EQ(slurm.calls(), "");
}

}  // namespace
}  // namespace gpureap::e2e
