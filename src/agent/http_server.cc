// libmicrohttpd does the HTTP; this file owns the listening socket, so that a bind
// failure comes back with its errno (MHD_start_daemon only returns NULL) and the
// address is exactly the one the user named: no dual-stack surprise, no
// SO_REUSEPORT sharing with a second agent.

#include "agent/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <filesystem>

#include "util/fd.h"

namespace gpureap::agent {
namespace {

// A client that stalls is dropped after this long; with one polling thread and
// non-blocking sockets it never holds up another client meanwhile.
constexpr unsigned kConnectionTimeoutSeconds = 10;
// Prometheus opens one connection per scrape; a few people with curl add a few.
constexpr unsigned kConnectionLimit = 32;

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
  MHD_Daemon* daemon = nullptr;
  std::uint16_t port = 0;

  ~Impl() {
    if (daemon) MHD_stop_daemon(daemon);  // joins the thread, closes the socket
  }

  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                               const char* method, const char*, const char*, std::size_t*, void**) {
    auto* self = static_cast<Impl*>(cls);
    std::string_view m = method;
    if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD)
      return send(connection, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, true);
    try {
      return send(connection, self->handler(url));
    } catch (const std::exception& e) {
      return send(connection, {500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"});
    }
  }
};

Result<HttpServer> HttpServer::start(std::string_view listen, HttpHandler handler) {
  auto address = parse_listen(listen);
  if (!address) return std::unexpected(address.error());
  auto fd = listen_on(listen, *address);
  if (!fd) return std::unexpected(fd.error());

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd->get(), reinterpret_cast<sockaddr*>(&bound), &len);
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->port = ntohs(address->ipv6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // One internal thread polling every connection: poll(), not select(), because the
  // agent holds many pidfds and a descriptor above FD_SETSIZE breaks select.
  // No MHD_USE_ERROR_LOG: library code does not print.
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | (address->ipv6 ? MHD_USE_IPv6 : 0);
  int raw_fd = fd->release();  // MHD owns it from here: MHD_stop_daemon closes it
  impl->daemon = MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::on_request, impl.get(),
                                  MHD_OPTION_LISTEN_SOCKET, raw_fd, MHD_OPTION_CONNECTION_TIMEOUT,
                                  kConnectionTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT,
                                  kConnectionLimit, MHD_OPTION_END);
  if (!impl->daemon)
    return fail("--listen " + std::string(listen) + ": libmicrohttpd could not start serving");
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
