#include "sim/amd_driver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/close_range.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>
#include <thread>

#include "proc/sim_node_marker.h"
#include "sim/commands.h"
#include "sim/pidfd.h"
#include "sim/proc_stat.h"
#include "sim/registry.h"

namespace gpureap::sim {
namespace {

fs::path kfd_dir(const SimPaths& paths) { return amd_sysfs_root(paths) / "class/kfd/kfd"; }
fs::path pci_dir(const SimPaths& paths, const AmdGpuIds& ids) {
  return amd_sysfs_root(paths) / "devices/pci0000:00" / ids.pci;
}
fs::path driver_pid_file(const SimPaths& paths) { return paths.root / "driver.pid"; }

Result<void> make_plain_node(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + path.string()));
  const int rc = ::ftruncate(fd, 4096);  // one page: holders map it
  ::fchmod(fd, 0666);                    // like /dev/kfd and render nodes: any user opens them
  ::close(fd);
  if (rc != 0) return std::unexpected(Error::from_errno("cannot size " + path.string()));
  return {};
}

Result<void> make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  return {};
}

Result<void> link_to(const fs::path& target, const fs::path& link) {
  std::error_code ec;
  fs::create_symlink(target, link, ec);
  if (ec) return fail(fmt::format("cannot create {}: {}", link.string(), ec.message()));
  return {};
}

std::string properties_text(const AmdGpuIds& ids) {
  // The keys gpureap reads among those kfd_topology.c's node_show prints.
  const unsigned bus = static_cast<unsigned>(std::stoul(ids.pci.substr(5, 2), nullptr, 16));
  return fmt::format(
      "cpu_cores_count 0\nsimd_count 1216\nmem_banks_count 1\ngfx_target_version 90402\n"
      "vendor_id 4098\ndevice_id 29857\nlocation_id {}\ndomain 0\ndrm_render_minor {}\n"
      "hive_id 0\nlocal_mem_size 0\nunique_id {}\nnum_xcc 8\n",
      bus << 8, ids.render_minor, ids.unique_id);
}

// The driver's view: pid -> (GPU index -> bytes) of the KFD directories to show.
using KfdView = std::map<pid_t, std::map<unsigned, std::uint64_t>>;

Result<void> write_kfd_process(const SimPaths& paths, const NodeConfig& node, pid_t pid,
                               const std::map<unsigned, std::uint64_t>& bytes) {
  // Built aside and renamed into place: a reader sees a whole directory or none.
  const fs::path proc = kfd_dir(paths) / "proc";
  const fs::path tmp = proc / fmt::format(".new-{}", pid);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (auto ok = make_dirs(tmp); !ok) return ok;
  if (auto ok = write_file_atomic(tmp / "pasid", fmt::format("{}\n", 32768 + pid % 32768)); !ok)
    return ok;
  // ROCm opens every GPU it sees: KFD has a vram_<id> for each, 0 where it allocated nothing.
  for (const GpuConfig& g : node.gpus) {
    if (!is_amd(g)) continue;  // a mixed node's NVIDIA GPU: not KFD's
    auto it = bytes.find(g.index);
    const std::uint64_t b = it == bytes.end() ? 0 : it->second;
    if (auto ok = write_file_atomic(tmp / fmt::format("vram_{}", amd_gpu_ids(g).gpu_id),
                                    fmt::format("{}\n", b));
        !ok)
      return ok;
  }
  const fs::path dest = proc / std::to_string(pid);
  const fs::path old = proc / fmt::format(".old-{}", pid);
  fs::remove_all(old, ec);
  if (fs::exists(dest, ec)) fs::rename(dest, old, ec);
  fs::rename(tmp, dest, ec);
  if (ec) return fail(fmt::format("cannot write {}: {}", dest.string(), ec.message()));
  fs::remove_all(old, ec);
  return {};
}

// One pass of the driver: memory used per GPU and the KFD process directories.
// Returns whether any allocation is still held or being released.
bool sync_once(const SimPaths& paths, const NodeConfig& node, AllocationTable& table,
               KfdView& shown, std::map<unsigned, std::uint64_t>& used_shown) {
  const auto entries = table.evaluate();
  KfdView want;
  for (const auto& e : entries)
    if (e.state == AllocState::held || e.state == AllocState::releasing)
      want[e.alloc.pid][e.alloc.gpu] += e.alloc.bytes;
  for (const GpuConfig& g : node.gpus) {
    if (!is_amd(g)) continue;
    const std::uint64_t used = g.baseline + summarize(entries, g.index).counted_bytes;
    if (auto it = used_shown.find(g.index); it != used_shown.end() && it->second == used) continue;
    if (write_file_atomic(pci_dir(paths, amd_gpu_ids(g)) / "mem_info_vram_used",
                          fmt::format("{}\n", used)))
      used_shown[g.index] = used;
  }
  for (const auto& [pid, bytes] : want) {
    if (auto it = shown.find(pid); it != shown.end() && it->second == bytes) continue;
    if (write_kfd_process(paths, node, pid, bytes)) shown[pid] = bytes;
  }
  for (auto it = shown.begin(); it != shown.end();) {
    if (want.contains(it->first)) {
      ++it;
      continue;
    }
    std::error_code ec;
    fs::remove_all(kfd_dir(paths) / "proc" / std::to_string(it->first), ec);
    it = shown.erase(it);
  }
  return !want.empty();
}

