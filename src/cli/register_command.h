#pragma once
// The subcommand registration every command repeats, once: its options in one value the
// parse fills in, shared with the function that runs it. Includes CLI11 (only the files
// that register options do).

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/command.h"

namespace gpureap::cli {

/// A registered subcommand: where its options are added, and the value they fill in.
template <typename Options>
struct Registered {
  CLI::App& sub;
  Options& options;
};

/// Adds subcommand `name` to `app`, its options in one `Options` (value-initialised,
/// living as long as the command may run); once the command line selects it, `run`
/// becomes `command(global, options)`.
template <typename Options, typename Command>
Registered<Options> register_command(CLI::App& app, const std::string& name,
                                     const std::string& description, const GlobalOptions& global,
                                     CommandFn& run, Command command) {
  auto options = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(name, description);
  sub->callback([&run, &global, options, command] {
    run = [&global, options, command] { return command(global, *options); };
  });
  return {*sub, *options};
}

}  // namespace gpureap::cli
