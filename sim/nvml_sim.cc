// libnvidia-ml.so.1 stand-in: the NVML symbols gpureap resolves, answered from a
// simulated node's state directory (see node_config.h and registry.h).
//
// The library is a C ABI loaded by dlopen, so its state is one process-wide
// object (NVML itself keeps the same: an init reference count and device table).
// Nothing here throws across the C boundary: every entry point is guarded.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>
#include <array>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "gpu/nvml_api.h"
#include "sim/node_config.h"
#include "sim/registry.h"

#define NVML_EXPORT extern "C" __attribute__((visibility("default")))

// nvml_api.h only declares the handle type; the simulator owns its definition.
struct nvmlDevice_st {
  unsigned index;
  int mig = -1;  // a MIG device's handle: its position in GpuConfig::mig
};

namespace gpureap::sim {
namespace {

constexpr unsigned kMaxDevices = 64;

enum class Query { identity, state, memory_or_process };

struct Library {
  std::mutex mu;
  int init_count = 0;
  SimPaths paths;
  NodeConfig node;
  struct stat node_stat {};
  std::optional<AllocationTable> allocs;
  std::string last_mode_text;
  std::uint64_t queries = 0;  // memory/process queries since the mode last changed
  std::array<nvmlDevice_st, kMaxDevices> devices{};
  static constexpr unsigned kMaxMig = 7;
  std::array<std::array<nvmlDevice_st, kMaxMig>, kMaxDevices> mig_devices{};
  int session_fd = -1;  // D/sessions/<pid>.lock while initialized (a reset sees the client)
  /// What the caller's device directory gives access to (a container view, `gpureap-sim
  /// container`): the GPUs whose node it holds, in NVML index order, and per GPU the
  /// positions in GpuConfig::mig of the MIG devices whose capabilities it holds. On the
  /// node itself: everything.
  std::vector<unsigned> visible_gpus;
  std::array<std::vector<int>, kMaxDevices> visible_mig{};
};

Library& lib() {
  // Leaked on purpose: a thread may be parked in a hang mode while the process exits.
  static Library* l = new Library;
  return *l;
}

[[noreturn]] void hang_forever() {
  for (;;) ::sleep(3600);
}

Mode current_mode(Library& l) {
  auto text = read_file(l.paths.mode()).value_or("");
  if (text != l.last_mode_text) {
    l.last_mode_text = text;
    l.queries = 0;
  }
  return parse_mode(text).value_or(Mode{});
}

// Re-reads node.json when it was replaced (`gpureap-sim persistence` renames a new one in).
void refresh_node(Library& l) {
  struct stat st {};
  if (::stat(l.paths.node_json().c_str(), &st) != 0) return;
  if (st.st_ino == l.node_stat.st_ino && st.st_mtim.tv_nsec == l.node_stat.st_mtim.tv_nsec &&
      st.st_mtim.tv_sec == l.node_stat.st_mtim.tv_sec)
    return;
  if (auto node = load_node_config(l.paths.node_json());
      node && node->gpus.size() == l.node.gpus.size()) {
    l.node = std::move(*node);
    l.node_stat = st;
  }
}

template <typename F>
nvmlReturn_t guarded(F&& f) {
  try {
    return f();
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

// The driver enumerates only what the caller may open: inside a container given one MIG
// device (nvidia-container-toolkit), the GPU's node and that MIG device's capabilities.
// The caller's device directory is $GPUREAP_DEV_DIR (D/dev when unset); a directory
// other than D/dev is a container's view, and holds what the container was given.
void find_visible(Library& l) {
  const char* env = std::getenv("GPUREAP_DEV_DIR");
  SimPaths caller{l.paths.root};
  bool view = false;
  if (env && *env) {
    std::error_code ec;
    view = !fs::equivalent(fs::path(env), l.paths.dev(), ec);
    // SimPaths puts dev() under root: a root whose dev() is the caller's directory.
    if (view) caller.root = fs::path(env).lexically_normal().parent_path();
  }
  auto exists = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec);
  };
  l.visible_gpus.clear();
  for (const auto& g : l.node.gpus) {
    l.visible_mig[g.index].clear();
    if (is_amd(g)) continue;  // a mixed node's AMD GPU: amdgpu's, not NVML's
    if (view && !exists(caller.gpu_node(g.minor))) continue;
    l.visible_gpus.push_back(g.index);
    for (std::size_t k = 0; k < g.mig.size(); ++k) {
      const auto& m = g.mig[k];
      const bool granted =
          !view || (l.node.cap_devfs
                        ? exists(caller.cap_node(m.gi_cap)) && exists(caller.cap_node(m.ci_cap))
                        : exists(caller.capability_file(g.minor, m.gi, m.ci)));
      if (granted) l.visible_mig[g.index].push_back(static_cast<int>(k));
    }
  }
}

nvmlReturn_t do_init() {
  Library& l = lib();
  std::unique_lock lock(l.mu);
  auto dir = sim_dir_from_env();
  if (!dir) return NVML_ERROR_DRIVER_NOT_LOADED;
  SimPaths paths{*dir};
  auto mode = parse_mode(read_file(paths.mode()).value_or("")).value_or(Mode{});
  if (mode.kind == Mode::Kind::hang_init) {
    lock.unlock();
    hang_forever();
  }
  if (mode.kind == Mode::Kind::init_fail)
    return mode.init_fail_unknown ? NVML_ERROR_UNKNOWN : NVML_ERROR_DRIVER_NOT_LOADED;
  if (l.init_count > 0) {
    ++l.init_count;
    return NVML_SUCCESS;
  }
  struct stat st {};
  if (::stat(paths.node_json().c_str(), &st) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
  auto node = load_node_config(paths.node_json());
  if (!node || node->gpus.size() > kMaxDevices) return NVML_ERROR_DRIVER_NOT_LOADED;
  l.paths = paths;
  l.node = std::move(*node);
  l.node_stat = st;
  l.allocs.emplace(paths);
  for (unsigned i = 0; i < kMaxDevices; ++i) {
    l.devices[i].index = i;
    for (unsigned k = 0; k < Library::kMaxMig; ++k) l.mig_devices[i][k] = {i, static_cast<int>(k)};
  }
  find_visible(l);
  l.init_count = 1;
  l.session_fd = open_nvml_session(paths);
  return NVML_SUCCESS;
}

// The common prologue of a device query: initialized? valid handle? failure mode?
// On success, `lock` is held and `gpu` points at the device's config.
nvmlReturn_t begin(nvmlDevice_t dev, Query kind, std::unique_lock<std::mutex>& lock,
                   const GpuConfig*& gpu) {
  Library& l = lib();
  lock = std::unique_lock(l.mu);
  if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const bool whole = dev >= l.devices.data() && dev < l.devices.data() + l.node.gpus.size();
  const auto* first_mig = l.mig_devices.front().data();
  const bool mig = dev >= first_mig && dev < first_mig + Library::kMaxMig * kMaxDevices &&
                   dev->index < l.node.gpus.size() && dev->mig >= 0 &&
                   static_cast<std::size_t>(dev->mig) < l.node.gpus[dev->index].mig.size();
  if (!whole && !mig) return NVML_ERROR_INVALID_ARGUMENT;
  gpu = &l.node.gpus[dev->index];
  if (kind == Query::identity) return NVML_SUCCESS;
  Mode mode = current_mode(l);
  if (!mode.applies_to(gpu->index)) return NVML_SUCCESS;
  switch (mode.kind) {
    case Mode::Kind::query_fail:
      return NVML_ERROR_GPU_IS_LOST;
    case Mode::Kind::hang_query:
      if (kind == Query::memory_or_process) {
        lock.unlock();
        hang_forever();
      }
      break;
    case Mode::Kind::fail_after:
      if (kind == Query::memory_or_process && ++l.queries > mode.after)
        return NVML_ERROR_GPU_IS_LOST;
      break;
    default:
      break;
  }
  return NVML_SUCCESS;
}

// A MIG device's handle: its configuration; nullptr for a whole GPU's.
const GpuConfig::Mig* mig_of(nvmlDevice_t dev, const GpuConfig& gpu) {
  return dev->mig >= 0 ? &gpu.mig[static_cast<std::size_t>(dev->mig)] : nullptr;
}

// A GPU in MIG mode answers memory and process queries only per MIG device: its own
// handle's aggregates need privileges, and inside a container they fail like this.
bool parent_of_mig(nvmlDevice_t dev, const GpuConfig& gpu) {
  return dev->mig < 0 && !gpu.mig.empty();
}

GpuUsage usage(const GpuConfig& gpu, nvmlDevice_t dev = nullptr) {
  Library& l = lib();
  const GpuConfig::Mig* m = dev ? mig_of(dev, gpu) : nullptr;
  // A MIG device's memory is its GPU instance's, shared by the GI's compute instances
  // (NVML reports the same figures for each); its process list is its own CI's.
  return summarize(l.allocs->evaluate(gpu.index), gpu.index,
                   m ? std::optional<unsigned>(m->gi) : std::nullopt,
                   m ? std::optional<unsigned>(m->ci) : std::nullopt);
}

nvmlReturn_t copy_string(const std::string& s, char* out, unsigned length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t pci_info(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *pci = nvmlPciInfo_t{};
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", g->pci_bus);
    std::snprintf(pci->busId, sizeof pci->busId, "%s", g->bus_id.c_str());
    pci->domain = 0;
    pci->bus = g->pci_bus;
    pci->device = 0;
    pci->pciDeviceId = 0x233510DE;  // H200 SXM: device 0x2335, vendor 0x10DE
    pci->pciSubSystemId = 0x18BE10DE;
    return NVML_SUCCESS;
  });
}

// The process-list calling convention (nvml.h): *count == 0 or too small →
// INSUFFICIENT_SIZE with the needed count; none → SUCCESS with *count = 0.
template <typename Info>
nvmlReturn_t running_processes(nvmlDevice_t dev, unsigned* count, void* out, bool listed) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::memory_or_process, lock, g); r != NVML_SUCCESS) return r;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (parent_of_mig(dev, *g)) return NVML_ERROR_NO_PERMISSION;
    std::vector<GpuUsage::Process> procs;
    if (listed) procs = usage(*g, dev).processes;
    if (*count < procs.size()) {
      *count = static_cast<unsigned>(procs.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (!procs.empty() && out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto* infos = static_cast<Info*>(out);
    for (std::size_t i = 0; i < procs.size(); ++i) {
      Info info{};
      info.pid = static_cast<unsigned>(procs[i].pid);
      info.usedGpuMemory = procs[i].bytes;
      if constexpr (requires { info.gpuInstanceId; }) {
        const GpuConfig::Mig* m = mig_of(dev, *g);
        info.gpuInstanceId = m ? m->gi : 0xFFFFFFFFU;
        info.computeInstanceId = m ? m->ci : 0xFFFFFFFFU;
      }
      infos[i] = info;
    }
    *count = static_cast<unsigned>(procs.size());
    return NVML_SUCCESS;
  });
}

