#pragma once
// `--web-config FILE`: remote scrapes, safely. The file is the Prometheus
// exporter-toolkit's web configuration (what node_exporter's --web.config.file
// reads), the subset gpureap serves:
//
//   tls_server_config:
//     cert_file: server.crt      # PEM; relative paths are the file's directory's
//     key_file: server.key       # PEM, unencrypted
//   basic_auth_users:
//     prometheus: $2y$10$...     # bcrypt (htpasswd -nBC 10 prometheus)
//
// Every other key of the toolkit (client_auth_type, client_ca_file, min_version,
// cipher_suites, http_server_config, ...) is refused by name rather than ignored:
// an ignored client_auth_type would serve everyone. docs/watch.md, "Remote scrapes".

#include <map>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gpureap::agent {

struct WebConfig {
  std::string path;       // the file, as --web-config named it ("": none)
  std::string cert_file;  // resolved paths; both empty: no TLS
  std::string key_file;
  std::string cert_pem;   // their contents (read_web_config)
  std::string key_pem;
  std::map<std::string, std::string> users;  // name -> bcrypt hash; empty: no authentication

  bool tls() const { return !cert_file.empty(); }
  bool auth() const { return !users.empty(); }
};

/// Parses the YAML text of a web configuration read from `path` (relative
/// cert_file and key_file are resolved against its directory). Errors say
/// "--web-config PATH: ..." and name the key; the files are not read.
Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& path);

/// Reads and parses `path`, then reads the certificate and key it names (PEM).
Result<WebConfig> read_web_config(const std::string& path);

/// True when `hash` is a bcrypt hash crypt_r can check ($2a$, $2b$ or $2y$, cost 4-31).
bool is_bcrypt_hash(std::string_view hash);

}  // namespace gpureap::agent
