// The gate's policy on inventories built here, its thread against a fake NodeAction,
// and the Slurm action against a stand-in scontrol (a shell script, as scontrol_test's).

#include "agent/gate.h"
#include "agent/gate_modes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <mutex>

#include "agent/slurm_gate.h"
#include "gpu/test_devices.h"
#include "util/test_temp_dir.h"
#include "util/units.h"

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;
using inventory::GpuHolder;
using inventory::GpuView;
using inventory::Inventory;
using inventory::Unexplained;
using report::GateStep;
using Want = GateVerdict::Want;

// A GPU of 96 GiB at its 512 MiB baseline, plus what `holders` use.
GpuView gpu(unsigned index, std::vector<GpuHolder> holders = {}) {
  GpuView v;
  v.info.id = gpu::dev(index);
  v.info.uuid = "GPU-" + std::to_string(index);
  v.info.processes_known = true;
  v.baseline = {512 * kMiB, true};
  for (const auto& h : holders) v.attributed_bytes += h.gpu_bytes.value_or(0);
  v.info.memory = gpu::GpuMemory{96 * kGiB, 512 * kMiB + v.attributed_bytes, std::nullopt};
  v.holders = std::move(holders);
  return v;
}

GpuHolder holder(pid_t pid, std::uint64_t bytes, proc::Provenance provenance) {
  GpuHolder gh;
  gh.holder.id = {pid, 5000u + static_cast<unsigned>(pid)};
  gh.holder.comm = "python3";
  gh.holder.orphaned = provenance != proc::Provenance::none;
  gh.holder.provenance = provenance;
  gh.uses_gpu = true;
  gh.gpu_bytes = bytes;
  return gh;
}

GpuView unexplained(GpuView v, Unexplained cls, std::uint64_t bytes) {
  v.unexplained = cls;
  v.unattributed_bytes = bytes;
  v.info.memory->used += bytes;
  return v;
}

Inventory node(std::vector<GpuView> gpus) {
  Inventory inv;
  inv.gpus = std::move(gpus);
  return inv;
}

TEST(GateVerdict, ClosesOnEvidenceOpensOnAVerifiedLookHoldsOtherwise) {
  // A witnessed orphan's memory: close, naming GPU, class, bytes and pid.
  auto v = judge_gate(node({gpu(0), gpu(1, {holder(42, 8 * kGiB, proc::Provenance::witnessed)})}));
  ASSERT_EQ(v.want, Want::close);
  EXPECT_EQ(report::gate_reason(v.findings),
            "gpureap: GPU 1 orphaned 8.00 GiB pid 42 (gpureap watch)");
  EXPECT_EQ(judge_gate(node({gpu(0, {holder(7, kGiB, proc::Provenance::owned)})})).want,
            Want::close);
  // Driver-held memory: close.
  v = judge_gate(node({unexplained(gpu(0), Unexplained::driver_held, 6 * kGiB)}));
  ASSERT_EQ(v.want, Want::close);
  EXPECT_EQ(report::gate_reason(v.findings), "gpureap: GPU 0 driver_held 6.00 GiB (gpureap watch)");
  // An orphan known only by inference is not acted on unattended, nor is the node
  // verified: nothing changes. Nor while memory is still releasing.
  EXPECT_EQ(judge_gate(node({gpu(0, {holder(9, kGiB, proc::Provenance::inferred)})})).want,
            Want::hold);
  EXPECT_EQ(judge_gate(node({unexplained(gpu(0), Unexplained::releasing, 6 * kGiB)})).want,
            Want::hold);
  // Back at baseline, or held by live holders only: open.
  EXPECT_EQ(judge_gate(node({gpu(0), gpu(1, {holder(11, kGiB, proc::Provenance::none)})})).want,
            Want::open);
  // A GPU not read: neither.
  Inventory blind = node({gpu(0)});
  blind.gpus[0].info.memory.reset();
  EXPECT_EQ(judge_gate(blind).want, Want::hold);
}

// A NodeAction that records its calls; fails while `failing`.
struct Calls {
  std::mutex mutex;
  std::vector<std::string> calls;
  bool failing = false;
};
class FakeAction final : public NodeAction {
 public:
  explicit FakeAction(Calls& c) : c_(c) {}
  std::string_view mode() const override { return "fake"; }
  Result<GateOutcome> close(const GateTarget& t) override {
    return call("close " + t.reason, GateStep::closed);
  }
  Result<GateOutcome> open(const GateTarget&) override { return call("open", GateStep::opened); }

 private:
  Result<GateOutcome> call(std::string what, GateStep step) {
    std::lock_guard lock(c_.mutex);
    c_.calls.push_back(std::move(what));
    if (c_.failing) return fail("the controller does not answer");
    return GateOutcome{step, "node n1", "", false};
  }
  Calls& c_;
};

