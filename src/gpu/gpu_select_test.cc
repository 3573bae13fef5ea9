#include "gpu/gpu_select.h"
#include "gpu/test_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpureap::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

GpuInfo gpu(unsigned index, std::string uuid, std::string bus, std::optional<unsigned> minor) {
  GpuInfo g;
  g.id = gpu::dev(index);
  g.uuid = std::move(uuid);
  g.pci_bus_id = std::move(bus);
  g.minor = minor;
  return g;
}

// Minors deliberately differ from indices, as they can on real hosts.
std::vector<GpuInfo> node() {
  return {gpu(0, "GPU-72828f1d-0000-1111-2222-333333333333", "00000000:18:00.0", 2),
          gpu(1, "GPU-72829abc-4444-5555-6666-777777777777", "00000000:2A:00.0", 0),
          gpu(2, "GPU-b0c1d2e3-8888-9999-aaaa-bbbbbbbbbbbb", "00000001:3B:00.0", 1),
          gpu(3, "GPU-c4d5e6f7-cccc-dddd-eeee-ffffffffffff", "00000000:DB:00.0", 5)};
}

std::vector<unsigned> ok(std::string_view spec) {
  auto r = select_gpus(spec, node());
  EXPECT_TRUE(r.has_value()) << spec << ": " << (r ? "" : r.error().message);
  std::vector<unsigned> out;
  for (DeviceId id : r.value_or(std::vector<DeviceId>{})) out.push_back(id.index);
  return out;
}

std::string error(std::string_view spec, const std::vector<GpuInfo>& gpus = node()) {
  auto r = select_gpus(spec, gpus);
  EXPECT_FALSE(r.has_value()) << spec << " unexpectedly selected GPUs";
  return r ? std::string() : r.error().message;
}

