// `gpureap run [options] -- CMD [ARGS...]`: launch a server so that nothing it
// spawns can outlive it, and return only when the GPUs it held are free again.
// Steps: parse -> (wait for / free the GPUs first) -> contain + launch ->
// supervise -> teardown -> verify -> report -> CMD's exit status (tini's contract).
// stdout belongs to CMD: everything gpureap says goes to stderr.

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/environment.h"
#include "cli/exit_codes.h"
#include "cli/help_format.h"
#include "cli/flags.h"
#include "report/json.h"
#include "report/replace_report.h"
#include "report/run_report.h"
#include "report/wait_report.h"
#include "supervise/free_wait.h"
#include "supervise/run_session.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

struct RunOptions {
  std::vector<std::string> command;
  gpu::GpuSelector gpu;  // --gpu (empty: not given)
  bool wait_free = false;
  bool free_first = false;
  std::string replace;           // --replace KEY
  bool replace_orphans = false;  // --replace-orphans
  bool yes = false;              // --yes: the plan of the three above is confirmed
  std::chrono::milliseconds grace = supervise::kDefaultTeardownGrace;
  std::chrono::milliseconds timeout = supervise::kDefaultWaitTimeout;
  std::string name;
  bool no_cgroup = false;
  bool verbose = false;
};

void say(const std::string& line) {
  print_err(report::run_line(line, stderr_columns()));
}

int run_usage_error(const std::string& message) {
  say(message);
  return kExitUsage;
}

// --wait-free: block until those GPUs are free (as `gpureap wait`).
int wait_gpus_free(const GlobalOptions& global, const RunOptions& o) {
  inventory::Node node = open_node(global);
  supervise::FreeWaitOptions options;
  options.gpus = o.gpu;
  options.timeout = o.timeout;
  auto r = supervise::wait_until_free(node, options);
  for (const auto& w : r.warnings) say("warning: " + w);
  using Status = supervise::FreeWaitResult::Status;
  switch (r.status) {
    case Status::free:
      // The GPUs as read ("GPU 0,1,2,3 free after 12 ms"), not the selector ("all").
      if (o.verbose) say(report::wait_free_text(r));
      return kExitOk;
    case Status::timed_out: {
      say(fmt::format(
          "--wait-free: GPUs not free after {}: {}; not starting {}. See `gpureap status --gpu {}`",
          duration_flag(o.timeout), report::gpus_not_free_text(r), o.command[0], o.gpu.text()));
      return kExitTimeout;
    }
    case Status::bad_selection:
      return run_usage_error("--gpu: " + r.message);
    case Status::ghost:
      say(fmt::format("--wait-free: [ghost_gpu] {}; not starting {}", report::gpus_not_free_text(r),
                      o.command[0]));
      return kExitGhost;
    case Status::source_failed:
      break;
  }
  print_err("gpureap run: --wait-free: " + report::wait_failure_text(r) + "\n");
  return kExitSystem;
}

// tini's contract, plus two rules: a command that succeeded but whose memory
// stayed held makes the run fail with 1 ("still held", as `free`), and one
// whose release could not be measured (NVML failed or hung) with 3 ("NVML
// unusable where required"), so a restart script does not relaunch into an
// occupied GPU.
int run_exit_code(const supervise::RunOutcome& out) {
  if (out.launch_failure) {
    return out.launch_failure->stage == supervise::LaunchFailure::Stage::exec
               ? supervise::exit_code_for_exec_error(out.launch_failure->err)
               : 126;
  }
  if (!out.cmd_wait_status) return kExitSystem;
  int code = supervise::exit_code_of(*out.cmd_wait_status);
  if (code == 0 && out.memory_unverified()) return kExitSystem;
  if (code == 0 && !out.memory_released()) return kExitStillHeld;
  return code;
}

