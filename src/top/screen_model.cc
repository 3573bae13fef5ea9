#include "top/screen_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "inventory/instances.h"
#include "proc/lineage.h"
#include "report/instance_text.h"
#include "report/status_table.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::top {
namespace {

bool utf8_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// A line of spans that never grows past `width` columns.
class LineBuilder {
 public:
  explicit LineBuilder(std::size_t width) : width_(width) {}
  LineBuilder& add(std::string_view text, Ink ink = Ink::normal) {
    if (used_ >= width_ || text.empty()) return *this;
    std::string cut = columns(text) > width_ - used_ ? fit(text, width_ - used_) : std::string(text);
    used_ += columns(cut);
    line_.spans.push_back({std::move(cut), ink});
    return *this;
  }
  /// Pads to the full width (so a cursor's reverse video spans the line).
  Line done(bool cursor = false) {
    if (used_ < width_) line_.spans.push_back({std::string(width_ - used_, ' '), Ink::normal});
    line_.cursor = cursor;
    return std::move(line_);
  }
  std::size_t left() const { return width_ - used_; }

 private:
  std::size_t width_;
  std::size_t used_ = 0;
  Line line_;
};

Line blank(std::size_t width) {
  return LineBuilder(width).done();
}

// The bar's four parts, in cells of `width`: baseline, live holders, orphaned holders,
// memory no process explains. A part that holds anything gets at least one cell.
struct BarParts {
  std::uint64_t baseline = 0, live = 0, orphaned = 0, unexplained = 0;
};

BarParts bar_parts(const inventory::GpuView& v) {
  BarParts p;
  const std::uint64_t used = v.used();
  p.baseline = std::min(v.baseline.bytes, used);
  for (const auto& gh : v.holders) {
    if (!gh.uses_gpu || !gh.gpu_bytes) continue;
    (proc::stray(gh.holder) ? p.orphaned : p.live) += *gh.gpu_bytes;
  }
  p.unexplained = v.unattributed_bytes;
  return p;
}

std::vector<std::size_t> cells(const std::vector<std::uint64_t>& parts, std::uint64_t total,
                               std::size_t width) {
  std::vector<std::size_t> out(parts.size(), 0);
  if (total == 0 || width == 0) return out;
  std::size_t used = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == 0) continue;
    auto n = static_cast<std::size_t>(
        std::llround(static_cast<double>(parts[i]) / static_cast<double>(total) * width));
    out[i] = std::max<std::size_t>(1, n);
    used += out[i];
  }
  // Rounding up small parts may overflow the bar: take the excess from the largest.
  while (used > width) {
    auto it = std::max_element(out.begin(), out.end());
    --*it;
    --used;
  }
  return out;
}

std::string gpus_text(const std::vector<gpu::DeviceId>& gpus) {
  return gpu::device_list(gpus);
}

std::string state_word(const inventory::GpuView& v) {
  switch (inventory::gpu_state(v)) {
    case inventory::GpuState::free:
      return "free";
    case inventory::GpuState::held:
      return "held";
    default:
      return std::string(inventory::enum_name(inventory::gpu_state(v)));
  }
}

Ink state_ink(const inventory::GpuView& v) {
  switch (inventory::gpu_state(v)) {
    case inventory::GpuState::free:
      return Ink::ok;
    case inventory::GpuState::held:
      return Ink::normal;
    default:
      return Ink::warn;
  }
}

}  // namespace

std::string sensors_text(const gpu::GpuInfo& info, bool with_cap) {
  const std::string temperature =
      info.temperature_c ? fmt::format("{:>3}C", *info.temperature_c) : "  -C";
  const std::string draw =
      info.power_mw ? fmt::format("{:>4}", (*info.power_mw + 500) / 1000) : "   -";
  if (!with_cap) return temperature + " " + draw + "W";
  // The cap beside the draw, as nvidia-smi's "75W / 700W": "  75/ 700W", "-" unknown.
  const std::string cap =
      info.power_limit_mw ? fmt::format("{:>4}", (*info.power_limit_mw + 500) / 1000) : "   -";
  return temperature + " " + draw + "/" + cap + "W";
}

