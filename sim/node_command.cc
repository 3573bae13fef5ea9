// `gpureap-sim node`, `mode` and `persistence`: create a node and change it.

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <tuple>

#include "proc/sim_node_marker.h"
#include "sim/amd_driver.h"
#include "sim/commands.h"
#include "sim/proc_stat.h"
#include "sim/registry.h"
#include "util/units.h"

namespace gpureap::sim {
namespace {

fs::path self_exe() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec);
}

// A device node file: regular, one page long, so holders can open and mmap it.
Result<void> make_device_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + path.string()));
  int rc = ::ftruncate(fd, 4096);
  ::fchmod(fd, 0666);  // like /dev/nvidia*: any user may open it
  ::close(fd);
  if (rc != 0) return std::unexpected(Error::from_errno("cannot size " + path.string()));
  return {};
}

Result<void> make_shared_dir(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return fail(fmt::format("cannot create {}: {}", path.string(), ec.message()));
  ::chmod(path.c_str(), 01777);  // holders of any user register here
  return {};
}

std::vector<pid_t> live_registered(const SimPaths& paths) {
  std::vector<pid_t> live;
  for (const auto& r : read_process_records(paths))
    if (holds_resources(r.pid, r.start_time)) live.push_back(r.pid);
  return live;
}

Result<NodeConfig> node_from_options(const NodeOptions& o) {
  if (o.gpus == 0 || o.gpus > 64) return fail("--gpus must be between 1 and 64");
  auto total = parse_size(o.memory, true);
  if (!total) return fail("--memory: " + total.error().message);
  auto baseline = parse_size(o.baseline, true);
  if (!baseline) return fail("--baseline: " + baseline.error().message);
  if (*baseline >= *total) return fail("--baseline must be smaller than --memory");
  std::uint64_t reserved = *baseline > (2ULL << 20U) ? *baseline - (2ULL << 20U) : 0;
  if (!o.reserved.empty()) {
    auto r = parse_size(o.reserved, true);
    if (!r) return fail("--reserved: " + r.error().message);
    if (*r > *baseline) return fail("--reserved is part of the baseline, so at most --baseline");
    reserved = *r;
  }
  if (!o.minors.empty()) {
    if (o.minors.size() != o.gpus)
      return fail(fmt::format("--minors lists {} numbers for {} GPUs", o.minors.size(), o.gpus));
    std::set<unsigned> seen;
    for (unsigned m : o.minors) {
      if (m > 254)
        return fail(fmt::format("minor {} is out of range (0..254; 255 is nvidiactl)", m));
      if (!seen.insert(m).second) return fail(fmt::format("minor {} is listed twice", m));
    }
  }
  if (o.name.empty() || o.name.size() >= 96) return fail("--name must be 1..95 characters");
  auto node = make_node_config(o.gpus, *total, *baseline, reserved, o.minors, o.name,
                          o.persistence == "on");
  for (const std::string& spec : o.mig) {
    // "GPU:N" (N GPU instances, one compute instance each) or "GPU:NxC" (C each).
    unsigned gpu = 0, devices = 0, cis = 1;
    const char* p = spec.data();
    const char* end = spec.data() + spec.size();
    auto number = [&](unsigned& out) {
      auto r = std::from_chars(p, end, out);
      const bool ok = r.ec == std::errc() && r.ptr != p;
      p = r.ptr;
      return ok;
    };
    bool parsed = number(gpu) && p != end && *p++ == ':' && number(devices);
    if (parsed && p != end) parsed = *p++ == 'x' && number(cis);
    parsed = parsed && p == end;
    if (!parsed || devices == 0 || devices > 7 || cis == 0 || cis > 7 / devices ||
        gpu >= o.gpus)
      return fail(fmt::format(
          "--mig {}: expected GPU:N or GPU:NxC with a GPU of the node, N GPU instances in 1..7 "
          "and C compute instances each, at most 7/N",
          spec));
    add_mig_devices(node.gpus[gpu], devices, cis);
  }
  if (o.no_cap_devfs && o.mig.empty()) return fail("--no-cap-devfs needs --mig");
  node.cap_devfs = !o.no_cap_devfs;
  if (o.vendor == "amd") {
    if (!o.mig.empty() || !o.minors.empty() || o.amd_gpus > 0)
      return fail(
          "--vendor amd takes neither --mig, --minors (render minors are 128 + index) nor "
          "--amd-gpus (--gpus counts its GPUs)");
    node.vendor = "amd";
    for (auto& g : node.gpus) g.vendor = "amd";
  } else if (o.amd_gpus > 0) {
    if (o.amd_gpus > 64) return fail("--amd-gpus must be between 0 and 64");
    if (!o.minors.empty()) return fail("--amd-gpus takes no --minors (NVIDIA's are 0..N-1)");
    // A mixed node: the AMD GPUs after the NVIDIA ones, as gpureap numbers them.
    const NodeConfig amd = make_node_config(o.gpus + o.amd_gpus, *total, *baseline, reserved, {},
                                            o.name, o.persistence == "on");
    for (unsigned i = o.gpus; i < o.gpus + o.amd_gpus; ++i) {
      node.gpus.push_back(amd.gpus[i]);
      node.gpus.back().vendor = "amd";
    }
    node.vendor = "mixed";
  }
  number_vendor_gpus(node);
  for (auto& g : node.gpus) {
    if (!is_amd(g)) continue;
    // What gpureap reads of it: ROCm's UUID of KFD's unique_id, the render node's minor.
    const AmdGpuIds ids = amd_gpu_ids(g);
    g.uuid = fmt::format("GPU-{:016x}", ids.unique_id);
    g.minor = ids.render_minor;
    if (o.name == NodeOptions{}.name) g.name = "AMD Instinct MI300X";
  }
  return node;
}

