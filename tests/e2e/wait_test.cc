// `gpureap wait` end to end: it returns as soon as the memory is released, and
// on timeout it exits 5 and says who still holds what.

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace wait_test {

using namespace std::chrono_literals;

// SIGKILL through a pidfd, only if the pid still names the holder our test started.
void kill_holder(pid_t pid, std::uint64_t start_time) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return;
  if (start_time_of(pid) == start_time) ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
  ::close(fd);
}

TEST(Wait, FreeGpusReturnAtOnce) {
  SimNode node;
  auto r = node.gpureap({"wait", "--timeout", "200s"}, std::chrono::seconds(240));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 100.0) << "free GPUs waited for the timeout";
  auto j = node.gpureap({"--json", "wait", "--gpu", "0,3"}).json();
  EXPECT_TRUE(j["free"]);
  ASSERT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][1]["index"], 3);
}

TEST(Wait, ReturnsAsSoonAsTheHolderDies) {
  SimNode node;
  auto held = node.hold({"--gpu", "2", "--bytes", "20GiB", "--release-delay", "200ms"});
  pid_t holder = held.holders.at(0).first;
  std::uint64_t start = start_time_of(holder);
  std::chrono::steady_clock::time_point killed_at;
  std::thread killer([&] {
    std::this_thread::sleep_for(700ms);
    killed_at = std::chrono::steady_clock::now();
    kill_holder(holder, start);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = node.gpureap({"wait", "--gpu", "2", "--timeout", "20s"});
  auto returned = std::chrono::steady_clock::now();
  killer.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(returned - t0, 700ms) << "returned while the memory was still held";
  auto after_kill = std::chrono::duration<double>(returned - killed_at).count();
  EXPECT_GE(after_kill, 0.2) << "returned before the driver released the memory";
  // Returned before its --timeout: the exit status 0 above (a timeout is 5).
}

TEST(Wait, TimesOutWithTheHolderSummary) {
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "8GiB"});
  pid_t holder = held.holders.at(0).first;
  auto r = node.gpureap({"wait", "--gpu", "1", "--timeout", "500ms"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_GE(r.seconds, 0.5);  // the call's own bound fails a wait that ignores its timeout
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find(std::to_string(holder)), std::string::npos) << "no holder in the summary:\n"
                                                                   << r.out;

  auto j = node.gpureap({"--json", "wait", "--gpu", "1", "--timeout", "200ms"});
  EXPECT_EQ(j.exit_code, 5);
  auto doc = j.json();
  EXPECT_TRUE(doc["timed_out"]);
  EXPECT_FALSE(doc["free"]);
  ASSERT_EQ(doc["status"]["gpus"].size(), 1u);
  EXPECT_EQ(doc["status"]["gpus"][0]["holders"][0]["pid"], holder);
  EXPECT_TRUE(alive(holder)) << "wait must never signal anything";
}

TEST(Wait, BelowRaisesTheThreshold) {
  SimNode node;
  node.hold({"--gpu", "0", "--bytes", "1GiB"});
  EXPECT_EQ(node.gpureap({"wait", "--gpu", "0", "--timeout", "0"}).exit_code, 5);
  EXPECT_EQ(node.gpureap({"wait", "--gpu", "0", "--below", "2GiB", "--timeout", "0"}).exit_code, 0);
}

TEST(Wait, UsageErrorsExit2) {
  SimNode node;
  EXPECT_EQ(node.gpureap({"wait", "--gpu", "9"}).exit_code, 2);
  EXPECT_EQ(node.gpureap({"wait", "--below", "12"}).exit_code, 2);
  EXPECT_EQ(node.gpureap({"wait", "--timeout", "soon"}).exit_code, 2);
}

TEST(Wait, NoDriverIsASystemError) {
  SimNode node;
  auto r = node.gpureap({"wait", "--timeout", "1s"}, 30s,
                        {{"GPUREAP_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}});
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

// defects-wave1 D4: with a non-UTF-8 byte in a holder's command line, `wait --json`
// exited 3 (a JSON exception) instead of 5 with the holders.
TEST(Wait, NonUtf8CommandLineGivesValidJsonAndExit5) {
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "5GiB", "--label", "caf\xe9-\xff\xfe"});
  auto r = node.gpureap({"--json", "wait", "--gpu", "1", "--timeout", "0"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto j = r.json();  // fails the test on invalid UTF-8
  EXPECT_TRUE(j["timed_out"]);
  ASSERT_TRUE(j.contains("status"));
  EXPECT_NE(j["status"].dump().find(std::to_string(held.holders.at(0).first)), std::string::npos);
  EXPECT_NE(j["status"].dump().find("caf\xef\xbf\xbd-"), std::string::npos);
}

// W2-14: every selected GPU is checked in the same final reading. GPU 0 is free when
// the wait starts and is taken again before GPU 1 is released: not "GPU 0,1 free".
TEST(Wait, W2_14_AGpuSeenFreeOnceIsNotFreeForGood) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  auto g1 = node.hold({"--gpu", "1", "--bytes", "10GiB"});
  pid_t holder = g1.holders.at(0).first;
  std::uint64_t start = start_time_of(holder);
  std::thread later([&] {
    std::this_thread::sleep_for(700ms);
    node.hold({"--gpu", "0", "--bytes", "20GiB"});
    std::this_thread::sleep_for(700ms);
    kill_holder(holder, start);
  });
  auto r = node.gpureap({"--json", "wait", "--gpu", "0,1", "--timeout", "4s"});
  later.join();
  EXPECT_EQ(r.exit_code, 5) << "GPU 0 holds 20 GiB again: " << r.out << r.err;
  auto j = r.json();
  EXPECT_FALSE(j["free"]) << j.dump(1);
}

}  // namespace
}  // namespace gpureap::e2e
