#pragma once
// The simulated node's state directory D and its static description (node.json).
//
//   D/node.json           GPUs: index, name, uuid, bus id, minor, memory, persistence
//   D/mode                driver failure mode, one line ("ok", "query_fail gpu=3", ...)
//   D/dev/                device node files: nvidia<minor>, nvidiactl, nvidia-uvm; with MIG,
//                         nvidia-caps/ (capability nodes, mig-minors) or, --no-cap-devfs,
//                         nvidia-capabilities/ (capability files)
//   D/bin/nvidia-smi      symlink to gpureap-sim (the nvidia-smi stand-in)
//   D/allocs/, D/procs/   registrations (see registry.h)
//   D/cgroups             cgroups created by `hold --cgroup`, one path a line
//   D/nvidia-smi.log      one line per nvidia-smi invocation (its argv)

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::sim {

namespace fs = std::filesystem;

/// Where each piece of a node's state lives.
struct SimPaths {
  fs::path root;
  fs::path node_json() const { return root / "node.json"; }
  fs::path mode() const { return root / "mode"; }
  fs::path dev() const { return root / "dev"; }
  fs::path bin() const { return root / "bin"; }
  fs::path allocs() const { return root / "allocs"; }
  fs::path procs() const { return root / "procs"; }
  fs::path cgroups() const { return root / "cgroups"; }
  fs::path smi_log() const { return root / "nvidia-smi.log"; }
  fs::path sessions() const { return root / "sessions"; }
  fs::path gpu_node(unsigned minor) const { return dev() / ("nvidia" + std::to_string(minor)); }
  fs::path caps() const { return dev() / "nvidia-caps"; }
  fs::path cap_node(unsigned minor) const { return caps() / ("nvidia-cap" + std::to_string(minor)); }
  fs::path mig_minors() const { return caps() / "mig-minors"; }
  /// `node --mig --no-cap-devfs`: the stand-in for /proc/driver/nvidia/capabilities.
  fs::path capabilities() const { return dev() / "nvidia-capabilities"; }
  /// gpu<minor>/mig/gi<gi>/access, or with `ci`, .../gi<gi>/ci<ci>/access there.
  fs::path capability_file(unsigned gpu_minor, unsigned gi, std::optional<unsigned> ci) const {
    fs::path p = capabilities() / ("gpu" + std::to_string(gpu_minor)) / "mig" /
                 ("gi" + std::to_string(gi));
    if (ci) p /= "ci" + std::to_string(*ci);
    return p / "access";
  }
};

/// The node directory named by the environment: $GPUREAP_SIM_DIR, else the parent
/// of $GPUREAP_DEV_DIR. nullopt when neither is set.
std::optional<fs::path> sim_dir_from_env();

struct GpuConfig {
  unsigned index = 0;  // gpureap's index: NVIDIA's GPUs first, then AMD's (a mixed node)
  /// "nvidia" (NVML's stand-in answers for it) or "amd" (the simulated amdgpu driver's
  /// sysfs tree shows it). A mixed node (`node --gpus N --amd-gpus M`) has both.
  std::string vendor = "nvidia";
  /// Its place among its vendor's GPUs (set on load): NVML's index, or KFD's GPU ordinal.
  unsigned vendor_index = 0;
  std::string name;
  std::string uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string bus_id;  // "00000000:18:00.0"
  unsigned pci_bus = 0;
  unsigned minor = 0;
  std::uint64_t total = 0;
  std::uint64_t baseline = 0;  // idle "used" of the v1 query
  std::uint64_t reserved = 0;  // the part of baseline the v2 query reports as reserved
  bool persistence = false;
  /// Sensors (`gpureap-sim sensors`): nvmlDeviceGetTemperature's degrees Celsius and
  /// nvmlDeviceGetPowerUsage's milliwatts, or on an AMD node hwmon's temp1_input and
  /// power1_average; nullopt answers NOT_SUPPORTED (no hwmon file). A new node reads
  /// an idle H200's 34 C and 75 W.
  std::optional<unsigned> temperature_c = 34;
  std::optional<unsigned> power_mw = 75'000;
  /// Card health (`gpureap-sim sensors`): nvmlDeviceGetEnforcedPowerLimit's milliwatts,
  /// nvmlDeviceGetCurrentClocksEventReasons' bitmask and nvmlDeviceGetTotalEccErrors'
  /// uncorrected volatile count; nullopt answers NOT_SUPPORTED. A new node reads an
  /// H200 capped at 700 W, clocks idle (0x1), no ECC error.
  std::optional<unsigned> power_limit_mw = 700'000;
  std::optional<std::uint64_t> clock_event_reasons = 0x1;
  std::optional<std::uint64_t> ecc_uncorrected = 0;
  /// Which per-process utilization calls answer (`gpureap-sim sensors --process-util`):
  /// "both" (a current driver on Hopper), "new" (Blackwell: the older
  /// nvmlDeviceGetProcessUtilization is NOT_SUPPORTED), "legacy" (a driver before r545:
  /// nvmlDeviceGetProcessesUtilizationInfo answers FUNCTION_NOT_FOUND, as it would be
  /// absent), "none" (both NOT_SUPPORTED).
  std::string process_util = "both";
  /// MIG mode (`node --mig`): its MIG devices, each one compute instance of a GPU
  /// instance (`--mig 0:1x2`: two of one), and the capability minors a process on it
  /// opens. The compute instances of one GPU instance share its memory and its GI
  /// capability (`gi_cap`); each has its own `ci_cap`.
  struct Mig {
    unsigned gi = 0, ci = 0;
    std::string uuid;  // "MIG-xxxxxxxx-..."
    std::string name;  // "NVIDIA H200 MIG 3g.71gb"
    std::uint64_t total = 0;          // the GPU instance's memory (shared by its CIs)
    unsigned gi_cap = 0, ci_cap = 0;  // /dev/nvidia-caps/nvidia-cap<N>
  };
  std::vector<Mig> mig;
};

struct NodeConfig {
  std::string driver_version = "580.65.06";
  int cuda_version = 13000;  // nvmlSystemGetCudaDriverVersion: 13.0, as driver 580 supports
  /// The driver's nv_cap_enable_devfs: MIG capabilities are device nodes
  /// (D/dev/nvidia-caps/nvidia-cap<N>), or without it files (D/dev/nvidia-capabilities/).
  bool cap_devfs = true;
  /// "nvidia", "amd" (`node --vendor amd`: a KFD sysfs tree and DRM nodes instead of
  /// NVML's answers; sim/amd_driver.h), or "mixed" (`node --gpus N --amd-gpus M`: N
  /// NVIDIA GPUs, then M AMD GPUs). Each GPU says its own (GpuConfig::vendor).
  std::string vendor = "nvidia";
  std::vector<GpuConfig> gpus;
};

inline bool is_amd(const GpuConfig& gpu) { return gpu.vendor == "amd"; }
/// Whether the node has an AMD GPU (its simulated amdgpu driver runs) / an NVIDIA GPU.
bool has_amd(const NodeConfig& node);
bool has_nvidia(const NodeConfig& node);
/// Sets each GPU's vendor_index (its place among its vendor's GPUs, in index order).
void number_vendor_gpus(NodeConfig& node);

/// Builds the GPUs of a new node: deterministic UUIDs, distinct PCI bus ids.
/// `minors` empty means minor == index.
NodeConfig make_node_config(unsigned gpus, std::uint64_t total, std::uint64_t baseline,
                            std::uint64_t reserved, const std::vector<unsigned>& minors,
                            const std::string& name, bool persistence);

/// Puts GPU `gpu` in MIG mode with `instances` GPU instances (1..N), each with
/// `compute_instances` compute instances (0..C-1), one MIG device each; the memory split
/// evenly between the GPU instances, capability minors numbered as the driver does for
/// that GPU's minor.
void add_mig_devices(GpuConfig& gpu, unsigned instances, unsigned compute_instances = 1);
/// /dev/nvidia-caps/mig-minors for the node: every capability of every MIG device
/// (a GPU instance's once, however many compute instances it has).
std::string mig_minors_text(const NodeConfig& node);

Result<NodeConfig> load_node_config(const fs::path& node_json);
/// Writes node.json atomically (temp file + rename), so readers see old or new.
Result<void> save_node_config(const fs::path& node_json, const NodeConfig& config);

/// The driver failure mode (D/mode), re-read by the library on every call.
struct Mode {
  enum class Kind { ok, init_fail, query_fail, hang_init, hang_query, fail_after };
  Kind kind = Kind::ok;
  bool init_fail_unknown = false;  // init_fail: NVML_ERROR_UNKNOWN instead of DRIVER_NOT_LOADED
  std::uint64_t after = 0;         // fail_after: successful queries before failing
  std::optional<unsigned> gpu;     // query_fail/hang_query/fail_after: only this GPU

  /// True when a per-GPU mode applies to GPU `index`.
  bool applies_to(unsigned index) const { return !gpu || *gpu == index; }
};

/// Parses "ok", "init_fail [unknown]", "query_fail [gpu=I]", "hang_init",
/// "hang_query [gpu=I]", "fail_after N [gpu=I]".
Result<Mode> parse_mode(std::string_view text);
std::string format_mode(const Mode& mode);

/// Atomically replaces (or creates) a small file's content: temp file + rename.
Result<void> write_file_atomic(const fs::path& path, std::string_view content);
/// Reads a whole small file; nullopt if it cannot be opened.
std::optional<std::string> read_file(const fs::path& path);

}  // namespace gpureap::sim
