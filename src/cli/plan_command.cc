// Placeholder until the `plan` command lands.
#include <cstdio>

#include "cli/command.h"
#include "cli/exit_codes.h"

namespace gpureap::cli {

void add_plan_command(CLI::App& app, const GlobalOptions&, CommandFn& run) {
  auto* sub = app.add_subcommand("plan", "(not yet available)");
  sub->callback([&run] {
    run = [] {
      std::fprintf(stderr, "gpureap: plan is not available yet\n");
      return kExitSystem;
    };
  });
}

}  // namespace gpureap::cli
