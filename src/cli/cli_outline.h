#pragma once
// The command line as data: the visible commands and options of a CLI::App, read
// from CLI11's own tables. The man pages and the shell completions are generated
// from this outline, so a new command or option appears in both by itself, and
// neither can drift from --help.

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace gpureap::cli {

/// What an option's value is, for completion: GPUs from NVML, users from the
/// system, a duration (with a unit hint), a path, or anything.
enum class ValueKind { none, gpu, user, duration, file, directory, choice, text };

struct OptionOutline {
  std::vector<std::string> names;  // "-y", "--yes" (short names first)
  std::string value_name;          // "TEXT", "UINT"...; empty for a flag
  std::string description;
  std::string default_value;  // empty when none
  ValueKind kind = ValueKind::none;
  std::vector<std::string> choices;  // kind == choice: CLI11's IsMember set
};

struct CommandOutline {
  std::string name;  // "free"; "gpureap" for the top level
  std::string description;
  std::string footer;
  std::vector<OptionOutline> options;   // --help excluded
  /// run's CMD... (a text: "[--] command..."), slurm's mode (a choice: {prolog|epilog|health}).
  std::vector<OptionOutline> positionals;
};

/// The top level's own outline (global options) and one per visible subcommand, in
/// registration order. Hidden commands (empty group: completion, man-page) are left out.
CommandOutline outline_of(const CLI::App& app, const std::string& name);
std::vector<CommandOutline> visible_commands(const CLI::App& app);

/// The first sentence (or first line) of a description: the one-line summary.
std::string summary_of(const std::string& description);

}  // namespace gpureap::cli
