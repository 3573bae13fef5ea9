// Help text laid out for a screen: prose re-filled at words, examples kept as typed,
// each exit status one entry whose continuation sits under its meaning.

#include "report/help_text.h"

#include <gtest/gtest.h>

#include <array>

#include "report/command_outline.h"

namespace gpureap::report {
namespace {

TEST(RefillProse, LinesAtTheMarginAreJoinedAndIndentedLinesKeepTheirBreaks) {
  const std::string prose =
      "Frees the memory of the GPUs that stray processes hold, and checks that\n"
      "it came back.\n"
      "\n"
      "Examples:\n"
      "  gpureap free --orphans\n"
      "  gpureap free --gpu 3";
  EXPECT_EQ(refill_prose(prose),
            "Frees the memory of the GPUs that stray processes hold, and checks that it came "
            "back.\n"
            "\n"
            "Examples:\n"
            "  gpureap free --orphans\n"
            "  gpureap free --gpu 3");
  EXPECT_EQ(wrap_help("Usage: gpureap free [OPTIONS]\n\n" + refill_prose(prose) + "\n\n", 40),
            "Usage: gpureap free [OPTIONS]\n"
            "\n"
            "Frees the memory of the GPUs that stray\n"
            "processes hold, and checks that it came\n"
            "back.\n"
            "\n"
            "Examples:\n"
            "  gpureap free --orphans\n"
            "  gpureap free --gpu 3\n");
}

TEST(SplitDescription, TheProseEndsAtTheFirstHeadingLine) {
  const auto parts = split_description(
      "Wait until the GPUs are free.\nExit status: as free.\n\nExamples (a remark):\n  gpureap wait");
  EXPECT_EQ(parts.prose, "Wait until the GPUs are free.\nExit status: as free.");
  EXPECT_EQ(parts.sections, "Examples (a remark):\n  gpureap wait");
  EXPECT_EQ(split_description("No heading.").sections, "");
}

TEST(WrapHelp, AnOptionsContinuationStartsAtItsDescriptionColumn) {
  const std::string help = "Usage: x\n  --gpu GPU   the GPUs to look at, by index or UUID\n";
  EXPECT_EQ(wrap_help(help, 30),
            "Usage: x\n"
            "  --gpu GPU   the GPUs to look\n"
            "              at, by index or\n"
            "              UUID\n");
}

TEST(ExitStatusHelp, TheCodesArePaddedToOneColumn) {
  const std::array<ExitStatusLine, 3> lines = {{{"0", "done"}, {"128+N", "killed"}, {"2", "usage"}}};
  EXPECT_EQ(exit_status_help(lines),
            "Exit status:\n"
            "  0      done\n"
            "  128+N  killed\n"
            "  2      usage");
}

TEST(SummaryOf, TheFirstSentenceOfTheFirstParagraphWithoutItsDot) {
  EXPECT_EQ(summary_of("Show GPU memory. Each holder too.\n\nMore."), "Show GPU memory");
  EXPECT_EQ(summary_of("Wait until the GPUs\nare free.\n\nExamples:"), "Wait until the GPUs are free");
  EXPECT_EQ(summary_of("One line"), "One line");
  EXPECT_EQ(summary_of(""), "");
}

}  // namespace
}  // namespace gpureap::report
