#include "top/keys.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/enum_names.h"

namespace gpureap::top {
namespace {

std::size_t cursor_index(const ViewState& state, const std::vector<Row>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].id == state.cursor) return i;
  return 0;
}

void move_to(ViewState& state, const std::vector<Row>& rows, long long index) {
  if (rows.empty()) return;
  index = std::clamp<long long>(index, 0, static_cast<long long>(rows.size()) - 1);
  state.cursor = rows[static_cast<std::size_t>(index)].id;
}

// Moving, scrolling and folding: the keys that are no character.
KeyResult handle_named_key(ViewState& state, const std::vector<Row>& rows, KeyCode code,
                           long long at, long long step) {
  switch (code) {
    case KeyCode::none:
    case KeyCode::resize:
    case KeyCode::character:
      return {};
    case KeyCode::up:
      move_to(state, rows, at - 1);
      return {};
    case KeyCode::down:
      move_to(state, rows, at + 1);
      return {};
    case KeyCode::page_up:
      move_to(state, rows, at - step);
      return {};
    case KeyCode::page_down:
      move_to(state, rows, at + step);
      return {};
    case KeyCode::home:
      move_to(state, rows, 0);
      return {};
    case KeyCode::end:
      move_to(state, rows, static_cast<long long>(rows.size()) - 1);
      return {};
    case KeyCode::escape:
    case KeyCode::backspace:
      return {};
    // Horizontal scroll of the list (htop's and nvitop's arrows); layout_screen keeps it
    // within the widest row and puts the scroll it kept back in the state.
    case KeyCode::left:
      state.hscroll -= std::min(state.hscroll, kHScrollStep);
      return {};
    case KeyCode::right:
      state.hscroll += kHScrollStep;
      return {};
    case KeyCode::enter: {
      if (rows.empty()) return {};
      const Row& r = rows[static_cast<std::size_t>(at)];
      // Enter on a process shows it whole (nvitop's Enter); on a heading it folds.
      if (r.kind == Row::Kind::holder) return {Action::detail, ""};
      if (!state.collapsed.erase(r.instance)) state.collapsed.insert(r.instance);
      return {};
    }
  }
  return {};
}

// s and . the next sort key, , the one before (nvitop's , and . choose it too).
KeyResult cycle_sort(ViewState& state, char c) {
  const auto all = enum_values<SortKey>();
  auto it = std::find(all.begin(), all.end(), state.sort);
  if (c == ',')
    state.sort = it == all.begin() ? all.back() : *(it - 1);
  else
    state.sort = (it + 1 == all.end()) ? all.front() : *(it + 1);
  return {Action::none, fmt::format("sorted by {}{}", enum_name(state.sort),
                                    state.reverse ? ", reversed (r)" : "")};
}

// g: one GPU's holders, the next GPU each time, then every GPU's again.
KeyResult cycle_gpu(ViewState& state, const std::vector<gpu::DeviceId>& gpus) {
  if (gpus.empty()) return {};
  if (!state.gpu) {
    state.gpu = gpus.front();
  } else {
    auto it = std::find(gpus.begin(), gpus.end(), *state.gpu);
    if (it == gpus.end() || it + 1 == gpus.end())
      state.gpu.reset();
    else
      state.gpu = *(it + 1);
  }
  return {Action::none, state.gpu
                            ? "showing GPU " + gpu::device_text(*state.gpu) + "'s holders (g: next)"
                            : "showing every GPU's holders"};
}

// space: tags the row's processes (untags them when all are tagged), then moves down.
KeyResult toggle_tag(ViewState& state, const std::vector<Row>& rows, long long at) {
  if (state.readonly) return {Action::none, "read-only (--readonly): tagging and freeing are off"};
  if (rows.empty()) return {};
  const auto ids = row_processes(rows, static_cast<std::size_t>(at));
  const bool all = std::all_of(
      ids.begin(), ids.end(), [&](const proc::ProcessId& id) { return state.tagged.contains(id); });
  for (const auto& id : ids) {
    if (all)
      state.tagged.erase(id);
    else
      state.tagged.insert(id);
  }
  move_to(state, rows, at + 1);
  return {};
}

