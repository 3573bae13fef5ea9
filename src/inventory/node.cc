#include "inventory/node.h"

#include <algorithm>

#include "gpu/gpu_select.h"
#include "inventory/agent_client.h"
#include "inventory/collect.h"
#include "inventory/inventory_wire.h"

namespace gpureap::inventory {

Node::Node(NodeConfig config, std::unique_ptr<gpu::GpuSource> gpus, util::Clock& clock)
    : config_(std::move(config)), gpus_(std::move(gpus)), clock_(&clock) {}

void Node::load() {
  if (loaded_) return;
  loaded_ = true;
  auto devices = proc::discover_devices(config_.dev_dir);
  if (devices)
    devices_ = std::move(*devices);
  else
    device_error_ = devices.error();
  baselines_ = config_.state_dir ? BaselineStore::load(*config_.state_dir)
                                 : BaselineStore::load_default();
}

Inventory Node::look(CollectOptions options) {
  load();
  // A running agent answers the first look (instant status). Later looks are
  // the engine's re-scans while it acts: those must be this process's own.
  if (config_.agent_socket && !agent_asked_) {
    agent_asked_ = true;
    if (auto answer = ask_agent(*config_.agent_socket, options.nvml_deadline)) {
      Inventory inv = without_pids(*answer, options.exclude);
      // What this process's own scan would have warned about (a refused state
      // directory, its device directory), besides the agent's warnings.
      std::vector<std::string> own = devices_.warnings();
      own.insert(own.end(), baselines_.warnings().begin(), baselines_.warnings().end());
      for (auto& w : own)
        if (std::find(inv.warnings.begin(), inv.warnings.end(), w) == inv.warnings.end())
          inv.warnings.push_back(std::move(w));
      return inv;
    }
  }
  options.proc_root = config_.proc_root;
  options.clock = clock_;
  return collect_inventory(*gpus_, devices_, baselines_, options);
}

Result<std::vector<unsigned>> select_gpus(std::string_view spec, const Inventory& inv) {
  std::vector<gpu::GpuInfo> infos;
  infos.reserve(inv.gpus.size());
  for (const auto& v : inv.gpus) infos.push_back(v.info);
  return gpu::select_gpus(spec, infos);
}

bool is_selected(const std::vector<unsigned>& chosen, unsigned index) {
  return std::find(chosen.begin(), chosen.end(), index) != chosen.end();
}

void keep_gpus(Inventory& inv, const std::vector<unsigned>& chosen) {
  std::erase_if(inv.gpus, [&](const GpuView& v) { return !is_selected(chosen, v.info.index); });
}

}  // namespace gpureap::inventory
