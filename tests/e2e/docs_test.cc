// The README's commands, run as written: the fenced block under "The simulated
// GPU node" is extracted from README.md and run line by line with this build's
// binaries, so an example that no longer works (exit 137, a renamed flag) fails here.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "harness.h"
#include "util/test_golden.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace docs_test {

using namespace std::chrono_literals;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The lines of the first fenced block after `heading`.
std::vector<std::string> fenced_block_after(const std::string& text, const std::string& heading) {
  std::vector<std::string> lines;
  auto at = text.find("\n" + heading + "\n");
  if (at == std::string::npos) return lines;
  auto open = text.find("\n```", at);
  if (open == std::string::npos) return lines;
  std::istringstream in(text.substr(text.find('\n', open + 1) + 1));
  for (std::string line; std::getline(in, line) && line.rfind("```", 0) != 0;)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

TEST(Docs, ReadmeSimulatedNodeCommandsRun) {
  std::ifstream readme(std::string(GPUREAP_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme.good());
  std::stringstream text;
  text << readme.rdbuf();
  auto lines = fenced_block_after(text.str(), "## The simulated GPU node");
  ASSERT_GE(lines.size(), 4u) << "the README's simulated-node block was not found";

  // A private node and state directory; SimNode cleans up its own directory, and the
  // README's node (a subdirectory) is cleaned up below: only processes this test started.
  SimNode scratch({"--gpus", "1"});
  const std::string node_dir = scratch.dir() + "/readme-node";
  struct Cleanup {
    std::string dir;
    ~Cleanup() { run_command({GPUREAP_SIM_BIN, "cleanup", "--dir", dir}, {}, 30s); }
  } cleanup{node_dir};

  std::string script = "set -u\n";
  for (std::string line : lines) {
    replace_all(line, "build/sim/gpureap-sim", GPUREAP_SIM_BIN);
    replace_all(line, "build/gpureap", GPUREAP_BIN);
    replace_all(line, "/tmp/node", node_dir);
    std::string quoted = line;
    replace_all(quoted, "'", "'\\''");
    script += line + "\nrc=$?; if [ $rc -ne 0 ]; then echo \"README line exited $rc: " + quoted +
              "\" >&2; exit 1; fi\n";
  }
  std::map<std::string, std::string> env = {{"GPUREAP_STATE_DIR", scratch.dir() + "/state"},
                                            {"GPUREAP_NVML_LIBRARY", ""},
                                            {"GPUREAP_SIM_DIR", ""},
                                            {"GPUREAP_DEV_DIR", ""}};
  auto r = run_command({"/bin/bash", "-c", script}, env, 60s);
  EXPECT_EQ(r.exit_code, 0) << "stderr:\n" << r.err << "\nstdout:\n" << r.out;
  // The block frees the orphans it made: free's report says so.
  EXPECT_NE(r.out.find("freed"), std::string::npos) << r.out;
}

// docs/plan.md's worked example is what `gpureap plan` prints, line for line (the
// sweep once showed "(0.80 to 0.84 omitted)" rows the tool never printed).
// Issue 28 part 4: every generated man page reads within 80 columns at MANWIDTH=80.
TEST(Docs, ManPagesFit80ColumnsAtManwidth80) {
  if (!std::filesystem::exists("/usr/bin/man")) GTEST_SKIP() << "man is not installed";
  SimNode node({"--gpus", "1"});
  const std::string dir = node.dir() + "/man";
  std::filesystem::create_directories(dir);
  auto made = node.gpureap({"man-page", "--dir", dir});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::size_t pages = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++pages;
    auto r = run_command({"/usr/bin/man", "-l", entry.path().string()},
                         {{"MANWIDTH", "80"}, {"MAN_KEEP_STDERR", "1"}, {"PAGER", "cat"}},
                         std::chrono::seconds(30));
    ASSERT_EQ(r.exit_code, 0) << entry.path() << r.err;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      std::size_t columns = 0;  // code points: the pages have a few UTF-8 characters
      for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
      EXPECT_LE(columns, 80u) << entry.path().filename() << ": " << line;
    }
  }
  EXPECT_GE(pages, 9u);
}