// The driver of `paths` runs: its pid file names a live process.
bool driver_running(const SimPaths& paths) {
  auto text = read_file(driver_pid_file(paths));
  long long pid = 0;
  unsigned long long start = 0;
  return text && std::sscanf(text->c_str(), "%lld %llu", &pid, &start) == 2 && pid > 0 &&
         static_cast<bool>(PidFd::open_verified(static_cast<pid_t>(pid), start));
}

std::atomic<bool> g_stop{false};
void on_term(int) { g_stop = true; }

}  // namespace

AmdGpuIds amd_gpu_ids(const GpuConfig& gpu) {
  AmdGpuIds ids;
  // Numbered among the node's AMD GPUs (a mixed node's come after its NVIDIA ones).
  const unsigned k = gpu.vendor_index;
  ids.gpu_id = 49389 + 1117 * k;  // KFD's ids are hashes: any distinct non-zero value
  ids.render_minor = 128 + k;
  ids.card = k;
  ids.pci = fmt::format("0000:{:02x}:00.0", gpu.pci_bus);
  ids.unique_id = 0x437aa7577fc75e00ULL + k;
  return ids;
}

fs::path amd_sysfs_root(const SimPaths& paths) { return paths.root / "sys"; }

std::vector<fs::path> amd_holder_nodes(const SimPaths& paths, const GpuConfig& gpu) {
  return {paths.dev() / "kfd",
          paths.dev() / "dri" / fmt::format("renderD{}", amd_gpu_ids(gpu).render_minor)};
}

Result<void> write_amd_tree(const SimPaths& paths, const NodeConfig& node) {
  const fs::path sys = amd_sysfs_root(paths);
  std::error_code ec;
  fs::remove_all(sys, ec);
  for (const fs::path& d : {paths.dev() / "dri", kfd_dir(paths) / "proc",
                            kfd_dir(paths) / "topology/nodes/0", sys / "class/drm"})
    if (auto ok = make_dirs(d); !ok) return ok;
  if (auto ok = make_plain_node(paths.dev() / "kfd"); !ok) return ok;
  if (auto ok = write_file_atomic(paths.dev() / proc::kSimNodeMarkerName,
                                  proc::kSimNodeMarkerContent);
      !ok)
    return ok;
  if (auto ok = write_file_atomic(kfd_dir(paths) / "dev", "240:0\n"); !ok) return ok;
  const fs::path cpu = kfd_dir(paths) / "topology/nodes/0";
  for (const auto& [file, text] : {std::pair{"gpu_id", "0\n"}, std::pair{"name", "\n"},
                                   std::pair{"properties", "cpu_cores_count 96\nsimd_count 0\n"}})
    if (auto ok = write_file_atomic(cpu / file, text); !ok) return ok;
  for (const GpuConfig& g : node.gpus) {
    if (!is_amd(g)) continue;
    const AmdGpuIds ids = amd_gpu_ids(g);
    const fs::path topo = kfd_dir(paths) / fmt::format("topology/nodes/{}", ids.card + 1);
    if (auto ok = make_dirs(topo); !ok) return ok;
    if (auto ok = write_file_atomic(topo / "gpu_id", fmt::format("{}\n", ids.gpu_id)); !ok)
      return ok;
    if (auto ok = write_file_atomic(topo / "name", "gfx942\n"); !ok) return ok;
    if (auto ok = write_file_atomic(topo / "properties", properties_text(ids)); !ok) return ok;
    const fs::path dev = pci_dir(paths, ids);
    const std::string card = fmt::format("card{}", ids.card);
    const std::string render = fmt::format("renderD{}", ids.render_minor);
    for (const auto& [name, minor] : {std::pair{card, ids.card}, std::pair{render, ids.render_minor}}) {
      if (auto ok = make_dirs(dev / "drm" / name); !ok) return ok;
      if (auto ok = write_file_atomic(dev / "drm" / name / "dev", fmt::format("226:{}\n", minor));
          !ok)
        return ok;
      if (auto ok = link_to("../..", dev / "drm" / name / "device"); !ok) return ok;
      if (auto ok = link_to(fs::path("../../devices/pci0000:00") / ids.pci / "drm" / name,
                            sys / "class/drm" / name);
          !ok)
        return ok;
      if (auto ok = make_plain_node(paths.dev() / "dri" / name); !ok) return ok;
    }
    for (const auto& [file, value] :
         {std::pair{std::string("mem_info_vram_total"), fmt::format("{}\n", g.total)},
          std::pair{std::string("mem_info_vram_used"), fmt::format("{}\n", g.baseline)},
          std::pair{std::string("product_name"), g.name + "\n"}})
      if (auto ok = write_file_atomic(dev / file, value); !ok) return ok;
    if (auto ok = write_amd_sensors(paths, g); !ok) return ok;
  }
  return {};
}