TEST(Gate, ClosesOnceKeepsClosedDuringTheReleaseAndOpensOnAVerifiedLook) {
  Calls calls;
  std::mutex m;
  std::vector<report::GateNotice> notices;
  std::vector<std::unique_ptr<NodeAction>> actions;
  actions.push_back(std::make_unique<FakeAction>(calls));
  Gate gate(std::move(actions), [&](const report::GateNotice& n) {
    std::lock_guard lock(m);
    notices.push_back(n);
  });
  const auto leak = node({gpu(0, {holder(42, 8 * kGiB, proc::Provenance::witnessed)})});
  for (int i = 0; i < 3; ++i) {  // every look says so; scontrol is asked once
    gate.after_look(leak);
    gate.wait_idle();
  }
  // The orphan is freed: its memory is releasing, then back at baseline.
  gate.after_look(node({unexplained(gpu(0), Unexplained::releasing, 8 * kGiB)}));
  gate.wait_idle();
  {
    std::lock_guard lock(calls.mutex);
    EXPECT_EQ(calls.calls,
              std::vector<std::string>{"close gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)"});
  }
  gate.after_look(node({gpu(0)}));
  gate.wait_idle();
  gate.after_look(node({gpu(0)}));
  gate.wait_idle();
  EXPECT_EQ(gate.take_done().size(), 2u);  // gpureap_gate_seconds: the close and the open
  EXPECT_TRUE(gate.take_done().empty());
  std::lock_guard lock(calls.mutex);
  ASSERT_EQ(calls.calls.size(), 2u);
  EXPECT_EQ(calls.calls[1], "open");
  std::lock_guard lock2(m);
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_EQ(notices[0].step, GateStep::closed);
  EXPECT_EQ(notices[0].mode, "fake");
  EXPECT_EQ(notices[1].step, GateStep::opened);
}

// A per-GPU action (as the DRA device taint): records "close UUID what" / "open UUID".
class FakeGpuAction final : public NodeAction {
 public:
  explicit FakeGpuAction(Calls& c) : c_(c) {}
  std::string_view mode() const override { return "fake-gpu"; }
  bool per_gpu() const override { return true; }
  Result<GateOutcome> close(const GateTarget& t) override {
    return call("close " + t.gpu->uuid + " " + t.gpu->what, GateStep::closed);
  }
  Result<GateOutcome> open(const GateTarget& t) override {
    return call("open " + t.gpu->uuid, GateStep::opened);
  }

 private:
  Result<GateOutcome> call(std::string what, GateStep step) {
    std::lock_guard lock(c_.mutex);
    c_.calls.push_back(std::move(what));
    return GateOutcome{step, "GPU", "", false};
  }
  Calls& c_;
};

TEST(Gate, APerGpuActionClosesOnlyTheGpuWithTheLeakAndOpensEachOnItsOwnVerifiedLook) {
  Calls calls;
  std::vector<std::unique_ptr<NodeAction>> actions;
  actions.push_back(std::make_unique<FakeGpuAction>(calls));
  Gate gate(std::move(actions), nullptr);
  auto look = [&](Inventory inv) {
    gate.after_look(inv);
    gate.wait_idle();
  };
  look(node({gpu(0), gpu(1)}));  // both verified: each opened once (nothing closed yet)
  look(node({gpu(0), gpu(1, {holder(42, 8 * kGiB, proc::Provenance::witnessed)})}));
  look(node({gpu(0), gpu(1, {holder(42, 8 * kGiB, proc::Provenance::witnessed)})}));
  // GPU 0 leaks too while GPU 1 releases: GPU 0 closes, GPU 1 keeps its state.
  look(node({unexplained(gpu(0), Unexplained::driver_held, 6 * kGiB),
             unexplained(gpu(1), Unexplained::releasing, 8 * kGiB)}));
  look(node({unexplained(gpu(0), Unexplained::driver_held, 6 * kGiB), gpu(1)}));
  std::lock_guard lock(calls.mutex);
  EXPECT_EQ(calls.calls, (std::vector<std::string>{"open GPU-0", "open GPU-1", "close GPU-1 orphaned",
                                                   "close GPU-0 driver_held", "open GPU-1"}));
}

TEST(GateVerdict, EachWholeGpuHasItsOwnWant) {
  auto v = judge_gate(node({gpu(0), gpu(1, {holder(42, 8 * kGiB, proc::Provenance::witnessed)}),
                            unexplained(gpu(2), Unexplained::releasing, kGiB)}));
  ASSERT_EQ(v.gpus.size(), 3u);
  EXPECT_EQ(v.gpus[0].want, GateWant::open);
  EXPECT_EQ(v.gpus[1].want, GateWant::close);
  EXPECT_EQ(v.gpus[1].uuid, "GPU-1");
  EXPECT_EQ(v.gpus[2].want, GateWant::hold);
  auto steps = gate_steps(true, v);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].key, "GPU-1");
  EXPECT_EQ(steps[1].target.reason, "gpureap: GPU 1 orphaned 8.00 GiB pid 42 (gpureap watch)");
  // The node-wide actions see one step: close, for every finding.
  steps = gate_steps(false, v);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].close);
  EXPECT_FALSE(steps[0].target.gpu);
}

