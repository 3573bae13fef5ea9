#include "agent/kube_api.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>

namespace gpureap::agent {
namespace {

bool loopback_http(std::string_view url) {
  for (std::string_view host : {"http://127.0.0.1:", "http://localhost:", "http://[::1]:"})
    if (url.starts_with(host)) return true;
  return false;
}

Result<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::unexpected(Error::from_errno("the service account token " + path));
  std::string token(std::istreambuf_iterator<char>(in), {});
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  if (token.empty()) return fail("the service account token " + path + " is empty");
  return token;
}

std::string reason_phrase(long status) {
  switch (status) {
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 409: return "Conflict";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    default: return status >= 500 ? "Server Error" : "";
  }
}

}  // namespace

bool is_dns_subdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  char last = '.';
  for (char c : name) {
    if (c == '.') {
      if (label == 0 || last == '-') return false;
      label = 0;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') {
      if (label == 0 && c == '-') return false;
      ++label;
    } else {
      return false;
    }
    last = c;
  }
  return label > 0 && last != '-';
}

Result<KubeEndpoint> kube_endpoint_from_environment(
    const std::function<const char*(const char*)>& env) {
  auto get = [&](const char* name) -> std::string {
    const char* v = env(name);
    return v ? v : "";
  };
  KubeEndpoint e;
  e.node = get("NODE_NAME");
  if (e.node.empty())
    return fail("--gate kubernetes: NODE_NAME is not set (the downward API's spec.nodeName)");
  if (!is_dns_subdomain(e.node))
    return fail("--gate kubernetes: NODE_NAME '" + e.node + "' is not a node name");
  e.server = get("GPUREAP_KUBE_API");
  if (e.server.empty()) {
    const std::string host = get("KUBERNETES_SERVICE_HOST"), port = get("KUBERNETES_SERVICE_PORT");
    if (host.empty() || port.empty())
      return fail(
          "--gate kubernetes: KUBERNETES_SERVICE_HOST and _PORT are not set (not in a pod); "
          "GPUREAP_KUBE_API names the API server");
    // An IPv6 service address goes in brackets.
    e.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
               ":" + port;
  }
  while (e.server.ends_with('/')) e.server.pop_back();
  if (!e.server.starts_with("https://") && !loopback_http(e.server))
    return fail("--gate kubernetes: GPUREAP_KUBE_API '" + e.server +
                "' is neither https:// nor http:// to the loopback");
  const std::string sa = kServiceAccountDir;
  e.token_file = get("GPUREAP_KUBE_TOKEN_FILE");
  if (e.token_file.empty()) e.token_file = sa + "/token";
  e.ca_file = get("GPUREAP_KUBE_CA_FILE");
  if (e.ca_file.empty() && e.server.starts_with("https://")) e.ca_file = sa + "/ca.crt";
  return e;
}

std::string KubeReply::describe() const {
  std::string out = std::to_string(status);
  if (auto phrase = reason_phrase(status); !phrase.empty()) out += " " + phrase;
  if (body.is_object() && body.contains("message") && body["message"].is_string())
    out += ": " + body["message"].get<std::string>();
  return out;
}

KubeApi::KubeApi(KubeEndpoint endpoint, std::unique_ptr<HttpTransport> transport)
    : endpoint_(std::move(endpoint)), transport_(std::move(transport)) {}

Result<KubeReply> KubeApi::get_node() {
  return request("GET", "/api/v1/nodes/" + endpoint_.node, "", "");
}

Result<KubeReply> KubeApi::patch_node(std::string_view content_type, const nlohmann::json& patch,
                                      bool status) {
  return request("PATCH", "/api/v1/nodes/" + endpoint_.node + (status ? "/status" : ""),
                 content_type, patch.dump());
}

Result<KubeReply> KubeApi::call(const std::string& method, const std::string& path,
                                const nlohmann::json& body) {
  return request(method, path, body.is_null() ? "" : "application/json",
                 body.is_null() ? "" : body.dump());
}

Result<KubeReply> KubeApi::request(const std::string& method, const std::string& path,
                                   std::string_view content_type, const std::string& body) {
  Result<HttpReply> response = fail("");
  // The token is read for every request; on a 401 once more, since the kubelet may have
  // rotated it between the read and the request.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto token = read_token(endpoint_.token_file);
    if (!token) return std::unexpected(token.error());
    HttpCall r{method, endpoint_.server + path, {"Accept: application/json"}, body};
    r.headers.push_back("Authorization: Bearer " + *token);
    if (!content_type.empty()) r.headers.push_back(fmt::format("Content-Type: {}", content_type));
    response = transport_->send(r);
    if (!response || response->status != 401) break;
  }
  if (!response) return std::unexpected(response.error());
  KubeReply reply{response->status, nlohmann::json::parse(response->body, nullptr, false)};
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

}  // namespace gpureap::agent