KeyResult handle_character(ViewState& state, const std::vector<Row>& rows, char c, long long at,
                           const std::vector<gpu::DeviceId>& gpus) {
  switch (c) {
    case 'q':
    case 'Q':
      return {Action::quit, ""};
    case 'j':
      move_to(state, rows, at + 1);
      return {};
    case 'k':  // vi's up, as in less and htop; nvitop's kill is F here, said once moved
      move_to(state, rows, at - 1);
      return {Action::none, "k moves up (j down); to kill, tag with space and press F"};
    case 's':
    case '.':
    case ',':
      return cycle_sort(state, c);
    case 'r':
      state.reverse = !state.reverse;
      return {Action::none, fmt::format("sorted by {}{}", enum_name(state.sort),
                                        state.reverse ? ", reversed (r: back)" : "")};
    case 'd':
      if (rows.empty()) return {};
      return {Action::detail, ""};
    // nvitop's keys that have no twin here get a word, not silence.
    case 't':
      return {Action::none,
              "the tree is always on: an instance's processes under it (enter folds)"};
    case 'K':
    case 'T':
    case 'I':
      return {Action::none,
              "no bare signal here: space tags, F frees (SIGTERM, then SIGKILL, then verified)"};
    case 'o':
      state.orphans_only = !state.orphans_only;
      return {Action::none, state.orphans_only ? "showing orphaned holders only (o: all)"
                                               : "showing every holder"};
    case 'g':
      return cycle_gpu(state, gpus);
    case '/':
      return {Action::find, ""};
    case 'c':
      for (const auto& r : rows)
        if (r.kind == Row::Kind::instance) state.collapsed.insert(r.instance);
      return {};
    case 'e':
      state.collapsed.clear();
      return {};
    case '?':
    case 'h':
      return {Action::help, ""};
    case ' ':
      return toggle_tag(state, rows, at);
    case 'u':
      state.tagged.clear();
      return {Action::none, "nothing tagged"};
    case 'F':
      if (state.readonly) return {Action::none, "read-only (--readonly): freeing is off"};
      if (state.tagged.empty())
        return {Action::none, "nothing tagged: space tags the process (or instance) under the cursor"};
      return {Action::free_tagged, ""};
    default:
      return {};
  }
}

}  // namespace

KeyResult handle_key(ViewState& state, const std::vector<Row>& rows, const Key& key,
                     std::size_t page, const std::vector<gpu::DeviceId>& gpus) {
  const auto at = static_cast<long long>(cursor_index(state, rows));
  const auto step = static_cast<long long>(std::max<std::size_t>(page, 1));
  if (key.code == KeyCode::character) return handle_character(state, rows, key.c, at, gpus);
  return handle_named_key(state, rows, key.code, at, step);
}

std::vector<std::string> key_help(bool readonly) {
  // Each line within the box of an 80-column screen (kHelpWidth).
  std::vector<std::string> out = {
      "up/down j/k PgUp/PgDn Home/End  move",
      "enter        on a heading: fold its processes (enter again unfolds)",
      "left/right   scroll the list sideways, to read what the screen cuts",
      "d, enter     on a process: all of it (command line, verdict, container)",
      "c / e        fold / unfold every instance",
      "s  , .       sort: gpu, memory, age, pid",
      "r            reverse the order",
      "o            only orphaned holders (and zombie leaders)",
      "g            only one GPU's holders (cycles through the GPUs)",
      "/            only holders holding a text (user, command, instance, ...)",
  };
  if (!readonly) {
    out.push_back("space        tag the process, or every listed process of an instance");
    out.push_back("u            untag everything");
    out.push_back("F            free the tagged: plan, confirm, verify (as gpureap free)");
  } else {
    out.push_back("(read-only: started with --readonly, nothing can be tagged or freed)");
  }
  out.push_back("q            quit");
  out.push_back("nvitop's t: the tree is always on; K/T/I: tag, then F (verified)");
  return out;
}

}  // namespace gpureap::top
