#pragma once
// The Kubernetes API as the gate uses it (agent/kube_gate.h): read this node, patch it,
// patch its status; create, read and delete DeviceTaintRules (agent/device_taint_gate.h).
// A handful of REST requests on an HttpTransport, no generated client.
// In a pod: the API server from KUBERNETES_SERVICE_HOST/PORT (https, verified against
// the service account's ca.crt), the bearer token read from the service account's token
// file on every request (the kubelet rotates it), and once more on a 401; the node's
// name from NODE_NAME (the downward API, contrib/kubernetes/gpureap-daemonset.yaml).

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/http_client.h"
#include "util/result.h"

namespace gpureap::agent {

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

/// An RFC 1123 subdomain, as the name of a node or a cluster-scoped object must be (it
/// goes into the URL unescaped): dot-separated labels of [a-z0-9-], none empty, none
/// starting or ending with '-', at most 253 characters.
bool is_dns_subdomain(std::string_view name);

/// Where the API server is, how to trust it and how to authenticate, and this node.
struct KubeEndpoint {
  std::string server;      // "https://10.96.0.1:443", or http:// to the loopback only
  std::string token_file;  // the bearer token, re-read on every request
  std::string ca_file;     // the server's CA ("" with http://)
  std::string node;        // this node's name
};

/// From `env`: NODE_NAME; the server from GPUREAP_KUBE_API, else
/// https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT; the token and CA files from
/// GPUREAP_KUBE_TOKEN_FILE and GPUREAP_KUBE_CA_FILE, else the service account's. Fails
/// naming the variable that is missing or wrong (exit 2): a node name that is not a
/// DNS subdomain, a server that is neither https:// nor http:// to the loopback (the
/// token never travels in clear over a network).
Result<KubeEndpoint> kube_endpoint_from_environment(
    const std::function<const char*(const char*)>& env);

/// An answer of the API server: its status and its JSON body (null when not JSON).
struct KubeReply {
  long status = 0;
  nlohmann::json body;
  bool ok() const { return status >= 200 && status < 300; }
  /// "409 Conflict: <the Status object's message>".
  std::string describe() const;
};

class KubeApi {
 public:
  KubeApi(KubeEndpoint endpoint, std::unique_ptr<HttpTransport> transport);

  const std::string& node() const { return endpoint_.node; }
  /// GET /api/v1/nodes/NODE.
  Result<KubeReply> get_node();
  /// PATCH /api/v1/nodes/NODE (or its /status) with `content_type`
  /// (application/json-patch+json, application/merge-patch+json,
  /// application/strategic-merge-patch+json).
  Result<KubeReply> patch_node(std::string_view content_type, const nlohmann::json& patch,
                               bool status);
  /// Any other request (agent/device_taint_gate.h): `path` from the server's root
  /// ("/apis/resource.k8s.io/v1/devicetaintrules"), the body as application/json unless
  /// null.
  Result<KubeReply> call(const std::string& method, const std::string& path,
                         const nlohmann::json& body = nullptr);

 private:
  Result<KubeReply> request(const std::string& method, const std::string& path,
                            std::string_view content_type, const std::string& body);

  KubeEndpoint endpoint_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace gpureap::agent
