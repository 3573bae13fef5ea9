#include "top/history.h"

#include <gtest/gtest.h>

#include "top/test_inventory.h"
#include "top/uptime.h"

namespace gpureap::top {
namespace {

using namespace testing;

TEST(TopHistory, SparklineRisesWithUseAndKeepsTheLastReadings) {
  MemoryHistory h(4);
  inventory::Inventory inv;
  inv.gpus = {idle_gpu(0)};
  const std::string key = MemoryHistory::key_of(inv.gpus[0]);
  EXPECT_EQ(h.sparkline(key, 3, false), "   ") << "no reading yet";
  for (std::uint64_t used : {0ull, 40ull, 80ull, 80ull, 20ull}) {
    inv.gpus[0].info.memory->used = used * kGiB;
    h.record(inv);
  }
  // Capacity 4: the first reading (0) is gone; 40/80, 80/80, 80/80, 20/80.
  EXPECT_EQ(h.sparkline(key, 4, false), "-##.");
  EXPECT_EQ(h.sparkline(key, 6, false), "  -##.") << "right-aligned";
  EXPECT_EQ(h.sparkline(key, 2, true), "█▃");
  // A GPU NVML could not read adds no reading.
  inv.gpus[0].info.memory.reset();
  h.record(inv);
  EXPECT_EQ(h.sparkline(key, 4, false), "-##.");
}

TEST(TopHistory, SeededFromTheAgentShowsItsPastThenAppendsTopsOwnLooks) {
  MemoryHistory h(8);
  inventory::Inventory inv;
  inv.gpus = {idle_gpu(0)};
  const std::string key = MemoryHistory::key_of(inv.gpus[0]);
  EXPECT_EQ(key, "GPU-0");
  EXPECT_EQ(h.origin(), "history: since top started");
  // The agent's last 250 seconds of GPU 0: 0, 20, 40, 60 GiB of 80, then top's look at 80.
  inventory::GpuHistoryAnswer past;
  past.now = 1250;
  past.gpus.push_back({"GPU-0", {}});
  for (std::uint64_t i = 0; i < 4; ++i)
    past.gpus[0].samples.push_back({1000.0 + 50.0 * static_cast<double>(i), i * 20 * kGiB,
                                    80 * kGiB, std::nullopt, std::nullopt});
  past.gpus[0].samples.push_back({1250, 80 * kGiB, 80 * kGiB, std::nullopt, std::nullopt});
  past.gpus.push_back({"GPU-gone", {{1000, 0, 0, std::nullopt, std::nullopt}}});  // no total
  h.seed(past);
  EXPECT_EQ(h.sparkline(key, 6, false), " _.-=#") << "the agent's five readings at once";
  EXPECT_EQ(h.origin(), "history: agent 4m10s");
  inv.gpus[0].info.memory->used = 0;
  h.record(inv);
  EXPECT_EQ(h.sparkline(key, 6, false), "_.-=#_") << "then top's own looks";
  EXPECT_EQ(h.sparkline("GPU-gone", 2, false), "  ");
  // More readings than it keeps: the legend's span is that of the readings kept.
  MemoryHistory small(2);
  small.seed(past);
  EXPECT_EQ(small.origin(), "history: agent 1m40s") << "readings at 1150 and 1250 kept";
  EXPECT_EQ(small.sparkline(key, 3, false), " =#");
}

TEST(TopUptime, ParsesTheFirstNumber) {
  EXPECT_EQ(parse_uptime("5000.25 9000.00\n"), 5000.25);
  EXPECT_FALSE(parse_uptime(""));
  EXPECT_FALSE(parse_uptime("x 1"));
}

}  // namespace
}  // namespace gpureap::top
