#include "agent/slurm_gate.h"

#include "cluster/health.h"

namespace gpureap::agent {
namespace {

using report::GateStep;

class SlurmGate final : public NodeAction {
 public:
  SlurmGate(cluster::Scontrol scontrol, std::string node, bool dry_run)
      : scontrol_(std::move(scontrol)), node_(std::move(node)), dry_run_(dry_run) {}

  std::string_view mode() const override { return "slurm"; }

  Result<GateOutcome> close(const GateTarget& target) override {
    return act(false, target.reason);
  }
  Result<GateOutcome> open(const GateTarget&) override { return act(true, ""); }

 private:
  // `healthy`: open; else close with `reason`.
  Result<GateOutcome> act(bool healthy, const std::string& reason) {
    auto deadline = [&] { return std::chrono::steady_clock::now() + kSlurmGateTimeout; };
    auto state = scontrol_.show_node(node_, deadline());
    if (!state) return std::unexpected(state.error());
    GateOutcome out;
    out.target = "node " + node_;
    out.detail = state->reason;
    switch (cluster::decide_health_action(healthy, *state)) {
      case cluster::HealthAction::drain:
        out.step = dry_run_ ? GateStep::would_close : GateStep::closed;
        out.detail = reason;
        if (!dry_run_)
          if (auto r = scontrol_.drain(node_, reason, deadline()); !r)
            return std::unexpected(r.error());
        return out;
      case cluster::HealthAction::resume:
        out.step = dry_run_ ? GateStep::would_open : GateStep::opened;
        out.detail = "lifting its drain: " + state->reason;
        if (!dry_run_)
          if (auto r = scontrol_.resume(node_, deadline()); !r) return std::unexpected(r.error());
        return out;
      case cluster::HealthAction::keep:
        out.step = GateStep::kept_closed;
        return out;
      case cluster::HealthAction::leave_alone:
        out.step = GateStep::left_alone;
        out.detail = state->state + (state->reason.empty() ? "" : ": " + state->reason);
        return out;
      case cluster::HealthAction::none:
        break;
    }
    out.quiet = true;  // open, and not drained: nothing to do
    return out;
  }

  cluster::Scontrol scontrol_;
  std::string node_;
  bool dry_run_;
};

}  // namespace

std::unique_ptr<NodeAction> make_slurm_gate(cluster::Scontrol scontrol, std::string node,
                                            bool dry_run) {
  return std::make_unique<SlurmGate>(std::move(scontrol), std::move(node), dry_run);
}

}  // namespace gpureap::agent
