// The man pages from an outline: sections from the help's headed paragraphs, options as
// tagged paragraphs, exit statuses as tagged paragraphs, installed paths, troff escaped.

#include "report/man_page.h"

#include <gtest/gtest.h>

namespace gpureap::report {
namespace {

CommandOutline man_top() {
  CommandOutline top;
  top.name = "gpureap";
  top.description = "Finds and frees GPU memory.";
  top.footer = "Exit status:\n  0  ok\n  2  usage error";
  top.options.push_back({{"--json"}, "", "JSON output", "", ValueKind::none, {}});
  return top;
}

CommandOutline man_free() {
  CommandOutline c;
  c.name = "free";
  c.description =
      "Free the GPUs. See docs/free.md and contrib/slurm/epilog.\n"
      ".dot at the start\n"
      "\n"
      "Examples:\n"
      "  gpureap free --orphans   the orphans only\n";
  c.footer = "Exit status:\n  0  freed\n  4  nothing to do";
  c.options.push_back({{"-y", "--yes"}, "", "Do not ask", "", ValueKind::none, {}});
  c.options.push_back({{"--grace"}, "DURATION", "Time to exit", "5s", ValueKind::duration, {}});
  return c;
}

const ManPage& page(const std::vector<ManPage>& pages, const std::string& file) {
  for (const auto& p : pages)
    if (p.file == file) return p;
  throw std::runtime_error("no page " + file);
}

TEST(ManPages, OnePageForGpureapThenOneACommand) {
  auto pages = man_pages(man_top(), {man_free()}, {"2026-12-05", "0.1.0"});
  ASSERT_EQ(pages.size(), 2u);
  EXPECT_EQ(pages[0].file, "gpureap.1");
  EXPECT_EQ(pages[1].file, "gpureap-free.1");
  EXPECT_NE(pages[0].text.find(".TH GPUREAP 1 \"2026-12-05\" \"gpureap 0.1.0\""), std::string::npos)
      << pages[0].text;
  EXPECT_NE(pages[1].text.find(".SH NAME\ngpureap-free \\- Free the GPUs\n"), std::string::npos)
      << pages[1].text;
}

TEST(ManPages, OptionsAndExitStatusesAreTaggedParagraphs) {
  const std::string text = page(man_pages(man_top(), {man_free()}, {"d", "v"}), "gpureap-free.1").text;
  EXPECT_NE(text.find(".TP\n\\fB\\-y\\fR, \\fB\\-\\-yes\\fR\nDo not ask\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".TP\n\\fB\\-\\-grace\\fR \\fIDURATION\\fR\nTime to exit (default: 5s)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(".SH EXIT STATUS\n.TP\n.B 0\nfreed\n.TP\n.B 4\nnothing to do\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find(".SH EXAMPLES\n.PP\n.RS 4\n.nf\ngpureap free \\-\\-orphans   the orphans only\n"),
            std::string::npos)
      << text;
}

TEST(ManPages, SourcePathsAreTheInstalledOnesAndALeadingDotIsText) {
  const std::string text = page(man_pages(man_top(), {man_free()}, {"d", "v"}), "gpureap-free.1").text;
  EXPECT_NE(text.find("/usr/share/doc/gpureap/free.md"), std::string::npos) << text;
  EXPECT_NE(text.find("/usr/share/doc/gpureap/examples/slurm/epilog"), std::string::npos) << text;
  EXPECT_EQ(text.find(" docs/"), std::string::npos) << text;
  EXPECT_NE(text.find("\n\\&.dot at the start\n"), std::string::npos) << text;
}

TEST(ManPages, TheOverviewListsEachCommandWithItsFirstExample) {
  const std::string text = page(man_pages(man_top(), {man_free()}, {"d", "v"}), "gpureap.1").text;
  EXPECT_NE(text.find(".SH COMMANDS\n.TP\n.B free\nFree the GPUs. See \\fBgpureap\\-free\\fR(1).\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(".SH EXAMPLES\n.TP\n.B gpureap free \\-\\-orphans\nthe orphans only\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(".SH EXIT STATUS\n.TP\n.B 0\nok\n.TP\n.B 2\nusage error\n"), std::string::npos)
      << text;
  for (const char* s : {".SH ENVIRONMENT\n", ".SH FILES\n", ".SH SEE ALSO\n\\fBgpureap\\-free\\fR(1)"})
    EXPECT_NE(text.find(s), std::string::npos) << s;
}

TEST(ManPages, StatusHasItsFieldsSection) {
  CommandOutline status;
  status.name = "status";
  status.description = "Show who holds the GPUs.";
  const auto pages = man_pages(man_top(), {status}, {"d", "v"});
  EXPECT_NE(page(pages, "gpureap-status.1").text.find(".SH FIELDS\n"), std::string::npos);
  EXPECT_EQ(page(pages, "gpureap.1").text.find(".SH FIELDS\n"), std::string::npos);
}

// Issue 53 #5: the words every view prints are defined where a user looks: gpureap(1) and
// gpureap-status(1), each word a tagged paragraph with what it permits.
TEST(ManPages, TheVerdictWordsAreDefinedInGpureapAndStatus) {
  CommandOutline status;
  status.name = "status";
  status.description = "Show who holds the GPUs.";
  const auto pages = man_pages(man_top(), {status}, {"d", "v"});
  for (const char* file : {"gpureap.1", "gpureap-status.1"}) {
    const std::string& text = page(pages, file).text;
    EXPECT_NE(text.find(".SH VERDICTS AND EVIDENCE\n"), std::string::npos) << file;
    for (const char* word : {"orphaned", "detached", "live", "owned", "witnessed", "inferred",
                             "releasing", "no_holder", "driver_held", "outside_namespace"})
      EXPECT_NE(text.find(std::string(".TP\n.B ") + word + "\n"), std::string::npos)
          << file << ": " << word;
    EXPECT_NE(text.find("nothing unattended will"), std::string::npos) << file;
  }
}

}  // namespace
}  // namespace gpureap::report
