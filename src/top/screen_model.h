#pragma once
// The screen of `gpureap top` as data: lines of spans, each span with an ink (what it
// means: orphaned, live, a bar segment) rather than a colour, so that the drawing layer
// (top/curses_view.h) chooses colours, or attributes on a monochrome terminal, and the
// layout is tested as text. Every number comes from the inventory a script gets from
// `status`; this module only arranges it in `width` x `height` cells.
//
//   gpureap top  14:02:11  8 GPUs  scan  sort gpu  filter orphans  2 tagged
//   GPU 0 [:::OOOOOOOOOOOOOO      ] 84.2/96.0G SM  0%  67C  699W ▁▁▅▇█ held
//   ...
//   bar: ':' baseline  '#' live  'O' orphaned  '?' unexplained
//     PID     USER     GPU   MEMORY AGE    MARK     COMMAND
//   > [-] sglang server, process group 4721, launcher gone: 4 processes ...
//   *   4722  alice    0      20.0G 3m12s  ORPHAN   scheduler TP0 sglang::scheduler_TP0
//   (message line)
//   q quit  space tag  F free tagged  s sort  o orphans  g GPU  / find  enter fold

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inventory/inventory.h"
#include "top/history.h"
#include "top/process_usage.h"
#include "top/rows.h"

namespace gpureap::top {

/// What a span of text is, for the drawing layer.
enum class Ink {
  normal,
  dim,
  title,            // the top line and column headings
  heading,          // an instance's heading
  orphan,           // ORPHAN, an instance whose members are all orphaned
  detached,         // DETACHED
  warn,             // a zombie leader, memory no process explains, a problem
  ok,               // freed, verified
  bar_baseline,     // the bar's segments
  bar_live,
  bar_orphan,
  bar_unexplained,
  box,              // a box drawn over the screen (confirmation, result)
};

struct Span {
  std::string text;
  Ink ink = Ink::normal;
};

struct Line {
  std::vector<Span> spans;
  bool cursor = false;  // the row under the cursor (drawn in reverse video)
  /// The spans' text, joined.
  std::string text() const;
};

struct Screen {
  std::vector<Line> lines;  // exactly `height` lines, none wider than `width` columns
  std::size_t scroll = 0;   // the first row of the list shown (kept in ViewState)
  std::size_t hscroll = 0;  // columns the list is scrolled right, within its widest row
                            // (kept in ViewState)
  std::size_t list_rows = 0;  // how many rows of the list fit (page up/down moves this)
};

/// Everything one frame shows besides the view state.
struct Frame {
  const inventory::Inventory* inv = nullptr;
  const std::vector<Row>* rows = nullptr;
  const ViewState* state = nullptr;
  const MemoryHistory* history = nullptr;
  /// The machine's uptime now and its clock ticks per second: ages are computed from
  /// each process's start time, so they tick between looks (nullopt: the look's ages).
  std::optional<double> uptime_seconds;
  long clock_ticks = 100;
  std::string clock;    // "14:02:11"
  std::string message;  // the message line: an event, an answer to a key ("" for none)
  /// Each holder's CPU% and resident host memory (top/process_usage.h); shown from 100
  /// columns on. Null: not sampled.
  const std::map<proc::ProcessId, ProcessUsage>* usage = nullptr;
  bool unicode = true;  // the terminal takes UTF-8 (sparkline blocks); else ASCII only
  std::size_t width = 80;
  std::size_t height = 24;
};

/// Lays out one frame. The list (its column headings and rows) is laid out
/// `state->hscroll` columns wider and its command column shown from that column on
/// (horizontal scroll, as nvitop's: PID to MARK stay), the scroll kept so that the widest
/// row's end stays on screen; the GPU rows, the message and the keys do not scroll.
Screen layout_screen(const Frame& frame);

/// A box over the middle of the screen: the plan to confirm, the release as it is
/// watched, the verdict. `lines` are plain (escaped) text; those that do not fit are
/// scrolled from `scroll` on, and the box says how many more there are.
struct Box {
  std::string title;
  std::vector<std::string> lines;
  std::string footer;  // the keys it takes: "y free them  n cancel"
  std::size_t scroll = 0;
  Ink ink = Ink::box;
};
/// The columns inside a box's borders on a screen `width` columns wide (at most 120).
std::size_t box_inner_width(std::size_t width);
/// `box` with each line wider than box_inner_width broken at words (its continuation
/// under the line's text), so nothing in a box is cut; `scroll` counts these lines.
Box fitted_box(Box box, std::size_t width);
/// Draws `box` over `screen` (width x height as laid out), fitted first (fitted_box).
void overlay_box(Screen& screen, const Box& box, std::size_t width, std::size_t height);

/// The detail box of the row at `at` of `frame.rows` (d, or Enter on a process): what
/// a row cuts with '~', whole and broken at words to `width` columns. For a process: its
/// pid, user, state, GPUs and memory, the lineage verdict with its reason, container,
/// cgroup, run, its instance's heading (engine, model, port) and the whole command line;
/// for an instance heading: the heading, model, port(s) and its processes. Plain text.
Box detail_box(const Frame& frame, std::size_t at, std::size_t width);

/// The width of `text` in terminal columns (one per UTF-8 character; the text shown is
/// escaped by report::terminal_text, so it holds no control characters).
std::size_t columns(std::string_view text);
/// `line` without its first `from` columns, cut or padded to exactly `width` columns
/// (a span cut at either edge keeps its ink).
Line shift_line(const Line& line, std::size_t from, std::size_t width);

/// `line`'s first `keep` columns as they are, then the rest without its first `from`
/// columns: exactly `width` columns (the list's sideways scroll moves the command only).
Line shift_after(const Line& line, std::size_t keep, std::size_t from, std::size_t width);

/// `text` cut or padded with spaces to exactly `width` columns; a cut ends in '~'.
std::string fit(std::string_view text, std::size_t width);

/// A GPU's temperature and power draw in ten columns: " 67C  699W"; a sensor the driver
/// cannot read (NVML "not supported", no hwmon file) is "-": "  -C    -W". With the cap
/// (from 100 columns), fifteen: " 67C  699/ 700W".
std::string sensors_text(const gpu::GpuInfo& info, bool with_cap = false);

/// What of the card's health needs a look, in words ("power brake, ECC 3"): the clocks
/// held down by heat, a hardware slowdown or the power brake, uncorrected ECC errors;
/// "" when nothing does or the driver cannot say.
std::string health_alarm(const gpu::GpuInfo& info);

/// "84.2G", "512M", "0": memory in four or five columns.
std::string short_bytes(std::uint64_t bytes);
/// "42s", "3m12s", "2h05m", "3d04h": an age in at most six columns.
std::string short_age(double seconds);

}  // namespace gpureap::top
