#include "proc/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "util/fd.h"
#include "util/poll.h"

namespace gpureap::proc {
namespace {

// In the forked child. argv was prepared before the fork; after a failed exec
// only strerror() is not async-signal-safe, and the child exits right after.
[[noreturn]] void exec_child(char* const* argv, int out) {
  ::dup2(out, 1);
  ::dup2(out, 2);
  ::execvp(argv[0], argv);
  const int err = errno;
  write_all(2, "cannot run ");
  write_all(2, argv[0]);
  write_all(2, ": ");
  write_all(2, std::strerror(err));
  write_all(2, "\n");
  ::_exit(127);
}

}  // namespace

Result<CapturedRun> spawn_captured(const std::vector<std::string>& argv,
                                   std::chrono::steady_clock::time_point deadline) {
  if (argv.empty()) return fail("nothing to run");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return std::unexpected(Error::from_errno("pipe"));
  UniqueFd reader(pipefd[0]);
  UniqueFd writer(pipefd[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return std::unexpected(Error::from_errno("fork"));
  if (pid == 0) exec_child(args.data(), writer.get());
  writer.reset();
  ProcessHandle child = ProcessHandle::open_child(pid);

  // EOF on the pipe comes before the child is waitable (and a grandchild may
  // hold the pipe open after it exits): read until EOF or the deadline, then
  // wait on the pidfd for the time left rather than asking once.
  CapturedRun run;
  char buf[4096];
  while (poll_until(reader.get(), POLLIN, deadline) != 0) {
    ssize_t n = ::read(reader.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.output.append(buf, static_cast<std::size_t>(n));
  }
  reader.reset();
  if (!child.wait_exit(deadline)) {
    run.timed_out = true;
    (void)child.signal(SIGKILL);  // our own unreaped child
  }
  run.exit = child.reap();
  return run;
}

}  // namespace gpureap::proc
