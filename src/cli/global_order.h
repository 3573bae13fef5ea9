#pragma once
// Global options after the command (gpureap(1): "may also follow the command"). Most
// commands let CLI11 pass them up to the top level (fallthrough); `run` cannot, since
// what follows its options is another program's command line. For it, the global
// options typed between `run` and the command (`gpureap run --json -- CMD`) are moved
// before `run`; one after the command's first word stays the command's.

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace gpureap::cli {

/// `args` (argv without argv[0], in order) with the top level's options that follow a
/// command without fallthrough, and come before that command's first positional word or
/// `--`, moved in front of the command (with their values). Everything else, order
/// included, is unchanged. Pure over `app`'s option tables.
std::vector<std::string> hoist_global_options(const std::vector<std::string>& args,
                                              const CLI::App& app);

/// The command `args` (argv without the program name) runs, read before any command is
/// added to `app` (which holds the global options only): the first word that is neither
/// an option nor a global option's value, or "" when there is none (`gpureap` alone, or
/// only global options: status, the default command). `--` before any word ends the
/// search with "" too. Lets main build only that command's options (start-up; see
/// add_commands), so it never decides what a word means: CLI11 still does.
std::string command_word(const std::vector<std::string>& args, const CLI::App& app);

}  // namespace gpureap::cli
