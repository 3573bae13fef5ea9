// MIG (issue 25), on the simulated node: a container's view of one MIG device, and
// several compute instances sharing one GPU instance.

#include <gtest/gtest.h>

#include <signal.h>

#include <set>

#include "harness.h"

namespace gpureap::e2e {
namespace mig_sharing_test {

using json = nlohmann::json;
using namespace std::chrono_literals;


std::vector<pid_t> holder_pids(const json& gpu) {
  std::vector<pid_t> pids;
  for (const auto& h : gpu.at("holders")) pids.push_back(h.at("pid").get<pid_t>());
  return pids;
}

// Inside a container given MIG device 0/gi1/ci0 (nvidia-container-toolkit): /dev holds
// nvidia0 and that MIG device's capability nodes only, NVML lists GPU 0 in MIG mode with
// that one MIG device (the physical GPU's own memory and process queries fail with
// NO_PERMISSION), and mig-minors (procfs) still lists every capability. The container
// shares the host's PID namespace here (the simulator has no pid translation for a
// holder inside a namespace), so the other MIG device's holder is a process gpureap sees.
TEST(MigContainer, StatusFreeAndCheckSeeOnlyTheContainersMigDevice) {
  SimNode node({"--gpus", "2", "--memory", "96GiB", "--mig", "0:2"});
  const std::string view = node.dir() + "/container";
  auto c = node.sim({"container", "--dir", node.dir(), "--out", view, "--gpu", "0", "--mig", "1"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::map<std::string, std::string> inside = {{"GPUREAP_DEV_DIR", view + "/dev"}};

  // The container's job: a worker whose server died (orphaned), on its MIG device.
  auto mine = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB", "--children", "1",
                         "--same-gpu", "--orphan"});
  const pid_t worker = mine.holders.at(0).first;
  auto other = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});  // another container's
  auto whole = node.hold({"--gpu", "1", "--bytes", "2GiB"});  // a GPU not given to it

  auto s = node.gpureap({"--json", "status"}, 60s, inside);
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const json status = s.json();
  ASSERT_EQ(status["gpus"].size(), 1u) << "only the container's MIG device: " << status["gpus"].dump(1);
  const json* mig = gpu_of(status, "0/gi1/ci0");
  ASSERT_NE(mig, nullptr) << s.out;
  EXPECT_EQ(holder_pids(*mig), std::vector<pid_t>{worker}) << mig->dump(1);
  EXPECT_EQ((*mig)["memory"]["used_bytes"], 6ULL << 30) << mig->dump(1);
  EXPECT_TRUE((*mig)["uuid"].get<std::string>().starts_with("MIG-"));
  EXPECT_EQ(s.out.find("0/gi2"), std::string::npos) << "the invisible MIG device: " << s.out;
  EXPECT_EQ(s.out.find("\"error\""), std::string::npos) << s.out;

  auto text = node.gpureap({"status"}, 60s, inside);
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("GPU 0/gi1/ci0  NVIDIA H200 MIG"), std::string::npos) << text.out;
  for (const char* false_word : {"0/gi2", "Insufficient", "NO_PERMISSION", "error"})
    EXPECT_EQ(text.out.find(false_word), std::string::npos) << false_word << " in\n" << text.out;
  // Not asserted (docs/mig.md, "Not done yet"): sharing the host's PID namespace, the
  // container sees the other MIG device's holder, and status calls it a holder of GPU 0's
  // node "but no MIG device of it": its capabilities are not in this /dev, so gpureap cannot
  // tell them from no capability. In a container's own PID namespace it is not seen at all.

  auto problem = node.gpureap({"status", "--check"}, 60s, inside);
  EXPECT_EQ(problem.exit_code, 1) << problem.out << problem.err;
  EXPECT_NE(problem.out.find("orphaned memory on GPU 0/gi1/ci0"), std::string::npos) << problem.out;

  auto f = node.gpureap({"--json", "free", "--gpu", "0/gi1/ci0", "--yes"}, 60s, inside);
  EXPECT_EQ(f.exit_code, 0) << f.out << f.err;
  const json freed = f.json();
  ASSERT_EQ(freed["gpus"].size(), 1u) << freed.dump(1);
  EXPECT_EQ(freed["gpus"][0]["index"], "0/gi1/ci0");
  EXPECT_EQ(freed["gpus"][0]["freed"], true) << freed["gpus"].dump(1);
  EXPECT_FALSE(alive(worker));
  EXPECT_TRUE(alive(other.holders[0].first)) << "another container's MIG device";
  EXPECT_TRUE(alive(whole.holders[0].first)) << "a GPU the container was not given";

  auto clean = node.gpureap({"status", "--check"}, 60s, inside);
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_TRUE(clean.out.starts_with("clean")) << clean.out;
}

