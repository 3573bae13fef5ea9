// The processes of a `gpureap-sim hold` tree: a server, its workers, and what
// each holder does to look like a CUDA process to the kernel and to the driver.

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <thread>
#include <vector>

#include "sim/amd_driver.h"
#include "sim/hold_plan.h"
#include "sim/proc_stat.h"
#include "sim/proc_title.h"
#include "sim/registry.h"

namespace gpureap::sim {
namespace {

[[noreturn]] void die(const HoldPlan& plan, const std::string& message) {
  report(plan, fmt::format("E {} {}", host_pid(), message));
  print_error(fmt::format("hold (pid {}): {}", host_pid(), message));
  ::_exit(1);
}

void register_self(const HoldPlan& plan, const std::string& role, bool announce) {
  ProcRecord r;
  r.pid = host_pid();
  r.start_time = self_start_time();
  r.role = role;
  auto st = read_proc_stat(r.pid);
  r.pgid = st ? st->pgrp : 0;
  r.comm = st ? st->comm : "";
  if (auto ok = register_process(plan.paths, r); !ok) die(plan, ok.error().message);
  if (announce) report(plan, fmt::format("P {} {} {}", r.pid, r.start_time, role));
}

extern "C" void exit_on_term(int) {
  ::_exit(128 + SIGTERM);
}

void set_signals(const HoldPlan& plan) {
  if (plan.options.ignore_term) {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_IGN);
  } else if (::getpid() == 1) {
    // PID 1 of a namespace ignores signals it has no handler for (SIGKILL aside).
    ::signal(SIGTERM, exit_on_term);
  }
}

// What a holder opened: the device nodes' descriptors, its mapping of the GPU's node
// and its allocation's lock (registry.h), for a keeper that must drop or keep them.
struct HeldFiles {
  std::vector<int> device_fds;
  void* map = nullptr;
  int lock_fd = -1;
  std::string allocation;  // its name (Allocation::name)
};

// An importer's own CUDA context, as NVML listed it on an H100 (518 MiB).
constexpr std::uint64_t kImporterContext = 512ULL << 20;

// The device nodes a CUDA process opens (nvidiactl, nvidia-uvm, the GPU's node, and a
// mapping of that), or ROCm's on an AMD GPU; never closed.
HeldFiles open_device_nodes(const HoldPlan& plan, unsigned gpu) {
  const GpuConfig& g = plan.node.gpus[gpu];
  // ROCm opens /dev/kfd and the GPU's render node and maps it (sim/amd_driver.h).
  const std::vector<fs::path> nodes =
      is_amd(g) ? amd_holder_nodes(plan.paths, g)
                : std::vector<fs::path>{plan.paths.dev() / "nvidiactl",
                                        plan.paths.dev() / "nvidia-uvm",
                                        plan.paths.gpu_node(g.minor)};
  HeldFiles held;
  for (const fs::path& node : nodes) {
    int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) die(plan, Error::from_errno("cannot open " + node.string()).message);
    held.device_fds.push_back(fd);
    if (node == nodes.back()) {
      held.map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (held.map == MAP_FAILED) die(plan, Error::from_errno("cannot mmap " + node.string()).message);
    }
  }
  return held;
}

// Opens the device nodes the way a CUDA process does, then registers the allocation.
// The fds are never closed: they are what an fd scan finds, inherited by forked children.
HeldFiles hold_gpu(const HoldPlan& plan, unsigned gpu) {
  const auto& o = plan.options;
  if (!o.comm.empty()) ::prctl(PR_SET_NAME, o.comm.substr(0, 15).c_str(), 0, 0, 0);
  // As a setuid program or a hardened daemon is: its /proc/PID files become root's.
  if (o.non_dumpable) ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  set_signals(plan);
  const GpuConfig& g = plan.node.gpus[gpu];
  const bool amd = is_amd(g);  // a mixed node's GPU: its own vendor's nodes
  HeldFiles held = open_device_nodes(plan, gpu);
  // On a MIG device: its GPU instance's and compute instance's capabilities, as CUDA
  // opens them (never closed either).
  // Without nv_cap_enable_devfs (node --no-cap-devfs) they are the capability files.
  if (o.mig)
    for (const auto& m : g.mig)
      if (m.gi == *o.mig && m.ci == o.ci) {
        std::vector<fs::path> caps = {plan.paths.cap_node(m.gi_cap), plan.paths.cap_node(m.ci_cap)};
        if (!plan.node.cap_devfs)
          caps = {plan.paths.capability_file(g.minor, m.gi, std::nullopt),
                  plan.paths.capability_file(g.minor, m.gi, m.ci)};
        for (const fs::path& cap : caps)
          if (::open(cap.c_str(), O_RDONLY | O_CLOEXEC) < 0)
            die(plan, Error::from_errno("cannot open " + cap.string()).message);
      }
  // --pinned-host: a little of it locked for real, so that /proc/PID/status shows VmLck
  // (what gpureap reads as the holder's pinned host memory); the rest is the model's longer
  // release. RLIMIT_MEMLOCK may be small: 4 MiB, else 64 KiB, else nothing.
  if (plan.pinned_host > 0)
    for (std::uint64_t want : {std::uint64_t{4} << 20, std::uint64_t{64} << 10}) {
      const std::size_t n = static_cast<std::size_t>(std::min(plan.pinned_host, want));
      void* buf = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (buf == MAP_FAILED) break;
      if (::mlock(buf, n) == 0) break;
      ::munmap(buf, n);
    }
  Allocation a;
  a.pid = host_pid();
  a.start_time = self_start_time();
  a.gpu = gpu;
  a.bytes = plan.bytes;
  a.stuck = o.stuck;
  a.client = o.client_only;
  a.util = o.util.value_or(o.ghost ? 100U : 0U);
  a.ghost = o.ghost;
  a.ghost_reads = o.ghost_reads;
  a.release_delay = plan.release_delay;
  auto st = read_proc_stat(a.pid);
  a.comm = st ? st->comm : "";
  a.pid_ns = own_pid_namespace();
  a.gi = o.mig;
  a.ci = o.ci;
  a.referenced = o.inheritor || o.ipc_importer;
  auto lock = lock_allocation(plan.paths, a);
  if (!lock) die(plan, lock.error().message);
  held.lock_fd = *lock;
  held.allocation = a.name();
  if (auto ok = register_allocation(plan.paths, a); !ok) die(plan, ok.error().message);
  // As amdgpu shows an allocation in KFD's sysfs once it is made: ready only then.
  if (amd)
    if (auto ok = await_amd_allocation(plan.paths, g, a.pid); !ok) die(plan, ok.error().message);
  report(plan, fmt::format("H {} {} {}", a.pid, gpu, a.bytes));
  return held;
}

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