nvmlReturn_t device_count(unsigned* count) {
  return guarded([&]() -> nvmlReturn_t {
    Library& l = lib();
    std::lock_guard lock(l.mu);
    if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = static_cast<unsigned>(l.visible_gpus.size());
    return NVML_SUCCESS;
  });
}

nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t* dev) {
  return guarded([&]() -> nvmlReturn_t {
    Library& l = lib();
    std::lock_guard lock(l.mu);
    if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (dev == nullptr || index >= l.visible_gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &l.devices[l.visible_gpus[index]];
    return NVML_SUCCESS;
  });
}

const char* error_string(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_IN_USE:
      return "GPU is currently in use";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

}  // namespace
}  // namespace gpureap::sim

using namespace gpureap::sim;

NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  return guarded(do_init);
}
NVML_EXPORT nvmlReturn_t nvmlInit() {
  return guarded(do_init);
}
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned /*flags*/) {
  return guarded(do_init);
}

NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  return guarded([]() -> nvmlReturn_t {
    Library& l = lib();
    std::lock_guard lock(l.mu);
    if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (--l.init_count == 0) {
      l.allocs.reset();
      close_nvml_session(l.paths, l.session_fd);
      l.session_fd = -1;
    }
    return NVML_SUCCESS;
  });
}

NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  return error_string(r);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  return guarded([&]() -> nvmlReturn_t {
    Library& l = lib();
    std::lock_guard lock(l.mu);
    if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_string(l.node.driver_version, version, length);
  });
}

// 12080 for "12.8": the CUDA version the simulated driver supports (node.json's
// cuda_version), as nvidia-smi's header shows it.
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return guarded([&]() -> nvmlReturn_t {
    Library& l = lib();
    std::lock_guard lock(l.mu);
    if (l.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = l.node.cuda_version;
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return nvmlSystemGetCudaDriverVersion_v2(version);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  return device_count(count);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned* count) {
  return device_count(count);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* dev) {
  return handle_by_index(index, dev);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t* dev) {
  return handle_by_index(index, dev);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned length) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (const auto* m = mig_of(dev, *g)) return copy_string(m->name, name, length);
    return copy_string(g->name, name, length);
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char* uuid, unsigned length) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (const auto* m = mig_of(dev, *g)) return copy_string(m->uuid, uuid, length);
    return copy_string(g->uuid, uuid, length);
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned* index) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // The caller's NVML index: its place among the GPUs the caller sees.
    const auto& visible = lib().visible_gpus;
    auto it = std::find(visible.begin(), visible.end(), g->index);
    if (it == visible.end()) return NVML_ERROR_INVALID_ARGUMENT;
    *index = static_cast<unsigned>(it - visible.begin());
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned* minor) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = g->minor;
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return pci_info(dev, pci);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return pci_info(dev, pci);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return pci_info(dev, pci);
}