TEST(Gate, AFailureIsSaidOnceAndNeverEndsTheAgent) {
  Calls calls;
  calls.failing = true;
  std::mutex m;
  std::vector<report::GateNotice> notices;
  std::vector<std::unique_ptr<NodeAction>> actions;
  actions.push_back(std::make_unique<FakeAction>(calls));
  Gate gate(
      std::move(actions),
      [&](const report::GateNotice& n) {
        std::lock_guard lock(m);
        notices.push_back(n);
      },
      std::chrono::hours(1));  // no retry within the test, however slow the machine
  const auto leak = node({unexplained(gpu(0), Unexplained::driver_held, 6 * kGiB)});
  gate.after_look(leak);
  gate.wait_idle();
  gate.after_look(leak);  // within the retry delay: not asked again
  gate.wait_idle();
  std::lock_guard lock(calls.mutex);
  EXPECT_EQ(calls.calls.size(), 1u);
  std::lock_guard lock2(m);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].step, GateStep::failed);
  EXPECT_EQ(notices[0].detail, "the controller does not answer");
}

TEST(Gate, UnknownModesAreRefusedByName) {
  auto bad = make_node_actions({"slurm", "kubernetes-tain"}, false);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--gate: unknown mode 'kubernetes-tain' (known: slurm, kubernetes-condition, "
            "kubernetes-taint, kubernetes-device-taint)");
  auto slurm = make_node_actions({"slurm", "slurm"}, true);
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->size(), 1u);
}

// A stand-in scontrol: `show node` answers from the file "state", every call is
// recorded in "args".
class FakeScontrol {
 public:
  explicit FakeScontrol(const std::string& state) {
    std::ofstream(dir_.path("state")) << state << "\n";
    std::ofstream(path()) << "#!/bin/sh\n"
                             "d=$(dirname \"$0\")\n"
                             "echo \"$*\" >> \"$d/args\"\n"
                             "[ \"$2\" = show ] && cat \"$d/state\"\n"
                             "exit 0\n";
    ::chmod(path().c_str(), 0755);
  }
  std::string path() const { return dir_.path("scontrol"); }
  std::string args() const {
    std::ifstream in(dir_.path("args"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  TestTempDir dir_{"gpureap-gate-test"};
};

TEST(SlurmGate, DrainsWithItsReasonResumesOnlyItsOwnDrain) {
  FakeScontrol idle("NodeName=n1 State=IDLE Reason=(null)");
  auto gate = make_slurm_gate(cluster::Scontrol(idle.path(), 5s), "n1", false);
  auto closed = gate->close({"gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)", std::nullopt});
  ASSERT_TRUE(closed) << closed.error().message;
  EXPECT_EQ(closed->step, GateStep::closed);
  EXPECT_EQ(closed->target, "node n1");
  EXPECT_EQ(idle.args(),
            "-o show node n1\nupdate nodename=n1 state=drain reason=gpureap: GPU 0 orphaned "
            "8.00 GiB pid 42 (gpureap watch)\n");
  // Not drained: opening does nothing and says nothing.
  auto open = gate->open({});
  ASSERT_TRUE(open);
  EXPECT_TRUE(open->quiet);

  FakeScontrol ours("NodeName=n1 State=IDLE+DRAIN Reason=gpureap: GPU 0 orphaned [root@t]");
  auto resumed = make_slurm_gate(cluster::Scontrol(ours.path(), 5s), "n1", false)->open({});
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ(resumed->step, GateStep::opened);
  EXPECT_EQ(ours.args(), "-o show node n1\nupdate nodename=n1 state=resume\n");

  // An administrator's drain is neither lifted nor overwritten.
  FakeScontrol theirs("NodeName=n1 State=IDLE+DRAIN Reason=bad DIMM [admin@t]");
  auto admin = make_slurm_gate(cluster::Scontrol(theirs.path(), 5s), "n1", false);
  auto left = admin->open({});
  ASSERT_TRUE(left);
  EXPECT_EQ(left->step, GateStep::left_alone);
  auto kept = admin->close({"gpureap: GPU 0 driver_held 6.00 GiB (gpureap watch)", std::nullopt});
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->step, GateStep::left_alone);
  EXPECT_EQ(theirs.args(), "-o show node n1\n-o show node n1\n");
}

TEST(SlurmGate, ADryRunReadsTheNodeAndChangesNothing) {
  FakeScontrol idle("NodeName=n1 State=IDLE Reason=(null)");
  auto closed = make_slurm_gate(cluster::Scontrol(idle.path(), 5s), "n1", true)
                    ->close({"gpureap: GPU 0 driver_held 6.00 GiB (gpureap watch)", std::nullopt});
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->step, GateStep::would_close);
  EXPECT_EQ(idle.args(), "-o show node n1\n");
}

}  // namespace
}  // namespace gpureap::agent
