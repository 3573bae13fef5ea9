#include "report/terminal_text.h"

#include <gtest/gtest.h>

namespace gpureap::report {
namespace {

bool has_control_byte(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

TEST(TerminalText, EscapeSequencesAreShownNotSent) {
  // The comm of defects-wave1 D14: colours the terminal red and rings the bell.
  std::string comm = "\x1b[31mRED\x1b[0m\x07";
  std::string shown = terminal_text(comm);
  EXPECT_EQ(shown, "\\x1b[31mRED\\x1b[0m\\x07");
  EXPECT_FALSE(has_control_byte(shown));
  EXPECT_EQ(terminal_text("a\nb\tc\rd\x7f"), "a\\nb\\tc\\rd\\x7f");
  EXPECT_EQ(terminal_text(std::string_view("nul\0x", 5)), "nul\\x00x");
}

TEST(TerminalText, PrintableTextIsUnchanged) {
  EXPECT_EQ(terminal_text("python3 -m sglang.launch_server --tp 8"),
            "python3 -m sglang.launch_server --tp 8");
  EXPECT_EQ(terminal_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80");  // é € 🚀
  EXPECT_EQ(terminal_text("C:\\path"), "C:\\path");
  EXPECT_EQ(terminal_text(""), "");
}

TEST(TerminalText, InvalidUtf8BytesAreEscaped) {
  EXPECT_EQ(terminal_text("caf\xe9-\xff\xfe"), "caf\\xe9-\\xff\\xfe");
  EXPECT_EQ(terminal_text("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(terminal_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(terminal_text("\xe2\x82"), "\\xe2\\x82");                    // cut short
  EXPECT_EQ(terminal_text("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(TerminalText, C1ControlsAndBidiOverridesAreEscaped) {
  EXPECT_EQ(terminal_text("\xc2\x9b"
                          "31m"),
            "\\u009b31m");                                          // U+009B, CSI
  EXPECT_EQ(terminal_text("\x9b"), "\\x9b");                        // the raw byte
  EXPECT_EQ(terminal_text("abc\xe2\x80\xaexyz"), "abc\\u202exyz");  // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(terminal_text("\xc2\xa0"), "\xc2\xa0");                 // no-break space is printable
}

TEST(TerminalText, WidthCutsAtACharacterBoundary) {
  EXPECT_EQ(terminal_text("short", 10), "short");
  EXPECT_EQ(terminal_text("exactly10!", 10), "exactly10!");
  EXPECT_EQ(terminal_text("python3 -m sglang", 10), "python3...");
  // An escape is never cut in half: "\x1b" takes four columns.
  EXPECT_EQ(terminal_text("ab\x1b[31mxyz", 8), "ab...");
  EXPECT_EQ(terminal_text("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 6), "\xc3\xa9...");
  EXPECT_EQ(terminal_text("abcdef", 2), "..");
}

TEST(TerminalTextLines, BreaksAtSpacesNeverMidWord) {
  // defects-wave1 §1.7: free's WHY column showed "orphaned: re-parent".
  EXPECT_EQ(terminal_text_lines("holds 90.0 GiB on GPU 0; orphaned: re-parented to 1 (systemd)",
                                28),
            (std::vector<std::string>{"holds 90.0 GiB on GPU 0;", "orphaned: re-parented to 1",
                                      "(systemd)"}));
  EXPECT_EQ(terminal_text_lines("fits in one", 11), std::vector<std::string>{"fits in one"});
  EXPECT_EQ(terminal_text_lines("", 10), std::vector<std::string>{""});
  EXPECT_EQ(terminal_text_lines("a  b ", 10), std::vector<std::string>{"a b"});
}

TEST(TerminalTextLines, AWordWiderThanTheCellIsCutAndEscapesStayWhole) {
  EXPECT_EQ(terminal_text_lines("see /a/very/long/cgroup/path now", 10),
            (std::vector<std::string>{"see", "/a/very...", "now"}));
  EXPECT_EQ(terminal_text_lines("bell\x07 \x1b[2J", 10),
            (std::vector<std::string>{"bell\\x07", "\\x1b[2J"}));
  EXPECT_EQ(terminal_text_lines("x \x1b[31mred", 12),
            (std::vector<std::string>{"x", "\\x1b[31mred"}));
}

}  // namespace
}  // namespace gpureap::report
