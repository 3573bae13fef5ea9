// `gpureap-sim list` and `gpureap-sim cleanup`: what is registered on a node, and
// making sure none of it outlives a test or a demo.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <nlohmann/json.hpp>
#include <thread>

#include "sim/amd_driver.h"
#include "sim/commands.h"
#include "sim/pidfd.h"
#include "sim/proc_stat.h"
#include "sim/registry.h"
#include "util/units.h"

namespace gpureap::sim {
namespace {

std::string process_state(const ProcRecord& r) {
  auto st = read_proc_stat(r.pid);
  if (!st || st->start_time != r.start_time) return "dead";
  if (st->state == 'Z') return st->num_threads > 1 ? "alive (zombie leader)" : "dead (zombie)";
  return "alive";
}

// Parents before children, so a server cannot respawn a worker we just killed.
int kill_rank(const std::string& role) {
  if (role == "pidns-parent" || role == "daemon-launcher") return 0;
  if (role == "server") return 1;
  return 2;
}

}  // namespace

int run_list(const fs::path& dir, bool json) {
  SimPaths paths{dir};
  if (!fs::exists(paths.node_json())) {
    print_error(fmt::format("no simulated node in {}", dir.string()));
    return kExitUsage;
  }
  auto procs = read_process_records(paths);
  AllocationTable table(paths);
  auto allocs = table.evaluate();
  if (json) {
    nlohmann::json out = {{"processes", nlohmann::json::array()},
                          {"allocations", nlohmann::json::array()}};
    for (const auto& r : procs)
      out["processes"].push_back({{"pid", r.pid},
                                  {"start_time", r.start_time},
                                  {"role", r.role},
                                  {"pgid", r.pgid},
                                  {"comm", r.comm},
                                  {"state", process_state(r)}});
    for (const auto& e : allocs)
      out["allocations"].push_back({{"pid", e.alloc.pid},
                                    {"start_time", e.alloc.start_time},
                                    {"gpu", e.alloc.gpu},
                                    {"bytes", e.alloc.bytes},
                                    {"stuck", e.alloc.stuck},
                                    {"client", e.alloc.client},
                                    {"util", e.alloc.util},
                                    {"ghost", e.alloc.ghost},
                                    {"release_delay_ns", e.alloc.release_delay.count()},
                                    {"state", to_string(e.state)}});
    fmt::print("{}\n", out.dump());
    return kExitOk;
  }
  fmt::print("{:>8} {:>4} {:>10} {:<10} {:<16} {}\n", "PID", "GPU", "BYTES", "STATE", "COMM",
             "FLAGS");
  for (const auto& e : allocs) {
    std::string flags = e.alloc.stuck    ? "stuck"
                        : e.alloc.client ? "client"
                        : e.alloc.ghost  ? "ghost"
                                         : "";
    if (e.alloc.util > 0) flags += fmt::format(" util {}%", e.alloc.util);
    if (e.alloc.release_delay.count() > 0)
      flags = "release-delay " + format_duration(e.alloc.release_delay);
    if (e.release_left) flags += fmt::format(" ({} left)", format_duration(*e.release_left));
    fmt::print("{:>8} {:>4} {:>10} {:<10} {:<16} {}\n", e.alloc.pid, e.alloc.gpu,
               format_bytes(e.alloc.bytes), to_string(e.state), e.alloc.comm, flags);
  }
  fmt::print("\n{:>8} {:>8} {:<16} {:<16} {}\n", "PID", "PGID", "ROLE", "COMM", "STATE");
  for (const auto& r : procs)
    fmt::print("{:>8} {:>8} {:<16} {:<16} {}\n", r.pid, r.pgid, r.role, r.comm, process_state(r));
  return kExitOk;
}

int run_cleanup(const fs::path& dir) {
  SimPaths paths{dir};
  if (!fs::exists(paths.node_json())) {
    print_error(fmt::format("no simulated node in {}", dir.string()));
    return kExitUsage;
  }
  int killed = 0;
  bool stubborn = false;
  // Rounds until a pass finds nothing alive: a worker forked just before its
  // server died registers a moment later and is caught by the next round.
  for (int round = 0, quiet = 0; round < 20 && quiet < 2; ++round) {
    auto procs = read_process_records(paths);
    std::stable_sort(procs.begin(), procs.end(), [](const auto& a, const auto& b) {
      return kill_rank(a.role) < kill_rank(b.role);
    });
    bool any = false;
    for (int rank = 0; rank <= 2; ++rank) {
      std::vector<PidFd> victims;
      for (const auto& r : procs) {
        if (kill_rank(r.role) != rank) continue;
        auto fd = PidFd::open_verified(r.pid, r.start_time);
        auto st = read_proc_stat(r.pid);
        if (!fd || !st || (st->state == 'Z' && st->num_threads <= 1)) continue;
        if (fd.signal(SIGKILL)) {
          ++killed;
          victims.push_back(std::move(fd));
        }
      }
      for (const auto& fd : victims)
        if (!fd.wait_exit(std::chrono::seconds(5))) stubborn = true;
      any = any || !victims.empty();
    }
    quiet = any ? 0 : quiet + 1;
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The cgroups `hold --cgroup` created: removable once empty.
  auto cgroups = read_file(paths.cgroups()).value_or("");
  for (std::size_t pos = 0; pos < cgroups.size();) {
    auto eol = cgroups.find('\n', pos);
    fs::path cg = cgroups.substr(pos, eol - pos);
    pos = eol == std::string::npos ? cgroups.size() : eol + 1;
    if (cg.empty()) continue;
    for (int i = 0; i < 100 && ::rmdir(cg.c_str()) != 0 && errno == EBUSY; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A ghost lives in the driver, not in a process: cleanup ends it like a reset.
  {
    AllocationTable table(paths);
    for (const auto& e : table.evaluate()) {
      if (e.state != AllocState::ghost) continue;
      std::error_code ec;
      for (const char* ext : {".json", ".dead", ".lock", ".reads"})
        fs::remove(paths.allocs() / (e.alloc.name() + ext), ec);
    }
  }
  // An AMD node's driver process: it stops writing sysfs (the state stays as it was).
  stop_amd_driver(paths);
  fmt::print(stderr, "gpureap-sim: cleanup killed {} process{}\n", killed, killed == 1 ? "" : "es");
  if (stubborn) {
    print_error("some processes did not exit within 5 s of SIGKILL");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace gpureap::sim
