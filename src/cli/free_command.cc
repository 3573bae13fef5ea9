// Placeholder until the `free` command lands.
#include <cstdio>

#include "cli/command.h"
#include "cli/exit_codes.h"

namespace gpureap::cli {

void add_free_command(CLI::App& app, const GlobalOptions&, CommandFn& run) {
  auto* sub = app.add_subcommand("free", "(not yet available)");
  sub->callback([&run] {
    run = [] {
      std::fprintf(stderr, "gpureap: free is not available yet\n");
      return kExitSystem;
    };
  });
}

}  // namespace gpureap::cli
