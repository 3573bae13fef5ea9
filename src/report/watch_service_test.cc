#include "report/watch_service.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "util/host_name.h"

namespace gpureap::report {
namespace watch_service_test {

// The "hostname" an event carries: this host's, as JSON.
std::string host_json() {
  const std::string h = host_name();
  return h.empty() ? "null" : nlohmann::json(h).dump();
}

constexpr double kServiceTime = 1712345678.25;  // 2024-04-05T19:34:38.25 UTC

class AgentLines : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
};

TEST_F(AgentLines, StartedStatesThePolicy) {
  WatchStart s;
  s.pid = 4100;
  s.listen = "127.0.0.1:9849";
  s.socket = "/run/gpureap/agent.sock";
  s.gpus = 8;
  EXPECT_EQ(watch_started_line(s, kServiceTime, Style{}),
            "2024-04-05T19:34:38.250000+00:00 gpureap watch started (pid 4100): metrics on "
            "http://127.0.0.1:9849/metrics, status socket /run/gpureap/agent.sock, watching 8 "
            "GPUs; reaping off; no textfile; no options file\n");
  s.reap_orphans_after = std::chrono::minutes(15);
  s.keep = "jupyter";
  s.textfile = "/var/lib/node";
  s.config = "/etc/gpureap/watch.conf";
  s.listen.reset();
  s.gpus = 1;
  EXPECT_EQ(watch_started_line(s, kServiceTime, Style{}),
            "2024-04-05T19:34:38.250000+00:00 gpureap watch started (pid 4100): no metrics "
            "listener, status socket /run/gpureap/agent.sock, watching 1 GPU; reaping orphans "
            "after 15m except 'jupyter'; textfile /var/lib/node; options from "
            "/etc/gpureap/watch.conf\n");
  EXPECT_EQ(watch_started_json(s, kServiceTime),
            R"j({"schema_version":2,"event":"started","level":"info","time":"2024-04-05T19:34:38.250000+00:00","time_unix":1712345678.25,"hostname":)j" + host_json() + R"j(,)j"
            R"j("pid":4100,"listen":null,"tls":false,"basic_auth_users":0,)j"
            R"j("socket":"/run/gpureap/agent.sock","gpu_count":1,)j"
            R"j("textfile":"/var/lib/node","reap_orphans_after":900.0,"reap_dry_run":false,)j"
            R"j("keep":"jupyter","config":"/etc/gpureap/watch.conf","overridden":[]})j"
            "\n");
  // W4-10: HTTPS said as such, and the users asked for.
  s.listen = "10.0.0.5:9847";
  s.tls = true;
  s.users = 2;
  EXPECT_NE(watch_started_line(s, kServiceTime, Style{})
                .find("metrics on https://10.0.0.5:9847/metrics (basic auth: 2 users), status"),
            std::string::npos);
  EXPECT_NE(watch_started_json(s, kServiceTime).find(R"("tls":true,"basic_auth_users":2,)"),
            std::string::npos);
  s.tls = false;
  s.users = 1;
  EXPECT_NE(watch_started_line(s, kServiceTime, Style{})
                .find("metrics on http://10.0.0.5:9847/metrics (basic auth: 1 user), status"),
            std::string::npos);
  // A key of the file the command line overrides is named, never silent.
  s.overridden = {"listen"};
  EXPECT_NE(watch_started_line(s, kServiceTime, Style{})
                .find("options from /etc/gpureap/watch.conf; the command line overrides listen "
                      "in /etc/gpureap/watch.conf\n"),
            std::string::npos);
  EXPECT_NE(watch_started_json(s, kServiceTime).find(R"("overridden":["listen"])"),
            std::string::npos);
}

TEST_F(AgentLines, HealthIsOkOrDegradedWithReasons) {
  AgentHealth h;
  h.pid = 42;
  EXPECT_EQ(agent_health_json(h), R"({"status":"ok","pid":42,"reasons":[],"notes":[]})" "\n");
  h.degraded = {"out of descriptors"};
  EXPECT_EQ(agent_health_json(h),
            R"({"status":"degraded","pid":42,"reasons":["out of descriptors"],"notes":[]})" "\n");
}

TEST_F(AgentLines, ReloadSaysWhatChanged) {
  std::vector<OptionChange> changes{{"reap-orphans-after", "", "15m", true, "reaping orphans"},
                                    {"keep", "a", "", true, "never reaping holders matching"},
                                    {"listen", "127.0.0.1:9847", "0.0.0.0:9847", false, ""}};
  EXPECT_EQ(watch_reloaded_line(kServiceTime, "/etc/w.conf", changes, Style{}),
            "2024-04-05T19:34:38.250000+00:00 gpureap watch reloaded /etc/w.conf: reaping "
            "orphans after 15m (was off); no holder kept from reaping by --keep (was 'a'); listen "
            "0.0.0.0:9847 (was 127.0.0.1:9847) at the next start: a reload does not change it\n");
  EXPECT_EQ(watch_reloaded_line(kServiceTime, "/etc/w.conf", {}, Style{}),
            "2024-04-05T19:34:38.250000+00:00 gpureap watch reloaded /etc/w.conf: nothing "
            "changed\n");
  auto j = nlohmann::json::parse(watch_reloaded_json(kServiceTime, "/etc/w.conf", changes));
  EXPECT_EQ(j["level"], "notice");
  EXPECT_EQ(j["changes"][0]["key"], "reap-orphans-after");
  EXPECT_TRUE(j["changes"][0]["before"].is_null());
  EXPECT_EQ(j["changes"][0]["after"], "15m");
  EXPECT_EQ(j["changes"][2]["applies"], "next start");
}

TEST_F(AgentLines, NvmlAndStopped) {
  EXPECT_EQ(watch_source_line(kServiceTime, {false, "pid 7", 0, "reset GPU 0: succeeded"}, Style{}),
            "2024-04-05T19:34:38.250000+00:00 NVML taken up again (pid 7): reset GPU 0: "
            "succeeded\n");
  EXPECT_NE(watch_source_line(kServiceTime, {true, "SIGUSR1", kServiceTime + 120, ""}, Style{})
                .find("NVML let go (asked by SIGUSR1)"),
            std::string::npos);
  auto j = nlohmann::json::parse(watch_source_json(kServiceTime, {true, "SIGUSR1", kServiceTime + 120, ""}));
  EXPECT_EQ(j["event"], "nvml_yielded");
  EXPECT_EQ(j["until"], kServiceTime + 120);
  EXPECT_EQ(watch_stopped_line(kServiceTime, 4100, "SIGTERM", Style{}),
            "2024-04-05T19:34:38.250000+00:00 gpureap watch stopped (pid 4100): SIGTERM\n");
  EXPECT_EQ(nlohmann::json::parse(watch_stopped_json(kServiceTime, 4100, "SIGTERM"))["level"], "info");
}

TEST_F(AgentLines, EveryEventHasALevel) {
  using inventory::EventKind;
  EXPECT_EQ(level_name(event_level(EventKind::orphaned_memory)), std::string("warning"));
  EXPECT_EQ(level_name(event_level(EventKind::source_down)), std::string("error"));
  EXPECT_EQ(level_name(event_level(EventKind::reaped)), std::string("notice"));
  EXPECT_EQ(level_name(event_level(EventKind::memory_freed)), std::string("info"));
  EXPECT_EQ(syslog_priority(Level::warning), 4);
}

TEST_F(AgentLines, StatusForSystemd) {
  inventory::Inventory inv;
  inv.gpus.resize(2);
  EXPECT_EQ(watch_service_status(inv, nullptr, false), "2 GPUs watched; no orphaned holder; no event yet");
  inventory::Event e;
  e.kind = inventory::EventKind::source_up;
  e.time = kServiceTime;
  EXPECT_EQ(watch_service_status(inv, &e, true),
            "NVML let go for a GPU reset; 2 GPUs watched; no orphaned holder; last event: nvml_up "
            "at 2024-04-05T19:34:38.250000+00:00");
}

}  // namespace watch_service_test
}  // namespace gpureap::report