// --inheritor / --ipc-importer: the process that keeps the holder's memory after the
// holder dies. An inheritor is a child forked after the allocation, as a data-loader
// worker forked after CUDA init is: it keeps every descriptor and mapping it inherited.
// An importer is a server of its own (its own session), as a KV-cache server importing
// a client's memory over CUDA IPC is: it drops what it inherited, opens the device nodes
// itself (its own context), and maps the holder's allocation (the lock file of
// registry.h, whose open file description the mapping keeps), which is what the
// simulated driver counts as a reference to that memory.
void spawn_keeper(HoldPlan& plan, unsigned gpu, const HeldFiles& held) {
  pid_t pid = ::fork();
  if (pid < 0) die(plan, Error::from_errno("fork").message);
  if (pid > 0) return;
  if (plan.read_fd >= 0) ::close(plan.read_fd);
  plan.read_fd = -1;
  if (plan.options.ipc_importer) {
    ::setsid();
    for (int fd : held.device_fds) ::close(fd);
    ::munmap(held.map, 4096);
    open_device_nodes(plan, gpu);
    void* import = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, held.lock_fd, 0);
    if (import == MAP_FAILED) die(plan, Error::from_errno("cannot map the allocation").message);
    ::close(held.lock_fd);  // the mapping alone keeps the reference
    // Its own context, listed by NVML; the imported bytes join it once the exporter dies.
    Allocation own;
    own.pid = host_pid();
    own.start_time = self_start_time();
    own.gpu = gpu;
    own.bytes = kImporterContext;
    auto st = read_proc_stat(own.pid);
    own.comm = st ? st->comm : "";
    own.pid_ns = own_pid_namespace();
    own.imports = held.allocation;
    if (auto ok = lock_allocation(plan.paths, own); !ok) die(plan, ok.error().message);
    if (auto ok = register_allocation(plan.paths, own); !ok) die(plan, ok.error().message);
  }
  register_self(plan, plan.options.ipc_importer ? "importer" : "inheritor", true);
  report(plan, fmt::format("K {}", host_pid()));
  ::close(plan.report_fd);
  sleep_forever();
}

struct LoopState {
  std::map<pid_t, unsigned> workers;  // local pid → worker index
  unsigned respawns = 0;
};

pid_t spawn_worker(HoldPlan& plan, unsigned k, bool announce);

// The life of a process after setup: reap children, respawn workers, fork-storm.
// Driven by SIGCHLD (blocked, taken with sigtimedwait) and the storm's timer.
[[noreturn]] void event_loop(HoldPlan& plan, LoopState state, bool storms) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const double rate = storms ? plan.options.forks_per_second : 0;
  using clock = std::chrono::steady_clock;
  const auto interval =
      rate > 0
          ? std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1.0 / rate))
          : clock::duration::max();
  auto next = rate > 0 ? clock::now() + interval : clock::time_point::max();
  for (;;) {
    timespec ts{3600, 0};
    if (rate > 0) {
      auto left = std::max(clock::duration::zero(), next - clock::now());
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    }
    ::sigtimedwait(&chld, nullptr, &ts);
    int status = 0;
    for (pid_t p; (p = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      auto it = state.workers.find(p);
      if (it == state.workers.end()) continue;
      unsigned k = it->second;
      state.workers.erase(it);
      const auto& limit = plan.options.respawn_limit;
      if (plan.options.respawn && (!limit || state.respawns < *limit)) {
        ++state.respawns;
        if (pid_t w = spawn_worker(plan, k, false); w > 0) state.workers[w] = k;
      }
    }
    if (rate > 0 && clock::now() >= next) {
      // A short-lived child inheriting every device fd, as a forking server does.
      if (::fork() == 0) {
        timespec life{0, 250'000'000};
        ::nanosleep(&life, nullptr);
        ::_exit(0);
      }
      next += interval;
      if (next < clock::now()) next = clock::now() + interval;
    }
  }
}

