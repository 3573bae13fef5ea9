#include "util/time_text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

namespace gpureap {
// Named, not anonymous: the debug build compiles tests in batches (unity build).
namespace time_text_test {

using namespace std::chrono;

// Runs the test body in a fixed time zone and puts the caller's back.
class InZone {
 public:
  explicit InZone(const char* tz) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", tz, 1);
    ::tzset();
  }
  ~InZone() {
    if (old_)
      ::setenv("TZ", old_->c_str(), 1);
    else
      ::unsetenv("TZ");
    ::tzset();
  }

 private:
  std::optional<std::string> old_;
};

WallTime at_utc(long long seconds, long micros = 0) {
  return WallTime(
      duration_cast<WallTime::duration>(std::chrono::seconds(seconds) + microseconds(micros)));
}

TEST(TimeText, Rfc3339HasDateSubSecondAndOffset) {
  InZone utc("UTC0");
  // 2025-06-01T12:00:07.000042Z
  EXPECT_EQ(rfc3339(at_utc(1748779207, 42)), "2025-06-01T12:00:07.000042+00:00");
  InZone paris("CET-1CEST,M3.5.0,M10.5.0/3");
  EXPECT_EQ(rfc3339(at_utc(1748779207, 412907)), "2025-06-01T14:00:07.412907+02:00");
  EXPECT_EQ(rfc3339(at_utc(1736942400)), "2025-01-15T13:00:00.000000+01:00");
  InZone newfoundland("NST+3:30");
  EXPECT_EQ(rfc3339(at_utc(1748779207)), "2025-06-01T08:30:07.000000-03:30");
  EXPECT_EQ(local_time_text(at_utc(1748779207, 412907)), "2025-06-01 08:30:07.412");
}

TEST(TimeText, WhatRfc3339WritesReadsBackExactly) {
  for (const char* tz : {"UTC0", "CET-1CEST,M3.5.0,M10.5.0/3", "NST+3:30"}) {
    InZone zone(tz);
    for (auto t : {at_utc(1748779207, 412907), at_utc(1736942400), at_utc(0, 1)}) {
      auto back = parse_time(rfc3339(t));
      ASSERT_TRUE(back) << rfc3339(t);
      EXPECT_EQ(*back, t) << tz << " " << rfc3339(t);
    }
  }
}

TEST(TimeText, ReadsTheFormsAnOperatorTypes) {
  InZone utc("UTC0");
  EXPECT_EQ(parse_time("2025-06-01T12:00:07Z"), at_utc(1748779207));
  EXPECT_EQ(parse_time("2025-06-01t12:00:07.5z"), at_utc(1748779207, 500000));
  EXPECT_EQ(parse_time("2025-06-01 14:00:07+02:00"), at_utc(1748779207));
  EXPECT_EQ(parse_time("2025-06-01T12:00"), at_utc(1748779200));
  EXPECT_EQ(parse_time("2025-06-01 12:00:07"), at_utc(1748779207));
  EXPECT_EQ(parse_time("2025-06-01"), at_utc(1748736000));
  EXPECT_EQ(parse_time("2200-01-01T00:00:00Z"), at_utc(7258118400));
  InZone paris("CET-1CEST,M3.5.0,M10.5.0/3");
  EXPECT_EQ(parse_time("2025-06-01 14:00:07"), at_utc(1748779207));   // local time: CEST
  EXPECT_EQ(parse_time("2025-06-01T12:00:07Z"), at_utc(1748779207));  // an offset wins
}

TEST(TimeText, RefusesWhatIsNotATime) {
  InZone utc("UTC0");
  for (const char* bad :
       {"", "yesterday", "2025-6-1", "2025-06-01T", "2025-06-01T12", "2025-06-01T24:00",
        "2025-13-01", "2025-02-30", "2025-06-01T12:00:07.", "2025-06-01T12:00:07+0200",
        "2025-06-01T12:00:07Zjunk", "1h", "2999-01-01", "1066-10-14"})
    EXPECT_FALSE(parse_time(bad)) << bad;
}

}  // namespace time_text_test
}  // namespace gpureap