std::string health_alarm(const gpu::GpuInfo& info) {
  std::vector<std::string> parts;
  if (info.clock_event_reasons && gpu::clock_events_worrying(*info.clock_event_reasons))
    for (auto word : gpu::clock_event_words(*info.clock_event_reasons))
      if (word != "power cap" && word != "applications clocks" && word != "sync boost" &&
          word != "display clocks")
        parts.emplace_back(word);
  if (info.ecc_uncorrected.value_or(0) > 0)
    parts.push_back(fmt::format("ECC {}", *info.ecc_uncorrected));
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

Line gpu_line(const Frame& f, const inventory::GpuView& v) {
  const std::size_t width = f.width;
  LineBuilder b(width);
  const std::string id = fmt::format("GPU {:<2}", gpu::device_text(v.info.id));
  std::string mem = "   ?/?    ";
  if (v.info.memory)
    mem = fmt::format("{:>5}/{:<5}", short_bytes(v.used()), short_bytes(v.info.memory->total));
  const std::string util =
      v.info.utilization_gpu ? fmt::format("SM{:>4}%", *v.info.utilization_gpu) : "SM    -";
  // The sensors from 60 columns on, the power cap beside the draw from 100; a sensor the
  // driver cannot read is "-", never 0.
  const std::string sensors = width >= 60 ? " " + sensors_text(v.info, width >= 100) : "";
  const std::string state = state_word(v);
  // id, bar, memory, utilization, sensors, sparkline, state: the bar and the sparkline
  // share what is left, the bar two parts to the sparkline's one.
  const std::size_t fixed = id.size() + 1 + 2 + 1 + mem.size() + 1 + util.size() +
                            sensors.size() + 1 + 1 + std::max<std::size_t>(state.size(), 4);
  const std::size_t flexible = width > fixed ? width - fixed : 0;
  std::size_t spark = flexible / 3;
  std::size_t bar = flexible - spark;
  if (bar < 10) {  // too narrow for both: the bar first
    bar = flexible;
    spark = 0;
  }
  b.add(id, Ink::title).add(" [");
  if (v.info.memory) {
    const BarParts p = bar_parts(v);
    auto n = cells({p.baseline, p.live, p.orphaned, p.unexplained}, v.info.memory->total, bar);
    b.add(std::string(n[0], ':'), Ink::bar_baseline)
        .add(std::string(n[1], '#'), Ink::bar_live)
        .add(std::string(n[2], 'O'), Ink::bar_orphan)
        .add(std::string(n[3], '?'), Ink::bar_unexplained);
    const std::size_t filled = n[0] + n[1] + n[2] + n[3];
    b.add(std::string(bar - std::min(bar, filled), ' '));
  } else {
    b.add(fit(v.info.problem.empty() ? "not measured" : "not measured: " +
                                                            report::terminal_text(v.info.problem),
              bar),
          Ink::warn);
  }
  b.add("] ").add(mem).add(" ").add(util, Ink::dim).add(sensors, Ink::dim).add(" ");
  if (spark > 0 && f.history)
    b.add(f.history->sparkline(MemoryHistory::key_of(v), spark, f.unicode), Ink::dim).add(" ");
  b.add(state, state_ink(v));
  return b.done();
}

Line legend_line(const Frame& f) {
  LineBuilder b(f.width);
  b.add("bar: ", Ink::dim)
      .add(":", Ink::bar_baseline)
      .add(" baseline  ", Ink::dim)
      .add("#", Ink::bar_live)
      .add(" live  ", Ink::dim)
      .add("O", Ink::bar_orphan)
      .add(" orphaned  ", Ink::dim)
      .add("?", Ink::bar_unexplained)
      .add(" unexplained", Ink::dim);
  // The classes of memory no process explains, with their GPUs.
  std::string classes;
  for (const auto& v : f.inv->gpus)
    if (v.unexplained != inventory::Unexplained::none && v.unattributed_bytes > 0)
      classes += fmt::format("{}GPU {} {} {}", classes.empty() ? "" : ", ",
                             gpu::device_text(v.info.id), short_bytes(v.unattributed_bytes),
                             inventory::enum_name(v.unexplained));
  if (!classes.empty()) b.add(": ", Ink::dim).add(classes, Ink::warn);
  // The card's health where it needs a look: heat, a hardware slowdown or the power
  // brake holding the clocks down, uncorrected ECC errors (status -v has the whole line).
  std::string health;
  for (const auto& v : f.inv->gpus)
    if (std::string alarm = health_alarm(v.info); !alarm.empty())
      health += fmt::format("{}GPU {} {}", health.empty() ? "" : ", ",
                            gpu::device_text(v.info.id), alarm);
  if (!health.empty()) b.add("  ! ", Ink::warn).add(health, Ink::warn);
  // Where the sparklines' past comes from: the agent's ring, or this top's own looks.
  if (f.history) b.add("  " + f.history->origin(), Ink::dim);
  return b.done();
}

Line title_line(const Frame& f, std::size_t hscroll) {
  const auto& inv = *f.inv;
  const ViewState& s = *f.state;
  LineBuilder b(f.width);
  b.add("gpureap top", Ink::title).add("  " + f.clock);
  b.add(fmt::format("  {} GPU{}", inv.gpus.size(), inv.gpus.size() == 1 ? "" : "s"));
  b.add(inv.source == "agent" ? fmt::format("  agent pid {}", inv.agent_pid) : "  scan", Ink::dim);
  b.add(fmt::format("  sort {}{}", enum_name(s.sort), s.reverse ? " (reversed)" : ""));
  std::string filter;
  if (s.orphans_only) filter += " orphans";
  if (s.gpu) filter += " GPU " + gpu::device_text(*s.gpu);
  if (!s.text.empty()) filter += " \"" + report::terminal_text(s.text, 20) + "\"";
  if (!filter.empty()) b.add("  filter" + filter, Ink::warn);
  if (!s.tagged.empty()) b.add(fmt::format("  {} tagged", s.tagged.size()), Ink::warn);
  if (s.readonly) b.add("  read-only", Ink::dim);
  if (hscroll > 0) b.add(fmt::format("  command <- {} columns", hscroll), Ink::warn);
  if (!gpu::lists_gpus(inv.source_state))
    b.add("  NVML: " + report::terminal_text(inv.source_problem), Ink::warn);
  // Last: what a narrow terminal drops first (filters and marks above matter more).
  if (auto driver = report::driver_words(inv); !driver.empty()) b.add("  " + driver, Ink::dim);
  return b.done();
}

// Column widths of the holder list.
struct Columns {
  bool container = false;  // a CONTAINER column (wide terminals)
  bool usage = false;      // CPU% and host RSS (100 columns and more)
  bool sm = false;         // NVML's per-process SM sample, a hint (100 columns and more)
};
constexpr std::size_t kContainerWidth = 24;

Line column_heading(const Frame& f, const Columns& c) {
  LineBuilder b(f.width);
  std::string text = fmt::format("    {:>7} {:<8} {:<5} {:>6} {:<6} {:<8} ", "PID", "USER", "GPU",
                                 "MEMORY", "AGE", "MARK");
  if (c.sm) text += fmt::format("{:>4} ", "SM%");
  if (c.usage) text += fmt::format("{:>5} {:>6} ", "CPU%", "RSS");
  if (c.container) text += fmt::format("{:<{}} ", "CONTAINER", kContainerWidth);
  b.add(text + "COMMAND", Ink::title);
  return b.done();
}

double age_of(const Frame& f, const proc::Holder& h) {
  if (f.uptime_seconds && f.clock_ticks > 0)
    return std::max(0.0, *f.uptime_seconds - static_cast<double>(h.id.start_time) /
                                                 static_cast<double>(f.clock_ticks));
  return h.age_seconds;
}

// A member's branch in its instance's tree, before its command: "├─ " / "└─ " under its
// parent, "│  " where an ancestor has siblings below ("|- ", "`- ", "|  " in ASCII). At most
// kTreeLevels levels are drawn (the deepest), so a deep chain cannot push the command off.
constexpr std::size_t kTreeLevels = 4;
std::string tree_prefix(const std::vector<bool>& last, bool unicode) {
  if (last.empty()) return "";
  const std::size_t from = last.size() > kTreeLevels ? last.size() - kTreeLevels : 0;
  std::string out;
  for (std::size_t i = from; i + 1 < last.size(); ++i)
    out += last[i] ? "   " : (unicode ? "│  " : "|  ");
  out += last.back() ? (unicode ? "└─ " : "`- ") : (unicode ? "├─ " : "|- ");
  return out;
}

Line holder_line(const Frame& f, const Row& r, const Columns& c, bool cursor) {
  const proc::Holder& h = *r.holder;
  LineBuilder b(f.width);
  // Every holder row the same width before its PID, a lone process's too: the PIDs sit
  // under PID (an instance's members are told apart by the heading above them).
  b.add(cursor ? ">" : " ").add(r.tagged ? "*" : " ", Ink::warn).add("  ");
  b.add(fmt::format("{:>7} ", h.id.pid));
  b.add(fit(report::terminal_text(h.user, 8), 8) + " ");
  b.add(fit(gpus_text(r.gpus), 5) + " ");
  b.add(fmt::format("{:>6} ", r.bytes_known ? short_bytes(r.bytes) : "?"));
  b.add(fmt::format("{:<6} ", short_age(age_of(f, h))));
  if (h.orphaned)
    b.add(h.zombie_leader ? "ORPHAN+Z" : "ORPHAN  ", Ink::orphan);
  else if (h.keeper != proc::KeeperClass::none)  // of a dead owner's memory (docs/orphans.md)
    b.add(h.keeper == proc::KeeperClass::importer ? "IMPORTER" : "INHERITR", Ink::orphan);
  else if (h.zombie_leader)
    b.add("ZOMBIE  ", Ink::warn);
  else if (h.detached)
    b.add("DETACHED", Ink::detached);
  else
    b.add("live    ", Ink::dim);
  b.add(" ");
  if (c.sm)  // "-": NVML gave no sample (not supported: MIG, some cards; none of this pid)
    b.add(r.sm_percent ? fmt::format("{:>4} ", *r.sm_percent) : "   - ", Ink::dim);
  if (c.usage) {
    const ProcessUsage* u = nullptr;
    if (f.usage)
      if (auto it = f.usage->find(h.id); it != f.usage->end()) u = &it->second;
    b.add(u && u->cpu_percent ? fmt::format("{:>5.0f} ", *u->cpu_percent) : "    - ", Ink::dim);
    b.add(u && u->rss_bytes ? fmt::format("{:>6} ", short_bytes(*u->rss_bytes)) : "     - ",
          Ink::dim);
  }
  if (c.container)
    b.add(fit(h.container.empty() ? "-" : report::terminal_text(h.container, 64), kContainerWidth) +
              " ",
          Ink::dim);
  b.add(tree_prefix(r.tree_last, f.unicode), Ink::dim);
  std::string role;
  if (h.engine.role != proc::EngineRole::none) {
    const std::string ranks = proc::rank_label(h.engine.ranks);
    role = std::string(proc::enum_name(h.engine.role)) + (ranks.empty() ? "" : " " + ranks);
  }
  if (!role.empty()) b.add(report::terminal_text(role, 20) + " ", Ink::heading);
  b.add(report::terminal_text(h.cmdline, 4 * f.width));
  return b.done(cursor);
}

Line instance_line(const Frame& f, const Row& r, bool cursor) {
  const inventory::Instance& in = *r.in;
  LineBuilder b(f.width);
  b.add(cursor ? ">" : " ").add(r.tagged ? "*" : " ", Ink::warn);
  b.add(r.collapsed ? " [+] " : " [-] ", Ink::dim);
  const bool all_orphaned = in.orphaned > 0 && in.orphaned == in.members.size();
  // The container first: a heading is cut at the screen's edge, and in the case study
  // the container (an LXC guest reached through `pct exec`) is the next step's address.
  std::string text = report::instance_heading(in);
  if (!in.container.empty()) text = report::terminal_text(in.container, 40) + ": " + text;
  b.add(text, all_orphaned ? Ink::orphan : Ink::heading);
  return b.done(cursor);
}

Line keys_line(const Frame& f) {
  LineBuilder b(f.width);
  // Within 80 columns: the other keys are in the help (?).
  const std::string act = f.state->readonly ? "" : "space tag  F free  ";
  b.add("q quit  " + act + "s sort  r reverse  / find  d detail  ? more keys", Ink::dim);
  return b.done();
}

}  // namespace

