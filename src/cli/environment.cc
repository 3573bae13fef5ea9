#include "cli/environment.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "audit/recorder.h"
#include "cli/command.h"
#include "gpu/mixed_source.h"
#include "gpu/nvml_source.h"
#include "inventory/agent_client.h"
#include "inventory/baseline_store.h"
#include "report/terminal_text.h"
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

namespace {

// $COLUMNS, else fd's terminal width (80 when it does not say), else nullopt.
std::optional<std::size_t> columns_of(int fd) {
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(c, &end, 10);
    // A width no table fits in is a mistake, not a request: ignored.
    if (*end == '\0' && n >= 40 && n <= 100000) return n;
  }
  if (::isatty(fd) != 1) return std::nullopt;
  struct winsize ws {};
  return ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

}  // namespace

report::TableWidth stdout_table_width(bool wide) {
  return {.columns = columns_of(1), .wide = wide};
}

std::optional<std::size_t> stderr_columns() {
  return columns_of(2);
}

std::shared_ptr<report::ProgressView> progress_view() {
  return std::make_shared<report::ProgressView>(::isatty(2) == 1,
                                                stderr_columns().value_or(80));
}

std::unique_ptr<gpu::GpuSource> open_gpu_source(const GlobalOptions& global) {
  return gpu::make_node_source(resolve_dev_dir(global), global.nvml_library);
}

std::shared_ptr<reclaim::AuditSink> open_audit(std::string_view command,
                                               std::optional<std::string> state_dir,
                                               std::function<void(const std::string&)> warn) {
  std::string no_dir;
  if (!state_dir) {
    if (auto dir = inventory::state_dir())
      state_dir = *dir;
    else
      no_dir = dir.error().message;
  }
  std::string who(command);
  return std::make_shared<audit::Recorder>(
      std::move(state_dir), std::move(no_dir), audit::system_journal(),
      [who, warn = std::move(warn)](const std::string& problem) {
        if (warn)
          warn(problem);
        else
          print_err("gpureap " + who + ": warning: " + report::terminal_text(problem) + "\n");
      });
}

inventory::Node open_node(const GlobalOptions& global, std::optional<std::string> state_dir,
                          FirstLook first_look) {
  inventory::NodeConfig config;
  config.dev_dir = resolve_dev_dir(global);
  config.nvml_library = gpu::resolve_nvml_library(global.nvml_library);
  if (const char* sim = std::getenv("GPUREAP_SIM_DIR"); sim && *sim) config.sim_dir = sim;
  if (first_look == FirstLook::agent_or_scan)
    config.agent_socket = inventory::agent_socket_for(global.no_agent, state_dir);
  config.state_dir = std::move(state_dir);
  config.release_budget = global.release_budget;
  return inventory::Node(std::move(config), open_gpu_source(global));
}

bool add_commands(CLI::App& app, const GlobalOptions& global, CommandFn& run,
                  std::string_view only) {
  using Add = void (*)(CLI::App&, const GlobalOptions&, CommandFn&);
  static constexpr std::pair<std::string_view, Add> kCommands[] = {
      {"status", add_status_command}, {"top", add_top_command},     {"free", add_free_command},
      {"wait", add_wait_command},     {"run", add_run_command},     {"plan", add_plan_command},
      {"watch", add_watch_command},   {"slurm", add_slurm_command}, {"log", add_log_command}};
  bool found = false;
  for (const auto& [name, add] : kCommands)
    if (only.empty() || name == only) {
      add(app, global, run);
      found = found || name == only;
    }
  return found;
}

std::string duration_flag(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s"
                               : std::to_string(d.count()) + "ms";
}

bool ask_on_tty(const std::string& question) {
  FILE* tty = std::fopen("/dev/tty", "r+");
  if (!tty) return false;
  std::fprintf(tty, "%s [y/N] ", question.c_str());
  std::fflush(tty);
  char answer[16] = {};
  const bool yes = std::fgets(answer, sizeof answer, tty) && (answer[0] == 'y' || answer[0] == 'Y');
  std::fclose(tty);
  return yes;
}

void print_out(std::string_view text) {
  write_all(1, text);
}
void print_err(std::string_view text) {
  write_all(2, text);
}


std::shared_ptr<reclaim::AuditedControl> open_audited_control(
    std::string_view command, reclaim::AuditActor actor, reclaim::AuditCaller caller,
    const std::string& proc_root, std::optional<std::string> state_dir,
    std::function<void(const std::string&)> warn) {
  struct Owned {
    Owned(std::shared_ptr<reclaim::AuditSink> sink, reclaim::AuditActor actor,
          reclaim::AuditCaller caller, const std::string& proc_root)
        : audit(std::move(sink)),
          trail(*audit, actor, std::move(caller)),
          system(proc_root),
          control(system, trail, proc_root) {}
    std::shared_ptr<reclaim::AuditSink> audit;
    reclaim::AuditTrail trail;
    reclaim::SystemProcessControl system;
    reclaim::AuditedControl control;
  };
  auto owned = std::make_shared<Owned>(open_audit(command, std::move(state_dir), std::move(warn)),
                                       actor, std::move(caller), proc_root);
  return {owned, &owned->control};
}

}  // namespace gpureap::cli