TEST(SelectGpus, AllSelectsEveryGpuInAnyCase) {
  EXPECT_THAT(ok("all"), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(ok("ALL"), ElementsAre(0, 1, 2, 3));
}

TEST(SelectGpus, AllOnANodeWithoutGpusIsEmpty) {
  auto r = select_gpus("all", {});
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(*r, IsEmpty());
}

TEST(SelectGpus, IndicesAreSortedAndDeduplicated) {
  EXPECT_THAT(ok("3,0"), ElementsAre(0, 3));
  EXPECT_THAT(ok(" 1 , 1,2 "), ElementsAre(1, 2));
  EXPECT_THAT(ok("0,all"), ElementsAre(0, 1, 2, 3));
}

TEST(SelectGpus, FullUuidInAnyCase) {
  EXPECT_THAT(ok("GPU-b0c1d2e3-8888-9999-aaaa-bbbbbbbbbbbb"), ElementsAre(2));
  EXPECT_THAT(ok("gpu-B0C1D2E3-8888-9999-AAAA-BBBBBBBBBBBB"), ElementsAre(2));
}

TEST(SelectGpus, UniqueUuidPrefix) {
  EXPECT_THAT(ok("GPU-c4d5"), ElementsAre(3));
  EXPECT_THAT(ok("GPU-72828"), ElementsAre(0));
  EXPECT_THAT(error("GPU-7282a"), HasSubstr("no GPU has such a UUID"));
}

TEST(SelectGpus, AmbiguousUuidPrefixNamesTheCandidates) {
  std::string e = error("GPU-7282");
  EXPECT_THAT(e, HasSubstr("ambiguous"));
  EXPECT_THAT(e, HasSubstr("GPU-72828f1d-0000-1111-2222-333333333333"));
  EXPECT_THAT(e, HasSubstr("GPU-72829abc-4444-5555-6666-777777777777"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("GPU-b0c1")));
}

TEST(SelectGpus, ShortUuidPrefixIsRejected) {
  EXPECT_THAT(error("GPU-c4d"), HasSubstr("at least 4 characters"));
  EXPECT_THAT(error("GPU-"), HasSubstr("at least 4 characters"));
}

TEST(SelectGpus, UnknownUuidListsTheGpus) {
  std::string e = error("GPU-deadbeef");
  EXPECT_THAT(e, HasSubstr("'GPU-deadbeef'"));
  EXPECT_THAT(e, HasSubstr("valid GPUs: 0 (GPU-72828f1d, 00000000:18:00.0, /dev/nvidia2)"));
  EXPECT_THAT(e, HasSubstr("3 (GPU-c4d5e6f7, 00000000:DB:00.0, /dev/nvidia5)"));
}

TEST(SelectGpus, PciBusIdInEveryCommonForm) {
  EXPECT_THAT(ok("00000000:DB:00.0"), ElementsAre(3));
  EXPECT_THAT(ok("0000:db:00.0"), ElementsAre(3));
  EXPECT_THAT(ok("db:00.0"), ElementsAre(3));
  EXPECT_THAT(ok("18:00.0"), ElementsAre(0));
  EXPECT_THAT(ok("0001:3b:00.0"), ElementsAre(2));
}

TEST(SelectGpus, PciBusIdWithoutDomainMeansDomainZero) {
  // 3B:00.0 exists only in domain 1.
  EXPECT_THAT(error("3b:00.0"), HasSubstr("no GPU has this PCI bus id"));
}

TEST(SelectGpus, MalformedPciBusId) {
  EXPECT_THAT(error("18:00"), HasSubstr("not a PCI bus id"));
  EXPECT_THAT(error("00:18:00.0"), HasSubstr("not a PCI bus id"));
  EXPECT_THAT(error("18:00.9"), HasSubstr("not a PCI bus id"));
  EXPECT_THAT(error("zz:00.0"), HasSubstr("not a PCI bus id"));
}

TEST(SelectGpus, MinorNumberNotIndex) {
  EXPECT_THAT(ok("minor:5"), ElementsAre(3));
  EXPECT_THAT(ok("MINOR:0"), ElementsAre(1));
  EXPECT_THAT(ok("/dev/nvidia2"), ElementsAre(0));
}

// Issue 39: an AMD GPU's render node names it, and each node names only its vendor's GPU
// (a mixed node's NVIDIA minor could equal an AMD render minor; minor:N names both).
TEST(SelectGpus, ARenderNodeNamesTheAmdGpuANvidiaNodeNvidias) {
  const std::vector<GpuInfo> mixed = {
      gpu(0, "GPU-72828f1d-0000-1111-2222-333333333333", "00000000:18:00.0", 128),
      gpu(1, "GPU-437aa7577fc75e00", "0000:0c:00.0", 128),
      gpu(2, "GPU-437aa7577fc75e01", "0000:0d:00.0", 129)};
  auto pick = [&](std::string_view spec) {
    std::vector<unsigned> out;
    auto r = select_gpus(spec, mixed);
    EXPECT_TRUE(r.has_value()) << spec << ": " << (r ? "" : r.error().message);
    for (DeviceId id : r.value_or(std::vector<DeviceId>{})) out.push_back(id.index);
    return out;
  };
  EXPECT_THAT(pick("/dev/dri/renderD129"), ElementsAre(2));
  EXPECT_THAT(pick("/dev/dri/renderD128"), ElementsAre(1));
  EXPECT_THAT(pick("/dev/nvidia128"), ElementsAre(0));
  EXPECT_THAT(pick("minor:128"), ElementsAre(0, 1));
  std::string e = error("/dev/dri/renderD130", mixed);
  EXPECT_THAT(e, HasSubstr("no GPU has minor number 130"));
  EXPECT_THAT(e, HasSubstr("/dev/dri/renderD129"));  // the valid GPUs, each by its own node
  EXPECT_THAT(error("/dev/nvidia129", mixed), HasSubstr("no GPU has minor number 129"));
  EXPECT_THAT(error("/dev/dri/renderDx"), HasSubstr("expected a device minor number"));
  EXPECT_THAT(error("/dev/dri/renderD"), HasSubstr("expected a device minor number"));
}

TEST(SelectGpus, UnknownMinor) {
  std::string e = error("/dev/nvidia7");
  EXPECT_THAT(e, HasSubstr("no GPU has minor number 7"));
  EXPECT_THAT(e, HasSubstr("valid GPUs"));
}

TEST(SelectGpus, MalformedMinor) {
  EXPECT_THAT(error("minor:"), HasSubstr("expected a device minor number"));
  EXPECT_THAT(error("minor:x"), HasSubstr("expected a device minor number"));
  EXPECT_THAT(error("/dev/nvidiactl"), HasSubstr("expected a device minor number"));
}

TEST(SelectGpus, IndexOutOfRange) {
  std::string e = error("0,4");
  EXPECT_THAT(e, HasSubstr("'4'"));
  EXPECT_THAT(e, HasSubstr("out of range"));
  EXPECT_THAT(e, HasSubstr("valid GPUs: 0 "));
  EXPECT_THAT(error("99999999999999999999"), HasSubstr("out of range"));
}

TEST(SelectGpus, NegativeIndex) {
  EXPECT_THAT(error("-1"), HasSubstr("cannot be negative"));
}

TEST(SelectGpus, EmptySpecOrItem) {
  EXPECT_THAT(error(""), HasSubstr("empty GPU selector"));
  EXPECT_THAT(error("  "), HasSubstr("empty GPU selector"));
  EXPECT_THAT(error("0,"), HasSubstr("'0,' has an empty item"));
  EXPECT_THAT(error(",1"), HasSubstr("empty item"));
  EXPECT_THAT(error("0,,1"), HasSubstr("empty item"));
}

TEST(SelectGpus, UnknownWordIsASyntaxErrorNamingInputAndWhereTheGpusAre) {
  // Refused when parsed, before any GPU is looked at: the message cannot list them.
  auto parsed = GpuSelector::parse("gpu0");
  ASSERT_FALSE(parsed);
  EXPECT_THAT(parsed.error().message, HasSubstr("'gpu0'"));
  EXPECT_THAT(parsed.error().message,
              HasSubstr("not an index, range (0-3), UUID, PCI bus id, minor:N or MIG device"));
  EXPECT_THAT(parsed.error().message, HasSubstr("gpureap status"));
}

TEST(SelectGpus, AnIndexOutOfRangeListsTheGpus) {
  EXPECT_THAT(error("9"), HasSubstr("2 (GPU-b0c1d2e3, 00000001:3B:00.0, /dev/nvidia1)"));
}

TEST(SelectGpus, RangesIncludeBothEnds) {
  EXPECT_THAT(ok("1-3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(ok("0-0, 3"), ElementsAre(0, 3));
  EXPECT_THAT(ok("2-3,0-1"), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(error("2-5"), HasSubstr("GPU index 4 out of range"));
  EXPECT_THAT(error("3-1"), HasSubstr("from the lower index to the higher"));
  EXPECT_FALSE(GpuSelector::parse("1-"));
  EXPECT_FALSE(GpuSelector::parse("-1-2"));
}

TEST(GpuSelectorParse, KeepsTheTextAndResolvesLater) {
  auto s = GpuSelector::parse(" 0, GPU-7282 ");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->text(), "0, GPU-7282");
  ASSERT_EQ(s->items().size(), 2u);
  EXPECT_EQ(s->items()[0].kind, SelectorItem::Kind::index);
  EXPECT_EQ(s->items()[1].kind, SelectorItem::Kind::uuid);
  // The UUID prefix is ambiguous only among these GPUs: an error of resolution.
  auto r = s->resolve(node());
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("ambiguous"));
  EXPECT_THAT(GpuSelector::every_gpu().resolve(node()).value(), ::testing::SizeIs(4));
}

TEST(SelectGpus, NoGpusVisible) {
  EXPECT_THAT(error("0", {}), HasSubstr("NVML sees no GPUs"));
}

TEST(SelectGpus, OneBadItemFailsTheWholeList) {
  EXPECT_THAT(error("0,1,banana"), HasSubstr("banana"));
}

}  // namespace
}  // namespace gpureap::gpu