// A man page as a reader sees it at MANWIDTH=80.
std::string rendered_man_page(const SimNode& node, const std::string& command) {
  const std::string file = node.dir() + "/page.1";
  auto made = command.empty() ? node.gpureap({"man-page"}) : node.gpureap({"man-page", command});
  EXPECT_EQ(made.exit_code, 0) << made.err;
  std::ofstream(file) << made.out;
  auto r = run_command({"/usr/bin/man", "-l", file},
                       {{"MANWIDTH", "80"}, {"MAN_KEEP_STDERR", "1"}, {"PAGER", "cat"}},
                       std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// W4_06 (ux-wave4 #6): each page's EXIT STATUS is tagged paragraphs that man fills to the
// reader's width, wrapped once: at MANWIDTH=80 and 200 every continuation line sits under
// its meaning (no hand-broken line of a word or two). Golden: tests/golden/man-exit-status-*.txt
// (GPUREAP_UPDATE_GOLDEN=1 rewrites them).
std::string man_exit_status(const SimNode& node, const std::string& command, unsigned width) {
  const std::string file = node.dir() + "/exit-page.1";
  auto made = command.empty() ? node.gpureap({"man-page"}) : node.gpureap({"man-page", command});
  EXPECT_EQ(made.exit_code, 0) << made.err;
  std::ofstream(file) << made.out;
  auto r = run_command({"/usr/bin/man", "-l", file},
                       {{"MANWIDTH", std::to_string(width)}, {"MAN_KEEP_STDERR", "1"},
                        {"PAGER", "cat"}},
                       std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ') {
      if (inside) break;
      inside = line == "EXIT STATUS";
    }
    if (inside) out += line + "\n";
  }
  return out;
}

TEST(Docs, W4_06_ManPageExitStatusIsWrappedOnceAtAnyWidth) {
  if (!std::filesystem::exists("/usr/bin/man")) GTEST_SKIP() << "man is not installed";
  SimNode node({"--gpus", "1"});
  for (unsigned width : {80u, 200u}) {
    std::string all;
    for (const char* command : {"", "status", "free", "run", "slurm"}) {
      const std::string block = man_exit_status(node, command, width);
      ASSERT_FALSE(block.empty()) << command;
      std::istringstream in(block);
      std::string line;
      std::size_t meaning = 0;
      while (std::getline(in, line)) {
        if (line == "EXIT STATUS" || line.empty()) continue;
        EXPECT_LE(line.size(), width) << command << ": " << line;
        const auto text = line.find_first_not_of(' ');
        const auto gap = line.find("  ", text);
        if (text == 7 && gap != std::string::npos) {  // "       0      meaning"
          meaning = line.find_first_not_of(' ', gap);
        } else {
          EXPECT_EQ(text, meaning) << command << " at " << width << ": a ragged line: " << line
                                   << "\n" << block;
        }
      }
      all += std::string("gpureap") + (*command ? "-" : "") + command + "(1)\n" + block + "\n";
    }
    const std::string golden = std::string(GPUREAP_SOURCE_DIR) + "/tests/golden/man-exit-status-" +
                               std::to_string(width) + ".txt";
    expect_golden_file(golden, all);
  }
}

// Issue 28 part 4: gpureap-status(1) explains every column the table has and every mark
// the review found unexplained; the column names are read from a real status table.
TEST(Docs, StatusFieldsExplainEveryColumn) {
  if (!std::filesystem::exists("/usr/bin/man")) GTEST_SKIP() << "man is not installed";
  SimNode node({"--gpus", "1"});
  auto holder = node.hold({"--gpu", "0", "--bytes", "1GiB"});
  auto table = node.gpureap({"status", "--wide"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  std::string header;
  std::istringstream rows(table.out);
  for (std::string line; std::getline(rows, line);)
    if (line.find("PID") != std::string::npos && line.find("COMMAND") != std::string::npos)
      header = line;
  ASSERT_FALSE(header.empty()) << table.out;
  std::vector<std::string> columns;
  std::istringstream words(header);
  for (std::string w; words >> w;) {
    if ((w == "MEM" && !columns.empty() && columns.back() == "GPU") ||
        (w == "BY" && !columns.empty() && columns.back() == "FOUND"))
      columns.back() += " " + w;
    else
      columns.push_back(w);
  }
  columns.push_back("CONTAINER");  // shown only when some holder is in one

  const std::string page = rendered_man_page(node, "status");
  const auto fields = page.find("\nFIELDS\n");
  ASSERT_NE(fields, std::string::npos) << page;
  const std::string section = page.substr(fields, page.find("\nENVIRONMENT\n") - fields);
  for (const auto& c : columns)
    EXPECT_NE(section.find("\n       " + c), std::string::npos) << "column " << c << "\n" << section;
  for (const char* mark : {"Z+threads", "nvml,fd,map", "ORPHAN", "DETACHED", "(est.)",
                           "driver_held", "releasing", "outside_namespace", "ghost",
                           "orphan_computing", "0/gi1/ci0", "also open here"})
    EXPECT_NE(section.find(mark), std::string::npos) << mark;
}

// The pages name documents where the package installs them, never the source tree's
// docs/ or contrib/; gpureap(1)'s examples are command lines, one per command.
TEST(Docs, ManPagesNameInstalledPathsAndTheOverviewHasExamples) {
  if (!std::filesystem::exists("/usr/bin/man")) GTEST_SKIP() << "man is not installed";
  SimNode node({"--gpus", "1"});
  for (const char* command : {"", "status", "watch", "slurm", "plan", "run"}) {
    const std::string page = rendered_man_page(node, command);
    EXPECT_EQ(std::regex_search(page, std::regex(R"((^|[^/\w])(docs|contrib)/)")), false)
        << "gpureap " << command << ":\n" << page;
  }
  const std::string main_page = rendered_man_page(node, "");
  const auto at = main_page.find("\nEXAMPLES\n");
  ASSERT_NE(at, std::string::npos) << main_page;
  const std::string examples = main_page.substr(at, main_page.find("\nSEE ALSO\n") - at);
  std::size_t commands = 0;
  std::istringstream lines(examples);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("       gpureap ")) ++commands;
    // No stray heading: every line is a command (7 columns in) or its description (14).
    if (!line.empty() && line != "EXAMPLES") {
      EXPECT_TRUE(line.starts_with("       gpureap ") || line.starts_with("              "))
          << line;
    }
  }
  EXPECT_GE(commands, 8u) << examples;
}

TEST(Docs, PlanWorkedExampleIsWhatPlanPrints) {
  std::ifstream doc(std::string(GPUREAP_SOURCE_DIR) + "/docs/plan.md");
  ASSERT_TRUE(doc.good());
  std::stringstream text;
  text << doc.rdbuf();
  const std::string all = text.str();
  auto at = all.find("\n## Worked example: the case studies\n");
  ASSERT_NE(at, std::string::npos);
  auto open = all.find("\n```\n", at);
  ASSERT_NE(open, std::string::npos);
  auto close = all.find("\n```\n", open + 5);
  ASSERT_NE(close, std::string::npos);
  std::string block = all.substr(open + 5, close - open - 5);
  auto first_newline = block.find('\n');
  std::string command = block.substr(0, first_newline);
  std::string expected = block.substr(first_newline + 1);
  ASSERT_TRUE(command.starts_with("$ gpureap plan ")) << command;

  std::vector<std::string> args;
  std::istringstream words(command.substr(10));
  for (std::string w; words >> w;) args.push_back(w);
  SimNode node({"--gpus", "1"});
  auto r = node.gpureap(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto trim_end = [](std::string s) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  };
  EXPECT_EQ(trim_end(r.out), trim_end(expected));
}

}  // namespace
}  // namespace gpureap::e2e
