// The agent as a service a local user cannot stall or flood (issue 22, item 7):
// trickling HTTP connections (W2-03), silent control-socket clients (W2-17), a
// stdout nobody reads (W2-06); a scrape loop (W2-18) is a rule of the answers, held by
// Answers.W2_18_AScrapeLooksAtMostOnceASecond on a fake clock. Each test makes the agent
// face that user, then asks what root relies on: a scrape, an instant status,
// a stop on SIGTERM.

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "harness.h"
#include "prometheus_harness.h"
#include "util/fd.h"
#include "watch_child.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace watch_service_test {

using namespace std::chrono_literals;
using nlohmann::json;

struct Agent {
  std::optional<WatchChild> child;
  std::uint16_t port = 0;
};

// `gpureap --json watch ARGS` with its "started" line read; `port` set with --listen.
Agent start_agent(const SimNode& node, const std::vector<std::string>& extra) {
  Agent a;
  std::vector<std::string> args = {"--json", "watch"};
  args.insert(args.end(), extra.begin(), extra.end());
  a.child.emplace(WatchChild::gpureap(node, args));
  auto started =
      a.child->wait_for_json([](const json& j) { return j.value("event", "") == "started"; }, 30s);
  if (!started) {
    ADD_FAILURE() << "no started line:\n" << a.child->transcript();
    return a;
  }
  if ((*started)["listen"].is_string()) {
    auto listen = (*started)["listen"].get<std::string>();
    a.port = static_cast<std::uint16_t>(std::stoi(listen.substr(listen.rfind(':') + 1)));
  }
  return a;
}

json status(const SimNode& node) {
  auto r = node.gpureap({"--json", "status"}, 60s);
  return json::parse(r.out, nullptr, false);
}

// W2-03: 40 connections of one local user, each trickling a header line a
// second, held the agent's 32 slots (libmicrohttpd's timeout restarts on every
// byte): a scrape got nothing. Now that user has a few slots, and each
// connection has a total deadline, whatever it sends.
TEST(WatchService, W2_03_TricklingConnectionsOfOneUserDoNotBlockScrapes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to trickle as another user";
  SimNode node;
  auto agent = start_agent(node, {"--listen", "127.0.0.1:0"});
  ASSERT_NE(agent.port, 0);

  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const std::uint16_t port = agent.port;
  pid_t child = ::fork();
  if (child == 0) {
    // As uid 65534: 40 connections, 'r' once they are open (or 'e' when setuid failed),
    // then a header line each a second, until the test kills it.
    ::close(report[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      (void)!::write(report[1], "e", 1);
      _exit(1);
    }
    int fds[40];
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int& fd : fds) {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      const char start[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
      (void)::send(fd, start, sizeof start - 1, MSG_NOSIGNAL);
    }
    (void)!::write(report[1], "r", 1);
    for (int round = 0; round < 120; ++round) {
      const timespec second{1, 0};
      ::nanosleep(&second, nullptr);  // the trickle's pace: one line a second
      int open = 0;
      for (int& fd : fds) {
        if (fd < 0) continue;
        const char more[] = "X-a: b\r\n";
        if (::send(fd, more, sizeof more - 1, MSG_NOSIGNAL) < 0) {
          ::close(fd);
          fd = -1;
        } else {
          ++open;
        }
      }
      if (open == 0) break;
    }
    (void)!::write(report[1], "d", 1);
    _exit(0);
  }
  ::close(report[1]);
  char c = 0;
  ASSERT_EQ(::read(report[0], &c, 1), 1);
  ASSERT_EQ(c, 'r') << "the trickling child could not become uid 65534";

  auto reply = http_get(agent.port, "/metrics", 10s);
  EXPECT_EQ(reply.status, 200) << "a scrape while uid 65534 trickles 40 requests";
  // That each trickling connection is cut at its deadline (10 s here), whatever it
  // sends, is HttpServer.W2_03_ATricklingRequestIsCutAtItsDeadlineWhateverItSends's
  // (300 ms there): not waited out here.
  ::close(report[0]);
  ::kill(child, SIGKILL);  // our own child
  int st = 0;
  ::waitpid(child, &st, 0);
  EXPECT_EQ(agent.child->terminate(), 0) << agent.child->transcript();
}

// W2-17: the control socket served one client at a time, a second each for a
// silent one: a few silent connections made root's status wait and then scan.
TEST(WatchService, W2_17_SilentSocketClientsDoNotStallStatus) {
  SimNode node;
  auto agent = start_agent(node, {"--no-listen"});
  ASSERT_TRUE(agent.child && agent.child->running());
  const std::string path = node.env().at("GPUREAP_STATE_DIR") + "/agent.sock";
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 7; ++i) {  // below the per-uid cap, with status's own connection
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
    silent.push_back(std::move(fd));
  }
  json s = status(node);
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["source"], "agent") << "answered beside the silent clients, not after them";
  EXPECT_EQ(agent.child->terminate(), 0) << agent.child->transcript();
}

