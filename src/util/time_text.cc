#include "util/time_text.h"

#include <fmt/format.h>

#include <charconv>
#include <ctime>

namespace gpureap {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

// The fields of `t` in local time, and its microseconds within the second.
bool local_fields(WallTime t, std::tm& tm, long& micros) {
  auto us = duration_cast<microseconds>(t.time_since_epoch()).count();
  long long secs = us / 1000000;
  micros = static_cast<long>(us % 1000000);
  if (micros < 0) {  // before 1970: the fraction counts up from the second below
    micros += 1000000;
    --secs;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  return ::localtime_r(&tt, &tm) != nullptr;
}

// Reads exactly `width` digits at `at`; advances it.
std::optional<int> digits(std::string_view s, std::size_t& at, std::size_t width) {
  if (at + width > s.size()) return std::nullopt;
  int value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    char c = s[at + i];
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  at += width;
  return value;
}

bool take(std::string_view s, std::size_t& at, char c) {
  if (at < s.size() && s[at] == c) {
    ++at;
    return true;
  }
  return false;
}

}  // namespace

std::string rfc3339(WallTime t) {
  std::tm tm{};
  long micros = 0;
  if (!local_fields(t, tm, micros)) return "";
  // tm_gmtoff: seconds east of UTC, as localtime_r computed it for this instant.
  long off = tm.tm_gmtoff;
  char sign = off < 0 ? '-' : '+';
  if (off < 0) off = -off;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}{}{:02}:{:02}", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros, sign,
                     off / 3600, (off % 3600) / 60);
}

std::string local_time_text(WallTime t) {
  std::tm tm{};
  long micros = 0;
  if (!local_fields(t, tm, micros)) return "?";
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros / 1000);
}

std::optional<WallTime> parse_time(std::string_view s) {
  std::size_t at = 0;
  std::tm tm{};
  auto year = digits(s, at, 4);
  if (!year || !take(s, at, '-')) return std::nullopt;
  auto month = digits(s, at, 2);
  if (!month || !take(s, at, '-')) return std::nullopt;
  auto day = digits(s, at, 2);
  if (!day || *month < 1 || *month > 12 || *day < 1 || *day > 31) return std::nullopt;
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  long micros = 0;
  std::optional<long> offset;  // seconds east of UTC; nullopt: local time
  if (at < s.size()) {
    if (!take(s, at, 'T') && !take(s, at, 't') && !take(s, at, ' ')) return std::nullopt;
    auto hour = digits(s, at, 2);
    if (!hour || !take(s, at, ':')) return std::nullopt;
    auto minute = digits(s, at, 2);
    if (!minute || *hour > 23 || *minute > 59) return std::nullopt;
    tm.tm_hour = *hour;
    tm.tm_min = *minute;
    if (take(s, at, ':')) {
      auto second = digits(s, at, 2);
      if (!second || *second > 60) return std::nullopt;  // 60: a leap second
      tm.tm_sec = *second;
      if (take(s, at, '.') || take(s, at, ',')) {
        std::size_t start = at;
        long scale = 100000;
        while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
          micros += (s[at] - '0') * scale;  // digits past the microsecond are dropped
          scale /= 10;
          ++at;
        }
        if (at == start) return std::nullopt;
      }
    }
    if (take(s, at, 'Z') || take(s, at, 'z')) {
      offset = 0;
    } else if (at < s.size() && (s[at] == '+' || s[at] == '-')) {
      const long sign = s[at++] == '-' ? -1 : 1;
      auto oh = digits(s, at, 2);
      if (!oh || !take(s, at, ':')) return std::nullopt;
      auto om = digits(s, at, 2);
      if (!om || *oh > 23 || *om > 59) return std::nullopt;
      offset = sign * (*oh * 3600L + *om * 60L);
    }
  }
  if (at != s.size()) return std::nullopt;
  const int want_day = tm.tm_mday;
  std::time_t secs;
  if (offset) {
    secs = ::timegm(&tm) - *offset;
  } else {
    tm.tm_isdst = -1;  // let mktime decide whether summer time applies
    secs = std::mktime(&tm);
  }
  if (tm.tm_mday != want_day) return std::nullopt;  // normalised: 2025-02-30 is no date
  // WallTime counts nanoseconds in 64 bits: years 1678 to 2261.
  constexpr std::time_t kLimit = 9'000'000'000;
  if (secs > kLimit || secs < -kLimit) return std::nullopt;
  return WallTime(
      duration_cast<WallTime::duration>(std::chrono::seconds(secs) + microseconds(micros)));
}

}  // namespace gpureap
