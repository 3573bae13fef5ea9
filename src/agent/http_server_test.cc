// HttpServer on a real loopback socket, spoken to by a raw-socket client below,
// and write_textfile on a real directory.

#include "agent/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "util/fd.h"
#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;

struct Reply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

UniqueFd connect_to(std::uint16_t port, bool ipv6 = false) {
  UniqueFd fd(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len;
  if (ipv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return UniqueFd();
  return fd;
}

// Sends `request` as it is and reads until the server closes (bounded).
Reply talk(std::uint16_t port, const std::string& request, bool ipv6 = false) {
  Reply reply;
  UniqueFd fd = connect_to(port, ipv6);
  if (!fd.valid()) {
    ADD_FAILURE() << "connect to port " << port << ": " << std::strerror(errno);
    return reply;
  }
  EXPECT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string all;
  char buf[65536];
  pollfd p{fd.get(), POLLIN, 0};
  while (::poll(&p, 1, 10000) > 0) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  auto end = all.find("\r\n\r\n");
  if (end == std::string::npos) {
    ADD_FAILURE() << "no complete reply: '" << all << "'";
    return reply;
  }
  reply.head = all.substr(0, end + 2);
  reply.body = all.substr(end + 4);
  if (reply.head.starts_with("HTTP/1.")) reply.status = std::stoi(reply.head.substr(9, 3));
  return reply;
}

Reply get(std::uint16_t port, const std::string& path, const std::string& method = "GET") {
  return talk(port, method + " " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n");
}

HttpResponse metrics_handler(std::string_view path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n"};
  return {404, "text/plain; charset=utf-8", "not found\n"};
}

TEST(HttpServer, ServesGetOnAPortPickedByTheKernel) {
  std::mutex m;
  std::vector<std::string> paths;
  auto server = HttpServer::start("127.0.0.1:0", [&](std::string_view path) {
    std::lock_guard lock(m);
    paths.emplace_back(path);
    return metrics_handler(path);
  });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  ASSERT_NE(server->port(), 0);

  auto r = get(server->port(), "/metrics?name[]=up");
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body, "up 1\n");
  EXPECT_NE(r.head.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos)
      << r.head;
  std::lock_guard lock(m);
  EXPECT_EQ(paths, std::vector<std::string>{"/metrics"});  // the query string is not the path
}

// W2-03: one client (here: this uid on loopback) gets a few connections at a
// time; a further one is closed at once, and the others still work.
TEST(HttpServer, W2_03_OneClientGetsAFewConnectionsAtATime) {
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler);
  ASSERT_TRUE(server) << server.error().message;
  std::vector<UniqueFd> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(connect_to(server->port()));
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";  // and never the end
    ASSERT_EQ(::send(held.back().get(), start.data(), start.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(start.size()));
  }
  UniqueFd ninth = connect_to(server->port());
  ASSERT_TRUE(ninth.valid());
  char c;
  pollfd p{ninth.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "the ninth connection was neither closed nor answered";
  EXPECT_LE(::recv(ninth.get(), &c, 1, 0), 0) << "closed without an answer";
  // One of the eight finishes its request: it is answered as usual.
  const std::string end = "\r\n";
  ASSERT_EQ(::send(held[0].get(), end.data(), end.size(), MSG_NOSIGNAL), 2);
  std::string reply(256, '\0');
  pollfd q{held[0].get(), POLLIN, 0};
  ASSERT_EQ(::poll(&q, 1, 10000), 1);
  ssize_t n = ::recv(held[0].get(), reply.data(), reply.size(), 0);
  ASSERT_GT(n, 0);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
}

// W2-03: a request must arrive whole within its deadline, however it trickles: a client
// that sends a header line every 20 ms, and would go on for ever, is cut at the deadline
// (here 300 ms; 10 s in the agent). libmicrohttpd's own timeout restarts at every byte.
// No time is asserted: the test waits for the cut, bounded only so that a server that
// never cuts fails instead of hanging.
TEST(HttpServer, W2_03_ATricklingRequestIsCutAtItsDeadlineWhateverItSends) {
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler, {}, bcrypt_matches, 300ms);
  ASSERT_TRUE(server) << server.error().message;
  UniqueFd fd = connect_to(server->port());
  ASSERT_TRUE(fd.valid());
  const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(::send(fd.get(), start.data(), start.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(start.size()));
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  bool cut = false;
  while (!cut && std::chrono::steady_clock::now() < give_up) {
    const std::string more = "X-a: b\r\n";
    if (::send(fd.get(), more.data(), more.size(), MSG_NOSIGNAL) < 0) {
      cut = true;
      break;
    }
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 20) == 1) {
      char c;
      cut = ::recv(fd.get(), &c, 1, 0) <= 0;  // closed without an answer
      ASSERT_TRUE(cut) << "answered a request that never ended";
    }
  }
  EXPECT_TRUE(cut) << "a trickling request kept its connection for a minute";
}

