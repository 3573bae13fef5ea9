// libmicrohttpd does the HTTP; this file owns the listening socket, so that a bind
// failure comes back with its errno (MHD_start_daemon only returns NULL) and the
// address is exactly the one the user named: no dual-stack surprise, no
// SO_REUSEPORT sharing with a second agent.

#include "agent/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "agent/basic_auth.h"
#include "agent/credential_checks.h"
#include "agent/gnutls_load.h"
#include "util/fd.h"
#include "util/signal_mask.h"

namespace gpureap::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A client that sends nothing is dropped after this long (libmicrohttpd's own
// timeout, which every byte restarts).
constexpr unsigned kConnectionTimeoutSeconds = 10;
// Prometheus opens one connection per scrape; a few people with curl add a few.
// Each client (address, and on loopback the uid behind it) gets a few at a time,
// so one cannot take the slots every other one needs.
constexpr unsigned kConnectionLimit = 128;
constexpr unsigned kConnectionsPerClient = 8;
// And a few requests a second: a further one waits (suspended, on one of its
// client's few connections) for the next second. A scrape loop then costs the
// agent that many answers a second, whatever its rate (W2-18); Prometheus
// scrapes every 15 s or so.
constexpr unsigned kRequestsPerClientPerSecond = 10;

struct ListenAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool ipv6 = false;
};

Error bad_listen(std::string_view listen, std::string_view why) {
  return Error{"--listen '" + std::string(listen) + "': " + std::string(why)};
}

Result<ListenAddress> parse_listen(std::string_view listen) {
  std::string host;
  std::string_view port_text;
  if (listen.starts_with('[')) {
    auto close = listen.find(']');
    if (close == std::string_view::npos || close + 1 >= listen.size() || listen[close + 1] != ':')
      return std::unexpected(bad_listen(listen, "expected [IPv6]:PORT, e.g. [::1]:9847"));
    host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      return std::unexpected(bad_listen(listen, "expected ADDR:PORT, e.g. 127.0.0.1:9847"));
    host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return std::unexpected(bad_listen(listen, "an IPv6 address goes in brackets: [::1]:9847"));
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535)
    return std::unexpected(bad_listen(listen, "the port must be a number from 0 to 65535"));

  ListenAddress out;
  if (!listen.starts_with('[')) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&out.addr);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1)
      return std::unexpected(
          bad_listen(listen, "ADDR must be a numeric IPv4 address (or [IPv6] in brackets)"));
    out.len = sizeof(sockaddr_in);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) != 1)
      return std::unexpected(bad_listen(listen, "not a numeric IPv6 address"));
    out.len = sizeof(sockaddr_in6);
    out.ipv6 = true;
  }
  return out;
}

Result<UniqueFd> listen_on(std::string_view listen, const ListenAddress& a) {
  UniqueFd fd(::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid())
    return std::unexpected(Error::from_errno("--listen " + std::string(listen) + ": socket"));
  int one = 1;
  // SO_REUSEADDR lets a restarted agent bind while old connections sit in
  // TIME_WAIT; on Linux it never lets two listeners share the port.
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // [::] means IPv6 only: 0.0.0.0 is a separate --listen, as the user wrote it.
  if (a.ipv6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a.addr), a.len) != 0) {
    int err = errno;
    std::string where = "--listen " + std::string(listen) + ": ";
    if (err == EADDRINUSE)
      return fail(where + "address already in use (another gpureap watch or exporter?)", err);
    if (err == EADDRNOTAVAIL)
      return fail(where + "no interface of this machine has that address", err);
    if (err == EACCES)
      return fail(where + "ports below 1024 need root (or CAP_NET_BIND_SERVICE)", err);
    return std::unexpected(Error::from_errno(where + "bind", err));
  }
  if (::listen(fd.get(), 64) != 0)
    return std::unexpected(Error::from_errno("--listen " + std::string(listen) + ": listen"));
  return fd;
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

