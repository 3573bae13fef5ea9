// `gpureap top`: the live view. Steps: parse -> terminal? -> node -> loop (look through
// the agent or a scan -> rows -> screen -> keys) -> the tagged set freed through free's
// own flow (lock -> fresh look -> plan in a box -> confirm -> reclaim watched -> verdict).
// Everything on screen comes from the inventory `status` shows; top/ lays it out and
// draws it, this file owns the keys' effects and the free.

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <ctime>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/flags.h"
#include "inventory/agent_client.h"
#include "inventory/events.h"
#include "reclaim/free_session.h"
#include "report/free_report.h"
#include "report/terminal_text.h"
#include "report/watch_events.h"
#include "top/curses_view.h"
#include "top/history.h"
#include "top/keys.h"
#include "top/rows.h"
#include "top/screen_model.h"
#include "top/uptime.h"
#include "util/text.h"

namespace gpureap::cli {
namespace {

constexpr std::chrono::milliseconds kMinInterval{100};
constexpr std::chrono::seconds kMessageShown{8};
constexpr std::chrono::milliseconds kHistoryDeadline{1000};

struct TopOptions {
  std::chrono::milliseconds interval{1000};
  bool readonly = false;
};

std::atomic<bool> g_top_interrupted{false};  // Ctrl-C: stops a free's waits, else quits
std::atomic<bool> g_top_stop{false};         // SIGTERM, SIGHUP: quit
extern "C" void on_top_interrupt(int) {
  g_top_interrupted.store(true);
}
extern "C" void on_top_stop(int) {
  g_top_stop.store(true);
}

int top_usage_error(const std::string& message) {
  print_err(fmt::format("gpureap top: {}\n", report::terminal_text(message)));
  return kExitUsage;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  for_each_line(text, [&](std::string_view line) { out.emplace_back(line); });
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string clock_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The box that shows a free's verdict: its title and ink, then the report, the
// per-GPU result first.
top::Box verdict_box(const reclaim::FreeOutcome& out) {
  top::Box result;
  result.footer = "any key closes";
  switch (out.verdict) {
    case reclaim::FreeVerdict::stopped:  // said on the message line instead
      break;
    case reclaim::FreeVerdict::not_measured:
      result.title = "not measured";
      result.lines = {"NVML cannot read the selected GPUs, so whether they hold memory cannot be "
                      "measured; nothing was signalled"};
      result.ink = top::Ink::warn;
      break;
    case reclaim::FreeVerdict::nothing_idle:
      result.title = "nothing to do";
      result.lines = {"the GPUs of the tagged processes hold no memory above baseline"};
      break;
    case reclaim::FreeVerdict::nothing_matched:
      result.title = "nothing to do";
      result.lines = split_lines(report::plan_text(out.plan, report::Style{}));
      result.lines.insert(result.lines.begin(),
                          "free may signal none of the tagged processes (see why below)");
      break;
    case reclaim::FreeVerdict::freed:
      result.title = "freed and verified";
      result.ink = top::Ink::ok;
      break;
    case reclaim::FreeVerdict::still_held:
      result.title = "memory still held";
      result.ink = top::Ink::warn;
      break;
    case reclaim::FreeVerdict::unmeasured:
      result.title = "signalled, release not measured";
      result.ink = top::Ink::warn;
      break;
    case reclaim::FreeVerdict::interrupted:
      result.title = "interrupted";
      result.ink = top::Ink::warn;
      break;
  }
  if (out.report) {
    std::string text;
    try {
      text = report::free_text(*out.report, report::Style{});
    } catch (const std::exception&) {
      text = report::free_record(*out.report);
    }
    result.lines = split_lines(text);
    // The verdict first: the per-GPU result, then the actions that led to it.
    auto it = std::find_if(result.lines.begin(), result.lines.end(),
                           [](const std::string& l) { return l.starts_with("Result after"); });
    std::rotate(result.lines.begin(), it, result.lines.end());
  }
  return result;
}

// One session of top: the node, the view, what was looked at last, what the person chose.
class TopSession {
 public:
  TopSession(const GlobalOptions& global, const TopOptions& options, inventory::Node& node,
             top::CursesView& view)
      : global_(global), options_(options), node_(node), view_(view) {
    state_.readonly = options.readonly;
  }

  int run() {
    auto next_look = std::chrono::steady_clock::now();
    while (!g_top_stop.load() && !g_top_interrupted.load()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_look) {
        look();
        next_look = std::chrono::steady_clock::now() + options_.interval;
      }
      draw();
      // Ages tick every second even when looks are rarer.
      auto wait = std::min<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_look - now),
          std::chrono::seconds(1));
      const top::Key key = view_.read_key(std::max(wait, std::chrono::milliseconds(0)));
      if (key.code == top::KeyCode::none) continue;
      const top::KeyResult r = top::handle_key(state_, rows_, key, list_rows_, gpu_ids());
      if (!r.message.empty()) say(r.message);
      switch (r.action) {
        case top::Action::none:
          break;
        case top::Action::quit:
          return kExitOk;
        case top::Action::find:
          find();
          break;
        case top::Action::help:
          show_box({"keys", top::key_help(state_.readonly), "any key closes"}, /*wait=*/true);
          break;
        case top::Action::detail:
          show_detail();
          break;
        case top::Action::free_tagged:
          free_tagged();
          next_look = std::chrono::steady_clock::now();  // show the GPUs as they are now
          break;
      }
    }
    return kExitOk;
  }

