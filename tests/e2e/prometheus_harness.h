#pragma once
// End-to-end tests against a real Prometheus server (Debian's `prometheus`,
// scripts/install-deps.sh): PrometheusServer runs `prometheus` on a free loopback
// port with a temporary configuration and data directory, scraping one target
// every second, and answers PromQL queries through /api/v1/query; a tiny HTTP GET
// for loopback; promtool. Every wait is bounded; the server is stopped through its
// pidfd, also when the test fails (and killed by the kernel should the test
// process die: PR_SET_PDEATHSIG). The agent itself runs as a WatchChild
// (start_listening_agent).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "watch_child.h"

namespace gpureap::e2e {

class SimNode;

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
  /// ("127.0.0.1:PORT", path /metrics, job `gpureap`) every second, evaluating the
  /// rules of `rule_files` (absolute paths) every second, and waits (bounded) until
  /// it answers queries. Fails the test when it cannot start.
  /// `job_extra`: YAML lines added to the job, indented by 4 (scheme, tls_config,
  /// basic_auth for an agent behind --web-config).
  explicit PrometheusServer(const std::string& target,
                            const std::vector<std::string>& rule_files = {},
                            const std::string& job_extra = "");
  ~PrometheusServer();  // stops the server through its pidfd, removes its directory
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  bool started() const { return pid_ > 0; }
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
  pid_t pid_ = -1;  // our child while started()
  int pidfd_ = -1;
};

/// `gpureap --json watch --listen 127.0.0.1:0 <extra>` on `node`; its started line
/// names the address (`listen`, as Prometheus's `instance` label shows it) and port.
struct ListeningAgent {
  std::optional<WatchChild> child;
  std::uint16_t port = 0;  // 0: it did not start (the test has failed, saying why)
  std::string listen;
};
ListeningAgent start_listening_agent(const SimNode& node, std::vector<std::string> extra = {});

/// data.result of a vector query as label value of `label` -> sample value.
std::map<std::string, double> by_label(const nlohmann::json& result, const std::string& label);

}  // namespace gpureap::e2e
