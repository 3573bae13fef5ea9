// What every --json document promises a jq user (docs/json-schema.md): it starts with
// schema_version, command, time and hostname, in that order, whichever command made it;
// a holder's command line is also its argv; a GPU says how many of its bytes are orphaned;
// durations carry no float noise. On the simulated node, with real holders.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>

#include "harness.h"
#include "util/host_name.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace json_document_test {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr std::uint64_t kGiB = 1ull << 30;

// Whether `x` has at most 3 decimals (milliseconds): what the rounding rule promises.
bool at_most_milliseconds(double x) {
  const double ms = x * 1000.0;
  return std::fabs(ms - std::round(ms)) < 1e-6;
}

TEST(JsonDocument, EveryCommandsDocumentHasTimeAndHostname) {
  SimNode node;
  auto holder = node.hold({"--gpu", "1", "--bytes", "2GiB"});

  auto status = node.gpureap({"--json", "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  expect_document_head(status.out, "status");

  auto dry = node.gpureap({"--json", "free", "--gpu", "1", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  expect_document_head(dry.out, "free");

  auto held = node.gpureap({"--json", "wait", "--gpu", "1", "--timeout", "0"});
  EXPECT_EQ(held.exit_code, 5) << held.err;
  expect_document_head(held.out, "wait");
  // The embedded status document is not stamped again: one time per document.
  EXPECT_FALSE(json::parse(held.out)["status"].contains("time")) << held.out;

  auto freed = node.gpureap({"--json", "free", "--gpu", "1", "--yes", "--grace", "2s"});
  EXPECT_EQ(freed.exit_code, 0) << freed.err;
  expect_document_head(freed.out, "free");

  auto run = node.gpureap({"--json", "run", "--", "true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  expect_document_head(run.err, "run");  // run's document is on stderr

  auto plan = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--gpu-memory", "97887MiB",
                            "--tp", "8", "--mem-fraction", "0.9"});
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  expect_document_head(plan.out, "plan");

  // log prints the audit records as stored, one a line: each has its own time and hostname.
  auto log = node.gpureap({"--json", "log"});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  std::istringstream lines(log.out);
  std::size_t records = 0;
  for (std::string line; std::getline(lines, line); ++records) {
    auto r = json::parse(line, nullptr, false);
    ASSERT_FALSE(r.is_discarded()) << line;
    EXPECT_TRUE(r["time"].is_string()) << line;
    EXPECT_EQ(r["hostname"], host_name()) << line;  // schema 2: as documents name it
  }
  EXPECT_GE(records, 2u) << "the free's signal and verdict: " << log.out;
}

TEST(JsonDocument, HolderHasArgvGpuHasOrphanedBytesAndDurationsAreMilliseconds) {
  SimNode node;
  // An argument with spaces in it: cmdline joins with spaces, argv keeps it whole.
  auto live = node.hold({"--gpu", "0", "--bytes", "3GiB", "--comm", "with space"});
  // A worker whose parent died: orphaned (its parent's pid is gone).
  auto orphan = node.hold({"--gpu", "0", "--bytes", "5GiB", "--children", "1", "--orphan"});

  auto status = node.gpureap({"--json", "status", "--gpu", "0"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  auto gpu = status.json()["gpus"][0];
  EXPECT_EQ(gpu["orphaned_bytes"], 5 * kGiB) << status.out;
  ASSERT_EQ(gpu["holders"].size(), 2u) << status.out;
  for (const auto& h : gpu["holders"]) {
    ASSERT_TRUE(h["argv"].is_array()) << h.dump();
    ASSERT_FALSE(h["argv"].empty()) << h.dump();
    std::string joined;
    for (const auto& a : h["argv"]) joined += (joined.empty() ? "" : " ") + a.get<std::string>();
    EXPECT_EQ(joined, h["cmdline"]) << h.dump();
    EXPECT_TRUE(at_most_milliseconds(h["age_seconds"].get<double>())) << h["age_seconds"];
    // One scan sees no parent die: when it became an orphan is not known.
    EXPECT_TRUE(h["orphaned_since"].is_null()) << h.dump();
    if (h["pid"] == live.holders.at(0).first) {
      std::vector<std::string> argv = h["argv"];
      EXPECT_NE(std::find(argv.begin(), argv.end(), "with space"), argv.end()) << h.dump();
    }
  }

  auto freed = node.gpureap({"--json", "free", "--orphans", "--gpu", "0", "--yes"});
  ASSERT_EQ(freed.exit_code, 0) << freed.err;
  auto f = freed.json();
  EXPECT_TRUE(at_most_milliseconds(f["seconds"].get<double>())) << f["seconds"];
  ASSERT_FALSE(f["actions"].empty()) << freed.out;
  EXPECT_TRUE(at_most_milliseconds(f["actions"][0]["sent_at_seconds"].get<double>()));
  ASSERT_FALSE(f["gpus"].empty()) << freed.out;
  EXPECT_TRUE(at_most_milliseconds(f["gpus"][0]["seconds_to_free"].get<double>()));
  (void)orphan;
}

}  // namespace json_document_test
}  // namespace gpureap::e2e
