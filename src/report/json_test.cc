#include "report/json.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <optional>

#include "gpu/test_devices.h"
#include "inventory/test_views.h"
#include "report/free_report.h"
#include "report/status_table.h"
#include "report/wait_report.h"
#include "util/host_name.h"
#include "util/time_text.h"

namespace gpureap::report {
namespace {

// defects-wave1 D4: one holder with a byte that is not UTF-8 in its command line
// made every --json output throw (type_error 316) instead of printing.
const std::string kBadBytes = "caf\xe9-\xff\xfe";
const std::string kReplaced = "caf\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd";  // U+FFFD each

proc::Holder odd_holder() {
  proc::Holder h;
  h.id = {4242, 1234};
  h.comm = "x" + kBadBytes;
  h.cmdline = "python3 " + kBadBytes;
  h.user = "u\xff";
  h.cgroup = "/odd\xfe";
  return h;
}

TEST(JsonText, StatusWithNonUtf8TextIsValidUtf8) {
  inventory::Inventory inv;
  inv.other_holders.push_back(odd_holder());
  std::string text;
  ASSERT_NO_THROW(text = json_text(status_json(inv)));
  auto parsed = nlohmann::json::parse(text);  // throws on invalid UTF-8
  const auto& h = parsed["other_holders"][0];
  EXPECT_EQ(h["cmdline"], "python3 " + kReplaced);
  EXPECT_EQ(h["comm"], "x" + kReplaced);
  EXPECT_EQ(h["user"], "u\xef\xbf\xbd");
  EXPECT_EQ(text.back(), '\n');
}

TEST(JsonText, FreeReportWithNonUtf8TextIsValidUtf8) {
  reclaim::Plan plan;
  plan.targets.push_back({{4242, 1234}, kBadBytes, "python3 " + kBadBytes, "root", gpu::devs({0}), 1, "why"});
  reclaim::ReclaimReport report;
  reclaim::Action a;
  a.id = {4242, 1234};
  a.comm = kBadBytes;
  a.signal = reclaim::Signal::sigterm;
  a.outcome = reclaim::Outcome::exited;
  report.actions.push_back(a);
  std::string text;
  ASSERT_NO_THROW(text = json_text(free_json(plan, report, false)));
  auto parsed = nlohmann::json::parse(text);
  EXPECT_EQ(parsed["plan"]["targets"][0]["comm"], kReplaced);
  EXPECT_EQ(parsed["actions"][0]["comm"], kReplaced);
}

TEST(JsonText, ValidUtf8PassesThroughUnchanged) {
  EXPECT_EQ(nlohmann::json::parse(json_text(nlohmann::ordered_json{{"k", "caf\xc3\xa9"}}))["k"],
            "caf\xc3\xa9");
}

// The keys of an object, in the order the document has them.
std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  return keys;
}

TEST(DocumentStamp, TimeAndHostnameFollowSchemaVersionAndCommand) {
  nlohmann::ordered_json doc = {{"schema_version", 1}, {"command", "wait"}, {"free", true},
                                {"gpus", nlohmann::ordered_json::array()}};
  auto j = stamped(doc, {"2025-06-01T14:03:07.412907+02:00", "gpu01"});
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"schema_version", "command", "time", "hostname",
                                                  "free", "gpus"}));
  EXPECT_EQ(j["time"], "2025-06-01T14:03:07.412907+02:00");
  EXPECT_EQ(j["hostname"], "gpu01");
  EXPECT_TRUE(stamped(doc, {"t", ""})["hostname"].is_null()) << "unknown is null, not \"\"";
}

