#include "gpu/nvml_wire.h"
#include "gpu/test_devices.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gpureap::gpu {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

bool same(const GpuInfo& a, const GpuInfo& b) {
  using Memory = std::tuple<bool, std::uint64_t, std::uint64_t, std::optional<std::uint64_t>>;
  auto mem = [](const std::optional<GpuMemory>& m) -> Memory {
    if (!m) return {false, 0, 0, std::nullopt};
    return {true, m->total, m->used, m->reserved};
  };
  if (a.processes.size() != b.processes.size()) return false;
  for (std::size_t i = 0; i < a.processes.size(); ++i) {
    const GpuProcess& p = a.processes[i];
    const GpuProcess& q = b.processes[i];
    if (p.pid != q.pid || p.used_bytes != q.used_bytes || p.kind != q.kind ||
        p.sm_percent != q.sm_percent || p.mem_percent != q.mem_percent)
      return false;
  }
  return a.id == b.id && a.name == b.name && a.uuid == b.uuid &&
         a.pci_bus_id == b.pci_bus_id && a.minor == b.minor && mem(a.memory) == mem(b.memory) &&
         a.processes_known == b.processes_known && a.persistence_mode == b.persistence_mode &&
         a.utilization_gpu == b.utilization_gpu && a.utilization_memory == b.utilization_memory &&
         a.temperature_c == b.temperature_c && a.power_mw == b.power_mw &&
         a.power_limit_mw == b.power_limit_mw && a.clock_event_reasons == b.clock_event_reasons &&
         a.ecc_uncorrected == b.ecc_uncorrected && a.problem == b.problem && a.hung == b.hung;
}

GpuInfo full_gpu() {
  GpuInfo g;
  g.id = gpu::dev(7);
  g.name = "NVIDIA H200";
  g.uuid = "GPU-72828f1d-0000-1111-2222-333333333333";
  g.pci_bus_id = "00000000:DB:00.0";
  g.minor = 5;
  // Above 2^53: must survive JSON without going through a double.
  g.memory = GpuMemory{150'754'820'096ULL, (1ULL << 60) + 1, 512ULL << 20};
  g.processes = {{4242, 92ULL << 30, ProcessKind::compute, 37, 12},
                 {77, std::nullopt, ProcessKind::graphics, 0, std::nullopt},  // sampled idle
                 {4194304, 1, ProcessKind::mps}};  // no sample: nullopt both
  g.processes_known = true;
  g.persistence_mode = true;
  g.utilization_gpu = 100;
  g.utilization_memory = 0;
  g.temperature_c = 67;
  g.power_mw = 699'000;
  g.power_limit_mw = 700'000;
  g.clock_event_reasons = 0x80 | (1ULL << 62);  // a bit NVML may add later survives
  g.ecc_uncorrected = (1ULL << 60) + 3;
  g.problem = "nvmlDeviceGetGraphicsRunningProcesses_v3(GPU 7): No permission";
  g.hung = true;
  return g;
}

TEST(NvmlWire, GpuInfoRoundTripKeepsEveryField) {
  GpuInfo g = full_gpu();
  auto back = gpu_info_from_wire(gpu_info_to_wire(g));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_TRUE(same(g, *back));
}

TEST(NvmlWire, TextThatIsNotUtf8TravelsAsHexAndComesBackByteForByte) {
  // One encoding per type (issue 23): the agent's wire reuses this one, whose text went
  // through nlohmann's dump unchecked, which throws on a byte that is not UTF-8.
  GpuInfo g = full_gpu();
  g.name = std::string("NVIDIA \xff H200");
  g.problem = std::string("driver said \xc3\x28");
  const auto wire = gpu_info_to_wire(g);
  EXPECT_TRUE(wire["name"].is_object());
  EXPECT_NO_THROW((void)wire.dump());
  auto back = gpu_info_from_wire(nlohmann::json::parse(wire.dump()));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_TRUE(same(g, *back));
}

TEST(NvmlWire, AnIntegerOutOfRangeIsAnErrorNotAWrap) {
  auto wire = gpu_info_to_wire(full_gpu());
  wire["index"] = -1;
  auto back = gpu_info_from_wire(wire);
  ASSERT_FALSE(back.has_value());
  EXPECT_NE(back.error().message.find("'index'"), std::string::npos) << back.error().message;
}

TEST(NvmlWire, GpuInfoRoundTripKeepsMissingValuesMissing) {
  GpuInfo g;
  g.id = gpu::dev(3);  // a lost GPU: identity unknown
  auto back = gpu_info_from_wire(gpu_info_to_wire(g));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_TRUE(same(g, *back));
  EXPECT_FALSE(back->minor.has_value());
  EXPECT_FALSE(back->memory.has_value());
  EXPECT_FALSE(back->persistence_mode.has_value());
  EXPECT_FALSE(back->processes_known);

  g.memory = GpuMemory{100, 40, std::nullopt};  // v1 reading: reserved unknown
  g.persistence_mode = false;
  back = gpu_info_from_wire(gpu_info_to_wire(g));
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(same(g, *back));
}

TEST(NvmlWire, UtilizationAbsentFromAnOlderWorkerIsUnknown) {
  nlohmann::json wire = gpu_info_to_wire(full_gpu());
  wire.erase("utilization_gpu");
  wire.erase("utilization_memory");
  auto back = gpu_info_from_wire(wire);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_FALSE(back->utilization_gpu.has_value());
  EXPECT_FALSE(back->utilization_memory.has_value());
  wire["utilization_gpu"] = "busy";
  EXPECT_FALSE(gpu_info_from_wire(wire).has_value());
}

TEST(NvmlWire, MemoryReadingRoundTrip) {
  MemoryReading r{DeviceId{5}, (1ULL << 62) + 3, {1, 2, 4194304}, "GPU 5: lost", true, 88, {}};
  auto back = memory_reading_from_wire(memory_reading_to_wire(r));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->utilization_gpu, 88U);
  EXPECT_EQ(back->id, gpu::dev(5));
  EXPECT_EQ(back->used, r.used);
  EXPECT_EQ(back->pids, r.pids);
  EXPECT_EQ(back->problem, "GPU 5: lost");
  EXPECT_TRUE(back->hung);

  MemoryReading unknown{DeviceId{1}, std::nullopt, {}, {}, false, std::nullopt, {}};
  back = memory_reading_from_wire(memory_reading_to_wire(unknown));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->used.has_value());
}

