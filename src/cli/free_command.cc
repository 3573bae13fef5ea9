// `gpureap free`: reclaim that ends in freed memory or an explained reason.
// Steps: parse -> the one free session (reclaim/free_session.h: lock -> discover -> the
// GPUs chosen -> plan -> confirm -> act: signal, watch memory, re-scan, repeat ->
// verify; a confirmed plan is acted on in a second session, under the lock) -> report.

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/register_command.h"
#include "cli/flags.h"
#include "gpu/gpu_select.h"
#include "inventory/instances.h"
#include "proc/process_table.h"
#include "reclaim/free_flow.h"
#include "reclaim/free_session.h"
#include "reclaim/reclaimer.h"
#include "report/free_report.h"
#include "report/json.h"
#include "report/terminal_text.h"
#include "util/pattern.h"
#include "util/signal_flags.h"
#include "util/units.h"
#include "util/plural.h"

namespace gpureap::cli {
namespace {

struct FreeOptions {
  gpu::GpuSelector gpu;  // --gpu (empty: not given)
  bool all = false;
  // --pid, --user, --cgroup, --match, --orphans, --instance, --env: read straight into
  // the selection's own filters (cli/flags.h checks each value when it is parsed).
  reclaim::Filters filters;
  std::chrono::milliseconds grace = reclaim::kDefaultGrace;
  std::chrono::milliseconds timeout = reclaim::kDefaultTimeout;
  CLI::Option* timeout_opt = nullptr;  // given: memory is waited for until then
  std::chrono::milliseconds settle = reclaim::kDefaultSettle;
  bool yes = false;
  bool dry_run = false;
  bool reset = false;
  bool stop_respawners = false;
  bool ok_if_nothing = false;    // --ok-if-nothing: exit 0 instead of 4
  bool wide = false;             // --wide: the plan's whole command lines
  std::chrono::milliseconds wait_lock{0};  // --wait-lock: how long to wait for another free
  std::optional<std::chrono::milliseconds> deadline;  // --deadline: bounds everything free does
};

std::atomic<bool> g_interrupted{false};  // SIGINT, SIGTERM once signals are sent

int free_usage_error(const std::string& message) {
  print_err(fmt::format("gpureap free: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

// Catches SIGINT and SIGTERM into g_interrupted until `free` returns: `run --free-first`
// goes on to launch a command, and a Ctrl-C then must not be swallowed by our flag.
void catch_interrupts(std::optional<SignalFlags>& handlers) {
  handlers.emplace().raise_on(SIGINT, g_interrupted).raise_on(SIGTERM, g_interrupted);
}

// The engine's options from the command line: the timings, and the selection's filters
// (--pid, --user, --env, --match, ...: each already checked when the line was parsed).
reclaim::ReclaimOptions reclaim_options(
    const FreeOptions& o, std::optional<std::chrono::steady_clock::time_point> deadline) {
  reclaim::ReclaimOptions options;
  options.escalation.grace = o.grace;
  options.timeout = o.timeout;
  options.wait_out_timeout = o.timeout_opt && o.timeout_opt->count() > 0;
  options.settle = o.settle;
  options.deadline = deadline;
  options.reset = o.reset;
  options.stop_respawners = o.stop_respawners;
  static_cast<reclaim::Filters&>(options.selection) = o.filters;
  return options;
}

// The selected GPUs from the first look: --gpu/--all, or the GPUs --instance or --pid
// holders use. An exit status when there is nothing to choose (said on stderr).
std::optional<int> choose_gpus(const FreeOptions& o, const inventory::Inventory& inv,
                               reclaim::Selection& sel, int nothing_to_do) {
  const bool source_usable = gpu::lists_gpus(inv.source_state);
  // --instance: it must be one of this look's (`status` lists them).
  const std::string& key = o.filters.instance;
  const inventory::Instance* instance =
      key.empty() ? nullptr : inventory::find_instance(inv.instances, key);
  if (!key.empty() && !instance) {
    // Two containers' instances share the key: each is named by its container (W4-11(e)).
    const auto named = inventory::keys_in_containers(inv.instances, key);
    print_err(
        named.empty()
            ? fmt::format("gpureap free: --instance {}: no such instance holds a GPU here; "
                          "nothing to do (`gpureap status` lists the instances)\n",
                          report::terminal_text(key))
            : fmt::format("gpureap free: --instance {}: {} containers' instances have this key; "
                          "give one: {}\n",
                          report::terminal_text(key), named.size(),
                          report::terminal_text(fmt::format("{}", fmt::join(named, ", ")))));
    return named.empty() ? nothing_to_do : kExitUsage;
  }
  // --pid or --instance alone: the GPUs those processes use.
  const bool pids_choose = o.gpu.empty() && !o.all;
  if (pids_choose && instance) {
    sel.gpus = instance->gpus;
  } else if (pids_choose) {
    sel.gpus = inventory::gpus_used_by(inv, [&](const proc::Holder& h) {
      return std::find(sel.pids.begin(), sel.pids.end(), h.id.pid) != sel.pids.end();
    });
    if (sel.gpus.empty() && source_usable) {
      std::string pids;
      for (pid_t p : sel.pids) pids += (pids.empty() ? "" : ",") + std::to_string(p);
      print_err(fmt::format(
          "gpureap free: --pid {}: no such process uses a GPU here; nothing to do (see `gpureap "
          "status`)\n",
          pids));
      return nothing_to_do;
    }
  } else {
    auto chosen = inventory::select_gpus(o.all ? gpu::GpuSelector::every_gpu() : o.gpu, inv);
    if (!chosen) {
      // Without NVML the GPUs gpureap knows are only those /proc shows held: a
      // selector it cannot resolve may well be right, so this is NVML's failure.
      if (!source_usable) {
        print_err(fmt::format("gpureap free: {}; NVML is unusable: {}\n",
                              report::terminal_text(chosen.error().message),
                              report::terminal_text(inv.source_problem)));
        return kExitSystem;
      }
      return free_usage_error("--gpu: " + chosen.error().message);
    }
    sel.gpus = *chosen;
  }
  return std::nullopt;
}

int say_lock_failed(const std::string& why) {
  print_err(fmt::format("gpureap free: {}\n", report::terminal_text(why)));
  return kExitSystem;
}

// How `free` shows its outcome: where, in which style, and its exit statuses.
struct Shown {
  const GlobalOptions& global;
  const FreeOptions& o;
  void (*print_out)(std::string_view);
  report::Style style;
  report::TableWidth width;
  int nothing_to_do;
  bool source_usable = false;         // the first look's
  std::vector<std::string> warnings;  // the first look's
};

// What the person said, and the handlers for Ctrl-C once signals are sent.
struct Asked {
  bool not_confirmed = false;
  std::optional<std::vector<proc::ProcessId>> confirmed;  // asks: what the person said yes to
  std::optional<SignalFlags> handlers;
};

// free's go-ahead and progress: the plan shown, --dry-run stops, a person confirms (the
// confirmed set is acted on under the lock, free_session), Ctrl-C from the first signal.
reclaim::FreeSteps free_steps(const Shown& shown, std::chrono::milliseconds grace,
                              const std::shared_ptr<report::ProgressView>& view, Asked& asked) {
  reclaim::FreeSteps steps;
  steps.go_ahead = [&shown, grace, &asked](const reclaim::Plan& plan) {
    const FreeOptions& o = shown.o;
    const bool json = shown.global.json;
    if (!json) shown.print_out(report::plan_text(plan, shown.style, grace, shown.width));
    if (o.dry_run) {
      shown.print_out(json ? report::document_text(report::free_json(
                                 plan, reclaim::ReclaimReport{}, true, shown.warnings))
                           : std::string("Dry run: nothing was signalled.\n"));
      return false;
    }
    if (!o.yes && !plan.targets.empty() &&
        !ask_on_tty("Signal " + count_of(plan.targets.size(), "process", "processes") + "?")) {
      asked.not_confirmed = true;
      return false;
    }
    if (!o.yes) {  // confirmed, without the lock: acted on under it (run_free)
      asked.confirmed.emplace();
      for (const auto& t : plan.targets) asked.confirmed->push_back(t.id);
      return false;
    }
    catch_interrupts(asked.handlers);
    return true;
  };
  steps.progress = [view](const std::vector<reclaim::GpuRelease>& g) {
    if (view) print_err(view->update(g));
  };
  return steps;
}

// The outcome in words and the exit status. Processes were signalled (freed, still held,
// unmeasured, interrupted): the caller gets a record of it even if rendering the full
// report fails (the exit status is decided apart from it).
int show_outcome(const Shown& shown, const reclaim::FreeOutcome& freed,
                 const inventory::Inventory& inv, bool not_confirmed,
                 std::chrono::milliseconds grace) {
  const GlobalOptions& global = shown.global;
  const reclaim::Plan& plan = freed.plan;
  auto plan_only = [&] {
    shown.print_out(global.json
                        ? report::document_text(report::free_json(plan, reclaim::ReclaimReport{},
                                                                  shown.o.dry_run, inv.warnings))
                        : report::plan_text(plan, shown.style, grace, shown.width));
  };
  switch (freed.verdict) {
    case reclaim::FreeVerdict::not_measured:
      plan_only();
      print_err(!shown.source_usable
                    ? fmt::format("gpureap free: no process to signal, and NVML is unusable, so "
                                  "whether the selected GPUs hold memory cannot be measured: {}\n",
                                  report::terminal_text(inv.source_problem))
                    : fmt::format("gpureap free: no process to signal, but NVML cannot read GPU "
                                  "{}, so whether it holds memory cannot be measured (gpureap "
                                  "status --gpu {} shows why)\n",
                                  gpu::device_list(freed.unreadable),
                                  gpu::device_list(freed.unreadable)));
      return kExitSystem;
    // Exit 4 means nothing here for this free to do: no holder at all, or only holders
    // the selection itself leaves alone (--pid, --user, --cgroup, --match, --orphans), with
    // no memory that no process explains. Holders free may not signal (protected, other
    // users') or driver-held memory are memory still held: they go on to be classified (1).
    case reclaim::FreeVerdict::nothing_idle:
    case reclaim::FreeVerdict::nothing_matched:
      if (global.json)
        plan_only();
      else
        shown.print_out(report::plan_text(plan, shown.style, grace, shown.width) +
                        (freed.verdict == reclaim::FreeVerdict::nothing_idle
                             ? "Nothing to do: the selected GPUs hold no memory above baseline.\n"
                             : "Nothing to do: no holder on the selected GPUs matches the "
                               "selection (the memory of those left alone stays held).\n"));
      return shown.nothing_to_do;
    case reclaim::FreeVerdict::stopped:
      if (not_confirmed) {
        print_err("gpureap free: not confirmed; nothing was signalled\n");
        return kExitUsage;
      }
      return kExitOk;  // --dry-run
    case reclaim::FreeVerdict::freed:
    case reclaim::FreeVerdict::still_held:
    case reclaim::FreeVerdict::unmeasured:
    case reclaim::FreeVerdict::interrupted:
      break;
  }
  const reclaim::ReclaimReport& result = *freed.report;
  std::string rendered;
  try {
    rendered = global.json ? report::document_text(report::free_json(plan, result, false, inv.warnings))
                           : report::free_text(result, shown.style, &plan, shown.width);
  } catch (const std::exception& e) {
    print_err("gpureap free: the report could not be rendered (" + report::terminal_text(e.what()) +
              "); a plain record of what was done follows\n");
    rendered = report::free_record(result);
  }
  shown.print_out(rendered);
  switch (freed.verdict) {
    case reclaim::FreeVerdict::freed:
      return kExitOk;
    case reclaim::FreeVerdict::unmeasured:
      return kExitSystem;
    default:
      return kExitStillHeld;
  }
}

// `report_on_stderr`: for `run --free-first`, whose stdout belongs to the command.
int run_free(const GlobalOptions& global, const FreeOptions& o, bool report_on_stderr = false) {
  const auto started = std::chrono::steady_clock::now();
  const int nothing_to_do = o.ok_if_nothing ? kExitOk : kExitNothingToDo;
  // 1. Parse and check the inputs before touching anything.
  if (o.gpu.empty() && !o.all && o.filters.pids.empty() && o.filters.instance.empty())
    return free_usage_error(
        "choose the GPUs: --gpu SEL (e.g. --gpu 3, --gpu all), --all, or name holders with --pid "
        "or --instance");
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (o.deadline) deadline = started + *o.deadline;
  reclaim::ReclaimOptions options = reclaim_options(o, deadline);
  if (!o.yes && !o.dry_run && !::isatty(0))
    return free_usage_error(
        "refusing to signal processes without confirmation: no terminal to ask on. Pass --yes to "
        "act, "
        "or --dry-run to see the plan");

  auto state = inventory::state_dir();
  if (!state) {
    print_err(fmt::format("gpureap free: {}\n", report::terminal_text(state.error().message)));
    return kExitSystem;
  }
  inventory::Node node = open_node(global, *state);
  if (node.device_error()) {
    print_err(fmt::format("gpureap free: {}\n",
                          report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }
  node.set_interrupt_flag(&g_interrupted);
  Shown shown{global,
              o,
              report_on_stderr ? cli::print_err : cli::print_out,
              report_on_stderr ? stderr_style(global) : stdout_style(global),
              report_on_stderr ? report::TableWidth{} : stdout_table_width(o.wide),
              nothing_to_do, false, {}};
  Asked asked;
  // The release as it goes, on stderr (not with --json: its document is the output).
  const auto view = global.json ? nullptr : progress_view();
  const reclaim::FreeSteps steps = free_steps(shown, options.escalation.grace, view, asked);
  // Every signal is recorded (docs/audit.md): the audit file and the journal.
  auto control = open_audited_control("free", reclaim::AuditActor::free,
                                      reclaim::AuditCaller::current(node.proc_root()),
                                      node.proc_root(), *state);
  reclaim::Freer freer{node, *control};

  // 2. The one free session (reclaim/free_session.h): one free at a time (--yes takes the
  // lock); a look; the GPUs chosen from it; plan, judge, show, confirm, act. A plan that
  // waits for a person's y/N is made without the lock: an epilog or the reaper never
  // waits for someone's answer (W3-08); --dry-run takes none either.
  std::optional<int> not_chosen;
  reclaim::FreeRequest request;
  request.options = options;
  if (!o.dry_run && o.yes) {
    request.lock_dir = *state;
    request.lock_until = started + o.wait_lock;
  }
  request.choose = [&](const inventory::Inventory& inv, reclaim::Selection& sel) {
    shown.source_usable = gpu::lists_gpus(inv.source_state);
    shown.warnings = inv.warnings;
    if (auto status = choose_gpus(o, inv, sel, nothing_to_do)) {
      not_chosen = *status;
      return false;
    }
    for (const auto& line : report::free_warnings(inv, sel.gpus)) print_err(line);
    options.selection.gpus = sel.gpus;
    return true;
  };
  request.steps = steps;
  reclaim::FreeSession session = reclaim::free_session(freer, std::move(request));
  if (session.end == reclaim::SessionEnd::lock_failed) return say_lock_failed(session.problem);
  if (not_chosen) return *not_chosen;
  if (asked.confirmed) {
    // 3. Confirmed: under the lock, a fresh look (direct: the agent was asked for the
    // first), and only the confirmed processes, each still the same process (its start
    // time) and still selected; none is added.
    reclaim::FreeRequest confirmed;
    confirmed.options = options;
    confirmed.options.selection.ids = *asked.confirmed;
    confirmed.lock_dir = *state;
    confirmed.lock_until = std::chrono::steady_clock::now() + o.wait_lock;
    confirmed.steps = steps;
    confirmed.steps.go_ahead = [&](const reclaim::Plan&) {
      catch_interrupts(asked.handlers);
      return true;
    };
    session = reclaim::free_session(freer, std::move(confirmed));
    if (session.end == reclaim::SessionEnd::lock_failed) return say_lock_failed(session.problem);
  }
  if (session.outcome.report) {
    if (view) print_err(view->finish());
    (void)node.save_baselines();
  }
  // 5. Report.
  return show_outcome(shown, session.outcome, session.look, asked.not_confirmed,
                      options.escalation.grace);
}

}  // namespace

void add_free_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto [free_sub, free_options] = register_command<FreeOptions>(
      app, "free",
      "Free GPU memory held by stray processes, and prove it is free.\n"
      "Plans the holders of the selected GPUs (plus their descendants), shows the plan, then:\n"
      "SIGTERM -> wait on pidfds up to --grace -> SIGKILL -> poll NVML until used memory is back "
      "at the\n"
      "GPU's idle baseline. Holders that appear meanwhile (respawned workers) are handled in "
      "further\n"
      "rounds when they match the selection themselves. A parent seen respawning killed holders "
      "is\n"
      "reported with the command that stops it, and signalled only with --stop-respawners or "
      "when\n"
      "named by --pid. While a killed holder's parent lives, the GPUs are watched for --settle\n"
      "after the release, so a restart seconds later is caught. Memory still held is "
      "classified\n"
      "with evidence and the next step.\n"
      "Only processes in the plan (and later rounds' matching holders) are ever signalled, each\n"
      "through a pidfd verified against its identity; cgroup.kill is used only when a cgroup's\n"
      "whole subtree holds nothing but targets, checked while frozen.\n"
      "Never signalled: pid 1, gpureap and its ancestors, kernel threads, GPU infrastructure\n"
      "(nvidia-persistenced, nv-fabricmanager, nv-hostengine, display servers), supervisors\n"
      "(systemd, containerd(-shim), dockerd, runc, conmon, kubelet, slurmd, slurmstepd, sshd,\n"
      "tmux, screen, ...) and logged-in users' shells (a shell with a terminal), unless named by "
      "--pid;\n"
      "without root, other users' processes.\n\n"
      "Examples:\n"
      "  gpureap free --gpu 3 --dry-run        show what would be signalled\n"
      "  gpureap free --all --orphans --yes    free every GPU from orphaned holders\n"
      "  gpureap free --gpu all --match sglang --yes\n"
      "  gpureap free --gpu 3 --reset --yes    also reset GPU 3 if only the driver holds its "
      "memory",
      global, run, [](const GlobalOptions& g, const FreeOptions& o) { return run_free(g, o); });
  CLI::App* sub = &free_sub;
  FreeOptions* o = &free_options;
  auto* gpu = add_gpu_selector(
      *sub, "--gpu", o->gpu,
      "GPUs: all, indices (0,3), a range (0-3), UUID (prefix), PCI bus id, minor:N; "
      "a MIG device: 0/gi1/ci0, 0:1, MIG-<uuid>");
  // Both would leave one of them unsaid: refused, naming both (exit 2).
  sub->add_flag("--all", o->all, "All GPUs (same as --gpu all)")->excludes(gpu);
  add_pid_list(*sub, "--pid", o->filters.pids,
               "Only these holders (comma list); may name infrastructure. Without --gpu: the "
               "GPUs they use");
  add_user(*sub, "--user", o->filters.user, "Only holders owned by this user (name or uid)");
  add_text(*sub, "--cgroup", o->filters.cgroup,
           "Only holders whose cgroup path or container contains this text", "PATH");
  add_pattern(*sub, "--match", o->filters.match,
              "Only holders whose command line matches this regular expression, searched "
              "anywhere (RE2 syntax: POSIX extended plus \\d \\s \\w; no backreferences)");
  sub->add_flag("--orphans", o->filters.orphans_only,
                "Only orphaned holders: a dead server's workers, by the evidence (docs/orphans.md); "
                "a detached server (nohup) is left alone");
  add_text(*sub, "--instance", o->filters.instance,
           "Only the holders of this server instance: its process group id or `gpureap "
           "run` id, as `gpureap status` lists them. Without --gpu: the GPUs it uses",
           "INSTANCE");
  add_env_entries(*sub, "--env", o->filters.env,
                  "Only holders whose environment (/proc/PID/environ) holds exactly NAME=VALUE, "
                  "e.g. SLURM_JOB_ID=42 or GPUREAP_RUN_ID=...; repeatable (all must hold). "
                  "Without root, another user's or a non-dumpable process's cannot be read: "
                  "left alone and reported");
  add_duration(*sub, "--grace", o->grace, "Time between SIGTERM and SIGKILL");
  add_duration(*sub, "--settle", o->settle,
               "After the release, while a killed holder's parent lives (it may restart "
               "it), keep watching this long before the verdict; 0 to skip");
  o->timeout_opt = add_duration(
      *sub, "--timeout", o->timeout,
      "Give up verifying release after this long. Given, memory no process holds is waited "
      "for until then, even past --release-budget");
  sub->add_flag("-y,--yes", o->yes, "Do not ask for confirmation");
  sub->add_flag("--ok-if-nothing", o->ok_if_nothing,
                "Exit 0 instead of 4 when there is nothing to do (scripts, systemd ExecStartPre=)");
  add_duration(*sub, "--wait-lock", o->wait_lock,
               "Wait this long for another gpureap free to finish instead of failing at once "
               "(concurrent Slurm epilogs)");
  add_optional_duration(*sub, "--deadline", o->deadline,
                        "Finish within this long, whatever else is set: waiting for the lock, "
                        "--grace, the release wait, --settle (a Slurm epilog under "
                        "PrologEpilogTimeout)");
  sub->add_flag("--dry-run", o->dry_run, "Show the plan, signal nothing");
  sub->add_flag("-w,--wide", o->wide,
                "The plan's whole command lines, however wide the rows (otherwise cut to the "
                "terminal's width)");
  sub->add_flag("--stop-respawners", o->stop_respawners,
                "Also signal a parent seen restarting killed holders (a retry loop, a supervisor); "
                "never a protected one unless named by --pid");
  sub->add_flag("--reset", o->reset,
                "Reset a GPU whose memory only the driver holds (checks preconditions; runs "
                "nvidia-smi --gpu-reset)");
  sub->footer(exit_status_help(kFreeExits));
}

}  // namespace gpureap::cli
