#include "watch_child.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "harness.h"

extern char** environ;

namespace gpureap::e2e {
namespace {

using Clock = std::chrono::steady_clock;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

WatchChild::WatchChild(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return;
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return;
  }
  pid_t pid = spawn_child(argv, env, out_pipe[1], err_pipe[1], true);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_ = out_pipe[0];
  err_fd_ = err_pipe[0];
  if (pid < 0) return;
  pid_ = pid;
  // Our own unreaped child: the pid cannot name another process yet.
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd_ < 0) ADD_FAILURE() << "pidfd_open: " << std::strerror(errno);
}

WatchChild WatchChild::gpureap(const SimNode& node, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GPUREAP_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return WatchChild(argv, node.env());
}

WatchChild::WatchChild(WatchChild&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::exchange(o.pidfd_, -1)),
      out_(std::exchange(o.out_, -1)),
      err_fd_(std::exchange(o.err_fd_, -1)),
      out_buf_(std::move(o.out_buf_)),
      err_(std::move(o.err_)),
      lines_(std::move(o.lines_)),
      next_(o.next_),
      exit_status_(o.exit_status_) {}

WatchChild::~WatchChild() {
  if (pid_ > 0 && !exit_status_) {
    if (pidfd_ >= 0) ::syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  for (int fd : {pidfd_, out_, err_fd_})
    if (fd >= 0) ::close(fd);
}

bool WatchChild::running() {
  if (pid_ <= 0 || exit_status_) return false;
  pollfd p{pidfd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) exit_status_ = status_code(status);
  return false;
}

bool WatchChild::pump(Clock::time_point deadline) {
  const std::size_t had = lines_.size();
  char buf[65536];
  while (out_ >= 0 || err_fd_ >= 0) {
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_fd_, POLLIN, 0}};  // poll skips a closed (-1) one
    int r = ::poll(fds, 2, ms_until(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(err_fd_, buf, sizeof buf);
      if (n > 0) {
        err_.append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(err_fd_);
        err_fd_ = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) {
        ::close(out_);
        out_ = -1;
        break;
      }
      out_buf_.append(buf, static_cast<std::size_t>(n));
      for (auto nl = out_buf_.find('\n'); nl != std::string::npos; nl = out_buf_.find('\n')) {
        lines_.push_back({out_buf_.substr(0, nl), Clock::now(), wall_now()});
        out_buf_.erase(0, nl + 1);
      }
    }
    if (lines_.size() > had) break;
  }
  return out_ >= 0 || lines_.size() > had;
}

std::optional<WatchChild::Line> WatchChild::next_line(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    while (next_ < lines_.size() && next_ < taken_.size() && taken_[next_]) ++next_;
    if (next_ < lines_.size()) break;
    if (out_ < 0 || Clock::now() >= deadline) return std::nullopt;
    pump(deadline);
  }
  return lines_[next_++];
}

std::optional<nlohmann::json> WatchChild::wait_for_json(
    const std::function<bool(const nlohmann::json&)>& pred, std::chrono::milliseconds timeout,
    Line* line) {
  // The first matching line not yet returned, wherever it is: events of one change
  // (two GPUs orphaned at once) come in the agent's order, which need not be the
  // order a test asks for them in. Lines it passes over stay for next_line().
  const auto deadline = Clock::now() + timeout;
  std::size_t i = next_;
  for (;;) {
    while (i >= lines_.size()) {
      if (out_ < 0 || Clock::now() >= deadline) return std::nullopt;
      pump(deadline);
    }
    if (taken_.size() < lines_.size()) taken_.resize(lines_.size(), false);
    if (!taken_[i]) {
      auto j = nlohmann::json::parse(lines_[i].text, nullptr, false);
      if (j.is_object() && pred(j)) {
        taken_[i] = true;
        if (line) *line = lines_[i];
        return j;
      }
    }
    ++i;
  }
}

std::string WatchChild::transcript() const {
  std::string out = "stdout:\n";
  for (const auto& l : lines_) out += "  " + l.text + "\n";
  if (!out_buf_.empty()) out += "  " + out_buf_ + " (no newline yet)\n";
  return out + "stderr:\n" + err_;
}

int WatchChild::terminate(std::chrono::milliseconds timeout,
                          std::optional<std::chrono::milliseconds> again) {
  if (pid_ <= 0) return -1;
  if (exit_status_) return *exit_status_;
  ::syscall(SYS_pidfd_send_signal, pidfd_, SIGTERM, nullptr, 0);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;
    if (Clock::now() >= deadline) {
      ::syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_status_ = status_code(status);
      return -1;
    }
    if (again) ::syscall(SYS_pidfd_send_signal, pidfd_, SIGTERM, nullptr, 0);
    // Keep reading: an agent blocked on a full pipe would never exit. Bounded
    // slices, so the pidfd is looked at again soon after the pipes close.
    if (out_ >= 0 || err_fd_ >= 0) {
      pump(std::min(deadline, Clock::now() + again.value_or(std::chrono::milliseconds(50))));
    } else {
      // Both pipes closed: wait on the pidfd alone.
      ::poll(&p, 1, again ? static_cast<int>(again->count()) : ms_until(deadline));
    }
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_status_ = status_code(status);
  // What it wrote before exiting (its pipes are at EOF once it and its children are gone).
  const auto drain_until = Clock::now() + std::chrono::seconds(1);
  while ((out_ >= 0 || err_fd_ >= 0) && Clock::now() < drain_until) pump(drain_until);
  return *exit_status_;
}

namespace {
// `gpureap --json watch --no-listen ARGS`, its "started" line read.
WatchChild started_watch(const SimNode& node, std::vector<std::string> args) {
  args.insert(args.begin(), {"--json", "watch", "--no-listen"});
  WatchChild agent = WatchChild::gpureap(node, args);
  auto first = agent.next_line(std::chrono::seconds(30));
  EXPECT_TRUE(first && first->text.find("\"started\"") != std::string::npos) << agent.transcript();
  return agent;
}
}  // namespace

WatchChild start_json_agent(const SimNode& node, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--tick", "200ms"};
  args.insert(args.end(), extra.begin(), extra.end());
  return started_watch(node, std::move(args));
}

WatchChild start_eager_reaper(const SimNode& node) {
  return started_watch(node, {"--tick", "100ms", "--reap-orphans-after", "300ms"});
}

std::string reaped_besides_a_control(SimNode& node, WatchChild& agent, unsigned control_gpu) {
  auto control = node.crash_watched({"--gpu", std::to_string(control_gpu), "--children", "1",
                                     "--bytes", "1GiB", "--comm", "VLLM::Worker_TP0"});
  const pid_t worker = control.holders.at(0).first;
  auto names_only_the_control = [&](const nlohmann::json& j) {
    const auto& holders = j["holders"];
    return holders.is_array() && holders.size() == 1 && holders[0].value("pid", 0) == worker;
  };
  std::string besides;
  auto reaped_control = agent.wait_for_json(
      [&](const nlohmann::json& j) {
        const auto e = j.value("event", "");
        if (e != "reaped" && e != "reap_planned" && e != "reap_failed") return false;
        if (!names_only_the_control(j)) besides += j.dump() + "\n";
        return e == "reaped" && names_only_the_control(j);
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(reaped_control) << "the control (worker " << worker << " on GPU " << control_gpu
                              << ") was never reaped:\n"
                              << agent.transcript();
  return besides;
}

}  // namespace gpureap::e2e
