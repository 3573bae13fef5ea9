#include "gpu/nvml_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <utility>

#include "gpu/nvml_process_list.h"

namespace gpureap::gpu {
namespace {

// nvmlDeviceGetRunningProcessDetailList modes, in ProcessKind order.
constexpr std::array<unsigned, 3> kDetailListModes{0, 1, 2};
constexpr std::array<const char*, 3> kKindNames{"compute", "graphics", "MPS"};

// "The number of elements might change in time. Allocate more space." We
// allocate count*2+5 (as nvitop does) and retry while the list keeps growing.
constexpr int kProcessListAttempts = 4;
unsigned process_capacity(unsigned count) {
  return count * 2 + 5;
}

// Legacy buffers get room for the widest layout any driver wrote (32 bytes),
// so a driver that writes more than its symbol's stride cannot overrun them.
constexpr std::size_t kWidestProcessEntry = sizeof(nvmlProcessDetail_v1_t);

template <typename Fn>
NvmlSymbol<Fn> resolve(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* address = dlsym(handle, name)) {
      return NvmlSymbol<Fn>{reinterpret_cast<Fn>(address), name};
    }
  }
  return {};
}

// `names`: the _v3, _v2 and unsuffixed exported names, newest first. _v3 and _v2
// take 24-byte entries, the unsuffixed call 16-byte ones (anchors.md b.4).
NvmlProcessListSymbol resolve_process_list(void* handle, const std::array<const char*, 3>& names) {
  constexpr std::array<std::size_t, 3> strides{
      sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v1_t)};
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (void* address = dlsym(handle, names[i])) {
      return {{reinterpret_cast<nvmlDeviceGetRunningProcesses_fn>(address), names[i]}, strides[i]};
    }
  }
  return {};
}

// Conditions under which an optional datum is simply absent.
bool means_unavailable(nvmlReturn_t rc) {
  return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND;
}

// A versioned-struct call this driver does not understand: use the older call.
bool means_try_older(nvmlReturn_t rc) {
  return rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH || rc == NVML_ERROR_FUNCTION_NOT_FOUND ||
         rc == NVML_ERROR_NOT_SUPPORTED;
}

// Copies a NUL-terminated string from a fixed NVML buffer that might lack the NUL.
template <std::size_t N>
std::string from_buffer(const char (&buffer)[N]) {
  return std::string(buffer, std::find(buffer, buffer + N, '\0'));
}

}  // namespace

void NvmlLibrary::DlClose::operator()(void* handle) const {
  if (handle != nullptr) dlclose(handle);
}

NvmlLibrary::NvmlLibrary(std::unique_ptr<void, DlClose> handle, NvmlSymbols symbols)
    : handle_(std::move(handle)), sym_(symbols) {
  forget_mig_modes();
}

NvmlLibrary::NvmlLibrary(NvmlLibrary&& other) noexcept
    : handle_(std::move(other.handle_)),
      sym_(other.sym_),
      initialized_(std::exchange(other.initialized_, false)),
      memory_v2_unusable_(other.memory_v2_unusable_.load()),
      detail_list_unusable_(other.detail_list_unusable_.load()) {
  forget_mig_modes();
}

NvmlLibrary& NvmlLibrary::operator=(NvmlLibrary&& other) noexcept {
  if (this != &other) {
    shutdown();
    handle_ = std::move(other.handle_);
    sym_ = other.sym_;
    initialized_ = std::exchange(other.initialized_, false);
    memory_v2_unusable_ = other.memory_v2_unusable_.load();
    detail_list_unusable_ = other.detail_list_unusable_.load();
    forget_mig_modes();
  }
  return *this;
}

void NvmlLibrary::forget_mig_modes() {
  for (auto& m : mig_mode_) m = -1;
}

NvmlLibrary::~NvmlLibrary() {
  shutdown();
}

