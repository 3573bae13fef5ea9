#include "cli/environment.h"

#include <unistd.h>

#include <cstdlib>

#include "gpu/nvml_source.h"
#include "util/fd.h"

namespace gpureap::cli {
namespace {

bool color_allowed(const GlobalOptions& global, int fd) {
  if (global.no_color || global.json) return false;
  if (const char* nc = std::getenv("NO_COLOR"); nc && *nc) return false;
  return ::isatty(fd) == 1;
}

}  // namespace

std::string resolve_dev_dir(const GlobalOptions& global) {
  if (!global.dev_dir.empty()) return global.dev_dir;
  if (const char* d = std::getenv("GPUREAP_DEV_DIR"); d && *d) return d;
  if (const char* s = std::getenv("GPUREAP_SIM_DIR"); s && *s) return std::string(s) + "/dev";
  return "/dev";
}

report::Style stdout_style(const GlobalOptions& global) {
  return {color_allowed(global, 1)};
}
report::Style stderr_style(const GlobalOptions& global) {
  return {color_allowed(global, 2)};
}

std::unique_ptr<gpu::GpuSource> open_gpu_source(const GlobalOptions& global) {
  return gpu::make_nvml_source(gpu::resolve_nvml_library(global.nvml_library));
}

inventory::Node open_node(const GlobalOptions& global, std::optional<std::string> state_dir) {
  inventory::NodeConfig config;
  config.dev_dir = resolve_dev_dir(global);
  config.state_dir = std::move(state_dir);
  return inventory::Node(std::move(config), open_gpu_source(global));
}

std::string duration_flag(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s"
                               : std::to_string(d.count()) + "ms";
}

void print_out(std::string_view text) {
  write_all(1, text);
}
void print_err(std::string_view text) {
  write_all(2, text);
}

}  // namespace gpureap::cli
