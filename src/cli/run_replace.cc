// What `gpureap run` frees before it launches CMD (issue 37): `--replace KEY` (that
// server instance), `--replace-orphans` (the orphaned instances on CMD's GPUs) and
// `--free-first` (everything on --gpu). One safe shape for all three:
//
//   look -> plan (free's one flow, reclaim/free_flow.h; live launchers joined so an
//   instance is freed whole: reclaim/whole_instances.h) -> refuse a partial instance
//   -> without --yes: ask on the terminal; with no terminal, act only on what
//   proc::unattended_may_act allows, else refuse (exit 2) -> the free lock -> a fresh
//   look, whose plan may only be the confirmed one or less -> reclaim, verified ->
//   the old instance's ports closed -> "freed" and "verified" lines.
//
// The plan is confirmed before the lock is taken, so that a prompt nobody answers
// never holds off a Slurm epilog or the reaper (W3-08).

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "proc/lineage.h"
#include "reclaim/free_flow.h"
#include "reclaim/free_lock.h"
#include "reclaim/whole_instances.h"
#include "report/free_report.h"
#include "report/replace_report.h"
#include "report/run_report.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "supervise/port_check.h"
#include "util/units.h"

namespace gpureap::cli {
// A named namespace: the cli module is a unity build, where run_command.cc's and
// free_command.cc's helpers share the translation unit.
namespace run_replace {

using Mode = FreeBeforeRun::Mode;

void replace_say(const std::string& line) {
  print_err(report::run_line(line, stderr_columns()));
}

std::string flag_of(const FreeBeforeRun& r) {
  switch (r.mode) {
    case Mode::replace:
      return "--replace " + report::terminal_text(r.instance);
    case Mode::replace_orphans:
      return "--replace-orphans";
    case Mode::free_first:
      break;
  }
  return "--free-first";
}

std::atomic<bool> g_replace_interrupted{false};
extern "C" void on_replace_interrupt(int) {
  g_replace_interrupted.store(true);
}

// SIGINT/SIGTERM stop the waits of the free (it still reports); restored for the
// launch, whose signals are forwarded to CMD.
class InterruptScope {
 public:
  InterruptScope() {
    struct sigaction sa {};
    sa.sa_handler = on_replace_interrupt;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptScope() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// Asks on the terminal; anything but y/yes declines.
bool ask_on_tty(const std::string& question) {
  FILE* tty = std::fopen("/dev/tty", "r+");
  if (!tty) return false;
  std::fprintf(tty, "%s [y/N] ", question.c_str());
  std::fflush(tty);
  char answer[16] = {};
  const bool yes = std::fgets(answer, sizeof answer, tty) && (answer[0] == 'y' || answer[0] == 'Y');
  std::fclose(tty);
  return yes;
}

const proc::Holder* holder_of(const inventory::Inventory& inv, const proc::ProcessId& id) {
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders)
      if (gh.holder.id == id) return &gh.holder;
  return nullptr;
}

// Why a plan may not go ahead without a person's confirmation, or "" when it may: every
// GPU holder it signals is orphaned with owned or witnessed evidence, no live launcher
// is in it, and nothing on the selected GPUs that it was asked to free is left alone for
// lack of evidence (--free-first: any holder; --replace-orphans: an orphan by inference).
std::string needs_confirmation(const reclaim::Plan& plan, const inventory::Inventory& inv,
                               Mode mode) {
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) {
      if (!gh.uses_gpu) continue;
      const proc::Holder& h = gh.holder;
      if (plan.contains(h.id) && !proc::unattended_may_act(h))
        return fmt::format("pid {} ({}) is {}", h.id.pid, report::terminal_text(h.comm, 20),
                           h.orphaned ? "orphaned only by inference: " + h.orphan_reason
                                      : "not orphaned (its server may be alive)");
    }
  // A launcher that lives while every GPU member is orphaned with strong evidence is
  // the server of a run whose gpureap is gone (owned): part of the leak, not live.
  for (const auto& in : plan.instances)
    if (in.launcher_alive && in.orphaned < in.members.size())
      return fmt::format("instance {} is live: its launcher pid {} runs",
                         report::terminal_text(in.key), in.launcher_pid);
  for (const auto& s : plan.skipped) {
    if (s.kind != reclaim::SkipKind::not_matched || s.gpu_bytes == 0) continue;
    const proc::Holder* h = holder_of(inv, s.id);
    if (mode == Mode::replace_orphans && !(h && h->orphaned)) continue;  // not asked to free it
    if (h && h->orphaned)
      return fmt::format("pid {} ({}) holds {} and is orphaned only by inference: {}", s.id.pid,
                         report::terminal_text(s.comm, 20), format_bytes(s.gpu_bytes),
                         report::terminal_text(h->orphan_reason));
    return fmt::format("pid {} ({}) holds {} and is not orphaned{}", s.id.pid,
                       report::terminal_text(s.comm, 20), format_bytes(s.gpu_bytes),
                       h && !h->instance.empty()
                           ? fmt::format(" (instance {})", report::terminal_text(h->instance))
                           : std::string());
  }
  return "";
}

bool is_subset(const reclaim::Plan& later, const reclaim::Plan& confirmed) {
  return std::all_of(later.targets.begin(), later.targets.end(),
                     [&](const reclaim::Target& t) { return confirmed.contains(t.id); });
}

std::vector<unsigned> old_ports(const reclaim::Plan& plan) {
  std::vector<unsigned> ports;
  for (const auto& in : plan.instances) {
    if (in.port) ports.push_back(*in.port);
    ports.insert(ports.end(), in.ports.begin(), in.ports.end());
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

}  // namespace run_replace

using namespace run_replace;

int free_before_run(const GlobalOptions& global, const FreeBeforeRun& r) {
  const std::string flag = flag_of(r);
  const std::string not_starting = fmt::format("not starting {}", r.command);
  auto state = inventory::state_dir();
  if (!state) {
    replace_say(fmt::format("{}: {}", flag, state.error().message));
    return kExitSystem;
  }
  inventory::Node node = open_node(global, *state, FirstLook::scan);
  if (node.device_error()) {
    replace_say(fmt::format("{}: {}", flag, node.device_error()->message));
    return kExitSystem;
  }
  node.set_interrupt_flag(&g_replace_interrupted);

  // 1. The selection.
  const bool can_ask = ::isatty(0) != 0;
  const bool unattended = !r.yes && !can_ask;
  reclaim::ReclaimOptions options;
  options.escalation.grace = r.grace;
  options.timeout = r.timeout;
  auto select = [&](const inventory::Inventory& inv) -> std::optional<int> {
    auto& sel = options.selection;
    if (r.mode == Mode::replace) {
      const auto* in = inventory::find_instance(inv.instances, r.instance);
      if (!in) {
        replace_say(fmt::format("{}: no such instance holds a GPU here (`gpureap status` lists them); {}",
                        flag, not_starting));
        return kExitNothingToDo;
      }
      sel.instance = in->key;
      sel.gpus = in->gpus;
      return std::nullopt;
    }
    auto chosen = inventory::select_gpus(r.gpu.empty() ? gpu::GpuSelector::every_gpu() : r.gpu, inv);
    if (!chosen) {
      if (!gpu::lists_gpus(inv.source_state)) {
        replace_say(fmt::format("{}: {}; NVML is unusable: {}", flag, chosen.error().message,
                        inv.source_problem));
        return kExitSystem;
      }
      replace_say("--gpu: " + chosen.error().message);
      return kExitUsage;
    }
    sel.gpus = *chosen;
    // --replace-orphans: only orphans; without a person to ask, only the orphans that
    // unattended action may touch (owned or witnessed evidence).
    sel.orphans_only = r.mode == Mode::replace_orphans || unattended;
    sel.unattended = unattended;
    return std::nullopt;
  };
  reclaim::FreeSteps steps;
  const inventory::Inventory* planned_from = nullptr;  // the look being planned
  steps.amend = [&](reclaim::Plan& plan) {
    reclaim::add_live_launchers(plan, *planned_from,
                                reclaim::CallerContext::current(node.proc_root()));
  };

  // 2. The plan, without the lock: shown, checked, confirmed.
  auto audit = open_audit("run", *state);
  inventory::Inventory first = node.look();
  planned_from = &first;
  for (const auto& w : first.warnings) replace_say("warning: " + w);
  if (auto code = select(first)) return *code;
  std::optional<reclaim::Plan> shown;
  {
    reclaim::FreeSteps look_only = steps;
    look_only.go_ahead = [&](const reclaim::Plan& plan) {
      shown = plan;
      return false;
    };
    // The go-ahead says no: nothing is signalled, nothing recorded.
    reclaim::SystemProcessControl system_control(node.proc_root());
    reclaim::AuditTrail unused_trail(*audit, reclaim::AuditActor::free,
                                     reclaim::AuditCaller::current(node.proc_root()));
    reclaim::AuditedControl no_signals(system_control, unused_trail, node.proc_root());
    auto caller = reclaim::CallerContext::current(node.proc_root());
    const auto pass = reclaim::free_selection(node, no_signals, first, caller, options, look_only);
    switch (pass.verdict) {
      case reclaim::FreeVerdict::not_measured:
        replace_say(fmt::format("{}: whether the GPUs hold memory cannot be measured (NVML: {}); {}", flag,
                        first.source_problem.empty() ? "a selected GPU cannot be read"
                                                   : first.source_problem,
                        not_starting));
        return kExitSystem;
      case reclaim::FreeVerdict::nothing_idle:
        replace_say(fmt::format("{}: nothing to free: GPU {} at baseline",
                        flag, gpu::device_list(options.selection.gpus)));
        return kExitOk;
      case reclaim::FreeVerdict::nothing_matched:
        if (unattended) {
          // Holders the unattended selection left alone keep the GPUs: not free.
          shown = pass.plan;
          break;
        }
        if (r.mode == Mode::replace) {
          replace_say(fmt::format("{}: nothing of it may be signalled:\n{}{}", flag,
                          report::replace_plan_text(pass.plan, first), not_starting));
          return kExitStillHeld;
        }
        replace_say(fmt::format("{}: nothing to free on GPU {} (the rest is not orphaned)", flag,
                        gpu::device_list(options.selection.gpus)));
        return kExitOk;
      default:
        break;
    }
  }
  if (!shown) return kExitSystem;  // the go-ahead always runs past the judgements above
  if (auto partial = reclaim::partial_instances(*shown); !partial.empty()) {
    for (const auto& p : partial)
      replace_say(fmt::format("{}: instance {} would be freed in part: {}", flag,
                      report::terminal_text(p.key), report::terminal_text(p.why)));
    replace_say(fmt::format("an instance is freed whole or not at all: select all its GPUs, or "
                    "`gpureap run --replace KEY`; nothing was signalled, {}",
                    not_starting));
    return kExitUsage;
  }
  if (unattended) {
    if (auto why = needs_confirmation(*shown, first, r.mode); !why.empty()) {
      replace_say(fmt::format("{}: {}. No terminal to ask on: pass --yes to free it (the plan: "
                      "`gpureap free --dry-run`), or free it first; nothing was signalled, {}",
                      flag, why, not_starting));
      return kExitUsage;
    }
  } else if (!r.yes && !shown->targets.empty()) {
    const std::string plan = fmt::format("gpureap run {}: the plan\n{}", flag,
                                         report::replace_plan_text(*shown, first));
    const auto columns = stderr_columns();
    print_err(columns ? report::wrap_lines(plan, *columns) : plan);
    if (!ask_on_tty(fmt::format("Free it ({} process(es)) and launch {}?", shown->targets.size(),
                         r.command))) {
      replace_say(fmt::format("not confirmed; nothing was signalled, {}", not_starting));
      return kExitUsage;
    }
  }

  if (shown->targets.empty()) {
    replace_say(fmt::format("{}: nothing to free on GPU {} (what holds them is not orphaned)", flag,
                    gpu::device_list(options.selection.gpus)));
    return kExitOk;
  }

  // 3. Under the lock, on a fresh look: the confirmed plan or less, reclaimed and verified.
  auto lock = reclaim::FreeLock::acquire(*state, std::chrono::steady_clock::now() + r.timeout);
  if (!lock) {
    replace_say(fmt::format("{}: {}; {}", flag, lock.error().message, not_starting));
    return kExitSystem;
  }
  InterruptScope interrupts;
  inventory::Inventory inv = node.look();
  planned_from = &inv;
  if (auto code = select(inv)) return *code;
  reclaim::AuditTrail trail(*audit, reclaim::AuditActor::free,
                            reclaim::AuditCaller::current(node.proc_root()));
  reclaim::SystemProcessControl system_control(node.proc_root());
  reclaim::AuditedControl control(system_control, trail, node.proc_root());
  std::string changed;
  steps.go_ahead = [&](const reclaim::Plan& plan) {
    if (!is_subset(plan, *shown))
      changed = "a process not in the confirmed plan holds the GPUs now";
    else if (auto partial = reclaim::partial_instances(plan); !partial.empty())
      changed = "instance " + partial.front().key + " would now be freed in part";
    return changed.empty();
  };
  const bool live = ::isatty(2) != 0;
  steps.progress = [live](const std::vector<reclaim::GpuRelease>& g) {
    if (live) print_err("\r\033[K" + report::progress_line(g));
  };
  auto caller = reclaim::CallerContext::current(node.proc_root());
  const auto freed = reclaim::free_selection(node, control, inv, caller, options, steps);
  if (live && freed.report) print_err("\r\033[K");
  switch (freed.verdict) {
    case reclaim::FreeVerdict::nothing_idle:
    case reclaim::FreeVerdict::nothing_matched:
      replace_say(fmt::format("{}: nothing left to free (it ended meanwhile)", flag));
      return kExitOk;
    case reclaim::FreeVerdict::not_measured:
      replace_say(fmt::format("{}: whether the GPUs hold memory cannot be measured; {}", flag,
                      not_starting));
      return kExitSystem;
    case reclaim::FreeVerdict::stopped:
      replace_say(fmt::format("{}: {} since the plan was made; nothing was signalled, {}", flag,
                      changed, not_starting));
      return kExitUsage;
    case reclaim::FreeVerdict::freed:
      break;
    case reclaim::FreeVerdict::still_held:
    case reclaim::FreeVerdict::unmeasured:
    case reclaim::FreeVerdict::interrupted:
      print_err(report::free_text(*freed.report, stderr_style(global), &freed.plan));
      replace_say(fmt::format("{}: the GPUs were not verified free; {}", flag, not_starting));
      return freed.verdict == reclaim::FreeVerdict::unmeasured ? kExitSystem : kExitStillHeld;
  }
  (void)node.save_baselines();

  // 4. The old instance's ports: closed, or the new server would meet EADDRINUSE.
  const std::vector<unsigned> ports = old_ports(freed.plan);
  if (auto open = supervise::ports_still_listening(ports, node.proc_root()); !open.empty()) {
    for (const auto& p : open) replace_say(report::open_port_text(p));
    replace_say(fmt::format("{}: the GPUs are free, but a port of the old instance is open; {}", flag,
                    not_starting));
    return kExitStillHeld;
  }
  replace_say(report::freed_line(freed.plan, *freed.report));
  replace_say(report::verified_line(*freed.report, ports));
  return kExitOk;
}

}  // namespace gpureap::cli
