#pragma once
// Basic authentication off the HTTP server's one thread (W4-09). A bcrypt check costs
// tens to hundreds of milliseconds by design; run on libmicrohttpd's thread, every
// client sending wrong passwords held every scrape and /healthz behind it. Here:
//   - a pair let in before is let in at once (BasicAuth::remembered, no bcrypt);
//   - no credentials, or a client within its failure budget, is refused at once;
//   - anything else waits for one of a few worker threads (the caller suspends the
//     connection meanwhile, and resumes it from `done`).
// A failed check refuses its client's further attempts for a while before any bcrypt:
// 1 s after the first failure, doubling with each further one up to 16 s, forgotten
// when the client is let in; a check that waited while its client failed is refused
// without bcrypt too. `client` is the server's key (address, and on loopback the uid).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/basic_auth.h"

namespace gpureap::agent {

class CredentialChecks {
 public:
  using Clock = std::chrono::steady_clock;
  /// The verdict, from a worker thread.
  using Done = std::function<void(bool let_in)>;
  static constexpr unsigned kThreads = 2;

  enum class Quick { let_in, refused, needs_check };

  explicit CredentialChecks(BasicAuth& auth, unsigned threads = kThreads,
                            std::function<Clock::time_point()> now = Clock::now);
  ~CredentialChecks();  // stops the workers after their check; waiting checks are dropped
  CredentialChecks(const CredentialChecks&) = delete;
  CredentialChecks& operator=(const CredentialChecks&) = delete;

  /// What can be said without bcrypt. `user` nullptr: no credentials sent.
  Quick quick(const std::string& client, const char* user, std::string_view password);
  /// Queues a check of `user`/`password` (after quick said needs_check); `done` is
  /// called once, from a worker, unless the checks stop first.
  void submit(const std::string& client, std::string user, std::string password, Done done);

 private:
  struct Job {
    std::uint64_t seq;
    std::string client, user, password;
    Done done;
  };
  struct Failures {
    unsigned count = 0;
    Clock::time_point until;  // refused before any bcrypt until then
    std::uint64_t seq = 0;    // checks queued before this one are refused too
  };
  bool refused_locked(const std::string& client, std::uint64_t seq) const;
  void record_locked(const std::string& client, bool let_in);
  void work();

  BasicAuth& auth_;
  std::function<Clock::time_point()> now_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::map<std::string, Failures> failures_;
  std::uint64_t next_seq_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace gpureap::agent