// W2-06: the agent wrote its events to stdout with a blocking write: a reader
// that stopped froze status, scrapes and reaping, and SIGTERM did not stop it.
TEST(WatchService, W2_06_AStdoutNobodyReadsDoesNotStopTheAgent) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ::fcntl(out[1], F_SETPIPE_SZ, 4096);  // a reader that stopped: one page fills at once
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_t pid = spawn_child({GPUREAP_BIN, "--json", "watch", "--no-listen", "--tick", "200ms"},
                          node.env(), out[1], devnull, true);
  ::close(out[1]);
  ::close(devnull);
  ASSERT_GT(pid, 0);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(pidfd, 0);
  // The started line, then nobody reads again.
  pollfd started{out[0], POLLIN, 0};
  ASSERT_EQ(::poll(&started, 1, 30000), 1) << "no started line";

  // Orphans come and go: far more event text than the pipe holds.
  // Each round's orphaned_memory and memory_freed lines name 8 holders: some 4 KiB a
  // round, so the pipe is full within the first two. (16 holders made one line longer
  // than the pipe once events carried provenance and keepers: none could ever fit.)
  for (int round = 0; round < 6; ++round) {
    auto held =
        node.hold({"--gpu", "0", "--children", "8", "--same-gpu", "--bytes", "16GiB", "--orphan"});
    ASSERT_TRUE(SimNode::eventually(
        [&] {
          json s = status(node);
          return s.is_object() && s["source"] == "agent" && s["gpus"][0]["holders"].size() >= 8;
        },
        30s))
        << "the agent never showed the 8 orphans";
    auto freed = node.gpureap({"free", "--gpu", "0", "--yes", "--settle", "0"}, 60s,
                              {{"GPUREAP_NO_AGENT", "1"}});
    ASSERT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  }
  // Still answering, from its own inventory, with the pipe full.
  EXPECT_TRUE(SimNode::eventually(
      [&] {
        json s = status(node);
        return s.is_object() && s["source"] == "agent" && s["gpus"][0]["holders"].empty();
      },
      30s))
      << "status no longer answered by the agent";

  int queued = 0;
  ASSERT_EQ(::ioctl(out[0], FIONREAD, &queued), 0);
  // Event lines reached the pipe until the next did not fit (a 4 KiB pipe takes
  // a line whole or not at all), far less than the rounds announced.
  EXPECT_GT(queued, 1024) << "no event line reached the pipe";

  // And SIGTERM stops it, though its stdout still takes nothing.
  ASSERT_EQ(::syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, nullptr, 0), 0);
  pollfd exited{pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&exited, 1, 20000), 1) << "still running 20 s after SIGTERM";
  int st = 0;
  if (exited.revents == 0) ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  ::close(pidfd);
  ::close(out[0]);
}

}  // namespace
}  // namespace gpureap::e2e
