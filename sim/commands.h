#pragma once
// The gpureap-sim subcommands. Each returns the process exit status and prints
// its own output; `main` only parses the command line and dispatches.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gpureap::sim {

namespace fs = std::filesystem;

/// Exit statuses of gpureap-sim (nvidia-smi keeps NVIDIA's own).
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

/// Prints "gpureap-sim: error: <message>" to stderr.
void print_error(const std::string& message);

struct NodeOptions {
  fs::path dir;
  unsigned gpus = 8;
  std::string memory = "143771MiB";  // what NVML reports for an H200
  std::string baseline = "512MiB";
  std::string reserved;  // default: baseline - 2 MiB
  std::vector<unsigned> minors;
  std::string name = "NVIDIA H200";
  std::string persistence = "off";
  std::vector<std::string> mig;  // "GPU:N[xC]": GPU in MIG mode, N GPU instances (C CIs each)
  bool no_cap_devfs = false;     // MIG capabilities as files, not device nodes
  std::string vendor = "nvidia";  // or "amd" (sim/amd_driver.h)
  unsigned amd_gpus = 0;          // a mixed node: `gpus` NVIDIA GPUs, then these AMD ones
  bool force = false;
};
int run_node(const NodeOptions& options);

/// `gpureap-sim container`: a container's view of node `dir` given one MIG device.
struct ContainerOptions {
  fs::path dir;
  fs::path out;  // the view's directory; its dev/ is the container's /dev
  unsigned gpu = 0;
  unsigned mig = 1;  // GPU instance
  unsigned ci = 0;   // compute instance
};
int run_container(const ContainerOptions& options);

int run_mode(const fs::path& dir, const std::vector<std::string>& words,
             std::optional<unsigned> gpu);
int run_persistence(const fs::path& dir, unsigned gpu, const std::string& on_off);
/// `gpureap-sim sensors`: a GPU's temperature (degrees Celsius), power (watts) and card
/// health: its power cap (watts), clock event reasons (NVML's bitmask, 0x.. or decimal)
/// and uncorrected ECC errors; "none" makes the driver answer "not supported". Unset
/// options keep their value.
struct SensorValues {
  std::string temperature, power, power_cap, clock_events, ecc;
  std::string process_util;  // both | new | legacy | none (GpuConfig::process_util)
};
int run_sensors(const fs::path& dir, unsigned gpu, const SensorValues& values);

struct HoldOptions {
  fs::path dir;
  unsigned gpu = 0;
  std::optional<unsigned> mig;  // hold on this GPU instance of a GPU in MIG mode
  unsigned ci = 0;              // ... on this compute instance of it
  std::string bytes;
  unsigned children = 0;
  bool same_gpu = false;
  bool parent_holds = false;
  bool orphan = false;
  bool detach = false;
  bool daemon = false;
  bool ignore_term = false;
  bool non_dumpable = false;  // prctl(PR_SET_DUMPABLE, 0): /proc/PID/{fd,maps,environ} root-only
  bool respawn = false;
  std::optional<unsigned> respawn_limit;
  std::string respawn_delay;  // a respawned worker opens the GPU this long after it starts
  std::string stagger;        // worker k opens the GPU k times this long after it starts
  bool zombie_leader = false;
  bool stuck = false;
  std::string release_delay;
  std::string pinned_host;  // SIZE of host memory the holders "pin": a longer release
  double forks_per_second = 0;
  std::string comm;
  std::vector<std::string> labels;  // ignored: they only shape the command line
  std::string title;         // the workers' process title; {k} is the worker's index
  std::string server_title;  // the server's (as its command line reads: a launcher's)
  bool listen = false;       // the server listens on a loopback TCP port its workers inherit
  bool client_only = false;
  /// A keeper of the holder's memory outlives it: the holder forks a child after its
  /// allocation (it inherits the device files), then dies (SIGKILL).
  bool inheritor = false;
  /// ... or a process of its own session maps the holder's allocation (a CUDA IPC import),
  /// then the holder dies.
  bool ipc_importer = false;
  /// With --inheritor / --ipc-importer: the holder does not kill itself; it lives until
  /// killed (a test's agent then sees it listed, then dead: a witnessed death).
  bool holder_lives = false;
  std::optional<unsigned> util;  // SM percent while the holder lives (default 0; 100 with --ghost)
  bool ghost = false;
  unsigned ghost_reads = 0;
  bool pidns = false;
  std::string cgroup;
};
int run_hold(const HoldOptions& options);

int run_list(const fs::path& dir, bool json);
int run_cleanup(const fs::path& dir);

/// The nvidia-smi stand-in; `args` excludes the program name. `dir` overrides
/// the node found from the environment or from the symlink's location.
int run_nvidia_smi(const std::vector<std::string>& args, std::optional<fs::path> dir,
                   const std::string& argv0);

/// Path of the simulated libnvidia-ml.so.1: beside this executable, else the
/// build-time path.
fs::path sim_library_path();

}  // namespace gpureap::sim