 private:
  void look() {
    node_.ask_agent_again();
    inv_ = node_.look();
    record_history();
    std::vector<proc::ProcessId> held;
    for (const auto& v : inv_.gpus)
      for (const auto& gh : v.holders)
        if (gh.uses_gpu) held.push_back(gh.holder.id);
    usage_.sample(held, std::chrono::steady_clock::now());
    for (const auto& e : events_.observe(inv_, wall_seconds()))
      say(report::watch_event_brief(e));  // the time of day: the screen is narrow
    // Tags of processes that are gone would free nothing: drop them.
    std::set<proc::ProcessId> present;
    for (const auto& v : inv_.gpus)
      for (const auto& gh : v.holders) present.insert(gh.holder.id);
    std::erase_if(state_.tagged, [&](const proc::ProcessId& id) { return !present.contains(id); });
  }

  // The sparklines: the first look answered by the agent seeds them with the agent's
  // last minutes (its newest reading is that look's); every other look appends to them.
  void record_history() {
    const bool first = !history_asked_;
    history_asked_ = true;
    if (first && inv_.source == "agent" && node_.agent_socket()) {
      if (auto past = inventory::ask_agent_history(*node_.agent_socket(), kHistoryDeadline)) {
        history_.seed(*past);
        return;
      }
    }
    history_.record(inv_);
  }

  std::vector<gpu::DeviceId> gpu_ids() const {
    std::vector<gpu::DeviceId> out;
    for (const auto& v : inv_.gpus) out.push_back(v.info.id);
    return out;
  }

  void say(std::string message) {
    message_ = std::move(message);
    message_until_ = std::chrono::steady_clock::now() + kMessageShown;
  }

  top::Screen layout(const std::string& message_override = {}) {
    rows_ = top::build_rows(inv_, state_);
    top::Frame f;
    f.inv = &inv_;
    f.rows = &rows_;
    f.state = &state_;
    f.history = &history_;
    f.usage = &usage_.usage();
    f.uptime_seconds = top::read_uptime(node_.proc_root());
    f.clock_ticks = ::sysconf(_SC_CLK_TCK);
    f.clock = clock_now();
    if (!message_override.empty())
      f.message = message_override;
    else if (std::chrono::steady_clock::now() < message_until_)
      f.message = message_;
    f.unicode = view_.unicode();
    f.width = view_.width();
    f.height = view_.height();
    top::Screen screen = top::layout_screen(f);
    state_.scroll = screen.scroll;
    state_.hscroll = screen.hscroll;
    list_rows_ = screen.list_rows;
    if (state_.cursor.empty() && !rows_.empty()) state_.cursor = rows_.front().id;
    return screen;
  }

