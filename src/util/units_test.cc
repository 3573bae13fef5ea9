#include "util/units.h"

#include <gtest/gtest.h>

namespace gpureap {
namespace {

using namespace std::chrono_literals;

TEST(ParseSize, BinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("20GiB").value(), 20ULL << 30);
  EXPECT_EQ(parse_size("96 GiB").value(), 96ULL << 30);
  EXPECT_EQ(parse_size("512MiB").value(), 512ULL << 20);
  EXPECT_EQ(parse_size("1.5KiB").value(), 1536u);
  EXPECT_EQ(parse_size("2TiB").value(), 2ULL << 40);
  EXPECT_EQ(parse_size("48GB").value(), 48'000'000'000ULL);
  EXPECT_EQ(parse_size("7B").value(), 7u);
  EXPECT_EQ(parse_size("97887MiB").value(), 97887ULL << 20);
}

TEST(ParseSize, BadInputNamesTheInput) {
  auto bare = parse_size("96");
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().message.find("add a unit"), std::string::npos) << bare.error().message;
  EXPECT_EQ(parse_size("96", /*require_unit=*/false).value(), 96u);
  for (const char* bad : {"", "GiB", "-1GiB", "12 parsecs", "1e30TiB", "nan GiB"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("invalid size"), std::string::npos) << r.error().message;
  }
  EXPECT_NE(parse_size("12 parsecs").error().message.find("parsecs"), std::string::npos);
}

TEST(ParseSize, AbsurdSizesAreRejectedNotWrapped) {
  // 9000000TiB, 1.7e19B and 1e19B used to round past 2^63 and print as 8 EiB.
  for (const char* bad : {"9000000TiB", "1.7e19B", "1e19B", "18446744073709551616B", "inf GiB",
                          "1e400GiB"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(parse_size("1e30", /*require_unit=*/false));
  EXPECT_EQ(parse_size("8192TiB").value(), kMaxSize);
  EXPECT_FALSE(parse_size("8193TiB"));
}

TEST(ParseCount, WholeNumbersInRange) {
  EXPECT_EQ(parse_count("1", "--pid", 1, 100).value(), 1u);
  EXPECT_EQ(parse_count("+42", "--pid", 1, 100).value(), 42u);
  EXPECT_EQ(parse_count("4294967294", "--user", 0, 4294967294).value(), 4294967294u);
}

TEST(ParseCount, RejectsWhatWouldWrapOrIsNotAWholeNumber) {
  // Each class: empty, negative, zero below min, fraction, hex, exponent, spaces,
  // just above max, above 2^64 (would wrap in stoul), non-ASCII digits.
  for (const char* bad : {"", "-1", "-0", "0", "1.5", "0x10", "1e3", " 1", "1 ", "4294967296",
                          "18446744073709551616", "100000000000000000000000000", "\xd9\xa1"}) {
    auto r = parse_count(bad, "--user", 1, 4294967294);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--user"), std::string::npos) << r.error().message;
  }
  EXPECT_NE(parse_count("4294967296", "--user", 0, 4294967294).error().message.find("too large"),
            std::string::npos);
  EXPECT_NE(parse_count("0", "--pid", 1, 10).error().message.find("at least 1"),
            std::string::npos);
}

TEST(ParseReal, FiniteAndInRange) {
  EXPECT_DOUBLE_EQ(parse_real("2", "--hicache-ratio", 0.01, 1000).value(), 2.0);
  EXPECT_DOUBLE_EQ(parse_real("1e-1", "--hicache-ratio", 0.01, 1000).value(), 0.1);
  for (const char* bad : {"", "inf", "-inf", "nan", "NaN", "1e400", "1e-400", "0", "-2", "1001",
                          "2x", "0x10"}) {
    auto r = parse_real(bad, "--hicache-ratio", 0.01, 1000);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--hicache-ratio"), std::string::npos) << r.error().message;
  }
}

TEST(ParseSize, PastTwoToTheSixtyFourIsTooLarge) {
  // Found by fuzz/units_fuzz.cc: a bare 14e85 was converted with undefined behaviour.
  for (const char* big : {"14e85", "18446744073709551616", "16EiB", "16384PiB"}) {
    auto r = parse_size(big, /*require_unit=*/false);
    EXPECT_FALSE(r) << big;
  }
  EXPECT_FALSE(parse_size("16777216TiB"));  // 2^64 bytes
  EXPECT_FALSE(parse_size("16777215TiB"));  // below 2^64, but above the 8 PiB cap
}

TEST(ParseDuration, UnitsAndBareSeconds) {
  EXPECT_EQ(parse_duration("300ms").value(), 300ms);
  EXPECT_EQ(parse_duration("1.5s").value(), 1500ms);
  EXPECT_EQ(parse_duration("5").value(), 5s);
  EXPECT_EQ(parse_duration("2m").value(), 120s);
  EXPECT_EQ(parse_duration("1h").value(), 3600s);
  EXPECT_EQ(parse_duration("250us").value(), 250us);
}

TEST(ParseDuration, BadInput) {
  for (const char* bad : {"", "ms", "-3s", "5 fortnights", "1e20h"}) {
    auto r = parse_duration(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("invalid duration"), std::string::npos) << r.error().message;
  }
}

TEST(ParsePositiveDuration, MillisecondsMoreThanZeroElseTheOptionSaysWhy) {
  using namespace std::chrono_literals;
  EXPECT_EQ(parse_positive_duration("1.5s", "--tick").value(), 1500ms);
  auto zero = parse_positive_duration("0s", "--tick");
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message, "--tick: must be more than 0 (got 0s)");
  auto sub_ms = parse_positive_duration("500us", "--tick");  // 0 whole milliseconds
  ASSERT_FALSE(sub_ms);
  auto bad = parse_positive_duration("soon", "--keep-after");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().message.starts_with("--keep-after: invalid duration")) << bad.error().message;
}

TEST(Format, BytesAndDurations) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512ULL << 20), "512 MiB");
  EXPECT_EQ(format_bytes(20ULL << 30), "20.0 GiB");
  EXPECT_EQ(format_signed_bytes(-(3LL << 29)), "-1.50 GiB");
  EXPECT_EQ(format_signed_bytes(512LL << 20), "512 MiB");
  EXPECT_EQ(format_bytes(3ULL << 29), "1.50 GiB");
  EXPECT_EQ(format_duration(420ms), "420 ms");
  EXPECT_EQ(format_duration(2500ms), "2.50 s");
  EXPECT_EQ(format_duration(185s), "3m05s");
}

}  // namespace
}  // namespace gpureap