TEST(NvmlWire, MalformedValuesAreErrorsNotExceptions) {
  nlohmann::json wire = gpu_info_to_wire(full_gpu());
  wire.erase("uuid");
  auto missing = gpu_info_from_wire(wire);
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("malformed GPU description"));
  EXPECT_THAT(missing.error().message, HasSubstr("uuid"));

  wire = gpu_info_to_wire(full_gpu());
  wire["processes"][0]["kind"] = "quantum";
  EXPECT_FALSE(gpu_info_from_wire(wire).has_value());

  EXPECT_FALSE(memory_reading_from_wire(nlohmann::json{{"index", -1}}).has_value());
  EXPECT_FALSE(memory_reading_from_wire(nlohmann::json("text")).has_value());
}

class FrameTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0);
    fcntl(fds_[0], F_SETFL, O_NONBLOCK);
  }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  FrameDeadline soon(std::chrono::milliseconds ms = 200ms) {
    return std::chrono::steady_clock::now() + ms;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(FrameTest, FramesRoundTripInOrder) {
  ASSERT_TRUE(write_frame(fds_[1], {{"op", "snapshot"}}, std::nullopt));
  ASSERT_TRUE(write_frame(fds_[1], {{"op", "memory"}, {"indices", {0, 3}}}, std::nullopt));
  auto first = read_frame(fds_[0], soon());
  auto second = read_frame(fds_[0], soon());
  ASSERT_TRUE(first && second);
  EXPECT_EQ((*first)["op"], "snapshot");
  EXPECT_EQ((*second)["indices"][1], 3);
}

TEST_F(FrameTest, ReadTimesOutAtTheDeadline) {
  auto start = std::chrono::steady_clock::now();
  auto r = read_frame(fds_[0], soon(50ms));
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, FrameFailure::Kind::timeout);
  EXPECT_GE(waited, 50ms);  // nothing is ever written: a read past its deadline hangs the test
}

TEST_F(FrameTest, PeerCloseIsReportedAsClosedEvenMidFrame) {
  const char partial[] = {10, 0, 0, 0, '{'};
  ASSERT_EQ(write(fds_[1], partial, sizeof partial), static_cast<ssize_t>(sizeof partial));
  close(fds_[1]);
  fds_[1] = -1;
  auto r = read_frame(fds_[0], soon());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, FrameFailure::Kind::closed);
}

TEST_F(FrameTest, WritingToAClosedPeerFailsWithoutSigpipe) {
  close(fds_[1]);
  fds_[1] = -1;
  auto r = write_frame(fds_[0], {{"op", "snapshot"}}, soon());
  ASSERT_FALSE(r.has_value());  // reaching this line means no SIGPIPE killed us
  EXPECT_EQ(r.error().kind, FrameFailure::Kind::closed);
}

TEST_F(FrameTest, GarbageIsMalformed) {
  const char garbage[] = {3, 0, 0, 0, 'x', 'y', 'z'};
  ASSERT_EQ(write(fds_[1], garbage, sizeof garbage), static_cast<ssize_t>(sizeof garbage));
  auto r = read_frame(fds_[0], soon());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, FrameFailure::Kind::malformed);

  const char huge[] = {0, 0, 0, 0x7f};
  ASSERT_EQ(write(fds_[1], huge, sizeof huge), static_cast<ssize_t>(sizeof huge));
  r = read_frame(fds_[0], soon());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, FrameFailure::Kind::malformed);
}

}  // namespace
}  // namespace gpureap::gpu
