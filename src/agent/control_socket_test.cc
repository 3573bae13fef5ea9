#include "agent/control_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "util/poll.h"
#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking client socket connected to `path`; invalid (errno set) on failure.
UniqueFd connect_to(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return {};
  return fd;
}

void send_text(int fd, std::string_view text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

std::string read_to_eof(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

ControlServer listen_or_die(const std::string& path, std::optional<gid_t> group = std::nullopt) {
  auto server = ControlServer::listen(path, group);
  if (!server) throw std::runtime_error(server.error().message);
  return std::move(*server);
}

// Runs the server as the agent's loop does (serve, poll its descriptors until
// the next deadline, again) until no client is in progress.
void serve_all(ControlServer& server, const ControlHandler& handler,
               std::chrono::milliseconds deadline = kControlDeadline) {
  for (;;) {
    server.serve(handler, deadline);
    if (server.clients() == 0) return;
    auto fds = server.poll_fds();
    ::poll(fds.data(), fds.size(), poll_timeout_ms(*server.next_deadline()));
  }
}

// A group other than ours to hand the socket to: nogroup where it exists.
gid_t some_other_group() {
  if (const group* g = ::getgrnam("nogroup")) return g->gr_gid;
  return 65534;
}

TEST(ControlServer, SocketIsOwnerOnlyByDefault) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  struct stat st = stat_of(dir.path("agent.sock"));
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  int flags = ::fcntl(server.fd(), F_GETFL);
  EXPECT_TRUE(flags & O_NONBLOCK) << "the agent's loop polls it";
  EXPECT_TRUE(::fcntl(server.fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(ControlServer, AGroupGetsTheSocketAndSearchOnItsDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another group needs root";
  TestTempDir dir;
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0700), 0);
  const gid_t group = some_other_group();
  auto server = listen_or_die(dir.path("agent.sock"), group);
  struct stat st = stat_of(dir.path("agent.sock"));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, group);
  struct stat ds = stat_of(dir.dir());
  EXPECT_EQ(ds.st_mode & 07777, 0710u) << "search for the group, never read or write";
  EXPECT_EQ(ds.st_gid, group);
}

TEST(ControlServer, AStaleSocketIsReplacedAndAnythingElseRefused) {
  TestTempDir dir;
  const std::string path = dir.path("agent.sock");
  {
    // A crashed agent leaves its socket file behind.
    UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  }
  auto server = ControlServer::listen(path, std::nullopt);
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_TRUE(connect_to(path).valid());

  const std::string file = dir.path("not-a-socket");
  std::ofstream(file) << "keep me";
  auto refused = ControlServer::listen(file, std::nullopt);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not a socket"), std::string::npos);
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
}

TEST(ControlServer, TheDestructorRemovesOnlyItsOwnSocket) {
  TestTempDir dir;
  const std::string path = dir.path("agent.sock");
  {
    auto server = listen_or_die(path);
    ControlServer moved = std::move(server);
    EXPECT_EQ(moved.path(), path);
  }
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0) << "removed once, by the server that was moved into";
  // A later agent's socket at the same path survives an older server's end.
  auto old_server = listen_or_die(path);
  auto new_server = listen_or_die(path);  // replaces the file (the older one is stale now)
  { ControlServer gone = std::move(old_server); }
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(connect_to(path).valid());
}

TEST(ControlServer, NobodyWaitingMeansNoCall) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  bool called = false;
  server.serve([&](const Peer&, const std::string&) {
    called = true;
    return std::string();
  });
  EXPECT_FALSE(called);
  EXPECT_EQ(server.clients(), 0u);
  EXPECT_FALSE(server.next_deadline());
}

