#include "gpu/mixed_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/fake_gpu_source.h"
#include "gpu/test_devices.h"
#include "gpu/vendor.h"

namespace gpureap::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

GpuInfo gpu_info(DeviceId id, std::string uuid, std::uint64_t used) {
  GpuInfo g;
  g.id = id;
  g.uuid = std::move(uuid);
  g.memory = GpuMemory{1000, used, std::nullopt};
  g.processes = {{static_cast<std::uint32_t>(4000 + used), used, ProcessKind::compute}};
  g.processes_known = true;
  g.temperature_c = 40;
  return g;
}

// NVIDIA's GPU 0 in MIG mode (two MIG devices) and GPU 1; two AMD GPUs.
struct Mixed {
  FakeGpuSource* nvidia = nullptr;
  FakeGpuSource* amd = nullptr;
  std::unique_ptr<MixedSource> source;

  Mixed() {
    GpuSnapshot nv;
    nv.driver_version = "580.65.06";
    DeviceId mig1 = dev(0), mig2 = dev(0);
    mig1.gi = 1, mig1.ci = 0, mig2.gi = 2, mig2.ci = 0;
    nv.gpus = {gpu_info(mig1, "MIG-aaaa", 11), gpu_info(mig2, "MIG-bbbb", 12),
               gpu_info(dev(1), "GPU-7282a3c1-0000-4000-8000-000000000001", 13)};
    GpuSnapshot am;
    am.gpus = {gpu_info(dev(0), "GPU-437aa7577fc75e00", 21),
               gpu_info(dev(1), "GPU-437aa7577fc75e01", 22)};
    auto n = std::make_unique<FakeGpuSource>(nv);
    auto a = std::make_unique<FakeGpuSource>(am);
    nvidia = n.get();
    amd = a.get();
    source = std::make_unique<MixedSource>(std::move(n), std::move(a));
  }
};

std::vector<unsigned> indices(const GpuSnapshot& s) {
  std::vector<unsigned> out;
  for (const GpuInfo& g : s.gpus) out.push_back(g.id.index);
  return out;
}

TEST(MixedSource, NvidiasGpusComeFirstAtNvmlsIndicesAmdsAfterInTheirOrder) {
  Mixed m;
  GpuSnapshot s = m.source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::ok);
  EXPECT_EQ(s.driver_version, "580.65.06");
  EXPECT_THAT(indices(s), ElementsAre(0U, 0U, 1U, 2U, 3U));
  EXPECT_EQ(s.gpus[0].id.gi, 1U);  // the MIG devices keep their ids
  EXPECT_EQ(s.gpus[3].uuid, "GPU-437aa7577fc75e00");
  EXPECT_EQ(s.gpus[4].uuid, "GPU-437aa7577fc75e01");
  EXPECT_EQ(vendor_of(s.gpus[2].uuid), Vendor::nvidia);
  EXPECT_EQ(vendor_of(s.gpus[3].uuid), Vendor::amd);
  EXPECT_EQ(m.source->amd_offset(), 2U);
}

TEST(MixedSource, MemoryIsRoutedByIndexAndAnsweredInTheOrderAsked) {
  Mixed m;
  (void)m.source->snapshot(2s);
  auto r = m.source->memory(devs({3, 1, 2}), 500ms);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 3U);
  EXPECT_EQ((*r)[0].id, dev(3));
  EXPECT_EQ((*r)[0].used, 22U);
  EXPECT_EQ((*r)[1].id, dev(1));
  EXPECT_EQ((*r)[1].used, 13U);
  EXPECT_EQ((*r)[2].id, dev(2));
  EXPECT_EQ((*r)[2].used, 21U);
  EXPECT_THAT(m.nvidia->memory_requests.back(), ElementsAre(dev(1)));
  EXPECT_THAT(m.amd->memory_requests.back(), ElementsAre(dev(1), dev(0)));
}

