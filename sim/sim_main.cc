// gpureap-sim: a simulated GPU node for machines without a GPU.
// Steps: dispatch nvidia-smi (by argv[0] or subcommand) → parse → run one command.

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "sim/amd_driver.h"
#include "sim/commands.h"
#include "sim/proc_title.h"

namespace {

using namespace gpureap::sim;

constexpr const char* kOverview =
    R"TXT(Simulated GPU node: real processes, real signals, a fake driver.

A node is a directory D: the GPUs (node.json), device node files (D/dev), the
allocations that holder processes register, and a failure mode. The stand-in
libnvidia-ml.so.1 reads D, so gpureap runs unmodified against it.

  eval "$(gpureap-sim node --dir /tmp/node --gpus 8 --memory 96GiB)"
  gpureap-sim hold --dir /tmp/node --gpu 0 --children 8 --bytes 84GiB --orphan --detach
  D/bin/nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  gpureap status                       # sees the orphans through the sim driver
  gpureap-sim cleanup --dir /tmp/node  # kill everything the node started)TXT";

constexpr const char* kHoldFooter = R"TXT(
Prints one JSON line once every holder has registered:
  {"leader": PID, "holders": [{"pid": P, "gpu": I, "bytes": B}, ...], "pids": [every pid started]}
Shapes combine: e.g. SGLang with tensor parallel 8 whose server was SIGKILLed:
  hold --gpu 0 --children 8 --bytes 84GiB --orphan --detach)TXT";

void add_dir(CLI::App* cmd, fs::path& dir) {
  cmd->add_option("--dir", dir, "node directory (default: $GPUREAP_SIM_DIR)")
      ->envname("GPUREAP_SIM_DIR")
      ->required();
}

// Every subcommand's options, and the subcommand that was given.
struct SimArgs {
  NodeOptions node;
  ContainerOptions container;
  fs::path mode_dir;
  std::vector<std::string> mode_words;
  std::optional<unsigned> mode_gpu;
  fs::path pm_dir;
  unsigned pm_gpu = 0;
  std::string pm_value;
  fs::path sensors_dir;
  unsigned sensors_gpu = 0;
  SensorValues sensors;
  HoldOptions hold;
  fs::path list_dir;
  bool list_json = false;
  fs::path cleanup_dir;
  fs::path driver_dir;
  CLI::App *node_cmd = nullptr, *container_cmd = nullptr, *mode_cmd = nullptr, *pm_cmd = nullptr,
           *sensors_cmd = nullptr, *hold_cmd = nullptr, *list_cmd = nullptr, *cleanup_cmd = nullptr,
           *driver_cmd = nullptr;
};

void add_node_command(CLI::App& app, SimArgs& a) {
  a.node_cmd = app.add_subcommand("node", "create a simulated node in --dir and print its env");
  add_dir(a.node_cmd, a.node.dir);
  a.node_cmd->add_option("--gpus", a.node.gpus, "number of GPUs")->capture_default_str();
  a.node_cmd->add_option("--memory", a.node.memory, "memory per GPU, with a unit (96GiB)")
      ->capture_default_str();
  a.node_cmd->add_option("--baseline", a.node.baseline, "idle memory used per GPU (v1 query)")
      ->capture_default_str();
  a.node_cmd->add_option(
      "--reserved", a.node.reserved,
      "part of the baseline the v2 query calls reserved (default baseline-2MiB)");
  a.node_cmd->add_option("--minors", a.node.minors, "/dev/nvidia<minor> of each GPU, e.g. 3,2,1,0")
      ->delimiter(',');
  a.node_cmd->add_option("--name", a.node.name, "product name")->capture_default_str();
  a.node_cmd->add_option("--persistence", a.node.persistence, "persistence mode of every GPU")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  a.node_cmd
      ->add_option("--mig", a.node.mig,
                   "GPU:N puts a GPU in MIG mode with N GPU instances (1..7), one MIG device "
                   "each, e.g. 0:2; GPU:NxC gives each GPU instance C compute instances "
                   "(C MIG devices sharing its memory), e.g. 0:1x2")
      ->delimiter(',');
  a.node_cmd->add_flag("--no-cap-devfs", a.node.no_cap_devfs,
                       "MIG capabilities as files in D/dev/nvidia-capabilities (a driver without "
                       "nv_cap_enable_devfs=1), not device nodes");
  a.node_cmd
      ->add_option("--vendor", a.node.vendor,
                   "nvidia (NVML's stand-in) or amd (a KFD sysfs tree and DRM nodes, "
                   "written by a simulated amdgpu driver process; prints GPUREAP_SYSFS_ROOT)")
      ->check(CLI::IsMember({"nvidia", "amd"}))
      ->capture_default_str();
  a.node_cmd->add_option(
      "--amd-gpus", a.node.amd_gpus,
      "a mixed node: this many AMD GPUs after the --gpus NVIDIA ones (indices --gpus and up; "
      "NVML's stand-in lists the NVIDIA GPUs, the simulated amdgpu driver the AMD ones; prints "
      "every variable of both)");
  a.node_cmd->add_flag("--force", a.node.force,
                       "recreate an existing node (refused while holders live)");
  a.node_cmd->footer(
      "\nPrints export lines for GPUREAP_NVML_LIBRARY, GPUREAP_SIM_DIR, GPUREAP_DEV_DIR "
      "(and GPUREAP_SYSFS_ROOT with AMD GPUs; --vendor amd: no GPUREAP_NVML_LIBRARY).");
}

