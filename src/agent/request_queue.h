#pragma once
// Questions from other threads (the HTTP server's) for the agent's loop thread, which
// alone touches what the agent knows: each waits on its promise, the loop wakes on the
// eventfd and runs them.

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>

#include "agent/http_server.h"
#include "util/fd.h"

namespace gpureap::agent {

class RequestQueue {
 public:
  RequestQueue();
  /// Readable when a job waits: the loop polls it.
  int fd() const { return wake_.get(); }

  /// Runs `job` on the loop thread and returns its result; a stopped loop answers 503,
  /// a loop that does not get to it within 30 s too.
  HttpResponse call(std::function<HttpResponse()> job);
  /// The loop thread: runs every job waiting.
  void run_pending();
  /// No more jobs: those still waiting are answered now (503 from then on).
  void close();

 private:
  using Job = std::shared_ptr<std::packaged_task<HttpResponse()>>;
  UniqueFd wake_;
  std::mutex mutex_;
  bool closed_ = false;
  std::deque<Job> jobs_;
};

}  // namespace gpureap::agent
