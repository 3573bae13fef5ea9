// Placeholder until the `run` command lands.
#include <cstdio>

#include "cli/command.h"
#include "cli/exit_codes.h"

namespace gpureap::cli {

void add_run_command(CLI::App& app, const GlobalOptions&, CommandFn& run) {
  auto* sub = app.add_subcommand("run", "(not yet available)");
  sub->callback([&run] {
    run = [] {
      std::fprintf(stderr, "gpureap: run is not available yet\n");
      return kExitSystem;
    };
  });
}

}  // namespace gpureap::cli