std::string Line::text() const {
  std::string out;
  for (const auto& s : spans) out += s.text;
  return out;
}

Line shift_line(const Line& line, std::size_t from, std::size_t width) {
  Line out;
  out.cursor = line.cursor;
  std::size_t skipped = 0, kept = 0;
  for (const Span& s : line.spans) {
    std::string text;
    for (std::size_t i = 0; i < s.text.size() && kept < width;) {
      std::size_t len = 1;
      while (i + len < s.text.size() && utf8_continuation(s.text[i + len])) ++len;
      if (skipped < from)
        ++skipped;
      else {
        text.append(s.text, i, len);
        ++kept;
      }
      i += len;
    }
    if (!text.empty()) out.spans.push_back({std::move(text), s.ink});
  }
  if (kept < width) out.spans.push_back({std::string(width - kept, ' '), Ink::normal});
  return out;
}

Line shift_after(const Line& line, std::size_t keep, std::size_t from, std::size_t width) {
  if (from == 0 || keep >= width) return shift_line(line, 0, width);
  Line out = shift_line(line, 0, keep);
  Line rest = shift_line(line, keep + from, width - keep);
  out.spans.insert(out.spans.end(), rest.spans.begin(), rest.spans.end());
  return out;
}

std::size_t columns(std::string_view text) {
  std::size_t n = 0;
  for (char c : text)
    if (!utf8_continuation(c)) ++n;
  return n;
}

