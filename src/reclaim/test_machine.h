#pragma once
// For the reclaim engine's unit tests only: a simulated machine on fakes. The
// /proc holder scan is the real one, pointed (NodeConfig::proc_root) at a fixture
// tree this class writes: each process's stat, status, cmdline, comm, cgroup and
// an fd symlinked to a simulated device node (a plain file beside the simulator's
// marker, as `gpureap-sim node` makes them). NVML is a FakeGpuSource whose
// snapshot follows the processes; time is an EventClock; signals go through a
// FakeProcessControl whose processes, when they exit, leave the tree and the
// process list, and give their memory back `release_after` later (or never).

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/fake_gpu_source.h"
#include "inventory/node.h"
#include "proc/sim_node_marker.h"
#include "reclaim/audited_control.h"
#include "reclaim/fake_process_control.h"
#include "reclaim/plan.h"
#include "reclaim/reclaimer.h"
#include "util/test_temp_dir.h"
#include "gpu/test_devices.h"

namespace gpureap::reclaim::testing {

inline constexpr std::uint64_t kGiB = 1ULL << 30;
inline constexpr std::uint64_t kTotal = 80 * kGiB;

struct FakeProc {
  pid_t pid = 0;
  std::string comm = "python3";
  pid_t ppid = 1;
  char state = 'S';
  std::optional<unsigned> gpu;  // holds /dev/nvidia<gpu> open and `bytes` on it
  std::uint64_t bytes = 0;
  std::string cmdline;  // default: comm
  std::string cgroup = "/user.slice/test.scope";  // its v2 cgroup path
  /// Memory back this long after the exit; nullopt: the driver keeps it.
  std::optional<std::chrono::milliseconds> release_after = std::chrono::milliseconds(200);
  FakeProcessScript script;
  std::function<void()> then;  // after its exit, e.g. a parent starting a replacement
};

class TestMachine {
 public:
  explicit TestMachine(unsigned gpus = 2) {
    namespace fs = std::filesystem;
    fs::create_directories(dev());
    fs::create_directories(proc());
    fs::create_directories(dir_.path("state"));
    write(dev() + "/" + std::string(proc::kSimNodeMarkerName),
          std::string(proc::kSimNodeMarkerContent));
    write(dev() + "/nvidiactl", "");
    write(dev() + "/nvidia-uvm", "");
    write(proc() + "/uptime", "5000.00 9000.00\n");
    gpu::GpuSnapshot snapshot;
    snapshot.state = gpu::SourceState::ok;
    snapshot.driver_version = "550.00";
    for (unsigned i = 0; i < gpus; ++i) {
      write(fmt::format("{}/nvidia{}", dev(), i), "");
      gpu::GpuInfo g;
      g.id = gpu::DeviceId{i};
      g.name = "Fake H200";
      g.uuid = fmt::format("GPU-fake-{}", i);
      g.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + i);
      g.minor = i;
      g.memory = gpu::GpuMemory{kTotal, 0, std::nullopt};
      g.processes_known = true;
      snapshot.gpus.push_back(std::move(g));
    }
    auto source = std::make_unique<gpu::FakeGpuSource>(std::move(snapshot));
    gpus_ = source.get();
    inventory::NodeConfig config;
    config.dev_dir = dev();
    config.proc_root = proc();
    config.state_dir = dir_.path("state");
    node_.emplace(std::move(config), std::move(source), clock);
    // Idle GPUs use nothing here: a recorded baseline of 0 keeps leaks unexplained.
    for (unsigned i = 0; i < gpus; ++i)
      node_->baselines().observe_idle(fmt::format("GPU-fake-{}", i), kTotal, 0);
    audited_.emplace(control, trail, proc());
  }