TEST(HttpServer, TheHandlersStatusIsSent) {
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler);
  ASSERT_TRUE(server.has_value()) << server.error().message;
  auto r = get(server->port(), "/nothing-here");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "not found\n");
}

TEST(HttpServer, HeadSendsTheHeadersOnly) {
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler);
  ASSERT_TRUE(server.has_value()) << server.error().message;
  auto r = get(server->port(), "/metrics", "HEAD");
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_NE(r.head.find("Content-Length: 5\r\n"), std::string::npos) << r.head;
  EXPECT_EQ(r.body, "");
}

TEST(HttpServer, OtherMethodsGet405WithoutReachingTheHandler) {
  std::atomic<int> calls = 0;
  auto server = HttpServer::start("127.0.0.1:0", [&](std::string_view path) {
    ++calls;
    return metrics_handler(path);
  });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  for (const char* method : {"POST", "PUT", "DELETE"}) {
    auto r = talk(server->port(),
                  std::string(method) + " /metrics HTTP/1.0\r\nContent-Length: 4\r\n\r\nabcd");
    EXPECT_EQ(r.status, 405) << method << "\n" << r.head;
    EXPECT_NE(r.head.find("Allow: GET, HEAD\r\n"), std::string::npos) << r.head;
  }
  EXPECT_EQ(calls, 0);
}

TEST(HttpServer, AHandlerThatThrowsGives500) {
  auto server = HttpServer::start("127.0.0.1:0", [](std::string_view) -> HttpResponse {
    throw std::runtime_error("inventory unavailable");
  });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  auto r = get(server->port(), "/metrics");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "inventory unavailable\n");
}

TEST(HttpServer, ASecondServerOnThePortIsRefusedWithAHint) {
  auto first = HttpServer::start("127.0.0.1:0", metrics_handler);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = HttpServer::start(address, metrics_handler);
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().message.find("--listen " + address), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find("another gpureap watch or exporter?"), std::string::npos)
      << second.error().message;
  EXPECT_EQ(get(first->port(), "/metrics").status, 200);  // the first one still serves
}

TEST(HttpServer, StoppingReleasesThePort) {
  std::uint16_t port = 0;
  {
    auto server = HttpServer::start("127.0.0.1:0", metrics_handler);
    ASSERT_TRUE(server.has_value()) << server.error().message;
    port = server->port();
    EXPECT_EQ(get(port, "/metrics").status, 200);
  }
  EXPECT_FALSE(connect_to(port).valid());  // nothing listens any more
  auto again = HttpServer::start("127.0.0.1:" + std::to_string(port), metrics_handler);
  EXPECT_TRUE(again.has_value()) << again.error().message;
}

TEST(HttpServer, BadAddressesNameTheOption) {
  for (const char* listen :
       {"localhost:9847", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:80x", "::1:9847",
        "[::1", "[::1]9847", "[nope]:1", ":9847", "300.1.1.1:9847"}) {
    auto server = HttpServer::start(listen, metrics_handler);
    ASSERT_FALSE(server.has_value()) << listen;
    EXPECT_TRUE(server.error().message.starts_with(std::string("--listen '") + listen + "'"))
        << server.error().message;
  }
}

TEST(HttpServer, ServesOnIpv6Loopback) {
  auto server = HttpServer::start("[::1]:0", metrics_handler);
  if (!server && server.error().sys_errno == EADDRNOTAVAIL)
    GTEST_SKIP() << "no IPv6 loopback here: " << server.error().message;
  ASSERT_TRUE(server.has_value()) << server.error().message;
  auto r = talk(server->port(), "GET /metrics HTTP/1.0\r\n\r\n", true);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "up 1\n");
  // Bound to ::1 only: the IPv4 loopback has nothing on that port.
  EXPECT_FALSE(connect_to(server->port()).valid());
}

