// What `gpureap run` frees before it launches CMD (issue 37): `--replace KEY`,
// `--replace-orphans` and `--free-first`. The flow is supervise/replace.h's (a plan
// without the lock, confirmed; then under the lock the confirmed plan or less,
// reclaimed and verified); here: the prompt, Ctrl-C, and every line it says.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <optional>
#include <variant>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "inventory/instances.h"
#include "reclaim/free_session.h"
#include "reclaim/whole_instances.h"
#include "report/free_report.h"
#include "report/replace_report.h"
#include "report/run_report.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "supervise/port_check.h"
#include "supervise/replace.h"
#include "util/units.h"

namespace gpureap::cli {
// A named namespace: the cli module is a unity build, where run_command.cc's and
// free_command.cc's helpers share the translation unit.
namespace run_replace {

using Mode = supervise::ReplaceMode;

// What it says goes to stderr, line by line; with --json it is kept for the document
// instead (run's one document: no text line before it).
struct Voice {
  report::ReplaceRecord* record = nullptr;  // --json: kept here
  void operator()(const std::string& line) const {
    if (record)
      record->said.push_back(line);
    else
      print_err(report::run_line(line, stderr_columns()));
  }
};

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

// What the request says, as the flow takes it.
supervise::Replacement replacement_of(const FreeBeforeRun& r) {
  supervise::Replacement rep;
  rep.mode = r.mode;
  rep.instance = r.instance;
  rep.gpu = r.gpu;
  rep.unattended = !r.yes && ::isatty(0) == 0;
  rep.options.escalation.grace = r.grace;
  rep.options.timeout = r.timeout;
  return rep;
}

// How a replacement is said: the flag, what is not started, and the selection's GPUs.
struct Say {
  std::string flag;
  std::string not_starting;
  const supervise::Replacement& rep;
  Voice line;
  std::string gpus() const { return gpu::device_list(rep.options.selection.gpus); }
  // A refusal: a person's "no" or a bad selection is final (2); without a person, what
  // holds the GPUs may change, so the unit's Restart= tries again (75, W4-03).
  int refused() const { return rep.unattended ? kExitTryLater : kExitUsage; }
};

// select_replaced found nothing to select: said, with its exit status.
int say_not_selected(const Say& say, const inventory::Inventory& inv) {
  switch (say.rep.problem) {
    case supervise::SelectProblem::no_such_instance: {
      // Two containers' instances share the key: each is named by its container (W4-11(e)).
      const auto named = inventory::keys_in_containers(inv.instances, say.rep.instance);
      if (!named.empty()) {
        say.line(fmt::format("{}: {} containers' instances have this key; give one: {}; {}",
                             say.flag, named.size(),
                             report::terminal_text(fmt::format("{}", fmt::join(named, ", "))),
                             say.not_starting));
        return kExitUsage;
      }
      say.line(fmt::format(
          "{}: no such instance holds a GPU here (`gpureap status` lists them); {}", say.flag,
          say.not_starting));
      return kExitNothingToDo;
    }
    case supervise::SelectProblem::source_unusable:
      say.line(fmt::format("{}: {}; NVML is unusable: {}", say.flag, say.rep.problem_detail,
                              inv.source_problem));
      return kExitSystem;
    case supervise::SelectProblem::bad_gpu:
    case supervise::SelectProblem::none:
      break;
  }
  say.line("--gpu: " + say.rep.problem_detail);
  return kExitUsage;
}

// What the plan leaves alone that keeps memory, one line an instance (or process), with
// why: a --replace-orphans that launches says what it did not free (W4-03), and never
// counts those GPUs as verified (W5 #2).
void say_left_alone(const Say& say, const reclaim::Plan& plan, const inventory::Inventory& look) {
  constexpr std::size_t kShown = 8;
  const auto alone = report::left_alone(plan, look);
  for (std::size_t i = 0; i < alone.size() && i < kShown; ++i)
    say.line(report::left_alone_line(alone[i], look));
  if (alone.size() > kShown)
    say.line(fmt::format("left alone: {} more (`gpureap status` lists them)", alone.size() - kShown));
  if (say.line.record) say.line.record->left_alone = alone;
}

// Step 1's judgements: an exit status when it ends here, else the plan to confirm.
std::variant<int, reclaim::Plan> judged(const Say& say, const reclaim::FreeSession& first) {
  const auto& pass = first.outcome;
  switch (pass.verdict) {
    case reclaim::FreeVerdict::not_measured:
      say.line(fmt::format("{}: whether the GPUs hold memory cannot be measured (NVML: {}); {}",
                              say.flag,
                              first.look.source_problem.empty() ? "a selected GPU cannot be read"
                                                                : first.look.source_problem,
                              say.not_starting));
      return kExitSystem;
    case reclaim::FreeVerdict::nothing_idle:
      say.line(fmt::format("{}: nothing to free: GPU {} at baseline", say.flag, say.gpus()));
      return kExitOk;
    case reclaim::FreeVerdict::nothing_matched:
      // Unattended: holders the selection left alone keep the GPUs: not free.
      if (say.rep.unattended) return pass.plan;
      if (say.rep.mode == Mode::replace) {
        say.line(fmt::format("{}: nothing of it may be signalled:\n{}{}", say.flag,
                                report::replace_plan_text(pass.plan, first.look), say.not_starting));
        return kExitStillHeld;
      }
      say.line(fmt::format("{}: nothing to free on GPU {}", say.flag, say.gpus()));
      say_left_alone(say, pass.plan, first.look);
      return kExitOk;
    case reclaim::FreeVerdict::stopped:
      return pass.plan;
    default:
      return kExitSystem;  // the go-ahead always runs past the judgements above
  }
}

// The plan confirmed: whole instances only; unattended, only what may be done without a
// person; else asked on the terminal (unless --yes). An exit status when refused.
std::optional<int> confirmed(const Say& say, const FreeBeforeRun& r, const reclaim::Plan& plan,
                             const inventory::Inventory& look) {
  if (auto partial = reclaim::partial_instances(plan); !partial.empty()) {
    for (const auto& p : partial)
      say.line(fmt::format("{}: instance {} would be freed in part: {}", say.flag,
                              report::terminal_text(p.key), report::terminal_text(p.why)));
    say.line(fmt::format("an instance is freed whole or not at all: select all its GPUs, or "
                            "`gpureap run --replace KEY`; nothing was signalled, {}",
                            say.not_starting));
    return say.refused();
  }
  if (say.rep.unattended) {
    if (auto why = report::needs_confirmation(plan, look, r.mode); !why.empty()) {
      // The plan named by a command that shows it (ux-wave5-review #12: not a bare
      // `gpureap free --dry-run`, which plans every GPU's holders).
      say.line(fmt::format("{}: {}. No terminal to ask on: pass --yes to free it (the plan: "
                           "`{}`), or free it first; nothing was signalled, {}",
                           say.flag, why,
                           report::plan_command(r.mode, say.rep.options.selection.instance,
                                                say.rep.options.selection.gpus),
                           say.not_starting));
      return kExitTryLater;
    }
  } else if (!r.yes && !plan.targets.empty()) {
    const std::string text = fmt::format("gpureap run {}: the plan\n{}", say.flag,
                                         report::replace_plan_text(plan, look));
    const auto columns = stderr_columns();
    print_err(columns ? report::wrap_lines(text, *columns) : text);
    if (!ask_on_tty(report::replace_question(plan, r.command))) {
      say.line(fmt::format("not confirmed; nothing was signalled, {}", say.not_starting));
      return kExitUsage;
    }
  }
  return std::nullopt;
}

// Step 2's verdict said; an exit status unless the GPUs were verified free.
std::optional<int> say_freed(const GlobalOptions& global, const Say& say,
                             const reclaim::FreeOutcome& freed, const std::string& changed) {
  switch (freed.verdict) {
    case reclaim::FreeVerdict::nothing_idle:
    case reclaim::FreeVerdict::nothing_matched:
      say.line(fmt::format("{}: nothing left to free (it ended meanwhile)", say.flag));
      return kExitOk;
    case reclaim::FreeVerdict::not_measured:
      say.line(fmt::format("{}: whether the GPUs hold memory cannot be measured; {}", say.flag,
                              say.not_starting));
      return kExitSystem;
    case reclaim::FreeVerdict::stopped:
      say.line(fmt::format("{}: {} since the plan was made; nothing was signalled, {}",
                              say.flag, changed, say.not_starting));
      return kExitTryLater;  // the node changed: a later look may go ahead
    case reclaim::FreeVerdict::freed:
      return std::nullopt;
    case reclaim::FreeVerdict::still_held:
    case reclaim::FreeVerdict::unmeasured:
    case reclaim::FreeVerdict::interrupted:
      break;
  }
  if (say.line.record) {
    say.line.record->plan = freed.plan;
    say.line.record->report = *freed.report;
  } else {
    print_err(report::free_text(*freed.report, stderr_style(global), &freed.plan));
  }
  say.line(
      fmt::format("{}: the GPUs were not verified free; {}", say.flag, say.not_starting));
  return freed.verdict == reclaim::FreeVerdict::unmeasured ? kExitSystem : kExitStillHeld;
}

}  // namespace run_replace

using namespace run_replace;

int free_before_run(const GlobalOptions& global, const FreeBeforeRun& r,
                    report::ReplaceRecord* record) {
  supervise::Replacement rep = replacement_of(r);
  const Say say{flag_of(r), fmt::format("not starting {}", r.command), rep, Voice{record}};
  if (record) record->flag = say.flag;
  auto state = inventory::state_dir();
  if (!state) {
    say.line(fmt::format("{}: {}", say.flag, state.error().message));
    return kExitSystem;
  }
  inventory::Node node = open_node(global, *state, FirstLook::scan);
  if (node.device_error()) {
    say.line(fmt::format("{}: {}", say.flag, node.device_error()->message));
    return kExitSystem;
  }
  node.set_interrupt_flag(&g_replace_interrupted);
  auto control = open_audited_control("run", reclaim::AuditActor::free,
                                      reclaim::AuditCaller::current(node.proc_root()),
                                      node.proc_root(), *state);
  reclaim::Freer freer{node, *control};

  // 1. The plan, without the lock: shown, checked, confirmed.
  const reclaim::FreeSession first = supervise::preview_replace(freer, rep);
  for (const auto& w : first.look.warnings) say.line("warning: " + w);
  if (first.end == reclaim::SessionEnd::not_chosen) return say_not_selected(say, first.look);
  auto plan = judged(say, first);
  if (const int* code = std::get_if<int>(&plan)) return *code;
  const reclaim::Plan& shown = std::get<reclaim::Plan>(plan);
  if (auto code = confirmed(say, r, shown, first.look)) return *code;
  if (shown.targets.empty()) {
    say.line(fmt::format("{}: nothing to free on GPU {}", say.flag, say.gpus()));
    say_left_alone(say, shown, first.look);
    return kExitOk;
  }

  // 2. Under the lock, on a fresh look: the confirmed plan or less, reclaimed and verified.
  std::optional<InterruptScope> interrupts;
  // In place on a terminal only (through a pipe the lines below say it all; --json: no
  // text before its document).
  const auto view = ::isatty(2) == 1 && !record ? progress_view() : nullptr;
  std::string changed;
  const reclaim::FreeSession done = supervise::replace_confirmed(
      freer, rep, shown, *state, std::chrono::steady_clock::now() + r.timeout,
      [&] { interrupts.emplace(); },
      [view](const std::vector<reclaim::GpuRelease>& g) {
        if (view) print_err(view->update(g));
      },
      changed);
  if (done.end == reclaim::SessionEnd::lock_failed) {
    say.line(fmt::format("{}: {}; {}", say.flag, done.problem, say.not_starting));
    return kExitSystem;
  }
  if (done.end == reclaim::SessionEnd::not_chosen) return say_not_selected(say, done.look);
  const reclaim::FreeOutcome& freed = done.outcome;
  if (view && freed.report) print_err(view->finish());
  if (auto code = say_freed(global, say, freed, changed)) return *code;
  (void)node.save_baselines();

  // 3. The old instance's ports: closed, or the new server would meet EADDRINUSE.
  const std::vector<unsigned> ports = supervise::old_ports(freed.plan);
  if (auto open = supervise::ports_still_listening(ports, node.proc_root()); !open.empty()) {
    for (const auto& p : open) say.line(report::open_port_text(p));
    say.line(fmt::format("{}: the GPUs are free, but a port of the old instance is open; {}",
                            say.flag, say.not_starting));
    return kExitStillHeld;
  }
  say.line(report::freed_line(freed.plan, *freed.report));
  say.line(report::verified_line(freed.plan, *freed.report, ports));
  say_left_alone(say, freed.plan, done.look);
  if (record) {
    record->plan = freed.plan;
    record->report = *freed.report;
    record->ports = ports;
  }
  return kExitOk;
}

}  // namespace gpureap::cli
