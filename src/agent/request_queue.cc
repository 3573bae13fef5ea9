#include "agent/request_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

namespace gpureap::agent {

RequestQueue::RequestQueue() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

HttpResponse RequestQueue::call(std::function<HttpResponse()> job) {
  auto task = std::make_shared<std::packaged_task<HttpResponse()>>(std::move(job));
  auto result = task->get_future();
  {
    std::lock_guard lock(mutex_);
    if (closed_) return {503, "text/plain; charset=utf-8", "gpureap watch is stopping\n"};
    jobs_.push_back(task);
  }
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
    return {503, "text/plain; charset=utf-8", "gpureap watch is busy\n"};
  return result.get();
}

void RequestQueue::run_pending() {
  std::uint64_t n = 0;
  (void)!::read(wake_.get(), &n, sizeof n);
  std::deque<Job> jobs;
  {
    std::lock_guard lock(mutex_);
    jobs.swap(jobs_);
  }
  for (auto& job : jobs) (*job)();
}

void RequestQueue::close() {
  std::deque<Job> jobs;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    jobs.swap(jobs_);
  }
  for (auto& job : jobs) (*job)();  // answer whoever is still waiting
}

}  // namespace gpureap::agent
