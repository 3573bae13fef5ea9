#include "top/session.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <set>

#include "inventory/agent_client.h"
#include "reclaim/free_session.h"
#include "report/free_report.h"
#include "report/terminal_text.h"
#include "report/watch_events.h"
#include "top/uptime.h"
#include "util/text.h"
#include "util/plural.h"

namespace gpureap::top {
namespace {

constexpr std::chrono::seconds kMessageShown{8};
constexpr std::chrono::milliseconds kHistoryDeadline{1000};

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
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The title, ink and (for verdicts without a report) lines of a verdict's box.
void title_verdict(Box& result, const reclaim::FreeOutcome& out) {
  switch (out.verdict) {
    case reclaim::FreeVerdict::stopped:  // said on the message line instead
      break;
    case reclaim::FreeVerdict::not_measured:
      result.title = "not measured";
      result.lines = {
          "NVML cannot read the selected GPUs, so whether they hold memory cannot be "
          "measured; nothing was signalled"};
      result.ink = Ink::warn;
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
      result.ink = Ink::ok;
      break;
    case reclaim::FreeVerdict::still_held:
      result.title = "memory still held";
      result.ink = Ink::warn;
      break;
    case reclaim::FreeVerdict::unmeasured:
      result.title = "signalled, release not measured";
      result.ink = Ink::warn;
      break;
    case reclaim::FreeVerdict::interrupted:
      result.title = "interrupted";
      result.ink = Ink::warn;
      break;
  }
}

}  // namespace

Box verdict_box(const reclaim::FreeOutcome& out) {
  Box result;
  result.footer = "any key closes";
  title_verdict(result, out);
  if (out.report) {
    std::string text;
    try {
      text = report::free_text(*out.report, report::Style{}, &out.plan);
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

TopSession::TopSession(SessionContext context, const SessionOptions& options)
    : context_(std::move(context)), options_(options), usage_(context_.node.proc_root()) {
  state_.readonly = options.readonly;
}

int TopSession::run() {
  auto next_look = std::chrono::steady_clock::now();
  while (!stopping()) {
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
    const Key key = context_.terminal.read_key(std::max(wait, std::chrono::milliseconds(0)));
    if (key.code == KeyCode::none) continue;
    const KeyResult r = handle_key(state_, rows_, key, list_rows_, gpu_ids());
    if (!r.message.empty()) say(r.message);
    switch (r.action) {
      case Action::none:
        break;
      case Action::quit:
        return 0;
      case Action::find:
        find();
        break;
      case Action::help:
        show_box({"keys", key_help(state_.readonly), "any key closes"}, /*wait=*/true);
        break;
      case Action::detail:
        show_detail();
        break;
      case Action::free_tagged:
        free_tagged();
        next_look = std::chrono::steady_clock::now();  // show the GPUs as they are now
        break;
    }
  }
  return 0;
}

void TopSession::look() {
  context_.node.ask_agent_again();
  inv_ = context_.node.look();
  record_history();
  std::vector<proc::ProcessId> held;
  for (const auto& v : inv_.gpus)
    for (const auto& gh : v.holders)
      if (gh.uses_gpu) held.push_back(gh.holder.id);
  usage_.sample(held, std::chrono::steady_clock::now());
  // The first look learns the node: what was there before top started is on screen, not
  // news (issue 53 #11: a zombie leader from minutes before was announced at start).
  const auto events = events_.observe(inv_, wall_seconds());
  if (events_primed_ && !events.empty()) {
    // One message line: an orphan first (what a person acts on) and how many more, so a
    // later event of the same look does not hide it.
    auto first = std::find_if(events.begin(), events.end(), [](const inventory::Event& e) {
      return e.kind == inventory::EventKind::orphaned_memory;
    });
    if (first == events.end()) first = events.begin();
    // Narrow: the time of day; the count first, where a cut line keeps it.
    say((events.size() > 1 ? fmt::format("(+{} more) ", events.size() - 1) : std::string()) +
        report::watch_event_brief(*first));
  }
  events_primed_ = true;
  // Tags of processes that are gone would free nothing: drop them.
  std::set<proc::ProcessId> present;
  for (const auto& v : inv_.gpus)
    for (const auto& gh : v.holders) present.insert(gh.holder.id);
  std::erase_if(state_.tagged, [&](const proc::ProcessId& id) { return !present.contains(id); });
}

// The sparklines: the first look answered by the agent seeds them with the agent's
// last minutes (its newest reading is that look's); every other look appends to them.
void TopSession::record_history() {
  const bool first = !history_asked_;
  history_asked_ = true;
  inventory::Node& node = context_.node;
  if (first && inv_.source == "agent" && node.agent_socket()) {
    if (auto past = inventory::ask_agent_history(*node.agent_socket(), kHistoryDeadline)) {
      history_.seed(*past);
      return;
    }
  }
  history_.record(inv_);
}

std::vector<gpu::DeviceId> TopSession::gpu_ids() const {
  std::vector<gpu::DeviceId> out;
  for (const auto& v : inv_.gpus) out.push_back(v.info.id);
  return out;
}

void TopSession::say(std::string message) {
  message_ = std::move(message);
  message_until_ = std::chrono::steady_clock::now() + kMessageShown;
}

Screen TopSession::layout(const std::string& message_override) {
  const Terminal& terminal = context_.terminal;
  rows_ = build_rows(inv_, state_);
  Frame f;
  f.inv = &inv_;
  f.rows = &rows_;
  f.state = &state_;
  f.history = &history_;
  f.usage = &usage_.usage();
  f.uptime_seconds = read_uptime(context_.node.proc_root());
  f.clock_ticks = ::sysconf(_SC_CLK_TCK);
  f.clock = clock_now();
  if (!message_override.empty())
    f.message = message_override;
  else if (std::chrono::steady_clock::now() < message_until_)
    f.message = message_;
  f.unicode = terminal.unicode();
  f.width = terminal.width();
  f.height = terminal.height();
  Screen screen = layout_screen(f);
  state_.scroll = screen.scroll;
  state_.hscroll = screen.hscroll;
  list_rows_ = screen.list_rows;
  if (state_.cursor.empty() && !rows_.empty()) state_.cursor = rows_.front().id;
  return screen;
}

// 'd' (or Enter on a process): the row under the cursor whole, in a box.
void TopSession::show_detail() {
  layout();  // rows_ as drawn
  std::size_t at = 0;
  for (std::size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i].id == state_.cursor) at = i;
  Frame f;
  f.inv = &inv_;
  f.rows = &rows_;
  f.state = &state_;
  f.uptime_seconds = read_uptime(context_.node.proc_root());
  f.clock_ticks = ::sysconf(_SC_CLK_TCK);
  show_box(detail_box(f, at, context_.terminal.width()), /*wait=*/true);
}

// Draws `box` over the screen; with `wait`, until a key closes it (up/down scroll it).
// Returns the closing key.
Key TopSession::show_box(Box unfitted, bool wait) {
  Terminal& terminal = context_.terminal;
  // Broken at words for this width (again after a resize), so scrolling counts the
  // lines shown.
  std::size_t fitted_for = terminal.width();
  Box box = fitted_box(unfitted, fitted_for);
  for (;;) {
    if (terminal.width() != fitted_for) {
      fitted_for = terminal.width();
      unfitted.scroll = box.scroll;
      box = fitted_box(unfitted, fitted_for);
    }
    Screen screen = layout();
    overlay_box(screen, box, terminal.width(), terminal.height());
    terminal.draw(screen);
    if (!wait) return {};
    const Key key = terminal.read_key(std::chrono::seconds(1));
    if (stopping()) return {KeyCode::escape, 0};
    if (key.code == KeyCode::none || key.code == KeyCode::resize) continue;
    if (key.code == KeyCode::up || (key.code == KeyCode::character && key.c == 'k')) {
      if (box.scroll > 0) --box.scroll;
      continue;
    }
    if (key.code == KeyCode::down || (key.code == KeyCode::character && key.c == 'j')) {
      if (box.scroll + 1 < box.lines.size()) ++box.scroll;
      continue;
    }
    if (key.code == KeyCode::page_down) {
      box.scroll = std::min(box.scroll + 10, box.lines.empty() ? 0 : box.lines.size() - 1);
      continue;
    }
    if (key.code == KeyCode::page_up) {
      box.scroll -= std::min<std::size_t>(box.scroll, 10);
      continue;
    }
    return key;
  }
}

// '/': the text filter, typed on the message line from empty (Enter keeps it, Enter on
// nothing shows every holder, Esc restores the one before).
void TopSession::find() {
  const std::string before = state_.text;
  std::string text;
  for (;;) {
    context_.terminal.draw(
        layout("find (user, command, instance, container; Enter on nothing: all): " + text + "_"));
    const Key key = context_.terminal.read_key(std::chrono::seconds(1));
    if (stopping()) return;
    if (key.code == KeyCode::enter) break;
    if (key.code == KeyCode::escape) {
      state_.text = before;
      return;
    }
    if (key.code == KeyCode::backspace && !text.empty()) text.pop_back();
    if (key.code == KeyCode::character && text.size() < 64) text += key.c;
    state_.text = text;  // the list follows as it is typed
  }
  state_.text = text;
  say(text.empty() ? "no text filter"
                   : "showing holders that contain \"" + text + "\" (/ and Enter on nothing: all)");
}

// free's go-ahead in a box (the processes said yes to go to `confirmed`, acted on under
// the lock), and the release as it is watched.
reclaim::FreeSteps TopSession::free_steps(std::chrono::milliseconds grace,
                                          std::vector<proc::ProcessId>& confirmed) {
  reclaim::FreeSteps steps;
  steps.go_ahead = [this, grace, &confirmed](const reclaim::Plan& plan) {
    // The plan laid out for the box, as `free` lays it out for a terminal: its reasons
    // broken at words beneath each row, never cut by the box's edge.
    auto lines = split_lines(report::plan_text(
        plan, report::Style{}, grace,
        report::TableWidth{box_inner_width(context_.terminal.width()), false}));
    const Key key =
        show_box({"free " + count_of(plan.targets.size(), "process", "processes") + "?", std::move(lines),
                  "y free them (SIGTERM, then SIGKILL after the grace)   n/Esc cancel"},
                 true);
    if (key.code == KeyCode::character && (key.c == 'y' || key.c == 'Y'))
      for (const auto& t : plan.targets) confirmed.push_back(t.id);
    return false;  // acted on below, under the lock
  };
  steps.progress = [this](const std::vector<reclaim::GpuRelease>& gpus) {
    show_box({"freeing: watching the release",
              {report::terminal_text(report::progress_line(gpus)), "",
               "memory is called freed only when NVML reads it back at the baseline"},
              "Ctrl-C stops waiting"},
             false);
  };
  return steps;
}

// The tagged set through the one free session (reclaim/free_session.h), as `gpureap free
// --pid` would, but by exact identity (pid and start time): a fresh look, the plan
// confirmed in a box, then free's lock, a fresh look under it and only the confirmed
// processes, protections, pidfds, the audit trail (actor `top`). The box waits for a
// person without the lock: an epilog or the reaper never waits for it (W3-08).
void TopSession::free_tagged() {
  inventory::Node& node = context_.node;
  const Result<std::string> state_dir = context_.state_dir();
  if (!state_dir) {
    show_box({"cannot free", {report::terminal_text(state_dir.error().message)}, "any key"}, true);
    return;
  }
  show_box({"freeing", {"taking a fresh look..."}, ""}, false);
  node.ask_agent_again();

  std::vector<std::string> audit_problems;
  auto control = context_.open_control(*state_dir, [&](const std::string& problem) {
    audit_problems.push_back("warning: " + report::terminal_text(problem));
  });
  reclaim::Freer freer{node, *control};

  // A fresh look, the tagged set's GPUs, the plan confirmed in a box; then, on yes,
  // free's lock, a fresh look under it and only the confirmed processes.
  reclaim::FreeRequest request;
  request.options.selection.ids.assign(state_.tagged.begin(), state_.tagged.end());
  request.options.selection.ids_left_out = "not tagged";  // the user's set, not a reap's
  request.gpus_from_ids = true;
  std::vector<proc::ProcessId> confirmed;
  request.steps = free_steps(request.options.escalation.grace, confirmed);
  context_.interrupted.store(false);
  node.set_interrupt_flag(&context_.interrupted);
  reclaim::FreeSession session = reclaim::free_session(freer, request);
  if (session.end == reclaim::SessionEnd::done && !confirmed.empty()) {
    show_box({"freeing", {"taking a fresh look under free's lock..."}, ""}, false);
    request.lock_dir = *state_dir;
    request.options.selection.ids = confirmed;
    request.steps.go_ahead = [](const reclaim::Plan&) { return true; };
    session = reclaim::free_session(freer, std::move(request));
  }
  node.set_interrupt_flag(nullptr);
  if (session.end != reclaim::SessionEnd::done) {
    if (session.end == reclaim::SessionEnd::lock_failed) {
      show_box({"cannot free", {report::terminal_text(session.problem)}, "any key"}, true);
      return;
    }
    state_.tagged.clear();
    say(confirmed.empty() ? "the tagged processes no longer use a GPU: nothing to do"
                          : "the confirmed processes no longer use a GPU: nothing to do");
    return;
  }
  context_.interrupted.store(false);
  (void)node.save_baselines();
  show_verdict(session.outcome, audit_problems);
}

// The verdict in a box over the GPUs as they are now (a not-confirmed plan: a message).
void TopSession::show_verdict(const reclaim::FreeOutcome& out,
                              const std::vector<std::string>& warnings) {
  if (out.verdict == reclaim::FreeVerdict::stopped) {
    say("not confirmed: nothing was signalled");
    return;
  }
  Box result = verdict_box(out);
  result.lines.insert(result.lines.end(), warnings.begin(), warnings.end());
  state_.tagged.clear();
  inv_ = context_.node.look();  // the screen behind the verdict shows the GPUs as they are now
  history_.record(inv_);
  show_box(std::move(result), true);
}

}  // namespace gpureap::top
