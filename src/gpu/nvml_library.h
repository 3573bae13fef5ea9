#pragma once
// NVML loaded at run time with dlopen: the one file that knows NVML's exported
// names and calling conventions. Symbols are resolved newest version first,
// each required or optional (as nvtop does); data a driver cannot supply
// (NOT_SUPPORTED, a missing optional symbol) becomes std::nullopt, not an error.
//
// gpureap uses it only inside the NVML worker process (nvml_source.h), so a
// driver call that never returns cannot hang gpureap. init, shutdown and moves
// need one thread; the per-GPU queries (query_gpu, query_reading) may run
// concurrently on different GPUs (NVML itself is thread-safe), which is how the
// worker keeps one hung GPU from holding up the others.

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/nvml_api.h"
#include "util/result.h"

namespace gpureap::gpu {

/// A resolved NVML entry point and the exported name it was found under (the
/// name appears in error messages). `fn` is null when the symbol is missing.
template <typename Fn>
struct NvmlSymbol {
  Fn fn = nullptr;
  const char* name = "";
  explicit operator bool() const { return fn != nullptr; }
};

/// A legacy nvmlDeviceGet*RunningProcesses entry point with the size of the
/// entries its name implies (24 for _v3 and _v2, 16 for the unsuffixed call).
struct NvmlProcessListSymbol {
  NvmlSymbol<nvmlDeviceGetRunningProcesses_fn> call;
  std::size_t stride = 0;
};

/// Every NVML entry point gpureap uses. Required: init, shutdown, error_string,
/// device_count, handle_by_index, uuid, pci_info and one of the memory calls.
struct NvmlSymbols {
  NvmlSymbol<nvmlInit_fn> init;
  NvmlSymbol<nvmlShutdown_fn> shutdown;
  NvmlSymbol<nvmlErrorString_fn> error_string;
  NvmlSymbol<nvmlDeviceGetCount_fn> device_count;
  NvmlSymbol<nvmlDeviceGetHandleByIndex_fn> handle_by_index;
  NvmlSymbol<nvmlDeviceGetString_fn> uuid;
  NvmlSymbol<nvmlDeviceGetPciInfo_fn> pci_info;
  NvmlSymbol<nvmlDeviceGetMemoryInfo_v2_fn> memory_v2;
  NvmlSymbol<nvmlDeviceGetMemoryInfo_fn> memory_v1;
  NvmlSymbol<nvmlDeviceGetRunningProcessDetailList_fn> process_detail_list;
  std::array<NvmlProcessListSymbol, 3> process_lists;  // indexed by ProcessKind
  NvmlSymbol<nvmlDeviceGetString_fn> name;
  NvmlSymbol<nvmlDeviceGetUint_fn> minor_number;
  NvmlSymbol<nvmlDeviceGetPersistenceMode_fn> persistence_mode;
  NvmlSymbol<nvmlDeviceGetUtilizationRates_fn> utilization;
  NvmlSymbol<nvmlDeviceGetTemperature_fn> temperature;  // optional, as power
  NvmlSymbol<nvmlDeviceGetUint_fn> power_usage;
  NvmlSymbol<nvmlDeviceGetUint_fn> power_limit;                // optional: card health
  NvmlSymbol<nvmlDeviceGetUlonglong_fn> clock_event_reasons;  // optional
  NvmlSymbol<nvmlDeviceGetTotalEccErrors_fn> ecc_errors;      // optional
  NvmlSymbol<nvmlDeviceGetProcessUtilization_fn> process_utilization;  // optional: a hint
  // optional, preferred when present (r545+; Blackwell answers only this one)
  NvmlSymbol<nvmlDeviceGetProcessesUtilizationInfo_fn> processes_utilization_info;
  NvmlSymbol<nvmlSystemGetDriverVersion_fn> driver_version;
  NvmlSymbol<nvmlSystemGetCudaDriverVersion_fn> cuda_driver_version;  // optional
  // MIG, all optional: a driver without them has no MIG GPUs to report.
  NvmlSymbol<nvmlDeviceGetMigMode_fn> mig_mode;
  NvmlSymbol<nvmlDeviceGetUint_fn> max_mig_devices;
  NvmlSymbol<nvmlDeviceGetMigDeviceHandleByIndex_fn> mig_handle_by_index;
  NvmlSymbol<nvmlDeviceGetUint_fn> gpu_instance_id;
  NvmlSymbol<nvmlDeviceGetUint_fn> compute_instance_id;
};

class NvmlLibrary {
 public:
  /// dlopens `path` (RTLD_NOW | RTLD_LOCAL) and resolves the symbols. Fails when
  /// the library cannot be loaded (naming the path: no NVIDIA driver seems to be
  /// installed) or lacks a required symbol.
  static Result<NvmlLibrary> load(const std::string& path);

  /// A library over given entry points, with no dlopen handle (for tests).
  static NvmlLibrary from_symbols(NvmlSymbols symbols);

