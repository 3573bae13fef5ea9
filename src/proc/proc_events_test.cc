// The proc connector's parser on crafted datagrams, and (as root in the initial
// namespaces) the live connector on a process and a thread this test starts.

#include "proc/proc_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace gpureap::proc {
namespace {

/// One netlink message carrying a proc_event, as the kernel frames it.
std::vector<std::byte> message(const proc_event& ev, __u32 idx = CN_IDX_PROC,
                               __u32 type = NLMSG_DONE) {
  std::vector<std::byte> out(NLMSG_SPACE(sizeof(cn_msg) + sizeof(proc_event)));
  nlmsghdr nlh{};
  nlh.nlmsg_len = NLMSG_LENGTH(sizeof(cn_msg) + sizeof(proc_event));
  nlh.nlmsg_type = static_cast<__u16>(type);
  cn_msg cn{};
  cn.id = {idx, CN_VAL_PROC};
  cn.len = sizeof(proc_event);
  std::memcpy(out.data(), &nlh, sizeof nlh);
  std::memcpy(out.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  std::memcpy(out.data() + NLMSG_HDRLEN + sizeof cn, &ev, sizeof ev);
  return out;
}

proc_event fork_event(pid_t parent, pid_t child_pid, pid_t child_tgid) {
  proc_event ev{};
  ev.what = static_cast<decltype(proc_event::what)>(cn_event::fork);
  ev.event_data.fork.parent_pid = parent;
  ev.event_data.fork.parent_tgid = parent;
  ev.event_data.fork.child_pid = child_pid;
  ev.event_data.fork.child_tgid = child_tgid;
  return ev;
}

proc_event exec_event(pid_t pid, pid_t tgid) {
  proc_event ev{};
  ev.what = static_cast<decltype(proc_event::what)>(cn_event::exec);
  ev.event_data.exec.process_pid = pid;
  ev.event_data.exec.process_tgid = tgid;
  return ev;
}

proc_event exit_event(pid_t pid, pid_t tgid) {
  proc_event ev{};
  ev.what = static_cast<decltype(proc_event::what)>(cn_event::exit);
  ev.event_data.exit.process_pid = pid;
  ev.event_data.exit.process_tgid = tgid;
  return ev;
}

ProcEventBatch parse(const std::vector<std::byte>& datagram) {
  ProcEventBatch b;
  parse_proc_events(datagram, b);
  return b;
}

bool has(const ProcEventBatch& b, ProcEvent::Kind kind, pid_t pid) {
  return std::any_of(b.events.begin(), b.events.end(),
                     [&](const ProcEvent& e) { return e.kind == kind && e.pid == pid; });
}

TEST(ProcEvents, AForkedProcessStartsAForkedThreadDoesNot) {
  auto b = parse(message(fork_event(100, 200, 200)));
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_TRUE(has(b, ProcEvent::Kind::started, 200));
  EXPECT_TRUE(parse(message(fork_event(100, 201, 100))).events.empty());
  EXPECT_FALSE(b.lost);
}

// The lineage table (proc/event_lineage.h) needs who forked the process and when.
TEST(ProcEvents, AForkCarriesItsParentAndEveryEventItsTime) {
  proc_event ev = fork_event(100, 200, 200);
  ev.event_data.fork.parent_pid = 105;  // a thread of 100 forked it
  ev.timestamp_ns = 123456789;
  auto b = parse(message(ev));
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].parent, 100);
  EXPECT_EQ(b.events[0].at_ns, 123456789u);
  proc_event end = exit_event(200, 200);
  end.timestamp_ns = 987654321;
  end.event_data.exit.exit_code = SIGKILL;
  auto e = parse(message(end));
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].at_ns, 987654321u);
  EXPECT_EQ(e.events[0].wait_status, SIGKILL);
  EXPECT_EQ(e.events[0].parent, 0);
}

TEST(ProcEvents, ExecNamesTheProcessEvenFromAThread) {
  auto b = parse(message(exec_event(305, 300)));
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_TRUE(has(b, ProcEvent::Kind::exec, 300));
}

TEST(ProcEvents, OnlyALeadersExitEndsAProcess) {
  EXPECT_TRUE(has(parse(message(exit_event(400, 400))), ProcEvent::Kind::exited, 400));
  EXPECT_TRUE(parse(message(exit_event(401, 400))).events.empty());
}

