// `gpureap free --env NAME=VALUE`, `--ok-if-nothing`, `--wait-lock` and `--deadline`
// end to end: holders with and without the variable, another user's holder and a
// non-dumpable one seen by a caller who is not root, two frees at once.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace free_env_test {

std::vector<std::string> free_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"free", "--json", "--yes"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const nlohmann::json* skipped(const nlohmann::json& j, pid_t pid) {
  for (const auto& s : j["plan"]["skipped"])
    if (s["pid"] == pid) return &s;
  return nullptr;
}

const nlohmann::json* leftover(const nlohmann::json& j, unsigned gpu) {
  for (const auto& l : j["leftovers"])
    if (l["gpu"] == gpu) return &l;
  return nullptr;
}

TEST(FreeEnv, OnlyHoldersWhoseEnvironmentHoldsTheEntryAreFreed) {
  SimNode node;
  auto job = node.hold({"--gpu", "0", "--bytes", "4GiB"}, false, {{"SLURM_JOB_ID", "42"}});
  auto other_job = node.hold({"--gpu", "0", "--bytes", "4GiB"}, false, {{"SLURM_JOB_ID", "420"}});
  auto no_job = node.hold({"--gpu", "0", "--bytes", "4GiB"});
  auto r = node.gpureap(free_args({"--gpu", "0", "--env", "SLURM_JOB_ID=42", "--settle", "0"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(alive(job.holders[0].first));
  EXPECT_TRUE(alive(other_job.holders[0].first));
  EXPECT_TRUE(alive(no_job.holders[0].first));
  auto j = r.json();
  for (pid_t pid : {other_job.holders[0].first, no_job.holders[0].first}) {
    const auto* s = skipped(j, pid);
    ASSERT_NE(s, nullptr) << j.dump(1);
    EXPECT_EQ((*s)["reason"], "its environment lacks SLURM_JOB_ID=42") << s->dump();
  }
  // The freed memory is the job's; what the others hold is left alone, not counted.
  EXPECT_TRUE(j["gpus"][0]["freed"]) << j["gpus"][0].dump();
  EXPECT_GT(j["gpus"][0]["left_alone_bytes"].get<std::uint64_t>(), 0u);
}

TEST(FreeEnv, NoMatchIsNothingToDoAndOkIfNothingMakesItSuccess) {
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "2GiB"}, false, {{"SLURM_JOB_ID", "7"}});
  auto r = node.gpureap(free_args({"--gpu", "1", "--env", "SLURM_JOB_ID=8"}));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  auto ok = node.gpureap(free_args({"--gpu", "1", "--env", "SLURM_JOB_ID=8", "--ok-if-nothing"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  auto idle = node.gpureap({"free", "--yes", "--gpu", "2", "--ok-if-nothing"});
  EXPECT_EQ(idle.exit_code, 0) << idle.out << idle.err;
  EXPECT_NE(idle.out.find("Nothing to do"), std::string::npos) << idle.out;
  EXPECT_TRUE(alive(held.holders[0].first));
  // A malformed entry is a usage error naming the option.
  auto bad = node.gpureap(free_args({"--gpu", "1", "--env", "SLURM_JOB_ID"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--env: 'SLURM_JOB_ID': expected NAME=VALUE"), std::string::npos)
      << bad.err;
}

// The caller is not root: runs gpureap (or the simulator) as uid 65534 with its own
// state directory. Skips where the test is not root or cannot switch users.
class AsNobody : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the caller as another user";
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) missing";
    ::chmod(node_.dir().c_str(), 0755);
    state_ = node_.dir() + "/nobody-state";
    ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
    ASSERT_EQ(::chown(state_.c_str(), 65534, 65534), 0);
    auto probe =
        run_command(nobody({GPUREAP_BIN, "--version"}), node_.env(), std::chrono::seconds(30));
    if (probe.exit_code != 0)
      GTEST_SKIP() << "uid 65534 cannot run " << GPUREAP_BIN << ": " << probe.err;
  }

  static std::vector<std::string> nobody(std::vector<std::string> argv) {
    std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                    "--clear-groups"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  CommandResult gpureap_as_nobody(std::vector<std::string> args) {
    args.insert(args.begin(), GPUREAP_BIN);
    auto env = node_.env();
    env["GPUREAP_STATE_DIR"] = state_;
    return run_command(nobody(args), env, std::chrono::seconds(60));
  }

  // A holder tree started as uid 65534 (detached; `cleanup` ends it with the node).
  pid_t hold_as_nobody(std::vector<std::string> args,
                       const std::map<std::string, std::string>& env) {
    std::vector<std::string> argv = {GPUREAP_SIM_BIN, "hold", "--dir", node_.dir(), "--detach"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto all = node_.env();
    for (const auto& [k, v] : env) all[k] = v;
    auto r = run_command(nobody(argv), all, std::chrono::seconds(30));
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || j["holders"].empty()) {
      ADD_FAILURE() << "hold as nobody failed: " << r.out << r.err;
      return 0;
    }
    return j["holders"][0]["pid"].get<pid_t>();
  }

  SimNode node_;
  std::string state_;
};

TEST_F(AsNobody, AnotherUsersHolderIsLeftAloneAndReported) {
  // root's holder carries the entry; so does nobody's own one.
  auto roots = node_.hold({"--gpu", "0", "--bytes", "4GiB"}, false, {{"SLURM_JOB_ID", "42"}});
  pid_t own = hold_as_nobody({"--gpu", "0", "--bytes", "2GiB"}, {{"SLURM_JOB_ID", "42"}});
  ASSERT_GT(own, 0);
  auto r = gpureap_as_nobody(
      {"free", "--json", "--yes", "--gpu", "0", "--env", "SLURM_JOB_ID=42", "--timeout", "2s"});
  // Its own target's memory is gone; root's holder is left alone, reported, not counted.
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(alive(own));
  EXPECT_TRUE(alive(roots.holders[0].first));
  auto j = r.json();
  const auto* s = skipped(j, roots.holders[0].first);
  ASSERT_NE(s, nullptr) << j.dump(1);
  EXPECT_EQ((*s)["class"], "not_permitted") << s->dump();
  EXPECT_EQ(j["gpus"][0]["left_alone_bytes"].get<std::uint64_t>(), 4ULL << 30);
  // With only root's holder there, nobody has nothing it may free: memory still held.
  auto only_roots = gpureap_as_nobody(
      {"free", "--json", "--yes", "--gpu", "0", "--env", "SLURM_JOB_ID=42", "--timeout", "2s"});
  EXPECT_EQ(only_roots.exit_code, 1) << only_roots.out << only_roots.err;
  auto jr = only_roots.json();
  const auto* l = leftover(jr, 0);
  ASSERT_NE(l, nullptr) << only_roots.out;
  EXPECT_EQ((*l)["class"], "not_permitted");
  EXPECT_TRUE(alive(roots.holders[0].first));
}

TEST_F(AsNobody, AnUnreadableEnvironmentIsReportedNotGuessed) {
  // nobody's own holder, but not dumpable: its environ is root's to read.
  pid_t holder =
      hold_as_nobody({"--gpu", "1", "--bytes", "3GiB", "--non-dumpable"}, {{"SLURM_JOB_ID", "42"}});
  ASSERT_GT(holder, 0);
  auto r = gpureap_as_nobody(
      {"free", "--json", "--yes", "--gpu", "1", "--env", "SLURM_JOB_ID=42", "--timeout", "2s"});
  // Neither "nothing to do" (4) nor freed (0): memory held by a holder it cannot judge.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(alive(holder));
  auto j = r.json();
  const auto* s = skipped(j, holder);
  ASSERT_NE(s, nullptr) << j.dump(1);
  EXPECT_EQ((*s)["class"], "not_permitted") << s->dump();
  std::string reason = (*s)["reason"];
  EXPECT_NE(reason.find("environ) cannot be read"), std::string::npos) << reason;
  EXPECT_NE(reason.find("cannot tell whether it holds SLURM_JOB_ID=42"), std::string::npos)
      << reason;
  // Root reads it, and frees it.
  auto root = node_.gpureap(free_args({"--gpu", "1", "--env", "SLURM_JOB_ID=42", "--settle", "0"}));
  EXPECT_EQ(root.exit_code, 0) << root.out << root.err;
  EXPECT_FALSE(alive(holder));
}

TEST(FreeLockWait, ASecondFreeWaitsForTheFirstInsteadOfFailing) {
  SimNode node;
  auto stubborn = node.hold({"--gpu", "3", "--bytes", "2GiB", "--ignore-term"});
  auto quick = node.hold({"--gpu", "4", "--bytes", "2GiB"});
  // The first free holds the lock through its 3 s grace (its holder ignores SIGTERM).
  CommandResult first, second, at_once;
  std::thread a([&] { first = node.gpureap(free_args({"--gpu", "3", "--grace", "3s"})); });
  // Both later frees start while the first holds the lock: wait until it has written
  // its pid into the lock file.
  ASSERT_TRUE(SimNode::eventually([&] {
    auto state = node.env()["GPUREAP_STATE_DIR"] + "/free.lock";
    FILE* f = std::fopen(state.c_str(), "r");
    if (!f) return false;
    int pid = 0;
    bool ok = std::fscanf(f, "%d", &pid) == 1 && pid > 0 && alive(pid);
    std::fclose(f);
    return ok;
  }));
  at_once = node.gpureap(free_args({"--gpu", "4"}));
  second = node.gpureap(free_args({"--gpu", "4", "--wait-lock", "30s"}));
  a.join();
  EXPECT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(at_once.exit_code, 3) << at_once.out << at_once.err;
  EXPECT_NE(at_once.err.find("another gpureap free"), std::string::npos) << at_once.err;
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_FALSE(alive(stubborn.holders[0].first));
  EXPECT_FALSE(alive(quick.holders[0].first));
}

TEST(FreeDeadline, EverythingFitsInTheDeadline) {
  SimNode node;
  // Driver-held memory never falls: without --deadline the wait would last --timeout or
  // the stall rule's 3 s; a holder that ignores SIGTERM would get SIGKILL after 5 s.
  auto stuck = node.hold({"--gpu", "5", "--bytes", "8GiB", "--stuck", "--ignore-term"});
  // A grace of 100 s and a timeout of 200 s: only --deadline can end the free in under
  // 100 s, so the bounds below tell a cut grace from an uncut one on any machine.
  auto r = node.gpureap(
      free_args({"--gpu", "5", "--grace", "100s", "--timeout", "200s", "--deadline", "1500ms"}),
      std::chrono::seconds(250));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(alive(stuck.holders[0].first));
  auto j = r.json();
  bool killed = false;
  for (const auto& a : j["actions"]) killed = killed || a["signal"] == "SIGKILL";
  EXPECT_TRUE(killed) << j["actions"].dump(1);
  // The grace was cut to fit: SIGKILL before the last reading's reserve (0.5 s).
  for (const auto& a : j["actions"]) {
    if (a["signal"] == "SIGKILL") {
      EXPECT_LT(a["sent_at_seconds"].get<double>(), 50.0) << a.dump();
    }
  }
  // Done by the deadline on a quiet machine (~1.3 s); under ctest -j12 on 2 cores the last
  // two looks ran ~0.25 s past it. Without --deadline it would take 100 s or more (above).
  EXPECT_LT(j["seconds"].get<double>(), 50.0) << j.dump(1);
  ASSERT_NE(leftover(j, 5), nullptr) << j.dump(1);
  // A deadline that is not a duration is a usage error naming the option.
  auto bad = node.gpureap(free_args({"--gpu", "5", "--deadline", "soon"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--deadline"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace gpureap::e2e