  NvmlLibrary(NvmlLibrary&& other) noexcept;
  NvmlLibrary& operator=(NvmlLibrary&& other) noexcept;
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  /// Shuts NVML down when initialized, then dlcloses.
  ~NvmlLibrary();

  /// nvmlInit; fails with NVML's error text ("nvmlInit_v2: Driver Not Loaded").
  Result<void> init();

  /// nvmlShutdown when initialized (NVML counts init/shutdown pairs).
  void shutdown();

  /// Every GPU: identity, memory, processes (compute + graphics + MPS, one
  /// entry per pid), persistence mode. Fails when the GPU count is unknown.
  /// A failed per-GPU call (GPU lost, no permission) keeps the GPU with what
  /// was learned and appends the error ("nvmlDeviceGetMemoryInfo_v2(GPU 3): GPU
  /// is lost") to `*problems`; when `problems` is null it fails the call instead.
  Result<std::vector<GpuInfo>> query_all(std::vector<std::string>* problems = nullptr);

  /// How many GPUs NVML sees.
  Result<unsigned> gpu_count();

  /// One GPU, as query_all reads it. Never fails: failed calls are joined into
  /// `problem`, and the GPU keeps what was learned. `on_identity` (optional) is
  /// called once index, UUID, PCI bus id, name and minor are known, before the
  /// memory and process queries (which may never return on a lost GPU).
  GpuInfo query_gpu(unsigned index, const std::function<void(const GpuInfo&)>& on_identity = {});

  /// Used memory and NVML pids of one GPU; any NVML error fails the call.
  Result<MemoryReading> query_reading(unsigned index);

  /// Used memory and NVML pids of the GPUs with these indices, in that order.
  /// Any NVML error, or an index NVML does not know, fails the call.
  Result<std::vector<MemoryReading>> query_memory(const std::vector<unsigned>& indices);

  /// "580.65.06", or empty when NVML cannot tell.
  std::string driver_version();

  /// The CUDA version the driver supports, "12.4" (as nvidia-smi's header says it), or
  /// empty when NVML cannot tell.
  std::string cuda_version();

  const NvmlSymbols& symbols() const { return sym_; }

 private:
  struct DlClose {
    void operator()(void* handle) const;
  };

  NvmlLibrary(std::unique_ptr<void, DlClose> handle, NvmlSymbols symbols);

  Error source_error(const char* call, std::optional<unsigned> gpu, nvmlReturn_t rc) const;
  Result<unsigned> device_count();
  Result<nvmlDevice_t> device(unsigned index);
  Result<std::optional<GpuMemory>> read_memory(nvmlDevice_t dev, unsigned index);
  Result<std::optional<std::vector<GpuProcess>>> read_processes(nvmlDevice_t dev, unsigned index);
  Result<std::optional<std::vector<GpuProcess>>> read_detail_list(nvmlDevice_t dev, unsigned index,
                                                                  ProcessKind kind);
  Result<std::optional<std::vector<GpuProcess>>> read_legacy_list(nvmlDevice_t dev, unsigned index,
                                                                  ProcessKind kind);
  Result<void> read_identity(nvmlDevice_t dev, GpuInfo& gpu);
  std::optional<nvmlUtilization_t> read_utilization(nvmlDevice_t dev) const;
  /// Sets sm_percent / mem_percent of the listed processes NVML sampled (a hint).
  void read_process_utilization(nvmlDevice_t dev, std::vector<GpuProcess>& processes) const;
  /// True when the GPU is in MIG mode (false when the driver cannot say). Asked once
  /// per GPU and session: the mode changes only with a GPU reset, which needs every
  /// NVML client gone (the agent lets go of NVML and initializes it again).
  bool mig_enabled(nvmlDevice_t dev, unsigned index);
  /// The MIG devices of a GPU in MIG mode: handle and id of each.
  Result<std::vector<std::pair<nvmlDevice_t, DeviceId>>> mig_handles(nvmlDevice_t dev,
                                                                     unsigned index);
  void read_mig_devices(nvmlDevice_t dev, GpuInfo& gpu, std::vector<Error>& errors);
  void query_gpu_into(unsigned index, GpuInfo& gpu, std::vector<Error>& errors,
                      const std::function<void(const GpuInfo&)>& on_identity);

  std::unique_ptr<void, DlClose> handle_;
  NvmlSymbols sym_;
  bool initialized_ = false;
  // Learned once per library: this driver rejects the versioned struct
  // (ARGUMENT_VERSION_MISMATCH / FUNCTION_NOT_FOUND), so use the older call.
  // Atomic: per-GPU queries may run on several threads.
  std::atomic<bool> memory_v2_unusable_ = false;
  std::atomic<bool> detail_list_unusable_ = false;
  // MIG mode per GPU index, learned once per session: -1 not asked, 0 off, 1 on.
  static constexpr unsigned kMigModeCache = 64;
  std::array<std::atomic<signed char>, kMigModeCache> mig_mode_{};
  void forget_mig_modes();
};

}  // namespace gpureap::gpu
