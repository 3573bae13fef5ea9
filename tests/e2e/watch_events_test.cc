// `gpureap --json watch` on the simulated node: one test per shape of the
// simulator (orphans, a zombie leader, stuck memory, a slow release, NVML failing
// and hanging, a free), each reading the agent's event lines as they come and
// checking what an operator would rely on: the event, its GPU, its holders, the
// parent whose death orphaned them, and that nothing false is announced. Every
// line must be valid JSON with every field; the agent must stop on SIGTERM with 0.

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <stdexcept>

#include "harness.h"
#include "watch_child.h"
#include "util/units.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace watch_events_test {

using namespace std::chrono_literals;
using nlohmann::json;
// Generous bounds for a loaded CI machine; the waits end at the event, not the bound.
constexpr auto kStartBound = 30s;
constexpr auto kEventBound = 20s;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Every key of an event line (docs/json-schema.md, "gpureap watch events").
void expect_event_fields(const json& j) {
  SCOPED_TRACE(j.dump());
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.value("schema_version", 0), 2);
  ASSERT_TRUE(j.contains("event") && j["event"].is_string());
  EXPECT_TRUE(j.contains("level") && j["level"].is_string());
  // W4_J: one time form with documents (RFC 3339 `time`), the epoch as `time_unix`.
  EXPECT_TRUE(j.contains("time") && j["time"].is_string() &&
              j["time"].get<std::string>().size() == 32);
  EXPECT_TRUE(j.contains("time_unix") && j["time_unix"].is_number());
  EXPECT_TRUE(j.contains("hostname"));
  EXPECT_TRUE(j.contains("gpus") && j["gpus"].is_array());
  EXPECT_TRUE(j.contains("gpu") && (j["gpu"].is_number_unsigned() || j["gpu"].is_null()));
  EXPECT_TRUE(j.contains("uuid") && (j["uuid"].is_string() || j["uuid"].is_null()));
  EXPECT_TRUE(j.contains("bytes") && (j["bytes"].is_number_unsigned() || j["bytes"].is_null()));
  ASSERT_TRUE(j.contains("holders") && j["holders"].is_array());
  for (const auto& h : j["holders"]) {
    EXPECT_TRUE(h["pid"].is_number_integer());
    EXPECT_TRUE(h["start_time"].is_number_unsigned());
    EXPECT_TRUE(h["comm"].is_string());
    EXPECT_TRUE(h["user"].is_string());
    EXPECT_TRUE(h.contains("gpu_bytes"));
  }
  if (j.contains("parent")) {
    EXPECT_TRUE(j["parent"]["pid"].is_number_integer());
    EXPECT_TRUE(j["parent"]["comm"].is_string());
    EXPECT_TRUE(j["parent"]["cmdline"].is_string());
    EXPECT_TRUE(j["parent"]["died_at"].is_number());
  }
  EXPECT_TRUE(j.contains("class") && (j["class"].is_string() || j["class"].is_null()));
  EXPECT_TRUE(j.contains("detail") && j["detail"].is_string());
}

// An event of `kind` about `gpu`: its own GPU, or one of its instance's GPUs (a server's
// crash is one event over all its GPUs).
auto is_event(const std::string& kind, std::optional<unsigned> gpu = std::nullopt) {
  return [kind, gpu](const json& j) {
    if (j.value("event", "") != kind) return false;
    if (!gpu || (j["gpu"].is_number() && j["gpu"] == *gpu)) return true;
    if (!j.contains("gpus") || !j["gpus"].is_array()) return false;
    return std::find(j["gpus"].begin(), j["gpus"].end(), json(*gpu)) != j["gpus"].end();
  };
}

// A SIGKILL through a pidfd, only if `pid` still has the start time we saw.
void kill_holder(pid_t pid, std::uint64_t start_time) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(fd, 0) << "pid " << pid;
  ASSERT_EQ(start_time_of(pid), start_time) << "pid " << pid << " is not the process we started";
  EXPECT_EQ(::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0), 0);
  ::close(fd);
}

class WatchEvents : public ::testing::Test {
 protected:
  WatchEvents() : node_({"--gpus", "2", "--memory", "96GiB"}) {}

  // Until the lead's `gpureap watch` lands on main these tests compile and skip.
  void SetUp() override {
    auto help = node_.gpureap({"--help"}, 30s);
    if (help.out.find("\n  watch ") == std::string::npos)
      GTEST_SKIP() << "`gpureap watch` is not built yet";
  }