void add_container_command(CLI::App& app, SimArgs& a) {
  a.container_cmd = app.add_subcommand(
      "container", "a container's view of a node given one MIG device; prints its env");
  add_dir(a.container_cmd, a.container.dir);
  a.container_cmd->add_option("--out", a.container.out, "the view's directory (on D's file system)")
      ->required();
  a.container_cmd->add_option("--gpu", a.container.gpu, "the MIG device's GPU")
      ->capture_default_str();
  a.container_cmd->add_option("--mig", a.container.mig, "its GPU instance")->required();
  a.container_cmd->add_option("--ci", a.container.ci, "its compute instance")
      ->capture_default_str();
  a.container_cmd->footer(
      "\nThe view's dev/ holds nvidiactl, nvidia-uvm, the GPU's node and that MIG device's "
      "capabilities (hard links),\nand the full mig-minors; with GPUREAP_DEV_DIR set to it, "
      "NVML lists only that GPU and MIG device.");
}

// The driver's state: failure mode, persistence, sensors.
void add_driver_state_commands(CLI::App& app, SimArgs& a) {
  a.mode_cmd = app.add_subcommand("mode", "set the driver failure mode (read on every call)");
  add_dir(a.mode_cmd, a.mode_dir);
  a.mode_cmd
      ->add_option("mode", a.mode_words,
                   "ok | init_fail [unknown] | query_fail | hang_init | "
                   "hang_query | fail_after N")
      ->required();
  a.mode_cmd->add_option("--gpu", a.mode_gpu, "limit query_fail/hang_query/fail_after to one GPU");
  a.mode_cmd->footer(R"(
  ok            normal operation
  init_fail     nvmlInit returns DRIVER_NOT_LOADED (UNKNOWN with 'init_fail unknown')
  query_fail    memory, process and persistence queries return GPU_IS_LOST
  hang_init     nvmlInit never returns
  hang_query    memory and process queries never return
  fail_after N  memory/process queries fail (GPU_IS_LOST) after N calls in each process)");

  a.pm_cmd = app.add_subcommand("persistence", "turn persistence mode on or off for a GPU");
  add_dir(a.pm_cmd, a.pm_dir);
  a.pm_cmd->add_option("--gpu", a.pm_gpu, "GPU index")->required();
  a.pm_cmd->add_option("state", a.pm_value, "on | off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));

  a.sensors_cmd = app.add_subcommand(
      "sensors", "set a GPU's temperature and power draw (what top shows); none: not supported");
  add_dir(a.sensors_cmd, a.sensors_dir);
  a.sensors_cmd->add_option("--gpu", a.sensors_gpu, "GPU index")->required();
  a.sensors_cmd->add_option("--temperature", a.sensors.temperature,
                            "degrees Celsius, or none (default: 34)");
  a.sensors_cmd->add_option("--power", a.sensors.power, "watts, or none (default: 75)");
  a.sensors_cmd->add_option("--power-cap", a.sensors.power_cap,
                            "enforced power limit in watts, or none (default: 700)");
  a.sensors_cmd->add_option("--clock-events", a.sensors.clock_events,
                            "NVML's clock event reasons bitmask (0x80: power brake), or none "
                            "(default: 0x1, idle)");
  a.sensors_cmd->add_option("--process-util", a.sensors.process_util,
                            "which per-process utilization calls answer: both (default), new "
                            "(Blackwell: the older one not supported), legacy (a driver before "
                            "r545: the newer one not found), none");
  a.sensors_cmd->add_option("--ecc", a.sensors.ecc,
                            "uncorrected ECC errors since the driver loaded, or none (default: 0)");
}

void add_hold_command(CLI::App& app, SimArgs& a) {
  a.hold_cmd = app.add_subcommand("hold", "start real processes that hold GPU memory");
  add_dir(a.hold_cmd, a.hold.dir);
  a.hold_cmd->add_option("--gpu", a.hold.gpu, "GPU index (the first one with --children)")
      ->required();
  a.hold_cmd->add_option("--bytes", a.hold.bytes, "memory per holder, with a unit (20GiB)");
  a.hold_cmd->add_option("--mig", a.hold.mig,
                         "hold on this GPU instance of a GPU in MIG mode (opens its capabilities)");
  a.hold_cmd->add_option("--ci", a.hold.ci,
                         "with --mig: on this compute instance of the GPU instance (default 0)");
  a.hold_cmd->add_option("--children", a.hold.children,
                         "the server spawns N workers; worker k holds GPU gpu+k");
  a.hold_cmd->add_flag("--same-gpu", a.hold.same_gpu, "every worker holds --gpu");
  a.hold_cmd->add_flag("--parent-holds", a.hold.parent_holds, "the server holds --gpu too");
  a.hold_cmd->add_flag("--orphan", a.hold.orphan, "the server dies (SIGKILL) once workers hold");
  a.hold_cmd->add_flag("--detach", a.hold.detach,
                       "print the ready line and exit, leaving the tree");
  a.hold_cmd->add_flag("--daemon", a.hold.daemon, "setsid + double fork; the daemon holds");
  a.hold_cmd->add_flag("--ignore-term", a.hold.ignore_term, "holders ignore SIGTERM/SIGINT/SIGHUP");
  a.hold_cmd->add_flag("--non-dumpable", a.hold.non_dumpable,
                       "holders are not dumpable: only root reads their fd, maps and environ");
  a.hold_cmd->add_flag("--respawn", a.hold.respawn, "the server restarts a worker that dies");
  a.hold_cmd->add_option("--respawn-limit", a.hold.respawn_limit, "at most N respawns in all");
  a.hold_cmd->add_option("--respawn-delay", a.hold.respawn_delay,
                         "a respawned worker takes the GPU this long after it starts (3s: like "
                         "importing torch and creating a CUDA context)");
  a.hold_cmd->add_option("--stagger", a.hold.stagger,
                         "worker k takes the GPU k times this long after it starts (1s: workers "
                         "that create their CUDA contexts one after another)");
  a.hold_cmd->add_flag("--zombie-leader", a.hold.zombie_leader,
                       "the holder's main thread exits; a second thread keeps the memory");
  a.hold_cmd->add_flag("--stuck", a.hold.stuck, "memory stays after death (needs a GPU reset)");
  a.hold_cmd->add_option("--release-delay", a.hold.release_delay,
                         "memory is freed this long after death (300ms)");
  a.hold_cmd->add_option("--pinned-host", a.hold.pinned_host,
                         "SIZE of host memory each holder pins (as cudaHostRegister does): its "
                         "release takes 70 ms per GiB longer after death, and it mlock()s up to "
                         "4 MiB of it for real (VmLck)");
  a.hold_cmd->add_option("--forks-per-second", a.hold.forks_per_second,
                         "fork storm: short-lived children inheriting the device fds");
  a.hold_cmd->add_option("--comm", a.hold.comm, "process name of the holders (15 chars kept)");
  a.hold_cmd
      ->add_option("--label", a.hold.labels,
                   "ignored text that stays in every holder's command line (repeatable): long "
                   "or odd command lines")
      ->allow_extra_args(false);
  a.hold_cmd->add_option("--title", a.hold.title,
                         "the workers' process title, as setproctitle sets it ({k}: the worker's "
                         "index), e.g. sglang::scheduler_TP{k}");
  a.hold_cmd->add_option("--server-title", a.hold.server_title,
                         "the server's process title, e.g. python3 -m sglang.launch_server "
                         "--model-path M --port 30000");
  a.hold_cmd->add_flag("--listen", a.hold.listen,
                       "the server listens on 127.0.0.1 (a free port, in the ready line as "
                       "listen_port); its workers inherit the socket, as a server's workers do");
  a.hold_cmd->add_flag("--client-only", a.hold.client_only,
                       "open the device nodes, hold 0 bytes (a monitoring client)");
  a.hold_cmd->add_flag("--inheritor", a.hold.inheritor,
                       "the holder forks a child after its allocation (the child inherits its "
                       "device files) and dies (SIGKILL): the memory stays, listed under the dead "
                       "pid, until the child exits");
  a.hold_cmd->add_flag("--ipc-importer", a.hold.ipc_importer,
                       "a process of its own session maps the holder's allocation (a CUDA IPC "
                       "import) and the holder dies (SIGKILL): the memory stays, listed under the "
                       "dead pid, until the importer exits");
  a.hold_cmd->add_flag("--holder-lives", a.hold.holder_lives,
                       "with --inheritor or --ipc-importer: the holder is not killed after setup; "
                       "it lives until killed, and then its keeper keeps its memory");
  a.hold_cmd->add_option("--util", a.hold.util,
                         "SM utilization percent the GPU shows while the holder lives (default 0; "
                         "100 with --ghost)");
  a.hold_cmd->add_flag("--ghost", a.hold.ghost,
                       "after the holder dies its GPU stays busy with no memory and no process, "
                       "until `nvidia-smi -r` or `gpureap-sim cleanup` (a ghost GPU)");
  a.hold_cmd->add_option("--ghost-reads", a.hold.ghost_reads,
                         "the ghost lasts only this many utilization reads (a brief spike)");
  a.hold_cmd->add_flag("--pidns", a.hold.pidns, "run the server in a new PID namespace (root)");
  a.hold_cmd->add_option("--cgroup", a.hold.cgroup, "move the tree into cgroup2 <mount>/NAME");
  a.hold_cmd->footer(kHoldFooter);
}

// list, cleanup, the AMD driver process, and nvidia-smi.
void add_other_commands(CLI::App& app, SimArgs& a) {
  a.list_cmd = app.add_subcommand("list", "registered processes and allocations, with state");
  add_dir(a.list_cmd, a.list_dir);
  a.list_cmd->add_flag("--json", a.list_json, "one JSON object: processes and allocations");

  a.cleanup_cmd =
      app.add_subcommand("cleanup", "SIGKILL every live registered process (pidfd, verified)");
  add_dir(a.cleanup_cmd, a.cleanup_dir);

  a.driver_cmd = app.add_subcommand(
      "amd-driver", "the simulated amdgpu driver of an AMD node (`node --vendor amd` starts it)");
  add_dir(a.driver_cmd, a.driver_dir);

  app.add_subcommand("nvidia-smi", "the nvidia-smi stand-in: gpureap-sim nvidia-smi [--dir D] -h")
      ->prefix_command();
}

// Invoked as nvidia-smi (by argv[0], or `gpureap-sim nvidia-smi [--dir D] ...`): its exit
// status; nullopt otherwise.
std::optional<int> as_nvidia_smi(int argc, char** argv) {
  std::string argv0 = argc > 0 ? argv[0] : "gpureap-sim";
  if (fs::path(argv0).filename() == "nvidia-smi")
    return run_nvidia_smi(std::vector<std::string>(argv + 1, argv + argc), std::nullopt, argv0);
  if (argc > 1 && std::string_view(argv[1]) == "nvidia-smi") {
    std::vector<std::string> args(argv + 2, argv + argc);
    std::optional<fs::path> dir;
    if (args.size() >= 2 && args[0] == "--dir") {
      dir = args[1];
      args.erase(args.begin(), args.begin() + 2);
    }
    return run_nvidia_smi(args, dir, "nvidia-smi");
  }
  return std::nullopt;
}

// Parses the command line: nullopt, or the exit status (help, a usage error).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    std::string_view cmd = argv[1];
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->get_name() == cmd;
    if (!known) {
      print_error(
          fmt::format("unknown command '{}' (commands: node, mode, persistence, hold, "
                      "list, cleanup, amd-driver, nvidia-smi)",
                      cmd));
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    if (message.find("--dir") != std::string::npos) message += " (or set GPUREAP_SIM_DIR)";
    print_error(message);
    fmt::print(stderr, "Run `gpureap-sim --help` or `gpureap-sim <command> --help`.\n");
    return kExitUsage;
  }
  return std::nullopt;
}