  /// Starts a process: in /proc, in NVML's list and memory when it holds a GPU,
  /// and scripted in the process control. Returns its identity.
  proc::ProcessId spawn(FakeProc p) {
    namespace fs = std::filesystem;
    const proc::ProcessId id{p.pid, start_time(p.pid)};
    const std::string d = fmt::format("{}/{}", proc(), p.pid);
    write_stat(p.pid, p.comm, p.state, p.ppid, id.start_time);
    const uid_t uid = ::geteuid();
    write(d + "/status", fmt::format("Name:\t{}\nUid:\t{}\t{}\t{}\t{}\nNSpid:\t{}\n", p.comm, uid,
                                     uid, uid, uid, p.pid));
    std::string cmd = p.cmdline.empty() ? p.comm : p.cmdline;
    write(d + "/cmdline", cmd + std::string(1, '\0'));
    write(d + "/comm", p.comm + "\n");
    write(d + "/cgroup", "0::" + p.cgroup + "\n");
    write(d + "/maps", "");
    write(d + "/environ", "");
    fs::create_directories(d + "/fd");
    if (p.gpu) {
      fs::create_symlink(fmt::format("{}/nvidia{}", dev(), *p.gpu), d + "/fd/3");
      auto& g = gpu(*p.gpu);
      g.processes.push_back(
          gpu::GpuProcess{static_cast<std::uint32_t>(p.pid), p.bytes, gpu::ProcessKind::compute});
      g.memory->used += p.bytes;
    }
    auto script = p.script;
    script.on_exit = [this, p] { end_process(p); };
    control.script(id, std::move(script));
    return id;
  }

  /// A process gone from the table (with its memory freed after `release_after`).
  void end_process(const FakeProc& p) {
    std::filesystem::remove_all(fmt::format("{}/{}", proc(), p.pid));
    if (p.gpu) {
      auto& g = gpu(*p.gpu);
      std::erase_if(g.processes, [&](const gpu::GpuProcess& x) {
        return x.pid == static_cast<std::uint32_t>(p.pid);
      });
      if (p.release_after) {
        unsigned index = *p.gpu;
        std::uint64_t bytes = p.bytes;
        clock.after(*p.release_after, [this, index, bytes] { gpu(index).memory->used -= bytes; });
      }
    }
    if (p.then) p.then();
  }

  /// Changes a process's state letter (D: stuck in the driver).
  void set_state(const FakeProc& p, char state) {
    write_stat(p.pid, p.comm, state, p.ppid, start_time(p.pid));
  }

  /// Re-parents a process (its parent died): the new parent, group and session.
  void set_parent(const FakeProc& p, pid_t ppid, pid_t pgid, pid_t sid) {
    write(fmt::format("{}/{}/stat", proc(), p.pid),
          fmt::format("{} ({}) {} {} {} {} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n", p.pid, p.comm,
                      p.state, ppid, pgid, sid, start_time(p.pid)));
  }

  /// What `free --gpu <selection.gpus> --yes` does after its discovery: look, plan, reclaim.
  ReclaimReport free(ReclaimOptions options) {
    if (options.selection.gpus.empty()) options.selection.gpus = gpu::devs({0});
    inventory::Inventory inv = node_->look();
    plan = make_plan(inv, options.selection, CallerContext::current(node_->proc_root()));
    const auto start = std::chrono::steady_clock::now();
    auto report = reclaim(*node_, control, inv, plan, options, {});
    real_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
  }

  gpu::GpuInfo& gpu(unsigned index) { return gpus_->mutable_snapshot().gpus.at(index); }
  gpu::FakeGpuSource& nvml() { return *gpus_; }
  inventory::Node& node() { return *node_; }
  std::string dev() const { return dir_.path("dev"); }
  std::string proc() const { return dir_.path("proc"); }
  void set_interrupt_flag(const std::atomic<bool>* flag) { node_->set_interrupt_flag(flag); }

  /// The fake control behind the audit trail, as free_selection takes it: every signal
  /// the flows send is recorded in `audit`.
  AuditedControl& audited() { return *audited_; }

  EventClock clock;
  FakeProcessControl control{clock};
  CapturedAudit audit;
  AuditTrail trail{audit, AuditActor::free, AuditCaller{}};
  Plan plan;                // the plan of the last free()
  double real_seconds = 0;  // how long the last free() took in real time

 private:
  static std::uint64_t start_time(pid_t pid) { return 100000 + static_cast<std::uint64_t>(pid); }

  void write_stat(pid_t pid, const std::string& comm, char state, pid_t ppid, std::uint64_t start) {
    // Own session and group: never an orphan by the group-leader rule.
    write(fmt::format("{}/{}/stat", proc(), pid),
          fmt::format("{} ({}) {} {} {} {} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n", pid, comm,
                      state, ppid, pid, pid, start));
  }

  static void write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }

  TestTempDir dir_{"gpureap-reclaim"};
  std::optional<AuditedControl> audited_;
  gpu::FakeGpuSource* gpus_ = nullptr;
  std::optional<inventory::Node> node_;
};

}  // namespace gpureap::reclaim::testing