// One GPU instance with two compute instances (`node --mig 0:1x2`): two MIG devices,
// 0/gi1/ci0 and 0/gi1/ci1, each with its own CI capability and the GI's shared one, and
// one memory (NVML reports the GPU instance's figures for each).
TEST(MigComputeInstances, EachHolderIsItsComputeInstancesAndFreeingOneSaysTheMemoryIsShared) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:1x2"});
  auto zero = node.hold({"--gpu", "0", "--mig", "1", "--ci", "0", "--bytes", "6GiB"});
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--ci", "1", "--bytes", "4GiB"});
  const pid_t p0 = zero.holders.at(0).first, p1 = one.holders.at(0).first;

  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  const json status = s.json();
  ASSERT_EQ(status["gpus"].size(), 2u) << status["gpus"].dump(1);
  const json* ci0 = gpu_of(status, "0/gi1/ci0");
  const json* ci1 = gpu_of(status, "0/gi1/ci1");
  ASSERT_NE(ci0, nullptr) << s.out;
  ASSERT_NE(ci1, nullptr) << s.out;
  EXPECT_EQ(holder_pids(*ci0), std::vector<pid_t>{p0}) << ci0->dump(1);
  EXPECT_EQ(holder_pids(*ci1), std::vector<pid_t>{p1}) << ci1->dump(1);
  EXPECT_EQ((*ci0)["memory"]["used_bytes"], 10ULL << 30) << "the GPU instance's memory";
  EXPECT_EQ((*ci1)["memory"]["used_bytes"], 10ULL << 30) << "the GPU instance's memory";
  EXPECT_NE((*ci0)["uuid"], (*ci1)["uuid"]);

  const std::string listed = s.out;
  EXPECT_EQ(listed.find("driver_held"), std::string::npos)
      << "ci1's holder explains the GPU instance's memory on ci0 too:\n" << listed;

  // The GPU instance selects both compute instances.
  auto dry = node.gpureap({"--json", "free", "--gpu", "0/gi1", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  const json dry_plan = dry.json();
  std::set<pid_t> planned;
  for (const auto& t : dry_plan["plan"]["targets"]) planned.insert(t["pid"].get<pid_t>());
  EXPECT_EQ(planned, (std::set<pid_t>{p0, p1})) << dry.out;

  // ci0 alone: only its holder is signalled. The figures are the GPU instance's, which
  // ci1's holder keeps using: the release is verified as on a whole GPU with a holder left
  // alone (its 4 GiB above the baseline), never as "back to baseline", and the memory
  // left is not called driver-held.
  auto r = node.gpureap({"--json", "free", "--gpu", "0/gi1/ci0", "--yes", "--timeout", "10s"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(alive(p0));
  EXPECT_TRUE(alive(p1)) << "the other compute instance's holder";
  const json result = r.json();
  ASSERT_EQ(result["gpus"].size(), 1u) << result.dump(1);
  const json& g = result["gpus"][0];
  EXPECT_EQ(g["index"], "0/gi1/ci0");
  EXPECT_EQ(g["left_alone_bytes"], 4ULL << 30) << g.dump(1);
  EXPECT_EQ(g["memory_after_bytes"], 4ULL << 30) << g.dump(1);
  EXPECT_EQ(g["freed"], true) << g.dump(1);
  EXPECT_TRUE(result["leftovers"].empty()) << result.dump(1);

  auto both = node.gpureap({"--json", "free", "--gpu", "0/gi1", "--yes"});
  EXPECT_EQ(both.exit_code, 0) << both.out << both.err;
  EXPECT_FALSE(alive(p1));
  const auto both_doc = both.json();  // a named value: range-for over a temporary's member dangles
  for (const auto& g : both_doc["gpus"]) EXPECT_EQ(g["freed"], true) << both.out;
}

// W3-05: `wait` on a compute instance follows free's rule: what the other compute
// instance's holders use is theirs (re-read at every poll), so ci0 is free while ci1's
// tenant works, and the message says what was counted as theirs. Selecting the whole GPU
// instance waits on its memory.
TEST(MigComputeInstances, W3_05_WaitOnAComputeInstanceCountsItsSiblingsHoldersAsTheirs) {
  SimNode node({"--gpus", "2", "--memory", "80GiB", "--mig", "0:1x2"});
  auto tenant = node.hold({"--gpu", "0", "--mig", "1", "--ci", "1", "--bytes", "6GiB"});

  auto w = node.gpureap({"--no-agent", "wait", "--gpu", "0/gi1/ci0", "--timeout", "3s"});
  EXPECT_EQ(w.exit_code, 0) << w.out << w.err;
  EXPECT_NE(w.out.find("6.00 GiB in use by the other compute instances' holders"),
            std::string::npos)
      << w.out;
  auto j = node.gpureap({"--no-agent", "--json", "wait", "--gpu", "0/gi1/ci0", "--timeout", "0"});
  EXPECT_EQ(j.exit_code, 0) << j.out << j.err;
  EXPECT_EQ(j.json()["gpus"][0]["siblings_bytes"], 6ULL << 30) << j.out;

  // The whole GPU instance: both compute instances selected, nothing is anyone else's.
  auto gi = node.gpureap({"--no-agent", "wait", "--gpu", "0/gi1", "--timeout", "300ms"});
  EXPECT_EQ(gi.exit_code, 5) << gi.out << gi.err;

  // A holder on ci0 itself is waited for, and its exit ends the wait.
  auto own = node.hold({"--gpu", "0", "--mig", "1", "--ci", "0", "--bytes", "2GiB"});
  auto held = node.gpureap({"--no-agent", "wait", "--gpu", "0/gi1/ci0", "--timeout", "300ms"});
  EXPECT_EQ(held.exit_code, 5) << held.out << held.err;
  EXPECT_NE(held.err.find("of it what the other compute instances' holders use"),
            std::string::npos)
      << held.err;
  ASSERT_EQ(::kill(own.holders.at(0).first, SIGKILL), 0);
  auto after = node.gpureap({"--no-agent", "wait", "--gpu", "0/gi1/ci0", "--timeout", "10s"});
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
  (void)tenant;
}

}  // namespace mig_sharing_test
}  // namespace gpureap::e2e
