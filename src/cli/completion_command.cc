// `gpureap completion bash|zsh|gpus` (hidden): shell completion rendered by
// report/completion from the CLI's own tables. The scripts ask `gpureap completion gpus`
// for GPU selectors at completion time: the GPUs NVML shows (the simulated ones on a
// simulated node).
// Steps: walk the app (cli_outline) -> render (report/completion) -> print.

#include <CLI/CLI.hpp>
#include <chrono>

#include "cli/cli_outline.h"
#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "report/completion.h"

namespace gpureap::cli {
namespace {

int print_gpus(const GlobalOptions& global) {
  gpu::GpuSnapshot snap = open_gpu_source(global)->snapshot(std::chrono::milliseconds(1500));
  print_out(report::gpu_selector_words(snap));
  return gpu::lists_gpus(snap.state) ? kExitOk : kExitSystem;
}

}  // namespace

void add_completion_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto what = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "completion",
      "Print a shell completion script (bash or zsh), or the GPU selectors present (gpus).\n\n"
      "Examples:\n"
      "  source <(gpureap completion bash)\n"
      "  gpureap completion zsh > ~/.zfunc/_gpureap");
  sub->group("");  // hidden: for packaging and the scripts themselves
  sub->add_option("what", *what, "bash, zsh or gpus")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "gpus"}));
  sub->callback([&run, &app, &global, what] {
    run = [&app, &global, what] {
      if (*what == "gpus") return print_gpus(global);
      CommandOutline top = outline_of(app, "gpureap");
      std::vector<CommandOutline> commands = visible_commands(app);
      print_out(*what == "bash" ? report::bash_completion(top, commands)
                                : report::zsh_completion(top, commands));
      return kExitOk;
    };
  });
}

}  // namespace gpureap::cli
