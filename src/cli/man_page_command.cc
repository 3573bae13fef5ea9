// `gpureap man-page [--dir DIR] [COMMAND]` (hidden): the man pages, rendered by
// report/man_page from the CLI's own tables and help texts, so they cannot drift from
// --help. Steps: walk the app (cli_outline) -> render (report/man_page) -> print, or
// write each page into DIR.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "cli/cli_outline.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "report/man_page.h"

namespace gpureap::cli {
namespace {

struct ManOptions {
  std::string command;
  std::string dir;
};

int run_man_page(const CLI::App& app, const ManOptions& o) {
  const std::string version = version_string();
  const std::vector<report::ManPage> pages =
      report::man_pages(outline_of(app, "gpureap"), visible_commands(app),
                        {commit_date(), version.substr(0, version.find(' '))});
  if (o.dir.empty()) {
    std::string want = o.command.empty() ? "gpureap.1" : "gpureap-" + o.command + ".1";
    for (const auto& p : pages)
      if (p.file == want) return print_out(p.text), kExitOk;
    print_err(fmt::format("gpureap man-page: no command '{}'\n", o.command));
    return kExitUsage;
  }
  for (const auto& p : pages) {
    std::ofstream f(o.dir + "/" + p.file, std::ios::trunc);
    f << p.text;
    f.close();
    if (!f) {
      print_err(fmt::format("gpureap man-page: cannot write {}/{}: {}\n", o.dir, p.file,
                            std::strerror(errno)));
      return kExitSystem;
    }
  }
  return kExitOk;
}

}  // namespace

void add_man_page_command(CLI::App& app, CommandFn& run) {
  auto o = std::make_shared<ManOptions>();
  auto* sub = app.add_subcommand("man-page",
                                 "Print gpureap(1) or gpureap-COMMAND(1) as troff, or write every "
                                 "page into --dir (the build does).");
  sub->group("");  // hidden: for packaging
  sub->add_option("command", o->command, "The command whose page to print (default: gpureap(1))");
  sub->add_option("--dir", o->dir, "Write every page (gpureap.1, gpureap-COMMAND.1) into DIR")
      ->check(CLI::ExistingDirectory);
  sub->callback([&run, &app, o] { run = [&app, o] { return run_man_page(app, *o); }; });
}

}  // namespace gpureap::cli