// An AMD node (sim/amd_driver.h): its sysfs tree and device nodes, its driver process.
int finish_amd_node(const SimPaths& paths, const NodeConfig& node) {
  for (auto step : {+[](const SimPaths& p, const NodeConfig& n) { return write_amd_tree(p, n); },
                    +[](const SimPaths& p, const NodeConfig&) {
                      return write_file_atomic(p.mode(), "ok\n");
                    },
                    +[](const SimPaths& p, const NodeConfig& n) {
                      return save_node_config(p.node_json(), n);
                    },
                    +[](const SimPaths& p, const NodeConfig&) { return start_amd_driver(p); }}) {
    if (auto ok = step(paths, node); !ok) {
      print_error(ok.error().message);
      return kExitFailure;
    }
  }
  const auto& g0 = node.gpus.front();
  fmt::print(stderr, "gpureap-sim: AMD node {}: {} x {}, {} each, idle {} used\n",
             paths.root.string(), node.gpus.size(), g0.name, format_bytes(g0.total),
             format_bytes(g0.baseline));
  fmt::print("export GPUREAP_SIM_DIR={}\n", paths.root.string());
  fmt::print("export GPUREAP_DEV_DIR={}\n", paths.dev().string());
  fmt::print("export GPUREAP_SYSFS_ROOT={}\n", amd_sysfs_root(paths).string());
  return kExitOk;
}

// An existing node is recreated only with --force, and never under live holders:
// the exit status of a refusal, nullopt to go on.
std::optional<int> refuse_existing(const SimPaths& paths, bool force) {
  std::error_code ec;
  if (!fs::exists(paths.node_json(), ec)) return std::nullopt;
  if (!force) {
    print_error(fmt::format("{} already holds a simulated node (add --force to recreate it)",
                            paths.root.string()));
    return kExitUsage;
  }
  if (auto live = live_registered(paths); !live.empty()) {
    print_error(
        fmt::format("{} process(es) registered on {} are still alive (first: {}); run "
                    "`gpureap-sim cleanup --dir {}` first",
                    live.size(), paths.root.string(), live.front(), paths.root.string()));
    return kExitFailure;
  }
  return std::nullopt;
}

