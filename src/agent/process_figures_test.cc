#include "agent/process_figures.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include "agent/descriptors.h"

namespace gpureap::agent {
namespace {

TEST(ProcessFigures, ReadsCpuMemoryAndStartAfterTheLastParenthesis) {
  // A comm with a space and a ')' of its own; utime 250, stime 50 ticks; start 1000
  // ticks after boot; vsize 8 MiB; rss 300 pages.
  const std::string stat =
      "4242 (gpu reap) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 "
      "8388608 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  auto f = parse_process_figures(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(f->resident_bytes, 300 * 4096.0);
  EXPECT_DOUBLE_EQ(f->virtual_bytes, 8388608.0);
  EXPECT_DOUBLE_EQ(f->start_time_seconds, 1.7e9 + 10);
}

TEST(ProcessFigures, ATruncatedLineIsNoFigures) {
  EXPECT_FALSE(parse_process_figures("4242 (x) S 1 2 3", 100, 4096, 0));
  EXPECT_FALSE(parse_process_figures("no parenthesis", 100, 4096, 0));
}

TEST(ProcessFigures, OwnFiguresCountOpenDescriptorsUnderTheLimit) {
  auto f = own_process_figures();
  ASSERT_TRUE(f);
  EXPECT_GT(f->resident_bytes, 0);
  EXPECT_GE(f->open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_GE(f->max_fds, f->open_fds);
}

// process_cpu_seconds_total is getrusage's figure, to the microsecond: /proc/self/stat's
// whole clock ticks read 0 for an agent that has used less than 1/100 s (issue 48: a
// fresh fast machine failed WatchFleet.HealthzAndProcessMetrics so). The test burns CPU
// until its own time is past a tick boundary by at least 2 ms, which a tick count cannot
// show; it reads the time before and after, never a duration.
TEST(ProcessFigures, CpuTimeIsFinerThanAClockTick) {
  auto now = [] {
    rusage u{};
    EXPECT_EQ(::getrusage(RUSAGE_SELF, &u), 0);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000L + u.ru_utime.tv_usec +
           u.ru_stime.tv_usec;
  };
  const long tick_us = 1000000L / ::sysconf(_SC_CLK_TCK);
  volatile unsigned long sink = 0;
  long before = now();
  while (before < tick_us || before % tick_us < 2000) {
    for (int i = 0; i < 10000; ++i) sink = sink + static_cast<unsigned long>(i);
    before = now();
  }
  auto f = own_process_figures();
  const long after = now();
  ASSERT_TRUE(f);
  EXPECT_GE(f->cpu_seconds * 1e6, static_cast<double>(before) - 1);
  EXPECT_LE(f->cpu_seconds * 1e6, static_cast<double>(after) + 1);
}

TEST(Descriptors, TheSoftLimitIsRaisedToTheHardLimit) {
  DescriptorLimit limit = raise_descriptor_limit();
  EXPECT_EQ(limit.soft, limit.hard);
  EXPECT_GE(limit.soft, limit.before);
}

TEST(Descriptors, PidfdsLeaveRoomForTheRestOfTheAgent) {
  EXPECT_EQ(pidfd_budget(1024), 640u);
  EXPECT_EQ(pidfd_budget(524288), 524288u - 384);
  EXPECT_EQ(pidfd_budget(256), 64u);
  EXPECT_EQ(pidfd_budget(20), 16u);
}

}  // namespace
}  // namespace gpureap::agent
