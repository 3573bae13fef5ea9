#pragma once
// Rendering of `gpureap slurm prolog|epilog|health`: the drain reason Slurm shows
// (`sinfo -R`, `scontrol show node`), and each command's report as text and JSON
// (docs/json-schema.md, "slurm"). Slurm keeps no prolog or epilog output unless the
// site's wrapper writes it somewhere (contrib/slurm/gpureap-slurm does, to a log).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/health.h"
#include "cluster/job_check.h"
#include "cluster/job_hook.h"
#include "cluster/scontrol.h"
#include "report/style.h"

namespace gpureap::report {

/// What a `gpureap slurm` command did about its node: cluster/job_hook.h's.
using cluster::NodeOutcome;
using cluster::NodeStep;

/// The drain reason: "gpureap: GPU 1 driver_held 12.0 GiB (after job 42)"; several GPUs
/// joined by "; ", classes of one GPU by "+", pids named ("pids 123,456"). With `error`
/// (nothing could be verified): "gpureap: GPUs not verified (after job 42): <error>".
/// Printable ASCII only (any other byte becomes '?'), at most 250 characters.
std::string drain_reason(const std::vector<cluster::HeldGpu>& held, std::string_view error,
                         std::string_view context);

/// What `gpureap watch --gate` closes a node for, on one GPU: "orphaned" (owned or
/// witnessed), "driver_held" or "ghost", with its bytes and the holders' pids.
struct GateFinding {
  gpu::DeviceId gpu;
  std::string_view what;
  std::uint64_t bytes = 0;
  std::vector<pid_t> pids;
};
/// The gate's drain reason, as drain_reason writes one: "gpureap: GPU 0 orphaned 8.00 GiB
/// pid 4242; GPU 1 driver_held 6.00 GiB (gpureap watch)".
std::string gate_reason(const std::vector<GateFinding>& findings);

/// `mode` is "prolog" or "epilog".
std::string slurm_job_text(std::string_view mode, const cluster::SlurmJob& job,
                           const cluster::JobCheck& check, const NodeOutcome& node,
                           const Style& style);
nlohmann::ordered_json slurm_job_json(std::string_view mode, const cluster::SlurmJob& job,
                                      const cluster::JobCheck& check, const NodeOutcome& node);

/// `state`: the node as scontrol showed it (nullopt when it could not be read).
std::string slurm_health_text(const cluster::HealthCheck& check,
                              const std::optional<cluster::NodeState>& state,
                              const NodeOutcome& node, const Style& style);
nlohmann::ordered_json slurm_health_json(const cluster::HealthCheck& check,
                                         const std::optional<cluster::NodeState>& state,
                                         const NodeOutcome& node);

}  // namespace gpureap::report
