#include "report/progress_view.h"

#include <fmt/format.h>

#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {

ReleasePhase release_phase(const reclaim::GpuRelease& g) {
  if (!g.measured) return ReleasePhase::unreadable;
  if (g.freed_at) return ReleasePhase::freed;
  if (g.exited_at || g.unlisted_at) return ReleasePhase::releasing;
  if (g.signalled_at) return ReleasePhase::stopping;
  return ReleasePhase::held;
}

std::string_view phase_word(ReleasePhase p) {
  switch (p) {
    case ReleasePhase::held: return "held";
    case ReleasePhase::stopping: return "stopping";
    case ReleasePhase::releasing: return "releasing";
    case ReleasePhase::freed: return "freed";
    case ReleasePhase::unreadable: return "unreadable";
  }
  return "held";
}

namespace {

std::string row_text(const reclaim::GpuRelease& g) {
  const ReleasePhase p = release_phase(g);
  const std::string gpu = fmt::format("GPU {}", g.gpu);
  switch (p) {
    case ReleasePhase::freed:
      return fmt::format("{:<7} {:<10} {} -> {} in {:.2f} s", gpu, phase_word(p),
                         format_bytes(g.before), format_bytes(g.after()), *g.freed_at);
    case ReleasePhase::unreadable:
      return fmt::format("{:<7} {:<10} {}", gpu, phase_word(p), terminal_text(g.problem));
    case ReleasePhase::releasing:
    case ReleasePhase::stopping:
    case ReleasePhase::held:
      return fmt::format("{:<7} {:<10} {} -> {}", gpu, phase_word(p), format_bytes(g.before),
                         format_bytes(g.after()));
  }
  return gpu;
}

// Cut to `columns` - 1 display columns (the row holds no escapes: terminal_text above
// escapes the one free text), so that the cursor never wraps to a new row.
std::string fit(std::string text, std::size_t columns) {
  const std::size_t width = columns > 1 ? columns - 1 : 1;
  if (text.size() > width) text.resize(width);
  return text;
}

std::string event_line(const reclaim::GpuRelease& g, ReleasePhase p) {
  const std::string gpu = fmt::format("GPU {}", g.gpu);
  switch (p) {
    case ReleasePhase::stopping:
      return fmt::format("{}: stopping its holders ({} held)\n", gpu, format_bytes(g.before));
    case ReleasePhase::releasing:
      return fmt::format("{}: releasing: its holders are gone, {} still in use\n", gpu,
                         format_bytes(g.after()));
    case ReleasePhase::freed:
      return fmt::format("{}: freed: {} -> {} in {:.2f} s\n", gpu, format_bytes(g.before),
                         format_bytes(g.after()), *g.freed_at);
    case ReleasePhase::unreadable:
      return fmt::format("{}: unreadable: {}\n", gpu, terminal_text(g.problem));
    case ReleasePhase::held:
      return {};
  }
  return {};
}

}  // namespace

std::string progress_row(const reclaim::GpuRelease& g, std::size_t columns) {
  return fit(row_text(g), columns);
}

ProgressView::ProgressView(bool terminal, std::size_t columns)
    : terminal_(terminal), columns_(columns == 0 ? 80 : columns) {}

std::string ProgressView::update(const std::vector<reclaim::GpuRelease>& gpus) {
  std::string out;
  if (!terminal_) {
    if (phases_.size() != gpus.size()) phases_.assign(gpus.size(), ReleasePhase::held);
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const ReleasePhase p = release_phase(gpus[i]);
      if (p == phases_[i]) continue;
      phases_[i] = p;
      out += event_line(gpus[i], p);
    }
    return out;
  }
  std::vector<std::string> rows;
  rows.reserve(gpus.size());
  for (const auto& g : gpus) rows.push_back(progress_row(g, columns_));
  if (rows == shown_) return {};
  // Back to the first row drawn, then each row cleared and written again: the block
  // keeps its rows however often it is redrawn.
  if (!shown_.empty()) out += fmt::format("\033[{}A", shown_.size());
  for (const auto& r : rows) out += "\r\033[K" + r + "\n";
  shown_ = std::move(rows);
  return out;
}

std::string ProgressView::finish() {
  if (!terminal_ || shown_.empty()) return {};
  std::string out = fmt::format("\033[{}A\r\033[J", shown_.size());
  shown_.clear();
  return out;
}

}  // namespace gpureap::report
