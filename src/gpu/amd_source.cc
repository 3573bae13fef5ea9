#include "gpu/amd_source.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "proc/drm_fdinfo.h"
#include "proc/proc_files.h"
#include "util/text.h"

namespace gpureap::gpu {
namespace fs = std::filesystem;
namespace {

std::string topology_dir(const std::string& root) { return root + "/class/kfd/kfd/topology/nodes"; }
std::string kfd_proc_dir(const std::string& root) { return root + "/class/kfd/kfd/proc"; }

std::optional<std::uint64_t> read_amd_uint(const std::string& path) {
  return parse_sysfs_uint(proc::read_small_file(path));
}

// The names in a directory (never following a symlink out of it); empty when unreadable.
std::vector<std::string> amd_names_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  return out;
}

// The PCI address a card's `device` link resolves to: sysfs names the PCI device's
// directory by it (/sys/devices/pci0000:00/0000:0c:00.0).
std::string card_pci_address(const std::string& root, unsigned card) {
  std::error_code ec;
  fs::path dev = fs::canonical(fmt::format("{}/class/drm/card{}/device", root, card), ec);
  return ec ? "" : dev.filename().string();
}

// KFD's per-process VRAM: gpu_id -> (pid, bytes) for every process directory.
// `known`: the directory could be read (it exists on kernels since 5.x).
std::map<std::uint32_t, std::vector<GpuProcess>> kfd_processes(const std::string& root,
                                                               bool* known) {
  std::map<std::uint32_t, std::vector<GpuProcess>> out;
  const std::string dir = kfd_proc_dir(root);
  struct stat st {};
  *known = ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  for (const std::string& name : amd_names_in(dir)) {
    auto pid = parse_sysfs_uint(name);
    if (!pid || *pid == 0 || *pid > 0x7fffffff) continue;
    for (const std::string& file : amd_names_in(dir + "/" + name)) {
      auto gpu_id = vram_file_gpu_id(file);
      if (!gpu_id) continue;
      // A process gone meanwhile (its directory removed by kfd_process_wq_release).
      auto bytes = read_amd_uint(dir + "/" + name + "/" + file);
      // KFD makes a vram_<id> for every GPU the process opened through /dev/kfd (the
      // ROCm runtime opens all it sees): 0 bytes on a GPU is no use of it.
      if (!bytes || *bytes == 0) continue;
      out[*gpu_id].push_back(GpuProcess{static_cast<std::uint32_t>(*pid), bytes,
                                        ProcessKind::compute});
    }
  }
  for (auto& [id, list] : out)
    std::sort(list.begin(), list.end(),
              [](const GpuProcess& a, const GpuProcess& b) { return a.pid < b.pid; });
  return out;
}

std::string amd_trimmed_file(const std::string& path) {
  return std::string(trim(proc::read_small_file(path)));
}

}  // namespace

AmdSource::AmdSource(std::string sysfs_root) : root_(std::move(sysfs_root)) {}

std::vector<AmdSource::Found> AmdSource::find_gpus(std::string* problem) const {
  std::vector<Found> out;
  const std::string topo = topology_dir(root_);
  std::vector<unsigned> nodes;
  for (const std::string& name : amd_names_in(topo))
    if (auto n = parse_sysfs_uint(name); n && *n < 4096) nodes.push_back(static_cast<unsigned>(*n));
  if (nodes.empty()) {
    *problem = fmt::format("no AMD GPU driver: {} lists no node (amdgpu and its KFD not loaded)",
                           topo);
    return out;
  }
  std::sort(nodes.begin(), nodes.end());
  // The cards, by PCI address (card0-DP-1 and the like are connectors, not cards).
  std::vector<std::pair<unsigned, std::string>> cards;
  for (const std::string& name : amd_names_in(root_ + "/class/drm"))
    if (auto n = drm_node_number(name, "card")) cards.emplace_back(*n, card_pci_address(root_, *n));
  std::sort(cards.begin(), cards.end());
  for (unsigned n : nodes) {
    const std::string dir = fmt::format("{}/{}", topo, n);
    auto gpu = parse_kfd_node(n, proc::read_small_file(dir + "/gpu_id"),
                              proc::read_small_file(dir + "/name"),
                              proc::read_small_file(dir + "/properties"));
    if (!gpu) continue;
    Found f;
    f.kfd = std::move(*gpu);
    for (const auto& [card, pci] : cards)
      if (!f.kfd.pci_address.empty() && proc::same_pci_address(pci, f.kfd.pci_address)) {
        f.card = card;
        f.device_dir = fmt::format("{}/class/drm/card{}/device", root_, card);
        break;
      }
    if (!f.card)
      f.problem = fmt::format("no card in {}/class/drm is PCI device {} (KFD node {})", root_,
                              f.kfd.pci_address.empty() ? "?" : f.kfd.pci_address, n);
    out.push_back(std::move(f));
  }
  return out;
}