int run_command(const SimArgs& a) {
  if (a.node_cmd->parsed()) return run_node(a.node);
  if (a.container_cmd->parsed()) return run_container(a.container);
  if (a.mode_cmd->parsed()) return run_mode(a.mode_dir, a.mode_words, a.mode_gpu);
  if (a.pm_cmd->parsed()) return run_persistence(a.pm_dir, a.pm_gpu, a.pm_value);
  if (a.sensors_cmd->parsed())
    return run_sensors(a.sensors_dir, a.sensors_gpu, a.sensors);
  if (a.hold_cmd->parsed()) return run_hold(a.hold);
  if (a.list_cmd->parsed()) return run_list(a.list_dir, a.list_json);
  if (a.cleanup_cmd->parsed()) return run_cleanup(a.cleanup_dir);
  if (a.driver_cmd->parsed()) return run_amd_driver(a.driver_dir);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  gpureap::sim::remember_argv(argc, argv);
  if (auto status = as_nvidia_smi(argc, argv)) return *status;

  CLI::App app{kOverview, "gpureap-sim"};
  app.require_subcommand(1);
  app.get_formatter()->column_width(34);
  SimArgs args;
  add_node_command(app, args);
  add_container_command(app, args);
  add_driver_state_commands(app, args);
  add_hold_command(app, args);
  add_other_commands(app, args);
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  return run_command(args);
}
