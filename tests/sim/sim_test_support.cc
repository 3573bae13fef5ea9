#include "sim_test_support.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "sim/pidfd.h"
#include "sim/proc_stat.h"
#include "sim/registry.h"

namespace simtest {
namespace fs = std::filesystem;

namespace {

// Reaps every child of ours that has exited, including processes re-parented to
// us as a subreaper, until none is left or the deadline passes.
void reap_all(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pid_t p = ::waitpid(-1, nullptr, WNOHANG);
    if (p < 0) return;  // ECHILD: nothing left
    if (p == 0) {
      if (std::chrono::steady_clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace

bool user_can_execute(uid_t uid, const std::string& path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    ::_exit(::access(path.c_str(), X_OK) == 0 ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

CommandResult run(const std::vector<std::string>& argv, std::optional<uid_t> uid,
                  std::chrono::milliseconds timeout) {
  CommandResult r;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  std::vector<char*> cargs;
  for (const auto& a : argv) cargs.push_back(const_cast<char*>(a.c_str()));
  cargs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    if (uid && (::setgroups(0, nullptr) != 0 || ::setgid(*uid) != 0 || ::setuid(*uid) != 0))
      ::_exit(126);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  // Read both pipes while waiting, so a chatty child cannot block on a full pipe.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(fds, 2, 50) <= 0) continue;
    for (auto& f : fds) {
      if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n > 0) {
        (f.fd == out[0] ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else {
        f.fd = -1;
        --open_fds;
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);  // our own unreaped child: the pid cannot be reused
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "timed out: " << argv[0] << " " << (argv.size() > 1 ? argv[1] : "");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

SimNode::SimNode(const std::vector<std::string>& node_args) {
  // Orphaned holders come to us, so the test can see them re-parented and reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::string tmpl = (fs::temp_directory_path() / "gpureap-sim-test-XXXXXX").string();
  dir_ = ::mkdtemp(tmpl.data());
  ::setenv("GPUREAP_SIM_DIR", dir_.c_str(), 1);
  ::unsetenv("GPUREAP_DEV_DIR");
  std::vector<std::string> args = {"node", "--dir", dir_};
  args.insert(args.end(), node_args.begin(), node_args.end());
  auto r = sim(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

SimNode::~SimNode() {
  auto r = sim({"cleanup", "--dir", dir_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Our invokers may have been reaped by the test already: pidfds, never bare pids.
  for (int fd : child_pidfds_) {
    ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
    ::close(fd);
  }
  reap_all(std::chrono::seconds(2));
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

CommandResult SimNode::sim(std::vector<std::string> args) const {
  args.insert(args.begin(), SIM_BIN);
  return run(args);
}

HoldResult SimNode::hold(const std::vector<std::string>& args) {
  HoldResult result;
  std::vector<std::string> argv = {SIM_BIN, "hold", "--dir", dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return result;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  ::close(out[1]);
  // Opened before anyone can reap the child, so it names this process for good.
  child_pidfds_.push_back(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  result.invoker = pid;
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pollfd p{out[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    if (::poll(&p, 1, 50) <= 0) continue;
    char c;
    if (::read(out[0], &c, 1) != 1) break;
    line += c;
  }
  ::close(out[0]);
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.contains("leader")) {
    ADD_FAILURE() << "no ready line from hold: '" << line << "'";
    return result;
  }
  result.leader = j["leader"].get<pid_t>();
  result.keeper = j.value("keeper", 0);
  for (const auto& p : j["pids"]) result.pids.push_back(p.get<pid_t>());
  for (const auto& h : j["holders"])
    result.holders.push_back(
        {h["pid"].get<pid_t>(), h["gpu"].get<unsigned>(), h["bytes"].get<std::uint64_t>()});
  return result;
}

bool SimNode::signal(pid_t pid, int sig) const {
  for (const auto& r : gpureap::sim::read_process_records(gpureap::sim::SimPaths{dir_})) {
    if (r.pid != pid) continue;
    if (auto fd = gpureap::sim::PidFd::open_verified(r.pid, r.start_time)) return fd.signal(sig);
  }
  return false;
}

void* Nvml::symbol(const char* name) {
  static void* lib = ::dlopen(SIM_NVML, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    ADD_FAILURE() << "dlopen " << SIM_NVML << ": " << ::dlerror();
    return nullptr;
  }
  void* s = ::dlsym(lib, name);
  if (!s) ADD_FAILURE() << "missing symbol " << name;
  return s;
}

Nvml::Nvml() {
  init_ = sym<nvmlInit_fn>("nvmlInit_v2")();
}

Nvml::~Nvml() {
  if (init_ == NVML_SUCCESS) sym<nvmlShutdown_fn>("nvmlShutdown")();
}

void Nvml::end_session() {
  if (init_ == NVML_SUCCESS) sym<nvmlShutdown_fn>("nvmlShutdown")();
  init_ = NVML_ERROR_UNINITIALIZED;
}

void Nvml::begin_session() { init_ = sym<nvmlInit_fn>("nvmlInit_v2")(); }

nvmlDevice_t Nvml::device(unsigned index) const {
  nvmlDevice_t dev = nullptr;
  EXPECT_EQ(sym<nvmlDeviceGetHandleByIndex_fn>("nvmlDeviceGetHandleByIndex_v2")(index, &dev),
            NVML_SUCCESS);
  return dev;
}

std::optional<std::uint64_t> Nvml::used(unsigned index) const {
  nvmlMemory_t mem{};
  if (sym<nvmlDeviceGetMemoryInfo_fn>("nvmlDeviceGetMemoryInfo")(device(index), &mem) !=
      NVML_SUCCESS)
    return std::nullopt;
  return mem.used;
}

std::optional<std::vector<std::pair<unsigned, std::uint64_t>>> Nvml::processes(
    unsigned index) const {
  auto fn = sym<nvmlDeviceGetRunningProcesses_fn>("nvmlDeviceGetComputeRunningProcesses_v3");
  std::vector<nvmlProcessInfo_v2_t> infos(64);
  unsigned count = static_cast<unsigned>(infos.size());
  if (fn(device(index), &count, infos.data()) != NVML_SUCCESS) return std::nullopt;
  std::vector<std::pair<unsigned, std::uint64_t>> out;
  for (unsigned i = 0; i < count; ++i) out.emplace_back(infos[i].pid, infos[i].usedGpuMemory);
  return out;
}

char state_of(pid_t pid) {
  auto st = gpureap::sim::read_proc_stat(pid);
  return st ? st->state : '\0';
}

long threads_of(pid_t pid) {
  auto st = gpureap::sim::read_proc_stat(pid);
  return st ? st->num_threads : 0;
}

pid_t ppid_of(pid_t pid) {
  auto st = gpureap::sim::read_proc_stat(pid);
  return st ? st->ppid : 0;
}

bool alive(pid_t pid) {
  auto st = gpureap::sim::read_proc_stat(pid);
  return st && st->state != 'X' && !(st->state == 'Z' && st->num_threads <= 1);
}

}  // namespace simtest