int run_run(const GlobalOptions& global, RunOptions o) {
  // 1. Parse.
  if (o.command.empty()) return run_usage_error("no command: gpureap run [options] -- CMD [ARGS...]");
  if ((o.wait_free || o.free_first) && o.gpu.empty())
    return run_usage_error(
        "--wait-free and --free-first need --gpu SEL (the GPUs the command will use)");
  const int modes = (o.free_first ? 1 : 0) + (o.replace.empty() ? 0 : 1) + (o.replace_orphans ? 1 : 0);
  if (modes > 1)
    return run_usage_error("--replace, --replace-orphans and --free-first: choose one");
  if (!o.replace.empty() && !o.gpu.empty())
    return run_usage_error(
        "--replace KEY frees that instance's GPUs: drop --gpu (or use --replace-orphans --gpu SEL)");
  if (o.yes && modes == 0)
    return run_usage_error("--yes confirms what --replace, --replace-orphans or --free-first frees: "
                           "give one of them");

  // 2. The GPUs first: freed (each instance whole, confirmed), and/or waited for. With
  // --json what the free said and did goes into run's one document.
  report::ReplaceRecord replaced;
  if (modes == 1) {
    FreeBeforeRun request;
    request.mode = o.free_first        ? FreeBeforeRun::Mode::free_first
                   : o.replace_orphans ? FreeBeforeRun::Mode::replace_orphans
                                       : FreeBeforeRun::Mode::replace;
    request.instance = o.replace;
    request.gpu = o.gpu;
    request.grace = o.grace;
    request.timeout = o.timeout;
    request.yes = o.yes;
    request.command = o.command[0];
    if (int code = free_before_run(global, request, global.json ? &replaced : nullptr);
        code != kExitOk) {
      if (global.json)
        print_err(report::document_text(report::run_not_started_json(o.command, replaced, code)));
      return code;
    }
  }
  if (o.wait_free || o.free_first) {
    if (int code = wait_gpus_free(global, o); code != kExitOk) return code;
  }

  // 3. Run: contain, launch, supervise, tear down, verify.
  supervise::RunSettings settings;
  settings.argv = o.command;
  settings.name = o.name;
  settings.use_cgroup = !o.no_cgroup;
  settings.grace = o.grace;
  settings.release_timeout = o.timeout;
  if (modes == 1 && !global.json)  // --json: the document has the pid and run id
    settings.on_launch = [&o](const std::string& run_id, pid_t pid) {
      say(report::launched_line(o.command, pid, run_id));
    };
  // Its own command's release is what run verifies: never from an agent.
  inventory::Node node = open_node(global, std::nullopt, FirstLook::scan);
  supervise::RunLog log;
  if (o.verbose) log = [](std::string_view line) { say(std::string(line)); };
  // The teardown's signals are recorded (docs/audit.md), as free's are.
  auto audit = open_audit("run");
  auto out = supervise::supervise_run(settings, node, log, *audit);

  // 4. Report: only what went wrong, unless --verbose; with --json one document on
  // stderr (stdout is CMD's). The run is over and its processes were signalled: a
  // failure to render the details must not lose the exit status, the run's record.
  int code = run_exit_code(out);
  try {
    if (global.json) {
      print_err(report::document_text(report::run_json(o.command, out, code, modes == 1 ? &replaced : nullptr)));
    } else {
      if (out.launch_failure) {
        const auto& f = *out.launch_failure;
        say(f.stage == supervise::LaunchFailure::Stage::exec
                ? fmt::format("{}: {}", o.command[0], f.message)
                : f.message);
      }
      print_err(report::run_problems_text(out));
    }
  } catch (const std::exception& e) {
    say("the report could not be rendered (" + std::string(e.what()) + "); the exit status stands");
  }
  if (o.verbose && !out.source_problem.empty() && !out.memory_unverified())
    say("NVML: " + out.source_problem);
  if (o.verbose && !out.launch_failure)
    say(fmt::format("exit status {} ({:.3f} s from the end of the command to here)", code,
                    out.stop_to_return_seconds));
  return code;
}

}  // namespace

