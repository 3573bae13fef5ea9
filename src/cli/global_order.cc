#include "cli/global_order.h"

#include <CLI/CLI.hpp>

namespace gpureap::cli {
namespace {

// "--dev-dir=X" -> "--dev-dir"; "-v" -> "-v".
std::string option_name(const std::string& word) {
  return word.substr(0, word.find('='));
}

// The option of `app` itself (not of its subcommands) named `word`, or null.
const CLI::Option* own_option(const CLI::App& app, const std::string& word) {
  if (!word.starts_with("-") || word == "-" || word == "--") return nullptr;
  try {
    return app.get_option(option_name(word));
  } catch (const CLI::OptionNotFound&) {
    return nullptr;
  }
}

// Whether `word` needs the next one as its value ("--gpu 0", not "--gpu=0" or a flag).
bool takes_next(const CLI::Option& opt, const std::string& word) {
  return opt.get_expected_max() > 0 && word.find('=') == std::string::npos;
}

}  // namespace

std::vector<std::string> hoist_global_options(const std::vector<std::string>& args,
                                              const CLI::App& app) {
  // Find the command: the first word that is not an option or an option's value.
  std::size_t i = 0;
  const CLI::App* sub = nullptr;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") return args;
    if (const CLI::Option* opt = own_option(app, args[i])) {
      if (takes_next(*opt, args[i])) ++i;
      continue;
    }
    if (args[i].starts_with("-")) continue;
    try {
      sub = app.get_subcommand(args[i]);
    } catch (const CLI::OptionNotFound&) {
      return args;
    }
    break;
  }
  if (!sub || sub->get_fallthrough()) return args;
  std::vector<std::string> moved, kept;
  for (std::size_t j = i + 1; j < args.size(); ++j) {
    const std::string& word = args[j];
    if (word == "--" || !word.starts_with("-")) {  // the command begins
      kept.insert(kept.end(), args.begin() + static_cast<std::ptrdiff_t>(j), args.end());
      break;
    }
    const bool has_value = j + 1 < args.size();
    if (const CLI::Option* own = own_option(*sub, word)) {
      kept.push_back(word);
      if (takes_next(*own, word) && has_value) kept.push_back(args[++j]);
    } else if (const CLI::Option* global = own_option(app, word)) {
      moved.push_back(word);
      if (takes_next(*global, word) && has_value) moved.push_back(args[++j]);
    } else {
      kept.push_back(word);  // unknown: CLI11 says so
    }
  }
  std::vector<std::string> out(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(i));
  out.insert(out.end(), moved.begin(), moved.end());
  out.push_back(args[i]);
  out.insert(out.end(), kept.begin(), kept.end());
  return out;
}

std::string command_word(const std::vector<std::string>& args, const CLI::App& app) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") return "";
    if (const CLI::Option* opt = own_option(app, args[i])) {
      if (takes_next(*opt, args[i])) ++i;
      continue;
    }
    if (!args[i].starts_with("-")) return args[i];
  }
  return "";
}

}  // namespace gpureap::cli
