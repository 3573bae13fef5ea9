#pragma once
// "Did you mean" (util/closest): the closest name to a mistyped command or option, and the message in
// gpureap's voice for what CLI11 refused (it reports extras raw and in reverse order).

#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace gpureap::cli {

/// Every option name `sub` (and the global options of `root`) accepts: "--timeout", "-y".
std::vector<std::string> option_names(const CLI::App& sub, const CLI::App& root);

/// What to say of the words CLI11 could not place on `sub`'s command line, e.g.
/// "unknown option '--timout' (did you mean --timeout?)". Options first, in the order typed.
std::string unexpected_text(const std::vector<std::string>& extras, const CLI::App& sub,
                            const CLI::App& root);

/// The whole message (a line) for the words CLI11 could not place after parsing `app`
/// with `typed` (the command line after the program's name): a word where a command
/// belongs (`first_word`, when no command was recognised) is a mistyped command, with the
/// nearest one and the list; otherwise unexpected_text's, in the order typed.
std::string extras_error_text(const CLI::App& app, std::string_view first_word,
                              const std::vector<std::string>& typed);

}  // namespace gpureap::cli
