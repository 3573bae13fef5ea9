#include "capacity/plan_args.h"

#include <gtest/gtest.h>

namespace gpureap::capacity {
namespace {

TEST(SizeFlag, NeedsAUnit) {
  EXPECT_EQ(*parse_size_flag("--gpu-memory", "97887MiB"), 97887ULL << 20);
  EXPECT_EQ(*parse_size_flag("--host-memory", "408GB"), 408'000'000'000u);
  auto bare = parse_size_flag("--gpu-memory", "96");
  ASSERT_FALSE(bare);
  EXPECT_EQ(bare.error().message.rfind("--gpu-memory 96: invalid size '96': add a unit", 0), 0u)
      << bare.error().message;
  auto zero = parse_size_flag("--gpu-memory", "0GiB");
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message.find("--gpu-memory 0GiB"), std::string::npos);
  auto unit = parse_size_flag("--host-memory", "5 parsecs");
  ASSERT_FALSE(unit);
  EXPECT_NE(unit.error().message.find("--host-memory"), std::string::npos);
}

TEST(MemFraction, SingleValue) {
  auto f = parse_mem_fraction("0.88");
  ASSERT_TRUE(f);
  EXPECT_EQ(*f, std::vector<double>{0.88});
  EXPECT_EQ(*parse_mem_fraction("1"), std::vector<double>{1.0});
}

TEST(MemFraction, SweepIncludesBothEnds) {
  auto f = parse_mem_fraction("0.80:0.95:0.01");
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(f->size(), 16u);
  EXPECT_DOUBLE_EQ(f->front(), 0.80);
  EXPECT_DOUBLE_EQ((*f)[8], 0.88);
  EXPECT_DOUBLE_EQ(f->back(), 0.95);
  EXPECT_EQ(parse_mem_fraction("0.85:0.85:0.01")->size(), 1u);
}

TEST(MemFraction, OutsideZeroToOneIsAnErrorNamingTheFlag) {
  // 4e-11 rounds to 0 at the six decimals a sweep is rounded to (found by fuzzing).
  for (const char* bad : {"0", "1.2", "-0.5", "0.8:1.1:0.1", "0:0.5:0.1", "4e-11:.5:5."}) {
    auto f = parse_mem_fraction(bad);
    ASSERT_FALSE(f) << bad;
    EXPECT_EQ(f.error().message.rfind(std::string("--mem-fraction ") + bad, 0), 0u)
        << f.error().message;
    EXPECT_NE(f.error().message.find("outside (0, 1]"), std::string::npos) << f.error().message;
  }
}

TEST(MemFraction, MalformedSweeps) {
  EXPECT_FALSE(parse_mem_fraction("abc"));
  EXPECT_FALSE(parse_mem_fraction("0.9:0.8:0.01"));  // FROM above TO
  EXPECT_FALSE(parse_mem_fraction("0.8:0.9:0"));     // no step
  EXPECT_FALSE(parse_mem_fraction("0.8:0.9"));       // two parts
  EXPECT_FALSE(parse_mem_fraction("0.1:1:0.0001"));  // too many points
  EXPECT_FALSE(parse_mem_fraction("0.88x"));
}

TEST(KvDtypeFlag, Names) {
  EXPECT_EQ(*parse_kv_dtype("bf16"), KvDtype::bf16);
  EXPECT_EQ(*parse_kv_dtype("auto"), KvDtype::bf16);
  EXPECT_EQ(*parse_kv_dtype("fp8_e4m3"), KvDtype::fp8_e4m3);
  auto bad = parse_kv_dtype("int3");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--kv-dtype int3: expected bf16 or fp8_e4m3");
}

TEST(HicacheSize, BareNumberIsGbLikeSglang) {
  EXPECT_EQ(*parse_hicache_size("48"), 48'000'000'000u);
  EXPECT_EQ(*parse_hicache_size("37.5"), 37'500'000'000u);
  EXPECT_EQ(*parse_hicache_size("44GiB"), 44ULL << 30);
  EXPECT_FALSE(parse_hicache_size("0"));
  auto bad = parse_hicache_size("lots");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--hicache-size lots"), std::string::npos);
}

TEST(SizeFlag, AbsurdSizesAreRejectedWithTheFlag) {
  for (const char* bad : {"9000000TiB", "1.7e19B", "1e19B", "inf GiB", "nan MiB"}) {
    auto r = parse_size_flag("--gpu-memory", bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--gpu-memory", 0), 0u) << r.error().message;
  }
  for (const char* bad : {"1e10", "1e300", "18446744073709551616", "inf", "nan", "-5"}) {
    auto r = parse_hicache_size(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--hicache-size", 0), 0u) << r.error().message;
  }
  EXPECT_EQ(*parse_hicache_size("48"), 48'000'000'000u);
}

TEST(TensorParallel, WholeNumberInRange) {
  EXPECT_EQ(*parse_tensor_parallel("8"), 8);
  for (const char* bad : {"", "0", "-2", "1.5", "1025", "2147483648", "18446744073709551616"}) {
    auto r = parse_tensor_parallel(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--tp", 0), 0u) << r.error().message;
  }
}

TEST(TokenCount, ContextLengthsAndAveragesAreBounded) {
  EXPECT_EQ(*parse_token_count("--context-len", "262144", 1), 262144);
  EXPECT_EQ(*parse_token_count("--avg-prompt", "0", 0), 0);
  EXPECT_EQ(*parse_token_count("--context-len", "1073741824", 1), kMaxContextLen);
  // 2^64 and 10^26 used to saturate to 2^63-1 tokens; 2^32 gave -32 TiB of headroom.
  for (const char* bad : {"18446744073709551616", "100000000000000000000000000", "4294967296",
                          "1073741825", "0", "-1", "", "1e3", "0x10"}) {
    auto r = parse_token_count("--context-len", bad, 1);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--context-len", 0), 0u) << r.error().message;
  }
  ASSERT_FALSE(parse_token_count("--avg-prompt", "100000000000000000000000000", 0));
  ASSERT_FALSE(parse_token_count("--avg-output", "-1", 0));
}

TEST(HicacheRatio, FinitePositiveAndBounded) {
  EXPECT_DOUBLE_EQ(*parse_hicache_ratio("2"), 2.0);
  for (const char* bad : {"inf", "nan", "1e400", "0", "-1", "1001", "", "two"}) {
    auto r = parse_hicache_ratio(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.rfind("--hicache-ratio", 0), 0u) << r.error().message;
  }
}

}  // namespace
}  // namespace gpureap::capacity
