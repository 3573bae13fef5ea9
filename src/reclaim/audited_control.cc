#include "reclaim/audited_control.h"

#include <csignal>

#include "proc/cgroup_fs.h"
#include "proc/process_handle.h"

namespace gpureap::reclaim {
namespace {

// A process opened through the inner control, with what the record says of it.
class AuditedProcess final : public ControlledProcess {
 public:
  AuditedProcess(ProcessPtr inner, AuditTrail& trail, AuditTarget target,
                 std::vector<gpu::DeviceId> gpus, std::uint64_t bytes)
      : inner_(std::move(inner)),
        trail_(trail),
        target_(std::move(target)),
        gpus_(std::move(gpus)),
        bytes_(bytes) {}

  const proc::ProcessId& id() const override { return inner_->id(); }
  Result<void> signal(int sig) override {
    Result<void> sent = inner_->signal(sig);
    record(sig, Delivery::pidfd, sent);
    return sent;
  }
  bool has_exited() const override { return inner_->has_exited(); }
  bool stopped() const override { return inner_->stopped(); }
  bool exiting() const override { return inner_->exiting(); }

  void record(int sig, Delivery via, const Result<void>& sent) {
    trail_.signal(target_, gpus_, bytes_, sig, via, sent);
  }
  ControlledProcess* inner() { return inner_.get(); }

 private:
  ProcessPtr inner_;
  AuditTrail& trail_;
  AuditTarget target_;
  std::vector<gpu::DeviceId> gpus_;
  std::uint64_t bytes_;
};

// Every ControlledProcess an AuditedControl is given is one it opened.
AuditedProcess* audited(ControlledProcess* p) {
  return static_cast<AuditedProcess*>(p);
}

std::vector<ControlledProcess*> inner_of(std::span<ControlledProcess* const> processes) {
  std::vector<ControlledProcess*> out;
  out.reserve(processes.size());
  for (ControlledProcess* p : processes) out.push_back(audited(p)->inner());
  return out;
}

}  // namespace

std::expected<ProcessPtr, proc::OpenFailure> AuditedControl::open(const Target& target,
                                                                  bool first) {
  auto process = inner_.open(target, first);
  if (!process) return std::unexpected(process.error());
  // Read now, while the verified handle is open: after a SIGKILL there is nothing to read.
  AuditTarget described = describe_process(target.id, proc_root_, target.comm, target.user);
  described.instance = target.instance;
  described.cmdline = target.cmdline;
  described.lineage = target.lineage;
  return std::make_unique<AuditedProcess>(std::move(*process), trail_, std::move(described),
                                          target.gpus, target.gpu_bytes);
}

std::vector<std::size_t> AuditedControl::wait_for_exit(std::span<ControlledProcess* const> live,
                                                       util::Clock::time_point deadline) {
  return inner_.wait_for_exit(inner_of(live), deadline);
}

CgroupKills AuditedControl::kill_whole_cgroups(std::span<ControlledProcess* const> live,
                                               std::span<ControlledProcess* const> planned) {
  CgroupKills kills = inner_.kill_whole_cgroups(inner_of(live), inner_of(planned));
  // The indices refer to `live` in both: one record per process the write killed.
  for (const auto& k : kills.killed)
    for (std::size_t i : k.members)
      if (i < live.size()) audited(live[i])->record(SIGKILL, Delivery::cgroup_kill, k.sent);
  return kills;
}

CgroupSweep AuditedControl::sweep_cgroup(const std::string& dir,
                                         std::chrono::steady_clock::time_point deadline) {
  std::vector<AuditTarget> members;
  if (auto listed = proc::cgroup_subtree_members(dir)) {
    for (const auto& m : *listed)
      if (auto id = proc::read_process_id(m.pid, proc_root_))
        members.push_back(describe_process(*id, proc_root_));
  }
  CgroupSweep sweep = inner_.sweep_cgroup(dir, deadline);
  // Before Linux 5.14: frozen, then each member through a pidfd (proc::cgroup_kill_all).
  const Delivery via = sweep.through_cgroup_kill ? Delivery::cgroup_kill : Delivery::pidfd;
  for (const auto& m : members) trail_.signal(m, {}, 0, SIGKILL, via, sweep.sent);
  return sweep;
}

}  // namespace gpureap::reclaim