TEST(ProcEvents, OtherKindsAndOtherConnectorsAreSkipped) {
  proc_event uid{};
  uid.what = static_cast<decltype(proc_event::what)>(cn_event::uid);
  EXPECT_TRUE(parse(message(uid)).events.empty());
  EXPECT_TRUE(parse(message(fork_event(1, 500, 500), CN_IDX_PROC + 1)).events.empty());
  proc_event ack{};
  ack.what = static_cast<decltype(proc_event::what)>(cn_event::none);
  EXPECT_TRUE(parse(message(ack)).events.empty());
}

TEST(ProcEvents, SeveralMessagesInOneDatagramInOrder) {
  auto d = message(fork_event(1, 600, 600));
  auto e = message(exit_event(600, 600));
  d.insert(d.end(), e.begin(), e.end());
  auto b = parse(d);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0].kind, ProcEvent::Kind::started);
  EXPECT_EQ(b.events[1].kind, ProcEvent::Kind::exited);
  EXPECT_EQ(b.events[1].pid, 600);
}

TEST(ProcEvents, TruncatedOrShortDatagramsYieldNothing) {
  auto d = message(fork_event(1, 700, 700));
  for (std::size_t n : {std::size_t{0}, std::size_t{3}, sizeof(nlmsghdr),
                        NLMSG_HDRLEN + sizeof(cn_msg), d.size() - 1}) {
    std::vector<std::byte> cut(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_TRUE(parse(cut).events.empty()) << n;
  }
  // A cn_msg whose len claims more than the message holds.
  auto lying = d;
  cn_msg cn{};
  std::memcpy(&cn, lying.data() + NLMSG_HDRLEN, sizeof cn);
  cn.len = 60000;
  std::memcpy(lying.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  EXPECT_TRUE(parse(lying).events.empty());
  // A payload shorter than a proc_event.
  auto shortp = d;
  cn.len = 8;
  std::memcpy(shortp.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  EXPECT_TRUE(parse(shortp).events.empty());
}

TEST(ProcEvents, AnOverrunMessageMeansLost) {
  proc_event none{};
  auto b = parse(message(none, CN_IDX_PROC, NLMSG_OVERRUN));
  EXPECT_TRUE(b.lost);
  EXPECT_TRUE(b.events.empty());
}

TEST(ProcEvents, TheAcknowledgementCarriesItsError) {
  proc_event ack{};
  ack.what = static_cast<decltype(proc_event::what)>(cn_event::none);
  EXPECT_EQ(parse_proc_ack(message(ack)), 0);
  ack.event_data.ack.err = EPERM;
  EXPECT_EQ(parse_proc_ack(message(ack)), EPERM);
  EXPECT_EQ(parse_proc_ack(message(fork_event(1, 2, 2))), -1);
  EXPECT_EQ(parse_proc_ack(message(ack, CN_IDX_PROC + 1)), -1);
}

/// Drains until `done` holds for what was collected, or 10 s pass.
template <typename F>
ProcEventBatch drain_until(ProcEvents& events, F done) {
  ProcEventBatch all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done(all) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{events.fd(), POLLIN, 0};
    (void)::poll(&p, 1, 100);
    auto b = events.drain();
    if (!b) break;
    all.events.insert(all.events.end(), b->events.begin(), b->events.end());
    all.lost = all.lost || b->lost;
  }
  return all;
}

TEST(ProcEvents, LiveAChildsStartExecAndExitButNoThread) {
  if (!proc_events_apply("/proc")) GTEST_SKIP() << "not root in the initial namespaces";
  auto events = ProcEvents::open();
  ASSERT_TRUE(events.has_value()) << events.error().message;
  EXPECT_TRUE(events->filtered());

  pid_t thread_id = 0;
  std::thread t([&] { thread_id = static_cast<pid_t>(::syscall(SYS_gettid)); });
  t.join();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  auto b = drain_until(*events, [&](const ProcEventBatch& all) {
    return has(all, ProcEvent::Kind::exited, child);
  });
  EXPECT_TRUE(has(b, ProcEvent::Kind::started, child));
  EXPECT_TRUE(has(b, ProcEvent::Kind::exec, child));
  EXPECT_TRUE(has(b, ProcEvent::Kind::exited, child));
  ASSERT_NE(thread_id, 0);
  EXPECT_FALSE(has(b, ProcEvent::Kind::started, thread_id));
  EXPECT_FALSE(has(b, ProcEvent::Kind::exited, thread_id));
}

TEST(ProcEvents, DoNotApplyToAnotherProcRoot) {
  EXPECT_FALSE(proc_events_apply("/nonexistent-proc-root"));
}

}  // namespace
}  // namespace gpureap::proc
