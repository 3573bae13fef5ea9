#pragma once
// The agent's HTTP endpoint (`/metrics`, a landing page at `/`), served by
// libmicrohttpd (Debian's libmicrohttpd-dev): no HTTP parsing of our own; with a
// web configuration (--web-config) over TLS (GnuTLS, loaded on demand) and behind
// basic authentication (each password checked on a worker thread, never on the
// library's, W4-09). The handler runs on the library's thread; it must be thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "agent/basic_auth.h"
#include "agent/web_config.h"
#include "util/result.h"

namespace gpureap::agent {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Called for each GET/HEAD with the request path ("/metrics"); other methods get 405.
using HttpHandler = std::function<HttpResponse(std::string_view path)>;

/// Default listen address (docs/metrics.md, "Why port 9847").
inline constexpr const char* kDefaultListen = "127.0.0.1:9847";

/// A request must arrive whole, and its answer be taken, within this long, however it
/// trickles: one header line a second no longer keeps a connection (W2-03).
/// Prometheus' default scrape_timeout is 10 s too.
inline constexpr std::chrono::milliseconds kRequestDeadline{10000};

class HttpServer {
 public:
  /// Parses `listen` ("ADDR:PORT", "[v6]:PORT"; port 0 picks a free one) and starts
  /// serving. Fails with a message naming the address (in use, bad address). With
  /// `web.tls()` it serves HTTPS only (GnuTLS must load: agent/gnutls_load.h; it
  /// never falls back to plain HTTP); with `web.auth()` every request needs one of
  /// its users' passwords, else 401 with `WWW-Authenticate: Basic`.
  /// The passwords are checked off the serving thread (agent/credential_checks.h), by
  /// `matches` (a test's stand-in; bcrypt otherwise). `request_deadline`: a test's
  /// shorter kRequestDeadline.
  static Result<HttpServer> start(std::string_view listen, HttpHandler handler,
                                  const WebConfig& web = {},
                                  PasswordCheck matches = bcrypt_matches,
                                  std::chrono::milliseconds request_deadline = kRequestDeadline);
  HttpServer(HttpServer&&) noexcept;
  HttpServer& operator=(HttpServer&&) noexcept;
  ~HttpServer();  // stops serving, waits for requests in flight

  std::uint16_t port() const;  // the port bound (useful with port 0)

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Writes `text` to DIR/gpureap.prom atomically (temporary file in DIR, fsync,
/// rename), as node_exporter's textfile collector wants it.
Result<void> write_textfile(const std::string& dir, std::string_view text);

}  // namespace gpureap::agent