// v1: `used` includes the driver-reserved part of the idle baseline.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* mem) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::memory_or_process, lock, g); r != NVML_SUCCESS) return r;
    if (mem == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (parent_of_mig(dev, *g)) return NVML_ERROR_NO_PERMISSION;
    if (const auto* m = mig_of(dev, *g)) {
      std::uint64_t used = std::min(m->total, usage(*g, dev).counted_bytes);
      *mem = nvmlMemory_t{m->total, m->total - used, used};
      return NVML_SUCCESS;
    }
    std::uint64_t used = std::min(g->total, g->baseline + usage(*g).counted_bytes);
    *mem = nvmlMemory_t{g->total, g->total - used, used};
    return NVML_SUCCESS;
  });
}

// v2 separates `reserved`; like the real driver, the version field must be the
// full NVML_STRUCT_VERSION (0x02000028), not 2.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t* mem) {
  return guarded([&]() -> nvmlReturn_t {
    if (mem == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (mem->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::memory_or_process, lock, g); r != NVML_SUCCESS) return r;
    if (parent_of_mig(dev, *g)) return NVML_ERROR_NO_PERMISSION;
    if (const auto* m = mig_of(dev, *g)) {
      const std::uint64_t used = std::min(m->total, usage(*g, dev).counted_bytes);
      mem->total = m->total;
      mem->reserved = 0;
      mem->used = used;
      mem->free = m->total - used;
      return NVML_SUCCESS;
    }
    std::uint64_t used_v1 = std::min(g->total, g->baseline + usage(*g).counted_bytes);
    std::uint64_t reserved = std::min(g->reserved, used_v1);
    mem->total = g->total;
    mem->reserved = reserved;
    mem->used = used_v1 - reserved;
    mem->free = g->total - used_v1;
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned* count,
                                                                 void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned* count,
                                                                 void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned* count,
                                                              void* infos) {
  return running_processes<nvmlProcessInfo_v1_t>(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev, unsigned* count,
                                                                  void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t dev,
                                                                    unsigned* count, void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, false);
}

// Older names of the empty lists, for loaders that fall back through versions.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t dev, unsigned* count,
                                                                  void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t dev, unsigned* count,
                                                               void* infos) {
  return running_processes<nvmlProcessInfo_v1_t>(dev, count, infos, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t dev,
                                                                    unsigned* count, void* infos) {
  return running_processes<nvmlProcessInfo_v2_t>(dev, count, infos, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t dev, unsigned* count,
                                                                 void* infos) {
  return running_processes<nvmlProcessInfo_v1_t>(dev, count, infos, false);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t dev,
                                                               nvmlProcessDetailList_v1_t* list) {
  return guarded([&]() -> nvmlReturn_t {
    if (list == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (list->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (list->mode > 2) return NVML_ERROR_INVALID_ARGUMENT;
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::memory_or_process, lock, g); r != NVML_SUCCESS) return r;
    if (parent_of_mig(dev, *g)) return NVML_ERROR_NO_PERMISSION;
    std::vector<GpuUsage::Process> procs;
    if (list->mode == 0) procs = usage(*g, dev).processes;  // 1 graphics, 2 MPS: none here
    const GpuConfig::Mig* m = mig_of(dev, *g);
    if (list->numProcArrayEntries < procs.size()) {
      list->numProcArrayEntries = static_cast<unsigned>(procs.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (!procs.empty() && list->procArray == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (std::size_t i = 0; i < procs.size(); ++i) {
      list->procArray[i] = nvmlProcessDetail_v1_t{static_cast<unsigned>(procs[i].pid),
                                                  procs[i].bytes, m ? m->gi : 0xFFFFFFFFU,
                                                  m ? m->ci : 0xFFFFFFFFU, 0};
    }
    list->numProcArrayEntries = static_cast<unsigned>(procs.size());
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, nvmlEnableState_t* mode) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::state, lock, g); r != NVML_SUCCESS) return r;
    if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_node(lib());
    g = &lib().node.gpus[dev->index];
    *mode = g->persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

namespace gpureap::sim {
namespace {

// A live holder makes its GPU busy (`hold --util N`); a ghost keeps it busy after
// its holder died (`hold --ghost`), with no memory and no process, until a reset.
nvmlReturn_t utilization_rates(nvmlDevice_t dev, nvmlUtilization_t* rates) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::state, lock, g); r != NVML_SUCCESS) return r;
    if (rates == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig >= 0 || !g->mig.empty()) return NVML_ERROR_NOT_SUPPORTED;  // none with MIG on
    GpuUsage u = usage(*g);
    count_ghost_reads(lib().paths, u);
    *rates = nvmlUtilization_t{u.utilization, u.utilization / 2};
    return NVML_SUCCESS;
  });
}

}  // namespace
}  // namespace gpureap::sim

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev,
                                                       nvmlUtilization_t* rates) {
  return gpureap::sim::utilization_rates(dev, rates);
}

