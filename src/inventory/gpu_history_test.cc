#include "inventory/gpu_history.h"

#include <gtest/gtest.h>

#include "inventory/history_wire.h"
#include "inventory/test_views.h"

namespace gpureap::inventory {
namespace {

using namespace testing;

// The used bytes of each reading of `key`, oldest first.
std::vector<std::uint64_t> used_of(const GpuHistoryAnswer& a, const std::string& key) {
  std::vector<std::uint64_t> out;
  for (const auto& t : a.gpus)
    if (t.key == key)
      for (const auto& s : t.samples) out.push_back(s.used);
  return out;
}

Inventory one_gpu(std::uint64_t used) {
  Inventory inv;
  inv.gpus = {idle_gpu(0)};
  inv.gpus[0].info.memory->used = used;
  return inv;
}

TEST(GpuHistory, KeepsTheNewestReadingsInOrderAndWrapsAtItsCapacity) {
  GpuHistory h(4, 600);
  for (std::uint64_t i = 1; i <= 10; ++i) h.record(one_gpu(i), 100.0 + i, 1.0);
  // Capacity 4: readings 7..10, oldest first, after the ring wrapped twice.
  EXPECT_EQ(used_of(h.answer(110), "GPU-0"), (std::vector<std::uint64_t>{7, 8, 9, 10}));
  h.record(one_gpu(11), 111, 1.0);
  EXPECT_EQ(used_of(h.answer(111), "GPU-0"), (std::vector<std::uint64_t>{8, 9, 10, 11}));
  const auto a = h.answer(111);
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(a.gpus[0].samples.front().time, 108.0);
  EXPECT_EQ(a.gpus[0].samples.back().total, kTestTotal);
}

TEST(GpuHistory, ALookSoonerThanTheSpacingRefreshesTheNewestReading) {
  GpuHistory h(100, 600);
  h.record(one_gpu(1), 100.0, 1.0);
  h.record(one_gpu(2), 100.4, 1.0);  // a status question between two ticks
  h.record(one_gpu(3), 100.9, 1.0);  // still within a tick of the reading at 100.0
  h.record(one_gpu(4), 101.0, 1.0);  // the next tick
  const auto a = h.answer(101);
  EXPECT_EQ(used_of(a, "GPU-0"), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(a.gpus[0].samples[0].time, 100.0) << "the reading keeps its slot's time";
  EXPECT_EQ(a.spacing_seconds, 1.0);
}

TEST(GpuHistory, ForgetsReadingsOlderThanTheWindowAndGpusWithNone) {
  GpuHistory h(100, 10);
  Inventory two = one_gpu(1);
  two.gpus.push_back(idle_gpu(1));
  h.record(two, 100, 1);
  for (int t = 101; t <= 105; ++t) h.record(one_gpu(static_cast<std::uint64_t>(t)), t, 1);
  EXPECT_EQ(h.answer(105).gpus.size(), 2u);
  // At 111 the readings of 100 are past the window: GPU 1 (a MIG device removed) goes.
  h.record(one_gpu(111), 111, 1);
  const auto a = h.answer(111);
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(used_of(a, "GPU-0"), (std::vector<std::uint64_t>{101, 102, 103, 104, 105, 111}));
  // The ring refills after the window emptied part of it (slots reused, order kept).
  for (int t = 112; t <= 200; ++t) h.record(one_gpu(static_cast<std::uint64_t>(t)), t, 1);
  auto late = used_of(h.answer(200), "GPU-0");
  ASSERT_EQ(late.size(), 11u);
  EXPECT_EQ(late.front(), 190u);
  EXPECT_EQ(late.back(), 200u);
}

TEST(GpuHistory, AnUnreadGpuAddsNoReadingAndAMigDeviceHasItsOwnKey) {
  GpuHistory h;
  Inventory inv = one_gpu(5);
  GpuView mig = idle_gpu(1);
  mig.info.id = gpu::DeviceId{0, 1u, 0u};
  mig.info.uuid = "MIG-aaaa";
  inv.gpus.push_back(mig);
  GpuView unread = idle_gpu(2);
  unread.info.memory.reset();
  inv.gpus.push_back(unread);
  h.record(inv, 100, 1);
  const auto a = h.answer(100);
  ASSERT_EQ(a.gpus.size(), 2u);
  EXPECT_EQ(a.gpus[0].key, "GPU-0");
  EXPECT_EQ(a.gpus[1].key, "MIG-aaaa");
  EXPECT_EQ(h.capacity(), kGpuHistoryCapacity);
}

TEST(GpuHistory, OrphanedBytesAreToldToRootOnly) {
  GpuHistory h;
  Inventory inv;
  inv.gpus = {idle_gpu(0)};
  add_holder(inv.gpus[0], 4722, 20 * kGiB, Lineage::orphaned);
  inv.gpus[0].info.utilization_gpu = 40;
  h.record(inv, 100, 1);
  const auto root = history_for(0, h.answer(100));
  EXPECT_EQ(root.gpus[0].samples[0].orphaned, 20 * kGiB);
  const auto other = history_for(1000, h.answer(100));
  EXPECT_FALSE(other.gpus[0].samples[0].orphaned);
  // What status tells any caller stays: used, total, utilization.
  EXPECT_EQ(other.gpus[0].samples[0].used, root.gpus[0].samples[0].used);
  EXPECT_EQ(other.gpus[0].samples[0].sm_percent, 40u);
}

TEST(HistoryWire, RoundTripsEveryField) {
  GpuHistoryAnswer a;
  a.now = 1700000000.123456;
  a.spacing_seconds = 0.9;
  a.gpus.push_back({"GPU-0", {{1700000000.5, 10, 80, 40u, 5u}, {1700000001.5, 11, 80, {}, {}}}});
  a.gpus.push_back({"MIG-\xff", {}});  // a key that is not UTF-8 travels as hex
  auto back = decode_history(encode_history(a));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, a);
}

TEST(HistoryWire, RefusesWhatIsNotAHistory) {
  // An agent of before "history" answers with its "unknown request" error.
  auto old = decode_history(
      R"({"error":"unknown request: this agent answers \"inventory\", \"yield-nvml\""})");
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message.find("unknown request"), std::string::npos);
  for (
      const char* bad :
      {"", "[]", R"({"wire_version":99,"history":{}})",
       R"({"wire_version":1,"history":{"now":1,"spacing_seconds":1,"gpus":[{"key":"G","samples":[[1,2]]}]}})",
       R"({"wire_version":1,"history":{"now":1,"spacing_seconds":1,"gpus":[{"key":"G","samples":[[1,-2,3,null,null]]}]}})",
       R"({"wire_version":1,"history":{"now":"x","spacing_seconds":1,"gpus":[]}})"}) {
    EXPECT_FALSE(decode_history(bad)) << bad;
  }
}

}  // namespace
}  // namespace gpureap::inventory
