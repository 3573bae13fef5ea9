#include "prometheus_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

extern char** environ;

namespace gpureap::e2e {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

int milliseconds_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// A port nothing listens on now. Prometheus binds it a moment later; should
// another process take it meanwhile, Prometheus exits and the start is retried.
std::uint16_t free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? ntohs(a.sin_port) : 0;
}

std::string percent_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// ---- the server process ------------------------------------------------------

// Starts `argv` with stdout and stderr appended to `log`; returns its pid and pidfd.
std::pair<pid_t, int> spawn_logged(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> args;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Should the test process die, Prometheus must not outlive it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::execv(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) return {-1, -1};
  return {pid, static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
}

bool exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

// SIGTERM through the pidfd (our own unreaped child: the pidfd cannot name
// another process), up to 10 s for Prometheus to close its TSDB, then SIGKILL.
void stop(pid_t pid, int pidfd) {
  if (pidfd >= 0) {
    ::syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, nullptr, 0);
    pollfd p{pidfd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) {
      ADD_FAILURE() << "prometheus (pid " << pid << ") ignored SIGTERM for 10 s: killed";
      ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    }
    ::close(pidfd);
  }
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

// ---- HTTP and promtool -------------------------------------------------------

HttpReply http_get(std::uint16_t port, const std::string& target,
                   std::chrono::milliseconds timeout) {
  HttpReply reply;
  auto deadline = Clock::now() + timeout;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return reply;
  }
  std::string request = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return reply;
  }
  std::string all;
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  bool eof = false;
  while (!eof && ::poll(&p, 1, milliseconds_left(deadline)) > 0) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0)
      eof = true;
    else
      all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  auto end = all.find("\r\n\r\n");
  if (!eof || end == std::string::npos || !all.starts_with("HTTP/1.")) return reply;
  reply.status = std::atoi(all.c_str() + 9);
  reply.body = all.substr(end + 4);
  return reply;
}

std::pair<int, std::string> promtool_check_metrics(const std::string& text) {
  std::string dir = make_temp_dir("gpureap-promtool-");
  std::ofstream(dir + "/metrics.prom") << text;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, (dir + "/metrics.prom").c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, (dir + "/out").c_str(), O_WRONLY | O_CREAT, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char arg0[] = "promtool", arg1[] = "check", arg2[] = "metrics";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  pid_t pid = 0;
  std::pair<int, std::string> result{-1, "promtool not found: run scripts/install-deps.sh"};
  if (::posix_spawnp(&pid, "promtool", &fa, nullptr, argv, environ) == 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    result = {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
              read_file(dir + "/out")};
  }
  posix_spawn_file_actions_destroy(&fa);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

// ---- PrometheusServer --------------------------------------------------------

PrometheusServer::PrometheusServer(const std::string& target,
                                   const std::vector<std::string>& rule_files,
                                   const std::string& job_extra) {
  dir_ = make_temp_dir("gpureap-prometheus-");
  std::ofstream config(dir_ + "/prometheus.yml");
  config << "global:\n"
                                             "  scrape_interval: 1s\n"
                                             "  scrape_timeout: 1s\n"
                                             "  evaluation_interval: 1s\n"
                                             "scrape_configs:\n"
                                             "  - job_name: gpureap\n"
                                             "    static_configs:\n"
                                             "      - targets: ['"
                                          << target << "']\n"
         << job_extra;
  if (!rule_files.empty()) config << "rule_files:\n";
  for (const auto& f : rule_files) config << "  - '" << f << "'\n";
  config.close();
  // A port picked here may be taken before Prometheus binds it: then it exits at
  // once, and another port is tried.
  for (int attempt = 0; attempt < 3 && pid_ < 0; ++attempt) {
    port_ = free_loopback_port();
    auto start = Clock::now();
    auto [pid, pidfd] = spawn_logged(
        {"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
         "--storage.tsdb.path=" + dir_ + "/data",
         "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"},
        dir_ + "/prometheus.log");
    if (pid < 0) break;
    bool ready = false, gone = false;
    auto deadline = start + std::chrono::seconds(60);
    while (!ready && !(gone = exited(pid)) && Clock::now() < deadline) {
      ready = http_get(port_, "/-/ready", std::chrono::seconds(2)).status == 200;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (ready) {
      seconds_to_ready_ = std::chrono::duration<double>(Clock::now() - start).count();
      pid_ = pid;
      pidfd_ = pidfd;
    } else if (!gone) {
      stop(pid, pidfd);  // alive but not ready within the deadline: give up
      break;
    } else if (pidfd >= 0) {
      ::close(pidfd);  // exited (reaped above): the port was taken, try another
    }
  }
  if (pid_ < 0) ADD_FAILURE() << "prometheus did not become ready:\n" << log();
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) stop(pid_, pidfd_);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PrometheusServer::log() const {
  return read_file(dir_ + "/prometheus.log");
}

nlohmann::json PrometheusServer::query(const std::string& expr) const {
  if (pid_ < 0) return nullptr;
  auto reply = http_get(port_, "/api/v1/query?query=" + percent_encode(expr));
  if (reply.status != 200) return nullptr;
  auto j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return nullptr;
  return j;
}

std::optional<nlohmann::json> PrometheusServer::wait_for(
    const std::string& expr, const std::function<bool(const nlohmann::json&)>& pred,
    std::chrono::milliseconds timeout, nlohmann::json* last) const {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto j = query(expr);
    if (!j.is_null()) {
      const auto& result = j["data"]["result"];
      if (last) *last = result;
      if (pred(result)) return result;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    // Prometheus has new data once a second (the scrape interval).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ListeningAgent start_listening_agent(const SimNode& node, std::vector<std::string> extra) {
  using namespace std::chrono_literals;
  ListeningAgent a;
  std::vector<std::string> args = {"--json", "watch", "--listen", "127.0.0.1:0"};
  args.insert(args.end(), extra.begin(), extra.end());
  a.child.emplace(WatchChild::gpureap(node, args));
  auto started = a.child->wait_for_json(
      [](const nlohmann::json& j) { return j.value("event", "") == "started"; }, 30s);
  if (!started || !(*started)["listen"].is_string()) {
    ADD_FAILURE() << "no started line naming the address:\n" << a.child->transcript();
    return a;
  }
  a.listen = (*started)["listen"].get<std::string>();
  a.port = static_cast<std::uint16_t>(std::stoi(a.listen.substr(a.listen.rfind(':') + 1)));
  EXPECT_NE(a.port, 0) << a.listen;
  return a;
}

std::map<std::string, double> by_label(const nlohmann::json& result, const std::string& label) {
  std::map<std::string, double> out;
  if (!result.is_array()) return out;
  for (const auto& sample : result) {
    const auto& metric = sample["metric"];
    std::string key = metric.contains(label) ? metric[label].get<std::string>() : "";
    out[key] = std::stod(sample["value"][1].get<std::string>());
  }
  return out;
}

}  // namespace gpureap::e2e
