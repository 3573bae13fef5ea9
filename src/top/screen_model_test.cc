#include "top/screen_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "top/keys.h"
#include "top/test_inventory.h"
#include "util/test_golden.h"

namespace gpureap::top {
namespace {

using namespace testing;

struct Shown {
  inventory::Inventory inv = case_study();
  ViewState state;
  MemoryHistory history;
  std::vector<Row> rows;
  Screen screen;

  Screen& draw(std::size_t width, std::size_t height, std::optional<double> uptime = {}) {
    history.record(inv);
    rows = build_rows(inv, state);
    Frame f;
    f.inv = &inv;
    f.rows = &rows;
    f.state = &state;
    f.history = &history;
    f.uptime_seconds = uptime;
    f.clock = "12:00:00";
    f.width = width;
    f.height = height;
    screen = layout_screen(f);
    return screen;
  }
  // The index of the first line holding `text`, or -1.
  int find(const std::string& text) const {
    for (std::size_t i = 0; i < screen.lines.size(); ++i)
      if (screen.lines[i].text().find(text) != std::string::npos) return static_cast<int>(i);
    return -1;
  }
  std::string line(int i) const { return screen.lines.at(static_cast<std::size_t>(i)).text(); }
};

void expect_fits(const Screen& s, std::size_t width, std::size_t height) {
  ASSERT_EQ(s.lines.size(), height);
  for (const auto& l : s.lines) EXPECT_EQ(columns(l.text()), width) << "'" << l.text() << "'";
}

// The driver and CUDA version in the title (nvitop's header), last: a narrow terminal
// drops them before the sort, filters and marks.
TEST(TopScreen, TheTitleNamesTheDriverAndCudaLast) {
  Shown s;
  s.inv.driver_version = "580.65.06";
  s.inv.cuda_version = "13.0";
  s.draw(160, 24);
  EXPECT_NE(s.line(0).find("sort gpu"), std::string::npos) << s.line(0);
  EXPECT_GT(s.line(0).find("driver 580.65.06, CUDA 13.0"), s.line(0).find("sort gpu"))
      << s.line(0);
  s.state.readonly = true;
  s.draw(80, 24);
  EXPECT_NE(s.line(0).find("read-only"), std::string::npos) << s.line(0);
}

TEST(TopScreen, At80x24OrphansAreMarkedUnderTheirInstance) {
  Shown s;
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  const int heading = s.find("process group 4721");
  ASSERT_GE(heading, 0);
  EXPECT_NE(s.line(heading).find("docker:3f2a1b"), std::string::npos) << "the container";
  const int a = s.find("4722");
  const int b = s.find("4723");
  ASSERT_EQ(a, heading + 1);
  ASSERT_EQ(b, heading + 2);
  EXPECT_NE(s.line(a).find("ORPHAN"), std::string::npos) << s.line(a);
  EXPECT_NE(s.line(a).find("scheduler"), std::string::npos) << s.line(a);
  const int live = s.find("5001");
  ASSERT_GT(live, b);
  EXPECT_EQ(s.line(live).find("ORPHAN"), std::string::npos);
  EXPECT_NE(s.line(live).find("live"), std::string::npos);
  EXPECT_NE(s.line(live).find("bob"), std::string::npos);
  // The cursor starts nowhere chosen: the first row, marked.
  EXPECT_TRUE(s.screen.lines[static_cast<std::size_t>(heading)].cursor);
}

TEST(TopScreen, TheBarSplitsBaselineLiveOrphanedAndUnexplained) {
  Shown s;
  add_unexplained(s.inv.gpus[1], 8 * kGiB, inventory::Unexplained::driver_held);
  s.draw(120, 30);
  const std::string g0 = s.line(s.find("GPU 0"));
  const std::string g1 = s.line(s.find("GPU 1"));
  EXPECT_NE(g0.find("OOOO"), std::string::npos) << g0;
  EXPECT_EQ(g0.find('#'), std::string::npos) << g0;
  EXPECT_NE(g0.find(':'), std::string::npos) << "the baseline: " << g0;
  EXPECT_NE(g1.find("####"), std::string::npos) << g1;
  EXPECT_EQ(g1.find('O'), std::string::npos) << g1;
  EXPECT_NE(g1.find('?'), std::string::npos) << g1;
  EXPECT_NE(g1.find("SM  87%"), std::string::npos) << g1;
  EXPECT_NE(g1.find("driver_held"), std::string::npos) << g1;
  EXPECT_NE(s.line(s.find("bar:")).find("GPU 1 8.0G driver_held"), std::string::npos);
  // Orphaned: 40 of 80 GiB is half the bar; the GPU's segment cells never exceed it.
  const auto open = g0.find('['), close = g0.find(']');
  const std::string bar = g0.substr(open + 1, close - open - 1);
  const auto orphaned = static_cast<double>(std::count(bar.begin(), bar.end(), 'O'));
  EXPECT_NEAR(orphaned / static_cast<double>(bar.size()), 0.5, 0.05) << bar;
}

// Issue 40: the GPU rows carry temperature and power where the driver gives them; a
// sensor it cannot read is "-", never a 0 that would read as a cold, idle GPU.
TEST(TopScreen, GpuRowsShowTemperatureAndPowerOrADashWhenUnknown) {
  Shown s;
  s.inv.gpus[0].info.temperature_c = 67;
  s.inv.gpus[0].info.power_mw = 699'400;
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  const std::string g0 = s.line(s.find("GPU 0"));
  const std::string g1 = s.line(s.find("GPU 1"));
  EXPECT_NE(g0.find(" 67C  699W "), std::string::npos) << g0;
  EXPECT_NE(g1.find("  -C    -W "), std::string::npos) << g1;
  EXPECT_EQ(g1.find(" 0C"), std::string::npos) << g1;
  EXPECT_EQ(g1.find(" 0W"), std::string::npos) << g1;
  // The bar keeps its room: the same columns on both rows, at 80 as at 200.
  EXPECT_EQ(g0.find(']'), g1.find(']'));
  s.draw(50, 24);
  EXPECT_EQ(s.line(s.find("GPU 0")).find("67C"), std::string::npos) << "no room under 60";
}

// Issue 53 #11: at 60x15 the help box cut its own lines ("|enter        on a heading: fold
// its processes (enter ag~|"). A box breaks its lines at words, the rest under the key's
// description, and scrolls what does not fit.
TEST(TopScreen, TheHelpBoxAt60x15CutsNoLine) {
  Shown s;
  s.draw(60, 15);
  const Box help{"keys", key_help(false), "any key closes"};
  const Box fitted = fitted_box(help, 60);
  EXPECT_GT(fitted.lines.size(), help.lines.size()) << "some lines are broken";
  std::string all;
  for (const auto& l : fitted.lines) {
    EXPECT_LE(columns(l), box_inner_width(60)) << l;
    all += l + " ";
  }
  // Every word of every key's line is there, in order, none cut with '~'.
  std::string words;
  for (const auto& l : help.lines) words += l + " ";
  auto squeeze = [](std::string t) {
    std::string out;
    for (char c : t)
      if (c != ' ') out += c;
    return out;
  };
  EXPECT_EQ(squeeze(all), squeeze(words));
  // Drawn at 60x15 with the scroll at its end: the last line is shown whole.
  Box scrolled = help;
  scrolled.scroll = 1000;
  overlay_box(s.screen, scrolled, 60, 15);
  expect_fits(s.screen, 60, 15);
  std::string shown;
  for (const auto& l : s.screen.lines) shown += l.text() + "\n";
  EXPECT_EQ(shown.find("~|"), std::string::npos) << shown;
  EXPECT_NE(shown.find(fitted.lines.back()), std::string::npos) << shown;
}

// Issue 40: a row wider than the terminal is read by scrolling the list sideways
// (left/right): the command moves, the GPU rows, the columns before COMMAND (PID to MARK,
// issue 53 #11: the PID went off screen) and the keys stay, and the scroll stops where the
// widest row ends.
TEST(TopScreen, TheListScrollsSidewaysToTheEndOfItsWidestRow) {
  Shown s;
  const std::string tail = " --data /datasets/imagenet --checkpoint-dir /ckpt/run-42 END";
  s.inv.gpus[1].holders[0].holder.cmdline += tail;
  s.draw(80, 24);
  const int live = s.find("5001");
  ASSERT_GE(live, 0);
  EXPECT_EQ(s.line(live).find("END"), std::string::npos) << "cut at 80: " << s.line(live);
  EXPECT_EQ(s.screen.hscroll, 0U);
  // The GPU row up to its sensors (the sparkline grows a column per draw).
  auto gpu_row_of = [&] {
    const std::string g = s.line(s.find("GPU 0"));
    return g.substr(0, g.find("-W") + 2);
  };
  const std::string gpu_row = gpu_row_of();

  s.state.hscroll = 16;
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  EXPECT_EQ(s.screen.hscroll, 16U);
  EXPECT_EQ(gpu_row_of(), gpu_row) << "the GPU rows do not scroll";
  EXPECT_NE(s.line(0).find("command <- 16 columns"), std::string::npos) << s.line(0);
  EXPECT_NE(s.line(23).find("? more keys"), std::string::npos) << "the keys stay";
  // The row keeps its PID and MARK where they were; what was at column 16 + c of its
  // command is now at c of the command.
  const std::string scrolled = s.line(s.find("5001"));
  s.state.hscroll = 0;
  s.draw(80, 24);
  const std::string unscrolled = s.line(s.find("5001"));
  const std::string heading = s.line(s.find("COMMAND"));
  const std::size_t command_col = heading.find("COMMAND");
  EXPECT_EQ(scrolled.substr(0, command_col), unscrolled.substr(0, command_col));
  EXPECT_EQ(scrolled.substr(command_col, 10), unscrolled.substr(command_col + 16, 10));
  s.state.hscroll = 16;
  s.draw(80, 24);
  EXPECT_EQ(s.line(s.find("COMMAND")), heading) << "the headings stay";

  // Far past the end: kept where the widest row's last character is the last column.
  s.state.hscroll = 1000;
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  const std::string row = s.line(s.find("END"));
  EXPECT_EQ(row.rfind("END"), 77U) << row;
  EXPECT_LT(s.screen.hscroll, 1000U);
  EXPECT_GT(s.screen.hscroll, 0U);

  // Nothing wider than the screen: no scroll at all.
  s.inv = case_study();
  s.state.hscroll = 8;
  s.draw(200, 30);
  EXPECT_EQ(s.screen.hscroll, 0U);
  EXPECT_GE(s.find("    PID"), 0);
}

TEST(TopScreen, ShiftLineDropsColumnsAndKeepsInks) {
  Line l;
  l.spans = {{"ab", Ink::title}, {"çdé", Ink::orphan}, {"xyz", Ink::dim}};
  l.cursor = true;
  Line s = shift_line(l, 3, 4);
  EXPECT_EQ(s.text(), "déxy");
  ASSERT_EQ(s.spans.size(), 2U);
  EXPECT_EQ(s.spans[0].ink, Ink::orphan);
  EXPECT_EQ(s.spans[1].ink, Ink::dim);
  EXPECT_TRUE(s.cursor);
  EXPECT_EQ(shift_line(l, 6, 5).text(), "yz   ");
  EXPECT_EQ(shift_line(l, 0, 8).text(), "abçdéxyz");
}

TEST(TopScreen, At200x50TheContainerHasAColumnAndNothingIsCut) {
  Shown s;
  s.draw(200, 50);
  expect_fits(s.screen, 200, 50);
  EXPECT_GE(s.find("CONTAINER"), 0);
  EXPECT_NE(s.line(s.find("4722")).find("docker:3f2a1b"), std::string::npos);
  EXPECT_NE(s.line(s.find("5001")).find("python3 train.py --epochs 90"), std::string::npos);
}

TEST(TopScreen, AgesComeFromStartTimesSoTheyTickBetweenLooks) {
  Shown s;
  // Start time 1000 ticks = 10 s after boot; now 3610 s after boot: an hour old.
  s.draw(80, 24, 3610.0);
  EXPECT_NE(s.line(s.find("4722")).find("1h00m"), std::string::npos) << s.line(s.find("4722"));
  s.draw(80, 24, 3670.0);
  EXPECT_NE(s.line(s.find("4722")).find("1h01m"), std::string::npos) << s.line(s.find("4722"));
}

TEST(TopScreen, ReadOnlyAndTagsShowInTheTitleAndKeys) {
  Shown s;
  s.state.tagged = {{kOrphanA, 1000}};
  s.draw(80, 24);
  EXPECT_NE(s.line(0).find("1 tagged"), std::string::npos) << s.line(0);
  EXPECT_NE(s.line(s.find("4722")).find("*"), std::string::npos);
  EXPECT_NE(s.line(23).find("F free"), std::string::npos) << s.line(23);
  s.state = {};
  s.state.readonly = true;
  s.draw(80, 24);
  EXPECT_NE(s.line(0).find("read-only"), std::string::npos);
  EXPECT_EQ(s.line(23).find("F free"), std::string::npos) << s.line(23);
}

TEST(TopScreen, ManyRowsScrollWithTheCursorAndManyGpusLeaveRoomForRows) {
  Shown s;
  s.inv.gpus.clear();
  s.inv.instances.clear();
  for (unsigned g = 0; g < 16; ++g) {
    auto v = idle_gpu(g);
    for (pid_t p = 0; p < 3; ++p) add_holder(v, static_cast<pid_t>(10000 + g * 10 + p), kGiB, Lineage::live);
    s.inv.gpus.push_back(v);
  }
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  EXPECT_GE(s.find("more GPUs"), 0);
  EXPECT_GE(s.find("more below"), 0);
  s.state.cursor = s.rows.back().id;
  s.draw(80, 24);
  EXPECT_GE(s.find(std::to_string(10000 + 15 * 10 + 2)), 0) << "the cursor's row is shown";
  EXPECT_GT(s.screen.scroll, 0u);
}

TEST(TopScreen, TheLegendSaysWhereTheSparklinesPastComesFrom) {
  Shown s;
  s.draw(80, 24);
  EXPECT_NE(s.line(s.find("bar: ")).find("history: since top started"), std::string::npos)
      << s.line(s.find("bar: "));
  // Seeded with the agent's readings of GPU 0 over the last 2 minutes: the GPU's line shows
  // more than the one look this frame adds.
  inventory::GpuHistoryAnswer past;
  past.now = 1120;
  past.gpus.push_back({"GPU-0", {}});
  for (int i = 0; i < 12; ++i)
    past.gpus[0].samples.push_back(
        {1000.0 + 10 * i, 30 * kGiB, 80 * kGiB, std::nullopt, std::nullopt});
  s.history.seed(past);
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  EXPECT_NE(s.line(s.find("bar: ")).find("history: agent 2m00s"), std::string::npos)
      << s.line(s.find("bar: "));
  const std::string gpu0 = s.line(s.find("GPU 0"));
  EXPECT_NE(gpu0.find("▄▄▄▄▄▄▄▄▄▄"), std::string::npos) << gpu0;
  EXPECT_EQ(s.line(s.find("GPU 1")).find("▄▄"), std::string::npos) << "GPU 1 had no past";
}

TEST(TopScreen, AMemberIsDrawnUnderItsParentInsideItsInstance) {
  Shown s;
  s.inv = with_server_tree();
  s.state.gpu = gpu::dev(1);
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  // The branch sits before the command, so the columns stay where they are.
  const int server = s.find(" 7000 ");
  ASSERT_GE(server, 0);
  const std::size_t command = s.line(server).find("vllm-7000");
  ASSERT_NE(command, std::string::npos) << s.line(server);
  auto at = [&](pid_t pid, const std::string& branch) {
    const std::string line = s.line(s.find(" " + std::to_string(pid) + " "));
    EXPECT_NE(line.find(branch + "vllm-" + std::to_string(pid)), std::string::npos) << line;
    EXPECT_EQ(line.find(branch), s.line(server).find("vllm-7000")) << line;
  };
  at(7001, "├─ ");
  at(7002, "│  ├─ ");
  at(7003, "│  └─ ");
  at(7004, "└─ ");
  // Without UTF-8, ASCII branches.
  Frame f;
  f.inv = &s.inv;
  f.rows = &s.rows;
  f.state = &s.state;
  f.unicode = false;
  f.clock = "12:00:00";
  const Screen ascii = layout_screen(f);
  std::string all;
  for (const auto& l : ascii.lines) all += l.text() + "\n";
  EXPECT_NE(all.find("|  `- vllm-7003"), std::string::npos) << all;
  EXPECT_NE(all.find("`- vllm-7004"), std::string::npos) << all;
  EXPECT_EQ(all.find("└"), std::string::npos) << all;
}

TEST(TopScreen, NothingHeldSaysSo) {
  Shown s;
  s.inv.gpus = {idle_gpu(0)};
  s.inv.instances.clear();
  s.draw(80, 24);
  EXPECT_GE(s.find("no process holds GPU memory"), 0);
  EXPECT_NE(s.line(s.find("GPU 0")).find("free"), std::string::npos);
  s.state.orphans_only = true;
  s.draw(80, 24);
  EXPECT_GE(s.find("no process matches the filter"), 0);
}

TEST(TopScreen, ABoxCoversTheMiddleAndSaysWhatDoesNotFit) {
  Shown s;
  s.draw(80, 24);
  Box box{"free 2 processes?", {}, "y free them  n cancel"};
  for (int i = 0; i < 40; ++i) box.lines.push_back("line " + std::to_string(i));
  overlay_box(s.screen, box, 80, 24);
  expect_fits(s.screen, 80, 24);
  EXPECT_GE(s.find("free 2 processes?"), 0);
  EXPECT_GE(s.find("line 0 "), 0);
  EXPECT_EQ(s.find("line 39"), -1);
  EXPECT_GE(s.find("of 40"), 0) << "says there is more";
  box.scroll = 100;  // past the end: the last page
  s.draw(80, 24);
  overlay_box(s.screen, box, 80, 24);
  EXPECT_GE(s.find("line 39"), 0);
}

TEST(TopScreen, ProcessTextIsEscapedAndFitted) {
  Shown s;
  s.inv.gpus[1].holders[0].holder.cmdline = "evil\x1b]0;owned\x07 ünïcode";
  s.draw(80, 24);
  const std::string row = s.line(s.find("5001"));
  EXPECT_EQ(row.find('\x1b'), std::string::npos);
  EXPECT_NE(row.find("\\x1b"), std::string::npos) << row;
  EXPECT_EQ(columns(row), 80u);
}

// W4_12 (ux-wave4 §4): a lone process's PID sits in the same column as an instance
// member's, and both under the PID heading.
TEST(TopScreen, W4_12_LoneRowsAndMembersLineUpUnderPid) {
  Shown s;
  s.draw(80, 24);
  const std::string heading = s.line(s.find("    PID"));
  const std::string member = s.line(s.find("4722"));
  const std::string lone = s.line(s.find("5001"));
  const auto pid_end = heading.find("PID") + 3;
  EXPECT_EQ(member.find("4722") + 4, pid_end) << heading << "\n" << member;
  EXPECT_EQ(lone.find("5001") + 4, pid_end) << heading << "\n" << lone;
  EXPECT_EQ(member.find("ORPHAN"), lone.find("live")) << member << "\n" << lone;
  // The keys line fits 80 columns whole (its last word is not cut).
  EXPECT_NE(s.line(23).find("? more keys"), std::string::npos) << s.line(23);
}

// W4_12: from 100 columns, CPU% and resident host memory per process when sampled.
TEST(TopScreen, W4_12_CpuAndHostMemoryHaveColumnsOnAWideScreen) {
  Shown s;
  std::map<proc::ProcessId, ProcessUsage> usage = {
      {{kOrphanA, 1000}, ProcessUsage{42.0, 3 * kGiB}}};
  s.rows = build_rows(s.inv, s.state);
  s.history.record(s.inv);
  Frame f;
  f.inv = &s.inv;
  f.rows = &s.rows;
  f.state = &s.state;
  f.history = &s.history;
  f.usage = &usage;
  f.width = 120;
  f.height = 24;
  Screen screen = layout_screen(f);
  std::string heading, row, other;
  for (const auto& l : screen.lines) {
    if (l.text().find("    PID") != std::string::npos) heading = l.text();
    if (l.text().find(" 4722 ") != std::string::npos) row = l.text();
    if (l.text().find(" 4723 ") != std::string::npos) other = l.text();
  }
  EXPECT_NE(heading.find("CPU%"), std::string::npos) << heading;
  EXPECT_NE(heading.find("RSS"), std::string::npos) << heading;
  EXPECT_NE(row.find("   42   3.0G"), std::string::npos) << row;
  EXPECT_NE(other.find("    -      -"), std::string::npos) << "not sampled: " << other;
  f.width = 80;
  screen = layout_screen(f);
  for (const auto& l : screen.lines) EXPECT_EQ(l.text().find("CPU%"), std::string::npos);
}

// Issue 53: NVML's per-process SM sample (a hint no rule reads) has a column from 100
// columns, "-" where NVML gave none; at 80 columns there is no room and no column.
TEST(TopScreen, TheSmHintHasAColumnOnAWideScreenAndNoneAt80) {
  Shown s;
  for (auto& v : s.inv.gpus)
    for (auto& gh : v.holders) {
      if (gh.holder.id.pid == kOrphanA) gh.sm_percent = 0;
      if (gh.holder.id.pid == kLive) gh.sm_percent = 87;
    }
  const auto text = [](const Screen& screen) {
    std::string out;
    for (const auto& l : screen.lines) out += l.text() + "\n";
    return out;
  };
  s.draw(80, 24, 5000.0);
  expect_fits(s.screen, 80, 24);
  EXPECT_EQ(s.find("SM%"), -1) << text(s.screen);
  expect_golden_file(std::string(GPUREAP_FIXTURES) + "/top/list-80.txt", text(s.screen));
  s.draw(120, 24, 5000.0);
  expect_fits(s.screen, 120, 24);
  const int heading = s.find("    PID");
  ASSERT_GE(heading, 0);
  const std::string head = s.line(heading);
  const auto sm = head.find(" SM% ");
  ASSERT_NE(sm, std::string::npos) << head;
  // Each value sits under the heading's last character (right-aligned).
  const auto at = [&](pid_t pid) { return s.line(s.find(fmt::format(" {} ", pid))); };
  EXPECT_EQ(at(kLive).substr(sm, 5), "  87 ") << at(kLive);
  EXPECT_EQ(at(kOrphanA).substr(sm, 5), "   0 ") << "a sample of 0 % is shown: " << at(kOrphanA);
  EXPECT_EQ(at(kOrphanB).substr(sm, 5), "   - ") << "no sample: " << at(kOrphanB);
  expect_golden_file(std::string(GPUREAP_FIXTURES) + "/top/list-120.txt", text(s.screen));
}

// W4_12: the detail box (d, Enter on a process) has what a row cuts, whole: the verdict
// with its evidence, the container, the instance, the whole command line.
TEST(TopScreen, W4_12_TheDetailBoxShowsTheWholeProcess) {
  Shown s;
  s.inv.gpus[0].holders[0].holder.cmdline =
      "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 "
      "--mem-fraction-static 0.85 --port 30000 --trust-remote-code --enable-hierarchical-cache";
  s.inv.instances[0].model = "moonshotai/Kimi-K2.5";
  s.inv.instances[0].port = 30000;
  for (auto& v : s.inv.gpus)
    for (auto& gh : v.holders)
      if (gh.holder.orphaned) gh.holder.provenance = proc::Provenance::inferred;
  s.draw(80, 24);
  std::size_t at = 0;
  for (std::size_t i = 0; i < s.rows.size(); ++i)
    if (s.rows[i].kind == Row::Kind::holder && s.rows[i].holder->id.pid == kOrphanA) at = i;
  Frame f;
  f.inv = &s.inv;
  f.rows = &s.rows;
  f.state = &s.state;
  const Box box = detail_box(f, at, 80);
  EXPECT_EQ(box.title, "pid 4722");
  std::string all;
  for (const auto& l : box.lines) {
    EXPECT_LE(columns(l), 76u) << l;
    // " name       value", or a continuation under the value.
    EXPECT_TRUE(l.starts_with(std::string(12, ' ')) || (l.size() > 1 && l[0] == ' ' && l[1] != ' '))
        << l;
    all += l + "\n";
  }
  // Issue 53 #5: the provenance, as every view says it (not the evidence code "title").
  EXPECT_NE(all.find("verdict    orphaned (inferred): "), std::string::npos) << all;
  EXPECT_NE(all.find("container  docker:3f2a1b"), std::string::npos) << all;
  EXPECT_NE(all.find("moonshotai/Kimi-K2.5"), std::string::npos) << all;
  EXPECT_NE(all.find("port 30000"), std::string::npos) << all;
  EXPECT_NE(all.find("--enable-hierarchical-cache"), std::string::npos) << "whole: " << all;
  // On the heading: the instance, its model and port.
  const Box heading = detail_box(f, 0, 80);
  std::string text;
  for (const auto& l : heading.lines) text += l + "\n";
  EXPECT_NE(text.find("model      moonshotai/Kimi-K2.5"), std::string::npos) << text;
  EXPECT_NE(text.find("port       30000"), std::string::npos) << text;
}

// A keeper of a dead owner's memory (issue 52): the live holder on GPU 1 turned importer is
// marked IMPORTER, its bytes count with the orphaned ones in the bar, `o` keeps it, and the
// detail box says whose memory it keeps.
TEST(TopScreen, AnImporterIsMarkedAndItsBoxSaysWhoseMemoryItKeeps) {
  Shown s;
  auto& h = s.inv.gpus[1].holders[0].holder;
  h.keeper = proc::KeeperClass::importer;
  h.keeper_reason = "keeps 30.0 GiB of dead pid 4800 (python3), whose memory it imported (CUDA IPC)";
  s.state.orphans_only = true;
  s.draw(80, 24);
  const int row = s.find(std::to_string(kLive));
  ASSERT_GE(row, 0) << "o shows keepers too";
  EXPECT_NE(s.line(row).find("IMPORTER"), std::string::npos) << s.line(row);
  std::size_t at = 0;
  for (std::size_t i = 0; i < s.rows.size(); ++i)
    if (s.rows[i].kind == Row::Kind::holder && s.rows[i].holder->id.pid == kLive) at = i;
  Frame f;
  f.inv = &s.inv;
  f.rows = &s.rows;
  f.state = &s.state;
  std::string all;
  for (const auto& l : detail_box(f, at, 120).lines) all += l + "\n";
  EXPECT_NE(all.find("keeper     importer: keeps 30.0 GiB of dead pid 4800 (python3), whose memory"),
            std::string::npos)
      << all;
}

TEST(TopText, SensorsText) {
  gpu::GpuInfo info;
  EXPECT_EQ(sensors_text(info), "  -C    -W");
  info.temperature_c = 0;  // a real 0 is shown as 0: only unknown is '-'
  info.power_mw = 1'499;
  EXPECT_EQ(sensors_text(info), "  0C    1W");
  info.temperature_c = 104;
  info.power_mw = 1'000'000;
  EXPECT_EQ(sensors_text(info), "104C 1000W");
  EXPECT_EQ(sensors_text(info, true), "104C 1000/   -W") << "a cap NVML cannot say";
  info.power_limit_mw = 700'000;
  EXPECT_EQ(sensors_text(info, true), "104C 1000/ 700W");
}

// Issue 53: the card's health where it needs a look, on the legend line at any width:
// the clocks held down by heat or the power brake, uncorrected ECC errors; a power cap
// under load is the card at work, and a driver that cannot say is no alarm.
TEST(TopScreen, TheCardsHealthNeedingALookIsOnTheLegendLine) {
  gpu::GpuInfo info;
  EXPECT_EQ(health_alarm(info), "");
  info.clock_event_reasons = 0x1 | 0x4;  // idle, power cap
  info.ecc_uncorrected = 0;
  EXPECT_EQ(health_alarm(info), "");
  info.clock_event_reasons = 0x4 | 0x80;
  info.ecc_uncorrected = 3;
  EXPECT_EQ(health_alarm(info), "power brake, ECC 3");
  Shown s;
  s.inv.gpus[1].info.clock_event_reasons = 0x40;
  s.draw(80, 24);
  expect_fits(s.screen, 80, 24);
  const int legend = s.find("bar:");
  ASSERT_GE(legend, 0);
  EXPECT_NE(s.line(legend).find("! GPU 1 thermal (hardware)"), std::string::npos)
      << s.line(legend);
}

TEST(TopText, FitAndShortForms) {
  EXPECT_EQ(fit("abc", 5), "abc  ");
  EXPECT_EQ(fit("abcdef", 4), "abc~");
  EXPECT_EQ(fit("▁▂▃▄", 3), "▁▂~");
  EXPECT_EQ(columns("▁▂▃"), 3u);
  EXPECT_EQ(short_bytes(0), "0");
  EXPECT_EQ(short_bytes(512 * kMiB), "512M");
  EXPECT_EQ(short_bytes(84 * kGiB + 200 * kMiB), "84.2G");
  EXPECT_EQ(short_age(42), "42s");
  EXPECT_EQ(short_age(192), "3m12s");
  EXPECT_EQ(short_age(2 * 3600 + 5 * 60), "2h05m");
  EXPECT_EQ(short_age(3 * 86400 + 4 * 3600), "3d04h");
}

}  // namespace
}  // namespace gpureap::top
