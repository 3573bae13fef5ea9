// contrib/grafana/gpureap.json against a real Prometheus (issue 27 part 2): every query
// of every panel and template variable is evaluated by Debian's `prometheus` scraping
// `gpureap watch` on the simulated node, with contrib/prometheus/gpureap-rules.yml
// loaded (the Fleet row reads its recording rules), while the case study is in
// progress: 8 orphaned workers of 20 GiB on GPUs 0..7 (kept from the reaper by
// --keep), after the agent's reaper freed another orphan (so the frees panels have a
// free to show). Grafana's variables are substituted as Grafana would: `$instance`
// by the agent's target, `$gpu` by one GPU ("3") and by the All value (".*"),
// `$__rate_interval` by 2m. Each query must answer a non-empty vector whose samples
// are finite, carry the labels the panel shows (each `{{label}}` of its legend; a
// table's label columns), and belong to the chosen instance and GPU.
// The dashboard's schema is checked offline by the ctest contrib_grafana_dashboard.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "harness.h"
#include "prometheus_harness.h"

namespace gpureap::e2e {
// Named after the file: the debug build batches the e2e files (unity build).
namespace grafana_dashboard_test {

using namespace std::chrono_literals;
using json = nlohmann::json;
constexpr double k20GiB = 20.0 * (1ull << 30);
constexpr const char* kDashboard = GPUREAP_SOURCE_DIR "/contrib/grafana/gpureap.json";
constexpr const char* kRules = GPUREAP_SOURCE_DIR "/contrib/prometheus/gpureap-rules.yml";

// One PromQL query of the dashboard, and the labels each of its series must carry.
struct DashboardQuery {
  std::string where;  // panel title and refId, or the variable
  std::string expr;   // with Grafana's variables still in it
  std::set<std::string> labels;
};

json read_dashboard() {
  std::ifstream in(kDashboard);
  return json::parse(in, nullptr, false);
}

// `{{label}}` in a legend format.
std::set<std::string> legend_labels(const std::string& legend) {
  static const std::regex label(R"(\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\})");
  std::set<std::string> out;
  for (std::sregex_iterator it(legend.begin(), legend.end(), label), end; it != end; ++it)
    out.insert((*it)[1]);
  return out;
}

// The label columns a table panel shows: its organize transformation's columns that
// are neither the time nor a query's value.
std::set<std::string> table_labels(const json& panel) {
  std::set<std::string> out;
  for (const auto& t : panel.value("transformations", json::array())) {
    if (t.value("id", "") != "organize") continue;
    // A named copy: items() of a temporary would outlive it.
    json columns = t.value("options", json::object()).value("indexByName", json::object());
    for (const auto& [column, index] : columns.items())
      if (column != "Time" && !column.starts_with("Value")) out.insert(column);
  }
  return out;
}

std::vector<DashboardQuery> panel_queries(const json& dashboard) {
  std::vector<json> panels;
  for (const auto& p : dashboard["panels"]) {
    panels.push_back(p);
    for (const auto& nested : p.value("panels", json::array())) panels.push_back(nested);
  }
  std::vector<DashboardQuery> out;
  for (const auto& p : panels) {
    if (p.value("type", "") == "row") continue;
    for (const auto& t : p.value("targets", json::array())) {
      DashboardQuery q{p.value("title", "") + " (" + t.value("refId", "") + ")",
                       t.value("expr", ""),
                       t.value("format", "") == "table" ? table_labels(p)
                                                        : legend_labels(t.value("legendFormat", ""))};
      out.push_back(q);
    }
  }
  return out;
}

// A query variable's label_values(SELECTOR, LABEL), as the PromQL whose series carry
// the values Grafana lists: group by (LABEL) (SELECTOR).
std::vector<DashboardQuery> variable_queries(const json& dashboard) {
  static const std::regex label_values(R"(^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$)");
  std::vector<DashboardQuery> out;
  for (const auto& v : dashboard["templating"]["list"]) {
    if (v.value("type", "") != "query") continue;
    std::string query = v.value("query", "");
    std::smatch m;
    if (!std::regex_match(query, m, label_values)) {
      ADD_FAILURE() << "variable " << v.value("name", "") << ": not a label_values query: " << query;
      continue;
    }
    out.push_back({"variable " + v.value("name", ""),
                   "group by (" + m[2].str() + ") (" + m[1].str() + ")",
                   {m[2].str()}});
  }
  return out;
}

// Replaces `$name` and `${name}` as Grafana does; a variable not in `values` is a
// failure (the dashboard uses one this test does not know).
std::string substitute(const std::string& expr, const std::map<std::string, std::string>& values) {
  static const std::regex variable(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*))");
  std::string out;
  auto last = expr.cbegin();
  for (std::sregex_iterator it(expr.begin(), expr.end(), variable), end; it != end; ++it) {
    const auto& m = *it;
    std::string name = m[1].matched ? m[1].str() : m[2].str();
    out.append(last, m[0].first);
    auto v = values.find(name);
    if (v == values.end()) {
      ADD_FAILURE() << "unknown variable $" << name << " in " << expr;
      out += m[0].str();
    } else {
      out += v->second;
    }
    last = m[0].second;
  }
  out.append(last, expr.cend());
  return out;
}

// What is wrong with a query's result, or "" when every sample is as it should be.
std::string judge(const json& result, const DashboardQuery& q,
                  const std::map<std::string, std::string>& values) {
  if (!result.is_array() || result.empty()) return "no series";
  for (const auto& sample : result) {
    const auto& metric = sample["metric"];
    for (const auto& label : q.labels)
      if (!metric.contains(label)) return "a series without the label " + label + ": " + sample.dump();
    for (const char* chosen : {"instance", "gpu"}) {
      const std::string& value = values.at(chosen);
      if (value != ".*" && metric.contains(chosen) && q.expr.find(std::string("$") + chosen) != std::string::npos &&
          metric[chosen] != value)
        return std::string("a series of another ") + chosen + ": " + sample.dump();
    }
    double v = std::stod(sample["value"][1].get<std::string>());
    if (!std::isfinite(v)) return "a value that is not a number: " + sample.dump();
  }
  return "";
}

// The value of the query's only series (NaN when it has not exactly one).
double only_value(const PrometheusServer& prometheus, const std::string& expr) {
  auto reply = prometheus.query(expr);
  if (reply.is_null() || reply["data"]["result"].size() != 1) return std::nan("");
  return std::stod(reply["data"]["result"][0]["value"][1].get<std::string>());
}

// The reaper needs an unattended path's evidence of a leak: an engine worker's title.
constexpr const char* kWorkerTitle = "VLLM::Worker_TP0";

TEST(GrafanaDashboard, EveryQueryAnswersWithItsLabelsDuringTheCaseStudy) {
  json dashboard = read_dashboard();
  ASSERT_FALSE(dashboard.is_discarded()) << kDashboard << " is not JSON";
  auto queries = panel_queries(dashboard);
  auto variables = variable_queries(dashboard);
  ASSERT_GE(queries.size(), 20u) << "the dashboard lost its panels";
  ASSERT_EQ(variables.size(), 2u) << "the instance and gpu variables";

  SimNode node;
  auto agent = start_listening_agent(
      node, {"--tick", "200ms", "--reap-orphans-after", "500ms", "--keep", "keep-me"});
  ASSERT_NE(agent.port, 0);
  PrometheusServer prometheus(agent.listen, {kRules});
  ASSERT_TRUE(prometheus.started());
  json last;
  ASSERT_TRUE(prometheus.wait_for(
      "up", [](const json& r) { return by_label(r, "job") == std::map<std::string, double>{{"gpureap", 1}}; },
      30s, &last))
      << last << "\n"
      << prometheus.log();

  // The agent frees an orphan once Prometheus watches (so rate() sees the counter rise).
  auto doomed =
      node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--comm", kWorkerTitle});
  ASSERT_EQ(doomed.holders.size(), 1u);
  ASSERT_TRUE(prometheus.wait_for(
      "gpureap_frees_total{result=\"freed\"}",
      [](const json& r) { return by_label(r, "result") == std::map<std::string, double>{{"freed", 1}}; },
      30s, &last))
      << last << "\n"
      << agent.child->transcript();
  // The case study: a server on GPU 0 starts 8 workers on GPUs 0..7 and dies; --keep
  // keeps the reaper off them, so they stay orphaned.
  auto hold = node.hold({"--gpu", "0", "--children", "8", "--bytes", "20GiB", "--orphan", "--label",
                         "keep-me"});
  ASSERT_EQ(hold.holders.size(), 8u);
  ASSERT_TRUE(prometheus.wait_for(
      "job:gpureap_gpu_memory_orphaned_bytes:sum",
      [](const json& r) { return by_label(r, "job") == std::map<std::string, double>{{"gpureap", 8 * k20GiB}}; },
      30s, &last))
      << last;

  std::map<std::string, std::string> values = {
      {"instance", agent.listen}, {"__rate_interval", "2m"}};
  std::size_t evaluated = 0;
  for (const char* gpu : {"3", ".*"}) {
    values["gpu"] = gpu;
    for (const auto& q : queries) {
      std::string expr = substitute(q.expr, values);
      auto reply = prometheus.query(expr);
      ASSERT_FALSE(reply.is_null()) << q.where << ": Prometheus refused " << expr;
      EXPECT_EQ(judge(reply["data"]["result"], q, values), "")
          << q.where << " with gpu=~\"" << gpu << "\": " << expr;
      ++evaluated;
    }
  }
  // The variables list what the panels need: this node, and its 8 GPUs.
  values["gpu"] = ".*";
  for (const auto& q : variables) {
    auto reply = prometheus.query(substitute(q.expr, values));
    ASSERT_FALSE(reply.is_null()) << q.where << ": " << q.expr;
    EXPECT_EQ(judge(reply["data"]["result"], q, values), "") << q.where << ": " << q.expr;
    auto listed = by_label(reply["data"]["result"], *q.labels.begin());
    if (q.labels.count("instance")) {
      EXPECT_EQ(listed.size(), 1u) << q.where;
      EXPECT_TRUE(listed.count(agent.listen)) << q.where;
    } else {
      EXPECT_EQ(listed.size(), 8u) << q.where;
    }
  }
  // The figures are the case study's, not merely present: the node's orphaned memory,
  // and the agent's free.
  std::size_t orphaned_stats = 0;
  for (const auto& q : queries) {
    if (q.where != "Orphaned memory (A)" || !q.expr.starts_with("sum(")) continue;
    EXPECT_EQ(only_value(prometheus, substitute(q.expr, values)), 8 * k20GiB) << q.expr;
    ++orphaned_stats;
  }
  EXPECT_EQ(orphaned_stats, 1u) << "the node's \"Orphaned memory\" stat";
  EXPECT_GT(only_value(prometheus, substitute(
                "sum(increase(gpureap_frees_total{instance=\"$instance\", result=\"freed\"}[$__rate_interval]))",
                values)),
            0);
  std::cout << "[ measure ] " << evaluated << " panel queries and " << variables.size()
            << " variable queries evaluated\n";
  EXPECT_EQ(agent.child->terminate(), 0) << agent.child->transcript();
}

}  // namespace grafana_dashboard_test
}  // namespace gpureap::e2e
