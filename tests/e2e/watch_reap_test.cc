// `gpureap watch`'s reaping policy, its options file and SIGHUP, one agent per node,
// and its usage errors (issue 11 §5, §6), on the simulated node.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr std::uint64_t kGiB = 1ULL << 30;

auto is_event(const std::string& kind) {
  return [kind](const json& j) { return j.value("event", "") == kind; };
}

WatchChild start_agent(const SimNode& node, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--json", "watch", "--no-listen", "--tick", "200ms"};
  args.insert(args.end(), extra.begin(), extra.end());
  WatchChild agent = WatchChild::gpureap(node, args);
  auto first = agent.next_line(30s);
  EXPECT_TRUE(first && first->text.find("\"started\"") != std::string::npos)
      << agent.transcript();
  return agent;
}

std::vector<pid_t> holder_pids(const json& event) {
  std::vector<pid_t> pids;
  for (const auto& h : event["holders"]) pids.push_back(h["pid"].get<pid_t>());
  return pids;
}

TEST(WatchReap, DryRunAnnouncesAndTouchesNothing) {
  SimNode node;
  WatchChild agent = start_agent(node, {"--reap-orphans-after", "500ms", "--reap-dry-run"});
  auto held = node.hold({"--gpu", "0", "--children", "1", "--bytes", "4GiB", "--orphan"});
  auto planned = agent.wait_for_json(is_event("reap_planned"), 20s);
  ASSERT_TRUE(planned) << agent.transcript();
  EXPECT_EQ(holder_pids(*planned), std::vector<pid_t>{held.holders[0].first});
  EXPECT_EQ((*planned)["bytes"], 4 * kGiB);
  // Planned once, not at every tick, and nothing was signalled.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(alive(held.holders[0].first));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  std::size_t plans = 0;
  for (const auto& l : agent.lines()) plans += l.text.find("\"reap_planned\"") != std::string::npos;
  EXPECT_EQ(plans, 1u) << agent.transcript();
}

TEST(WatchReap, OrphansPastTheirTimeAreFreedAndTheKeptOnesAreNot) {
  SimNode node;
  WatchChild agent = start_agent(node, {"--reap-orphans-after", "500ms", "--keep", "keep-me"});
  auto kept = node.hold(
      {"--gpu", "1", "--children", "1", "--bytes", "4GiB", "--orphan", "--label", "keep-me"});
  auto doomed = node.hold({"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--orphan"});
  auto reaped = agent.wait_for_json(is_event("reaped"), 30s);
  ASSERT_TRUE(reaped) << agent.transcript();
  EXPECT_EQ(holder_pids(*reaped), std::vector<pid_t>{doomed.holders[0].first});
  EXPECT_FALSE(alive(doomed.holders[0].first));
  auto freed = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "memory_freed" && j["gpu"] == 0; }, 20s);
  EXPECT_TRUE(freed) << agent.transcript();
  // The kept orphan is older than --reap-orphans-after too, and still there.
  EXPECT_TRUE(alive(kept.holders[0].first));
  const std::string kept_pid = "\"pid\":" + std::to_string(kept.holders[0].first) + ",";
  for (const auto& l : agent.lines())
    if (l.text.find(kept_pid) != std::string::npos) {
      EXPECT_NE(l.text.find("\"orphaned_memory\""), std::string::npos)
          << "the kept holder is only ever announced as an orphan: " << l.text;
    }
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(WatchReap, SighupRereadsTheOptionsFile) {
  SimNode node;
  const std::string config = node.dir() + "/watch.conf";
  std::ofstream(config) << "tick = \"200ms\"\n";
  WatchChild agent = start_agent(node, {"--config", config});
  auto held = node.hold({"--gpu", "0", "--children", "1", "--bytes", "4GiB", "--orphan"});
  ASSERT_TRUE(agent.wait_for_json(is_event("orphaned_memory"), 20s)) << agent.transcript();
  // No policy yet: nothing planned.
  std::ofstream(config) << "reap-orphans-after = \"300ms\"\nreap-dry-run = true\n";
  ASSERT_EQ(::kill(agent.pid(), SIGHUP), 0);
  auto planned = agent.wait_for_json(is_event("reap_planned"), 20s);
  ASSERT_TRUE(planned) << agent.transcript();
  EXPECT_EQ(holder_pids(*planned), std::vector<pid_t>{held.holders[0].first});
  // A broken file on the next SIGHUP is reported and the options in force stay.
  std::ofstream(config) << "reap-orphans-after = \"soon\"\n";
  ASSERT_EQ(::kill(agent.pid(), SIGHUP), 0);
  EXPECT_TRUE(SimNode::eventually([&] {
    agent.next_line(100ms);
    return agent.err().find("SIGHUP: --reap-orphans-after") != std::string::npos;
  })) << agent.transcript();
  EXPECT_TRUE(agent.running());
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(WatchReap, ASecondAgentRefusesNamingTheFirst) {
  SimNode node;
  WatchChild first = start_agent(node, {});
  auto second = node.gpureap({"watch", "--no-listen"}, 30s);
  EXPECT_EQ(second.exit_code, 3) << second.err;
  EXPECT_NE(second.err.find("another gpureap watch (pid " + std::to_string(first.pid()) + ")"),
            std::string::npos)
      << second.err;
  EXPECT_TRUE(first.running());
  EXPECT_EQ(first.terminate(), 0) << first.transcript();
}

TEST(WatchReap, UsageErrorsNameTheOption) {
  SimNode node;
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  for (const Case& c : std::vector<Case>{
           {{"--tick", "0"}, "--tick"},
           {{"--full-scan-interval", "soon"}, "--full-scan-interval"},
           {{"--keep", "(unclosed"}, "--keep"},
           {{"--reap-dry-run"}, "--reap-dry-run"},
           {{"--reap-orphans-after", "-5s"}, "--reap-orphans-after"},
           {{"--socket-group", "no-such-group-gpureap"}, "--socket-group"},
           {{"--config", "/nonexistent/watch.conf"}, "--config"},
       }) {
    std::vector<std::string> args = {"watch", "--no-listen"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = node.gpureap(args, 30s);
    EXPECT_EQ(r.exit_code, 2) << c.names << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace gpureap::e2e
