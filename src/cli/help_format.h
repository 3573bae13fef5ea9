#pragma once
// gpureap's --help: a top level that fits a screen (each command on one line, the
// first sentence of its description; the details under `gpureap help COMMAND`), and
// every help text wrapped by report/help_text (80 columns, a continuation lined up
// with the column of descriptions). Also `gpureap help [COMMAND]` and `gpureap version`.

#include <string>
#include <string_view>

#include "cli/command.h"
#include "cli/exit_codes.h"
#include "report/help_text.h"

namespace gpureap::cli {

using report::exit_status_help;
using report::kHelpColumns;
using report::wrap_help;

/// Sets gpureap's help layout on `app`; call before adding subcommands (they inherit it).
void use_gpureap_help(CLI::App& app);

/// The help of `command` ("" for the top level, "free", "slurm"), wrapped; nullopt-like
/// empty string when `app` has no such command.
std::string help_of(const CLI::App& app, std::string_view command);

/// Hidden commands that teach: `gpureap help [COMMAND]` (an unknown COMMAND is exit 2
/// with the nearest name) and `gpureap version` (as --version). Register after the others.
void add_help_commands(CLI::App& app, const GlobalOptions& global, CommandFn& run,
                       std::string_view linkage);

}  // namespace gpureap::cli
