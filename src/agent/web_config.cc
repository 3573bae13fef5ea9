// The exporter-toolkit's web configuration, read with libyaml's document API
// (Debian's libyaml-dev): the YAML grammar is the library's, the keys are ours.

#include "agent/web_config.h"

#include <yaml.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>

namespace gpureap::agent {
namespace {

// A web configuration is a few lines; anything larger is not one.
constexpr std::size_t kMaxFileBytes = 64 * 1024;
constexpr std::size_t kMaxPemBytes = 1024 * 1024;

struct Document {
  yaml_document_t doc{};
  bool loaded = false;
  ~Document() {
    if (loaded) yaml_document_delete(&doc);
  }
};

std::string_view scalar(const yaml_node_t* n) {
  return {reinterpret_cast<const char*>(n->data.scalar.value), n->data.scalar.length};
}

// `key:` with nothing after it, or `~`/`null`: absent, as Go's YAML reads it.
bool is_null(const yaml_node_t* n) {
  if (n->type != YAML_SCALAR_NODE) return false;
  if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  auto v = scalar(n);
  return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
}

class Reader {
 public:
  Reader(yaml_document_t* doc, std::string path) : doc_(doc), path_(std::move(path)) {}

  std::unexpected<Error> error(const std::string& what) const {
    return fail("--web-config " + path_ + ": " + what);
  }

  // Calls `each(key, value)` for every pair of a mapping node; refuses a
  // non-mapping (naming `what`) and a key that is not a scalar or appears twice.
  template <typename Each>
  Result<void> mapping(const yaml_node_t* n, const std::string& what, Each each) const {
    if (n->type != YAML_MAPPING_NODE) return error(what + " must be a mapping of keys to values");
    std::map<std::string, bool> seen;
    for (auto* pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; ++pair) {
      const yaml_node_t* k = yaml_document_get_node(doc_, pair->key);
      const yaml_node_t* v = yaml_document_get_node(doc_, pair->value);
      if (!k || !v || k->type != YAML_SCALAR_NODE) return error(what + ": a key must be a word");
      std::string key(scalar(k));
      if (seen[key]) return error(what + ": '" + key + "' is given twice");
      seen[key] = true;
      if (auto r = each(key, v); !r) return r;
    }
    return {};
  }

  Result<std::string> text(const yaml_node_t* v, const std::string& key) const {
    if (v->type != YAML_SCALAR_NODE || is_null(v)) return error(key + " must be a text value");
    return std::string(scalar(v));
  }

 private:
  yaml_document_t* doc_;
  std::string path_;
};

// The toolkit's keys that gpureap does not implement: refused by name.
constexpr std::array kUnsupportedTls{"cert",          "key",         "client_auth_type",
                                      "client_ca_file", "client_ca",   "client_allowed_sans",
                                      "cipher_suites", "curve_preferences", "min_version",
                                      "max_version",   "prefer_server_cipher_suites"};

// W4-10: an emptied file, or the last user removed, must not serve everyone silently.
constexpr const char* kProtectsNothing =
    "protects nothing: it names neither a certificate (tls_server_config) nor a user "
    "(basic_auth_users), so /metrics would be served to anyone over plain HTTP; name a user "
    "or a certificate, or leave --web-config out";

std::string resolve(const std::string& path, const std::string& file) {
  std::filesystem::path p(file);
  if (p.is_absolute()) return file;
  return (std::filesystem::path(path).parent_path() / p).string();
}

Result<std::string> read_small(const std::string& file, std::size_t cap, const std::string& what) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail(what + " " + file + ": " + std::strerror(errno));
  std::string text;
  text.resize(cap + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > cap) return fail(what + " " + file + ": larger than " + std::to_string(cap) + " bytes");
  return text;
}

}  // namespace

