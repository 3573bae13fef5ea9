#include "gpu/nvml_process_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "gpu/nvml_api.h"

namespace gpureap::gpu {
namespace {

using ::testing::HasSubstr;

// A buffer as the library hands it to the driver: room for `capacity` entries
// of the widest layout, filled with the marker byte.
std::vector<std::byte> fresh_buffer(unsigned capacity = 8) {
  return std::vector<std::byte>(capacity * 32, kProcessBufferFill);
}

template <typename Entry>
void write_entries(std::vector<std::byte>& buffer, const std::vector<Entry>& entries) {
  std::memcpy(buffer.data(), entries.data(), entries.size() * sizeof(Entry));
}

// Real drivers write every byte of each entry, padding included.
nvmlProcessInfo_v2_t v2(unsigned pid, unsigned long long used) {
  nvmlProcessInfo_v2_t e;
  std::memset(&e, 0, sizeof e);
  e.pid = pid;
  e.usedGpuMemory = used;
  e.gpuInstanceId = 0xFFFFFFFF;
  e.computeInstanceId = 0xFFFFFFFF;
  return e;
}
nvmlProcessInfo_v1_t v1(unsigned pid, unsigned long long used) {
  nvmlProcessInfo_v1_t e;
  std::memset(&e, 0, sizeof e);
  e.pid = pid;
  e.usedGpuMemory = used;
  return e;
}
nvmlProcessDetail_v1_t detail(unsigned pid, unsigned long long used) {
  nvmlProcessDetail_v1_t e;
  std::memset(&e, 0, sizeof e);
  e.pid = pid;
  e.usedGpuMemory = used;
  e.gpuInstanceId = 0xFFFFFFFF;
  e.computeInstanceId = 0xFFFFFFFF;
  return e;
}

TEST(DecodeProcessBuffer, TwentyFourByteEntries) {
  auto buffer = fresh_buffer();
  write_entries(buffer, std::vector{v2(4242, 92ULL << 30), v2(17, ~0ULL)});
  auto r = decode_process_buffer(buffer, 2, 24, ProcessKind::compute);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[0].pid, 4242U);
  EXPECT_EQ((*r)[0].used_bytes, 92ULL << 30);
  EXPECT_EQ((*r)[1].pid, 17U);
  EXPECT_FALSE((*r)[1].used_bytes.has_value()) << "~0ULL is NVML's 'not available'";
  EXPECT_EQ((*r)[1].kind, ProcessKind::compute);
}

TEST(DecodeProcessBuffer, SixteenByteEntries) {
  auto buffer = fresh_buffer();
  write_entries(buffer, std::vector{v1(1, 10), v1(2, 20), v1(3, 30)});
  auto r = decode_process_buffer(buffer, 3, 16, ProcessKind::graphics);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 3U);
  EXPECT_EQ((*r)[2].pid, 3U);
  EXPECT_EQ((*r)[2].used_bytes, 30U);
}

// nvitop PR #226: a 550 driver's _v3 wrote 16-byte entries.
TEST(DecodeProcessBuffer, DetectsSixteenByteStrideBehindAV3Name) {
  for (unsigned n : {1U, 2U, 5U}) {
    auto buffer = fresh_buffer();
    std::vector<nvmlProcessInfo_v1_t> entries;
    for (unsigned i = 0; i < n; ++i) entries.push_back(v1(100 + i, 1000 * (i + 1)));
    write_entries(buffer, entries);
    auto r = decode_process_buffer(buffer, n, 24, ProcessKind::compute);
    ASSERT_TRUE(r.has_value()) << n << ": " << r.error().message;
    ASSERT_EQ(r->size(), n);
    EXPECT_EQ(r->back().pid, 100 + n - 1);
    EXPECT_EQ(r->back().used_bytes, 1000ULL * n);
  }
}

// R535.43.02: _v3 wrote 32-byte entries (nvitop#75: scrambled pids otherwise).
TEST(DecodeProcessBuffer, DetectsThirtyTwoByteStrideBehindAV3Name) {
  auto buffer = fresh_buffer();
  write_entries(buffer, std::vector{detail(1184, 5), detail(1185, 6)});
  auto r = decode_process_buffer(buffer, 2, 24, ProcessKind::compute);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)[0].pid, 1184U);
  EXPECT_EQ((*r)[1].pid, 1185U);
  EXPECT_EQ((*r)[1].used_bytes, 6U);
}

TEST(DecodeProcessBuffer, RejectsAnExtentNoLayoutExplains) {
  auto buffer = fresh_buffer();
  write_entries(buffer, std::vector{v2(1, 1)});
  // The driver says 3 entries but wrote one 24-byte entry.
  auto r = decode_process_buffer(buffer, 3, 24, ProcessKind::compute);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("3 entries but the driver wrote 24 bytes"));
}

TEST(DecodeProcessBuffer, RejectsImplausiblePids) {
  auto buffer = fresh_buffer();
  write_entries(buffer, std::vector{v2(1184, 1), v2(0, 1)});
  auto r = decode_process_buffer(buffer, 2, 24, ProcessKind::compute);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("pid 0"));

  buffer = fresh_buffer();
  write_entries(buffer, std::vector{v2(4294967295U, 1)});
  r = decode_process_buffer(buffer, 1, 24, ProcessKind::compute);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("pid 4294967295"));
}

TEST(DecodeProcessBuffer, NoEntries) {
  auto r = decode_process_buffer(fresh_buffer(), 0, 24, ProcessKind::mps);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->empty());
}

TEST(MergeProcesses, OneEntryPerPidFirstKindWinsKnownSizeKept) {
  std::vector<GpuProcess> all{{10, std::nullopt, ProcessKind::compute},
                              {11, 5, ProcessKind::compute},
                              {10, 7, ProcessKind::graphics},
                              {12, 1, ProcessKind::mps},
                              {11, 9, ProcessKind::mps}};
  auto merged = merge_processes(all);
  ASSERT_EQ(merged.size(), 3U);
  EXPECT_EQ(merged[0].pid, 10U);
  EXPECT_EQ(merged[0].kind, ProcessKind::compute);
  EXPECT_EQ(merged[0].used_bytes, 7U);
  EXPECT_EQ(merged[1].pid, 11U);
  EXPECT_EQ(merged[1].used_bytes, 5U);
  EXPECT_EQ(merged[2].pid, 12U);
}

}  // namespace
}  // namespace gpureap::gpu
