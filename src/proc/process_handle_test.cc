#include "proc/process_handle.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>

#include "proc/proc_parse.h"
#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;
using testing::Children;
using testing::park;
using testing::signal_ready;
using testing::spawn_parked;

ProcessHandle open_or_die(pid_t pid) {
  auto id = read_process_id(pid, "/proc");
  EXPECT_TRUE(id);
  auto h = ProcessHandle::open(*id, "/proc");
  if (!h) throw std::runtime_error(h.error().message);
  return std::move(*h);
}

TEST(ReadProcessId, MatchesStatOfSelf) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  auto st = parse_stat(line);
  ASSERT_TRUE(st);
  auto id = read_process_id(::getpid(), "/proc");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, ::getpid());
  EXPECT_EQ(id->start_time, st->start_time);
}

TEST(ReadProcessId, NoSuchProcess) {
  auto id = read_process_id(2147483000, "/proc");
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().sys_errno, ESRCH);
}

TEST(ProcessHandle, SignalsThroughThePidfd) {
  Children children;
  pid_t pid = spawn_parked(children);
  ProcessHandle h = open_or_die(pid);
  EXPECT_EQ(h.id().pid, pid);
  EXPECT_GE(h.fd(), 0);
  EXPECT_FALSE(h.has_exited());
  ASSERT_TRUE(h.signal(SIGTERM));
  int status = children.reap(pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(ProcessHandle, WrongStartTimeIsReused) {
  Children children;
  pid_t pid = spawn_parked(children);
  auto id = read_process_id(pid, "/proc");
  ASSERT_TRUE(id);
  auto h = ProcessHandle::open(ProcessId{pid, id->start_time + 1}, "/proc");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().kind, OpenError::reused);
  EXPECT_NE(h.error().message.find("reused"), std::string::npos);
  Error as_error = h.error();  // converts for Result<T> callers
  EXPECT_EQ(as_error.message, h.error().message);
}

// Same pid, same start time (a reuse within one 10 ms clock tick), but another
// process: only the pidfs inode taken at discovery tells them apart.
TEST(ProcessHandle, DifferentPidfsInodeIsReusedEvenWithTheSameStartTime) {
  Children children;
  pid_t pid = spawn_parked(children);
  auto id = read_process_id(pid, "/proc");
  ASSERT_TRUE(id);
  std::uint64_t ino = pidfs_inode(pid);
  if (ino == 0) GTEST_SKIP() << "no pidfs (Linux < 6.8): start time is the only identity";
  ProcessId same{pid, id->start_time, ino};
  EXPECT_TRUE(ProcessHandle::open(same, "/proc")) << "the discovered process itself must open";
  ProcessId other{pid, id->start_time, ino + 1};
  auto h = ProcessHandle::open(other, "/proc");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().kind, OpenError::reused);
  EXPECT_EQ(pidfs_inode(pid), ino) << "stable for the life of the process";
}

TEST(ProcessHandle, ExitedAndReapedIsGone) {
  Children children;
  pid_t pid = spawn_parked(children);
  auto id = read_process_id(pid, "/proc");
  ASSERT_TRUE(id);
  ::kill(pid, SIGKILL);  // our own unreaped child: the pid cannot have been reused
  children.reap(pid);
  auto h = ProcessHandle::open(*id, "/proc");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().kind, OpenError::gone) << h.error().message;
  EXPECT_EQ(enum_name(h.error().kind), "gone");
}

TEST(ProcessHandle, HasExitedOnceDeadEvenBeforeReaping) {
  Children children;
  pid_t pid = spawn_parked(children);
  ProcessHandle h = open_or_die(pid);
  EXPECT_FALSE(h.has_exited());
  ASSERT_TRUE(h.signal(SIGKILL));
  children.wait_zombie(pid);
  EXPECT_TRUE(h.has_exited());
  children.reap(pid);
  auto again = h.signal(SIGTERM);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().sys_errno, ESRCH);
  EXPECT_NE(again.error().message.find("exited"), std::string::npos);
}

TEST(ProcessHandle, ZombieLeaderWithLiveThreadHasNotExited) {
  Children children;
  pid_t pid = children.spawn([](int ready) { testing::become_zombie_leader(ready); });
  children.ready(pid);
  ASSERT_TRUE(testing::wait_state(pid, 'Z'));
  ProcessHandle h = open_or_die(pid);
  EXPECT_FALSE(h.has_exited());  // the process lives on in its thread
  ASSERT_TRUE(h.signal(SIGKILL));
  std::vector<ProcessHandle*> all{&h};
  EXPECT_TRUE(wait_for_exit(all, steady_clock::now() + 5s).empty());
}

TEST(ProcessHandle, MoveTransfersTheFd) {
  Children children;
  pid_t pid = spawn_parked(children);
  ProcessHandle a = open_or_die(pid);
  int fd = a.fd();
  ProcessHandle b(std::move(a));
  EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.fd(), fd);
  EXPECT_FALSE(a.signal(0));
  EXPECT_TRUE(b.signal(0));
}