bool is_bcrypt_hash(std::string_view hash) {
  // $2y$10$ + 53 characters of bcrypt's base64: 60 in all.
  if (hash.size() != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' || hash[6] != '$')
    return false;
  if (hash[2] != 'a' && hash[2] != 'b' && hash[2] != 'y') return false;
  if (hash[4] < '0' || hash[4] > '3' || hash[5] < '0' || hash[5] > '9') return false;
  const int cost = (hash[4] - '0') * 10 + (hash[5] - '0');
  if (cost < 4 || cost > 31) return false;
  for (char c : hash.substr(7))
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '/') return false;
  return true;
}

Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& path) {
  WebConfig out;
  out.path = path;
  auto bad = [&](const std::string& what) { return fail("--web-config " + path + ": " + what); };
  if (yaml.size() > kMaxFileBytes) return bad("larger than 64 KiB: not a web configuration");

  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return bad("libyaml could not start");
  std::unique_ptr<yaml_parser_t, void (*)(yaml_parser_t*)> parser_owner(&parser,
                                                                        yaml_parser_delete);
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(yaml.data()),
                               yaml.size());
  Document d;
  if (!yaml_parser_load(&parser, &d.doc)) {
    return bad("not valid YAML (line " + std::to_string(parser.problem_mark.line + 1) + ": " +
               (parser.problem ? parser.problem : "unreadable") + ")");
  }
  d.loaded = true;
  const yaml_node_t* root = yaml_document_get_root_node(&d.doc);
  // An empty file (or comments only) asks for nothing: refused below.
  if (!root || is_null(root)) return bad(kProtectsNothing);
  Reader r(&d.doc, path);

  bool tls_given = false;
  auto top = r.mapping(root, "the file", [&](const std::string& key, const yaml_node_t* v)
                                             -> Result<void> {
    if (key == "tls_server_config") {
      if (is_null(v)) return {};
      tls_given = true;
      return r.mapping(v, key, [&](const std::string& k, const yaml_node_t* tv) -> Result<void> {
        if (k == "cert_file" || k == "key_file") {
          auto t = r.text(tv, key + "." + k);
          if (!t) return std::unexpected(t.error());
          if (t->empty()) return r.error(key + "." + k + " is empty");
          (k == "cert_file" ? out.cert_file : out.key_file) = resolve(path, *t);
          return {};
        }
        for (const char* u : kUnsupportedTls)
          if (k == u)
            return r.error(key + "." + k +
                           " is not supported by gpureap (it serves cert_file and key_file; "
                           "client certificates and TLS versions are GnuTLS's defaults)");
        return r.error(key + ": unknown key '" + k + "' (known: cert_file, key_file)");
      });
    }
    if (key == "basic_auth_users") {
      if (is_null(v)) return {};
      return r.mapping(v, key, [&](const std::string& name, const yaml_node_t* hv) -> Result<void> {
        if (name.empty() || name.find(':') != std::string::npos)
          return r.error(key + ": a user name must be non-empty and without ':'");
        auto hash = r.text(hv, key + "." + name);
        if (!hash) return std::unexpected(hash.error());
        if (!is_bcrypt_hash(*hash))
          return r.error(key + "." + name +
                         " must be a bcrypt hash ($2y$..., 60 characters), e.g. from "
                         "`htpasswd -nBC 10 " + name + "`; a password is never stored as it is");
        out.users[name] = *hash;
        return {};
      });
    }
    if (key == "http_server_config")
      return r.error(key + " is not supported by gpureap (HTTP/1.1 only, no extra headers)");
    return r.error("unknown key '" + key +
                   "' (gpureap reads tls_server_config and basic_auth_users)");
  });
  if (!top) return std::unexpected(top.error());
  if (tls_given && (out.cert_file.empty() || out.key_file.empty()))
    return bad("tls_server_config needs both cert_file and key_file");
  if (!out.tls() && !out.auth()) return bad(kProtectsNothing);
  return out;
}

Result<WebConfig> read_web_config(const std::string& path) {
  auto text = read_small(path, kMaxFileBytes, "--web-config");
  if (!text) return std::unexpected(text.error());
  auto config = parse_web_config(*text, path);
  if (!config) return config;
  if (config->tls()) {
    auto cert = read_small(config->cert_file, kMaxPemBytes, "--web-config " + path + ": cert_file");
    if (!cert) return std::unexpected(cert.error());
    auto key = read_small(config->key_file, kMaxPemBytes, "--web-config " + path + ": key_file");
    if (!key) return std::unexpected(key.error());
    if (cert->find("-----BEGIN ") == std::string::npos)
      return fail("--web-config " + path + ": cert_file " + config->cert_file + " is not PEM");
    if (key->find("-----BEGIN ") == std::string::npos)
      return fail("--web-config " + path + ": key_file " + config->key_file + " is not PEM");
    if (key->find("ENCRYPTED") != std::string::npos)
      return fail("--web-config " + path + ": key_file " + config->key_file +
                  " is encrypted: gpureap reads an unencrypted key (mode 0600, owned by the agent)");
    config->cert_pem = std::move(*cert);
    config->key_pem = std::move(*key);
  }
  return config;
}

}  // namespace gpureap::agent