// The uid owning the other end of a loopback TCP connection, from the kernel's
// socket table (sock_diag, what `ss -e` reads): `peer` is its address, `local`
// ours. nullopt when the kernel does not say.
std::optional<uid_t> loopback_peer_uid(const sockaddr* peer, const sockaddr* local) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl.valid()) return std::nullopt;
  struct {
    nlmsghdr header;
    inet_diag_req_v2 req;
  } msg{};
  msg.header.nlmsg_len = sizeof msg;
  msg.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.header.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<std::uint8_t>(peer->sa_family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  // The peer's socket: its source is the peer, its destination us.
  if (peer->sa_family == AF_INET) {
    auto* p = reinterpret_cast<const sockaddr_in*>(peer);
    auto* l = reinterpret_cast<const sockaddr_in*>(local);
    msg.req.id.idiag_sport = p->sin_port;
    msg.req.id.idiag_dport = l->sin_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin_addr, sizeof p->sin_addr);
    std::memcpy(msg.req.id.idiag_dst, &l->sin_addr, sizeof l->sin_addr);
  } else {
    auto* p = reinterpret_cast<const sockaddr_in6*>(peer);
    auto* l = reinterpret_cast<const sockaddr_in6*>(local);
    msg.req.id.idiag_sport = p->sin6_port;
    msg.req.id.idiag_dport = l->sin6_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin6_addr, sizeof p->sin6_addr);
    std::memcpy(msg.req.id.idiag_dst, &l->sin6_addr, sizeof l->sin6_addr);
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) != static_cast<ssize_t>(sizeof msg))
    return std::nullopt;
  alignas(nlmsghdr) char buf[1024];
  ssize_t n = ::recv(nl.get(), buf, sizeof buf, 0);
  if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(inet_diag_msg)))) return std::nullopt;
  auto* reply = reinterpret_cast<nlmsghdr*>(buf);
  if (reply->nlmsg_type != SOCK_DIAG_BY_FAMILY) return std::nullopt;  // NLMSG_ERROR: not found
  return static_cast<const inet_diag_msg*>(NLMSG_DATA(reply))->idiag_uid;
}

// Who a connection counts against for kConnectionsPerClient: its address, and on
// loopback (where every local user has the same one) the uid behind it too.
std::string client_key(int fd, const sockaddr* peer) {
  char text[INET6_ADDRSTRLEN] = "?";
  const void* addr =
      peer->sa_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(peer)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(peer)->sin6_addr);
  ::inet_ntop(peer->sa_family, addr, text, sizeof text);
  std::string key = text;
  if (!is_loopback(peer)) return key;
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return key;
  auto uid = loopback_peer_uid(peer, reinterpret_cast<const sockaddr*>(&local));
  return key + (uid ? " uid " + std::to_string(*uid) : std::string(" uid ?"));
}

