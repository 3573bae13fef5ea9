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

TEST(TopUptime, ParsesTheFirstNumber) {
  EXPECT_EQ(parse_uptime("5000.25 9000.00\n"), 5000.25);
  EXPECT_FALSE(parse_uptime(""));
  EXPECT_FALSE(parse_uptime("x 1"));
}

}  // namespace
}  // namespace gpureap::top
