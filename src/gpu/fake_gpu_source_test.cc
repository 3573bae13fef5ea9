#include "gpu/fake_gpu_source.h"
#include "gpu/test_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpureap::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

GpuSnapshot two_gpus() {
  GpuSnapshot s;
  s.driver_version = "580.65.06";
  for (unsigned i = 0; i < 2; ++i) {
    GpuInfo g;
    g.id = gpu::dev(i);
    g.memory = GpuMemory{100, 10 * (i + 1), 1};
    g.processes = {{1000 + i, 5, ProcessKind::compute}};
    g.processes_known = true;
    s.gpus.push_back(g);
  }
  return s;
}

MemoryReading reading(unsigned index, std::uint64_t used) {
  return {DeviceId{index}, used, {}, {}, false, std::nullopt, {}};
}

TEST(FakeGpuSource, SnapshotAndDefaultReadingsComeFromTheSetSnapshot) {
  FakeGpuSource fake(two_gpus());
  EXPECT_EQ(fake.snapshot(2s).gpus.size(), 2U);
  auto r = fake.memory(gpu::devs({1}), 500ms);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->size(), 1U);
  EXPECT_EQ((*r)[0].used, 20U);
  EXPECT_THAT((*r)[0].pids, ElementsAre(1001U));
  EXPECT_EQ(fake.last_deadline, 500ms);
}

TEST(FakeGpuSource, ScriptedReadingsAdvanceThenTheLastRepeats) {
  FakeGpuSource fake(two_gpus());
  fake.add_memory_step({reading(0, 90), reading(1, 90)});
  fake.add_memory_failure("nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost");
  fake.add_memory_step({reading(0, 1), reading(1, 1)});
  EXPECT_EQ(fake.memory(gpu::devs({0, 1}), 1s).value()[1].used, 90U);
  auto failed = fake.memory(gpu::devs({0, 1}), 1s);
  ASSERT_FALSE(failed.has_value());
  EXPECT_THAT(failed.error().message, HasSubstr("GPU is lost"));
  EXPECT_EQ(fake.memory(gpu::devs({1}), 1s).value()[0].used, 1U);
  EXPECT_EQ(fake.memory(gpu::devs({0}), 1s).value()[0].used, 1U);
  EXPECT_EQ(fake.memory_calls, 4);
  EXPECT_THAT(fake.memory_requests[2], ElementsAre(gpu::dev(1)));
}

TEST(FakeGpuSource, UnknownIndexFails) {
  FakeGpuSource fake(two_gpus());
  EXPECT_FALSE(fake.memory(gpu::devs({7}), 1s).has_value());
}

TEST(FakeGpuSource, HangAndFailureStates) {
  FakeGpuSource fake(two_gpus());
  fake.set_hung(2000ms);
  GpuSnapshot s = fake.snapshot(2s);
  EXPECT_EQ(s.state, SourceState::hung);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_THAT(s.problem, HasSubstr("within 2000 ms"));
  EXPECT_FALSE(fake.memory(gpu::devs({0}), 1s).has_value());

  fake.set_failure(SourceState::library_missing, "no driver");
  EXPECT_EQ(fake.snapshot(1s).state, SourceState::library_missing);
  fake.clear_failure();
  EXPECT_EQ(fake.snapshot(1s).state, SourceState::ok);
  EXPECT_TRUE(fake.memory(gpu::devs({0}), 1s).has_value());
}

}  // namespace
}  // namespace gpureap::gpu