void add_run_command(CLI::App& app, const GlobalOptions& global, CommandFn& run) {
  auto options = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Launch a command so that nothing it spawns can outlive it. Return only when the\n"
      "GPU memory it held is free again.\n"
      "CMD runs in a session of its own under a child subreaper (double-forked and setsid()\n"
      "daemons cannot escape it) and, where cgroup v2 is writable (root or delegated), in a\n"
      "cgroup of its own, gpureap-run-<name>-<pid>; otherwise in subreaper mode (-v says\n"
      "which). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH are forwarded\n"
      "to CMD. When CMD exits, or gpureap gets SIGTERM/SIGINT, every process left in the run\n"
      "gets SIGTERM, then SIGKILL after --grace; gpureap then waits (at most --timeout) until\n"
      "the GPUs the run held are back at their baseline.\n"
      "Every process of the run carries GPUREAP_RUN_ID=<name>-<pid> in its environment: if\n"
      "gpureap itself is SIGKILLed, the leftovers stay identifiable (`gpureap status` marks\n"
      "them orphaned, with run_id <name>-<pid>) and `gpureap free --orphans --gpu all --yes`\n"
      "reclaims the whole run (docs/run-and-wait.md). In a container's own PID namespace\n"
      "the id is <name>-ns<inode>-<pid>, so two containers' runs never share one.\n\n"
      "Restart a server in one command: --replace KEY (an instance key from `gpureap\n"
      "status`) frees that server whole (its workers and, if alive, its launcher), waits\n"
      "until the GPUs are verified back at baseline and its ports are closed, then\n"
      "launches CMD: three lines, freed / verified / launched. It shows the plan and asks\n"
      "unless --yes; with no terminal and no --yes it acts only on orphans with strong\n"
      "evidence (gpureap's own run, or a death the agent saw) and refuses the rest\n"
      "(exit 75, try again later; nothing signalled). --replace-orphans does the same\n"
      "for every orphaned instance on --gpu (default: all GPUs), but leaves what it may\n"
      "not free alone (said: `left alone: ...`) and launches. --free-first frees\n"
      "everything on --gpu by the same rules: a live server is never signalled without\n"
      "a confirmation, and is freed whole or not at all.\n\n"
      "Examples:\n"
      "  gpureap run -- python3 -m sglang.launch_server --model-path M --tp 8\n"
      "  gpureap run --replace 7969 -- python3 -m sglang.launch_server \\\n"
      "      --model-path M --tp 8 --enable-hierarchical-cache\n"
      "      the seed's restart: free server 7969 (asked), verified, then launch\n"
      "  gpureap run --replace-orphans -- ./serve.sh\n"
      "      free what a crash left on every GPU, then launch\n"
      "  gpureap run -v --name sglang -- python3 serve.py");
  add_gpu_selector(*sub, "--gpu", options->gpu,
                   "GPUs for --wait-free/--free-first/--replace-orphans (all, 0,3, 0-3, UUID, "
                   "bus id, minor:N)");
  sub->add_flag("--wait-free", options->wait_free,
                "Wait (at most --timeout) until the --gpu GPUs are free first");
  add_text(*sub, "--replace", options->replace,
           "Free this server instance first (its key in `gpureap status`: a process group "
           "id or run id), whole and verified, then launch",
           "KEY");
  sub->add_flag("--replace-orphans", options->replace_orphans,
                "Free the orphaned instances on --gpu (default: all GPUs) first, then launch");
  sub->add_flag("--free-first", options->free_first,
                "Free everything on the --gpu GPUs first (each instance whole; live servers only "
                "with a confirmation), then wait for them");
  sub->add_flag("-y,--yes", options->yes,
                "Do not ask: the plan of --replace, --replace-orphans or --free-first is "
                "confirmed");
  add_duration(*sub, "--grace", options->grace,
               "SIGTERM -> SIGKILL delay at the teardown; 0: SIGKILL at once (as in `free`)");
  add_duration(*sub, "--timeout", options->timeout,
               "Bound on waiting for GPU memory to be released (and for --wait-free)");
  add_text(*sub, "--name", options->name, "Run name (default: the command's base name)", "NAME");
  sub->add_flag("--no-cgroup", options->no_cgroup,
                "Subreaper mode even where a run cgroup is possible");
  sub->add_flag("-v,--verbose", options->verbose,
                "Say what happens: mode, signals, teardown, release");
  // After `--` every word is CMD's. Without it, CMD's own options would be
  // read as ours: they are caught (as extras) and refused with a hint. Global
  // options go before `run`, so that nothing of CMD falls through to them.
  sub->add_option("command", options->command, "The command and its arguments (after --)")
      ->type_name("CMD");
  sub->allow_extras();
  sub->fallthrough(false);
  sub->footer(exit_status_help(kRunExits));
  sub->callback([&run, &global, options, sub] {
    auto extras = sub->remaining();
    std::erase(extras, std::string("--"));
    if (!extras.empty()) {
      run = [extras] {
        return run_usage_error(
            fmt::format("'{}' looks like an option of the command: put -- before the command "
                        "(gpureap run [options] -- CMD [ARGS...])",
                        extras.front()));
      };
      return;
    }
    run = [&global, options] { return run_run(global, *options); };
  });
}

}  // namespace gpureap::cli
