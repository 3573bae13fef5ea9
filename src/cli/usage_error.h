#pragma once
// A usage error in gpureap's voice: what CLI11 refused while parsing (a value an option
// cannot take, a missing value or argument, two options that exclude each other), said
// as "gpureap CMD: --option: reason" and one hint line (what the option takes, from its
// own help), never CLI11's "Run with --help for more information". Unknown options and
// stray words are suggest.h's (unexpected_text).

#include <string>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace gpureap::cli {

/// The two lines (each ending in "\n") main prints for `error`, thrown while `root` parsed:
/// "gpureap CMD: --option: reason" (CLI11's own phrases reworded: a range, a choice with
/// the nearest one, a missing value, two options that exclude each other), then a hint
/// "  --option TYPE: its description; `gpureap CMD --help` has the rest". Pure over the
/// tree's state after the failed parse.
std::string usage_error_text(const CLI::ParseError& error, const CLI::App& root);

}  // namespace gpureap::cli
