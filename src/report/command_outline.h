#pragma once
// The command line as data: the visible commands and options, with their help texts,
// as plain values. cli/cli_outline reads them from CLI11's own tables; the man pages
// (report/man_page) and the shell completions (report/completion) are rendered from
// them, so a new command or option appears in both by itself, and neither can drift
// from --help. No CLI11 here.

#include <string>
#include <string_view>
#include <vector>

namespace gpureap::report {

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

/// The first sentence (or first line) of a description: the one-line summary.
std::string summary_of(const std::string& description);

/// A heading line of a description: "Examples:", "Exit status:", or "Presets (a
/// remark):". Returns the heading ("Examples") and leaves the remark in `remark`;
/// empty when `line` is no heading. The man page's sections and --help's order read it.
std::string heading_of(std::string_view line, std::string& remark);

/// A description cut before its first heading line: the prose that says what the
/// command does, and the headed sections after it ("Examples:" on), each as written.
struct DescriptionParts {
  std::string prose;
  std::string sections;
};
DescriptionParts split_description(std::string_view description);

}  // namespace gpureap::report