  void draw() { view_.draw(layout()); }

  // 'd' (or Enter on a process): the row under the cursor whole, in a box.
  void show_detail() {
    layout();  // rows_ as drawn
    std::size_t at = 0;
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (rows_[i].id == state_.cursor) at = i;
    top::Frame f;
    f.inv = &inv_;
    f.rows = &rows_;
    f.state = &state_;
    f.uptime_seconds = top::read_uptime(node_.proc_root());
    f.clock_ticks = ::sysconf(_SC_CLK_TCK);
    show_box(top::detail_box(f, at, view_.width()), /*wait=*/true);
  }

  // Draws `box` over the screen; with `wait`, until a key closes it (up/down scroll it).
  // Returns the closing key.
  top::Key show_box(top::Box box, bool wait) {
    for (;;) {
      top::Screen screen = layout();
      top::overlay_box(screen, box, view_.width(), view_.height());
      view_.draw(screen);
      if (!wait) return {};
      const top::Key key = view_.read_key(std::chrono::seconds(1));
      if (g_top_stop.load() || g_top_interrupted.load()) return {top::KeyCode::escape, 0};
      if (key.code == top::KeyCode::none || key.code == top::KeyCode::resize) continue;
      if (key.code == top::KeyCode::up || (key.code == top::KeyCode::character && key.c == 'k')) {
        if (box.scroll > 0) --box.scroll;
        continue;
      }
      if (key.code == top::KeyCode::down || (key.code == top::KeyCode::character && key.c == 'j')) {
        if (box.scroll + 1 < box.lines.size()) ++box.scroll;
        continue;
      }
      if (key.code == top::KeyCode::page_down) {
        box.scroll = std::min(box.scroll + 10, box.lines.empty() ? 0 : box.lines.size() - 1);
        continue;
      }
      if (key.code == top::KeyCode::page_up) {
        box.scroll -= std::min<std::size_t>(box.scroll, 10);
        continue;
      }
      return key;
    }
  }

  // '/': the text filter, typed on the message line from empty (Enter keeps it, Enter on
  // nothing shows every holder, Esc restores the one before).
  void find() {
    const std::string before = state_.text;
    std::string text;
    for (;;) {
      view_.draw(layout("find (user, command, instance, container; Enter on nothing: all): " +
                        text + "_"));
      const top::Key key = view_.read_key(std::chrono::seconds(1));
      if (g_top_stop.load() || g_top_interrupted.load()) return;
      if (key.code == top::KeyCode::enter) break;
      if (key.code == top::KeyCode::escape) {
        state_.text = before;
        return;
      }
      if (key.code == top::KeyCode::backspace && !text.empty()) text.pop_back();
      if (key.code == top::KeyCode::character && text.size() < 64) text += key.c;
      state_.text = text;  // the list follows as it is typed
    }
    state_.text = text;
    say(text.empty() ? "no text filter" : "showing holders that contain \"" + text + "\" (/ and Enter on nothing: all)");
  }

