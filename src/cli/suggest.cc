#include "cli/suggest.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "cli/cli_outline.h"
#include "report/terminal_text.h"
#include "util/closest.h"

namespace gpureap::cli {
std::vector<std::string> option_names(const CLI::App& sub, const CLI::App& root) {
  std::vector<std::string> out;
  for (const CLI::App* app : {&sub, &root})
    for (const CLI::Option* opt : app->get_options()) {
      for (const auto& l : opt->get_lnames()) out.push_back("--" + l);
      for (const auto& s : opt->get_snames()) out.push_back("-" + s);
    }
  return out;
}

std::string unexpected_text(const std::vector<std::string>& extras, const CLI::App& sub,
                            const CLI::App& root) {
  const auto names = option_names(sub, root);
  std::vector<std::string> options, others;
  for (const auto& e : extras) (e.starts_with("-") ? options : others).push_back(e);
  std::string out;
  for (const auto& o : options) {
    // --name=value: the name is what was mistyped.
    const std::string name = o.substr(0, o.find('='));
    const std::string near = closest(name, names);
    out += (out.empty() ? "" : "; ") +
           (near.empty() ? fmt::format("unknown option '{}'", name)
                         : fmt::format("unknown option '{}' (did you mean {}?)", name, near));
  }
  // A value after an unknown option is that option's, not a stray argument.
  if (options.empty())
    for (const auto& w : others)
      out += (out.empty() ? "" : "; ") + fmt::format("unexpected argument '{}'", w);
  return out;
}

std::string extras_error_text(const CLI::App& app, std::string_view first_word,
                              const std::vector<std::string>& typed) {
  // A word where a command belongs is a mistyped command, not a stray argument.
  if (app.get_subcommands().empty() && !first_word.empty()) {
    std::vector<std::string> names;
    for (const auto& c : visible_commands(app))
      if (c.name != "gpureap") names.push_back(c.name);
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i)
      list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    const std::string near = closest(first_word, names);
    return fmt::format("gpureap: unknown command '{}'{}; the commands are {} (gpureap --help)\n",
                       report::terminal_text(first_word),
                       near.empty() ? "" : " (did you mean " + near + "?)", list);
  }
  // In gpureap's voice, in the order typed, with the nearest option (not CLI11's
  // reversed "The following arguments were not expected").
  const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().back();
  std::vector<std::string> extras = app.remaining(true);
  auto position = [&](const std::string& w) {
    auto at = std::find(typed.begin(), typed.end(), w);
    return at - typed.begin();
  };
  std::stable_sort(extras.begin(), extras.end(), [&](const std::string& a, const std::string& b) {
    return position(a) < position(b);
  });
  const std::string name = sub == &app ? "gpureap" : "gpureap " + sub->get_name();
  return fmt::format("{}: {}; `{} --help` lists the options\n", name,
                     report::terminal_text(unexpected_text(extras, *sub, app)), name);
}

}  // namespace gpureap::cli