TEST(MixedSource, MemoryBeforeAnySnapshotLearnsNvidiasCountFirst) {
  Mixed m;
  auto r = m.source->memory(devs({2}), 500ms);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)[0].used, 21U);
  EXPECT_EQ(m.nvidia->memory_calls, 0);  // only AMD's GPU was asked for
  EXPECT_EQ(m.nvidia->snapshot_calls, 1);
}

TEST(MixedSource, ASnapshotIsPartialWhenEitherSideIs) {
  Mixed m;
  m.amd->set_gpu_failure(dev(1), "cannot read mem_info_vram_used");
  GpuSnapshot s = m.source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::partial);
  EXPECT_THAT(s.problem, HasSubstr("mem_info_vram_used"));
  EXPECT_EQ(s.gpus[4].id, dev(3));
  EXPECT_FALSE(s.gpus[4].problem.empty());
  EXPECT_TRUE(s.gpus[3].problem.empty());
}

TEST(MixedSource, NvmlHangingAfterItListedKeepsTheAmdGpusIndicesAndReadings) {
  Mixed m;
  (void)m.source->snapshot(2s);
  m.nvidia->set_hung();
  GpuSnapshot s = m.source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::partial);
  ASSERT_THAT(indices(s), ElementsAre(0U, 0U, 1U, 2U, 3U));
  EXPECT_TRUE(s.gpus[2].hung);
  EXPECT_THAT(s.gpus[2].problem, HasSubstr("did not answer"));
  EXPECT_FALSE(s.gpus[2].memory);
  EXPECT_FALSE(s.gpus[2].processes_known);
  EXPECT_FALSE(s.gpus[2].temperature_c);
  EXPECT_EQ(s.gpus[2].uuid, "GPU-7282a3c1-0000-4000-8000-000000000001");  // identity kept
  EXPECT_EQ(s.gpus[3].memory->used, 21U);
  // A free on both vendors' GPUs verifies the AMD one; NVML's alone fails as before.
  auto both = m.source->memory(devs({1, 2}), 500ms);
  ASSERT_TRUE(both.has_value());
  EXPECT_THAT((*both)[0].problem, HasSubstr("did not answer"));
  EXPECT_FALSE((*both)[0].used);
  EXPECT_EQ((*both)[1].used, 21U);
  EXPECT_FALSE(m.source->memory(devs({1}), 500ms).has_value());
}

TEST(MixedSource, NvmlFailingBeforeItEverListedListsNoGpuSayingWhy) {
  Mixed m;
  m.nvidia->set_failure(SourceState::init_failed, "nvmlInit: driver not loaded");
  GpuSnapshot s = m.source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::init_failed);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_THAT(s.problem, HasSubstr("driver not loaded"));
  EXPECT_THAT(s.problem, HasSubstr("AMD GPUs are numbered after NVIDIA's"));
  auto r = m.source->memory(devs({2}), 500ms);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("indices are unknown"));
}

TEST(MixedSource, AmdFailingAsAWholeKeepsItsGpusMarked) {
  Mixed m;
  (void)m.source->snapshot(2s);
  m.amd->set_failure(SourceState::init_failed, "no AMD GPU driver");
  GpuSnapshot s = m.source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::partial);
  ASSERT_EQ(s.gpus.size(), 5U);
  EXPECT_EQ(s.gpus[4].id, dev(3));
  EXPECT_THAT(s.gpus[4].problem, HasSubstr("no AMD GPU driver"));
  EXPECT_EQ(s.gpus[2].memory->used, 13U);
}

TEST(MixedSource, TheHelperAndItsCallsAreNvmls) {
  Mixed m;
  m.nvidia->fake_worker_pid = 4242;
  m.amd->fake_worker_pid = 99;
  EXPECT_EQ(m.source->worker_pid(), 4242);
  m.source->prefetch_snapshot();
  EXPECT_EQ(m.nvidia->prefetch_calls, 1);
  EXPECT_EQ(m.amd->prefetch_calls, 0);
  m.source->disconnect();
  EXPECT_EQ(m.nvidia->disconnect_calls, 1);
  EXPECT_EQ(m.amd->disconnect_calls, 1);
}

}  // namespace
}  // namespace gpureap::gpu