// W4_J (issue 40): an event says when and where as a document does: "time" RFC 3339 (a
// string, as every document's), its epoch as "time_unix", and "hostname".
TEST(EventHead, TimeIsRfc3339AsDocumentsAndTheEpochIsTimeUnix) {
  const char* old_tz = std::getenv("TZ");
  const std::optional<std::string> saved = old_tz ? std::optional<std::string>(old_tz) : std::nullopt;
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  const auto head = event_head("started", "info", 1712345678.25);
  EXPECT_EQ(keys_of(head), (std::vector<std::string>{"schema_version", "event", "level", "time",
                                                     "time_unix", "hostname"}));
  EXPECT_EQ(head["schema_version"], kSchemaVersion);
  EXPECT_EQ(kSchemaVersion, 2);
  EXPECT_EQ(head["time"], "2024-04-05T19:34:38.250000+00:00");
  EXPECT_TRUE(head["time"].is_string());
  EXPECT_EQ(head["time_unix"], 1712345678.25);
  EXPECT_EQ(head["hostname"], host_name());
  // The same instant both ways.
  const auto back = parse_time(head["time"].get<std::string>());
  ASSERT_TRUE(back);
  EXPECT_NEAR(std::chrono::duration<double>(back->time_since_epoch()).count(), 1712345678.25, 1e-6);
  if (saved)
    ::setenv("TZ", saved->c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

TEST(DocumentStamp, NowIsThisHostAndAnRfc3339TimeWithTheDate) {
  auto stamp = DocumentStamp::now();
  EXPECT_EQ(stamp.hostname, host_name());
  EXPECT_FALSE(stamp.hostname.empty());
  ASSERT_GE(stamp.time.size(), 25u) << stamp.time;
  EXPECT_EQ(stamp.time[4], '-');
  EXPECT_EQ(stamp.time[10], 'T');
  EXPECT_TRUE(parse_time(stamp.time).has_value()) << stamp.time;
  // What --json prints: stamped, the stamp parsed back.
  auto text = document_text({{"schema_version", 1}, {"command", "status"}});
  auto parsed = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(keys_of(parsed),
            (std::vector<std::string>{"schema_version", "command", "time", "hostname"}));
  EXPECT_TRUE(parse_time(parsed["time"].get<std::string>()).has_value()) << text;
}

TEST(Seconds, RoundedToTheMillisecondWithoutFloatNoise) {
  // The review saw "age_seconds": 0.01999999999998181 (an agent's age, a subtraction).
  EXPECT_EQ(nlohmann::ordered_json(seconds_value(0.01999999999998181)).dump(), "0.02");
  EXPECT_EQ(nlohmann::ordered_json(seconds_value(723.4004999)).dump(), "723.4");
  EXPECT_EQ(nlohmann::ordered_json(seconds_value(1712345678.0512345)).dump(), "1712345678.051");
  EXPECT_EQ(nlohmann::ordered_json(seconds_value(0.0004)).dump(), "0.0");
  EXPECT_EQ(seconds_json(std::optional<double>(0.41000000000000003)).dump(), "0.41");
  EXPECT_TRUE(seconds_json(std::nullopt).is_null());
}

TEST(HolderJson, ArgvKeepsEachArgumentWhole) {
  proc::Holder h;
  h.cmdline = "python3 -m sglang.launch_server --model-path /models/Qwen 72B";
  h.argv = {"python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen 72B"};
  h.age_seconds = 0.01999999999998181;
  auto j = holder_json(h, std::nullopt);
  EXPECT_EQ(j["argv"], nlohmann::ordered_json(h.argv));
  EXPECT_EQ(j["cmdline"], h.cmdline);
  EXPECT_EQ(j["age_seconds"].dump(), "0.02");
  // argv comes right after cmdline, as docs/json-schema.md lists it.
  auto keys = keys_of(j);
  auto at = std::find(keys.begin(), keys.end(), "cmdline");
  ASSERT_NE(at, keys.end());
  EXPECT_EQ(*(at + 1), "argv");
  // A zombie or kernel thread: no arguments, an empty array (not null).
  EXPECT_EQ(holder_json(proc::Holder{}, std::nullopt)["argv"], nlohmann::ordered_json::array());
}

TEST(HolderJson, OrphanedSinceIsTheWitnessedDeathOrNull) {
  proc::Holder h;
  h.orphaned = true;
  h.orphan_evidence = proc::OrphanEvidence::witnessed;
  h.orphaned_since = 1712345678.0512345;
  EXPECT_EQ(holder_json(h, std::nullopt)["orphaned_since"].dump(), "1712345678.051");
  h.orphan_evidence = proc::OrphanEvidence::siblings;
  h.orphaned_since.reset();
  EXPECT_TRUE(holder_json(h, std::nullopt)["orphaned_since"].is_null());
  // Not orphaned: null whatever a stale field says.
  h.orphaned = false;
  h.orphaned_since = 5.0;
  EXPECT_TRUE(holder_json(h, std::nullopt)["orphaned_since"].is_null());
}

TEST(GpuJson, OrphanedBytesAreTheOrphansThatUseTheGpu) {
  namespace tv = inventory::testing;
  using tv::Lineage;
  auto view = tv::idle_gpu(0);
  tv::add_holder(view, 100, 5ull << 30, Lineage::orphaned);
  tv::add_holder(view, 101, 2ull << 30, Lineage::orphaned);
  tv::add_holder(view, 102, 3ull << 30, Lineage::live);
  tv::add_holder(view, 103, 4ull << 30, Lineage::detached);
  tv::add_holder(view, 104, 0, Lineage::orphaned, /*uses_gpu=*/false);  // node open only
  auto j = gpu_json(view);
  EXPECT_EQ(j["orphaned_bytes"], 7ull << 30);
  EXPECT_EQ(j["attributed_bytes"], 14ull << 30);
  EXPECT_EQ(tv::idle_gpu(1).orphaned_bytes(), 0u);
  auto keys = keys_of(j);
  auto at = std::find(keys.begin(), keys.end(), "attributed_bytes");
  ASSERT_NE(at, keys.end());
  EXPECT_EQ(*(at + 1), "orphaned_bytes");
}

// Issue 40: what top shows of a GPU's sensors, a script reads too: null when unknown.
TEST(GpuJson, SensorsAreTheirReadingsOrNull) {
  auto view = inventory::testing::idle_gpu(0);
  auto j = gpu_json(view);
  EXPECT_TRUE(j["sensors"]["temperature_celsius"].is_null()) << j["sensors"].dump();
  EXPECT_TRUE(j["sensors"]["power_watts"].is_null()) << j["sensors"].dump();
  view.info.temperature_c = 67;
  view.info.power_mw = 699'400;
  j = gpu_json(view);
  EXPECT_EQ(j["sensors"]["temperature_celsius"], 67);
  EXPECT_DOUBLE_EQ(j["sensors"]["power_watts"].get<double>(), 699.4);
  auto keys = keys_of(j);
  auto at = std::find(keys.begin(), keys.end(), "utilization");
  ASSERT_NE(at, keys.end());
  EXPECT_EQ(*(at + 1), "sensors");
}

TEST(WaitJson, KeysInTheOrderOfTheSchemaNotSorted) {
  supervise::FreeWaitResult r;
  r.status = supervise::FreeWaitResult::Status::timed_out;
  r.seconds = 60.00000000001;
  reclaim::GpuRelease g;
  g.gpu = gpu::dev(3);
  g.uuid = "GPU-1";
  g.used = 98784247808;
  r.gpus.push_back(g);
  r.message = "why";
  auto j = wait_json(r);
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"schema_version", "command", "free",
                                                  "timed_out", "seconds", "gpus", "warnings",
                                                  "error"}));
  EXPECT_EQ(keys_of(j["gpus"][0]),
            (std::vector<std::string>{"index", "uuid", "used_bytes", "baseline_bytes",
                                      "baseline_recorded", "threshold_bytes", "siblings_bytes",
                                      "free", "freed_after_seconds", "ghost"}));
  EXPECT_EQ(j["seconds"].dump(), "60.0");
}

