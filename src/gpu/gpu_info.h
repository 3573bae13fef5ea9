#pragma once
// What NVML tells us about the GPUs, as plain values. Fields NVML could not
// supply ("not supported", no permission) are std::nullopt, never errors.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device_id.h"

namespace gpureap::gpu {

enum class ProcessKind { compute, graphics, mps };
/// "compute", "graphics", "mps" (util/enum_names.h).
std::string_view enum_name(ProcessKind kind);

/// The reasons NVML's clock event bitmask names (nvmlClocksEventReason*), each in a
/// word, in bit order; the idle bit (0x1) is no reason to look and is left out.
std::vector<std::string_view> clock_event_words(std::uint64_t reasons);
/// Whether the clocks are held down by heat, a hardware slowdown or the power brake:
/// what a person should look at (a power cap under load is the card doing its job).
bool clock_events_worrying(std::uint64_t reasons);

/// A process NVML lists on a GPU. NVML's pid is a hint (the creator of the
/// driver client, possibly stale or translated), never a target by itself.
struct GpuProcess {
  std::uint32_t pid = 0;
  std::optional<std::uint64_t> used_bytes;  // nullopt: NVML_VALUE_NOT_AVAILABLE
  ProcessKind kind = ProcessKind::compute;
  /// A hint, never evidence: the process's share of the SM and of memory reads/writes in
  /// NVML's latest per-process sample (nvmlDeviceGetProcessUtilization), percent; nullopt
  /// when NVML gives none (not supported: MIG, some drivers; no sample of this pid).
  std::optional<unsigned> sm_percent{};
  std::optional<unsigned> mem_percent{};
};

struct GpuMemory {
  std::uint64_t total = 0;
  std::uint64_t used = 0;                   // v2 "used" (excludes reserved) when available
  std::optional<std::uint64_t> reserved;    // nullopt when only the v1 query worked
};

struct GpuInfo {
  DeviceId id;
  std::string name;
  std::string uuid;                    // "GPU-xxxxxxxx-..."
  std::string pci_bus_id;              // "00000000:1A:00.0"
  std::optional<unsigned> minor;       // /dev/nvidia<minor>
  std::optional<GpuMemory> memory;
  std::vector<GpuProcess> processes;   // compute + graphics + MPS, de-duplicated by pid
  bool processes_known = false;        // false when the process query failed
  std::optional<bool> persistence_mode;
  /// NVML utilization rates, percent of the driver's last sample period:
  /// SM (kernels running) and memory (reads/writes). nullopt when unsupported.
  std::optional<unsigned> utilization_gpu;
  std::optional<unsigned> utilization_memory;
  /// Sensors, nullopt when the driver cannot say (top shows "-", never 0): the GPU's
  /// temperature in degrees Celsius (NVML's GPU sensor; amdgpu's hwmon temp1, "edge")
  /// and its board power draw in milliwatts (nvmlDeviceGetPowerUsage; hwmon power1).
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> power_mw;
  /// Card health, nullopt where the driver cannot say: the enforced power cap in
  /// milliwatts (nvmlDeviceGetEnforcedPowerLimit), why the clocks are held down now
  /// (nvmlDeviceGetCurrentClocksEventReasons' bitmask: clock_event_words), and the
  /// uncorrected ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors,
  /// volatile). NVML keeps no Xid count (an Xid is an event; dmesg has them).
  std::optional<unsigned> power_limit_mw;
  std::optional<std::uint64_t> clock_event_reasons;
  std::optional<std::uint64_t> ecc_uncorrected;
  /// Empty when every query of this GPU answered. Otherwise the failed NVML
  /// calls ("nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost"), or why the GPU
  /// did not answer in time. The other GPUs are unaffected.
  std::string problem;
  bool hung = false;  // a query of this GPU did not return before the deadline
  /// MIG (issue 25). On a physical GPU: whether MIG mode is on. On a MIG device (id.gi
  /// set): the physical GPU's UUID; its minor is the physical GPU's, and `name` says
  /// its profile. Utilization is not available on either with MIG on.
  bool mig_mode = false;
  std::string parent_uuid{};
  /// The MIG devices of a GPU in MIG mode, as NVML reads them; gpu::flatten_mig
  /// (gpu/mig.h) puts them in the GPU's place, so past the NVML source every MIG
  /// device is a GPU of its own and this is empty.
  std::vector<GpuInfo> mig_devices{};
};

/// One memory reading of one GPU, for release polling.
struct MemoryReading {
  DeviceId id;
  std::optional<std::uint64_t> used;
  std::vector<std::uint32_t> pids;  // NVML's process list on that GPU, pids only
  std::string problem;  // non-empty: this GPU could not be read (`used` is then nullopt)
  bool hung = false;    // its query did not return before the deadline
  std::optional<unsigned> utilization_gpu;  // SM percent; nullopt when unsupported
  /// A GPU in MIG mode: one reading per MIG device (gpu::flatten_mig puts them in its
  /// place); `used` and `pids` of the physical GPU are then not read.
  std::vector<MemoryReading> mig{};
};

}  // namespace gpureap::gpu