// --force: remove only what a node consists of, never anything else in D; then the
// directories of a fresh one.
Result<void> fresh_node_dirs(const SimPaths& paths) {
  std::error_code ec;
  stop_amd_driver(paths);
  for (const fs::path& p :
       {paths.dev(), paths.bin(), paths.allocs(), paths.procs(), amd_sysfs_root(paths)})
    fs::remove_all(p, ec);
  for (const fs::path& p : {paths.mode(), paths.smi_log(), paths.cgroups(), paths.node_json()})
    fs::remove(p, ec);

  fs::create_directories(paths.dev(), ec);
  fs::create_directories(paths.bin(), ec);
  for (const auto& dir : {paths.allocs(), paths.procs()})
    if (auto ok = make_shared_dir(dir); !ok) return ok;
  return {};
}

// The NVIDIA device nodes (regular files): nvidiactl, nvidia-uvm, each GPU's, each MIG
// device's capabilities (nodes, or files without devfs) with mig-minors, and the
// marker that lets gpureap accept them.
Result<void> make_nvidia_device_files(const SimPaths& paths, const NodeConfig& node) {
  std::error_code ec;
  std::vector<fs::path> nodes = {paths.dev() / "nvidiactl", paths.dev() / "nvidia-uvm"};
  for (const auto& g : node.gpus)
    if (!is_amd(g)) nodes.push_back(paths.gpu_node(g.minor));
  bool mig = false;
  for (const auto& g : node.gpus)
    for (std::size_t i = 0; i < g.mig.size(); ++i) {
      const auto& m = g.mig[i];
      // The compute instances of one GPU instance share its capability: one node.
      const bool first_of_gi = i == 0 || g.mig[i - 1].gi != m.gi;
      if (node.cap_devfs) {
        if (first_of_gi) nodes.push_back(paths.cap_node(m.gi_cap));
        nodes.push_back(paths.cap_node(m.ci_cap));
      } else {
        if (first_of_gi) nodes.push_back(paths.capability_file(g.minor, m.gi, std::nullopt));
        nodes.push_back(paths.capability_file(g.minor, m.gi, m.ci));
        fs::create_directories(nodes.back().parent_path(), ec);
      }
      mig = true;
    }
  if (mig) {
    fs::create_directories(paths.caps(), ec);
    if (auto ok = write_file_atomic(paths.mig_minors(), mig_minors_text(node)); !ok) return ok;
  }
  for (const auto& p : nodes)
    if (auto ok = make_device_file(p); !ok) return ok;
  // A mixed node's AMD GPUs: the sysfs tree and DRM nodes (its driver starts in run_node).
  if (has_amd(node))
    if (auto ok = write_amd_tree(paths, node); !ok) return ok;
  // The marker that lets gpureap accept these regular files as device nodes
  // (a real /dev has only character devices; src/proc/device_nodes.h).
  return write_file_atomic(paths.dev() / proc::kSimNodeMarkerName, proc::kSimNodeMarkerContent);
}

// D/bin/nvidia-smi (this program), its call log, the driver's mode, node.json.
Result<void> finish_nvidia_node(const SimPaths& paths, const NodeConfig& node) {
  std::error_code ec;
  fs::create_symlink(self_exe(), paths.bin() / "nvidia-smi", ec);
  if (ec)
    return fail(
        fmt::format("cannot create {}: {}", (paths.bin() / "nvidia-smi").string(), ec.message()));
  // Any user's nvidia-smi call is logged, so a test can tell it was (not) called.
  if (int log = ::open(paths.smi_log().c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666); log >= 0) {
    ::fchmod(log, 0666);
    ::close(log);
  }
  if (auto ok = write_file_atomic(paths.mode(), "ok\n"); !ok) return ok;
  return save_node_config(paths.node_json(), node);
}

}  // namespace