Result<NvmlLibrary> NvmlLibrary::load(const std::string& path) {
  dlerror();
  std::unique_ptr<void, DlClose> handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!handle) {
    const char* why = dlerror();
    return fail(fmt::format(
        "cannot load NVML from '{}' ({}): no NVIDIA driver seems to be installed (or point "
        "--nvml-library / GPUREAP_NVML_LIBRARY at libnvidia-ml.so.1)",
        path, why != nullptr ? why : "unknown dlopen error"));
  }
  void* h = handle.get();
  NvmlSymbols s;
  s.init = resolve<nvmlInit_fn>(h, {"nvmlInit_v2", "nvmlInit"});
  s.shutdown = resolve<nvmlShutdown_fn>(h, {"nvmlShutdown"});
  s.error_string = resolve<nvmlErrorString_fn>(h, {"nvmlErrorString"});
  s.device_count =
      resolve<nvmlDeviceGetCount_fn>(h, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  s.handle_by_index = resolve<nvmlDeviceGetHandleByIndex_fn>(
      h, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  s.uuid = resolve<nvmlDeviceGetString_fn>(h, {"nvmlDeviceGetUUID"});
  s.pci_info = resolve<nvmlDeviceGetPciInfo_fn>(
      h, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"});
  s.memory_v2 = resolve<nvmlDeviceGetMemoryInfo_v2_fn>(h, {"nvmlDeviceGetMemoryInfo_v2"});
  s.memory_v1 = resolve<nvmlDeviceGetMemoryInfo_fn>(h, {"nvmlDeviceGetMemoryInfo"});
  s.process_detail_list = resolve<nvmlDeviceGetRunningProcessDetailList_fn>(
      h, {"nvmlDeviceGetRunningProcessDetailList"});
  s.process_lists[0] = resolve_process_list(
      h, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
          "nvmlDeviceGetComputeRunningProcesses"});
  s.process_lists[1] = resolve_process_list(
      h, {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
          "nvmlDeviceGetGraphicsRunningProcesses"});
  s.process_lists[2] = resolve_process_list(
      h, {"nvmlDeviceGetMPSComputeRunningProcesses_v3",
          "nvmlDeviceGetMPSComputeRunningProcesses_v2", "nvmlDeviceGetMPSComputeRunningProcesses"});
  s.name = resolve<nvmlDeviceGetString_fn>(h, {"nvmlDeviceGetName"});
  s.minor_number = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetMinorNumber"});
  s.persistence_mode =
      resolve<nvmlDeviceGetPersistenceMode_fn>(h, {"nvmlDeviceGetPersistenceMode"});
  s.utilization =
      resolve<nvmlDeviceGetUtilizationRates_fn>(h, {"nvmlDeviceGetUtilizationRates"});
  s.temperature = resolve<nvmlDeviceGetTemperature_fn>(h, {"nvmlDeviceGetTemperature"});
  s.power_usage = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetPowerUsage"});
  s.power_limit = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetEnforcedPowerLimit"});
  s.clock_event_reasons = resolve<nvmlDeviceGetUlonglong_fn>(
      h, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  s.ecc_errors = resolve<nvmlDeviceGetTotalEccErrors_fn>(h, {"nvmlDeviceGetTotalEccErrors"});
  s.process_utilization =
      resolve<nvmlDeviceGetProcessUtilization_fn>(h, {"nvmlDeviceGetProcessUtilization"});
  s.processes_utilization_info = resolve<nvmlDeviceGetProcessesUtilizationInfo_fn>(
      h, {"nvmlDeviceGetProcessesUtilizationInfo"});
  s.driver_version = resolve<nvmlSystemGetDriverVersion_fn>(h, {"nvmlSystemGetDriverVersion"});
  s.cuda_driver_version = resolve<nvmlSystemGetCudaDriverVersion_fn>(
      h, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  s.mig_mode = resolve<nvmlDeviceGetMigMode_fn>(h, {"nvmlDeviceGetMigMode"});
  s.max_mig_devices = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetMaxMigDeviceCount"});
  s.mig_handle_by_index = resolve<nvmlDeviceGetMigDeviceHandleByIndex_fn>(
      h, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  s.gpu_instance_id = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetGpuInstanceId"});
  s.compute_instance_id = resolve<nvmlDeviceGetUint_fn>(h, {"nvmlDeviceGetComputeInstanceId"});

  const std::pair<bool, const char*> required[] = {
      {bool(s.init), "nvmlInit_v2 (or nvmlInit)"},
      {bool(s.shutdown), "nvmlShutdown"},
      {bool(s.error_string), "nvmlErrorString"},
      {bool(s.device_count), "nvmlDeviceGetCount_v2 (or nvmlDeviceGetCount)"},
      {bool(s.handle_by_index), "nvmlDeviceGetHandleByIndex_v2 (or nvmlDeviceGetHandleByIndex)"},
      {bool(s.uuid), "nvmlDeviceGetUUID"},
      {bool(s.pci_info), "nvmlDeviceGetPciInfo_v3 (or _v2, or unversioned)"},
      {s.memory_v2 || s.memory_v1, "nvmlDeviceGetMemoryInfo_v2 (or nvmlDeviceGetMemoryInfo)"},
  };
  for (const auto& [present, what] : required) {
    if (!present) {
      return fail(fmt::format("'{}' is not a usable NVML library: it lacks {}", path, what));
    }
  }
  return NvmlLibrary(std::move(handle), s);
}

NvmlLibrary NvmlLibrary::from_symbols(NvmlSymbols symbols) {
  return NvmlLibrary(std::unique_ptr<void, DlClose>(), symbols);
}

Error NvmlLibrary::source_error(const char* call, std::optional<unsigned> gpu,
                              nvmlReturn_t rc) const {
  const char* text = sym_.error_string ? sym_.error_string.fn(rc) : nullptr;
  std::string why = text != nullptr ? std::string(text) : fmt::format("NVML error {}", rc);
  if (gpu) return Error{fmt::format("{}(GPU {}): {}", call, *gpu, why)};
  return Error{fmt::format("{}: {}", call, why)};
}

Result<void> NvmlLibrary::init() {
  if (initialized_) return {};
  if (nvmlReturn_t rc = sym_.init.fn(); rc != NVML_SUCCESS) {
    return std::unexpected(source_error(sym_.init.name, std::nullopt, rc));
  }
  forget_mig_modes();
  initialized_ = true;
  return {};
}

void NvmlLibrary::shutdown() {
  if (initialized_ && sym_.shutdown) sym_.shutdown.fn();
  initialized_ = false;
}

std::string NvmlLibrary::driver_version() {
  if (!sym_.driver_version) return {};
  char buffer[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (sym_.driver_version.fn(buffer, sizeof buffer) != NVML_SUCCESS) return {};
  return from_buffer(buffer);
}

std::string NvmlLibrary::cuda_version() {
  int version = 0;
  if (!sym_.cuda_driver_version || sym_.cuda_driver_version.fn(&version) != NVML_SUCCESS ||
      version <= 0)
    return {};
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

Result<unsigned> NvmlLibrary::device_count() {
  unsigned count = 0;
  if (nvmlReturn_t rc = sym_.device_count.fn(&count); rc != NVML_SUCCESS) {
    return std::unexpected(source_error(sym_.device_count.name, std::nullopt, rc));
  }
  return count;
}

Result<nvmlDevice_t> NvmlLibrary::device(unsigned index) {
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t rc = sym_.handle_by_index.fn(index, &dev); rc != NVML_SUCCESS) {
    return std::unexpected(source_error(sym_.handle_by_index.name, index, rc));
  }
  return dev;
}

Result<void> NvmlLibrary::read_identity(nvmlDevice_t dev, GpuInfo& gpu) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (nvmlReturn_t rc = sym_.uuid.fn(dev, uuid, sizeof uuid); rc != NVML_SUCCESS) {
    return std::unexpected(source_error(sym_.uuid.name, gpu.id.index, rc));
  }
  gpu.uuid = from_buffer(uuid);
  nvmlPciInfo_t pci{};
  if (nvmlReturn_t rc = sym_.pci_info.fn(dev, &pci); rc != NVML_SUCCESS) {
    return std::unexpected(source_error(sym_.pci_info.name, gpu.id.index, rc));
  }
  gpu.pci_bus_id = from_buffer(pci.busId);
  return {};
}

Result<std::optional<GpuMemory>> NvmlLibrary::read_memory(nvmlDevice_t dev, unsigned index) {
  if (sym_.memory_v2 && !memory_v2_unusable_) {
    // The version must be nvmlMemory_v2 (size | 2 << 24), not 2 (anchors.md b.5).
    nvmlMemory_v2_t m{};
    m.version = nvmlMemory_v2;
    nvmlReturn_t rc = sym_.memory_v2.fn(dev, &m);
    if (rc == NVML_SUCCESS) {
      if (m.total == 0) return std::optional<GpuMemory>();  // iGPU / UMA: no own memory
      return GpuMemory{m.total, m.used, m.reserved};
    }
    if (!means_try_older(rc)) {
      return std::unexpected(source_error(sym_.memory_v2.name, index, rc));
    }
    // NOT_SUPPORTED may be one device's answer; a version mismatch is the driver's.
    if (rc != NVML_ERROR_NOT_SUPPORTED) memory_v2_unusable_ = true;
  }
  if (!sym_.memory_v1) return std::optional<GpuMemory>();
  nvmlMemory_t m{};
  nvmlReturn_t rc = sym_.memory_v1.fn(dev, &m);
  if (means_unavailable(rc)) return std::optional<GpuMemory>();
  if (rc != NVML_SUCCESS) return std::unexpected(source_error(sym_.memory_v1.name, index, rc));
  if (m.total == 0) return std::optional<GpuMemory>();
  // v1 "used" includes driver-reserved memory; the reserved part is unknown.
  return GpuMemory{m.total, m.used, std::nullopt};
}

Result<std::optional<std::vector<GpuProcess>>> NvmlLibrary::read_detail_list(nvmlDevice_t dev,
                                                                             unsigned index,
                                                                             ProcessKind kind) {
  const auto k = static_cast<std::size_t>(kind);
  nvmlProcessDetailList_v1_t list{};
  list.version = nvmlProcessDetailList_v1;
  list.mode = kDetailListModes[k];
  std::vector<nvmlProcessDetail_v1_t> entries;
  nvmlReturn_t rc = sym_.process_detail_list.fn(dev, &list);
  for (int attempt = 0; attempt < kProcessListAttempts; ++attempt) {
    if (rc == NVML_SUCCESS) {
      std::vector<GpuProcess> processes;
      const unsigned n = list.procArray == nullptr ? 0 : list.numProcArrayEntries;
      for (unsigned i = 0; i < n && i < entries.size(); ++i) {
        const nvmlProcessDetail_v1_t& e = entries[i];
        if (e.pid == 0 || e.pid > kMaxPlausiblePid) {
          return fail(fmt::format("{}(GPU {}): implausible {} process entry with pid {}",
                                  sym_.process_detail_list.name, index, kKindNames[k], e.pid));
        }
        processes.push_back(GpuProcess{e.pid, nvml_bytes(e.usedGpuMemory), kind});
      }
      return processes;
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
    entries.assign(process_capacity(list.numProcArrayEntries), nvmlProcessDetail_v1_t{});
    list.numProcArrayEntries = static_cast<unsigned>(entries.size());
    list.procArray = entries.data();
    rc = sym_.process_detail_list.fn(dev, &list);
  }
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    return fail(fmt::format("{}(GPU {}): the {} process list kept growing",
                            sym_.process_detail_list.name, index, kKindNames[k]));
  }
  if (rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
    detail_list_unusable_ = true;
    return read_legacy_list(dev, index, kind);
  }
  if (rc == NVML_ERROR_NOT_SUPPORTED) return read_legacy_list(dev, index, kind);
  return std::unexpected(source_error(sym_.process_detail_list.name, index, rc));
}

Result<std::optional<std::vector<GpuProcess>>> NvmlLibrary::read_legacy_list(nvmlDevice_t dev,
                                                                             unsigned index,
                                                                             ProcessKind kind) {
  const NvmlProcessListSymbol& sym = sym_.process_lists[static_cast<std::size_t>(kind)];
  if (!sym.call) return std::optional<std::vector<GpuProcess>>();
  unsigned count = 0;
  std::vector<std::byte> buffer;
  nvmlReturn_t rc = sym.call.fn(dev, &count, nullptr);
  for (int attempt = 0; attempt < kProcessListAttempts; ++attempt) {
    if (rc == NVML_SUCCESS) {
      if (buffer.empty()) return std::vector<GpuProcess>{};
      auto processes = decode_process_buffer(buffer, count, sym.stride, kind);
      if (!processes) {
        return fail(fmt::format("{}(GPU {}): {}", sym.call.name, index, processes.error().message));
      }
      return std::move(*processes);
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
    const unsigned capacity = process_capacity(count);
    buffer.assign(std::size_t{capacity} * kWidestProcessEntry, kProcessBufferFill);
    count = capacity;
    rc = sym.call.fn(dev, &count, buffer.data());
  }
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
    return fail(fmt::format("{}(GPU {}): the process list kept growing", sym.call.name, index));
  }
  if (means_unavailable(rc)) return std::optional<std::vector<GpuProcess>>();
  return std::unexpected(source_error(sym.call.name, index, rc));
}

Result<std::optional<std::vector<GpuProcess>>> NvmlLibrary::read_processes(nvmlDevice_t dev,
                                                                           unsigned index) {
  std::vector<GpuProcess> all;
  bool any_known = false;
  for (ProcessKind kind : {ProcessKind::compute, ProcessKind::graphics, ProcessKind::mps}) {
    auto list = sym_.process_detail_list && !detail_list_unusable_
                    ? read_detail_list(dev, index, kind)
                    : read_legacy_list(dev, index, kind);
    if (!list) return std::unexpected(list.error());
    if (!*list) continue;
    any_known = true;
    all.insert(all.end(), (*list)->begin(), (*list)->end());
  }
  if (!any_known) return std::optional<std::vector<GpuProcess>>();
  return merge_processes(all);
}

void NvmlLibrary::query_gpu_into(unsigned index, GpuInfo& gpu, std::vector<Error>& errors,
                                 const std::function<void(const GpuInfo&)>& on_identity) {
  gpu.id.index = index;
  auto dev = device(index);
  if (!dev) {
    errors.push_back(dev.error());
    return;
  }
  if (auto identity = read_identity(*dev, gpu); !identity) errors.push_back(identity.error());
  if (sym_.name) {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (sym_.name.fn(*dev, name, sizeof name) == NVML_SUCCESS) gpu.name = from_buffer(name);
  }
  if (sym_.minor_number) {
    unsigned minor = 0;
    if (sym_.minor_number.fn(*dev, &minor) == NVML_SUCCESS) gpu.minor = minor;
  }
  // Identity answers even for a lost GPU; what follows may not return at all.
  if (on_identity) on_identity(gpu);
  if (sym_.persistence_mode) {
    nvmlEnableState_t mode = 0;
    if (sym_.persistence_mode.fn(*dev, &mode) == NVML_SUCCESS) {
      gpu.persistence_mode = mode == static_cast<nvmlEnableState_t>(NVML_FEATURE_ENABLED);
    }
  }
  // Sensors belong to the physical GPU (MIG mode too); "not supported" is nullopt.
  if (sym_.temperature) {
    unsigned celsius = 0;
    if (sym_.temperature.fn(*dev, NVML_TEMPERATURE_GPU, &celsius) == NVML_SUCCESS)
      gpu.temperature_c = celsius;
  }
  if (sym_.power_usage) {
    unsigned milliwatts = 0;
    if (sym_.power_usage.fn(*dev, &milliwatts) == NVML_SUCCESS) gpu.power_mw = milliwatts;
  }
  // Card health, as nvidia-smi -q shows it; "not supported" (no ECC on the card, a vGPU)
  // is nullopt, never 0.
  if (sym_.power_limit) {
    unsigned milliwatts = 0;
    if (sym_.power_limit.fn(*dev, &milliwatts) == NVML_SUCCESS) gpu.power_limit_mw = milliwatts;
  }
  if (sym_.clock_event_reasons) {
    unsigned long long reasons = 0;
    if (sym_.clock_event_reasons.fn(*dev, &reasons) == NVML_SUCCESS)
      gpu.clock_event_reasons = reasons;
  }
  if (sym_.ecc_errors) {
    unsigned long long count = 0;
    if (sym_.ecc_errors.fn(*dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count) ==
        NVML_SUCCESS)
      gpu.ecc_uncorrected = count;
  }
  // In MIG mode memory and processes are read per MIG device: the physical GPU's own
  // figures are aggregates that need privileges (and fail inside a container), and
  // utilization is not available.
  if (mig_enabled(*dev, index)) {
    gpu.mig_mode = true;
    read_mig_devices(*dev, gpu, errors);
    return;
  }
  if (auto memory = read_memory(*dev, index); memory) {
    gpu.memory = *memory;
  } else {
    errors.push_back(memory.error());
  }
  if (auto processes = read_processes(*dev, index); processes) {
    gpu.processes_known = processes->has_value();
    if (*processes) gpu.processes = std::move(**processes);
  } else {
    errors.push_back(processes.error());
  }
  if (auto rates = read_utilization(*dev)) {
    gpu.utilization_gpu = rates->gpu;
    gpu.utilization_memory = rates->memory;
  }
  read_process_utilization(*dev, gpu.processes);
}

namespace {

// One per-process sample of either call, as the hint reads it.
struct UtilSample {
  unsigned pid;
  unsigned long long time;  // microseconds
  unsigned sm;
  unsigned mem;
};

// A call's samples: nullopt when it gave no answer (absent, not supported, a version
// it refused, a list that grew between the calls), so that another call may be asked;
// an empty list when it answered that there is no sample (NOT_FOUND).
using Samples = std::optional<std::vector<UtilSample>>;

// nvmlDeviceGetProcessesUtilizationInfo (r545+, the one Blackwell answers).
Samples samples_from_info(const NvmlSymbols& sym, nvmlDevice_t dev) {
  if (!sym.processes_utilization_info) return std::nullopt;
  nvmlProcessesUtilizationInfo_v1_t info{nvmlProcessesUtilizationInfo_v1, 0, 0, nullptr};
  nvmlReturn_t rc = sym.processes_utilization_info.fn(dev, &info);
  if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && info.processSamplesCount == 0))
    return std::vector<UtilSample>{};
  if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS) return std::nullopt;
  std::vector<nvmlProcessUtilizationInfo_v1_t> raw(info.processSamplesCount);
  info = {nvmlProcessesUtilizationInfo_v1, static_cast<unsigned>(raw.size()), 0, raw.data()};
  if (sym.processes_utilization_info.fn(dev, &info) != NVML_SUCCESS) return std::nullopt;
  std::vector<UtilSample> out;
  for (std::size_t i = 0; i < std::min<std::size_t>(info.processSamplesCount, raw.size()); ++i)
    out.push_back({raw[i].pid, raw[i].timeStamp, raw[i].smUtil, raw[i].memUtil});
  return out;
}

// nvmlDeviceGetProcessUtilization, the older call (NOT_SUPPORTED on Blackwell).
Samples samples_from_legacy(const NvmlSymbols& sym, nvmlDevice_t dev) {
  if (!sym.process_utilization) return std::nullopt;
  unsigned count = 0;
  nvmlReturn_t rc = sym.process_utilization.fn(dev, nullptr, &count, 0);
  if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0))
    return std::vector<UtilSample>{};
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
  std::vector<nvmlProcessUtilizationSample_t> raw(count);
  if (sym.process_utilization.fn(dev, raw.data(), &count, 0) != NVML_SUCCESS) return std::nullopt;
  std::vector<UtilSample> out;
  for (std::size_t i = 0; i < std::min<std::size_t>(count, raw.size()); ++i)
    out.push_back({raw[i].pid, raw[i].timeStamp, raw[i].smUtil, raw[i].memUtil});
  return out;
}

}  // namespace

