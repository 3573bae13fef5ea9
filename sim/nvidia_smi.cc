// The nvidia-smi stand-in: `gpureap-sim nvidia-smi ...`, or gpureap-sim invoked
// through a symlink named nvidia-smi (D/bin/nvidia-smi). It answers the few
// commands a reclaimer and the demo use, with NVIDIA's wording and exit codes,
// and logs every invocation to D/nvidia-smi.log.

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "sim/commands.h"
#include "sim/registry.h"

namespace gpureap::sim {
namespace {

// nvidia-smi's exit codes mirror nvmlReturn_t.
constexpr int kSmiInvalidArgument = 2;
constexpr int kSmiNoPermission = 4;
constexpr int kSmiDriverNotLoaded = 9;
constexpr int kSmiGpuLost = 15;
constexpr int kSmiInUse = 255;

constexpr std::uint64_t kMiB = 1024 * 1024;

struct SmiArgs {
  bool help = false;
  bool list = false;
  bool reset = false;
  std::optional<std::string> persistence;
  std::vector<std::string> ids;
  std::string query_gpu;
  std::string query_apps;
  std::string format;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty() || !s.empty()) out.push_back(cur);
  return out;
}

Result<SmiArgs> parse_args(const std::vector<std::string>& args) {
  SmiArgs a;
  auto value_of = [&](std::size_t& i, std::string_view flag) -> Result<std::string> {
    const std::string& arg = args[i];
    if (arg.size() > flag.size() && arg[flag.size()] == '=') return arg.substr(flag.size() + 1);
    if (i + 1 >= args.size()) return fail(fmt::format("{} needs a value", flag));
    return args[++i];
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto is = [&](std::string_view s, std::string_view l = {}) {
      auto matches = [&](std::string_view f) {
        return !f.empty() && (arg == f || (arg.starts_with(f) && arg[f.size()] == '='));
      };
      return matches(s) || matches(l);
    };
    if (arg == "-h" || arg == "--help") {
      a.help = true;
    } else if (arg == "-L" || arg == "--list-gpus") {
      a.list = true;
    } else if (arg == "-r" || arg == "--gpu-reset") {
      a.reset = true;
    } else if (is("-i", "--id")) {
      auto v = value_of(i, arg.starts_with("--") ? "--id" : "-i");
      if (!v) return std::unexpected(v.error());
      for (auto& id : split(*v, ',')) a.ids.push_back(id);
    } else if (is("-pm", "--persistence-mode")) {
      auto v = value_of(i, arg.starts_with("--") ? "--persistence-mode" : "-pm");
      if (!v) return std::unexpected(v.error());
      a.persistence = *v;
    } else if (is("--query-gpu")) {
      auto v = value_of(i, "--query-gpu");
      if (!v) return std::unexpected(v.error());
      a.query_gpu = *v;
    } else if (is("--query-compute-apps")) {
      auto v = value_of(i, "--query-compute-apps");
      if (!v) return std::unexpected(v.error());
      a.query_apps = *v;
    } else if (is("--format")) {
      auto v = value_of(i, "--format");
      if (!v) return std::unexpected(v.error());
      a.format = *v;
    } else {
      return fail(
          fmt::format("Invalid combination of input arguments ('{}'). Please run "
                      "'nvidia-smi -h' for help.",
                      arg));
    }
  }
  return a;
}

std::optional<fs::path> locate_node(std::optional<fs::path> dir, const std::string& argv0) {
  if (dir) return dir;
  // Invoked as D/bin/nvidia-smi (directly or found on PATH): that node.
  fs::path self = argv0;
  if (argv0.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    for (const auto& d : split(path ? path : "", ':')) {
      fs::path candidate = fs::path(d.empty() ? "." : d) / argv0;
      if (::access(candidate.c_str(), X_OK) == 0) {
        self = candidate;
        break;
      }
    }
  }
  std::error_code ec;
  fs::path node = fs::absolute(self, ec).parent_path().parent_path();
  if (fs::exists(node / "node.json", ec) && self.filename() == "nvidia-smi") return node;
  return sim_dir_from_env();
}

void log_invocation(const SimPaths& paths, const std::vector<std::string>& args) {
  std::string line = "nvidia-smi";
  for (const auto& a : args) line += a.find(' ') == std::string::npos ? " " + a : " '" + a + "'";
  line += "\n";
  int fd = ::open(paths.smi_log().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// -i accepts an index, a UUID, or a PCI bus id in any of its spellings.
std::optional<unsigned> find_gpu(const NodeConfig& node, const std::string& id) {
  std::string want = lower(id);
  for (const auto& g : node.gpus) {
    if (is_amd(g)) continue;  // a mixed node's AMD GPU: not nvidia-smi's
    std::string bus = lower(g.bus_id);  // 00000000:18:00.0
    if (want == std::to_string(g.index) || want == lower(g.uuid) || want == bus ||
        want == bus.substr(4) || want == bus.substr(9))
      return g.index;
  }
  return std::nullopt;
}

// Processes (other than this one) with the GPU's device node open.
std::vector<pid_t> processes_with_open(const fs::path& node) {
  std::vector<pid_t> found;
  struct stat want {};
  if (::stat(node.c_str(), &want) != 0) return found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    std::string fd_dir = fmt::format("/proc/{}/fd", pid);
    DIR* fds = ::opendir(fd_dir.c_str());
    if (!fds) continue;
    while (dirent* f = ::readdir(fds)) {
      struct stat st {};
      if (f->d_name[0] == '.') continue;
      if (::stat((fd_dir + "/" + f->d_name).c_str(), &st) == 0 && st.st_dev == want.st_dev &&
          st.st_ino == want.st_ino) {
        found.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  return found;
}

[[noreturn]] void hang_forever() {
  for (;;) ::sleep(3600);
}

struct Smi {
  SimPaths paths;
  NodeConfig node;
  Mode mode;
  mutable std::uint64_t queries = 0;  // fail_after counts per process, as in the library

  // The driver failure modes apply to nvidia-smi as they do to any NVML client.
  std::optional<int> query_failure(unsigned gpu) const {
    if (!mode.applies_to(gpu)) return std::nullopt;
    if (mode.kind == Mode::Kind::hang_query) hang_forever();
    bool fails = mode.kind == Mode::Kind::query_fail ||
                 (mode.kind == Mode::Kind::fail_after && ++queries > mode.after);
    if (fails) {
      fmt::print(
          "Unable to determine the device handle for GPU {}: GPU is lost.  Reboot the "
          "system to recover this GPU\n",
          node.gpus[gpu].bus_id);
      return kSmiGpuLost;
    }
    return std::nullopt;
  }

  Result<std::vector<unsigned>> selected(const std::vector<std::string>& ids) const {
    std::vector<unsigned> out;
    if (ids.empty())
      for (const auto& g : node.gpus)
        if (!is_amd(g)) out.push_back(g.index);
    for (const auto& id : ids) {
      auto gpu = find_gpu(node, id);
      if (!gpu) return fail(fmt::format("No devices were found matching '{}'", id));
      out.push_back(*gpu);
    }
    return out;
  }

  int reset(const std::vector<unsigned>& gpus) const {
    AllocationTable table(paths);
    auto entries = table.evaluate();
    std::vector<unsigned> busy;
    for (unsigned gpu : gpus) {
      const auto& g = node.gpus[gpu];
      bool live = std::any_of(entries.begin(), entries.end(), [&](const auto& e) {
        return e.alloc.gpu == gpu && e.state == AllocState::held;
      });
      // Persistence mode counts as a client (NVML docs; NVSentinel#1690).
      if (live || g.persistence || !processes_with_open(paths.gpu_node(g.minor)).empty())
        busy.push_back(gpu);
    }
    // Another process's NVML session is a client of every GPU (a monitoring agent:
    // DCGM, a running `gpureap watch`), whether or not it has a node open now.
    if (busy.empty() && !open_nvml_sessions(paths, ::getpid()).empty()) busy = gpus;
    if (!busy.empty()) {
      for (unsigned gpu : busy)
        fmt::print("GPU {}: In use by another client\n", node.gpus[gpu].bus_id);
      fmt::print(
          "{} is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
          "application, graphics application such as an X server, or a monitoring application "
          "such as another instance of nvidia-smi). Please first kill all processes using {} and "
          "all compute applications running in the system.\n",
          busy.size() == 1 ? "1 device" : fmt::format("{} devices", busy.size()),
          busy.size() == 1 ? "this device" : "these devices");
      return kSmiInUse;
    }
    if (::geteuid() != 0) {
      for (unsigned gpu : gpus)
        fmt::print("GPU {}: Insufficient Permissions\n", node.gpus[gpu].bus_id);
      fmt::print("Terminating early due to previous errors.\n");
      return kSmiNoPermission;
    }
    // The reset frees what the driver held for dead processes (stuck, releasing, ghost).
    for (const auto& e : entries) {
      if (e.state == AllocState::held ||
          std::find(gpus.begin(), gpus.end(), e.alloc.gpu) == gpus.end())
        continue;
      std::error_code ec;
      fs::remove(paths.allocs() / (e.alloc.name() + ".json"), ec);
      fs::remove(paths.allocs() / (e.alloc.name() + ".dead"), ec);
      fs::remove(paths.allocs() / (e.alloc.name() + ".lock"), ec);
      fs::remove(paths.allocs() / (e.alloc.name() + ".reads"), ec);
    }
    for (unsigned gpu : gpus) fmt::print("GPU {} was successfully reset.\n", node.gpus[gpu].bus_id);
    fmt::print("All done.\n");
    return 0;
  }

  int set_persistence(const std::vector<unsigned>& gpus, const std::string& value) {
    std::string v = lower(value);
    bool on = v == "1" || v == "enabled";
    if (!on && v != "0" && v != "disabled") {
      fmt::print("Invalid persistence mode '{}': expected 0/DISABLED or 1/ENABLED\n", value);
      return kSmiInvalidArgument;
    }
    if (::geteuid() != 0) {
      for (unsigned gpu : gpus)
        fmt::print("Unable to set persistence mode for GPU {}: Insufficient Permissions\n",
                   node.gpus[gpu].bus_id);
      fmt::print("Terminating early due to previous errors.\n");
      return kSmiNoPermission;
    }
    for (unsigned gpu : gpus) node.gpus[gpu].persistence = on;
    if (auto ok = save_node_config(paths.node_json(), node); !ok) {
      fmt::print("{}\n", ok.error().message);
      return 1;
    }
    for (unsigned gpu : gpus)
      fmt::print("{} persistence mode for GPU {}.\n", on ? "Enabled" : "Disabled",
                 node.gpus[gpu].bus_id);
    fmt::print("All done.\n");
    return 0;
  }

  std::string field(const std::string& name, const GpuConfig& g, const GpuUsage& u,
                    bool units) const {
    auto mib = [&](std::uint64_t bytes) {
      return units ? fmt::format("{} MiB", bytes / kMiB) : std::to_string(bytes / kMiB);
    };
    std::uint64_t used_v1 = std::min(g.total, g.baseline + u.counted_bytes);
    std::uint64_t reserved = std::min(g.reserved, used_v1);
    if (name == "index") return std::to_string(g.index);
    if (name == "name") return g.name;
    if (name == "uuid") return g.uuid;
    if (name == "pci.bus_id") return g.bus_id;
    if (name == "persistence_mode") return g.persistence ? "Enabled" : "Disabled";
    if (name == "memory.total") return mib(g.total);
    if (name == "memory.reserved") return mib(reserved);
    if (name == "memory.used") return mib(used_v1 - reserved);
    if (name == "memory.free") return mib(g.total - used_v1);
    return "[Field Error]";
  }

  int query_gpu(const std::vector<unsigned>& gpus, const std::string& fields_text,
                const std::string& format) const {
    auto fields = split(fields_text, ',');
    auto opts = split(format, ',');
    bool csv = std::find(opts.begin(), opts.end(), "csv") != opts.end();
    if (!csv) {
      fmt::print("Format must be specified as csv: --format=csv[,noheader][,nounits]\n");
      return kSmiInvalidArgument;
    }
    bool header = std::find(opts.begin(), opts.end(), "noheader") == opts.end();
    bool units = std::find(opts.begin(), opts.end(), "nounits") == opts.end();
    if (header) {
      std::vector<std::string> names;
      for (const auto& f : fields)
        names.push_back(f.starts_with("memory.") && units ? f + " [MiB]" : f);
      fmt::print("{}\n", fmt::join(names, ", "));
    }
    AllocationTable table(paths);
    for (unsigned gpu : gpus) {
      if (auto failure = query_failure(gpu)) return *failure;
      auto u = summarize(table.evaluate(gpu), gpu);
      std::vector<std::string> values;
      for (const auto& f : fields) values.push_back(field(f, node.gpus[gpu], u, units));
      fmt::print("{}\n", fmt::join(values, ", "));
    }
    return 0;
  }

  int query_apps(const std::vector<unsigned>& gpus, const std::string& fields_text,
                 const std::string& format) const {
    auto fields = split(fields_text, ',');
    auto opts = split(format, ',');
    bool header = std::find(opts.begin(), opts.end(), "noheader") == opts.end();
    bool units = std::find(opts.begin(), opts.end(), "nounits") == opts.end();
    if (header) fmt::print("{}\n", fmt::join(fields, ", "));
    AllocationTable table(paths);
    for (unsigned gpu : gpus) {
      if (auto failure = query_failure(gpu)) return *failure;
      const auto& g = node.gpus[gpu];
      for (const auto& p : summarize(table.evaluate(gpu), gpu).processes) {
        std::vector<std::string> values;
        for (const auto& f : fields) {
          if (f == "pid")
            values.push_back(std::to_string(p.pid));
          else if (f == "used_memory" || f == "used_gpu_memory")
            values.push_back(units ? fmt::format("{} MiB", p.bytes / kMiB)
                                   : std::to_string(p.bytes / kMiB));
          else if (f == "gpu_uuid")
            values.push_back(g.uuid);
          else if (f == "gpu_bus_id")
            values.push_back(g.bus_id);
          else if (f == "process_name" || f == "name") {
            auto comm = read_file(fmt::format("/proc/{}/comm", p.pid)).value_or("[Not Found]\n");
            values.push_back(comm.substr(0, comm.find('\n')));
          } else
            values.push_back("[Field Error]");
        }
        fmt::print("{}\n", fmt::join(values, ", "));
      }
    }
    return 0;
  }

  int summary() const {
    AllocationTable table(paths);
    fmt::print("NVIDIA-SMI (simulated by gpureap-sim)   Driver Version: {}\n", node.driver_version);
    for (const auto& g : node.gpus) {
      if (auto failure = query_failure(g.index)) return *failure;
      auto u = summarize(table.evaluate(g.index), g.index);
      fmt::print("GPU {}  {}  {}  {} / {}  persistence {}\n", g.index, g.name, g.bus_id,
                 field("memory.used", g, u, true), field("memory.total", g, u, true),
                 g.persistence ? "On" : "Off");
      for (const auto& p : u.processes)
        fmt::print("    pid {:>8}  {} MiB\n", p.pid, p.bytes / kMiB);
    }
    return 0;
  }
};

constexpr const char* kSmiHelp =
    R"(nvidia-smi (gpureap-sim stand-in): the commands a reclaimer and the demo use.

  nvidia-smi                                   summary of every GPU and its processes
  nvidia-smi -L                                list GPUs with UUIDs
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader[,nounits]
      fields: index name uuid pci.bus_id memory.used memory.total memory.free
              memory.reserved persistence_mode
  nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid,gpu_bus_id,process_name --format=csv
  nvidia-smi -pm 0|1 [-i ID]                   persistence mode (root)
  nvidia-smi -r [-i ID]                        GPU reset: fails with exit 255 while any process
                                               uses the GPU or persistence mode is on, exit 4
                                               when not root; frees the GPU's stuck memory
  -i ID: index, UUID or PCI bus id; several separated by commas.
Every invocation is appended to <node>/nvidia-smi.log.
)";

}  // namespace

int run_nvidia_smi(const std::vector<std::string>& args, std::optional<fs::path> dir,
                   const std::string& argv0) {
  auto node_dir = locate_node(std::move(dir), argv0);
  if (node_dir) log_invocation(SimPaths{*node_dir}, args);
  auto parsed = parse_args(args);
  if (!parsed) {
    fmt::print("{}\n", parsed.error().message);
    return kSmiInvalidArgument;
  }
  if (parsed->help) {
    fmt::print("{}", kSmiHelp);
    return 0;
  }
  constexpr const char* kNoDriver =
      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
      "that the latest NVIDIA driver is installed and running.\n";
  if (!node_dir) {
    fmt::print("{}", kNoDriver);
    return kSmiDriverNotLoaded;
  }
  Smi smi{SimPaths{*node_dir}, {}, {}};
  smi.mode = parse_mode(read_file(smi.paths.mode()).value_or("")).value_or(Mode{});
  if (smi.mode.kind == Mode::Kind::hang_init) hang_forever();
  auto node = load_node_config(smi.paths.node_json());
  if (!node || smi.mode.kind == Mode::Kind::init_fail) {
    fmt::print("{}", kNoDriver);
    return kSmiDriverNotLoaded;
  }
  smi.node = std::move(*node);
  auto gpus = smi.selected(parsed->ids);
  if (!gpus) {
    fmt::print("{}\n", gpus.error().message);
    return kSmiInvalidArgument;
  }
  if (parsed->reset) return smi.reset(*gpus);
  if (parsed->persistence) return smi.set_persistence(*gpus, *parsed->persistence);
  if (!parsed->query_gpu.empty()) return smi.query_gpu(*gpus, parsed->query_gpu, parsed->format);
  if (!parsed->query_apps.empty()) return smi.query_apps(*gpus, parsed->query_apps, parsed->format);
  if (parsed->list) {
    for (unsigned gpu : *gpus)
      fmt::print("GPU {}: {} (UUID: {})\n", gpu, smi.node.gpus[gpu].name, smi.node.gpus[gpu].uuid);
    return 0;
  }
  return smi.summary();
}

}  // namespace gpureap::sim
