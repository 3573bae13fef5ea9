// Tables that fit the terminal: rows cut, never wrapped; prose broken at words.

#include "report/table_layout.h"

#include <gtest/gtest.h>

#include <sstream>

namespace gpureap::report {
namespace {

std::vector<std::string> table_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const std::vector<TableColumn> kColumns = {
    {"PID"}, {"USER", false, 2, 8}, {"FOUND BY", false, 1}, {"COMMAND"}};
const std::vector<std::vector<TableCell>> kRows = {
    {{"4242"},
     {"a-very-long-ldap-name"},
     {"nvml,fd,map"},
     {"python -m sglang.launch_server --model-path /models/Qwen3-235B --tp-size 8 --port 30000"}}};

TEST(RenderTable, TheCommandTakesTheRoomLeftAndNoLineIsLonger) {
  for (std::size_t width : {60u, 80u, 160u}) {
    std::string out = render_table(kColumns, kRows, Style{}, "  ", {.columns = width});
    auto lines = table_lines(out);
    ASSERT_EQ(lines.size(), 2u) << out;
    for (const auto& l : lines) EXPECT_LE(l.size(), width) << out;
    // Cut to exactly the room left (or whole, when it fits).
    if (kRows[0][3].text.size() + 30 > width) {
      EXPECT_EQ(lines[1].size(), width) << out;
      EXPECT_EQ(lines[1].substr(width - 3), "...") << out;
    } else {
      EXPECT_NE(out.find(kRows[0][3].text + "\n"), std::string::npos) << out;
    }
  }
}

TEST(RenderTable, NarrowTerminalsDropColumnsInTheirOrderAndCapWideCells) {
  std::string out = render_table(kColumns, kRows, Style{}, "  ", {.columns = 40}, 30);
  EXPECT_EQ(out.find("FOUND BY"), std::string::npos) << out;  // dropped first
  EXPECT_EQ(out.find("USER"), std::string::npos) << out;      // then this
  out = render_table(kColumns, kRows, Style{}, "  ", {.columns = 60}, 40);
  EXPECT_EQ(out.find("FOUND BY"), std::string::npos) << out;
  EXPECT_NE(out.find("a-ver..."), std::string::npos) << "capped at 8: " << out;
}

TEST(RenderTable, WideCutsNothing) {
  std::string out = render_table(kColumns, kRows, Style{}, "  ", {.columns = 80, .wide = true});
  EXPECT_NE(out.find("a-very-long-ldap-name"), std::string::npos) << out;
  EXPECT_NE(out.find(kRows[0][3].text + "\n"), std::string::npos) << out;
}

TEST(RenderTable, ColourDoesNotMoveTheColumnsOrCountAsWidth) {
  std::vector<TableColumn> columns = {{"PARENT"}, {"COMMAND"}};
  std::vector<std::vector<TableCell>> rows = {{{"1 ORPHAN", "31"}, {std::string(100, 'x')}},
                                              {{"77"}, {"short"}}};
  std::string out = render_table(columns, rows, Style{.color = true}, "", {.columns = 50});
  for (const auto& l : table_lines(out)) EXPECT_LE(visible_width(l), 50u) << out;
  EXPECT_NE(out.find("\033[31m1 ORPHAN\033[0m x"), std::string::npos) << out;
  EXPECT_NE(out.find("\n77       short\n"), std::string::npos) << out;
}

TEST(RenderTable, UntrustedTextIsEscaped) {
  std::vector<TableColumn> columns = {{"PID"}, {"COMMAND"}};
  std::string out =
      render_table(columns, {{{"1"}, {"evil\x1b[31mRED"}}}, Style{}, "", {.columns = 80});
  EXPECT_NE(out.find("evil\\x1b[31mRED"), std::string::npos) << out;
}

TEST(WrapLines, BreaksAtSpacesWithTheContinuationIndented) {
  std::string out = wrap_lines("  one two three four five six seven\nshort\n", 16);
  EXPECT_EQ(out, "  one two three\n    four five\n    six seven\nshort\n");
}

// A MIG device's heading broke after "/dev/nvidia0 " (status at 100 columns): a break
// inside the two spaces between fields left one at the line's end.
TEST(WrapLines, ABreakInARunOfSpacesLeavesNoSpaceAtEitherSide) {
  EXPECT_EQ(wrap_lines("GPU 0  dev  MIG-5a3f", 12), "GPU 0  dev\n  MIG-5a3f");
  EXPECT_EQ(wrap_lines("GPU 0  devices  MIG", 13), "GPU 0\n  devices\n  MIG");
}

TEST(WrapLines, AWordLongerThanTheLineIsBrokenWhereItMust) {
  EXPECT_EQ(wrap_lines("GPU-41b2d037-d879-9d76", 10), "GPU-41b2d0\n  37-d879-\n  9d76");
}

TEST(WrapLines, AColourOpenAtABreakIsClosedAndReopened) {
  std::string out = wrap_lines("\033[31mred words here\033[0m", 9);
  EXPECT_EQ(out, "\033[31mred words\033[0m\n  \033[31mhere\033[0m") << out;
  for (const auto& l : table_lines(out)) EXPECT_LE(visible_width(l), 9u);
}

TEST(WrapLines, CountsCodePointsNotBytes) {
  EXPECT_EQ(visible_width("\033[1mé…\033[0m"), 2u);
  EXPECT_EQ(wrap_lines("ééé ééé", 7), "ééé ééé");
}

// Issue 53 #7: a colour opened before a line's indent ("\033[31m  sglang server ...", as
// status's Instances block and free's plan write an orphaned instance) hangs its
// continuation two past the indent the terminal shows, as without colour.
TEST(WrapLines, AColourBeforeTheIndentDoesNotMoveTheHang) {
  const std::string plain = wrap_lines("  sglang server, process group 434, launcher gone", 30);
  const std::string coloured =
      wrap_lines("\033[31m  sglang server, process group 434, launcher gone\033[0m", 30);
  auto strip = [](std::string s) {
    for (auto at = s.find('\033'); at != std::string::npos; at = s.find('\033'))
      s.erase(at, s.find('m', at) - at + 1);
    return s;
  };
  EXPECT_EQ(strip(coloured), plain);
  EXPECT_EQ(plain, "  sglang server, process group\n    434, launcher gone");
}

}  // namespace
}  // namespace gpureap::report