  // The tagged set through the one free session (reclaim/free_session.h), as `gpureap free
  // --pid` would, but by exact identity (pid and start time): a fresh look, the plan
  // confirmed in a box, then free's lock, a fresh look under it and only the confirmed
  // processes, protections, pidfds, the audit trail (actor `top`). The box waits for a
  // person without the lock: an epilog or the reaper never waits for it (W3-08).
  void free_tagged() {
    auto state_dir = inventory::state_dir();
    if (!state_dir) {
      show_box({"cannot free", {report::terminal_text(state_dir.error().message)}, "any key"}, true);
      return;
    }
    show_box({"freeing", {"taking a fresh look..."}, ""}, false);
    node_.ask_agent_again();

    std::vector<std::string> audit_problems;
    auto audit = open_audit("top", *state_dir, [&](const std::string& problem) {
      audit_problems.push_back("warning: " + report::terminal_text(problem));
    });
    reclaim::AuditTrail trail(*audit, reclaim::AuditActor::top,
                              reclaim::AuditCaller::current(node_.proc_root()));
    reclaim::SystemProcessControl system_control(node_.proc_root());
    reclaim::AuditedControl control(system_control, trail, node_.proc_root());
    reclaim::Freer freer{node_, control};

    // The one free session (reclaim/free_session.h): a fresh look, the tagged set's GPUs,
    // the plan confirmed in a box; then, on yes, free's lock, a fresh look under it and
    // only the confirmed processes.
    reclaim::FreeRequest request;
    request.options.selection.ids.assign(state_.tagged.begin(), state_.tagged.end());
    request.options.selection.ids_left_out = "not tagged";  // the user's set, not a reap's
    request.gpus_from_ids = true;
    const auto grace = request.options.escalation.grace;
    std::vector<proc::ProcessId> confirmed;
    request.steps.go_ahead = [&](const reclaim::Plan& plan) {
      auto lines = split_lines(report::plan_text(plan, report::Style{}, grace));
      const top::Key key =
          show_box({fmt::format("free {} process(es)?", plan.targets.size()), std::move(lines),
                    "y free them (SIGTERM, then SIGKILL after the grace)   n/Esc cancel"},
                   true);
      if (key.code == top::KeyCode::character && (key.c == 'y' || key.c == 'Y'))
        for (const auto& t : plan.targets) confirmed.push_back(t.id);
      return false;  // acted on below, under the lock
    };
    request.steps.progress = [&](const std::vector<reclaim::GpuRelease>& gpus) {
      show_box({"freeing: watching the release",
                {report::terminal_text(report::progress_line(gpus)), "",
                 "memory is called freed only when NVML reads it back at the baseline"},
                "Ctrl-C stops waiting"},
               false);
    };
    g_top_interrupted.store(false);
    node_.set_interrupt_flag(&g_top_interrupted);
    reclaim::FreeSession session = reclaim::free_session(freer, request);
    if (session.end == reclaim::SessionEnd::done && !confirmed.empty()) {
      show_box({"freeing", {"taking a fresh look under free's lock..."}, ""}, false);
      request.lock_dir = *state_dir;
      request.options.selection.ids = confirmed;
      request.steps.go_ahead = [](const reclaim::Plan&) { return true; };
      session = reclaim::free_session(freer, std::move(request));
    }
    if (session.end != reclaim::SessionEnd::done) {
      node_.set_interrupt_flag(nullptr);
      if (session.end == reclaim::SessionEnd::lock_failed) {
        show_box({"cannot free", {report::terminal_text(session.problem)}, "any key"}, true);
        return;
      }
      state_.tagged.clear();
      say(confirmed.empty() ? "the tagged processes no longer use a GPU: nothing to do"
                            : "the confirmed processes no longer use a GPU: nothing to do");
      return;
    }
    const reclaim::FreeOutcome& out = session.outcome;
    node_.set_interrupt_flag(nullptr);
    g_top_interrupted.store(false);
    (void)node_.save_baselines();

    if (out.verdict == reclaim::FreeVerdict::stopped) {
      say("not confirmed: nothing was signalled");
      return;
    }
    top::Box result = verdict_box(out);
    result.lines.insert(result.lines.end(), audit_problems.begin(), audit_problems.end());
    state_.tagged.clear();
    inv_ = node_.look();  // the screen behind the verdict shows the GPUs as they are now
    history_.record(inv_);
    show_box(std::move(result), true);
  }

