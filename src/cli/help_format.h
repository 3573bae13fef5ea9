#pragma once
// gpureap's --help: a top level that fits a screen (each command on one line, the
// first sentence of its description; the details under `gpureap help COMMAND`), and
// every help text wrapped at word boundaries to 80 columns, a continuation lined up
// with the column of descriptions. Also `gpureap help [COMMAND]` and `gpureap version`.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "cli/command.h"
#include "cli/exit_codes.h"

namespace gpureap::cli {

/// The width help is wrapped to: a screen's, whatever the terminal.
inline constexpr std::size_t kHelpColumns = 80;

/// Sets gpureap's help layout on `app`; call before adding subcommands (they inherit it).
void use_gpureap_help(CLI::App& app);

/// `help` (CLI11's text) wrapped at spaces to `columns`: a line's continuation starts
/// at its description column (after its first gap of two spaces or more) when there
/// is one, else two columns in. Pure.
std::string wrap_help(std::string_view help, std::size_t columns = kHelpColumns);

/// "Exit status:" and one line a status, "  CODE  meaning", the codes padded to one
/// column: a help footer that wrap_help() wraps once (each continuation under its
/// meaning) and the man page turns into tagged paragraphs. Pure.
std::string exit_status_help(std::span<const ExitStatusLine> statuses);

/// The help of `command` ("" for the top level, "free", "slurm"), wrapped; nullopt-like
/// empty string when `app` has no such command.
std::string help_of(const CLI::App& app, std::string_view command);

/// Hidden commands that teach: `gpureap help [COMMAND]` (an unknown COMMAND is exit 2
/// with the nearest name) and `gpureap version` (as --version). Register after the others.
void add_help_commands(CLI::App& app, const GlobalOptions& global, CommandFn& run,
                       std::string_view linkage);

}  // namespace gpureap::cli
