#pragma once
// The few HTTP requests the Kubernetes gate makes (agent/kube_api.h), behind one seam: a
// transport takes a request and gives the status and body back, so the requests are
// built and read in tests on a fake, and sent in the agent by libcurl. libcurl is
// dlopen'ed (libcurl.so.4, Debian's libcurl4 or libcurl3-gnutls) the first time a
// transport is made, as GnuTLS is for --web-config (agent/gnutls_load.h): the binary
// needs no libcurl to start, and only `watch --gate kubernetes-*` needs it at all.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "util/result.h"

namespace gpureap::agent {

struct HttpCall {
  std::string method;  // "GET", "PATCH"
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
};

struct HttpReply {
  long status = 0;
  std::string body;
};

/// Sends one request at a time (the gate's thread). A transport failure (no answer, a
/// TLS error, the deadline) is an Error; any HTTP status is a response.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual Result<HttpReply> send(const HttpCall& request) = 0;
};

/// libcurl's transport: https verified against `ca_file` (the service account's ca.crt;
/// "" for the system's CAs), each request bounded by `timeout`. Fails when libcurl
/// cannot be loaded, saying which library was looked for.
Result<std::unique_ptr<HttpTransport>> make_curl_transport(std::string ca_file,
                                                           std::chrono::milliseconds timeout);

}  // namespace gpureap::agent
