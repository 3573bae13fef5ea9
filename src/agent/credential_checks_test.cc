// CredentialChecks with a stand-in for bcrypt that counts its calls and, when told,
// holds them until released, and a clock the test moves: the ordering is the test's,
// never the machine's speed.

#include "agent/credential_checks.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;
using Clock = CredentialChecks::Clock;

// "hash" is the password itself; a check of `hold` waits until release().
struct SlowCheck {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned calls = 0;
  bool held = false;
  PasswordCheck fn() {
    return [this](const std::string& hash, std::string_view password) {
      std::unique_lock lock(mutex);
      ++calls;
      cv.notify_all();
      cv.wait(lock, [&] { return !held; });
      return hash == password;
    };
  }
  bool wait_calls(unsigned n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 60s, [&] { return calls >= n; });  // a bound, not a measure
  }
  void hold(bool on) {
    std::lock_guard lock(mutex);
    held = on;
    cv.notify_all();
  }
  unsigned count() {
    std::lock_guard lock(mutex);
    return calls;
  }
};

struct Verdicts {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<bool> got;
  CredentialChecks::Done done() {
    return [this](bool ok) {
      std::lock_guard lock(mutex);
      got.push_back(ok);
      cv.notify_all();
    };
  }
  bool wait(std::size_t n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 60s, [&] { return got.size() >= n; });
  }
};

TEST(CredentialChecks, ARememberedPairIsLetInWhileEveryWorkerIsBusy) {
  SlowCheck slow;
  BasicAuth auth({{"prometheus", "right"}}, slow.fn());
  CredentialChecks checks(auth, 2);
  Verdicts v;
  ASSERT_EQ(checks.quick("prom", "prometheus", "right"), CredentialChecks::Quick::needs_check);
  checks.submit("prom", "prometheus", "right", v.done());
  ASSERT_TRUE(v.wait(1));
  EXPECT_TRUE(v.got[0]);
  // Two clients' wrong passwords hold both workers.
  slow.hold(true);
  for (const char* client : {"a", "b"}) {
    ASSERT_EQ(checks.quick(client, "prometheus", "wrong"), CredentialChecks::Quick::needs_check);
    checks.submit(client, "prometheus", "wrong", v.done());
  }
  ASSERT_TRUE(slow.wait_calls(3));
  EXPECT_EQ(checks.quick("prom", "prometheus", "right"), CredentialChecks::Quick::let_in);
  EXPECT_EQ(checks.quick("prom", nullptr, ""), CredentialChecks::Quick::refused);
  slow.hold(false);
  ASSERT_TRUE(v.wait(3));
  EXPECT_FALSE(v.got[1]);
  EXPECT_FALSE(v.got[2]);
}

TEST(CredentialChecks, AFailedClientIsRefusedBeforeAnyBcryptForAWhile) {
  SlowCheck slow;
  BasicAuth auth({{"prometheus", "right"}}, slow.fn());
  Clock::time_point now{};
  std::mutex now_mutex;
  auto clock = [&] {
    std::lock_guard lock(now_mutex);
    return now;
  };
  auto advance = [&](Clock::duration d) {
    std::lock_guard lock(now_mutex);
    now += d;
  };
  CredentialChecks checks(auth, 1, clock);
  Verdicts v;
  // Three checks of one client wait behind a held one: when it fails, they are refused
  // without bcrypt.
  slow.hold(true);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(checks.quick("mallory", "prometheus", "wrong"),
              CredentialChecks::Quick::needs_check);
    checks.submit("mallory", "prometheus", "wrong", v.done());
  }
  ASSERT_TRUE(slow.wait_calls(1));
  slow.hold(false);
  ASSERT_TRUE(v.wait(4));
  EXPECT_EQ(slow.count(), 1u);
  EXPECT_EQ(v.got, (std::vector{false, false, false, false}));
  // Refused at once for 1 s, then 2 s after the next failure; others are not.
  EXPECT_EQ(checks.quick("mallory", "prometheus", "right"), CredentialChecks::Quick::refused);
  EXPECT_EQ(checks.quick("prom", "prometheus", "right"), CredentialChecks::Quick::needs_check);
  advance(1s);
  ASSERT_EQ(checks.quick("mallory", "prometheus", "wrong"), CredentialChecks::Quick::needs_check);
  checks.submit("mallory", "prometheus", "wrong", v.done());
  ASSERT_TRUE(v.wait(5));
  EXPECT_EQ(slow.count(), 2u);
  advance(1s);
  EXPECT_EQ(checks.quick("mallory", "prometheus", "right"), CredentialChecks::Quick::refused);
  advance(1s);
  // Let in: its failures are forgotten.
  ASSERT_EQ(checks.quick("mallory", "prometheus", "right"), CredentialChecks::Quick::needs_check);
  checks.submit("mallory", "prometheus", "right", v.done());
  ASSERT_TRUE(v.wait(6));
  EXPECT_TRUE(v.got[5]);
  EXPECT_EQ(checks.quick("mallory", "prometheus", "other"), CredentialChecks::Quick::needs_check);
}

}  // namespace
}  // namespace gpureap::agent
