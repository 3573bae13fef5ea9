#pragma once
// How subcommands plug into main: each one registers its options on a CLI11
// subcommand and fills in the function that runs it. Library code never prints;
// the functions behind these registrations own all output.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gpu/gpu_select.h"
#include "supervise/replace.h"

// CLI11 is the heaviest header we use (~3 s of compile time per unit): only the
// files that register options (the commands, main) include <CLI/CLI.hpp>.
namespace CLI {
class App;
}  // namespace CLI

namespace gpureap::report {
struct ReplaceRecord;  // report/replace_report.h
}

namespace gpureap::cli {

/// Options every subcommand understands (set on the top-level app).
struct GlobalOptions {
  bool json = false;  // --json: machine-readable output on stdout
  std::string
      nvml_library;  // --nvml-library PATH (else $GPUREAP_NVML_LIBRARY, else libnvidia-ml.so.1)
  std::string
      dev_dir;  // --dev-dir DIR (else $GPUREAP_DEV_DIR, else $GPUREAP_SIM_DIR/dev, else /dev)
  bool no_color = false;  // --no-color (NO_COLOR in the environment does the same)
  bool no_agent = false;  // --no-agent (or $GPUREAP_NO_AGENT=1): never ask `gpureap watch`
  /// --release-budget DURATION: how long memory of a gone holder may stay flat before it
  /// is driver-held (inventory/release_model.h); nullopt: the model's rule.
  std::optional<std::chrono::milliseconds> release_budget;
};

/// The function main calls once parsing succeeded; returns the exit status.
using CommandFn = std::function<int()>;

/// Every user-facing command below, in --help's order (main.cc, and cli_test.cc parses
/// the same tree). With `only` naming one of them, that command alone: building every
/// command's options was a third of gpureap's start-up (docs/benchmarks.md), and a
/// command line that names its command parses the same without the others. Returns
/// whether `only` (when given) was one of them.
bool add_commands(CLI::App& app, const GlobalOptions& global, CommandFn& run,
                  std::string_view only = {});
void add_status_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_free_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_wait_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_run_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_plan_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
/// `gpureap slurm prolog|epilog|health` (cli/slurm_command.cc, docs/slurm.md).
void add_slurm_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_watch_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
/// `gpureap log`: the audit trail of every signal sent (cli/log_command.cc, docs/audit.md).
void add_log_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
/// `gpureap top`: the live view (cli/top_command.cc, top/).
void add_top_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);

/// Hidden commands that serve packaging (docs/packaging.md), generated from `app`'s own
/// tables: `gpureap completion bash|zsh` prints a completion script, `gpureap completion
/// gpus` the GPU selectors present (for the scripts); `gpureap man-page [--dir DIR]
/// [COMMAND]` prints gpureap(1) or gpureap-COMMAND(1), or writes every page into DIR.
/// Register them last: they describe the commands registered before them.
void add_completion_command(CLI::App& app, const GlobalOptions& global, CommandFn& run);
void add_man_page_command(CLI::App& app, CommandFn& run);

/// "0.1.0 (commit 7728aca1b2c3)": the version and the commit it was built from.
std::string version_string();
/// The commit's date (YYYY-MM-DD), empty outside git: the man pages' date.
std::string commit_date();
/// `gpureap --version`: version and commit, build type and `linkage`, and the NVML
/// driver version (or why it is unknown). Ends with a newline.
std::string version_text(const GlobalOptions& global, std::string_view linkage);

/// What `run --free-first` asks of `free`: these GPUs, confirmed, with run's --grace
/// and --timeout (as given on the command line).
/// What `gpureap run` frees before it launches CMD (cli/run_replace.cc).
struct FreeBeforeRun {
  using Mode = supervise::ReplaceMode;  // free_first, replace, replace_orphans
  Mode mode = Mode::free_first;
  std::string instance;  // --replace KEY
  gpu::GpuSelector gpu;  // --gpu (empty: every GPU)
  std::chrono::milliseconds grace{};
  std::chrono::milliseconds timeout{};
  bool yes = false;     // --yes: the plan is confirmed
  std::string command;  // CMD's argv[0], for messages
};
/// Frees what `request` names through the one free flow, each instance whole: asks on
/// the terminal unless --yes; with no terminal and no --yes acts only on what
/// proc::unattended_may_act allows (--replace-orphans leaves the rest alone and says
/// so; --replace and --free-first refuse, exit 75, before any signal). Verifies the
/// release and that the old instance's ports are closed, and says the "freed",
/// "verified" and "left alone" lines on stderr, or with `record` (--json) keeps them
/// there instead. Returns kExitOk when CMD may be launched, else the exit status
/// (free's: 1 still held, 2 not confirmed or a bad selection, 3 not measured, 4 no such
/// instance; 75 refused for now).
int free_before_run(const GlobalOptions& global, const FreeBeforeRun& request,
                    report::ReplaceRecord* record = nullptr);

}  // namespace gpureap::cli
