#pragma once
// The agent's answers: the control socket (`gpureap status` and the first look of free
// and wait, the history top seeds its sparklines from, NVML let go and taken up again)
// and HTTP (/metrics, /healthz), each answered on the loop thread from what the loop
// knows. The policy of freshness lives here: a scrape looks again at most once a second
// (W2-18), a uid other than root causes at most kSocketRefreshesPerUid looks a second
// (W3-11), and clients that ask together share one look (W2-17). What a look is, the
// loop says (AnswerSource).

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/control_socket.h"
#include "agent/http_server.h"
#include "agent/options.h"
#include "agent/request_queue.h"
#include "inventory/gpu_history.h"
#include "inventory/inventory.h"
#include "inventory/node.h"
#include "report/watch_service.h"
#include "util/result.h"

namespace gpureap::agent {

/// A scrape this soon after the last look is answered from it (docs/metrics.md).
inline constexpr std::chrono::seconds kScrapeRefreshInterval{1};
/// The looks one uid other than root causes with status questions in a second; past
/// them, its questions are answered from the last look (W3-11). Questions that arrive
/// together share one look, whoever asks.
inline constexpr unsigned kSocketRefreshesPerUid = 4;

/// What the answers need of the agent's loop (a fake in tests).
class AnswerSource {
 public:
  virtual ~AnswerSource() = default;
  /// Takes a fresh look and publishes it (events, counters).
  virtual void look_now() = 0;
  /// When the last look was taken (a tick's, a question's); nullopt: none yet.
  virtual std::optional<util::Clock::time_point> last_look() const = 0;
  virtual const inventory::Inventory& inventory() const = 0;
  /// /healthz: what degrades the agent, and notes.
  virtual report::AgentHealth health() const = 0;
  /// The exposition for /metrics (`scrape_seconds`: the look this scrape took, if any).
  virtual std::string metrics(std::optional<double> scrape_seconds) = 0;
  /// NVML let go (a GPU reset): no look may be taken.
  virtual bool nvml_yielded() const = 0;
  virtual void yield_nvml(std::chrono::milliseconds how_long, const std::string& by) = 0;
  virtual void resume_nvml(const std::string& by, const std::string& note) = 0;
  /// A reap is under way: NVML is not let go meanwhile.
  virtual bool reaping() const = 0;
};

class Answers {
 public:
  /// `node` and `source` outlive the answers.
  Answers(inventory::Node& node, AnswerSource& source) : node_(node), source_(source) {}

  /// Binds the control socket (options.state_dir, options.socket_group) and, with
  /// options.listen, the HTTP server (options.web).
  Result<void> open(const AgentOptions& options);
  /// The address the HTTP server really listens on (port 0 picks one); nullopt: none.
  std::optional<std::string> listen_address() const;

  /// What the loop polls for the answers: the request queue first, then the socket's.
  std::vector<pollfd> poll_fds() const;
  /// The earliest deadline of a socket client in progress (dropped on time).
  std::optional<std::chrono::steady_clock::time_point> next_deadline() const;
  /// Every socket client side by side, none waited for (W2-17; drops the late ones), then
  /// the HTTP questions waiting when `queue_ready`.
  void serve(bool queue_ready);
  /// The loop is ending: HTTP questions still waiting are answered 503.
  void close() { queue_.close(); }

  /// Each look's figures into the history; at most one reading per `spacing` seconds.
  void record(const inventory::Inventory& inv, double now, double spacing);

  /// One socket question, answered (the loop thread).
  std::string control_answer(const Peer& peer, const std::string& request);
  /// One HTTP question (the HTTP server's thread: the work runs on the loop's).
  HttpResponse http_answer(std::string_view path);

 private:
  std::string source_request(const Peer& peer, const std::string& request);
  HttpResponse metrics_answer();

  inventory::Node& node_;
  AnswerSource& source_;
  RequestQueue queue_;
  std::optional<ControlServer> control_;
  std::optional<HttpServer> http_;
  std::optional<std::string> listen_;          // as configured
  inventory::GpuHistory history_;              // each GPU's readings, the last ten minutes
  struct SocketRate {
    util::Clock::time_point second{};
    unsigned refreshes = 0;
  };
  std::map<uid_t, SocketRate> socket_rates_;  // this second's questions, by uid
  bool batch_refreshed_ = false;  // a question of this batch of clients caused a look
};

}  // namespace gpureap::agent
