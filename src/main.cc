// gpureap: find and free GPU memory held by stray processes, and prove it is free.
// main reads as the steps of every invocation: parse the command line, run the
// chosen subcommand (status when none is named), map failures to exit codes.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cli/cli_outline.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "cli/global_order.h"
#include "cli/help_format.h"
#include "cli/suggest.h"
#include "cli/usage_error.h"
#include "report/terminal_text.h"
#include "util/units.h"

// What the binary carries of the C++ runtime, for --version: each executable links its
// own text (packaging/linkage.cc).
namespace gpureap {
extern const char kLinkage[];
}  // namespace gpureap

namespace {

// The first argument that is neither an option nor the value of a global option's.
std::string first_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--nvml-library" || a == "--dev-dir" || a == "--release-budget") {
      ++i;
      continue;
    }
    if (!a.starts_with("-")) return std::string(a);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpureap::cli;

  CLI::App app{"gpureap: who holds each GPU's memory, why it is still held, and how to free it.",
               "gpureap"};
  app.footer(exit_status_help(kExitStatuses));  // gpureap(1)'s EXIT STATUS; --help says it in brief
  use_gpureap_help(app);       // a screen: one line per command, wrapped at 80 columns
  // Global options may follow the command (`gpureap status --json`); subcommands
  // inherit this setting, so it is set before they are added.
  app.fallthrough();

  // 1. Options every command shares.
  GlobalOptions global;
  // One line each in --help (a screen): the details are in gpureap(1).
  app.get_help_ptr()->group("");  // `gpureap help` and the footer say how to get help
  app.add_flag("--json", global.json, "Machine-readable output (docs/json-schema.md)");
  app.add_option("--nvml-library", global.nvml_library,
                 "NVML library (default: $GPUREAP_NVML_LIBRARY)")
      ->type_name("PATH");
  app.add_option("--dev-dir", global.dev_dir, "nvidia device nodes (else $GPUREAP_DEV_DIR, /dev)")
      ->type_name("DIR");
  app.add_flag("--no-color", global.no_color, "No colour (also when NO_COLOR is set or not a TTY)");
  app.add_flag("--no-agent", global.no_agent, "Do not ask the agent (or GPUREAP_NO_AGENT=1)");
  // Hidden from the one-screen help (a calibration knob; docs/release.md); the commands
  // that judge a release list it (free, status, wait: add_release_budget below).
  add_release_budget(app, global.release_budget)->group("");
  bool version = false;
  app.add_flag("--version", version, "Print the version, build and NVML driver version");

  // 2. The commands; each fills `run` when chosen. A command line that names one of
  // them (or none: status, the default) needs that one only; the whole tree otherwise
  // (the top-level help, `--`, a mistyped command: its message lists them all).
  CommandFn run;
  const std::vector<std::string> words(argv + 1, argv + argc);
  const std::string word = command_word(words, app);
  const bool whole_tree =
      word.empty() && std::any_of(words.begin(), words.end(), [](const std::string& w) {
        return w == "--" || w == "-h" || w == "--help" || w == "--help-all";
      });
  if (whole_tree || !add_commands(app, global, run, word.empty() ? "status" : word)) {
    add_commands(app, global, run);
    // Hidden, for packaging: they describe the commands above (docs/packaging.md).
    add_completion_command(app, global, run);
    add_man_page_command(app, run);
    // Hidden ways in: `gpureap help [COMMAND]`, `gpureap version`.
    add_help_commands(app, global, run, gpureap::kLinkage);
  }
  for (CLI::App* sub : app.get_subcommands([](const CLI::App* s) {
         return s->get_name() == "free" || s->get_name() == "status" || s->get_name() == "wait";
       }))
    add_release_budget(*sub, global.release_budget);
  app.require_subcommand(0, 1);

  // 3. Parse; usage errors exit 2, said in gpureap's voice (cli/usage_error.h, cli/suggest.h).
  try {
    // `gpureap run --json -- CMD`: run's global options moved before it (cli/global_order.h).
    std::vector<std::string> args = hoist_global_options(words, app);
    std::reverse(args.begin(), args.end());  // CLI11 reads a vector from its end
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    print_out(wrap_help(app.help()));
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    print_out(wrap_help(app.help("", CLI::AppFormatMode::All)));
    return kExitOk;
  } catch (const CLI::ExtrasError&) {
    // A mistyped command, or words no option takes: said in gpureap's voice (cli/suggest.h).
    std::fputs(extras_error_text(app, first_word(argc, argv), words).c_str(), stderr);
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    // "gpureap CMD: --option: reason" and a hint (not CLI11's "Run with --help").
    print_err(usage_error_text(e, app));
    return kExitUsage;
  }

  // 4. Run; an exception stops the command and is reported once, here.
  try {
    if (version) {
      print_out(version_text(global, gpureap::kLinkage));
      return kExitOk;
    }
    if (!run) {
      // `gpureap` alone means `gpureap status` with its defaults.
      CLI::App* status = app.get_subcommand("status");
      status->parse(std::vector<std::string>{});
    }
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpureap: %s\n", gpureap::report::terminal_text(e.what()).c_str());
    return kExitSystem;
  }
}