namespace gpureap::sim {
namespace {

// One sample per listed process: its `hold --util` as SM percent, half of it as memory
// percent (as the GPU's rates), at the moment of the call; NOT_SUPPORTED with MIG on, as
// the real calls, and for the call GpuConfig::process_util says this driver lacks.
struct ProcessSample {
  unsigned pid;
  unsigned long long time;
  unsigned sm;
  unsigned mem;
};
nvmlReturn_t process_samples(nvmlDevice_t dev, bool newer, unsigned long long last_seen,
                             std::vector<ProcessSample>& out) {
  std::unique_lock<std::mutex> lock;
  const GpuConfig* g = nullptr;
  if (auto r = begin(dev, Query::state, lock, g); r != NVML_SUCCESS) return r;
  if (newer && g->process_util == "legacy") return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (g->process_util == "none" || (!newer && g->process_util == "new"))
    return NVML_ERROR_NOT_SUPPORTED;
  if (dev->mig >= 0 || !g->mig.empty()) return NVML_ERROR_NOT_SUPPORTED;
  const auto procs = usage(*g).processes;
  const auto now = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  if (procs.empty() || now <= last_seen) return NVML_ERROR_NOT_FOUND;
  for (const auto& p : procs)
    out.push_back({static_cast<unsigned>(p.pid), now, p.util, p.util / 2});
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace gpureap::sim

NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned* count,
                                                         unsigned long long last_seen) {
  return guarded([&]() -> nvmlReturn_t {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<gpureap::sim::ProcessSample> all;
    if (auto r = gpureap::sim::process_samples(dev, false, last_seen, all); r != NVML_SUCCESS)
      return r;
    if (samples == nullptr || *count < all.size()) {
      *count = static_cast<unsigned>(all.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (std::size_t i = 0; i < all.size(); ++i)
      samples[i] = nvmlProcessUtilizationSample_t{all[i].pid, all[i].time, all[i].sm, all[i].mem, 0, 0};
    *count = static_cast<unsigned>(all.size());
    return NVML_SUCCESS;
  });
}

// Its successor (r545+), a versioned struct: a wrong version is refused as the real
// driver refuses it.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(
    nvmlDevice_t dev, nvmlProcessesUtilizationInfo_v1_t* info) {
  return guarded([&]() -> nvmlReturn_t {
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlProcessesUtilizationInfo_v1)
      return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    std::vector<gpureap::sim::ProcessSample> all;
    if (auto r = gpureap::sim::process_samples(dev, true, info->lastSeenTimeStamp, all);
        r != NVML_SUCCESS)
      return r;
    if (info->procUtilArray == nullptr || info->processSamplesCount < all.size()) {
      info->processSamplesCount = static_cast<unsigned>(all.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (std::size_t i = 0; i < all.size(); ++i)
      info->procUtilArray[i] = nvmlProcessUtilizationInfo_v1_t{
          all[i].time, all[i].pid, all[i].sm, all[i].mem, 0, 0, 0, 0};
    info->processSamplesCount = static_cast<unsigned>(all.size());
    return NVML_SUCCESS;
  });
}

// Sensors (`gpureap-sim sensors`): the physical GPU's, NOT_SUPPORTED when unset.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, unsigned sensor,
                                                  unsigned* celsius) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::state, lock, g); r != NVML_SUCCESS) return r;
    if (celsius == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_node(lib());
    g = &lib().node.gpus[dev->index];
    if (sensor != NVML_TEMPERATURE_GPU || !g->temperature_c) return NVML_ERROR_NOT_SUPPORTED;
    *celsius = *g->temperature_c;
    return NVML_SUCCESS;
  });
}