std::string fit(std::string_view text, std::size_t width) {
  const std::size_t have = columns(text);
  if (have <= width) return std::string(text) + std::string(width - have, ' ');
  if (width == 0) return "";
  // Keep width - 1 characters, then '~'.
  std::size_t chars = 0, i = 0;
  for (; i < text.size(); ++i) {
    if (!utf8_continuation(text[i])) {
      if (chars == width - 1) break;
      ++chars;
    }
  }
  return std::string(text.substr(0, i)) + "~";
}

std::string short_bytes(std::uint64_t bytes) {
  constexpr double kKi = 1024.0;
  const double b = static_cast<double>(bytes);
  if (bytes == 0) return "0";
  if (b < kKi * kKi) return fmt::format("{:.0f}K", std::ceil(b / kKi));
  if (b < kKi * kKi * kKi) return fmt::format("{:.0f}M", b / (kKi * kKi));
  if (b < 1000 * kKi * kKi * kKi) return fmt::format("{:.1f}G", b / (kKi * kKi * kKi));
  return fmt::format("{:.1f}T", b / (kKi * kKi * kKi * kKi));
}

std::string short_age(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

Screen layout_screen(const Frame& f) {
  Screen screen;
  const std::size_t width = std::max<std::size_t>(f.width, 20);
  const std::size_t height = std::max<std::size_t>(f.height, 6);
  Frame frame = f;
  frame.width = width;
  auto& lines = screen.lines;
  lines.push_back(title_line(frame, 0));  // again below, once the scroll is known
  // The GPUs: at most half the screen, so the holders always have room.
  const std::size_t gpu_rows = std::min(f.inv->gpus.size(), (height - 4) / 2);
  for (std::size_t i = 0; i < gpu_rows; ++i) lines.push_back(gpu_line(frame, f.inv->gpus[i]));
  if (gpu_rows < f.inv->gpus.size())
    lines.back() = LineBuilder(width)
                       .add(fmt::format("... and {} more GPUs (g picks one; a taller terminal "
                                        "shows them all)",
                                        f.inv->gpus.size() - gpu_rows + 1),
                            Ink::dim)
                       .done();
  // The legend and the column headings when there is room for a few rows below them.
  const bool legend = height >= lines.size() + 6;
  if (legend) lines.push_back(legend_line(frame));
  Columns cols;
  cols.container = width >= 140;
  cols.usage = width >= 100;
  cols.sm = width >= 100;
  const std::size_t heading_at = lines.size();
  lines.push_back(Line{});  // the column headings, laid out with the list

  // The list: what is left but the message and key lines.
  const std::size_t list_rows = height > lines.size() + 2 ? height - lines.size() - 2 : 0;
  const auto& rows = *f.rows;
  std::size_t cursor = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].id == f.state->cursor) cursor = i;
  std::size_t scroll = std::min(f.state->scroll, rows.empty() ? 0 : rows.size() - 1);
  if (cursor < scroll) scroll = cursor;
  if (list_rows > 0 && cursor >= scroll + list_rows) scroll = cursor - list_rows + 1;
  screen.scroll = scroll;
  screen.list_rows = list_rows;
  // The list is laid out `hscroll` columns wider and shown from there; a scroll past
  // the widest row's end is taken back to it (the widest row, cut or not, is measured
  // at the wider layout: a row cut there is at least as wide as the layout).
  std::size_t hscroll = f.state->hscroll;
  auto list_line = [&](Frame& wide, std::size_t at) {
    const bool on = at == cursor;
    return rows[at].kind == Row::Kind::instance ? instance_line(wide, rows[at], on)
                                                : holder_line(wide, rows[at], cols, on);
  };
  if (hscroll > 0) {
    Frame wide = frame;
    wide.width = width + hscroll;
    auto content = [](const Line& l) {
      std::string t = l.text();
      while (!t.empty() && t.back() == ' ') t.pop_back();
      return columns(t);
    };
    std::size_t widest = content(column_heading(wide, cols));
    for (std::size_t at = scroll; at < rows.size() && at < scroll + list_rows; ++at)
      widest = std::max(widest, content(list_line(wide, at)));
    hscroll = widest > width ? std::min(hscroll, widest - width) : 0;
  }
  screen.hscroll = hscroll;
  Frame wide = frame;
  wide.width = width + hscroll;
  lines[0] = title_line(frame, hscroll);
  // Only the command scrolls (as nvitop's): PID, USER, GPU, MEMORY, AGE and MARK stay, so
  // a long command line is read beside its PID (issue 53 #11).
  const std::string heading_text = column_heading(wide, cols).text();
  const std::size_t keep = columns(heading_text.substr(0, heading_text.find("COMMAND")));
  lines[heading_at] = column_heading(frame, cols);
  for (std::size_t i = 0; i < list_rows; ++i) {
    const std::size_t at = scroll + i;
    if (at >= rows.size()) {
      if (rows.empty() && i == 0) {
        const bool filtered = f.state->orphans_only || f.state->gpu || !f.state->text.empty();
        lines.push_back(LineBuilder(width)
                            .add(filtered ? "    no process matches the filter"
                                          : "    no process holds GPU memory",
                                 Ink::dim)
                            .done());
      } else {
        lines.push_back(blank(width));
      }
      continue;
    }
    lines.push_back(shift_after(list_line(wide, at), keep, hscroll, width));
  }
  if (rows.size() > scroll + list_rows && list_rows > 0)
    lines.back() = LineBuilder(width)
                       .add(fmt::format("    ... {} more below", rows.size() - scroll - list_rows + 1),
                            Ink::dim)
                       .done();
  lines.push_back(LineBuilder(width).add(f.message, Ink::warn).done());
  lines.push_back(keys_line(frame));
  while (lines.size() > height) lines.erase(lines.end() - 3);  // never taller than the screen
  return screen;
}

