// `gpureap slurm prolog|epilog|health`: the GPU side of Slurm's hooks.
// Steps: parse (flags, then Slurm's variables) -> the policy of cluster/job_hook.h: the
// check under the free lock (waiting, within the deadline; cluster/job_check: the job's
// leftovers, or the node's health) -> drain or resume through scontrol -> report. Slurm starts these with no PATH and none of
// slurmd's environment, so every program is named by an absolute path and the
// GPUREAP_* variables come from the site's wrapper (contrib/slurm/gpureap-slurm).

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/flags.h"
#include "cluster/health.h"
#include "cluster/job_check.h"
#include "cluster/job_hook.h"
#include "cluster/scontrol.h"
#include "report/json.h"
#include "report/slurm_report.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

using Clock = std::chrono::steady_clock;
using report::NodeOutcome;
using report::NodeStep;

/// The epilog's and prolog's whole time unless --deadline says otherwise: below
/// PrologEpilogTimeout=60 (docs/slurm.md), with room for slurmd's own work.
constexpr std::chrono::milliseconds kDefaultJobDeadline{45000};
/// Each scontrol call ends by this (and by the deadline): a controller that does not
/// answer must not eat the whole budget.
constexpr std::chrono::milliseconds kScontrolTimeout{10000};

struct SlurmOptions {
  std::string mode;  // prolog | epilog | health
  std::chrono::milliseconds deadline = kDefaultJobDeadline;
  std::chrono::milliseconds grace = reclaim::kDefaultGrace;
  std::chrono::milliseconds settle = reclaim::kDefaultSettle;
  std::string when_held;  // drain | drain-fail | fail; "" = the mode's default
  bool free_orphans = false;
  std::chrono::milliseconds persist = cluster::kDefaultPersist;
  gpu::GpuSelector gpu;  // empty: every GPU
  std::string scontrol;
  std::string node;
};

int usage_error(const SlurmOptions& o, const std::string& message) {
  print_err(fmt::format("gpureap slurm {}: {}\n", o.mode, report::terminal_text(message)));
  return kExitUsage;
}

// --scontrol, else $GPUREAP_SCONTROL, else Debian's path. Relative paths would depend
// on a PATH Slurm does not set.
std::string scontrol_path(const SlurmOptions& o) {
  return o.scontrol.empty() ? cluster::scontrol_from_environment() : o.scontrol;
}

// --node, else $SLURMD_NODENAME (set for the prolog, epilog and health check), else
// the host name up to its first dot (Slurm's default NodeName).
std::string node_name(const SlurmOptions& o) {
  return o.node.empty() ? cluster::node_name_from_environment() : o.node;
}

int exit_status(cluster::HookEnd end) {
  switch (end) {
    case cluster::HookEnd::ok:
      return kExitOk;
    case cluster::HookEnd::still_held:
      return kExitStillHeld;
    case cluster::HookEnd::system:
      break;
  }
  return kExitSystem;
}

// The job check (epilog or prolog) on the node, through an audited control.
cluster::JobCheck check_job(const GlobalOptions& global, const SlurmOptions& o,
                            const std::string& state_dir, const cluster::SlurmJob& job,
                            const reclaim::ReclaimOptions& options) {
  cluster::JobCheck check;
  inventory::Node node = open_node(global, state_dir);
  if (node.device_error()) {
    check.error = node.device_error()->message;
    return check;
  }
  reclaim::AuditCaller caller = reclaim::AuditCaller::current(node.proc_root());
  caller.job_id = job.id;
  auto audited = open_audited_control(
      "slurm " + o.mode,
      o.mode == "epilog" ? reclaim::AuditActor::slurm_epilog : reclaim::AuditActor::slurm_prolog,
      std::move(caller), node.proc_root(), state_dir);
  reclaim::AuditedControl& control = *audited;
  check = o.mode == "epilog" ? cluster::clean_up_after_job(node, control, job, options)
                             : cluster::check_before_job(node, control, job, options, o.free_orphans);
  (void)node.save_baselines();
  return check;
}

// The job hooks: parse, the check under the free lock (cluster/job_hook.h), the node's
// fate as the site chose (--when-held), the report and the exit status.
int run_job_hook(const GlobalOptions& global, const SlurmOptions& o, Clock::time_point started) {
  const cluster::WhenHeld policy = cluster::when_held(o.mode, o.when_held);
  auto job = cluster::read_slurm_job(cluster::process_environment());
  if (!job) return usage_error(o, job.error().message);
  const auto times = cluster::hook_times(started, o.deadline, kScontrolTimeout);
  reclaim::ReclaimOptions options;
  options.escalation.grace = o.grace;
  options.settle = o.settle;
  options.timeout = o.deadline;
  options.deadline = times.check_end;

  cluster::JobCheck check;
  if (auto state = inventory::state_dir(); !state)
    check.error = state.error().message;
  else
    check = cluster::check_under_free_lock(*state, times.check_end, [&] {
      return check_job(global, o, *state, *job, options);
    });

  const std::string reason = report::drain_reason(
      check.held, check.error, fmt::format("{} job {}", o.mode == "epilog" ? "after" : "before", job->id));
  const NodeOutcome outcome =
      cluster::settle_job_node(check, policy, node_name(o), reason,
                               cluster::Scontrol(scontrol_path(o), kScontrolTimeout), times.end);
  // Slurm keeps the report only where the wrapper writes it.
  if (global.json)
    print_out(report::document_text(report::slurm_job_json(o.mode, *job, check, outcome)));
  else
    print_out(report::slurm_job_text(o.mode, *job, check, outcome, stdout_style(global)));
  return exit_status(cluster::job_hook_end(check, outcome, policy));
}

