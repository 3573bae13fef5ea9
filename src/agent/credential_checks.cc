#include "agent/credential_checks.h"

#include <algorithm>

#include "util/signal_mask.h"

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;

constexpr auto kFirstBackoff = 1s;
constexpr auto kLongestBackoff = 16s;
// A client's failures are forgotten this long after its backoff ended.
constexpr auto kForgetAfter = 60s;

void wipe(std::string& secret) {
  std::fill(secret.begin(), secret.end(), '\0');
  secret.clear();
}

}  // namespace

CredentialChecks::CredentialChecks(BasicAuth& auth, unsigned threads,
                                   std::function<Clock::time_point()> now)
    : auth_(auth), now_(std::move(now)) {
  StopSignalsBlocked quiet;  // the workers take no stop signal: the main thread does
  for (unsigned i = 0; i < std::max(threads, 1U); ++i) workers_.emplace_back([this] { work(); });
}

CredentialChecks::~CredentialChecks() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (Job& job : jobs_) wipe(job.password);
    jobs_.clear();
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool CredentialChecks::refused_locked(const std::string& client, std::uint64_t seq) const {
  auto it = failures_.find(client);
  if (it == failures_.end()) return false;
  return now_() < it->second.until || seq < it->second.seq;
}

void CredentialChecks::record_locked(const std::string& client, bool let_in) {
  if (let_in) {
    failures_.erase(client);
    return;
  }
  const auto now = now_();
  std::erase_if(failures_, [&](const auto& f) { return now - f.second.until > kForgetAfter; });
  Failures& f = failures_[client];
  f.count = std::min(f.count + 1, 5U);
  f.until = now + std::min<Clock::duration>(kFirstBackoff * (1U << (f.count - 1)), kLongestBackoff);
  f.seq = next_seq_;
}

CredentialChecks::Quick CredentialChecks::quick(const std::string& client, const char* user,
                                                std::string_view password) {
  if (!user) return Quick::refused;
  if (auth_.remembered(user, password)) return Quick::let_in;
  std::lock_guard lock(mutex_);
  return refused_locked(client, next_seq_) ? Quick::refused : Quick::needs_check;
}

void CredentialChecks::submit(const std::string& client, std::string user, std::string password,
                              Done done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({next_seq_++, client, std::move(user), std::move(password), std::move(done)});
  }
  wake_.notify_one();
}

void CredentialChecks::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    bool let_in = false;
    if (!refused_locked(job.client, job.seq)) {
      lock.unlock();
      let_in = auth_.check(job.user, job.password);
      lock.lock();
      record_locked(job.client, let_in);
    }
    wipe(job.password);
    lock.unlock();
    job.done(let_in);
    lock.lock();
  }
}

}  // namespace gpureap::agent