// A hint only: each listed process's latest sample, from the newer call when the driver
// has it and answers, else from the older one; anything short of an answer leaves
// nullopt. No rule reads it.
void NvmlLibrary::read_process_utilization(nvmlDevice_t dev,
                                           std::vector<GpuProcess>& processes) const {
  if (processes.empty()) return;
  Samples samples = samples_from_info(sym_, dev);
  if (!samples) samples = samples_from_legacy(sym_, dev);
  if (!samples) return;
  for (GpuProcess& p : processes) {
    const UtilSample* latest = nullptr;
    for (const auto& sample : *samples)
      if (sample.pid == p.pid && (!latest || sample.time >= latest->time)) latest = &sample;
    if (!latest) continue;
    p.sm_percent = std::min(latest->sm, 100U);
    p.mem_percent = std::min(latest->mem, 100U);
  }
}

// Optional evidence (ghost GPUs): a GPU or a driver that cannot say is nullopt,
// never an error.
std::optional<nvmlUtilization_t> NvmlLibrary::read_utilization(nvmlDevice_t dev) const {
  if (!sym_.utilization) return std::nullopt;
  nvmlUtilization_t rates{};
  if (sym_.utilization.fn(dev, &rates) != NVML_SUCCESS) return std::nullopt;
  return nvmlUtilization_t{std::min(rates.gpu, 100U), std::min(rates.memory, 100U)};
}