// HealthCheckProgram: drain on held memory that persists; resume a node gpureap drained
// once it is healthy; never touch a node drained for another reason.
int run_health(const GlobalOptions& global, const SlurmOptions& o, Clock::time_point started) {
  const auto times = cluster::hook_times(started, o.deadline, kScontrolTimeout);
  cluster::HealthOptions options;
  options.persist = o.persist;
  options.gpus = o.gpu;
  const std::string name = node_name(o);

  // The epilog's free lock, so that memory a free is releasing is not drained for
  // (W2-13): waited for as long as the deadline leaves after both looks and scontrol.
  auto state_dir = inventory::state_dir();
  if (state_dir) {
    options.lock_dir = *state_dir;
    options.lock_until = times.check_end - options.persist;
  }
  inventory::Node node = open_node(global);
  cluster::HealthCheck check;
  if (node.device_error()) {
    check.error = node.device_error()->message;
  } else {
    check = cluster::check_node_health(node, options);
    if (!state_dir)
      check.warnings.push_back(state_dir.error().message +
                               "; looked without waiting for a free in progress");
  }
  // A selector this node cannot satisfy is the site's typo, not the node's fault: a drain
  // for it would never be resumed (W2-15).
  if (!check.usage_error.empty()) return usage_error(o, check.usage_error);
  // Skipped: no verdict, neither a drain nor a resume; the next interval looks again.
  std::optional<cluster::NodeState> state;
  NodeOutcome outcome{name, NodeStep::none, "", ""};
  if (check.skipped.empty())
    outcome = cluster::settle_health_node(check, name, report::drain_reason(check.held, check.error, ""),
                                          cluster::Scontrol(scontrol_path(o), kScontrolTimeout),
                                          times.end, state);
  if (global.json)
    print_out(report::document_text(report::slurm_health_json(check, state, outcome)));
  else
    print_out(report::slurm_health_text(check, state, outcome, stdout_style(global)));
  if (!check.skipped.empty()) return kExitOk;
  return exit_status(cluster::health_end(check, outcome));
}

}  // namespace

void add_slurm_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto o = std::make_shared<SlurmOptions>();
  auto* sub = app.add_subcommand(
      "slurm",
      "Slurm's prolog, epilog and health check for GPU memory.\n"
      "  epilog  after a job: free what it left (processes whose environment holds its\n"
      "          SLURM_JOB_ID, whose cgroup is the job's, and orphans on its GPUs; never a\n"
      "          running job's, by cgroup or environment), verify the GPUs are back at\n"
      "          baseline; drain the node with a 'gpureap:' reason if not.\n"
      "  prolog  before a job: its GPUs (SLURM_JOB_GPUS, device minors) must be at baseline;\n"
      "          --free-orphans frees orphaned holders on them first; else drain and fail.\n"
      "  health  HealthCheckProgram: drain when GPU memory that no running job explains stays\n"
      "          held (driver-held, or a finished job's process); resume a node whose drain\n"
      "          reason starts with 'gpureap:' once healthy; other drained nodes are left alone.\n"
      "          It waits while an epilog (any gpureap free) holds the free lock, else skips\n"
      "          (exit 0); a usage error (--gpu 9 on a 4-GPU node) exits 2, never drains.\n"
      "Slurm gives these no PATH: scontrol is --scontrol, $GPUREAP_SCONTROL or /usr/bin/scontrol,\n"
      "and the node --node, $SLURMD_NODENAME or the host name. Configuration lines: "
      "docs/slurm.md.\n\n"
      "Examples (slurm.conf runs contrib/slurm/gpureap-slurm, which calls these):\n"
      "  gpureap slurm epilog --deadline 45s\n"
      "  gpureap slurm prolog --free-orphans\n"
      "  gpureap slurm health --persist 3s");
  sub->add_option("mode", o->mode, "prolog, epilog or health")
      ->required()
      ->check(CLI::IsMember({"prolog", "epilog", "health"}))
      ->type_name("MODE");
  add_duration(*sub, "--deadline", o->deadline,
               "Finish within this long, drain included (PrologEpilogTimeout must be longer; "
               "the health check is killed after 60 s)");
  sub->add_option("--when-held", o->when_held,
                  "When GPU memory stays held (or cannot be verified): drain (drain, exit 0; the "
                  "epilog's default), drain-fail (drain, exit non-zero; the prolog's default: the "
                  "job is requeued), fail (exit non-zero only: Slurm drains with 'Epilog error')")
      ->check(CLI::IsMember({"drain", "drain-fail", "fail"}))
      ->type_name("ACTION");
  sub->add_flag("--free-orphans", o->free_orphans,
                "prolog: free orphaned holders on the job's GPUs (that no running job claims) "
                "before checking");
  add_duration(*sub, "--grace", o->grace, "epilog, prolog: time between SIGTERM and SIGKILL");
  add_duration(*sub, "--settle", o->settle,
               "epilog, prolog: after the release, while a killed holder's parent lives, keep "
               "watching this long");
  add_duration(*sub, "--persist", o->persist,
               "health: held memory must still be held this much later to count");
  add_gpu_selector(*sub, "--gpu", o->gpu, "health: only these GPUs (default: all)");
  sub->add_option("--scontrol", o->scontrol,
                  "scontrol's absolute path (else $GPUREAP_SCONTROL, else /usr/bin/scontrol)")
      ->type_name("PATH");
  sub->add_option("--node", o->node,
                  "this node's Slurm name (else $SLURMD_NODENAME, else the host name)")
      ->type_name("NODE");
  sub->footer(exit_status_help(kSlurmExits));
  sub->callback([&run, &global, o] {
    run = [&global, o] {
      const auto started = Clock::now();
      return o->mode == "health" ? run_health(global, *o, started)
                                 : run_job_hook(global, *o, started);
    };
  });
}

}  // namespace gpureap::cli