// W4-09: wrong passwords wait for their (slow) check on worker threads; a scrape
// with the password let in before is answered while every worker is held in one. The
// stand-in for bcrypt holds wrong passwords until the test releases them, so the
// order is the test's, never the machine's speed. On the old code the check ran on
// libmicrohttpd's one thread and the scrape got no answer until the release.
TEST(HttpServer, W4_09_AScrapeIsAnsweredWhileWrongPasswordsAreChecked) {
  std::mutex m;
  std::condition_variable cv;
  unsigned calls = 0;
  bool held = false;
  PasswordCheck slow = [&](const std::string& hash, std::string_view password) {
    std::unique_lock lock(m);
    ++calls;
    cv.notify_all();
    cv.wait(lock, [&] { return !held || password == hash; });
    return password == hash;
  };
  WebConfig web;
  web.users = {{"prometheus", "right"}};
  struct Release {  // on any exit, before the server stops: never a test that hangs
    std::mutex& m;
    std::condition_variable& cv;
    bool& held;
    ~Release() {
      std::lock_guard lock(m);
      held = false;
      cv.notify_all();
    }
  };
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler, web, slow);
  Release release{m, cv, held};
  ASSERT_TRUE(server) << server.error().message;
  const std::string right = "Authorization: Basic cHJvbWV0aGV1czpyaWdodA==\r\n";
  const std::string wrong = "Authorization: Basic cHJvbWV0aGV1czp3cm9uZw==\r\n";
  auto request = [&](const std::string& path, const std::string& auth) {
    return "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n" + auth + "\r\n";
  };
  EXPECT_EQ(talk(server->port(), request("/metrics", "")).status, 401);
  EXPECT_EQ(talk(server->port(), request("/metrics", right)).status, 200);  // checked once
  {
    std::lock_guard lock(m);
    held = true;
  }
  std::vector<UniqueFd> bad;
  for (int i = 0; i < 4; ++i) {
    bad.push_back(connect_to(server->port()));
    const std::string r = request("/metrics", wrong);
    ASSERT_EQ(::send(bad.back().get(), r.data(), r.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(r.size()));
  }
  {
    std::unique_lock lock(m);  // both workers inside a check (a bound, not a measure)
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return calls >= 3; }));
  }
  auto scrape = talk(server->port(), request("/metrics", right));
  EXPECT_EQ(scrape.status, 200) << scrape.head;
  EXPECT_EQ(scrape.body, "up 1\n");
  EXPECT_EQ(talk(server->port(), request("/healthz", right)).status, 404);  // answered
  {
    std::lock_guard lock(m);
    EXPECT_TRUE(held) << "answered while the wrong passwords were still being checked";
    held = false;
  }
  cv.notify_all();
  for (auto& fd : bad) {
    std::string reply(64, '\0');
    pollfd p{fd.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 60000), 1);
    ASSERT_GT(::recv(fd.get(), reply.data(), reply.size(), 0), 0);
    EXPECT_TRUE(reply.starts_with("HTTP/1.0 401") || reply.starts_with("HTTP/1.1 401")) << reply;
  }
  // The two checks queued behind the client's failure were refused without one.
  std::lock_guard lock(m);
  EXPECT_EQ(calls, 3u);
}

TEST(HttpServer, AStalledClientDoesNotHoldUpOthers) {
  auto server = HttpServer::start("127.0.0.1:0", metrics_handler);
  ASSERT_TRUE(server.has_value()) << server.error().message;
  // Half a request, then silence: the server must go on serving the others.
  // Seven: all of this test's connections count against one client (its uid on
  // loopback), which gets eight at a time.
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 7; ++i) {
    stalled.push_back(connect_to(server->port()));
    ASSERT_TRUE(stalled.back().valid());
    ASSERT_GT(::send(stalled.back().get(), "GET /metr", 9, MSG_NOSIGNAL), 0);
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(get(server->port(), "/metrics").status, 200);
}

TEST(Textfile, WritesTheTextWithMode0644AndLeavesNoTemporaryFile) {
  TestTempDir dir("gpureap-textfile");
  ASSERT_TRUE(write_textfile(dir.dir(), "old 1\n").has_value());
  auto r = write_textfile(dir.dir(), "gpureap_up 1\n");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  std::ifstream in(dir.path("gpureap.prom"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "gpureap_up 1\n");
  struct stat st {};
  ASSERT_EQ(::stat(dir.path("gpureap.prom").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.dir()))
    names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"gpureap.prom"});
}

TEST(Textfile, AReaderNeverSeesAHalfWrittenFile) {
  TestTempDir dir("gpureap-textfile");
  // Two large texts, written in turn; whatever moment a reader opens the file,
  // it must find one of them whole.
  const std::string a(1 << 20, 'a'), b(1 << 19, 'b');
  ASSERT_TRUE(write_textfile(dir.dir(), a).has_value());
  std::atomic<bool> done = false;
  std::thread writer([&] {
    for (int i = 0; i < 100; ++i) EXPECT_TRUE(write_textfile(dir.dir(), i % 2 ? a : b).has_value());
    done = true;
  });
  int reads = 0, torn = 0;
  do {
    std::ifstream in(dir.path("gpureap.prom"));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    ++reads;
    if (text != a && text != b) ++torn;
  } while (!done);
  writer.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
}

TEST(Textfile, ErrorsNameTheDirectory) {
  TestTempDir dir("gpureap-textfile");
  auto missing = write_textfile(dir.path("missing"), "x 1\n");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("--textfile " + dir.path("missing")), std::string::npos)
      << missing.error().message;
  std::ofstream(dir.path("a-file")) << "";
  auto not_dir = write_textfile(dir.path("a-file"), "x 1\n");
  ASSERT_FALSE(not_dir.has_value());
  EXPECT_NE(not_dir.error().message.find(dir.path("a-file")), std::string::npos);
}

}  // namespace
}  // namespace gpureap::agent