TEST(ProcessHandle, SignalWithoutPermissionFails) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  Children children;
  pid_t target = spawn_parked(children);
  auto id = read_process_id(target, "/proc");
  ASSERT_TRUE(id);
  pid_t prober = children.spawn([&](int ready) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return signal_ready(ready, "setuid failed");
    auto h = ProcessHandle::open(*id, "/proc");
    if (!h) return signal_ready(ready, "open failed: " + h.error().message);
    auto r = h->signal(SIGTERM);
    signal_ready(ready, r ? "sent" : std::to_string(r.error().sys_errno));
  });
  EXPECT_EQ(children.ready(prober), std::to_string(EPERM));
  EXPECT_NE(testing::state_of(target), 'Z');  // still alive
}

TEST(ProcessHandle, OpenChildReapsTheExitStatus) {
  Children children;
  pid_t pid = children.spawn([](int ready) {
    signal_ready(ready);
    ::_exit(7);
  });
  children.ready(pid);
  ProcessHandle h = ProcessHandle::open_child(pid);
  EXPECT_EQ(h.id().pid, pid);
  EXPECT_GE(h.fd(), 0);
  ASSERT_TRUE(h.wait_exit(steady_clock::now() + 10s));
  ChildExit exit = h.reap();
  children.forget(pid);
  EXPECT_EQ(exit.how, ChildExit::How::exited);
  EXPECT_EQ(exit.status, 7);
  EXPECT_EQ(exit.exit_code(), 7);
  EXPECT_EQ(h.try_reap()->status, 7);  // the same ending again
  // Reaped: its pid may name another process now, so it is never signalled.
  auto sent = h.signal(0);
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().sys_errno, ESRCH);
}

TEST(ProcessHandle, OpenChildSignalsAndReportsTheSignal) {
  Children children;
  pid_t pid = spawn_parked(children);
  ProcessHandle h = ProcessHandle::open_child(pid);
  EXPECT_FALSE(h.try_reap());  // still running: never blocks
  EXPECT_FALSE(h.has_exited());
  ASSERT_TRUE(h.signal(SIGKILL));
  ChildExit exit = h.reap();
  children.forget(pid);
  EXPECT_EQ(exit.how, ChildExit::How::killed);
  EXPECT_EQ(exit.status, SIGKILL);
  EXPECT_EQ(exit.exit_code(), 128 + SIGKILL);
  EXPECT_TRUE(h.has_exited());
}

TEST(ProcessHandle, WaitExitEndsAtTheDeadlineWhileTheChildRuns) {
  Children children;
  pid_t pid = spawn_parked(children);
  ProcessHandle h = ProcessHandle::open_child(pid);
  auto start = steady_clock::now();
  EXPECT_FALSE(h.wait_exit(start + 200ms));
  auto took = steady_clock::now() - start;
  EXPECT_GE(took, 200ms);
  // No upper bound: a wait that ignored its deadline would wait for a parked child
  // forever and fail at ctest's timeout; a bound in ms would fail on a loaded machine.
}

TEST(ProcessHandle, AnEmptyHandleSignalsNothing) {
  ProcessHandle empty;
  EXPECT_FALSE(empty.signal(0));
  EXPECT_TRUE(empty.has_exited());
  EXPECT_EQ(empty.reap().how, ChildExit::How::unknown);
  // pid 0 would mean "our whole process group" to kill(2): never a child handle.
  ProcessHandle none = ProcessHandle::open_child(0);
  EXPECT_FALSE(none.signal(0));
}

TEST(WaitForExit, ReturnsWhenTheChildExits) {
  Children children;
  pid_t pid = children.spawn([](int ready) {
    signal_ready(ready);
    ::usleep(100 * 1000);
  });
  children.ready(pid);
  ProcessHandle h = open_or_die(pid);
  auto start = steady_clock::now();
  std::vector<ProcessHandle*> all{&h};
  auto alive = wait_for_exit(all, start + 240s);
  auto took = steady_clock::now() - start;
  EXPECT_TRUE(alive.empty());
  // Event-driven: far sooner than the deadline (half of it: no load makes 100 ms so long).
  EXPECT_LT(took, 120s);
}

TEST(WaitForExit, RespectsTheDeadline) {
  Children children;
  pid_t quick = children.spawn([](int ready) {
    signal_ready(ready);
    ::usleep(50 * 1000);
  });
  children.ready(quick);
  pid_t stays = spawn_parked(children);
  ProcessHandle a = open_or_die(quick);
  ProcessHandle b = open_or_die(stays);
  auto start = steady_clock::now();
  std::vector<ProcessHandle*> all{&a, &b, nullptr};
  auto alive = wait_for_exit(all, start + 300ms);
  auto took = steady_clock::now() - start;
  EXPECT_EQ(alive, std::vector<std::size_t>{1});
  EXPECT_GE(took, 300ms);  // the parked child never exits: only the deadline ends it
}

}  // namespace
}  // namespace gpureap::proc
