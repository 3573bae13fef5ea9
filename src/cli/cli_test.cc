// The command line as users type it: the real command tree (main.cc's), parsed by
// CLI11 without running a command. Defaults are shown as they are read back, every
// command has a summary, and bad input names the option.

#include <gtest/gtest.h>

#include <algorithm>
#include <CLI/CLI.hpp>
#include <chrono>

#include "cli/cli_outline.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/suggest.h"
#include "reclaim/escalation.h"
#include "reclaim/reclaimer.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

using namespace std::chrono_literals;

struct Tree {
  CLI::App app{"gpureap"};
  GlobalOptions global;
  CommandFn run;
  Tree() { add_commands(app, global, run); }
  void parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    app.parse(args);
  }
};

TEST(DurationFlag, EveryDefaultReadsBackExactly) {
  for (auto d : {reclaim::kDefaultGrace, reclaim::kDefaultKillWait, reclaim::kDefaultTimeout,
                 reclaim::kDefaultSettle, std::chrono::milliseconds(1500),
                 std::chrono::milliseconds(250), std::chrono::milliseconds(0)}) {
    const std::string text = duration_flag(d);
    auto back = parse_duration(text);
    ASSERT_TRUE(back) << text;
    EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(*back), d) << text;
  }
  EXPECT_EQ(duration_flag(1500ms), "1500ms");  // never rounded to "1s"
  EXPECT_EQ(duration_flag(5000ms), "5s");
}

TEST(CommandTree, EveryCommandHasASummaryAndFreeShowsItsDefaults) {
  Tree t;
  auto commands = visible_commands(t.app);
  ASSERT_GE(commands.size(), 7u);
  for (const auto& c : commands) EXPECT_FALSE(summary_of(c.description).empty()) << c.name;
  auto* free = t.app.get_subcommand("free");
  const std::string help = free->help();
  EXPECT_NE(help.find(duration_flag(reclaim::kDefaultGrace)), std::string::npos) << help;
  EXPECT_NE(help.find(duration_flag(reclaim::kDefaultTimeout)), std::string::npos) << help;
}

TEST(CommandTree, AnUnknownOptionIsAParseErrorNamingIt) {
  Tree t;
  try {
    t.parse({"free", "--gpu", "0", "--graec", "1s"});
    FAIL() << "parsed";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--graec"), std::string::npos) << e.what();
    EXPECT_NE(e.get_exit_code(), 0);
  }
}

// Typed flags (cli/flags.h): a bad value is refused while parsing, naming the option,
// before any command runs (and so before anything is scanned or signalled).
TEST(TypedFlags, BadValuesAreParseErrorsNamingTheOption) {
  const std::vector<std::vector<std::string>> bad = {
      {"free", "--gpu", "gpu0"},           {"free", "--gpu", "0", "--grace", "soon"},
      {"free", "--gpu", "0", "--timeout", "-1s"}, {"wait", "--below", "lots"},
      {"wait", "--gpu", "3-1"},            {"status", "--gpu", ""},
      {"run", "--gpu", "0,,1", "--", "true"}, {"slurm", "health", "--persist", "x"},
      {"log", "--gpu", "gpu0"},            {"log", "--pid", "0"}};
  for (const auto& args : bad) {
    Tree t;
    const std::string option = args[args.size() - (args.back() == "true" ? 3 : 2)];
    try {
      t.parse(args);
      ADD_FAILURE() << "parsed: " << option;
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
      EXPECT_FALSE(static_cast<bool>(t.run)) << option;
    }
  }
}

TEST(TypedFlags, DurationsAndSelectorsReachTheCommand) {
  Tree t;
  t.parse({"free", "--gpu", "0-3", "--grace", "1500ms", "--orphans", "--dry-run"});
  EXPECT_TRUE(static_cast<bool>(t.run));
  const std::string help = t.app.get_subcommand("free")->help();
  EXPECT_NE(help.find("DURATION"), std::string::npos) << help;
  EXPECT_NE(help.find("GPU"), std::string::npos) << help;
}

TEST(Suggest, TheClosestNameWithinATypo) {
  const std::vector<std::string> names = {"--timeout", "--orphans", "--gpu", "--grace"};
  EXPECT_EQ(closest("--timout", names), "--timeout");
  EXPECT_EQ(closest("--orphan", names), "--orphans");
  EXPECT_EQ(closest("--gup", names), "--gpu");
  EXPECT_EQ(closest("--zzzzzzzz", names), "");
  EXPECT_EQ(closest("stauts", {"status", "free"}), "status");
  EXPECT_EQ(closest("x", {"status"}), "");
}

TEST(Suggest, UnexpectedWordsOptionsFirstAndAValueIsNoStrayArgument) {
  Tree t;
  const CLI::App& free = *t.app.get_subcommand("free");
  EXPECT_EQ(unexpected_text({"--timout", "5s"}, free, t.app),
            "unknown option '--timout' (did you mean --timeout?)");
  EXPECT_EQ(unexpected_text({"--grcae=1s"}, free, t.app),
            "unknown option '--grcae' (did you mean --grace?)");
  EXPECT_EQ(unexpected_text({"extra"}, free, t.app), "unexpected argument 'extra'");
}

TEST(CommandTree, ParsingChoosesTheCommandWithoutRunningIt) {
  Tree t;
  t.parse({"free", "--gpu", "all", "--orphans", "--dry-run"});
  EXPECT_TRUE(t.app.got_subcommand("free"));
  EXPECT_TRUE(static_cast<bool>(t.run));  // chosen, not yet run: main.cc runs it
}

}  // namespace
}  // namespace gpureap::cli
