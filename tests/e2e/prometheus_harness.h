#pragma once
// End-to-end tests against a real Prometheus server (Debian's `prometheus`,
// scripts/install-deps.sh): a long-running child whose stdout lines a test reads
// (the agent, `gpureap watch`), a tiny HTTP GET for loopback, and PrometheusServer,
// which runs `prometheus` on a free loopback port with a temporary configuration
// and data directory, scraping one target every second, and answers PromQL
// queries through /api/v1/query. Every wait is bounded; every process started
// here is stopped through its pidfd, also when the test fails.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpureap::e2e {

/// A child process started by the test (no PATH search: argv[0] is a path), with
/// `env` added to ours. Its stderr goes to `log_file`; its stdout is a pipe read
/// line by line, or goes to `log_file` too when `stdout_to_log`.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               const std::string& log_file, bool stdout_to_log = false);
  ~ChildProcess();  // stop()
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// The next line of stdout without its '\n'; nullopt at the deadline or at EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  /// The lines that are already there, without waiting.
  std::vector<std::string> available_lines();
  /// True while the child has not exited (it is reaped here when it has).
  bool running();
  /// SIGTERM through the pidfd, up to `grace` for it to exit, then SIGKILL; returns
  /// its exit status (128+signal when killed). Idempotent.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(10));

 private:
  bool fill(std::chrono::milliseconds timeout);  // reads what the pipe has; false: nothing
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  std::optional<int> status_;
};

struct HttpReply {
  int status = 0;  // 0: no reply (connection failed or timed out)
  std::string body;
};
/// GET http://127.0.0.1:PORT<target> (HTTP/1.0, so no chunked reply), bounded.
HttpReply http_get(std::uint16_t port, const std::string& target,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// `promtool check metrics` over `text`: exit status and what it said.
std::pair<int, std::string> promtool_check_metrics(const std::string& text);

class PrometheusServer {
 public:
  /// Starts `prometheus` on 127.0.0.1 (a free port) scraping `target`
  /// ("127.0.0.1:PORT", path /metrics) every second, and waits (bounded) until it
  /// answers queries. Fails the test when it cannot start.
  explicit PrometheusServer(const std::string& target);
  ~PrometheusServer();  // stops the server through its pidfd, removes its directory
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  bool started() const { return child_ != nullptr; }
  std::uint16_t port() const { return port_; }
  /// Seconds from the start of the process to /-/ready answering 200.
  double seconds_to_ready() const { return seconds_to_ready_; }

  /// GET /api/v1/query?query=<expr>: the parsed reply (status, data.result), or a
  /// null JSON when there was no usable reply.
  nlohmann::json query(const std::string& expr) const;
  /// Queries `expr` until `pred(data.result)` holds or `timeout` passes; returns
  /// the last result (check it with `pred` again, or print it on failure).
  std::optional<nlohmann::json> wait_for(const std::string& expr,
                                         const std::function<bool(const nlohmann::json&)>& pred,
                                         std::chrono::milliseconds timeout,
                                         nlohmann::json* last = nullptr) const;
  /// What Prometheus logged (for failure messages).
  std::string log() const;

 private:
  std::string dir_;
  std::uint16_t port_ = 0;
  double seconds_to_ready_ = 0;
  std::unique_ptr<ChildProcess> child_;
};

/// data.result of a vector query as label value of `label` -> sample value.
std::map<std::string, double> by_label(const nlohmann::json& result, const std::string& label);

}  // namespace gpureap::e2e