// With --zombie-leader the main thread exits (SYS_exit: only this thread) after a
// second thread has taken over: the process shows Z with live threads, its fds
// stay open through the shared fd table, and /proc/PID/fd of the leader is empty.
[[noreturn]] void live_on(HoldPlan& plan, LoopState state, bool holds) {
  if (holds && plan.options.zombie_leader) {
    std::thread([plan, state, holds]() mutable {
      event_loop(plan, std::move(state), holds);
    }).detach();
    ::syscall(SYS_exit, 0);
  }
  event_loop(plan, std::move(state), holds);
}

[[noreturn]] void worker_main(HoldPlan& plan, unsigned k, bool announce) {
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) ::dup2(null, 1);
  if (!plan.options.title.empty()) {
    std::string title = plan.options.title;
    for (auto at = title.find("{k}"); at != std::string::npos; at = title.find("{k}", at))
      title.replace(at, 3, std::to_string(k));
    sim::set_process_title(title);
  }
  register_self(plan, "worker", announce);
  if (announce && plan.stagger.count() > 0) std::this_thread::sleep_for(plan.stagger * k);
  hold_gpu(plan, plan.worker_gpus[k]);
  ::close(plan.report_fd);
  live_on(plan, LoopState{}, true);
}

pid_t spawn_worker(HoldPlan& plan, unsigned k, bool announce) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (plan.read_fd >= 0) ::close(plan.read_fd);
    plan.read_fd = -1;
    if (!announce) {
      // A respawned worker reports to nobody: the ready line was printed long ago.
      ::close(plan.report_fd);
      plan.report_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      // The replacement exists at once but takes the GPU only later, as a Python
      // worker does after importing torch and creating its CUDA context.
      if (plan.respawn_delay.count() > 0) std::this_thread::sleep_for(plan.respawn_delay);
    }
    worker_main(plan, k, announce);
  }
  return pid;
}

[[noreturn]] void server_main(HoldPlan& plan, bool printer) {
  if (!plan.options.server_title.empty()) sim::set_process_title(plan.options.server_title);
  if (plan.options.listen) {
    // Not CLOEXEC, never closed: the workers forked below inherit it, as a server's do.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 16) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      die(plan, Error::from_errno("cannot listen on 127.0.0.1").message);
    report(plan, fmt::format("T {}", ntohs(addr.sin_port)));
  }
  register_self(plan, plan.options.children > 0 ? "server" : "holder", true);
  // SIGCHLD is taken synchronously by the event loop; block it before any fork.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  LoopState state;
  for (unsigned k = 0; k < plan.options.children; ++k) {
    pid_t w = spawn_worker(plan, k, true);
    if (w < 0) die(plan, Error::from_errno("fork").message);
    state.workers[w] = k;
  }
  if (plan.server_holds) {
    HeldFiles held = hold_gpu(plan, plan.options.gpu);
    if (plan.options.inheritor || plan.options.ipc_importer)
      spawn_keeper(plan, plan.options.gpu, held);
  }
  if (printer) {
    if (!collect_and_print(plan, host_pid(), false)) ::_exit(kExitFailure);
    // As if SIGKILLed: an orphan's server, a keeper's holder.
    if (plan.options.orphan ||
        ((plan.options.inheritor || plan.options.ipc_importer) && !plan.options.holder_lives))
      ::kill(::getpid(), SIGKILL);
  }
  ::close(plan.report_fd);
  plan.report_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  live_on(plan, std::move(state), plan.server_holds);
}

}  // namespace

void run_tree(HoldPlan& plan, bool printer) {
  if (!plan.options.pidns) server_main(plan, printer);

  // --pidns: this process stays outside, like `unshare --pid --fork`; its first
  // child is PID 1 of the new namespace and runs the server.
  register_self(plan, "pidns-parent", true);
  if (::unshare(CLONE_NEWPID) != 0) die(plan, Error::from_errno("unshare(CLONE_NEWPID)").message);
  pid_t init = ::fork();
  if (init < 0) die(plan, Error::from_errno("fork into the new PID namespace").message);
  if (init == 0) {
    if (plan.read_fd >= 0) ::close(plan.read_fd);
    plan.read_fd = -1;
    server_main(plan, false);
  }
  if (printer && !collect_and_print(plan, host_pid(), false)) ::_exit(kExitFailure);
  ::close(plan.report_fd);
  int status = 0;
  while (::waitpid(init, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) ::_exit(128 + WTERMSIG(status));
  ::_exit(WEXITSTATUS(status));
}

}  // namespace gpureap::sim