TEST(ControlServer, AnswersOneRequestLineWithTheKernelsWordOnThePeer) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  UniqueFd client = connect_to(dir.path("agent.sock"));

  ASSERT_TRUE(client.valid());
  send_text(client.get(), "inventory\r\nignored after the line");
  Peer seen;
  std::string request;
  // One call: the request is already there and the answer fits the socket.
  server.serve([&](const Peer& p, const std::string& r) {
    seen = p;
    request = r;
    return std::string("{\"answer\":1}");
  });
  EXPECT_EQ(server.clients(), 0u);
  EXPECT_EQ(request, "inventory");
  EXPECT_EQ(seen.pid, ::getpid());
  EXPECT_EQ(seen.uid, ::geteuid());
  EXPECT_EQ(seen.gid, ::getegid());
  EXPECT_EQ(read_to_eof(client.get()), "{\"answer\":1}") << "answered, then closed";
}
// A child of another uid connects: SO_PEERCRED names it, whatever it claims.
TEST(ControlServer, ThePeerUidIsTheCallersAndTheModeKeepsOthersOut) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  TestTempDir dir;
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0711), 0);  // so only the socket's own mode decides
  const gid_t group = some_other_group();
  const std::string closed_path = dir.path("closed.sock");
  auto closed = listen_or_die(closed_path);
  // Another directory: the group gets search on this one only.
  TestTempDir open_dir;
  const std::string open_path = open_dir.path("agent.sock");
  auto open = listen_or_die(open_path, group);

  int result_pipe[2];
  ASSERT_EQ(::pipe(result_pipe), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(result_pipe[0]);
    char verdict[2] = {'?', '?'};
    if (::setgroups(0, nullptr) == 0 && ::setgid(group) == 0 && ::setuid(65534) == 0) {
      // 0600 root: refused. 0660 + our group: accepted.
      verdict[0] = connect_to(closed_path).valid() ? 'y' : (errno == EACCES ? 'n' : 'e');
      UniqueFd fd = connect_to(open_path);
      if (fd.valid()) {
        const char req[] = "inventory uid=0\n";
        (void)!::write(fd.get(), req, sizeof req - 1);
        verdict[1] = read_to_eof(fd.get()) == "hello 65534" ? 'y' : 'n';
      } else {
        verdict[1] = 'e';
      }
    }
    (void)!::write(result_pipe[1], verdict, 2);
    _exit(0);
  }
  ::close(result_pipe[1]);
  Peer seen;
  // Serve the child's one connection (it blocks on our answer).
  bool answered = false;
  for (;;) {
    open.serve([&](const Peer& p, const std::string&) {
      seen = p;
      answered = true;
      return "hello " + std::to_string(p.uid);
    });
    if (answered && open.clients() == 0) break;  // not one more wait of the poll's bound
    auto fds = open.poll_fds();
    ::poll(fds.data(), fds.size(), 10000);
  }
  char verdict[2] = {};
  ASSERT_EQ(::read(result_pipe[0], verdict, 2), 2);
  ::close(result_pipe[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(verdict[0], 'n') << "a 0600 root socket refuses uid 65534";
  EXPECT_EQ(verdict[1], 'y');
  EXPECT_EQ(seen.uid, 65534u);
  EXPECT_EQ(seen.gid, group);
  EXPECT_EQ(seen.pid, child);
}

// W2-17: silent clients used to be served one at a time, a second each, before
// the client that asked; now every client is served side by side.
TEST(ControlServer, W2_17_SilentClientsDelayNoOtherClient) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(connect_to(dir.path("agent.sock")));
  UniqueFd asking = connect_to(dir.path("agent.sock"));
  send_text(asking.get(), "inventory\n");
  int calls = 0;
  const auto handler = [&](const Peer&, const std::string&) {
    ++calls;
    return std::string("ok");
  };
  server.serve(handler, 200ms);
  EXPECT_EQ(calls, 1) << "answered in the same call, the silent ones still connected";
  EXPECT_EQ(server.clients(), 5u);
  EXPECT_EQ(read_to_eof(asking.get()), "ok");
  // The silent ones go at their deadline, without an answer.
  serve_all(server, handler, 200ms);
  EXPECT_EQ(calls, 1);
  for (auto& fd : silent) EXPECT_EQ(read_to_eof(fd.get()), "") << "dropped without an answer";
}

TEST(ControlServer, W2_17_ASilentClientGoesAtItsDeadlineNotBefore) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  UniqueFd silent = connect_to(dir.path("agent.sock"));
  const auto t0 = Clock::now();
  serve_all(
      server, [](const Peer&, const std::string&) { return std::string("never"); }, 200ms);
  EXPECT_GE(Clock::now() - t0, 200ms) << "it waited for the request line";
  EXPECT_EQ(read_to_eof(silent.get()), "");
}

TEST(ControlServer, W2_17_OneUidGetsAFewClientsAtATime) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  std::vector<UniqueFd> silent;
  for (std::size_t i = 0; i < kControlClientsPerUid; ++i)
    silent.push_back(connect_to(dir.path("agent.sock")));
  UniqueFd one_more = connect_to(dir.path("agent.sock"));
  send_text(one_more.get(), "inventory\n");
  bool called = false;
  server.serve([&](const Peer&, const std::string&) {
    called = true;
    return std::string("ok");
  });
  EXPECT_FALSE(called) << "past the cap for its uid: closed at once";
  EXPECT_EQ(server.clients(), kControlClientsPerUid);
  EXPECT_EQ(read_to_eof(one_more.get()), "");
}

TEST(ControlServer, AnAnswerLargerThanTheSocketBufferArrivesWhole) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  UniqueFd client = connect_to(dir.path("agent.sock"));
  int sndbuf = 0;
  socklen_t len = sizeof sndbuf;
  ASSERT_EQ(::getsockopt(client.get(), SOL_SOCKET, SO_RCVBUF, &sndbuf, &len), 0);
  std::string big(static_cast<std::size_t>(sndbuf) * 16 + 12345, 'x');
  for (std::size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  send_text(client.get(), "inventory\n");
  std::string got;
  std::thread reader([&] { got = read_to_eof(client.get()); });
  serve_all(
      server, [&](const Peer&, const std::string&) { return big; }, 10s);
  reader.join();
  EXPECT_EQ(got.size(), big.size());
  EXPECT_TRUE(got == big);
}

TEST(ControlServer, AClientThatStopsReadingOrHangsUpDoesNotStallOrKillTheAgent) {
  TestTempDir dir;
  auto server = listen_or_die(dir.path("agent.sock"));
  const std::string big(8 << 20, 'x');
  {
    // Reads nothing: the answer fills the buffers, the server gives up at the deadline.
    UniqueFd lazy = connect_to(dir.path("agent.sock"));
    send_text(lazy.get(), "inventory\n");
    serve_all(
        server, [&](const Peer&, const std::string&) { return big; }, 200ms);
  }
  {
    // Hangs up before the answer: no SIGPIPE (this test process would die of it).
    UniqueFd gone = connect_to(dir.path("agent.sock"));
    send_text(gone.get(), "inventory\n");
    gone.reset();
    serve_all(server, [&](const Peer&, const std::string&) { return big; });
  }
  // A request line longer than any request is not one, even when it ends (EOF).
  UniqueFd flood = connect_to(dir.path("agent.sock"));
  std::string endless(64 * 1024, 'a');
  send_text(flood.get(), endless);
  ::shutdown(flood.get(), SHUT_WR);
  bool called = false;
  serve_all(server, [&](const Peer&, const std::string&) {
    called = true;
    return std::string();
  });
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace gpureap::agent
