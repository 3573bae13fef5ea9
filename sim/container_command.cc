// `gpureap-sim container`: the view of a node from inside a container that was given
// one MIG device (nvidia-container-toolkit). The container's /dev holds nvidiactl,
// nvidia-uvm, its GPU's node and only that MIG device's capability nodes (hard links to
// the node's own files: the same inode, as a container's /dev/nvidia0 is the same
// character device); mig-minors, read from /proc on a real node, is not namespaced and
// still lists every capability. The library enumerates only what this directory holds
// (nvml_sim.cc, find_visible).

#include <fmt/format.h>
#include <unistd.h>

#include "proc/sim_node_marker.h"
#include "sim/commands.h"
#include "sim/node_config.h"

namespace gpureap::sim {
namespace {

Result<void> link_into(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  fs::remove(to, ec);
  if (::link(from.c_str(), to.c_str()) != 0)
    return std::unexpected(Error::from_errno(
        fmt::format("cannot link {} to {} (the view must be on the node's file system)",
                    from.string(), to.string())));
  return {};
}

}  // namespace

int run_container(const ContainerOptions& o) {
  SimPaths node_paths{o.dir};
  auto node = load_node_config(node_paths.node_json());
  if (!node) {
    print_error(fmt::format("no simulated node in {}", o.dir.string()));
    return kExitUsage;
  }
  if (o.gpu >= node->gpus.size()) {
    print_error(fmt::format("--gpu {} does not exist: the node has {} GPUs", o.gpu,
                            node->gpus.size()));
    return kExitUsage;
  }
  const GpuConfig& g = node->gpus[o.gpu];
  const GpuConfig::Mig* m = nullptr;
  for (const auto& x : g.mig)
    if (x.gi == o.mig && x.ci == o.ci) m = &x;
  if (m == nullptr) {
    print_error(fmt::format("--mig {} --ci {}: GPU {} has no such MIG device{}", o.mig, o.ci,
                            o.gpu, g.mig.empty() ? " (it is not in MIG mode: node --mig)" : ""));
    return kExitUsage;
  }
  std::error_code ec;
  SimPaths view{fs::absolute(o.out, ec)};
  fs::remove_all(view.dev(), ec);
  std::vector<std::pair<fs::path, fs::path>> links = {
      {node_paths.dev() / "nvidiactl", view.dev() / "nvidiactl"},
      {node_paths.dev() / "nvidia-uvm", view.dev() / "nvidia-uvm"},
      {node_paths.gpu_node(g.minor), view.gpu_node(g.minor)}};
  if (node->cap_devfs) {
    links.emplace_back(node_paths.cap_node(m->gi_cap), view.cap_node(m->gi_cap));
    links.emplace_back(node_paths.cap_node(m->ci_cap), view.cap_node(m->ci_cap));
  } else {
    for (auto ci : {std::optional<unsigned>(), std::optional<unsigned>(m->ci)})
      links.emplace_back(node_paths.capability_file(g.minor, m->gi, ci),
                         view.capability_file(g.minor, m->gi, ci));
  }
  for (const auto& [from, to] : links)
    if (auto ok = link_into(from, to); !ok) {
      print_error(ok.error().message);
      return kExitFailure;
    }
  fs::create_directories(view.caps(), ec);
  for (const auto& [file, text] :
       {std::pair{view.mig_minors(), mig_minors_text(*node)},
        std::pair{view.dev() / proc::kSimNodeMarkerName,
                  std::string(proc::kSimNodeMarkerContent)}})
    if (auto ok = write_file_atomic(file, text); !ok) {
      print_error(ok.error().message);
      return kExitFailure;
    }
  fmt::print(stderr, "gpureap-sim: container view {}: GPU {}'s MIG device {}/gi{}/ci{}\n",
             view.root.string(), o.gpu, o.gpu, o.mig, o.ci);
  fmt::print("export GPUREAP_NVML_LIBRARY={}\n", sim_library_path().string());
  fmt::print("export GPUREAP_SIM_DIR={}\n", fs::absolute(o.dir, ec).string());
  fmt::print("export GPUREAP_DEV_DIR={}\n", view.dev().string());
  return kExitOk;
}

}  // namespace gpureap::sim