Box detail_box(const Frame& f, std::size_t at, std::size_t width) {
  Box box;
  box.footer = "up/down scroll   any other key closes";
  if (f.rows == nullptr || at >= f.rows->size()) return box;
  const Row& r = (*f.rows)[at];
  // The box's inner width (overlay_box), less a margin; each field " name       value",
  // its continuation lines under its value (wrap_lines hangs an indented line).
  const std::size_t room = std::max<std::size_t>(std::min<std::size_t>(width, 124), 24) - 4;
  auto field = [&](std::string_view name, const std::string& value) {
    if (value.empty()) return;
    const std::string text =
        report::wrap_lines(fmt::format(" {:<11}{}", name, value), room, report::Hang::description);
    std::size_t start = 0;
    for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
      box.lines.push_back(text.substr(start, nl - start));
    box.lines.push_back(text.substr(start));
  };
  const inventory::Instance* in = r.in;
  if (r.kind == Row::Kind::holder && !r.instance.empty() && f.inv != nullptr)
    in = inventory::find_instance(f.inv->instances, r.instance);
  if (r.kind == Row::Kind::holder) {
    const proc::Holder& h = *r.holder;
    box.title = fmt::format("pid {}", h.id.pid);
    field("user", report::terminal_text(h.user));
    field("state", std::string(1, h.state) + (h.zombie_leader ? " (zombie leader, live threads)" : ""));
    field("GPU", gpus_text(r.gpus) + "  " + (r.bytes_known ? format_bytes(r.bytes) : "?"));
    field("age", short_age(age_of(f, h)));
    field("parent", fmt::format("pid {}", h.ppid));
    if (h.orphaned)
      field("verdict", proc::orphan_verdict(h.provenance) + ": " +
                           report::terminal_text(h.orphan_reason));
    else if (h.detached)
      field("verdict", "detached: " + report::terminal_text(h.detached_reason));
    else
      field("verdict", "live");
    if (h.keeper != proc::KeeperClass::none)
      field("keeper", std::string(proc::enum_name(h.keeper)) + ": " +
                          report::terminal_text(h.keeper_reason));
    if (h.engine.role != proc::EngineRole::none) {
      const std::string ranks = proc::rank_label(h.engine.ranks);
      field("role", std::string(proc::enum_name(h.engine.role)) + (ranks.empty() ? "" : " " + ranks));
    }
    field("container", report::terminal_text(h.container));
    field("cgroup", report::terminal_text(h.cgroup));
    field("run", report::terminal_text(h.run_id));
    if (in) field("instance", report::instance_heading(*in));
    field("command", report::terminal_text(h.cmdline));
  } else if (in) {
    box.title = "instance " + report::terminal_text(in->key);
    field("instance", report::instance_heading(*in));
    if (in->model) field("model", report::terminal_text(*in->model));
    if (in->port) field("port", std::to_string(*in->port));
    std::string ports;
    for (unsigned p : in->ports) ports += (ports.empty() ? "" : ", ") + std::to_string(p);
    field("listening", ports);
    field("container", report::terminal_text(in->container));
    for (const auto& m : r.members) field("process", fmt::format("pid {}", m.pid));
  }
  return box;
}

