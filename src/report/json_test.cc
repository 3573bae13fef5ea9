#include "report/json.h"

#include <gtest/gtest.h>

#include "report/free_report.h"
#include "report/status_table.h"

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

TEST(JsonText, PlainJsonDocumentsToo) {
  nlohmann::json doc = {{"error", kBadBytes}};  // `wait --json` builds nlohmann::json
  auto parsed = nlohmann::json::parse(json_text(doc));
  EXPECT_EQ(parsed["error"], kReplaced);
  // Valid UTF-8 passes through unchanged.
  EXPECT_EQ(nlohmann::json::parse(json_text(nlohmann::json{{"k", "caf\xc3\xa9"}}))["k"],
            "caf\xc3\xa9");
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

}  // namespace
}  // namespace gpureap::report
