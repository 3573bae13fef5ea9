#include "cli/help_format.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "cli/cli_outline.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "report/command_outline.h"
#include "report/help_text.h"
#include "report/terminal_text.h"
#include "util/closest.h"

namespace gpureap::cli {
namespace {

// CLI11's layout, less long: a command is one line in a list of commands (its
// details are its own --help), and the top level's footer is the exit statuses in
// brief and where the details are, not the whole table (gpureap(1) keeps it: the
// man page reads the footer itself).
class GpureapFormatter : public CLI::Formatter {
 public:
  GpureapFormatter() { label("SUBCOMMAND", "COMMAND"); }

  std::string make_subcommands(const CLI::App* app, CLI::AppFormatMode mode) const override {
    std::string out = CLI::Formatter::make_subcommands(app, mode);
    if (out.starts_with("\nSubcommands:")) out.replace(1, 11, "Commands");
    return out;
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return fmt::format("  {:<8}  {}\n", sub->get_name(), summary_of(sub->get_description()));
  }

  // The option column names the value, not CLI11's "Excludes: --all" / "Needs: ...": the
  // descriptions say what goes together, and a combination refused says so by name
  // (ux-wave5-review #12: `--gpu GPU Excludes: --all`).
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out = CLI::Formatter::make_option_opts(opt);
    for (const char* label : {" Needs:", " Excludes:"})
      if (auto at = out.find(label); at != std::string::npos) out.erase(at);
    return out;
  }

  // The man page's order (SYNOPSIS first) and every demanding user's: the Usage line,
  // then what the command does, its positionals and options, its headed sections
  // (Examples), and the exit statuses. CLI11 puts the description, with its examples,
  // before the Usage line (ux-wave5-review #12).
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    const report::DescriptionParts parts = report::split_description(app->get_description());
    std::string out = make_usage(app, std::move(name));
    // The top level's one line goes under its Usage line, so that the whole fits a
    // 24-line screen; a command's description is a paragraph of its own.
    const bool top = app->get_parent() == nullptr;
    if (!parts.prose.empty())
      out += (top ? "" : "\n") + report::refill_prose(parts.prose) + "\n";
    out += make_positionals(app);
    out += make_groups(app, mode);
    out += make_subcommands(app, mode);
    if (!parts.sections.empty()) {
      std::string sections = report::refill_prose(parts.sections);
      while (sections.ends_with('\n')) sections.pop_back();
      out += "\n" + sections + "\n";
    }
    return out + "\n" + make_footer(app);
  }

  std::string make_footer(const CLI::App* app) const override {
    if (app->get_parent() != nullptr) return CLI::Formatter::make_footer(app);
    return "Details: gpureap help COMMAND; man gpureap. Exit status: 0 ok, 1 held, 2 usage,\n"
           "  3 system, 4 nothing to do, 5 wait timed out, 6 ghost GPU; run: its command's.\n";
  }
};

}  // namespace

void use_gpureap_help(CLI::App& app) {
  app.formatter(std::make_shared<GpureapFormatter>());
}

std::string help_of(const CLI::App& app, std::string_view command) {
  // Through the formatter: App::help() would explain the command selected, `help`.
  const auto mode = CLI::AppFormatMode::Normal;
  if (command.empty()) return wrap_help(app.get_formatter()->make_help(&app, app.get_name(), mode));
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() == command && !sub->get_group().empty())
      return wrap_help(
          sub->get_formatter()->make_help(sub, app.get_name() + " " + sub->get_name(), mode));
  return "";
}

void add_help_commands(CLI::App& app, const GlobalOptions& global, CommandFn& run,
                       std::string_view linkage) {
  auto command = std::make_shared<std::string>();
  auto* help = app.add_subcommand("help", "Show the help of gpureap, or of one command");
  help->group("");  // hidden: a way in, not a command of its own (no man page)
  help->add_option("COMMAND", *command, "The command to explain")->type_name("COMMAND");
  help->callback([&app, &run, command] {
    run = [&app, command] {
      std::string text = help_of(app, *command);
      if (text.empty()) {
        std::vector<std::string> names;
        for (const auto& c : visible_commands(app)) names.push_back(c.name);
        const std::string near = closest(*command, names);
        print_err(fmt::format("gpureap help: unknown command '{}'{}; `gpureap help` lists them\n",
                              report::terminal_text(*command),
                              near.empty() ? "" : " (did you mean " + near + "?)"));
        return kExitUsage;
      }
      print_out(text);
      return kExitOk;
    };
  });
  auto* version = app.add_subcommand("version", "Print the version (as --version)");
  version->group("");
  version->callback([&run, &global, linkage] {
    run = [&global, linkage] {
      print_out(version_text(global, linkage));
      return kExitOk;
    };
  });
}

}  // namespace gpureap::cli