Result<void> write_amd_sensors(const SimPaths& paths, const GpuConfig& gpu) {
  const fs::path hwmon = pci_dir(paths, amd_gpu_ids(gpu)) / "hwmon" / "hwmon0";
  if (auto ok = make_dirs(hwmon); !ok) return ok;
  // amdgpu_pm.c: temp1_input in millidegrees Celsius, power1_average in microwatts.
  const std::pair<const char*, std::optional<std::uint64_t>> files[] = {
      {"temp1_input", gpu.temperature_c ? std::optional<std::uint64_t>(*gpu.temperature_c * 1000ULL)
                                        : std::nullopt},
      {"power1_average",
       gpu.power_mw ? std::optional<std::uint64_t>(*gpu.power_mw * 1000ULL) : std::nullopt}};
  for (const auto& [name, value] : files) {
    std::error_code ec;
    if (!value)
      fs::remove(hwmon / name, ec);
    else if (auto ok = write_file_atomic(hwmon / name, fmt::format("{}\n", *value)); !ok)
      return ok;
  }
  return {};
}

Result<void> await_amd_allocation(const SimPaths& paths, const GpuConfig& gpu, pid_t pid) {
  const fs::path file =
      kfd_dir(paths) / "proc" / std::to_string(pid) / fmt::format("vram_{}", amd_gpu_ids(gpu).gpu_id);
  for (int i = 0; i < 2000; ++i) {
    std::error_code ec;
    if (fs::exists(file, ec)) return {};
    // A driver that stopped while idle (run_amd_driver) is started again.
    if (i % 200 == 0)
      if (auto ok = ensure_amd_driver(paths); !ok) return ok;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fail(fmt::format("the simulated amdgpu driver did not show {} within 10 s (is "
                          "`gpureap-sim amd-driver` running? `gpureap-sim node --vendor amd` "
                          "starts it)",
                          file.string()));
}

Result<void> start_amd_driver(const SimPaths& paths) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return fail("cannot find gpureap-sim's own path: " + ec.message());
  fs::remove(driver_pid_file(paths), ec);
  const pid_t first = ::fork();
  if (first < 0) return std::unexpected(Error::from_errno("fork"));
  if (first == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    // The driver outlives the command that started it: no descriptor of the caller's
    // (a test's output pipe would never reach EOF).
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    const std::string dir = paths.root.string();
    ::execl(self.c_str(), "gpureap-sim", "amd-driver", "--dir", dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::waitpid(first, nullptr, 0);
  // Ready when it has written its pid file (after its first pass).
  for (int i = 0; i < 1000; ++i) {
    if (fs::exists(driver_pid_file(paths), ec)) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fail("the simulated amdgpu driver did not start within 5 s");
}

Result<void> ensure_amd_driver(const SimPaths& paths) {
  if (driver_running(paths)) return {};
  return start_amd_driver(paths);
}

void stop_amd_driver(const SimPaths& paths) {
  auto text = read_file(driver_pid_file(paths));
  if (!text) return;
  long long pid = 0;
  unsigned long long start = 0;
  if (std::sscanf(text->c_str(), "%lld %llu", &pid, &start) != 2 || pid <= 0) return;
  if (auto fd = PidFd::open_verified(static_cast<pid_t>(pid), start)) {
    fd.signal(SIGTERM);
    if (!fd.wait_exit(std::chrono::seconds(2))) {
      fd.signal(SIGKILL);
      fd.wait_exit(std::chrono::seconds(2));
    }
  }
  std::error_code ec;
  fs::remove(driver_pid_file(paths), ec);
}

int run_amd_driver(const fs::path& dir) {
  SimPaths paths{dir};
  auto node = load_node_config(paths.node_json());
  if (!node || !has_amd(*node)) {
    print_error(fmt::format("no simulated AMD node in {}", dir.string()));
    return kExitUsage;
  }
  std::signal(SIGTERM, on_term);
  AllocationTable table(paths);
  KfdView shown;
  std::map<unsigned, std::uint64_t> used_shown;
  sync_once(paths, *node, table, shown, used_shown);
  const std::string me = fmt::format("{} {}\n", ::getpid(), self_start_time());
  if (!write_file_atomic(driver_pid_file(paths), me)) return kExitFailure;
  // A node left behind (a test killed before its cleanup) does not keep a driver for
  // ever: it stops after 10 minutes with nothing held; `hold` starts it again.
  constexpr auto kIdleLimit = std::chrono::minutes(10);
  auto busy_at = std::chrono::steady_clock::now();
  while (!g_stop) {
    // The loop's whole job is to play the kernel's part; 10 ms is its reaction time.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::error_code ec;
    if (!fs::exists(paths.node_json(), ec) || read_file(driver_pid_file(paths)) != me) break;
    const auto now = std::chrono::steady_clock::now();
    if (sync_once(paths, *node, table, shown, used_shown)) busy_at = now;
    if (now - busy_at > kIdleLimit) {
      fs::remove(driver_pid_file(paths), ec);
      break;
    }
  }
  return kExitOk;
}

}  // namespace gpureap::sim
