#pragma once
// Shell completion scripts, rendered from the command line as data
// (report/command_outline.h); CLI11 2.1 has none (CLIUtils/CLI11#343). The scripts are
// static except for GPU selectors, which they ask `gpureap completion gpus` for at
// completion time (gpu_selector_words). Pure.

#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "report/command_outline.h"

namespace gpureap::report {

/// The bash script: `top`'s options are the global ones, `commands` the visible commands.
std::string bash_completion(const CommandOutline& top, const std::vector<CommandOutline>& commands);

/// The zsh script (#compdef gpureap), from the same outline.
std::string zsh_completion(const CommandOutline& top, const std::vector<CommandOutline>& commands);

/// What `gpureap completion gpus` prints: "all", then each GPU's id, then each UUID, a line each.
std::string gpu_selector_words(const gpu::GpuSnapshot& snap);

}  // namespace gpureap::report