void print_error(const std::string& message) {
  fmt::print(stderr, "gpureap-sim: error: {}\n", message);
}

fs::path sim_library_path() {
  fs::path beside = self_exe().parent_path() / "libnvidia-ml.so.1";
  std::error_code ec;
  if (fs::exists(beside, ec)) return beside;
  return GPUREAP_SIM_NVML_PATH;
}

int run_node(const NodeOptions& o) {
  auto node = node_from_options(o);
  if (!node) {
    print_error(node.error().message);
    return kExitUsage;
  }
  std::error_code ec;
  SimPaths paths{fs::absolute(o.dir, ec)};
  if (auto refused = refuse_existing(paths, o.force)) return *refused;
  if (auto ok = fresh_node_dirs(paths); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  if (node->vendor == "amd") return finish_amd_node(paths, *node);
  if (auto ok = make_nvidia_device_files(paths, *node); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  if (auto ok = finish_nvidia_node(paths, *node); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  if (has_amd(*node))
    if (auto ok = start_amd_driver(paths); !ok) {
      print_error(ok.error().message);
      return kExitFailure;
    }
  const auto& g0 = node->gpus.front();
  // Idle memory as gpureap and nvidia-smi read it (NVML's v2 query: the driver's
  // reservation apart), not the v1 figure that counts the reservation as used.
  const std::uint64_t reserved = std::min(g0.reserved, g0.baseline);
  fmt::print(stderr, "gpureap-sim: node {}: {} x {}, {} each, idle {} used ({} reserved by the "
                     "driver)\n",
             paths.root.string(),
             std::count_if(node->gpus.begin(), node->gpus.end(),
                           [](const GpuConfig& g) { return !is_amd(g); }),
             g0.name, format_bytes(g0.total), format_bytes(g0.baseline - reserved),
             format_bytes(reserved));
  // stdout carries only shell lines, so `eval "$(gpureap-sim node ...)"` works.
  fmt::print("export GPUREAP_NVML_LIBRARY={}\n", sim_library_path().string());
  fmt::print("export GPUREAP_SIM_DIR={}\n", paths.root.string());
  fmt::print("export GPUREAP_DEV_DIR={}\n", paths.dev().string());
  if (has_amd(*node)) {
    const auto amd = std::find_if(node->gpus.begin(), node->gpus.end(), is_amd);
    fmt::print(stderr, "gpureap-sim: and {} x {} (GPUs {} and up: AMD's, after NVIDIA's)\n",
               node->gpus.end() - amd, amd->name, amd->index);
    fmt::print("export GPUREAP_SYSFS_ROOT={}\n", amd_sysfs_root(paths).string());
  }
  return kExitOk;
}

int run_mode(const fs::path& dir, const std::vector<std::string>& words,
             std::optional<unsigned> gpu) {
  SimPaths paths{dir};
  auto node = load_node_config(paths.node_json());
  if (!node) {
    print_error(fmt::format("no simulated node in {}", dir.string()));
    return kExitUsage;
  }
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
  if (gpu) text += fmt::format(" gpu={}", *gpu);
  auto mode = parse_mode(text);
  if (!mode) {
    print_error(mode.error().message);
    return kExitUsage;
  }
  if (mode->gpu && *mode->gpu >= node->gpus.size()) {
    print_error(fmt::format("--gpu {} does not exist: the node has {} GPUs", *mode->gpu,
                            node->gpus.size()));
    return kExitUsage;
  }
  if (gpu && !mode->gpu) {
    print_error(fmt::format("--gpu does not apply to mode '{}'", words.front()));
    return kExitUsage;
  }
  if (auto ok = write_file_atomic(paths.mode(), format_mode(*mode) + "\n"); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  return kExitOk;
}

namespace {

// The node's configuration, when `gpu` is one of its GPUs (the commands that change a GPU).
Result<NodeConfig> load_node_with_gpu(const SimPaths& paths, unsigned gpu) {
  auto node = load_node_config(paths.node_json());
  if (!node) return fail(fmt::format("no simulated node in {}", paths.root.string()));
  if (gpu >= node->gpus.size())
    return fail(
        fmt::format("--gpu {} does not exist: the node has {} GPUs", gpu, node->gpus.size()));
  return node;
}

}  // namespace

int run_persistence(const fs::path& dir, unsigned gpu, const std::string& on_off) {
  SimPaths paths{dir};
  auto node = load_node_with_gpu(paths, gpu);
  if (!node) {
    print_error(node.error().message);
    return kExitUsage;
  }
  node->gpus[gpu].persistence = on_off == "on";
  if (auto ok = save_node_config(paths.node_json(), *node); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  return kExitOk;
}

namespace {

// "none" -> nullopt; a whole number -> it (times `scale`); else an error.
Result<std::optional<unsigned>> sensor_value(const std::string& text, unsigned scale,
                                             std::string_view option) {
  if (text == "none") return std::optional<unsigned>();
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > 100000)
    return fail(fmt::format("{} '{}': expected a whole number or none", option, text));
  return std::optional<unsigned>(value * scale);
}

}  // namespace

namespace {

// A health figure: a whole number (0x.. for a bitmask), or none.
Result<std::optional<std::uint64_t>> health_value(const std::string& text, std::string_view option) {
  if (text == "none") return std::optional<std::uint64_t>();
  const bool hex = text.starts_with("0x");
  std::uint64_t value = 0;
  const char* from = text.data() + (hex ? 2 : 0);
  auto [end, ec] = std::from_chars(from, text.data() + text.size(), value, hex ? 16 : 10);
  if (ec != std::errc() || end != text.data() + text.size() || from == end)
    return fail(fmt::format("{} '{}': expected a whole number (0x.. for a bitmask) or none",
                            option, text));
  return std::optional<std::uint64_t>(value);
}

}  // namespace

int run_sensors(const fs::path& dir, unsigned gpu, const SensorValues& values) {
  const std::string& temperature = values.temperature;
  const std::string& power = values.power;
  SimPaths paths{dir};
  auto node = load_node_with_gpu(paths, gpu);
  if (!node) {
    print_error(node.error().message);
    return kExitUsage;
  }
  GpuConfig& g = node->gpus[gpu];
  if (!temperature.empty()) {
    auto v = sensor_value(temperature, 1, "--temperature");
    if (!v) {
      print_error(v.error().message);
      return kExitUsage;
    }
    g.temperature_c = *v;
  }
  if (!power.empty()) {
    auto v = sensor_value(power, 1000, "--power");
    if (!v) {
      print_error(v.error().message);
      return kExitUsage;
    }
    g.power_mw = *v;
  }
  if (!values.power_cap.empty()) {
    auto v = sensor_value(values.power_cap, 1000, "--power-cap");
    if (!v) {
      print_error(v.error().message);
      return kExitUsage;
    }
    g.power_limit_mw = *v;
  }
  for (auto [text, option, into] :
       {std::tuple{&values.clock_events, "--clock-events", &g.clock_event_reasons},
        std::tuple{&values.ecc, "--ecc", &g.ecc_uncorrected}}) {
    if (text->empty()) continue;
    auto v = health_value(*text, option);
    if (!v) {
      print_error(v.error().message);
      return kExitUsage;
    }
    *into = *v;
  }
  if (!values.process_util.empty()) {
    if (values.process_util != "both" && values.process_util != "new" &&
        values.process_util != "legacy" && values.process_util != "none") {
      print_error("--process-util: both, new, legacy or none");
      return kExitUsage;
    }
    g.process_util = values.process_util;
  }
  if (auto ok = save_node_config(paths.node_json(), *node); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  // An AMD node's sensors are hwmon files the driver (the kernel) writes.
  if (is_amd(g))
    if (auto ok = write_amd_sensors(paths, g); !ok) {
      print_error(ok.error().message);
      return kExitFailure;
    }
  return kExitOk;
}

}  // namespace gpureap::sim