bool NvmlLibrary::mig_enabled(nvmlDevice_t dev, unsigned index) {
  if (!sym_.mig_mode || !sym_.mig_handle_by_index || !sym_.max_mig_devices) return false;
  if (index < kMigModeCache && mig_mode_[index] >= 0) return mig_mode_[index] == 1;
  unsigned current = 0, pending = 0;
  const nvmlReturn_t rc = sym_.mig_mode.fn(dev, &current, &pending);
  const bool on = rc == NVML_SUCCESS && current == NVML_DEVICE_MIG_ENABLE;
  // Only a definite answer is kept (NOT_SUPPORTED: a GPU without MIG, also definite).
  if (index < kMigModeCache && (rc == NVML_SUCCESS || rc == NVML_ERROR_NOT_SUPPORTED))
    mig_mode_[index] = on ? 1 : 0;
  return on;
}

Result<std::vector<std::pair<nvmlDevice_t, DeviceId>>> NvmlLibrary::mig_handles(nvmlDevice_t dev,
                                                                                unsigned index) {
  unsigned count = 0;
  if (nvmlReturn_t rc = sym_.max_mig_devices.fn(dev, &count); rc != NVML_SUCCESS)
    return std::unexpected(source_error(sym_.max_mig_devices.name, index, rc));
  std::vector<std::pair<nvmlDevice_t, DeviceId>> out;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t mig = nullptr;
    nvmlReturn_t rc = sym_.mig_handle_by_index.fn(dev, i, &mig);
    if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT) continue;  // no device there
    if (rc != NVML_SUCCESS) return std::unexpected(source_error(sym_.mig_handle_by_index.name, index, rc));
    DeviceId id{index, 0u, 0u};
    unsigned gi = 0, ci = 0;
    if (!sym_.gpu_instance_id || sym_.gpu_instance_id.fn(mig, &gi) != NVML_SUCCESS ||
        !sym_.compute_instance_id || sym_.compute_instance_id.fn(mig, &ci) != NVML_SUCCESS)
      return fail(fmt::format("MIG device {} of GPU {}: its GPU and compute instance ids are "
                              "unreadable",
                              i, index));
    id.gi = gi;
    id.ci = ci;
    out.emplace_back(mig, id);
  }
  return out;
}

