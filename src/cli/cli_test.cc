// The command line as users type it: the real command tree (main.cc's), parsed by
// CLI11 without running a command. Defaults are shown as they are read back, every
// command has a summary, and bad input names the option.

#include <gtest/gtest.h>

#include "util/test_golden.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli/cli_outline.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/flags.h"
#include "cli/global_order.h"
#include "cli/help_format.h"
#include "cli/suggest.h"
#include "cli/usage_error.h"
#include "reclaim/escalation.h"
#include "reclaim/reclaimer.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

using namespace std::chrono_literals;

struct Tree {
  CLI::App app{"gpureap", "gpureap"};
  GlobalOptions global;
  CommandFn run;
  Tree() {
    use_gpureap_help(app);  // as main.cc
    add_commands(app, global, run);
  }
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

TEST(TypedFlags, APidListTakesCommasAndRepeatsAndRefusesAnEmptyPart) {
  std::vector<pid_t> pids;
  CLI::App app;
  add_pid_list(app, "--pid", pids, "Only these holders");
  app.parse("--pid 1,2 --pid 3", false);
  EXPECT_EQ(pids, (std::vector<pid_t>{1, 2, 3}));
  for (const char* bad : {"1,,2", ",1", "1,", ","}) {
    pids.clear();
    CLI::App again;
    add_pid_list(again, "--pid", pids, "Only these holders");
    EXPECT_THROW(again.parse(std::string("--pid ") + bad, false), CLI::ValidationError) << bad;
  }
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

// Issue 28 part 3: value names that say what is expected, never CLI11's TEXT/UINT.
TEST(CommandTree, EveryOptionsValueNameSaysWhatIsExpected) {
  Tree t;
  std::size_t checked = 0;
  for (const auto& c : visible_commands(t.app)) {
    for (const auto* list : {&c.options, &c.positionals})
      for (const auto& o : *list) {
        if (o.value_name.empty()) continue;  // a flag
        ++checked;
        const std::string name = o.value_name.substr(0, o.value_name.find(':'));
        for (const char* generic : {"TEXT", "UINT", "INT", "FLOAT", "NUMBER", "BOOLEAN"})
          EXPECT_NE(name, generic) << "gpureap " << c.name << " " << o.names.front();
      }
    const std::string help = t.app.get_subcommand(c.name)->help();
    EXPECT_EQ(help.find(" TEXT"), std::string::npos) << help;
    EXPECT_EQ(help.find(" UINT"), std::string::npos) << help;
  }
  EXPECT_GT(checked, 40u);
}

// ux-wave5-review #12: the option column names the value; CLI11's "Excludes: --all" and
// "Needs: ..." are not in it (the descriptions and the refusal say what goes together).
TEST(CommandTree, NoOptionColumnSaysExcludesOrNeeds) {
  Tree t;
  std::size_t exclusive = 0;
  for (const auto& c : visible_commands(t.app)) {
    const CLI::App* sub = t.app.get_subcommand(c.name);
    for (const CLI::Option* o : sub->get_options())
      exclusive += o->get_excludes().size() + o->get_needs().size();
    const std::string help = help_of(t.app, c.name);
    EXPECT_EQ(help.find("Excludes:"), std::string::npos) << c.name << "\n" << help;
    EXPECT_EQ(help.find("Needs:"), std::string::npos) << c.name << "\n" << help;
  }
  EXPECT_GT(exclusive, 0u) << "no option excludes another: the check above checks nothing";
}

// Issue 28 part 3: every command's help fits 80 columns, broken at words.
TEST(CommandTree, EveryHelpIsWrappedAtWordsTo80Columns) {
  Tree t;
  for (const auto& c : visible_commands(t.app)) {
    const std::string help = help_of(t.app, c.name);
    ASSERT_FALSE(help.empty()) << c.name;
    std::size_t start = 0;
    for (std::size_t nl; (nl = help.find('\n', start)) != std::string::npos; start = nl + 1) {
      const std::string line = help.substr(start, nl - start);
      EXPECT_LE(line.size(), kHelpColumns) << c.name << ": " << line;
    }
    // Joined again, the words are the same: nothing was cut mid-word.
    auto words = [](const std::string& text) {
      std::vector<std::string> out;
      std::string w;
      for (char ch : text + " ")
        if (ch == ' ' || ch == '\n') {
          if (!w.empty()) out.push_back(w);
          w.clear();
        } else {
          w += ch;
        }
      return out;
    };
    const std::string raw = t.app.get_subcommand(c.name)->help("gpureap");
    auto a = words(raw), b = words(help);
    // CLI11 writes the usage line with the name it is given; compare from "Usage:" on.
    auto from_usage = [](std::vector<std::string> v) {
      v.erase(v.begin(), std::find(v.begin(), v.end(), "Usage:"));
      return v;
    };
    EXPECT_EQ(from_usage(a), from_usage(b)) << c.name;
  }
  EXPECT_TRUE(help_of(t.app, "no-such-command").empty());
}

// Issue 28 part 3: global options after `run`, before its command, are gpureap's.
TEST(GlobalOrder, RunsGlobalOptionsBeforeTheCommandMoveInFrontOfIt) {
  CLI::App app{"gpureap", "gpureap"};
  app.fallthrough();
  GlobalOptions global;
  app.add_flag("--json", global.json);
  app.add_option("--dev-dir", global.dev_dir);
  CommandFn run;
  add_status_command(app, global, run);
  add_run_command(app, global, run);
  using V = std::vector<std::string>;
  EXPECT_EQ(hoist_global_options({"run", "--json", "--", "true"}, app),
            (V{"--json", "run", "--", "true"}));
  EXPECT_EQ(hoist_global_options(
                {"run", "--gpu", "0", "--dev-dir", "/d", "-v", "--", "x", "--json"}, app),
            (V{"--dev-dir", "/d", "run", "--gpu", "0", "-v", "--", "x", "--json"}));
  EXPECT_EQ(hoist_global_options({"run", "--dev-dir=/d", "--", "x"}, app),
            (V{"--dev-dir=/d", "run", "--", "x"}));
  // After the command's first word, it is the command's (refused without --).
  EXPECT_EQ(hoist_global_options({"run", "python3", "--json"}, app),
            (V{"run", "python3", "--json"}));
  EXPECT_EQ(hoist_global_options({"status", "--json"}, app), (V{"status", "--json"}));
  EXPECT_EQ(hoist_global_options({"--json", "run", "--", "x"}, app),
            (V{"--json", "run", "--", "x"}));
  // And CLI11 reads the result as meant.
  V args = hoist_global_options({"run", "--json", "--", "true", "--json"}, app);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  EXPECT_TRUE(global.json);
  EXPECT_TRUE(static_cast<bool>(run));
}

// main builds only the command a line names (start-up): the word it takes is the one
// CLI11 reads as the command, past global options and their values.
TEST(CommandWord, IsTheFirstWordPastGlobalOptionsAndTheirValues) {
  CLI::App app{"gpureap", "gpureap"};
  GlobalOptions global;
  app.add_flag("--json", global.json);
  app.add_option("--dev-dir", global.dev_dir);
  app.add_option("--nvml-library", global.nvml_library);
  using V = std::vector<std::string>;
  EXPECT_EQ(command_word(V{}, app), "");
  EXPECT_EQ(command_word(V{"--json"}, app), "");
  EXPECT_EQ(command_word(V{"status", "--gpu", "0"}, app), "status");
  EXPECT_EQ(command_word(V{"--dev-dir", "free", "status"}, app), "status");  // free is a value
  EXPECT_EQ(command_word(V{"--dev-dir=/d", "free", "--orphans"}, app), "free");
  EXPECT_EQ(command_word(V{"--nvml-library", "x.so", "--json", "run", "--", "top"}, app), "run");
  EXPECT_EQ(command_word(V{"--", "status"}, app), "");
  EXPECT_EQ(command_word(V{"--bogus", "wait"}, app), "wait");
}

TEST(CommandTree, OneCommandAloneParsesAsInTheWholeTreeAndAnUnknownNameAddsNothing) {
  for (const std::string name : {"status", "top", "free", "wait", "run", "plan", "watch", "slurm",
                                 "log"}) {
    CLI::App one{"gpureap", "gpureap"};
    use_gpureap_help(one);  // as Tree
    GlobalOptions global;
    CommandFn run;
    EXPECT_TRUE(add_commands(one, global, run, name)) << name;
    ASSERT_EQ(one.get_subcommands({}).size(), 1u) << name;
    Tree whole;
    // The same options, so the same help text and the same parse.
    EXPECT_EQ(one.get_subcommand(name)->help(), whole.app.get_subcommand(name)->help()) << name;
  }
  CLI::App none{"gpureap", "gpureap"};
  GlobalOptions global;
  CommandFn run;
  EXPECT_FALSE(add_commands(none, global, run, "help"));
  EXPECT_TRUE(none.get_subcommands({}).empty());
}

void expect_golden(const std::string& name, const std::string& text) {
  expect_golden_file(std::string(GPUREAP_FIXTURES) + "/help/" + name, text);
}

// ux-wave5-review #12: every command's help opens with its Usage line, then says what the
// command does, then its options, examples and exit statuses (the man page's order),
// as `gpureap CMD --help` and `gpureap help CMD` print it; free's whole help at 80
// columns is a golden file.
TEST(CommandTree, EveryHelpOpensWithItsUsageThenDescriptionOptionsExamplesExitStatus) {
  Tree t;
  EXPECT_TRUE(help_of(t.app, "").starts_with("Usage: gpureap [OPTIONS] [COMMAND]\n"))
      << help_of(t.app, "");
  std::size_t with_examples = 0;
  for (const auto& c : visible_commands(t.app)) {
    const std::string help = help_of(t.app, c.name);
    EXPECT_TRUE(help.starts_with("Usage: gpureap " + c.name + " ")) << c.name << "\n" << help;
    Tree parsed;  // `gpureap CMD --help`, as main.cc prints it
    std::string from_flag;
    try {
      parsed.parse({c.name, "--help"});
    } catch (const CLI::CallForHelp&) {
      from_flag = wrap_help(parsed.app.help());
    }
    EXPECT_EQ(from_flag, help) << c.name;
    const auto at = [&](const std::string& what) { return help.find(what); };
    const std::size_t summary = at(summary_of(c.description).substr(0, 30));
    const std::size_t options = at("\nOptions:\n");
    const std::size_t exits = help.rfind("\nExit status:\n");
    ASSERT_NE(summary, std::string::npos) << c.name << "\n" << help;
    EXPECT_LT(help.find('\n'), summary) << c.name << ": the description after the Usage line";
    EXPECT_LT(summary, options) << c.name;
    EXPECT_LT(options, exits) << c.name;
    EXPECT_NE(exits, std::string::npos) << c.name;
    EXPECT_EQ(help.find("Exit status"), exits + 1) << c.name << ": the exit statuses said once";
    if (const std::size_t examples = at("\nExamples"); examples != std::string::npos) {
      ++with_examples;
      EXPECT_LT(options, examples) << c.name << ": the examples after the options";
      EXPECT_LT(examples, exits) << c.name << ": the exit statuses last";
    }
  }
  EXPECT_GE(with_examples, 5u) << "the order of examples was checked on too few commands";
  expect_golden("free-80.txt", help_of(t.app, "free"));
}

// W4_06 (ux-wave4 #6): each exit status is one entry, wrapped once at the help's width:
// its continuation lines sit under its meaning, none is a stray word ("targets'") or a
// hand break ("memory gone)") on a line of its own. Golden at 80 and 200 columns.
std::string exit_block(const std::string& help) {
  const auto at = help.rfind("\nExit status:\n");  // the footer's
  return at == std::string::npos ? "" : help.substr(at + 1);
}

TEST(ExitStatusHelp, W4_06_EveryBlockIsWrappedOnceAt80And200Columns) {
  Tree t;
  std::string all80, all200;
  for (const auto& c : visible_commands(t.app)) {
    const CLI::App* sub = t.app.get_subcommand(c.name);
    const std::string raw =
        exit_block(sub->get_formatter()->make_help(sub, "gpureap " + c.name, CLI::AppFormatMode::Normal));
    ASSERT_FALSE(raw.empty()) << c.name << " has no Exit status block";
    for (std::size_t width : {80u, 200u}) {
      const std::string block = wrap_help(raw, width);
      std::istringstream lines(block);
      std::string line, previous;
      std::getline(lines, line);  // "Exit status:"
      std::size_t meaning_at = 0;
      while (std::getline(lines, line)) {
        if (line.empty()) break;
        EXPECT_LE(line.size(), width) << c.name << ": " << line;
        ASSERT_TRUE(line.starts_with("  ")) << c.name << ": " << line;
        const auto text = line.find_first_not_of(' ');
        if (text == 2) {  // an entry: "  CODE  meaning", the meanings in one column
          const auto meaning = line.find_first_not_of(' ', line.find("  ", 2));
          if (meaning_at == 0) meaning_at = meaning;
          EXPECT_EQ(meaning, meaning_at) << c.name << ": " << line;
        } else {  // a continuation: under the meaning
          EXPECT_EQ(text, meaning_at) << c.name << ": " << line;
        }
        // Not ragged: a line is broken only where the next word would not fit.
        if (!previous.empty()) {
          const std::string word = line.substr(text, line.find(' ', text) - text);
          if (text != 2) {
            EXPECT_GT(previous.size() + 1 + word.size(), width)
                << c.name << ": broken early before '" << word << "':\n" << previous;
          }
        }
        previous = line;
      }
      (width == 80 ? all80 : all200) += "gpureap " + c.name + " --help\n" + block + "\n\n";
    }
  }
  expect_golden("exit-status-80.txt", all80);
  expect_golden("exit-status-200.txt", all200);
}

// W4_07 (ux-wave4 #7, defects-wave3 12(a)): a value CLI11 refuses is said as
// "gpureap CMD: --option: reason", then one hint line from the option's own help; never
// CLI11's "Run with  for more information.".
std::string usage_error_of(std::vector<std::string> args) {
  Tree t;
  try {
    t.parse(std::move(args));
  } catch (const CLI::ParseError& e) {
    return usage_error_text(e, t.app);
  }
  return "parsed";
}

TEST(UsageErrors, W4_07_OneLineNamingTheOptionAndValueThenAHint) {
  struct Case {
    std::vector<std::string> args;
    std::string first_line;
    std::string hint_start;
  };
  const std::vector<Case> cases = {
      {{"status", "--gpu", "3-1"},
       "gpureap status: --gpu: GPU selector '3-1': a range goes from the lower index to the "
       "higher (0-3)",
       "  --gpu GPU: GPUs to show: all, indices"},
      {{"wait", "--timeout", "5x"}, "gpureap wait: --timeout: ", "  --timeout DURATION: "},
      {{"free", "--gpu", "0", "--grace", "-1s"}, "gpureap free: --grace: ", "  --grace DURATION: "},
      {{"log", "--pid", "abc"}, "gpureap log: --pid: 'abc' is not a number from 1 to 4194304",
       "  --pid PID: Only signals to this process id"},
      {{"free", "--pid", "0"}, "gpureap free: --pid: '0' is not a number from 1 to 4194304",
       "  --pid PID: Only these holders"},
      {{"free", "--pid", "1,,2"}, "gpureap free: --pid: '1,,2' has an empty pid in its list",
       "  --pid PID: Only these holders"},
      {{"free", "--pid", "1,"}, "gpureap free: --pid: '1,' has an empty pid in its list",
       "  --pid PID: Only these holders"},
      {{"free", "--env", "A"}, "gpureap free: --env: 'A': expected NAME=VALUE",
       "  --env NAME=VALUE: Only holders whose environment"},
      {{"slurm", "prolgo"},
       "gpureap slurm: mode: 'prolgo' is not prolog, epilog or health (did you mean prolog?)",
       "  mode: prolog, epilog or health; "},
      {{"slurm"}, "gpureap slurm: mode is required", "  mode: prolog, epilog or health; "},
      {{"free", "--gpu"}, "gpureap free: --gpu: needs a value (GPU)", "  --gpu GPU: "},
      {{"wait", "--below", "100"}, "gpureap wait: --below: ", "  --below SIZE: "},
  };
  for (const auto& c : cases) {
    const std::string text = usage_error_of(c.args);
    const auto nl = text.find('\n');
    ASSERT_NE(nl, std::string::npos) << text;
    const std::string first = text.substr(0, nl), hint = text.substr(nl + 1);
    EXPECT_TRUE(first.starts_with(c.first_line)) << first;
    if (c.first_line.ends_with(": ")) {  // a reason follows the option
      EXPECT_GT(first.size(), c.first_line.size()) << first;
    }
    EXPECT_TRUE(hint.starts_with(c.hint_start)) << hint;
    EXPECT_TRUE(hint.ends_with("--help` has the rest\n")) << hint;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
    EXPECT_EQ(text.find("Run with"), std::string::npos) << text;
  }
}

// W4_07: two options that contradict each other are refused, both named (exit 2 in main).
TEST(UsageErrors, W4_07_ConflictingFlagsAreRefusedNamingBoth) {
  const std::string text = usage_error_of({"free", "--all", "--gpu", "1", "--dry-run"});
  EXPECT_TRUE(text.starts_with("gpureap free: --gpu and --all cannot be combined")) << text;
  EXPECT_EQ(usage_error_of({"free", "--gpu", "1", "--all", "--dry-run"}), text) << "either order";
  EXPECT_NE(text.find("  --all: All GPUs (same as --gpu all)"), std::string::npos) << text;
  EXPECT_EQ(usage_error_of({"free", "--all", "--orphans", "--dry-run"}), "parsed");
}

// W4-11(d): a signed pid and an empty text are refused naming the option (exit 2 in
// main), never read as pid 5 or as "not given".
TEST(UsageErrors, W4_11_SignedPidAndEmptyTextsAreRefusedNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"free", "--pid", "+5", "--dry-run"}, "gpureap free: --pid: '+5' is not a number from 1"},
      {{"free", "--pid", "1,+5", "--dry-run"}, "gpureap free: --pid: '+5' is not a number from 1"},
      {{"log", "--pid", "+5"}, "gpureap log: --pid: '+5' is not a number from 1"},
      {{"free", "--instance", "", "--dry-run"},
       "gpureap free: --instance: needs a value (INSTANCE), not ''"},
      {{"free", "--match", "", "--dry-run"},
       "gpureap free: --match: '' would match every command line"},
      {{"free", "--cgroup", "", "--dry-run"}, "gpureap free: --cgroup: needs a value (PATH)"},
      {{"run", "--replace", "", "--", "true"}, "gpureap run: --replace: needs a value (KEY)"},
      {{"run", "--name", "", "--", "true"}, "gpureap run: --name: needs a value (NAME)"},
  };
  for (const auto& [args, first_line] : cases) {
    const std::string text = usage_error_of(args);
    EXPECT_TRUE(text.starts_with(first_line)) << text;
  }
  EXPECT_EQ(usage_error_of({"free", "--pid", "5", "--instance", "k", "--dry-run"}), "parsed");
}

}  // namespace
}  // namespace gpureap::cli
