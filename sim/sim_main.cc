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

}  // namespace

int main(int argc, char** argv) {
  gpureap::sim::remember_argv(argc, argv);
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

  CLI::App app{kOverview, "gpureap-sim"};
  app.require_subcommand(1);
  app.get_formatter()->column_width(34);

  NodeOptions node;
  auto* node_cmd = app.add_subcommand("node", "create a simulated node in --dir and print its env");
  add_dir(node_cmd, node.dir);
  node_cmd->add_option("--gpus", node.gpus, "number of GPUs")->capture_default_str();
  node_cmd->add_option("--memory", node.memory, "memory per GPU, with a unit (96GiB)")
      ->capture_default_str();
  node_cmd->add_option("--baseline", node.baseline, "idle memory used per GPU (v1 query)")
      ->capture_default_str();
  node_cmd->add_option("--reserved", node.reserved,
                       "part of the baseline the v2 query calls reserved (default baseline-2MiB)");
  node_cmd->add_option("--minors", node.minors, "/dev/nvidia<minor> of each GPU, e.g. 3,2,1,0")
      ->delimiter(',');
  node_cmd->add_option("--name", node.name, "product name")->capture_default_str();
  node_cmd->add_option("--persistence", node.persistence, "persistence mode of every GPU")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  node_cmd->add_option("--mig", node.mig,
                       "GPU:N puts a GPU in MIG mode with N GPU instances (1..7), one MIG device "
                       "each, e.g. 0:2; GPU:NxC gives each GPU instance C compute instances "
                       "(C MIG devices sharing its memory), e.g. 0:1x2")
      ->delimiter(',');
  node_cmd->add_flag("--no-cap-devfs", node.no_cap_devfs,
                     "MIG capabilities as files in D/dev/nvidia-capabilities (a driver without "
                     "nv_cap_enable_devfs=1), not device nodes");
  node_cmd->add_option("--vendor", node.vendor,
                       "nvidia (NVML's stand-in) or amd (a KFD sysfs tree and DRM nodes, "
                       "written by a simulated amdgpu driver process; prints GPUREAP_SYSFS_ROOT)")
      ->check(CLI::IsMember({"nvidia", "amd"}))
      ->capture_default_str();
  node_cmd->add_option("--amd-gpus", node.amd_gpus,
                       "a mixed node: this many AMD GPUs after the --gpus NVIDIA ones (indices "
                       "--gpus and up; NVML's stand-in lists the NVIDIA GPUs, the simulated "
                       "amdgpu driver the AMD ones; prints every variable of both)");
  node_cmd->add_flag("--force", node.force,
                     "recreate an existing node (refused while holders live)");
  node_cmd->footer(
      "\nPrints export lines for GPUREAP_NVML_LIBRARY, GPUREAP_SIM_DIR, GPUREAP_DEV_DIR "
      "(and GPUREAP_SYSFS_ROOT with AMD GPUs; --vendor amd: no GPUREAP_NVML_LIBRARY).");

  ContainerOptions container;
  auto* container_cmd = app.add_subcommand(
      "container", "a container's view of a node given one MIG device; prints its env");
  add_dir(container_cmd, container.dir);
  container_cmd->add_option("--out", container.out, "the view's directory (on D's file system)")
      ->required();
  container_cmd->add_option("--gpu", container.gpu, "the MIG device's GPU")->capture_default_str();
  container_cmd->add_option("--mig", container.mig, "its GPU instance")->required();
  container_cmd->add_option("--ci", container.ci, "its compute instance")->capture_default_str();
  container_cmd->footer(
      "\nThe view's dev/ holds nvidiactl, nvidia-uvm, the GPU's node and that MIG device's "
      "capabilities (hard links),\nand the full mig-minors; with GPUREAP_DEV_DIR set to it, "
      "NVML lists only that GPU and MIG device.");

  fs::path mode_dir;
  std::vector<std::string> mode_words;
  std::optional<unsigned> mode_gpu;
  auto* mode_cmd = app.add_subcommand("mode", "set the driver failure mode (read on every call)");
  add_dir(mode_cmd, mode_dir);
  mode_cmd
      ->add_option("mode", mode_words,
                   "ok | init_fail [unknown] | query_fail | hang_init | "
                   "hang_query | fail_after N")
      ->required();
  mode_cmd->add_option("--gpu", mode_gpu, "limit query_fail/hang_query/fail_after to one GPU");
  mode_cmd->footer(R"(
  ok            normal operation
  init_fail     nvmlInit returns DRIVER_NOT_LOADED (UNKNOWN with 'init_fail unknown')
  query_fail    memory, process and persistence queries return GPU_IS_LOST
  hang_init     nvmlInit never returns
  hang_query    memory and process queries never return
  fail_after N  memory/process queries fail (GPU_IS_LOST) after N calls in each process)");

  fs::path pm_dir;
  unsigned pm_gpu = 0;
  std::string pm_value;
  auto* pm_cmd = app.add_subcommand("persistence", "turn persistence mode on or off for a GPU");
  add_dir(pm_cmd, pm_dir);
  pm_cmd->add_option("--gpu", pm_gpu, "GPU index")->required();
  pm_cmd->add_option("state", pm_value, "on | off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));

  fs::path sensors_dir;
  unsigned sensors_gpu = 0;
  std::string sensors_temperature, sensors_power;
  auto* sensors_cmd = app.add_subcommand(
      "sensors", "set a GPU's temperature and power draw (what top shows); none: not supported");
  add_dir(sensors_cmd, sensors_dir);
  sensors_cmd->add_option("--gpu", sensors_gpu, "GPU index")->required();
  sensors_cmd->add_option("--temperature", sensors_temperature,
                          "degrees Celsius, or none (default: 34)");
  sensors_cmd->add_option("--power", sensors_power, "watts, or none (default: 75)");

  HoldOptions hold;
  auto* hold_cmd = app.add_subcommand("hold", "start real processes that hold GPU memory");
  add_dir(hold_cmd, hold.dir);
  hold_cmd->add_option("--gpu", hold.gpu, "GPU index (the first one with --children)")->required();
  hold_cmd->add_option("--bytes", hold.bytes, "memory per holder, with a unit (20GiB)");
  hold_cmd->add_option("--mig", hold.mig,
                       "hold on this GPU instance of a GPU in MIG mode (opens its capabilities)");
  hold_cmd->add_option("--ci", hold.ci,
                       "with --mig: on this compute instance of the GPU instance (default 0)");
  hold_cmd->add_option("--children", hold.children,
                       "the server spawns N workers; worker k holds GPU gpu+k");
  hold_cmd->add_flag("--same-gpu", hold.same_gpu, "every worker holds --gpu");
  hold_cmd->add_flag("--parent-holds", hold.parent_holds, "the server holds --gpu too");
  hold_cmd->add_flag("--orphan", hold.orphan, "the server dies (SIGKILL) once workers hold");
  hold_cmd->add_flag("--detach", hold.detach, "print the ready line and exit, leaving the tree");
  hold_cmd->add_flag("--daemon", hold.daemon, "setsid + double fork; the daemon holds");
  hold_cmd->add_flag("--ignore-term", hold.ignore_term, "holders ignore SIGTERM/SIGINT/SIGHUP");
  hold_cmd->add_flag("--non-dumpable", hold.non_dumpable,
                     "holders are not dumpable: only root reads their fd, maps and environ");
  hold_cmd->add_flag("--respawn", hold.respawn, "the server restarts a worker that dies");
  hold_cmd->add_option("--respawn-limit", hold.respawn_limit, "at most N respawns in all");
  hold_cmd->add_option("--respawn-delay", hold.respawn_delay,
                       "a respawned worker takes the GPU this long after it starts (3s: like "
                       "importing torch and creating a CUDA context)");
  hold_cmd->add_flag("--zombie-leader", hold.zombie_leader,
                     "the holder's main thread exits; a second thread keeps the memory");
  hold_cmd->add_flag("--stuck", hold.stuck, "memory stays after death (needs a GPU reset)");
  hold_cmd->add_option("--release-delay", hold.release_delay,
                       "memory is freed this long after death (300ms)");
  hold_cmd->add_option("--pinned-host", hold.pinned_host,
                       "SIZE of host memory each holder pins (as cudaHostRegister does): its "
                       "release takes 70 ms per GiB longer after death, and it mlock()s up to "
                       "4 MiB of it for real (VmLck)");
  hold_cmd->add_option("--forks-per-second", hold.forks_per_second,
                       "fork storm: short-lived children inheriting the device fds");
  hold_cmd->add_option("--comm", hold.comm, "process name of the holders (15 chars kept)");
  hold_cmd
      ->add_option("--label", hold.labels,
                   "ignored text that stays in every holder's command line (repeatable): long "
                   "or odd command lines")
      ->allow_extra_args(false);
  hold_cmd->add_option("--title", hold.title,
                       "the workers' process title, as setproctitle sets it ({k}: the worker's "
                       "index), e.g. sglang::scheduler_TP{k}");
  hold_cmd->add_option("--server-title", hold.server_title,
                       "the server's process title, e.g. python3 -m sglang.launch_server "
                       "--model-path M --port 30000");
  hold_cmd->add_flag("--listen", hold.listen,
                     "the server listens on 127.0.0.1 (a free port, in the ready line as "
                     "listen_port); its workers inherit the socket, as a server's workers do");
  hold_cmd->add_flag("--client-only", hold.client_only,
                     "open the device nodes, hold 0 bytes (a monitoring client)");
  hold_cmd->add_option("--util", hold.util,
                       "SM utilization percent the GPU shows while the holder lives (default 0; "
                       "100 with --ghost)");
  hold_cmd->add_flag("--ghost", hold.ghost,
                     "after the holder dies its GPU stays busy with no memory and no process, "
                     "until `nvidia-smi -r` or `gpureap-sim cleanup` (a ghost GPU)");
  hold_cmd->add_option("--ghost-reads", hold.ghost_reads,
                       "the ghost lasts only this many utilization reads (a brief spike)");
  hold_cmd->add_flag("--pidns", hold.pidns, "run the server in a new PID namespace (root)");
  hold_cmd->add_option("--cgroup", hold.cgroup, "move the tree into cgroup2 <mount>/NAME");
  hold_cmd->footer(kHoldFooter);

  fs::path list_dir;
  bool list_json = false;
  auto* list_cmd = app.add_subcommand("list", "registered processes and allocations, with state");
  add_dir(list_cmd, list_dir);
  list_cmd->add_flag("--json", list_json, "one JSON object: processes and allocations");

  fs::path cleanup_dir;
  auto* cleanup_cmd =
      app.add_subcommand("cleanup", "SIGKILL every live registered process (pidfd, verified)");
  add_dir(cleanup_cmd, cleanup_dir);

  fs::path driver_dir;
  auto* driver_cmd = app.add_subcommand(
      "amd-driver", "the simulated amdgpu driver of an AMD node (`node --vendor amd` starts it)");
  add_dir(driver_cmd, driver_dir);

  app.add_subcommand("nvidia-smi", "the nvidia-smi stand-in: gpureap-sim nvidia-smi [--dir D] -h")
      ->prefix_command();

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

  if (node_cmd->parsed()) return run_node(node);
  if (container_cmd->parsed()) return run_container(container);
  if (mode_cmd->parsed()) return run_mode(mode_dir, mode_words, mode_gpu);
  if (pm_cmd->parsed()) return run_persistence(pm_dir, pm_gpu, pm_value);
  if (sensors_cmd->parsed())
    return run_sensors(sensors_dir, sensors_gpu, sensors_temperature, sensors_power);
  if (hold_cmd->parsed()) return run_hold(hold);
  if (list_cmd->parsed()) return run_list(list_dir, list_json);
  if (cleanup_cmd->parsed()) return run_cleanup(cleanup_dir);
  if (driver_cmd->parsed()) return run_amd_driver(driver_dir);
  return kExitUsage;
}