const std::vector<AmdSource::Found>& AmdSource::known_gpus() {
  if (gpus_.empty()) {
    std::string problem;
    gpus_ = find_gpus(&problem);
  }
  return gpus_;
}

GpuSnapshot AmdSource::snapshot(std::chrono::milliseconds) {
  GpuSnapshot snap;
  std::string problem;
  gpus_ = find_gpus(&problem);
  if (!problem.empty()) {
    snap.state = SourceState::init_failed;
    snap.problem = std::move(problem);
    return snap;
  }
  // amdgpu built out of tree (DKMS, ROCm's amdgpu-dkms) has a version; in-tree has none.
  snap.driver_version = amd_trimmed_file(root_ + "/module/amdgpu/version");
  bool processes_known = false;
  auto processes = kfd_processes(root_, &processes_known);
  bool partial = false;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    const Found& f = gpus_[i];
    GpuInfo info;
    info.id = DeviceId{static_cast<unsigned>(i)};
    info.uuid = amd_uuid(f.kfd.unique_id);
    info.pci_bus_id = f.kfd.pci_address;
    info.minor = f.kfd.render_minor;
    info.name = f.device_dir.empty() ? "" : amd_trimmed_file(f.device_dir + "/product_name");
    if (info.name.empty()) info.name = f.kfd.name.empty() ? "AMD GPU" : "AMD " + f.kfd.name;
    info.problem = f.problem;
    if (!f.device_dir.empty()) {
      auto total = read_amd_uint(f.device_dir + "/mem_info_vram_total");
      auto used = read_amd_uint(f.device_dir + "/mem_info_vram_used");
      if (total && used)
        info.memory = GpuMemory{*total, *used, std::nullopt};
      else
        info.problem = fmt::format("cannot read {}/mem_info_vram_{{total,used}}", f.device_dir);
    }
    info.processes_known = processes_known;
    if (auto it = processes.find(f.kfd.gpu_id); it != processes.end()) info.processes = it->second;
    partial = partial || !info.problem.empty();
    snap.gpus.push_back(std::move(info));
  }
  if (partial) snap.state = SourceState::partial;
  return snap;
}

Result<std::vector<MemoryReading>> AmdSource::memory(const std::vector<DeviceId>& ids,
                                                     std::chrono::milliseconds) {
  const auto& gpus = known_gpus();
  if (gpus.empty())
    return std::unexpected(Error{fmt::format("no AMD GPU in {}", topology_dir(root_))});
  bool known = false;
  auto processes = kfd_processes(root_, &known);
  std::vector<MemoryReading> out;
  for (DeviceId id : ids) {
    MemoryReading r;
    r.id = id;
    if (id.index >= gpus.size() || id.mig()) {
      r.problem = fmt::format("GPU {} is not among the {} AMD GPUs", id, gpus.size());
    } else if (gpus[id.index].device_dir.empty()) {
      r.problem = gpus[id.index].problem;
    } else {
      r.used = read_amd_uint(gpus[id.index].device_dir + "/mem_info_vram_used");
      if (!r.used)
        r.problem = fmt::format("cannot read {}/mem_info_vram_used", gpus[id.index].device_dir);
      if (auto it = processes.find(gpus[id.index].kfd.gpu_id); it != processes.end())
        for (const auto& p : it->second) r.pids.push_back(p.pid);
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool has_amd_gpus(const std::string& sysfs_root) {
  const std::string topo = topology_dir(sysfs_root);
  for (const std::string& name : amd_names_in(topo))
    if (auto id = parse_sysfs_uint(proc::read_small_file(topo + "/" + name + "/gpu_id"));
        id && *id != 0)
      return true;
  return false;
}

std::unique_ptr<GpuSource> make_amd_source(std::string sysfs_root) {
  return std::make_unique<AmdSource>(std::move(sysfs_root));
}

}  // namespace gpureap::gpu