void NvmlLibrary::read_mig_devices(nvmlDevice_t dev, GpuInfo& gpu, std::vector<Error>& errors) {
  const unsigned index = gpu.id.index;
  auto handles = mig_handles(dev, index);
  if (!handles) {
    errors.push_back(handles.error());
    return;
  }
  for (const auto& [mig, id] : *handles) {
    GpuInfo d;
    d.id = id;
    d.parent_uuid = gpu.uuid;
    d.pci_bus_id = gpu.pci_bus_id;
    d.minor = gpu.minor;
    d.persistence_mode = gpu.persistence_mode;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t rc = sym_.uuid.fn(mig, uuid, sizeof uuid); rc == NVML_SUCCESS)
      d.uuid = from_buffer(uuid);
    else
      errors.push_back(source_error(sym_.uuid.name, index, rc));
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (sym_.name && sym_.name.fn(mig, name, sizeof name) == NVML_SUCCESS) d.name = from_buffer(name);
    std::vector<Error> own;
    if (auto memory = read_memory(mig, index); memory)
      d.memory = *memory;
    else
      own.push_back(memory.error());
    if (auto processes = read_processes(mig, index); processes) {
      d.processes_known = processes->has_value();
      if (*processes) d.processes = std::move(**processes);
    } else {
      own.push_back(processes.error());
    }
    for (const Error& e : own) d.problem += (d.problem.empty() ? "" : "; ") + e.message;
    gpu.mig_devices.push_back(std::move(d));
  }
}

