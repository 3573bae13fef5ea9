// scontrol's node records (saved from Debian's 22.05.8) and real runs of a stand-in
// scontrol (a shell script: exit statuses, output, a hang past the deadline).

#include "cluster/scontrol.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::cluster {
namespace {

using namespace std::chrono_literals;

// `scontrol -o show node localhost` on the test machine, drained by gpureap.
constexpr std::string_view kDrained =
    "NodeName=localhost Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
    "CPULoad=3.36 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:2 NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1 AllocMem=0 FreeMem=20167 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 "
    "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-12-03T06:49:41 "
    "SlurmdStartTime=2026-12-03T13:29:07 LastBusyTime=2026-12-03T13:29:08 "
    "CfgTRES=cpu=2,mem=1M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=gpureap: GPU 3 "
    "driver_held 12.0 GiB [root@2026-12-03T13:29:11]\n";

constexpr std::string_view kIdle =
    "NodeName=localhost Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 State=IDLE ThreadsPerCore=1 "
    "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  CfgTRES=cpu=2 AllocTRES= "
    "CapWatts=n/a\n";

TEST(NodeState, StateAndReasonAreRead) {
  auto drained = parse_node_state(kDrained);
  ASSERT_TRUE(drained) << drained.error().message;
  EXPECT_EQ(drained->state, "IDLE+DRAIN");
  EXPECT_EQ(drained->reason, "gpureap: GPU 3 driver_held 12.0 GiB");
  EXPECT_TRUE(drained->drained());
  EXPECT_TRUE(drained->drained_by_gpureap());
  auto idle = parse_node_state(kIdle);
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->state, "IDLE");
  EXPECT_EQ(idle->reason, "");
  EXPECT_FALSE(idle->drained());
  EXPECT_FALSE(parse_node_state("NodeName=x Arch=y\n"));
}

TEST(NodeState, DrainIsAFlagOrABaseState) {
  for (const char* s :
       {"IDLE+DRAIN", "MIXED+DRAIN", "DRAINED", "DRAINING", "IDLE+DRAIN+NOT_RESPONDING"})
    EXPECT_TRUE((NodeState{s, ""}).drained()) << s;
  for (const char* s : {"IDLE", "MIXED", "DOWN+NOT_RESPONDING", "IDLE+UNDRAINABLE"})
    EXPECT_FALSE((NodeState{s, ""}).drained()) << s;
  // Someone else's reason is not gpureap's, even when it mentions gpureap.
  EXPECT_FALSE((NodeState{"IDLE+DRAIN", "maintenance (gpureap: later)"}).drained_by_gpureap());
  EXPECT_FALSE((NodeState{"IDLE", "gpureap: stale reason"}).drained_by_gpureap());
}

TEST(Scontrol, TheReasonTravelsAsOneArgument) {
  EXPECT_EQ(
      drain_argv("/usr/bin/scontrol", "gpu01", "gpureap: GPU 1 driver_held 12.0 GiB"),
      (std::vector<std::string>{"/usr/bin/scontrol", "update", "nodename=gpu01", "state=drain",
                                "reason=gpureap: GPU 1 driver_held 12.0 GiB"}));
  EXPECT_EQ(
      resume_argv("/usr/bin/scontrol", "gpu01"),
      (std::vector<std::string>{"/usr/bin/scontrol", "update", "nodename=gpu01", "state=resume"}));
}

// A stand-in scontrol: records its arguments, answers `show node` from a file.
class FakeScontrol {
 public:
  explicit FakeScontrol(const std::string& body) {
    std::ofstream(path()) << "#!/bin/sh\n" << body;
    ::chmod(path().c_str(), 0755);
  }
  std::string path() const { return dir_.path("scontrol"); }
  std::string file(const std::string& name) const { return dir_.path(name); }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  TestTempDir dir_{"gpureap-scontrol-test"};
};

TEST(Scontrol, RunsTheProgramAndReadsItsAnswer) {
  FakeScontrol fake(
      "for a in \"$@\"; do printf '%s\\n' \"$a\"; done >> \"$0.args\"\n"
      "[ \"$2\" = show ] && printf 'NodeName=n1 State=MIXED+DRAIN Reason=gpureap: x [root@t]\\n'\n"
      "exit 0\n");
  Scontrol s(fake.path(), 5s);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  auto state = s.show_node("n1", deadline);
  ASSERT_TRUE(state) << state.error().message;
  EXPECT_EQ(state->state, "MIXED+DRAIN");
  EXPECT_EQ(state->reason, "gpureap: x");
  ASSERT_TRUE(s.drain("n1", "gpureap: GPU 0 live_holder 1.00 GiB", deadline));
  EXPECT_EQ(fake.read("scontrol.args"),
            "-o\nshow\nnode\nn1\nupdate\nnodename=n1\nstate=drain\nreason=gpureap: GPU 0 "
            "live_holder 1.00 GiB\n");
}

TEST(Scontrol, FailuresSayWhat) {
  FakeScontrol refusing("echo 'slurm_update error: Invalid node name specified' >&2\nexit 1\n");
  Scontrol s(refusing.path(), 5s);
  auto r = s.resume("nope", std::chrono::steady_clock::now() + 10s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("exit status 1"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("Invalid node name"), std::string::npos) << r.error().message;

  Scontrol missing("/nonexistent/scontrol", 5s);
  auto m = missing.drain("n1", "gpureap: x", std::chrono::steady_clock::now() + 10s);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("cannot run /nonexistent/scontrol"), std::string::npos)
      << m.error().message;
}

TEST(Scontrol, AControllerThatDoesNotAnswerCostsTheTimeoutOnly) {
  FakeScontrol hanging("exec sleep 30\n");
  Scontrol s(hanging.path(), 300ms);
  auto r = s.show_node("n1", std::chrono::steady_clock::now() + 10s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("did not answer in time"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace gpureap::cluster
