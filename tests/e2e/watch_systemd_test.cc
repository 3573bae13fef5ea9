// The agent as a systemd service and as a good neighbour of GPU resets (issue 28
// part 2, issue 27 part 4): the notify protocol received on a socket the test
// binds, as systemd would; `free --reset` on the simulated node while the agent
// runs, which the simulated driver refuses while the agent's NVML session is open.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "harness.h"
#include "util/fd.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace watch_systemd_test {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// systemd's end of NOTIFY_SOCKET: a datagram socket bound at `path`.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    bound_ = ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  bool bound() const { return bound_; }

  // The next message that contains `what`, within `timeout`; every message read is kept.
  std::optional<std::string> wait_for(const std::string& what, std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    for (;;) {
      for (std::size_t i = seen_; i < messages_.size(); ++i)
        if (messages_[i].find(what) != std::string::npos) {
          seen_ = i + 1;
          return messages_[i];
        }
      seen_ = messages_.size();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n > 0) messages_.emplace_back(buf, static_cast<std::size_t>(n));
    }
  }
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::string path_;
  UniqueFd fd_;
  bool bound_ = false;
  std::vector<std::string> messages_;
  std::size_t seen_ = 0;
};

std::string all(const std::vector<std::string>& messages) {
  std::string out;
  for (const auto& m : messages) out += "[" + m + "]\n";
  return out;
}

TEST(WatchSystemd, NotifySocketReceivesReadyStatusWatchdogReloadAndStop) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  NotifySocket notify(node.dir() + "/notify.sock");
  ASSERT_TRUE(notify.bound());
  auto env = node.env();
  env["NOTIFY_SOCKET"] = node.dir() + "/notify.sock";
  env["WATCHDOG_USEC"] = "400000";  // WatchdogSec=400ms: a ping every 200 ms
  WatchChild agent({GPUREAP_BIN, "--json", "watch", "--no-listen"}, env);

  auto ready = notify.wait_for("READY=1", 30s);
  ASSERT_TRUE(ready) << all(notify.messages()) << agent.transcript();
  EXPECT_NE(ready->find("STATUS=2 GPUs watched; no orphaned holder"), std::string::npos) << *ready;
  // The watchdog is honoured: pings keep coming from the loop.
  ASSERT_TRUE(notify.wait_for("WATCHDOG=1", 30s)) << all(notify.messages());
  ASSERT_TRUE(notify.wait_for("WATCHDOG=1", 30s)) << all(notify.messages());

  // An orphan shows in STATUS=.
  auto held = node.hold({"--gpu", "1", "--bytes", "8GiB", "--children", "1", "--orphan",
                         "--detach"});
  auto status = notify.wait_for("1 orphaned holder (8.00 GiB)", 30s);
  ASSERT_TRUE(status) << all(notify.messages()) << agent.transcript();
  EXPECT_NE(status->find("last event: orphaned_memory on GPU 1"), std::string::npos) << *status;

  ASSERT_EQ(::kill(agent.pid(), SIGHUP), 0);
  ASSERT_TRUE(notify.wait_for("RELOADING=1", 30s)) << all(notify.messages());
  ASSERT_TRUE(notify.wait_for("READY=1", 30s)) << all(notify.messages());

  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  EXPECT_TRUE(notify.wait_for("STOPPING=1", 5s)) << all(notify.messages());
}

TEST(WatchSystemd, FreeResetSucceedsWhileTheAgentRunsAndTheAgentReportsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "the reset path needs root";
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "200ms"});
  ASSERT_TRUE(agent.wait_for_json([](const json& j) { return j.value("event", "") == "started"; },
                                  30s))
      << agent.transcript();
  // A holder whose memory the driver keeps after its death: free kills it, then resets.
  node.hold({"--gpu", "1", "--bytes", "30GiB", "--stuck"});
  ASSERT_TRUE(SimNode::eventually([&] {
    auto r = node.gpureap({"--json", "status", "--gpu", "1"});
    auto st = json::parse(r.out, nullptr, false);
    return st.is_object() && st.value("source", "") == "agent" && !st["gpus"].empty() &&
           !st["gpus"][0]["holders"].empty();
  }, 30s)) << agent.transcript();

  // The agent's NVML session is a client: the driver refuses a reset behind its back,
  // even of a GPU that nothing else holds.
  auto refused = run_command({node.dir() + "/bin/nvidia-smi", "-r", "-i", "0"}, node.env(), 30s);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.out.find("In use by another client"), std::string::npos) << refused.out;

  // free --reset asks the agent to let go, resets, and hands NVML back.
  auto freed = node.gpureap(
      {"free", "--json", "--yes", "--gpu", "1", "--reset", "--timeout", "5s", "--release-budget", "100ms"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  auto j = freed.json();
  ASSERT_EQ(j["resets"].size(), 1u) << j.dump(1);
  EXPECT_TRUE(j["resets"][0]["succeeded"]) << j["resets"][0].dump(1);
  EXPECT_NE(j["resets"][0]["notes"].dump().find("let go of NVML"), std::string::npos)
      << j["resets"][0].dump(1);

  auto yielded = agent.wait_for_json(
      [](const json& jj) { return jj.value("event", "") == "nvml_yielded"; }, 30s);
  ASSERT_TRUE(yielded) << agent.transcript();
  auto resumed = agent.wait_for_json(
      [](const json& jj) { return jj.value("event", "") == "nvml_resumed"; }, 30s);
  ASSERT_TRUE(resumed) << agent.transcript();
  EXPECT_NE(resumed->value("note", "").find("reset succeeded"), std::string::npos)
      << resumed->dump();
  // Back on NVML: the agent answers status again, and sees GPU 1 as the reset left it.
  auto status = node.gpureap({"--json", "status", "--gpu", "1"});
  auto st = status.json();
  EXPECT_EQ(st.value("source", ""), "agent") << status.out;
  ASSERT_EQ(st["gpus"].size(), 1u) << status.out;
  EXPECT_TRUE(st["gpus"][0]["holders"].empty()) << status.out;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(WatchSystemd, Sigusr1LetsGoOfNvmlAndSigusr2TakesItUpAgain) {
  SimNode node({"--gpus", "1", "--memory", "80GiB"});
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "200ms"});
  ASSERT_TRUE(agent.wait_for_json([](const json& j) { return j.value("event", "") == "started"; },
                                  30s))
      << agent.transcript();
  ASSERT_EQ(::kill(agent.pid(), SIGUSR1), 0);
  auto yielded = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "nvml_yielded"; }, 30s);
  ASSERT_TRUE(yielded) << agent.transcript();
  EXPECT_EQ(yielded->value("by", ""), "SIGUSR1");
  // Let go for real: no session left, so the simulated driver resets (as root).
  if (::geteuid() == 0) {
    auto reset = run_command({node.dir() + "/bin/nvidia-smi", "-r", "-i", "0"}, node.env(), 30s);
    EXPECT_EQ(reset.exit_code, 0) << reset.out;
  }
  ASSERT_EQ(::kill(agent.pid(), SIGUSR2), 0);
  auto resumed = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "nvml_resumed"; }, 30s);
  ASSERT_TRUE(resumed) << agent.transcript();
  EXPECT_EQ(resumed->value("by", ""), "SIGUSR2");
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

}  // namespace watch_systemd_test
}  // namespace gpureap::e2e