// A per-GPU reading the node sets (`gpureap-sim sensors`): NOT_SUPPORTED when unset. The
// power draw, and the card's health (issue 53): the power cap, why the clocks are held
// down, ECC errors.
namespace {
template <typename T, typename Field>
nvmlReturn_t gpu_reading(nvmlDevice_t dev, T* out, Field field) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::state, lock, g); r != NVML_SUCCESS) return r;
    if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_node(lib());
    const auto& value = field(lib().node.gpus[dev->index]);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *out = static_cast<T>(*value);
    return NVML_SUCCESS;
  });
}
}  // namespace

NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned* milliwatts) {
  return gpu_reading(dev, milliwatts, [](const GpuConfig& g) { return g.power_mw; });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned* milliwatts) {
  return gpu_reading(dev, milliwatts, [](const GpuConfig& g) { return g.power_limit_mw; });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev,
                                                                unsigned long long* reasons) {
  return gpu_reading(dev, reasons, [](const GpuConfig& g) { return g.clock_event_reasons; });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int type, int counter,
                                                     unsigned long long* count) {
  if (type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter != NVML_VOLATILE_ECC)
    return NVML_ERROR_NOT_SUPPORTED;  // the simulator keeps the one counter gpureap reads
  return gpu_reading(dev, count, [](const GpuConfig& g) { return g.ecc_uncorrected; });
}

// MIG (issue 25): mode, MIG device handles and their instance ids.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned* current,
                                              unsigned* pending) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = g->mig.empty() ? 0 : NVML_DEVICE_MIG_ENABLE;
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned* count) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = Library::kMaxMig;  // as the driver: the most there could be, not how many are
    return NVML_SUCCESS;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned index,
                                                             nvmlDevice_t* mig) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (mig == nullptr || dev->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->mig.empty()) return NVML_ERROR_NOT_SUPPORTED;
    // Only the MIG devices the caller has access to, at indices 0.. (a container given
    // one sees it at index 0); NOT_FOUND past them.
    const auto& visible = lib().visible_mig[dev->index];
    if (index >= visible.size()) return NVML_ERROR_NOT_FOUND;
    *mig = &lib().mig_devices[dev->index][static_cast<unsigned>(visible[index])];
    return NVML_SUCCESS;
  });
}

namespace gpureap::sim {
namespace {

nvmlReturn_t instance_id(nvmlDevice_t dev, unsigned* id, bool compute) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(dev, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const GpuConfig::Mig* m = mig_of(dev, *g);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;  // not a MIG device's handle
    *id = compute ? m->ci : m->gi;
    return NVML_SUCCESS;
  });
}

}  // namespace
}  // namespace gpureap::sim

NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned* id) {
  return gpureap::sim::instance_id(dev, id, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned* id) {
  return gpureap::sim::instance_id(dev, id, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig,
                                                                      nvmlDevice_t* dev) {
  return guarded([&]() -> nvmlReturn_t {
    std::unique_lock<std::mutex> lock;
    const GpuConfig* g = nullptr;
    if (auto r = begin(mig, Query::identity, lock, g); r != NVML_SUCCESS) return r;
    if (dev == nullptr || mig->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &lib().devices[mig->index];
    return NVML_SUCCESS;
  });
}
