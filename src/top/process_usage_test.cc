// top's CPU% and host memory per process, from /proc/PID/stat lines written in a
// directory that stands for /proc (so the numbers are chosen, not measured).

#include "top/process_usage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::top {
namespace process_usage_test {

using namespace std::chrono_literals;

void write_stat(const TestTempDir& proc, pid_t pid, std::uint64_t utime, std::uint64_t stime,
                std::uint64_t start, long rss_pages) {
  std::filesystem::create_directories(proc.path(std::to_string(pid)));
  std::ofstream(proc.path(std::to_string(pid) + "/stat"), std::ios::trunc)
      << pid << " (python3) S 1 " << pid << " " << pid << " 0 -1 4194560 0 0 0 0 " << utime
      << " " << stime << " 0 0 20 0 3 0 " << start << " 29843652608 " << rss_pages << " 0\n";
}

TEST(ProcessUsage, CpuPercentIsTicksOverWallTime) {
  EXPECT_EQ(cpu_percent(100, 200, 1.0, 100), 100.0);  // one CPU busy for the whole second
  EXPECT_EQ(cpu_percent(0, 400, 2.0, 100), 200.0);     // two CPUs
  EXPECT_EQ(cpu_percent(200, 100, 1.0, 100), std::nullopt);  // the counter went back
  EXPECT_EQ(cpu_percent(100, 100, 0.0, 100), std::nullopt);  // no time passed
}

TEST(ProcessUsage, TheSecondLookHasCpuAndEveryLookHasResidentMemory) {
  TestTempDir proc;
  const proc::ProcessId worker{4242, 777}, reused{4243, 999};
  write_stat(proc, 4242, 1000, 500, 777, 2048);
  write_stat(proc, 4243, 0, 0, 123, 10);  // pid 4243 is another process now
  UsageSampler sampler(proc.dir());
  const auto t0 = std::chrono::steady_clock::time_point(1000s);
  sampler.sample({worker, reused}, t0);
  ASSERT_TRUE(sampler.usage().contains(worker));
  EXPECT_FALSE(sampler.usage().at(worker).cpu_percent);  // nothing to compare with yet
  EXPECT_EQ(sampler.usage().at(worker).rss_bytes,
            2048u * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  EXPECT_FALSE(sampler.usage().contains(reused)) << "a reused pid is not the process listed";

  const long hz = ::sysconf(_SC_CLK_TCK);
  write_stat(proc, 4242, 1000 + static_cast<std::uint64_t>(hz), 500, 777, 4096);  // 1 s of CPU
  sampler.sample({worker}, t0 + 2s);
  ASSERT_TRUE(sampler.usage().at(worker).cpu_percent);
  EXPECT_DOUBLE_EQ(*sampler.usage().at(worker).cpu_percent, 50.0);  // over 2 s of wall time

  std::filesystem::remove_all(proc.path("4242"));  // it exited
  sampler.sample({worker}, t0 + 3s);
  EXPECT_FALSE(sampler.usage().contains(worker));
}

}  // namespace process_usage_test
}  // namespace gpureap::top
