#include "harness.h"

#include "proc/proc_files.h"
#include "util/host_name.h"
#include "util/time_text.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <algorithm>
#include <regex>
#include <sstream>
#include <thread>

extern char** environ;

namespace gpureap::e2e {

std::string make_temp_dir(const char* prefix) {
  std::string tmpl = std::string(std::filesystem::temp_directory_path()) + "/" + prefix + "XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  if (!d) throw std::runtime_error("mkdtemp failed");
  return d;
}

namespace {

std::vector<std::string> merged_env(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> all;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  all.erase("NO_COLOR");
  all.erase("COLUMNS");  // a piped table keeps its fixed layout (report/table_layout.h)
  for (const auto& [k, v] : env) all[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : all) out.push_back(k + "=" + v);
  return out;
}

// Reads both pipes until EOF or the deadline.
void drain(int out_fd, int err_fd, std::string& out, std::string& err,
           std::chrono::steady_clock::time_point deadline) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open_count = 2;
  char buf[65536];
  while (open_count > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    int r = ::poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        fds[i].fd = -1;
        --open_count;
      } else {
        (i == 0 ? out : err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
}

// SIGKILL through a pidfd, only if the pid still names the process we started.
void kill_verified(pid_t pid, std::uint64_t start_time) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return;
  if (start_time == 0 || start_time_of(pid) == start_time)
    ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
  ::close(fd);
}

}  // namespace

std::map<pid_t, nlohmann::json> holders_by_pid(const nlohmann::json& status) {
  std::map<pid_t, nlohmann::json> out;
  for (const auto& g : status["gpus"])
    for (const auto& h : g["holders"]) out[h["pid"].get<pid_t>()] = h;
  return out;
}

void KillAtExit::now() {
  for (pid_t p : pids)
    if (p > 0) ::kill(p, SIGKILL);
  pids.clear();
}

nlohmann::json CommandResult::json() const {
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << out << "\nstderr:\n" << err;
  return j;
}

void expect_document_head(const std::string& text, const std::string& command) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << text;
  ASSERT_TRUE(j.is_object()) << text;
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items())
    if (keys.size() < 4) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"schema_version", "command", "time", "hostname"}))
      << text.substr(0, 300);
  EXPECT_EQ(j.value("command", ""), command);
  ASSERT_TRUE(j["time"].is_string()) << j["time"];
  const std::string time = j["time"];
  // The date, the time and the offset, as the audit trail writes them.
  EXPECT_TRUE(std::regex_match(
      time, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d)")))
      << time;
  auto when = parse_time(time);
  ASSERT_TRUE(when.has_value()) << time;
  EXPECT_LT(std::chrono::abs(std::chrono::system_clock::now() - *when), std::chrono::minutes(1))
      << time;
  EXPECT_EQ(j["hostname"], host_name());
}

pid_t spawn_child(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, int out_fd, int err_fd,
                  bool die_with_parent) {
  auto env_strings = merged_env(env);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Should the test process die, a long-lived child must not outlive it.
    if (die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);
    }
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  return pid;
}

CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds timeout) {
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = spawn_child(argv, env, out_pipe[1], err_pipe[1], false);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  drain(out_pipe[0], err_pipe[0], result.out, result.err, start + timeout);
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  // Bounded wait: a command that outlives the timeout is killed and reported.
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > start + timeout) {
      ::kill(pid, SIGKILL);  // our own unreaped child: the pid cannot have been reused
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "command timed out: " << argv[0];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

namespace {

// True when any user can read `path`: every directory above it searchable by others,
// the file readable by others.
bool world_readable(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !(st.st_mode & S_IROTH)) return false;
  for (auto dir = path.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (::stat(dir.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
    if (dir == dir.root_path()) break;
  }
  return true;
}

// The nodes alive in this test process, for the crash handler: a test that aborts (a
// failed nlohmann assertion, std::terminate), crashes or is stopped by a signal (Ctrl-C,
// SIGTERM, a closed terminal) skips every destructor, and the simulated holders it
// detached would outlive it. The handler runs `gpureap-sim cleanup`
// on each (fork, execv and waitpid are async-signal-safe; the strings are made before).
constexpr int kMaxNodes = 64;
std::atomic<char*> g_live_nodes[kMaxNodes];
char g_sim_bin[] = GPUREAP_SIM_BIN;
char g_cleanup_word[] = "cleanup";
char g_dir_flag[] = "--dir";

// The test process, not a child it forked without exec (an impostor that pauses, a
// script's stand-in): that child inherits the handler but none of the nodes.
std::atomic<pid_t> g_nodes_owner{0};

void clean_up_nodes_and_die(int sig) {
  const bool owner = ::getpid() == g_nodes_owner.load();
  for (auto& slot : g_live_nodes) {
    char* dir = owner ? slot.load() : nullptr;
    if (dir == nullptr) continue;
    const pid_t pid = ::fork();
    if (pid == 0) {
      char* argv[] = {g_sim_bin, g_cleanup_word, g_dir_flag, dir, nullptr};
      ::execv(g_sim_bin, argv);
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void register_live_node(const std::string& dir) {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = clean_up_nodes_and_die;
    sa.sa_flags = SA_RESETHAND;
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGINT, SIGTERM, SIGHUP})
      ::sigaction(sig, &sa, nullptr);
    return true;
  }();
  (void)installed;
  g_nodes_owner.store(::getpid());
  char* copy = ::strdup(dir.c_str());
  for (auto& slot : g_live_nodes) {
    char* expected = nullptr;
    if (slot.compare_exchange_strong(expected, copy)) return;
  }
  std::free(copy);  // more nodes than slots at once: these are cleaned up as before only
}

void unregister_live_node(const std::string& dir) {
  for (auto& slot : g_live_nodes) {
    char* d = slot.load();
    if (d != nullptr && dir == d && slot.compare_exchange_strong(d, nullptr)) {
      std::free(d);
      return;
    }
  }
}

}  // namespace

SimNode::SimNode(const std::vector<std::string>& node_args) {
  dir_ = make_temp_dir("gpureap-e2e-");
  state_dir_ = dir_ + "/state";
  std::filesystem::create_directories(state_dir_);
  // Tests that run gpureap as another user (uid 65534) load the simulated driver too:
  // from a checkout in a 0700 directory (CI's, `mktemp -d`'s) it must come from here.
  nvml_library_ = GPUREAP_SIM_NVML;
  if (!world_readable(nvml_library_)) {
    std::filesystem::create_directories(dir_ + "/lib");
    nvml_library_ = dir_ + "/lib/libnvidia-ml.so.1";
    std::error_code ec;
    std::filesystem::copy_file(GPUREAP_SIM_NVML, nvml_library_,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) ADD_FAILURE() << "cannot copy the simulated driver: " << ec.message();
    ::chmod((dir_ + "/lib").c_str(), 0755);
    ::chmod(nvml_library_.c_str(), 0755);
  }
  std::vector<std::string> args = {"node", "--dir", dir_, "--force"};
  args.insert(args.end(), node_args.begin(), node_args.end());
  auto r = sim(args);
  if (r.exit_code != 0) ADD_FAILURE() << "gpureap-sim node failed: " << r.err;
  register_live_node(dir_);
}

SimNode::~SimNode() {
  // Kill everything registered on the node, then anything else we tracked.
  unregister_live_node(dir_);
  sim({"cleanup", "--dir", dir_});
  for (const auto& [pid, start] : tracked_) kill_verified(pid, start);
  for (pid_t c : children_) kill_verified(c, 0);  // our own unreaped children
  for (pid_t c : children_) ::waitpid(c, nullptr, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::map<std::string, std::string> SimNode::env() const {
  std::map<std::string, std::string> e = {{"GPUREAP_NVML_LIBRARY", nvml_library_},
                                          {"GPUREAP_SIM_DIR", dir_},
                                          {"GPUREAP_DEV_DIR", dir_ + "/dev"},
                                          {"GPUREAP_STATE_DIR", state_dir_},
                                          {"GPUREAP_NVIDIA_SMI", dir_ + "/bin/nvidia-smi"}};
  // A node with AMD GPUs (--vendor amd, --amd-gpus): its sysfs tree, as `node` prints it.
  std::error_code ec;
  if (std::filesystem::exists(dir_ + "/sys/class/kfd", ec)) e["GPUREAP_SYSFS_ROOT"] = dir_ + "/sys";
  return e;
}

CommandResult SimNode::gpureap(const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout,
                               const std::map<std::string, std::string>& extra_env) const {
  std::vector<std::string> argv = {GPUREAP_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  auto e = env();
  for (const auto& [k, v] : extra_env) e[k] = v;
  return run_command(argv, e, timeout);
}

CommandResult SimNode::sim(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {GPUREAP_SIM_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, env(), std::chrono::seconds(30));
}

HoldResult SimNode::crash_watched(std::vector<std::string> args,
                                  const std::map<std::string, std::string>& extra_env) {
  // The server's title replaces the argv its workers inherit: a --label stays in it, so
  // that --keep and --match still see it.
  std::string title = "python3 -m vllm.entrypoints.openai.api_server";
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--label") title += " " + args[i + 1];
  args.insert(args.end(), {"--server-title", title});
  HoldResult held = hold(args, false, extra_env);
  std::vector<pid_t> workers;
  for (const auto& h : held.holders) workers.push_back(h.first);
  EXPECT_TRUE(agent_sees(workers)) << "the agent never answered with the workers";
  held.killed_at = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_EQ(::kill(held.leader, SIGKILL), 0);
  return held;
}

bool SimNode::agent_sees(const std::vector<pid_t>& pids) const {
  return eventually(
      [&] {
        auto s = gpureap({"--json", "status"});
        if (s.exit_code != 0) return false;
        auto j = nlohmann::json::parse(s.out, nullptr, false);
        if (j.is_discarded() || j.value("source", "") != "agent") return false;
        // Found by its open device node (the agent's own scan, which watches its parent),
        // not only listed by NVML.
        std::set<pid_t> seen;
        for (const auto& g : j["gpus"])
          for (const auto& h : g["holders"])
            for (const auto& how : h["found_by"])
              if (how == "fd") seen.insert(h["pid"].get<pid_t>());
        return std::all_of(pids.begin(), pids.end(), [&](pid_t p) { return seen.contains(p); });
      },
      std::chrono::seconds(20));
}

HoldResult SimNode::hold(const std::vector<std::string>& args, bool foreground,
                         const std::map<std::string, std::string>& extra_env) {
  std::vector<std::string> argv = {GPUREAP_SIM_BIN, "hold", "--dir", dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  if (!foreground) argv.push_back("--detach");
  HoldResult result;
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  auto hold_env = env();
  for (const auto& [k, v] : extra_env) hold_env[k] = v;
  auto env_strings = merged_env(hold_env);
  std::vector<char*> envp, cargs;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : argv) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::execve(cargs[0], cargs.data(), envp.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  children_.push_back(pid);
  // Read the one ready line (bounded).
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pollfd pfd{out_pipe[0], POLLIN, 0};
  char c;
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    if (::poll(&pfd, 1, 100) <= 0) continue;
    if (::read(out_pipe[0], &c, 1) != 1) break;
    line += c;
  }
  ::close(out_pipe[0]);
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.contains("leader")) {
    ADD_FAILURE() << "gpureap-sim hold gave no ready line: '" << line << "'";
    return result;
  }
  result.leader = j["leader"].get<pid_t>();
  result.listen_port = j.value("listen_port", 0u);
  result.keeper = j.value("keeper", 0);
  for (auto& p : j["pids"]) {
    result.pids.push_back(p.get<pid_t>());
    tracked_.emplace_back(result.pids.back(), start_time_of(result.pids.back()));
  }
  for (auto& h : j["holders"])
    result.holders.emplace_back(h["pid"].get<pid_t>(), h["gpu"].get<unsigned>());
  if (!foreground) {
    int status;
    ::waitpid(pid, &status, 0);  // the detaching parent exits at once
    std::erase(children_, pid);
  }
  return result;
}

bool SimNode::eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  // A predicate that runs a command (`gpureap status` scans /proc) is asked at most half
  // the time: the pause after an answer is as long as the answer took (10-100 ms), so
  // tests polling side by side under `ctest -j` leave the CPU to what they wait for.
  using namespace std::chrono_literals;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto asked = std::chrono::steady_clock::now();
    if (pred()) return true;
    const auto took = std::chrono::steady_clock::now() - asked;
    std::this_thread::sleep_for(std::clamp<std::chrono::steady_clock::duration>(took, 10ms, 100ms));
  }
  return pred();
}

std::string own_job_id(unsigned n) {
  return std::to_string(::getpid()) + (n < 10 ? "00" : n < 100 ? "0" : "") + std::to_string(n);
}

std::uint64_t start_time_of(pid_t pid) {
  // Not an ifstream: a read of a process that exited under it throws (ESRCH).
  std::string s = proc::read_small_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(s.substr(close + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) return std::stoull(f);
  return 0;
}

const std::string kPyhold = std::string(GPUREAP_SOURCE_DIR) + "/tests/e2e/pyhold.py";

pid_t pid_in(const std::string& file) {
  pid_t pid = 0;
  SimNode::eventually(
      [&] {
        std::ifstream in(file);
        return static_cast<bool>(in >> pid) && pid > 0;
      },
      std::chrono::seconds(20));
  return pid;
}

void wait_until_older_than(pid_t pid, double seconds) {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double started = static_cast<double>(start_time_of(pid)) / hz;
  while (alive(pid)) {
    const std::string up = proc::read_small_file("/proc/uptime");
    if (std::strtod(up.c_str(), nullptr) - started >= seconds) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

char state_of(pid_t pid) {
  // Not an ifstream: a read of a process that exited under it throws (ESRCH).
  std::string s = proc::read_small_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return '\0';
  return s[close + 2];
}

bool alive(pid_t pid) {
  char s = state_of(pid);
  return s != '\0' && s != 'Z' && s != 'X';
}

const nlohmann::json* gpu_of(const nlohmann::json& status, const std::string& id) {
  for (const auto& g : status.at("gpus"))
    if (g.at("index").dump() == id || g.at("index") == id) return &g;
  return nullptr;
}

}  // namespace gpureap::e2e