GpuInfo NvmlLibrary::query_gpu(unsigned index,
                               const std::function<void(const GpuInfo&)>& on_identity) {
  GpuInfo gpu;
  std::vector<Error> errors;
  query_gpu_into(index, gpu, errors, on_identity);
  for (const Error& e : errors) {
    if (!gpu.problem.empty()) gpu.problem += "; ";
    gpu.problem += e.message;
  }
  return gpu;
}

Result<std::vector<GpuInfo>> NvmlLibrary::query_all(std::vector<std::string>* problems) {
  auto count = device_count();
  if (!count) return std::unexpected(count.error());

  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < *count; ++i) {
    std::vector<Error> errors;
    GpuInfo& gpu = gpus.emplace_back();
    query_gpu_into(i, gpu, errors, {});
    // A per-GPU failure is kept as a problem when the caller collects them.
    if (!errors.empty() && problems == nullptr) return std::unexpected(errors.front());
    for (const Error& e : errors) {
      problems->push_back(e.message);
      if (!gpu.problem.empty()) gpu.problem += "; ";
      gpu.problem += e.message;
    }
  }
  return gpus;
}

Result<unsigned> NvmlLibrary::gpu_count() {
  return device_count();
}

Result<MemoryReading> NvmlLibrary::query_reading(unsigned index) {
  auto dev = device(index);
  if (!dev) return std::unexpected(dev.error());
  MemoryReading reading;
  reading.id.index = index;
  if (mig_enabled(*dev, index)) {
    auto handles = mig_handles(*dev, index);
    if (!handles) return std::unexpected(handles.error());
    for (const auto& [mig, id] : *handles) {
      MemoryReading one;
      one.id = id;
      auto memory = read_memory(mig, index);
      if (!memory) return std::unexpected(memory.error());
      if (*memory) one.used = (*memory)->used;
      auto processes = read_processes(mig, index);
      if (!processes) return std::unexpected(processes.error());
      if (*processes)
        for (const GpuProcess& p : **processes) one.pids.push_back(p.pid);
      reading.mig.push_back(std::move(one));
    }
    return reading;
  }
  auto memory = read_memory(*dev, index);
  if (!memory) return std::unexpected(memory.error());
  if (*memory) reading.used = (*memory)->used;
  auto processes = read_processes(*dev, index);
  if (!processes) return std::unexpected(processes.error());
  if (*processes) {
    for (const GpuProcess& p : **processes) reading.pids.push_back(p.pid);
  }
  if (auto rates = read_utilization(*dev)) reading.utilization_gpu = rates->gpu;
  return reading;
}

Result<std::vector<MemoryReading>> NvmlLibrary::query_memory(const std::vector<unsigned>& indices) {
  auto count = device_count();
  if (!count) return std::unexpected(count.error());
  std::vector<MemoryReading> readings;
  readings.reserve(indices.size());
  for (unsigned index : indices) {
    if (index >= *count) {
      return fail(fmt::format("no GPU with index {}: NVML sees {} GPU{}", index, *count,
                              *count == 1 ? "" : "s"));
    }
    auto reading = query_reading(index);
    if (!reading) return std::unexpected(reading.error());
    readings.push_back(std::move(*reading));
  }
  return readings;
}

}  // namespace gpureap::gpu