MHD_Result send(MHD_Connection* connection, const HttpResponse& r, bool not_allowed = false) {
  // MHD copies the body; for HEAD it sends the headers only (Content-Length kept).
  MHD_Response* response = MHD_create_response_from_buffer(
      r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (!response) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
  if (not_allowed) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(r.status), response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

struct HttpServer::Impl {
  HttpHandler handler;
  std::chrono::milliseconds request_deadline = kRequestDeadline;
  std::unique_ptr<BasicAuth> auth;  // nullptr: no authentication
  std::unique_ptr<CredentialChecks> checks;  // with auth: bcrypt off our thread (W4-09)
  std::string cert_pem, key_pem;  // kept while the daemon runs
  MHD_Daemon* daemon = nullptr;
  std::uint16_t port = 0;

  // Every open connection, for the deadline and the per-client count. `fd` is our
  // own dup of the connection's socket: shutdown(2) on it ends the connection
  // (libmicrohttpd reads EOF and closes its descriptor) and can never hit a
  // descriptor number libmicrohttpd closed and the process reused meanwhile.
  struct Open {
    UniqueFd fd;
    std::string client;
    Clock::time_point deadline;
    bool answering = false;  // the handler runs: the loop may take long (a reap)
    bool ended = false;
    std::optional<Clock::time_point> resume_at;  // suspended: over its client's rate
    // The request's credentials: checking (suspended meanwhile), then the verdict.
    enum class Credentials { unchecked, checking, let_in, refused } credentials{};
  };
  // A client's requests in the current second.
  struct Budget {
    Clock::time_point second;
    unsigned used = 0;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::map<MHD_Connection*, Open> open;
  std::map<std::string, unsigned> per_client;
  std::map<std::string, Budget> budgets;
  bool stopping = false;
  std::thread sweeper;

  ~Impl() {
    checks.reset();  // its workers call back into this: gone before anything else
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    if (sweeper.joinable()) sweeper.join();
    // Joins MHD's thread and closes every connection, suspended ones included.
    if (daemon) MHD_stop_daemon(daemon);
  }

  static void cut(Open& o) {
    if (!o.ended) ::shutdown(o.fd.get(), SHUT_RDWR);
    o.ended = true;
  }

  // Ends every connection past its deadline, resumes the suspended ones whose
  // second has come; sleeps until the next of either is due.
  void sweep() {
    std::unique_lock lock(mutex);
    while (!stopping) {
      auto now = Clock::now();
      auto next = Clock::time_point::max();
      std::vector<MHD_Connection*> due;
      for (auto& [connection, o] : open) {
        if (o.resume_at && now >= *o.resume_at) {
          o.resume_at.reset();
          due.push_back(connection);
        } else if (o.resume_at) {
          next = std::min(next, *o.resume_at);
        }
        if (o.answering || o.ended) continue;
        if (now >= o.deadline)
          cut(o);
        else
          next = std::min(next, o.deadline);
      }
      std::erase_if(budgets, [&](const auto& b) { return now - b.second.second >= 2s; });
      if (!due.empty()) {
        // Outside our lock: libmicrohttpd's thread may wait for it (on_connection)
        // while holding its own. A suspended connection is never closed by it
        // meanwhile, so the pointers stay good.
        lock.unlock();
        for (auto* connection : due) MHD_resume_connection(connection);
        lock.lock();
        continue;
      }
      if (next == Clock::time_point::max())
        changed.wait(lock);
      else
        changed.wait_until(lock, next);
    }
  }

  // Charges one request to the connection's client; false (and the connection
  // marked to be resumed at the next second) when its second's budget is spent.
  bool within_rate(MHD_Connection* connection) {
    std::lock_guard lock(mutex);
    auto it = open.find(connection);
    if (it == open.end()) return true;
    // Back from a credentials check: this request was charged before it.
    if (it->second.credentials != Open::Credentials::unchecked) return true;
    auto now = Clock::now();
    Budget& b = budgets[it->second.client];
    if (now - b.second >= 1s) b = {now, 0};
    if (b.used < kRequestsPerClientPerSecond) {
      ++b.used;
      return true;
    }
    // Never at once: the suspension must come first (libmicrohttpd's thread
    // suspends it right after this returns), or the resume would be lost.
    it->second.resume_at = std::max(b.second + 1s, now + 20ms);
    it->second.answering = true;  // waiting, not trickling: no deadline meanwhile
    changed.notify_all();
    return false;
  }

  static void on_connection(void* cls, MHD_Connection* connection, void**,
                            MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->mutex);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      auto it = self->open.find(connection);
      if (it == self->open.end()) return;
      if (--self->per_client[it->second.client] == 0) self->per_client.erase(it->second.client);
      self->open.erase(it);
      return;
    }
    const MHD_ConnectionInfo* fd_info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    const MHD_ConnectionInfo* addr_info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fd_info || !addr_info) return;
    Open o;
    o.fd.reset(::fcntl(fd_info->connect_fd, F_DUPFD_CLOEXEC, 0));
    if (!o.fd.valid()) return;
    o.client = client_key(o.fd.get(), addr_info->client_addr);
    o.deadline = Clock::now() + self->request_deadline;
    if (++self->per_client[o.client] > kConnectionsPerClient) cut(o);
    self->open.insert_or_assign(connection, std::move(o));
    self->changed.notify_all();
  }

  // While the handler runs the deadline waits; then the answer gets its own.
  void answering(MHD_Connection* connection, bool now_answering) {
    std::lock_guard lock(mutex);
    auto it = open.find(connection);
    if (it == open.end()) return;
    it->second.answering = now_answering;
    it->second.deadline = Clock::now() + request_deadline;
    changed.notify_all();
  }

  // A request answered: the next one on a kept-alive connection has its own deadline,
  // and its own credentials.
  static void on_completed(void* cls, MHD_Connection* connection, void**,
                           MHD_RequestTerminationCode) {
    auto* self = static_cast<Impl*>(cls);
    {
      std::lock_guard lock(self->mutex);
      if (auto it = self->open.find(connection); it != self->open.end())
        it->second.credentials = Open::Credentials::unchecked;
    }
    self->answering(connection, false);
  }

  // The request's credentials: let in or refused at once when that needs no bcrypt,
  // else `checking`: the connection is suspended and a worker resumes it with the
  // verdict (the suspension comes first, so the resume cannot be lost).
  Open::Credentials credentials(MHD_Connection* connection) {
    std::string client;
    {
      std::lock_guard lock(mutex);
      auto it = open.find(connection);
      if (it != open.end() && it->second.credentials != Open::Credentials::unchecked)
        return it->second.credentials;
      if (it != open.end()) client = it->second.client;
    }
    char* password = nullptr;
    char* user = MHD_basic_auth_get_username_password(connection, &password);
    std::string pass = password ? password : "";
    if (password) {
      std::memset(password, 0, std::strlen(password));
      MHD_free(password);
    }
    std::string name = user ? user : "";
    if (user) MHD_free(user);
    auto quick = checks->quick(client, user ? name.c_str() : nullptr, pass);
    auto verdict = quick == CredentialChecks::Quick::let_in    ? Open::Credentials::let_in
                   : quick == CredentialChecks::Quick::refused ? Open::Credentials::refused
                                                               : Open::Credentials::checking;
    if (verdict == Open::Credentials::checking) {
      std::lock_guard lock(mutex);
      auto it = open.find(connection);
      if (it == open.end()) {
        verdict = auth->check(name, pass) ? Open::Credentials::let_in : Open::Credentials::refused;
      } else {
        it->second.credentials = verdict;
        it->second.answering = true;  // waiting, not trickling: no deadline meanwhile
        changed.notify_all();
      }
    }
    if (verdict == Open::Credentials::checking) {
      MHD_suspend_connection(connection);
      checks->submit(client, std::move(name), std::move(pass), [this, connection](bool ok) {
        {
          std::lock_guard lock(mutex);
          auto it = open.find(connection);
          if (it == open.end()) return;
          it->second.credentials = ok ? Open::Credentials::let_in : Open::Credentials::refused;
        }
        // Suspended, so never closed by libmicrohttpd meanwhile: the pointer is good.
        MHD_resume_connection(connection);
      });
    }
    std::fill(pass.begin(), pass.end(), '\0');
    return verdict;
  }

  // 401 with `WWW-Authenticate: Basic realm="gpureap"`: no credentials, an unknown
  // user or a wrong password alike.
  static MHD_Result unauthorized(MHD_Connection* connection) {
    static constexpr std::string_view kBody = "unauthorized: this agent asks for a user and password\n";
    MHD_Response* response = MHD_create_response_from_buffer(
        kBody.size(), const_cast<char*>(kBody.data()), MHD_RESPMEM_PERSISTENT);
    if (!response) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_Result queued = MHD_queue_basic_auth_fail_response(connection, "gpureap", response);
    MHD_destroy_response(response);
    return queued;
  }

  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                               const char* method, const char*, const char*, std::size_t*, void**) {
    auto* self = static_cast<Impl*>(cls);
    std::string_view m = method;
    if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD)
      return send(connection, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, true);
    if (!self->within_rate(connection)) {
      // libmicrohttpd calls again for this request once the sweeper resumes it.
      MHD_suspend_connection(connection);
      return MHD_YES;
    }
    if (self->auth) {
      switch (self->credentials(connection)) {
        case Open::Credentials::checking: return MHD_YES;  // resumed with the verdict
        case Open::Credentials::refused: return unauthorized(connection);
        case Open::Credentials::unchecked:
        case Open::Credentials::let_in: break;
      }
    }
    self->answering(connection, true);
    HttpResponse response;
    try {
      response = self->handler(url);
    } catch (const std::exception& e) {
      response = {500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"};
    }
    self->answering(connection, false);
    return send(connection, response);
  }
};