  // Starts the agent and reads its "started" line. Like wait_for(), it ends the
  // test (an exception, after the failure is recorded) when that does not come:
  // nothing after it could pass, and the fixture still kills what was started.
  void start(bool json_lines = true, const std::vector<std::string>& global = {}) {
    std::vector<std::string> args = {"watch", "--no-listen", "--tick", "200ms"};
    args.insert(args.begin(), global.begin(), global.end());
    if (json_lines) args.insert(args.begin(), "--json");
    agent_.emplace(WatchChild::gpureap(node_, args));
    auto first = agent_->next_line(kStartBound);
    if (!first) {
      ADD_FAILURE() << "no started line\n" << agent_->transcript();
      throw std::runtime_error("the agent did not start");
    }
    if (!json_lines) {
      EXPECT_NE(first->text.find("gpureap watch started"), std::string::npos) << first->text;
      return;
    }
    auto j = json::parse(first->text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << first->text;
    EXPECT_EQ(j.value("schema_version", 0), 2);
    EXPECT_EQ(j.value("event", ""), "started");
    EXPECT_TRUE(j["time"].is_string());
    EXPECT_TRUE(j["time_unix"].is_number());
    EXPECT_FALSE(j.contains("gpus")) << "a count is gpu_count: gpus is always a list";
    EXPECT_EQ(j.value("pid", 0), agent_->pid());
    EXPECT_TRUE(j["listen"].is_null()) << "--no-listen";
    EXPECT_TRUE(j.value("socket", "").ends_with("/agent.sock")) << j.dump();
    EXPECT_EQ(j.value("gpu_count", 0), 2);
  }

  json wait_for(const std::string& kind, std::optional<unsigned> gpu = std::nullopt,
                WatchChild::Line* line = nullptr) {
    auto j = agent_->wait_for_json(is_event(kind, gpu), kEventBound, line);
    if (!j) {
      ADD_FAILURE() << "no " << kind << (gpu ? " on GPU " + std::to_string(*gpu) : "") << "\n"
                    << agent_->transcript();
      throw std::runtime_error("no " + kind + " event");
    }
    expect_event_fields(*j);
    return *j;
  }

  // Waits until the agent's own inventory (status answered from it) shows
  // `pids` as holders: the agent has seen them alive, their parents watched.
  void wait_until_agent_sees(const std::vector<pid_t>& pids) {
    bool seen = SimNode::eventually(
        [&] {
          auto r = node_.gpureap({"status", "--json"}, 10s);
          auto j = json::parse(r.out, nullptr, false);
          if (!j.is_object() || j.value("source", "") != "agent") return false;
          std::size_t found = 0;
          for (const auto& g : j["gpus"])
            for (const auto& h : g["holders"])
              if (std::find(pids.begin(), pids.end(), h.value("pid", 0)) != pids.end()) ++found;
          return found >= pids.size();
        },
        kEventBound);
    ASSERT_TRUE(seen) << "the agent's status never showed the holders\n" << agent_->transcript();
  }

  // SIGTERM, exit 0; then every line it printed is valid JSON with every field.
  void stop_and_check_lines() {
    ASSERT_TRUE(agent_);
    EXPECT_EQ(agent_->terminate(), 0) << agent_->transcript();
    ASSERT_FALSE(agent_->lines().empty());
    for (std::size_t i = 1; i < agent_->lines().size(); ++i) {
      auto j = json::parse(agent_->lines()[i].text, nullptr, false);
      EXPECT_TRUE(j.is_object()) << "not JSON: " << agent_->lines()[i].text;
      // The agent's own lines (docs/json-schema.md): the stop line ends the run.
      if (j.is_object() && j.value("event", "") == "stopped") {
        EXPECT_EQ(i, agent_->lines().size() - 1) << "the stop line is the last";
        EXPECT_EQ(j.value("level", ""), "info");
        continue;
      }
      if (j.is_object()) expect_event_fields(j);
    }
  }

  std::size_t count(const std::string& kind, std::optional<unsigned> gpu = std::nullopt) const {
    std::size_t n = 0;
    for (const auto& l : agent_->lines()) {
      auto j = json::parse(l.text, nullptr, false);
      if (j.is_object() && is_event(kind, gpu)(j)) ++n;
    }
    return n;
  }

  SimNode node_;
  std::optional<WatchChild> agent_;
};

// The event names `pid` among its holders, with `bytes` on its GPU.
void expect_holder_among(const json& event, pid_t pid, std::uint64_t bytes) {
  json h;
  for (const auto& x : event["holders"])
    if (x["pid"] == pid) h = x;
  ASSERT_TRUE(h.is_object()) << "pid " << pid << " not in " << event.dump();
  EXPECT_EQ(h["start_time"], start_time_of(pid));
  EXPECT_EQ(h["gpu_bytes"], bytes);
  EXPECT_FALSE(h["comm"].get<std::string>().empty());
}

void expect_names_holder(const json& event, pid_t pid, std::uint64_t bytes) {
  ASSERT_EQ(event["holders"].size(), 1u) << event.dump();
  const auto& h = event["holders"][0];
  EXPECT_EQ(h["pid"], pid);
  EXPECT_EQ(h["start_time"], start_time_of(pid));
  EXPECT_EQ(h["gpu_bytes"], bytes);
  EXPECT_FALSE(h["comm"].get<std::string>().empty());
  EXPECT_FALSE(h["user"].get<std::string>().empty());
  EXPECT_EQ(event["bytes"], bytes);
}

TEST_F(WatchEvents, AServersOrphanedWorkersAreOneEventNamingTheInstance) {
  start();
  auto held = node_.hold({"--gpu", "0", "--children", "2", "--bytes", "8GiB", "--orphan", "--title",
                          "sglang::scheduler_TP{k}"});
  ASSERT_EQ(held.holders.size(), 2u);
  json e = wait_for("orphaned_memory", 0u);
  EXPECT_EQ(e["gpus"], json::array({0, 1})) << e.dump();
  EXPECT_TRUE(e["gpu"].is_null()) << "one event over both GPUs: " << e.dump();
  ASSERT_EQ(e["holders"].size(), 2u) << e.dump();
  for (const auto& [pid, gpu] : held.holders) expect_holder_among(e, pid, 8 * kGiB);
  EXPECT_EQ(e["bytes"], 16 * kGiB);
  ASSERT_TRUE(e["instance"].is_object()) << e.dump();
  EXPECT_EQ(e["instance"]["key"], std::to_string(held.leader));
  EXPECT_EQ(e["instance"]["engine"], "sglang");
  EXPECT_EQ(e["instance"]["members"].size(), 2u);
  EXPECT_EQ(e["instance"]["members"][0]["ranks"], "TP0");
  EXPECT_TRUE(e["class"].is_null());
  stop_and_check_lines();
  EXPECT_EQ(count("orphaned_memory"), 1u) << "one server, one event\n" << agent_->transcript();
}

// The server dies the moment its last worker takes the GPU, which the agent's ticks
// (200 ms) have not seen yet: the first worker holds for a second before the second
// does. The announcement at the death names both, not only the one the last tick knew
// (it did so under load in CI: a tick between the two workers' first reads).
TEST_F(WatchEvents, AWorkerThatTookTheGpuSinceTheLastTickIsInTheAnnouncement) {
  start();
  auto held = node_.hold({"--gpu", "0", "--children", "2", "--bytes", "8GiB", "--orphan",
                          "--stagger", "1s", "--title", "sglang::scheduler_TP{k}"});
  ASSERT_EQ(held.holders.size(), 2u);
  json e = wait_for("orphaned_memory", 0u);
  EXPECT_EQ(e["gpus"], json::array({0, 1})) << e.dump();
  ASSERT_EQ(e["holders"].size(), 2u) << e.dump();
  for (const auto& [pid, gpu] : held.holders) expect_holder_among(e, pid, 8 * kGiB);
  EXPECT_EQ(e["bytes"], 16 * kGiB);
  stop_and_check_lines();
  EXPECT_EQ(count("orphaned_memory"), 1u) << "one server, one event\n" << agent_->transcript();
}

TEST_F(WatchEvents, AServerKilledUnderTheAgentIsNamedAsTheParent) {
  start();
  // In the foreground, without --orphan: the hold process is the server, our
  // child; we kill it ourselves, after the agent has seen it alive.
  auto held = node_.hold({"--gpu", "0", "--children", "2", "--bytes", "8GiB", "--title",
                          "sglang::scheduler_TP{k}", "--server-title",
                          "python3 -m sglang.launch_server --model-path org/Model-A --port 30000"},
                         true);
  ASSERT_EQ(held.holders.size(), 2u);
  wait_until_agent_sees({held.holders[0].first, held.holders[1].first});
  const std::uint64_t leader_start = start_time_of(held.leader);
  const auto killed_at = std::chrono::steady_clock::now();
  const double killed_at_wall = wall_now();
  kill_holder(held.leader, leader_start);

  WatchChild::Line line;
  json e = wait_for("orphaned_memory", held.holders[0].second, &line);
  // One event for the server, whose launcher the agent saw alive: model and port kept.
  ASSERT_TRUE(e["instance"].is_object()) << e.dump();
  EXPECT_EQ(e["instance"]["engine"], "sglang") << e.dump();
  EXPECT_EQ(e["instance"]["model"], "org/Model-A") << e.dump();
  EXPECT_EQ(e["instance"]["port"], 30000) << e.dump();
  EXPECT_EQ(e["gpus"], json::array({0, 1})) << e.dump();
  for (const auto& [pid, gpu] : held.holders) {
    expect_holder_among(e, pid, 8 * kGiB);
    ASSERT_TRUE(e.contains("parent")) << e.dump();
    EXPECT_EQ(e["parent"]["pid"], held.leader);
    EXPECT_FALSE(e["parent"]["comm"].get<std::string>().empty());
    const double died_at = e["parent"]["died_at"];
    EXPECT_GE(died_at, killed_at_wall - 0.05) << "it died after we killed it";
    EXPECT_GE(e["time_unix"].get<double>(), died_at);
    const double latency = std::chrono::duration<double>(line.read_at - killed_at).count();
    std::printf(
        "[ latency ] GPU %u: SIGKILL of the server -> orphaned_memory line read: %.3f s "
        "(event time - kill: %.3f s, parent died_at - kill: %.3f s)\n",
        gpu, latency, e["time_unix"].get<double>() - killed_at_wall, died_at - killed_at_wall);
    RecordProperty("latency_gpu" + std::to_string(gpu) + "_ms", static_cast<int>(latency * 1000));
  }
  // status, answered by the agent, still names the crashed server by what its launcher
  // ran: the launcher is gone from /proc, but the agent saw it alive.
  auto s = node_.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json doc = s.json();
  EXPECT_EQ(doc["source"], "agent");
  json in;
  for (const auto& x : doc["instances"])
    if (x["key"] == std::to_string(held.leader)) in = x;
  ASSERT_TRUE(in.is_object()) << doc["instances"].dump();
  EXPECT_EQ(in["model"], "org/Model-A") << in.dump();
  EXPECT_EQ(in["port"], 30000) << in.dump();
  EXPECT_EQ(in["engine"], "sglang") << in.dump();
  EXPECT_EQ(in["launcher"]["alive"], false) << in.dump();
  EXPECT_EQ(in["launcher"]["died_at"], e["parent"]["died_at"]) << in.dump();
  EXPECT_FALSE(in["launcher"]["comm"].is_null()) << in.dump();
  // A direct scan reads what the agent saw die from its state directory (witnessed.json):
  // it names the crashed server the same way, and calls its workers the same (W3-07).
  auto direct = node_.gpureap({"--json", "--no-agent", "status"}).json();
  bool named = false;
  for (const auto& x : direct["instances"])
    if (x["key"] == std::to_string(held.leader)) {
      named = true;
      EXPECT_EQ(x["launcher"]["comm"], in["launcher"]["comm"]) << x.dump();
      EXPECT_EQ(x["model"], "org/Model-A") << x.dump();
    }
  EXPECT_TRUE(named) << direct["instances"].dump();
  stop_and_check_lines();
}

TEST_F(WatchEvents, ZombieLeaderIsAnnounced) {
  start();
  auto held = node_.hold({"--gpu", "1", "--bytes", "6GiB", "--zombie-leader"});
  ASSERT_EQ(held.holders.size(), 1u);
  const pid_t pid = held.holders[0].first;
  json e = wait_for("zombie_leader", 1u);
  expect_names_holder(e, pid, 6 * kGiB);
  EXPECT_EQ(state_of(pid), 'Z') << "the leader is a zombie, its thread still holds";
  stop_and_check_lines();
  EXPECT_EQ(count("zombie_leader"), 1u) << agent_->transcript();
}

// Driver-held once flat past the release budget since the exit the agent saw (1 s here;
// docs/release.md); announced then, never before.
TEST_F(WatchEvents, StuckMemoryIsDriverHeldAndNeverFreed) {
  start(true, {"--release-budget", "1s"});
  auto held =
      node_.hold({"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--stuck", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  const pid_t pid = held.holders[0].first;
  wait_for("orphaned_memory", 0u);
  kill_holder(pid, start_time_of(pid));
  json e = wait_for("unattributed_memory", 0u);
  EXPECT_EQ(e["class"], "driver_held") << e.dump();
  const auto bytes = e["bytes"].get<std::uint64_t>();
  EXPECT_GE(bytes, 8 * kGiB - 64 * kMiB) << e.dump();
  EXPECT_LE(bytes, 8 * kGiB + 64 * kMiB) << e.dump();
  EXPECT_NE(e["detail"].get<std::string>().find("gpureap free --reset --gpu 0"), std::string::npos)
      << e.dump();
  stop_and_check_lines();
  EXPECT_EQ(count("memory_freed"), 0u) << "the holder died, its memory did not come back\n"
                                       << agent_->transcript();
  EXPECT_EQ(count("unattributed_memory"), 1u) << agent_->transcript();
}

TEST_F(WatchEvents, ASlowReleaseIsNotDriverHeldAndEndsFreed) {
  start();
  auto held = node_.hold(
      {"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--release-delay", "2s", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  wait_for("orphaned_memory", 0u);
  auto free = node_.gpureap({"free", "--gpu", "0", "--yes", "--grace", "0"});
  EXPECT_EQ(free.exit_code, 0) << free.out << free.err;
  json e = wait_for("memory_freed", 0u);
  EXPECT_EQ(e["bytes"], 8 * kGiB) << e.dump();
  stop_and_check_lines();
  EXPECT_EQ(count("unattributed_memory"), 0u)
      << "2 s of memory that no process holds is a release, not driver_held\n"
      << agent_->transcript();
}

TEST_F(WatchEvents, FreeingOrphansIsAnnounced) {
  start();
  auto held = node_.hold({"--gpu", "0", "--children", "2", "--bytes", "8GiB", "--orphan"});
  ASSERT_EQ(held.holders.size(), 2u);
  wait_for("orphaned_memory", 0u);
  auto free = node_.gpureap({"free", "--gpu", "0", "--yes"});
  EXPECT_EQ(free.exit_code, 0) << free.out << free.err;
  json e = wait_for("memory_freed", 0u);
  EXPECT_EQ(e["bytes"], 8 * kGiB) << e.dump();
  EXPECT_NE(e["detail"].get<std::string>().find("baseline"), std::string::npos) << e.dump();
  stop_and_check_lines();
  EXPECT_EQ(count("memory_freed", 1u), 0u) << "GPU 1's orphan was not freed\n"
                                           << agent_->transcript();
}

TEST_F(WatchEvents, NvmlFailingGoesDownAndComesBack) {
  start();
  ASSERT_EQ(node_.sim({"mode", "--dir", node_.dir(), "query_fail"}).exit_code, 0);
  json down = wait_for("nvml_down");
  EXPECT_FALSE(down["detail"].get<std::string>().empty()) << down.dump();
  ASSERT_EQ(node_.sim({"mode", "--dir", node_.dir(), "ok"}).exit_code, 0);
  wait_for("nvml_up");
  stop_and_check_lines();
  EXPECT_EQ(count("nvml_down"), 1u) << "once, not at every tick\n" << agent_->transcript();
}

TEST_F(WatchEvents, TheAgentSurvivesAHungDriver) {
  start();
  ASSERT_EQ(node_.sim({"mode", "--dir", node_.dir(), "hang_query"}).exit_code, 0);
  wait_for("nvml_down");
  EXPECT_TRUE(agent_->running());
  ASSERT_EQ(node_.sim({"mode", "--dir", node_.dir(), "ok"}).exit_code, 0);
  wait_for("nvml_up");
  // It still sees the node: an orphan made now is announced.
  auto held = node_.hold({"--gpu", "1", "--children", "1", "--bytes", "4GiB", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  json e = wait_for("orphaned_memory", 1u);
  expect_names_holder(e, held.holders[0].first, 4 * kGiB);
  stop_and_check_lines();
}

TEST_F(WatchEvents, HumanLinesSayWhoWhyAndWhatNow) {
  start(false);
  auto held = node_.hold({"--gpu", "1", "--children", "1", "--bytes", "4GiB", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  std::optional<WatchChild::Line> line;
  while ((line = agent_->next_line(kEventBound))) {
    if (line->text.find("GPU 1:") != std::string::npos) break;
  }
  ASSERT_TRUE(line) << agent_->transcript();
  const std::string& t = line->text;
  EXPECT_NE(t.find("4.00 GiB orphaned: 1 holder ("), std::string::npos) << t;
  EXPECT_NE(t.find("pid " + std::to_string(held.holders[0].first)), std::string::npos) << t;
  EXPECT_NE(t.find("free it: gpureap free --orphans --gpu 1"), std::string::npos) << t;
  EXPECT_EQ(agent_->terminate(), 0) << agent_->transcript();
}

}  // namespace
}  // namespace gpureap::e2e