// Instant status (issue 11 §4): the answer says who took the inventory.
TEST(StatusSource, JsonAndTableNameTheAgentThatAnswered) {
  inventory::Inventory scanned;
  auto j = status_json(scanned);
  EXPECT_EQ(j["source"], "scan");
  EXPECT_TRUE(j["agent_pid"].is_null());
  EXPECT_EQ(status_table(scanned, Style{}, reclaim::Plan{}).find("agent"), std::string::npos);

  inventory::Inventory answered;
  answered.source = "agent";
  answered.agent_pid = 3121;
  j = status_json(answered);
  EXPECT_EQ(j["source"], "agent");
  EXPECT_EQ(j["agent_pid"], 3121);
  EXPECT_NE(status_table(answered, Style{}, reclaim::Plan{}).find("answered by the gpureap agent (pid 3121)"),
            std::string::npos);
}

// A degraded agent says so in its answer (issue 38): null when it is not.
TEST(StatusSource, ADegradedAgentSaysWhyInJsonAndTable) {
  inventory::Inventory answered;
  answered.source = "agent";
  answered.agent_pid = 3121;
  auto j = status_json(answered);
  ASSERT_TRUE(j.contains("degraded"));
  EXPECT_TRUE(j["degraded"].is_null());
  answered.agent_degraded = {"NVML cannot read any GPU: only the /proc view is live"};
  j = status_json(answered);
  EXPECT_EQ(j["degraded"].dump(),
            R"({"state":"degraded","reasons":["NVML cannot read any GPU: only the /proc view is live"]})");
  EXPECT_NE(status_table(answered, Style{}, reclaim::Plan{})
                .find("! the agent is degraded: NVML cannot read any GPU"),
            std::string::npos);
  // A scan is no agent: nothing to say, whatever the field holds.
  answered.source = "scan";
  EXPECT_TRUE(status_json(answered)["degraded"].is_null());
}

}  // namespace
}  // namespace gpureap::report