Result<HttpServer> HttpServer::start(std::string_view listen, HttpHandler handler,
                                     const WebConfig& web, PasswordCheck matches,
                                     std::chrono::milliseconds request_deadline) {
  // TLS asked and GnuTLS missing is an error, never plain HTTP in its place.
  if (web.tls()) {
    if (auto loaded = load_gnutls(kGnutlsLibrary); !loaded)
      return fail("--web-config " + web.path + ": TLS needs GnuTLS (" + kGnutlsLibrary +
                  "): " + loaded.error().message);
  }
  auto address = parse_listen(listen);
  if (!address) return std::unexpected(address.error());
  auto fd = listen_on(listen, *address);
  if (!fd) return std::unexpected(fd.error());

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd->get(), reinterpret_cast<sockaddr*>(&bound), &len);
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->request_deadline = request_deadline;
  if (web.auth()) {
    impl->auth = std::make_unique<BasicAuth>(web.users, std::move(matches));
    impl->checks = std::make_unique<CredentialChecks>(*impl->auth);
  }
  impl->cert_pem = web.cert_pem;
  impl->key_pem = web.key_pem;
  impl->port = ntohs(address->ipv6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // One internal thread polling every connection: poll(), not select(), because the
  // agent holds many pidfds and a descriptor above FD_SETSIZE breaks select.
  // No MHD_USE_ERROR_LOG: library code does not print.
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                   (address->ipv6 ? MHD_USE_IPv6 : 0) | (web.tls() ? MHD_USE_TLS : 0);
  // The certificate and key, when TLS is asked (an empty array otherwise).
  std::vector<MHD_OptionItem> tls;
  if (web.tls()) {
    tls.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, impl->key_pem.data()});
    tls.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, impl->cert_pem.data()});
  }
  tls.push_back({MHD_OPTION_END, 0, nullptr});
  int raw_fd = fd->release();  // MHD owns it from here: MHD_stop_daemon closes it
  StopSignalsBlocked quiet;    // for MHD's thread and ours
  impl->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::on_request, impl.get(), MHD_OPTION_LISTEN_SOCKET, raw_fd,
      MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT,
      kConnectionLimit, MHD_OPTION_NOTIFY_CONNECTION, &Impl::on_connection, impl.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &Impl::on_completed, impl.get(), MHD_OPTION_ARRAY, tls.data(),
      MHD_OPTION_END);
  if (!impl->daemon && web.tls())
    return fail("--web-config " + web.path + ": GnuTLS refused the certificate " + web.cert_file +
                " or the key " + web.key_file + " (PEM, unencrypted, the key matching the "
                "certificate)");
  if (!impl->daemon)
    return fail("--listen " + std::string(listen) + ": libmicrohttpd could not start serving");
  impl->sweeper = std::thread([self = impl.get()] { self->sweep(); });
  return HttpServer(std::move(impl));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::HttpServer(HttpServer&&) noexcept = default;
