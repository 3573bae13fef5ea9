// `gpureap-sim hold`: validate the shape, start the holder tree, print the ready
// line once every holder has registered.

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/amd_driver.h"
#include "sim/hold_plan.h"
#include "sim/pidfd.h"
#include "sim/proc_stat.h"
#include "util/units.h"

namespace gpureap::sim {
namespace {

// The server's shape: children, respawning, orphaning, namespaces, cgroups.
Result<void> check_tree_flags(const HoldOptions& o, HoldPlan& plan) {
  const char* needs_children = o.same_gpu       ? "--same-gpu"
                               : o.parent_holds ? "--parent-holds"
                               : o.orphan       ? "--orphan"
                               : o.respawn      ? "--respawn"
                                                : nullptr;
  if (o.children == 0 && needs_children)
    return fail(fmt::format("{} needs --children N", needs_children));
  if (o.respawn_limit && !o.respawn) return fail("--respawn-limit needs --respawn");
  if (!o.respawn_delay.empty()) {
    if (!o.respawn) return fail("--respawn-delay needs --respawn");
    auto d = parse_duration(o.respawn_delay);
    if (!d) return fail(fmt::format("--respawn-delay: {}", d.error().message));
    plan.respawn_delay = *d;
  }
  if (!o.stagger.empty()) {
    if (o.children == 0) return fail("--stagger needs --children N");
    auto d = parse_duration(o.stagger);
    if (!d) return fail(fmt::format("--stagger: {}", d.error().message));
    plan.stagger = *d;
  }
  if (o.orphan && o.respawn)
    return fail("--orphan and --respawn contradict each other: an orphaned server cannot respawn");
  if (o.orphan && o.pidns)
    return fail(
        "--orphan cannot be combined with --pidns: when a PID namespace's init dies, the "
        "kernel kills every process in it");
  if (o.stuck && !o.release_delay.empty())
    return fail(
        "--stuck and --release-delay contradict each other (stuck memory is never released)");
  if (o.forks_per_second < 0 || o.forks_per_second > 1000)
    return fail("--forks-per-second must be between 0 and 1000");
  if (o.pidns && ::geteuid() != 0)
    return fail("--pidns needs root (CAP_SYS_ADMIN to unshare a PID namespace)");
  if (!o.cgroup.empty() && (o.cgroup.front() == '/' || o.cgroup.find("..") != std::string::npos))
    return fail(
        fmt::format("--cgroup '{}' must be a relative name below the cgroup2 mount", o.cgroup));
  return {};
}

// What the GPU shows besides memory: utilization, a ghost, a compute instance.
Result<void> check_gpu_flags(const HoldOptions& o) {
  if (o.util && *o.util > 100) return fail("--util is a percent: 0 to 100");
  if (o.ci != 0 && !o.mig) return fail("--ci needs --mig (a compute instance of a GPU instance)");
  if (o.ghost_reads > 0 && !o.ghost) return fail("--ghost-reads needs --ghost");
  if (o.inheritor && o.ipc_importer)
    return fail("--inheritor and --ipc-importer are two shapes: give one");
  if (o.holder_lives && !o.inheritor && !o.ipc_importer)
    return fail("--holder-lives needs --inheritor or --ipc-importer: it keeps their holder alive");
  if ((o.inheritor || o.ipc_importer) &&
      (o.children > 0 || o.client_only || o.ghost || o.stuck || o.pidns || o.zombie_leader ||
       o.daemon || o.mig))
    return fail(fmt::format(
        "{} keeps one holder's memory: not with --children, --client-only, --ghost, --stuck, "
        "--pidns, --zombie-leader, --daemon or --mig",
        o.inheritor ? "--inheritor" : "--ipc-importer"));
  if (o.ghost && (o.stuck || !o.release_delay.empty() || o.client_only))
    return fail("--ghost leaves no memory behind: it cannot be combined with --stuck, "
                "--release-delay or --client-only");
  return {};
}

// --bytes per holder, fitting the GPU (or MIG device); none for a client.
Result<void> read_bytes(const HoldOptions& o, HoldPlan& plan) {
  if (o.client_only) {
    if (!o.bytes.empty()) return fail("--client-only registers 0 bytes; drop --bytes");
    if (o.stuck || !o.release_delay.empty())
      return fail("--client-only holds no memory, so --stuck/--release-delay do not apply");
    return {};
  }
  if (o.bytes.empty()) return fail("--bytes is required (a size with a unit, e.g. --bytes 20GiB)");
  auto bytes = parse_size(o.bytes, true);
  if (!bytes) return fail(fmt::format("--bytes: {}", bytes.error().message));
  plan.bytes = *bytes;
  const auto& g = plan.node.gpus[o.gpu];
  if (o.mig) {
    auto m = std::find_if(g.mig.begin(), g.mig.end(),
                          [&](const GpuConfig::Mig& x) { return x.gi == *o.mig && x.ci == o.ci; });
    if (m == g.mig.end())
      return fail(fmt::format("--mig {} --ci {}: GPU {} has no such MIG device{}", *o.mig, o.ci,
                              o.gpu, g.mig.empty() ? " (it is not in MIG mode: node --mig)" : ""));
    if (o.children > 0 && !o.same_gpu)
      return fail("--mig puts every holder on one MIG device: add --same-gpu with --children");
    if (plan.bytes > m->total)
      return fail(fmt::format("--bytes {} does not fit the MIG device ({})", o.bytes,
                              format_bytes(m->total)));
  } else if (plan.bytes > g.total - g.baseline) {
    return fail(fmt::format("--bytes {} does not fit: GPU {} has {} free when idle", o.bytes, o.gpu,
                            format_bytes(g.total - g.baseline)));
  }
  return {};
}

// How long the memory takes to go after death: --release-delay, plus pinned host memory.
Result<void> read_release(const HoldOptions& o, HoldPlan& plan) {
  if (!o.release_delay.empty()) {
    auto d = parse_duration(o.release_delay);
    if (!d) return fail(fmt::format("--release-delay: {}", d.error().message));
    if (d->count() <= 0) return fail("--release-delay must be positive");
    plan.release_delay = *d;
  }
  if (!o.pinned_host.empty()) {
    auto size = parse_size(o.pinned_host, true);
    if (!size) return fail(fmt::format("--pinned-host: {}", size.error().message));
    if (o.stuck || o.ghost || o.client_only)
      return fail("--pinned-host models a slow release: not with --stuck, --ghost or --client-only");
    plan.pinned_host = *size;
    // The kernel unpins host memory after the process is gone: sglang#32829 measured 16 s
    // for 243 GB (about 70 ms per GiB), on top of the device memory's own release.
    plan.release_delay += std::chrono::nanoseconds(static_cast<std::int64_t>(
        static_cast<double>(*size) / static_cast<double>(1ull << 30) * 70e6));
  }
  return {};
}

// Worker k on GPU gpu+k (or every worker on --gpu), and who holds.
Result<void> place_workers(const HoldOptions& o, unsigned count, HoldPlan& plan) {
  for (unsigned k = 0; k < o.children; ++k) {
    unsigned gpu = o.same_gpu ? o.gpu : o.gpu + k;
    if (gpu >= count)
      return fail(fmt::format(
          "--children {} from GPU {} needs GPUs {}..{} but the node has {} (add --same-gpu to put "
          "every worker on GPU {})",
          o.children, o.gpu, o.gpu, o.gpu + o.children - 1, count, o.gpu));
    plan.worker_gpus.push_back(gpu);
  }
  plan.server_holds = o.children == 0 || o.parent_holds;
  plan.expected_holders = o.children + (plan.server_holds ? 1 : 0);
  return {};
}

Result<HoldPlan> make_plan(const HoldOptions& o) {
  HoldPlan plan;
  plan.options = o;
  std::error_code ec;
  plan.paths.root = fs::absolute(o.dir, ec);
  auto node = load_node_config(plan.paths.node_json());
  if (!node)
    return fail(fmt::format("no simulated node in {} (create one with `gpureap-sim node --dir {}`)",
                            o.dir.string(), o.dir.string()));
  plan.node = std::move(*node);
  // An AMD node's simulated driver (sim/amd_driver.h) shows the allocations.
  if (has_amd(plan.node))
    if (auto ok = ensure_amd_driver(plan.paths); !ok) return std::unexpected(ok.error());
  const unsigned count = static_cast<unsigned>(plan.node.gpus.size());
  if (o.gpu >= count)
    return fail(fmt::format("--gpu {} does not exist: the node has GPUs 0..{}", o.gpu, count - 1));
  if (auto ok = check_tree_flags(o, plan); !ok) return std::unexpected(ok.error());
  if (auto ok = check_gpu_flags(o); !ok) return std::unexpected(ok.error());
  if (auto ok = read_bytes(o, plan); !ok) return std::unexpected(ok.error());
  if (auto ok = read_release(o, plan); !ok) return std::unexpected(ok.error());
  if (auto ok = place_workers(o, count, plan); !ok) return std::unexpected(ok.error());
  return plan;
}

// The cgroup2 mount point, from /proc/self/mountinfo (a hybrid host mounts it at
// /sys/fs/cgroup/unified, so never assume /sys/fs/cgroup).
std::optional<fs::path> cgroup2_mount() {
  auto text = read_file("/proc/self/mountinfo");
  if (!text) return std::nullopt;
  std::string_view rest = *text;
  while (!rest.empty()) {
    auto eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    auto dash = line.find(" - ");
    if (dash == std::string_view::npos || !line.substr(dash + 3).starts_with("cgroup2 ")) continue;
    // Fields: id parent major:minor root mount-point ...
    std::size_t pos = 0;
    for (int field = 0; field < 4; ++field) pos = line.find(' ', pos) + 1;
    return fs::path(std::string(line.substr(pos, line.find(' ', pos) - pos)));
  }
  return std::nullopt;
}

Result<void> join_cgroup(const HoldPlan& plan) {
  auto mount = cgroup2_mount();
  if (!mount) return fail("--cgroup: no cgroup2 file system is mounted (see /proc/self/mountinfo)");
  fs::path cg = *mount / plan.options.cgroup;
  std::error_code ec;
  fs::create_directories(cg, ec);
  if (ec)
    return fail(
        fmt::format("--cgroup: cannot create {}: {} (the cgroup2 mount at {} must be "
                    "writable: run as root or use a delegated subtree)",
                    cg.string(), ec.message(), mount->string()));
  int fd = ::open((cg / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  std::string pid = std::to_string(host_pid()) + "\n";
  if (fd < 0 || ::write(fd, pid.data(), pid.size()) < 0) {
    auto err = Error::from_errno("--cgroup: cannot move into " + (cg / "cgroup.procs").string());
    if (fd >= 0) ::close(fd);
    return std::unexpected(err);
  }
  ::close(fd);
  // Remember it for `cleanup`, which removes it once it is empty.
  auto known = read_file(plan.paths.cgroups()).value_or("");
  if (known.find(cg.string() + "\n") == std::string::npos) {
    int lf = ::open(plan.paths.cgroups().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lf >= 0) {
      std::string line = cg.string() + "\n";
      (void)!::write(lf, line.data(), line.size());
      ::close(lf);
    }
  }
  return {};
}

// In a detached tree nothing may keep the invoker's stdout open, or a shell's
// `$(gpureap-sim hold --detach ...)` would wait for the tree to exit.
void detach_stdio(const HoldPlan& plan) {
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int log = ::open((plan.paths.root / "hold.log").c_str(),
                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ::dup2(null, 0);
  ::dup2(null, 1);
  ::dup2(log >= 0 ? log : null, 2);
  if (null > 2) ::close(null);
  if (log > 2) ::close(log);
}

struct Started {
  pid_t pid;
  std::uint64_t start;
};

void kill_started(const std::vector<Started>& started) {
  for (const auto& s : started) {
    if (s.pid == host_pid()) continue;
    if (auto fd = PidFd::open_verified(s.pid, s.start)) fd.signal(SIGKILL);
  }
}

}  // namespace

void report(const HoldPlan& plan, const std::string& record) {
  std::string line = record + "\n";
  (void)!::write(plan.report_fd, line.data(), line.size());
}

bool collect_and_print(HoldPlan& plan, pid_t leader, bool kill_leader_first) {
  std::vector<Started> started;
  nlohmann::json holders = nlohmann::json::array();
  std::string buffer, error;
  unsigned listen_port = 0;
  pid_t keeper = 0;  // --inheritor / --ipc-importer: the process that keeps the memory
  const bool wants_keeper = plan.options.inheritor || plan.options.ipc_importer;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((holders.size() < plan.expected_holders || (wants_keeper && keeper == 0)) &&
         error.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{plan.read_fd, POLLIN, 0};
    int r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      error = fmt::format("only {} of {} holders registered within 10 s", holders.size(),
                          plan.expected_holders);
      break;
    }
    char chunk[4096];
    ssize_t n = ::read(plan.read_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "the holder processes exited before registering";
      break;
    }
    buffer.append(chunk, static_cast<std::size_t>(n));
    for (auto eol = buffer.find('\n'); eol != std::string::npos; eol = buffer.find('\n')) {
      std::string line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      char kind = line.empty() ? '?' : line[0];
      std::istringstream in(line.substr(1));
      if (kind == 'P') {
        Started s{};
        in >> s.pid >> s.start;
        started.push_back(s);
      } else if (kind == 'L') {
        in >> leader;
      } else if (kind == 'K') {
        in >> keeper;
      } else if (kind == 'T') {
        in >> listen_port;
      } else if (kind == 'H') {
        pid_t pid = 0;
        unsigned gpu = 0;
        std::uint64_t bytes = 0;
        in >> pid >> gpu >> bytes;
        holders.push_back({{"pid", pid}, {"gpu", gpu}, {"bytes", bytes}});
      } else if (kind == 'E') {
        pid_t pid = 0;
        in >> pid;
        std::string message;
        std::getline(in >> std::ws, message);
        error = fmt::format("process {}: {}", pid, message);
      }
    }
  }
  if (!error.empty()) {
    kill_started(started);
    print_error(error);
    return false;
  }
  if (kill_leader_first) {
    // --orphan: the server dies as if SIGKILLed; its workers are re-parented.
    for (const auto& s : started) {
      if (s.pid != leader) continue;
      auto fd = PidFd::open_verified(s.pid, s.start);
      if (fd && fd.signal(SIGKILL)) fd.wait_exit(std::chrono::seconds(5));
      ::waitpid(leader, nullptr, WNOHANG);  // reaps it if it is our child
    }
  }
  nlohmann::json pids = nlohmann::json::array();
  for (const auto& s : started) pids.push_back(s.pid);
  nlohmann::json ready = {{"leader", leader}, {"holders", holders}, {"pids", pids}};
  if (listen_port != 0) ready["listen_port"] = listen_port;
  if (keeper != 0) ready["keeper"] = keeper;
  std::string line = ready.dump() + "\n";
  (void)!::write(1, line.data(), line.size());
  ::close(plan.read_fd);
  plan.read_fd = -1;
  return true;
}

int run_hold(const HoldOptions& options) {
  auto plan = make_plan(options);
  if (!plan) {
    print_error(plan.error().message);
    return kExitUsage;
  }
  // Start from a clean signal state whatever the caller left us.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  if (!options.cgroup.empty()) {
    if (auto joined = join_cgroup(*plan); !joined) {
      print_error(joined.error().message);
      return kExitFailure;
    }
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    print_error(Error::from_errno("pipe").message);
    return kExitFailure;
  }
  plan->read_fd = fds[0];
  plan->report_fd = fds[1];

  if (!options.detach && !options.daemon) {
    // The invoker is the leader and prints the ready line itself. It leads its own
    // process group, so signalling the group never reaches whoever started it.
    ::setpgid(0, 0);
    run_tree(*plan, true);
  }

  pid_t child = ::fork();
  if (child < 0) {
    print_error(Error::from_errno("fork").message);
    return kExitFailure;
  }
  if (child == 0) {
    ::close(plan->read_fd);
    plan->read_fd = -1;
    detach_stdio(*plan);
    if (options.daemon) {
      // The classic daemon: new session, then a second fork so the daemon is not
      // a session leader; the middle process exits at once.
      ::setsid();
      if (::chdir("/") != 0) {  // a daemon pins no directory; every path in the plan is absolute
      }
      if (pid_t d = ::fork(); d != 0) {
        report(*plan, fmt::format("P {} {} daemon-launcher", host_pid(), self_start_time()));
        ::_exit(d > 0 ? 0 : 1);
      }
    } else {
      ::setpgid(0, 0);
    }
    report(*plan, fmt::format("L {}", host_pid()));
    run_tree(*plan, false);
  }
  ::close(plan->report_fd);
  plan->report_fd = -1;
  bool ok = collect_and_print(
      *plan, 0,
      options.orphan || ((options.inheritor || options.ipc_importer) && !options.holder_lives));
  if (options.daemon) ::waitpid(child, nullptr, 0);  // the daemon's launcher
  return ok ? kExitOk : kExitFailure;
}

}  // namespace gpureap::sim
