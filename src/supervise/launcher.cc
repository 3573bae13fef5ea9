#include "supervise/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "util/poll.h"

namespace gpureap::supervise {
namespace {

// Reports from the reaper to the front, one SOCK_SEQPACKET message each.
enum MessageKind : std::int32_t {
  kStarted = 1,   // value: CMD's pid
  kForked,        // value: CMD's pid; CMD waits for the front's release before exec
  kSetupFailed,   // value: errno (fork or setsid failed)
  kCgroupFailed,  // value: errno of the write to cgroup.procs
  kExecFailed,    // value: errno of execvpe
  kCmdExited,     // value: CMD's wait status
  kAllReaped,     // the reaper has no children left
};

struct Message {
  std::int32_t kind = 0;
  std::int32_t value = 0;
};

// What CMD writes to its CLOEXEC pipe when it cannot get as far as exec.
// EOF on that pipe without a record means exec succeeded.
struct ChildFailure {
  std::int32_t kind = 0;  // kSetupFailed, kCgroupFailed or kExecFailed
  std::int32_t err = 0;
};

// Everything the reaper and CMD use after the fork, prepared before it: they
// must not allocate (the front may have had other threads holding malloc's lock).
struct ForkPlan {
  std::vector<char*> argv;
  std::vector<char*> envp;
  int cgroup_fd = -1;
  sigset_t original_mask{};
  int channel = -1;
  int release = -1;  // CMD's end of the release socket: a byte from the front lets it exec
  pid_t front = 0;
};

void send_message(int fd, std::int32_t kind, std::int32_t value) {
  Message m{kind, value};
  while (::send(fd, &m, sizeof m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// CMD's wait for the front's release: true on its byte, false on EOF (the front is gone).
bool wait_for_release(int fd) {
  char go = 0;
  ssize_t n;
  do {
    n = ::recv(fd, &go, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n == 1;
}

[[noreturn]] void cmd_main(const ForkPlan& plan, int failure_pipe) {
  // Back to the mask gpureap was started with. Dispositions are left alone: a
  // signal ignored by whoever started gpureap stays ignored (nohup relies on it).
  ::sigprocmask(SIG_SETMASK, &plan.original_mask, nullptr);
  ChildFailure failure;
  if (::setsid() < 0) {
    failure = {kSetupFailed, errno};
  } else if (plan.cgroup_fd >= 0 && ::write(plan.cgroup_fd, "0", 1) != 1) {
    // Moving ourselves before exec: nothing CMD forks is ever outside the cgroup.
    failure = {kCgroupFailed, errno};
  } else if (!wait_for_release(plan.release)) {
    // The front died (or gave up) before it recorded us: run nothing it cannot name.
    failure = {kSetupFailed, ECANCELED};
  } else {
    ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
    failure = {kExecFailed, errno};
  }
  (void)!::write(failure_pipe, &failure, sizeof failure);
  ::_exit(failure.kind == kExecFailed ? exit_code_for_exec_error(failure.err) : 126);
}

// Reaps every waitable child; reports CMD's status and, once CMD is gone and
// no child is left, that the run is empty.
void reap(pid_t cmd, int channel, bool& cmd_reaped, bool& empty_sent) {
  for (;;) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      if (p == cmd) {
        cmd_reaped = true;
        send_message(channel, kCmdExited, status);
      }
      continue;
    }
    if (p < 0 && errno == EINTR) continue;
    if (p < 0 && errno == ECHILD && cmd_reaped && !empty_sent) {
      empty_sent = true;
      send_message(channel, kAllReaped, 0);
    }
    return;
  }
}

[[noreturn]] void reaper_main(const ForkPlan& plan) {
  // Die with the front: a SIGKILLed gpureap must leave the run's processes
  // orphaned (and so reclaimable by `free --orphans`), not adopted by a reaper
  // that nobody supervises. The getppid() check closes the race with a front
  // that died before the prctl.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.front) ::_exit(0);
  // Orphans anywhere below us are re-parented to us, not to init (Linux >= 3.4).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::prctl(PR_SET_NAME, "gpureap-reaper");

  // SIGCHLD comes through a signalfd. Job-control stops are blocked so that a
  // Ctrl-Z to the terminal's foreground group cannot stop the reaping.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTSTP);
  sigaddset(&mask, SIGTTIN);
  sigaddset(&mask, SIGTTOU);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);

  int pipe_fds[2];
  if (sfd < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    send_message(plan.channel, kSetupFailed, errno);
    ::_exit(1);
  }
  pid_t cmd = ::fork();
  if (cmd == 0) {
    ::close(pipe_fds[0]);
    cmd_main(plan, pipe_fds[1]);
  }
  int fork_errno = errno;
  ::close(pipe_fds[1]);
  ::close(plan.release);  // CMD's alone: EOF there means the front is gone
  if (cmd < 0) {
    send_message(plan.channel, kSetupFailed, fork_errno);
    ::_exit(1);
  }
  send_message(plan.channel, kForked, cmd);
  ChildFailure failure;
  ssize_t n;
  do {
    n = ::read(pipe_fds[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof failure)) {
    // CMD never ran and is exiting: reap it before reporting, so that nothing
    // is left for init when the front closes the channel.
    while (::waitpid(cmd, nullptr, 0) < 0 && errno == EINTR) {
    }
    send_message(plan.channel, failure.kind, failure.err);
    ::_exit(0);
  } else {
    send_message(plan.channel, kStarted, cmd);
  }

  bool cmd_reaped = false;
  bool empty_sent = false;
  reap(cmd, plan.channel, cmd_reaped, empty_sent);
  for (;;) {
    pollfd fds[2] = {{plan.channel, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      }
      reap(cmd, plan.channel, cmd_reaped, empty_sent);
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      std::int32_t sig = 0;
      ssize_t r = ::recv(plan.channel, &sig, sizeof sig, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) ::_exit(0);  // the front is done
      // CMD is our child: until we reap it its pid cannot be reused, so a
      // plain kill() is race-free here (and only here).
      if (r == static_cast<ssize_t>(sizeof sig) && !cmd_reaped) ::kill(cmd, sig);
    }
  }
}

LaunchFailure failure_from(std::int32_t kind, int err) {
  switch (kind) {
    case kCgroupFailed:
      return {LaunchFailure::Stage::cgroup, err,
              std::string("cannot move the command into its cgroup: ") + std::strerror(err)};
    case kExecFailed:
      return {LaunchFailure::Stage::exec, err,
              err == ENOENT ? "command not found" : std::strerror(err)};
    default:
      return {LaunchFailure::Stage::setup, err,
              std::string("cannot start the command: ") + std::strerror(err)};
  }
}

}  // namespace

int exit_code_for_exec_error(int err) {
  return err == ENOENT ? 127 : 126;
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

// ---- ForwardedSignals ----

Result<ForwardedSignals> ForwardedSignals::block() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kForwardedSignals) sigaddset(&set, s);
  ForwardedSignals out;
  if (::sigprocmask(SIG_BLOCK, &set, &out.original_) != 0)
    return fail(Error::from_errno("sigprocmask").message);
  out.fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!out.fd_.valid()) return fail(Error::from_errno("signalfd").message);
  return out;
}

std::optional<int> ForwardedSignals::take() {
  signalfd_siginfo info;
  ssize_t n;
  do {
    n = ::read(fd_.get(), &info, sizeof info);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof info)) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

// ---- LaunchedRun ----

std::expected<LaunchedRun, LaunchFailure> LaunchedRun::start(const LaunchSpec& spec,
                                                             ForwardedSignals& signals) {
  if (spec.argv.empty())
    return std::unexpected(LaunchFailure{LaunchFailure::Stage::exec, ENOENT, "no command"});
  ForkPlan plan;
  for (const auto& a : spec.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  for (const auto& e : spec.env) plan.envp.push_back(const_cast<char*>(e.c_str()));
  plan.envp.push_back(nullptr);
  plan.cgroup_fd = spec.cgroup_procs_fd;
  plan.original_mask = signals.original_mask();
  plan.front = ::getpid();

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return std::unexpected(failure_from(kSetupFailed, errno));
  UniqueFd ours(sv[0]);
  UniqueFd theirs(sv[1]);
  plan.channel = theirs.get();
  // The release: only the front holds its end, so CMD hears EOF instead of a byte when
  // the front dies before letting it exec. A socket, so that a send to a CMD that
  // already failed is EPIPE, not SIGPIPE.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return std::unexpected(failure_from(kSetupFailed, errno));
  UniqueFd release(sv[0]);
  UniqueFd cmd_release(sv[1]);
  plan.release = cmd_release.get();
  pid_t reaper = ::fork();
  if (reaper == 0) {
    ours.reset();
    release.reset();
    reaper_main(plan);
  }
  int fork_errno = errno;
  theirs.reset();
  cmd_release.reset();
  if (reaper < 0) return std::unexpected(failure_from(kSetupFailed, fork_errno));

  LaunchedRun run;
  run.signals_ = &signals;
  run.reaper_ = proc::ProcessHandle::open_child(reaper);
  run.channel_ = std::move(ours);

  // CMD forked (the caller records it, then releases it), then whether it is running.
  for (;;) {
    Message m;
    ssize_t n = ::recv(run.channel_.get(), &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof m))
      return std::unexpected(
          LaunchFailure{LaunchFailure::Stage::setup, 0, "the reaper process died"});
    if (m.kind == kForked) {
      if (spec.before_exec) spec.before_exec(reaper, m.value);
      const char go = 1;
      // EPIPE: CMD failed before its wait; the reaper's report of why comes next.
      (void)::send(release.get(), &go, 1, MSG_NOSIGNAL);
      release.reset();
      continue;
    }
    if (m.kind == kStarted) {
      run.cmd_pid_ = m.value;
      return run;
    }
    return std::unexpected(failure_from(m.kind, m.value));  // `run` ends the reaper
  }
}

LaunchedRun& LaunchedRun::operator=(LaunchedRun&& o) noexcept {
  if (this != &o) {
    finish();
    signals_ = o.signals_;
    reaper_ = std::move(o.reaper_);
    channel_ = std::move(o.channel_);
    cmd_pid_ = o.cmd_pid_;
    cmd_status_ = o.cmd_status_;
    all_reaped_ = o.all_reaped_;
    reaper_lost_ = o.reaper_lost_;
  }
  return *this;
}

LaunchedRun::~LaunchedRun() {
  finish();
}

void LaunchedRun::handle_message(int kind, int value, RunEvent& event) {
  if (kind == kCmdExited) {
    cmd_status_ = value;
    event = {RunEvent::Kind::cmd_exited, value};
  } else if (kind == kAllReaped) {
    all_reaped_ = true;
    event = {RunEvent::Kind::all_reaped, 0};
  }
}

RunEvent LaunchedRun::next_event(Clock::time_point deadline) {
  for (;;) {
    bool watch_reaper = !reaper_lost_ && channel_.valid();
    pollfd fds[3] = {{watch_reaper ? channel_.get() : -1, POLLIN, 0},
                     {signals_ ? signals_->fd() : -1, POLLIN, 0},
                     {watch_reaper ? reaper_.fd() : -1, POLLIN, 0}};
    int r = ::poll(fds, 3, poll_timeout_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return {RunEvent::Kind::deadline, 0};
    // Reports first: when CMD exited and a signal came at once, the exit is the news.
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      Message m;
      ssize_t n = ::recv(channel_.get(), &m, sizeof m, MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(sizeof m)) {
        RunEvent event;
        handle_message(m.kind, m.value, event);
        if (event.kind != RunEvent::Kind::deadline) return event;
        continue;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        reaper_lost_ = true;
        return {RunEvent::Kind::reaper_lost, 0};
      }
    }
    if (fds[1].revents & POLLIN) {
      if (auto sig = signals_->take()) return {RunEvent::Kind::signal, *sig};
    }
    if (fds[2].revents & POLLIN) {
      // The reaper exited; anything it said before dying is read first (above).
      reaper_lost_ = true;
      return {RunEvent::Kind::reaper_lost, 0};
    }
  }
}

void LaunchedRun::take_pending(Clock::time_point deadline) {
  while (reaper_alive() && !(cmd_status() && all_reaped())) {
    if (next_event(deadline).kind == RunEvent::Kind::deadline) return;
  }
}

void LaunchedRun::forward(int signo) {
  if (!channel_.valid() || reaper_lost_ || cmd_status_) return;
  std::int32_t sig = signo;
  ::send(channel_.get(), &sig, sizeof sig, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void LaunchedRun::finish() {
  channel_.reset();  // the reaper exits when it sees EOF
  if (reaper_.id().pid > 0) {
    if (!reaper_.wait_exit(Clock::now() + std::chrono::seconds(2))) (void)reaper_.signal(SIGKILL);
    reaper_.reap();
    reaper_ = proc::ProcessHandle();
  }
}

}  // namespace gpureap::supervise