HttpServer& HttpServer::operator=(HttpServer&&) noexcept = default;
HttpServer::~HttpServer() = default;

std::uint16_t HttpServer::port() const {
  return impl_->port;
}

Result<void> write_textfile(const std::string& dir, std::string_view text) {
  // node_exporter reads only *.prom files, so the temporary name (which ends in
  // random letters) is never read half-written; rename(2) replaces the old file
  // in one step, and a reader sees either the old text or the new.
  std::string tmp = dir + "/gpureap.prom.XXXXXX";
  int raw = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (raw < 0) return std::unexpected(Error::from_errno("--textfile " + dir + ": create a file"));
  UniqueFd fd(raw);
  auto failed = [&](const char* what) {
    auto err = Error::from_errno("--textfile " + dir + ": " + what);
    ::unlink(tmp.c_str());
    return std::unexpected(err);
  };
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("write");
    done += static_cast<std::size_t>(n);
  }
  // mkostemp creates 0600; node_exporter may run as another user.
  if (::fchmod(fd.get(), 0644) != 0) return failed("chmod");
  if (::fsync(fd.get()) != 0) return failed("fsync");
  if (::rename(tmp.c_str(), (dir + "/gpureap.prom").c_str()) != 0) return failed("rename");
  // The rename itself survives a crash once the directory is synced.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.valid()) ::fsync(dir_fd.get());
  return {};
}

}  // namespace gpureap::agent
