#include "proc/process_table.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>

#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using testing::Children;
using testing::park;
using testing::signal_ready;

const ProcessEntry* find(const std::vector<ProcessEntry>& table, pid_t pid) {
  for (const auto& e : table)
    if (e.id.pid == pid) return &e;
  return nullptr;
}

TEST(ProcessTable, ContainsSelfAndAChild) {
  Children children;
  pid_t child = children.spawn([](int ready) {
    ::prctl(PR_SET_NAME, "table child");
    signal_ready(ready);
    park();
  });
  children.ready(child);
  ASSERT_TRUE(testing::wait_state(child, 'S'));

  auto table = read_process_table("/proc");
  ASSERT_TRUE(table) << table.error().message;
  EXPECT_TRUE(std::is_sorted(table->begin(), table->end(),
                             [](const auto& a, const auto& b) { return a.id.pid < b.id.pid; }));
  const ProcessEntry* self = find(*table, ::getpid());
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->ppid, ::getppid());
  EXPECT_EQ(self->pgid, ::getpgrp());
  EXPECT_EQ(self->sid, ::getsid(0));
  EXPECT_EQ(self->uid, ::geteuid());
  EXPECT_FALSE(self->kernel_thread);
  const ProcessEntry* c = find(*table, child);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->comm, "table child");
  EXPECT_EQ(c->ppid, ::getpid());
  EXPECT_EQ(c->state, 'S');
}

TEST(ProcessTable, MissingRootIsAnError) {
  EXPECT_FALSE(read_process_table("/nonexistent-proc-root"));
}

ProcessEntry entry(pid_t pid, pid_t ppid) {
  ProcessEntry e;
  e.id = ProcessId{pid, static_cast<std::uint64_t>(pid) * 10};
  e.ppid = ppid;
  return e;
}

TEST(Descendants, WalksTheTreeParentsFirst) {
  std::vector<ProcessEntry> table{entry(1, 0),   entry(10, 1), entry(11, 10), entry(12, 10),
                                  entry(13, 12), entry(20, 1), entry(30, 31), entry(31, 30)};
  auto d = descendants(table, 10);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].pid, 11);
  EXPECT_EQ(d[1].pid, 12);
  EXPECT_EQ(d[2].pid, 13);
  EXPECT_EQ(d[2].start_time, 130u);
  EXPECT_TRUE(descendants(table, 13).empty());
  EXPECT_EQ(descendants(table, 30).size(), 1u);  // a cycle terminates
}

TEST(FindProcess, ByIdentityOrByPid) {
  std::vector<ProcessEntry> table{entry(1, 0), entry(10, 1)};
  ASSERT_NE(find_process(table, 10), nullptr);
  EXPECT_EQ(find_process(table, 10)->ppid, 1);
  EXPECT_EQ(find_process(table, table[1].id), &table[1]);
  EXPECT_EQ(find_process(table, ProcessId{10, table[1].id.start_time + 1}), nullptr)
      << "a reused pid is another process";
  EXPECT_EQ(find_process(table, 11), nullptr);
}

TEST(Descendants, RealGrandchild) {
  // As the grandchild's subreaper, the test adopts it when the guard kills the
  // child, and reaps it too.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  struct Unset {
    ~Unset() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } unset;
  Children children;
  pid_t child = children.spawn([](int ready) {
    const pid_t parent = ::getpid();
    if (::fork() == 0) {
      // Report only once the death signal is armed: killing the child then
      // kills the grandchild, which the guard cannot reap itself.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      signal_ready(ready, std::to_string(::getpid()));
      park();
    }
    park();
  });
  pid_t grandchild = std::stoi(children.ready(child));
  children.adopt(grandchild);  // listed after the child: reaped once re-parented to us
  auto table = read_process_table("/proc");
  ASSERT_TRUE(table);
  auto d = descendants(*table, ::getpid());
  auto has = [&](pid_t p) {
    return std::any_of(d.begin(), d.end(), [&](const ProcessId& id) { return id.pid == p; });
  };
  EXPECT_TRUE(has(child));
  EXPECT_TRUE(has(grandchild));
}

TEST(Ancestors, ParentFirstUpToInit) {
  auto chain = ancestors(::getpid(), "/proc");
  ASSERT_FALSE(chain.empty());
  EXPECT_EQ(chain.front(), ::getppid());
  EXPECT_EQ(chain.back(), 1);
  EXPECT_TRUE(ancestors(2147483000, "/proc").empty());
}

TEST(Evidence, CmdlineWchanStackThreads) {
  Children children;
  pid_t child = children.spawn([](int ready) {
    signal_ready(ready);
    park();
  });
  children.ready(child);
  ASSERT_TRUE(testing::wait_state(child, 'S'));

  EXPECT_EQ(read_cmdline(child, "/proc"), read_cmdline(::getpid(), "/proc"));
  EXPECT_FALSE(read_cmdline(child, "/proc").empty());
  // Parked in pause(). The kernel answers "0" while the task, already marked
  // sleeping, is still on the run queue, so allow it a moment to get off.
  std::string wchan;
  for (int i = 0; i < 1000 && wchan.empty(); ++i) {
    wchan = read_wchan(child, "/proc");
    if (wchan.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_NE(wchan, "");
  if (::getuid() == 0) {
    std::string stack = read_stack(child, "/proc");
    EXPECT_FALSE(stack.empty()) << "root can read /proc/PID/stack";
  }
  EXPECT_EQ(read_cmdline(2147483000, "/proc"), "");
  EXPECT_EQ(read_wchan(2147483000, "/proc"), "");
  EXPECT_EQ(read_stack(2147483000, "/proc"), "");

  auto states = read_thread_states(child, "/proc");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].tid, child);
  EXPECT_EQ(states[0].state, 'S');
}

TEST(Evidence, ThreadStatesOfAMultiThreadedProcess) {
  std::promise<void> stop;
  std::thread t([f = stop.get_future()]() mutable { f.wait(); });
  auto states = read_thread_states(::getpid(), "/proc");
  stop.set_value();
  t.join();
  ASSERT_GE(states.size(), 2u);
  EXPECT_EQ(states[0].tid, ::getpid());
  EXPECT_TRUE(std::is_sorted(states.begin(), states.end(),
                             [](const auto& a, const auto& b) { return a.tid < b.tid; }));
  EXPECT_TRUE(read_thread_states(2147483000, "/proc").empty());
}

TEST(UserUid, ANameOrANumberElseTheErrorSaysWhich) {
  ASSERT_TRUE(user_uid("root"));
  EXPECT_EQ(*user_uid("root"), 0u);
  EXPECT_EQ(*user_uid("0"), 0u);
  EXPECT_EQ(*user_uid("4294967294"), 4294967294u);
  ASSERT_FALSE(user_uid("4294967295"));  // (uid_t)-1: "no uid" to the kernel
  ASSERT_FALSE(user_uid("no-such-user-gpureap"));
  EXPECT_EQ(user_uid("no-such-user-gpureap").error().message, "unknown user 'no-such-user-gpureap'");
  EXPECT_FALSE(user_uid(""));
}

}  // namespace
}  // namespace gpureap::proc