std::size_t box_inner_width(std::size_t width) {
  return std::min<std::size_t>(width < 10 ? 6 : width - 4, 120);
}

Box fitted_box(Box box, std::size_t width) {
  const std::size_t inner = box_inner_width(width);
  std::vector<std::string> lines;
  for (const auto& line : box.lines) {
    if (columns(line) <= inner) {
      lines.push_back(line);
      continue;
    }
    // Broken at words, the rest under the line's text (a key's or field's description,
    // a reason under its row), never cut with '~' (item 11: the free box cut every reason).
    const std::string text = report::wrap_lines(line, inner, report::Hang::description);
    std::size_t start = 0;
    for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(text.substr(start, nl - start));
    lines.push_back(text.substr(start));
  }
  box.scroll = std::min(box.scroll, lines.empty() ? 0 : lines.size() - 1);
  box.lines = std::move(lines);
  return box;
}

void overlay_box(Screen& screen, const Box& unfitted, std::size_t width, std::size_t height) {
  if (width < 10 || height < 5) return;
  const Box box = fitted_box(unfitted, width);
  const std::size_t inner = box_inner_width(width);
  const std::size_t max_body = height - 4;  // borders and footer
  std::size_t body = std::min(box.lines.size(), max_body);
  const std::size_t scroll = std::min(box.scroll, box.lines.size() - body);
  const bool more = box.lines.size() > scroll + body;
  const std::size_t top = (height - (body + 3)) / 2;
  const std::size_t left = (width - (inner + 2)) / 2;
  std::vector<std::string> rows;
  rows.push_back("+" + fit("- " + box.title + " ", inner) + "+");
  for (std::size_t i = 0; i < body; ++i) rows.push_back("|" + fit(box.lines[scroll + i], inner) + "|");
  std::string footer = box.footer;
  if (more || scroll > 0)
    footer += fmt::format("  (lines {}-{} of {}: up/down)", scroll + 1, scroll + body,
                          box.lines.size());
  rows.push_back("|" + fit(footer, inner) + "|");
  rows.push_back("+" + std::string(inner, '-') + "+");
  for (std::size_t i = 0; i < rows.size() && top + i < screen.lines.size(); ++i) {
    Line& line = screen.lines[top + i];
    // Blank beside the box: a row cut at its edge would read as part of it.
    line.spans = {{std::string(left, ' '), Ink::normal}, {rows[i], box.ink}};
    const std::size_t used = left + inner + 2;
    if (used < width) line.spans.push_back({std::string(width - used, ' '), Ink::normal});
    line.cursor = false;
  }
}

}  // namespace gpureap::top