  const GlobalOptions& global_;
  const TopOptions& options_;
  inventory::Node& node_;
  top::CursesView& view_;
  top::ViewState state_;
  top::MemoryHistory history_;
  bool history_asked_ = false;  // the agent's history is asked for at the first look only
  inventory::EventDetector events_;
  inventory::Inventory inv_;
  std::vector<top::Row> rows_;
  std::size_t list_rows_ = 0;
  std::string message_;
  top::UsageSampler usage_{node_.proc_root()};  // CPU% and host RSS per holder
  std::chrono::steady_clock::time_point message_until_{};
};

// Installs top's signal handlers and restores the old ones when top returns.
class TopSignals {
 public:
  TopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_top_interrupt;  // no SA_RESTART: a key wait returns at once
    ::sigaction(SIGINT, &sa, &old_int_);
    sa.sa_handler = on_top_stop;
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGHUP, &sa, &old_hup_);
  }
  ~TopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGHUP, &old_hup_, nullptr);
  }
  TopSignals(const TopSignals&) = delete;
  TopSignals& operator=(const TopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_hup_ {};
};

int run_top(const GlobalOptions& global, const TopOptions& o) {
  // 1. Parse: top is a screen, not a stream.
  if (global.json)
    return top_usage_error(
        "--json: top is interactive; `gpureap status --json` prints the same inventory for "
        "scripts");
  if (o.interval < kMinInterval)
    return top_usage_error(fmt::format("--interval {}ms: at least {}ms", o.interval.count(),
                                       kMinInterval.count()));
  if (::isatty(0) != 1 || ::isatty(1) != 1)
    return top_usage_error(
        "needs a terminal on stdin and stdout; `gpureap status` prints the same view once, "
        "`gpureap status --json` for scripts");

  // 2. The node (the agent answers each look when one watches this node).
  inventory::Node node = open_node(global);
  if (node.device_error()) {
    print_err(fmt::format("gpureap top: {}\n", report::terminal_text(node.device_error()->message)));
    return kExitSystem;
  }

  // 3. The screen, until q.
  TopSignals signals;
  auto view = top::CursesView::open(stdout_style(global).color);
  if (!view) {
    print_err(fmt::format("gpureap top: {}\n", report::terminal_text(view.error().message)));
    return kExitSystem;
  }
  TopSession session(global, o, node, **view);
  return session.run();
}

}  // namespace

void add_top_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto o = std::make_shared<TopOptions>();
  auto* sub = app.add_subcommand(
      "top",
      "Live view of holders by instance; tag orphans and free them.\n"
      "Per GPU a memory bar (baseline, live holders, orphaned, memory no process explains)\n"
      "with utilization and a history (a running agent's last ten minutes, else since top\n"
      "started); below, the holders grouped by server instance, a worker under its parent,\n"
      "orphans and zombie leaders marked, ages ticking. Asks a running\n"
      "`gpureap watch` at each refresh, else scans. Keys: arrows move, enter folds an "
      "instance,\n"
      "s sorts, o shows orphans only, g one GPU, / finds text, space tags, F frees the tagged\n"
      "processes through free's own plan, lock, protections and audit trail: the plan is shown\n"
      "to confirm, then the release is watched until NVML reads the memory back at baseline\n"
      "(or the leftover is classified with the next step). ? lists the keys, q quits.\n"
      "Needs a terminal; NO_COLOR or --no-color draws without colour.\n\n"
      "Examples:\n"
      "  gpureap top                  watch, tag the orphans, free them\n"
      "  gpureap top --readonly       watch only: no tagging, no freeing\n"
      "  gpureap top --interval 2s    refresh every two seconds");
  add_duration(*sub, "--interval", o->interval, "Time between looks (at least 100ms)");
  sub->add_flag("--readonly", o->readonly, "Watch only: the tag and free keys are off");
  sub->footer(exit_status_help(kTopExits));
  sub->callback([&run, &global, o] { run = [&global, o] { return run_top(global, *o); }; });
}

}  // namespace gpureap::cli
