#include "cli/usage_error.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <regex>
#include <vector>

#include "report/terminal_text.h"
#include "util/closest.h"

namespace gpureap::cli {
namespace {

// The command the error belongs to: the deepest command parsed so far.
const CLI::App& command_of(const CLI::App& root) {
  const CLI::App* at = &root;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().back();
  return *at;
}

std::string command_name(const CLI::App& sub, const CLI::App& root) {
  return &sub == &root ? "gpureap" : "gpureap " + sub.get_name();
}

const CLI::Option* option_named(const CLI::App& sub, const CLI::App& root,
                                const std::string& name) {
  if (name.empty()) return nullptr;
  if (const CLI::Option* o = sub.get_option_no_throw(name)) return o;
  return root.get_option_no_throw(name);
}

// CLI11's phrases for a value, reworded: the value quoted, the choices listed with the
// nearest one, a missing value said as missing.
std::string reason_in_words(const std::string& reason) {
  static const std::regex range(R"(^Value (.*) not in range (\S+) to (\S+)$)");
  static const std::regex choice(R"(^(.*) not in \{(.*)\}$)");
  static const std::regex missing(R"(^\d+ required (\S+) missing$)");
  static const std::regex count(R"(^At Most (\d+) required but received (\d+)$)");
  static const std::regex convert(R"(^Could not convert: \S+ = (.*)$)");
  std::smatch m;
  if (std::regex_match(reason, m, range))
    return fmt::format("'{}' is not a number from {} to {}", m[1].str(), m[2].str(), m[3].str());
  if (std::regex_match(reason, m, choice)) {
    std::vector<std::string> choices;
    std::string list = m[2].str(), words;
    for (std::size_t start = 0; start <= list.size();) {
      const auto comma = std::min(list.find(',', start), list.size());
      choices.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
    for (std::size_t i = 0; i < choices.size(); ++i)
      words += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    const std::string near = closest(m[1].str(), choices);
    return fmt::format("'{}' is not {}{}", m[1].str(), words,
                       near.empty() ? "" : " (did you mean " + near + "?)");
  }
  if (std::regex_match(reason, m, missing))
    return fmt::format("needs a value ({})", m[1].str());
  if (std::regex_match(reason, m, count))
    return fmt::format("takes {} value, not {}", m[1].str(), m[2].str());
  if (std::regex_match(reason, m, convert)) return fmt::format("'{}' is not a value it takes", m[1].str());
  return reason;
}

// "  --gpu GPU: what it takes; `gpureap status --help` has the rest".
std::string hint_for(const CLI::Option* o, const std::string& command,
                     const std::string& where) {
  if (o == nullptr) return fmt::format("  `{} --help` lists the options\n", command);
  std::string name = o->get_name();  // CLI11 gives a hidden option no name here
  if (name.empty() && !o->get_lnames().empty()) name = "--" + o->get_lnames().front();
  std::string type = o->get_type_name();
  type = type.substr(0, type.find(':'));
  if (o->get_type_size() != 0 && !type.empty() && !o->get_positional()) name += " " + type;
  std::string what = o->get_description();
  while (!what.empty() && (what.back() == '.' || what.back() == ' ')) what.pop_back();
  if (where.empty()) return fmt::format("  {}: {}\n", name, what);
  return fmt::format("  {}: {}; {}\n", name, what, where);
}

// Where an option is taught: the command's --help for its own options, the top-level
// --help for a global one given to a command (free's does not list it); a global option
// hidden from that one-screen help (`--release-budget`) names its page in its description.
std::string help_of(const CLI::Option* o, const CLI::App& sub, const CLI::App& root,
                    const std::string& command) {
  if (o != nullptr && o->get_group().empty()) return "";
  if (o == nullptr || sub.get_option_no_throw(o->get_name()) == o)
    return "`" + command + " --help` has the rest";
  return "`" + command_name(root, root) + " --help` has the rest";
}

}  // namespace

std::string usage_error_text(const CLI::ParseError& error, const CLI::App& root) {
  const CLI::App& sub = command_of(root);
  const std::string command = command_name(sub, root);
  const std::string message = error.what();
  std::smatch m;

  // Two options that exclude each other: both named. CLI11 names first the one defined
  // first (free's --gpu before --all); the hint is on the other, the shorthand that
  // says how the two overlap ("--all: All GPUs (same as --gpu all)").
  static const std::regex excludes(R"(^(\S+) excludes (\S+)$)");
  if (std::regex_match(message, m, excludes))
    return fmt::format("{}: {} and {} cannot be combined; give one of them\n", command,
                       m[1].str(), m[2].str()) +
           hint_for(option_named(sub, root, m[2].str()), command,
                    help_of(option_named(sub, root, m[2].str()), sub, root, command));

  static const std::regex required(R"(^(\S+) is required$)");
  if (std::regex_match(message, m, required))
    return fmt::format("{}: {} is required\n", command, m[1].str()) +
           hint_for(option_named(sub, root, m[1].str()), command,
                    help_of(option_named(sub, root, m[1].str()), sub, root, command));

  // "--name: reason" (a validator's, a conversion's, a count's).
  const auto colon = message.find(": ");
  const std::string name = colon == std::string::npos ? "" : message.substr(0, colon);
  const CLI::Option* option = option_named(sub, root, name);
  if (option == nullptr)
    return fmt::format("{}: {}\n", command, report::terminal_text(message)) +
           hint_for(nullptr, command, "");
  return fmt::format("{}: {}: {}\n", command, name,
                     report::terminal_text(reason_in_words(message.substr(colon + 2)))) +
         hint_for(option, command, help_of(option, sub, root, command));
}

}  // namespace gpureap::cli
