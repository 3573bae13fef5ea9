// Remote scrapes, safely (issue 38, item 8): `gpureap watch --web-config FILE` with
// the exporter-toolkit's format. A self-signed certificate made by openssl in the
// test's directory, a bcrypt hash made by libxcrypt (as `htpasswd -nBC` makes one);
// curl checks TLS with --cacert and basic auth (no credentials, a wrong password,
// an unknown user: 401 with WWW-Authenticate: Basic); a real Prometheus scrapes the
// agent over TLS with basic auth; a machine without GnuTLS (GPUREAP_GNUTLS_LIBRARY
// naming none) refuses TLS with exit 2 rather than serving plain HTTP.

#include <crypt.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "harness.h"
#include "prometheus_harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace watch_web_config_test {

using namespace std::chrono_literals;

std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!::crypt_gensalt_rn("$2y$", 5, nullptr, 0, salt, sizeof salt)) return "";
  crypt_data data{};
  const char* out = ::crypt_r(password.c_str(), salt, &data);
  return out && out[0] != '*' ? out : "";
}

// A directory of the test's own (0700) with a self-signed certificate for
// 127.0.0.1 and a web configuration `web.yml` (0600) naming it, or not.
struct WebDir {
  std::string dir;
  WebDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/gpureap-web-XXXXXX";
    dir = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~WebDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  bool make_certificate() const {
    auto r = run_command({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                          "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                          dir + "/server.key", "-out", dir + "/server.crt"},
                         {{"PATH", "/usr/bin:/bin"}}, 30s);
    if (r.exit_code != 0) ADD_FAILURE() << "openssl: " << r.err;
    return r.exit_code == 0;
  }
  std::string write(const std::string& yaml) const {
    std::string path = dir + "/web.yml";
    std::ofstream(path) << yaml;
    ::chmod(path.c_str(), 0600);
    return path;
  }
  std::string cert() const { return dir + "/server.crt"; }
};

struct Curl {
  int code = 0;            // HTTP status, 0: none
  std::string headers;     // the response's header lines
  std::string body;
  int exit_code = -1;
};

Curl curl(const std::vector<std::string>& extra, const std::string& url) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time", "10", "-D", "/dev/stderr",
                                   "-o", "/dev/stdout", "-w", "\ncode=%{http_code}"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  auto r = run_command(argv, {{"PATH", "/usr/bin:/bin"}}, 30s);
  Curl c;
  c.exit_code = r.exit_code;
  c.headers = r.err;
  auto at = r.out.rfind("\ncode=");
  if (at != std::string::npos) {
    c.code = std::atoi(r.out.c_str() + at + 6);
    c.body = r.out.substr(0, at);
  }
  return c;
}

bool curl_exists() { return ::access("/usr/bin/curl", X_OK) == 0 && ::access("/usr/bin/openssl", X_OK) == 0; }

TEST(WebConfig, TlsAndBasicAuthWithCurl) {
  if (!curl_exists()) GTEST_SKIP() << "curl and openssl are needed (scripts/install-deps.sh)";
  WebDir web;
  ASSERT_TRUE(web.make_certificate());
  const std::string hash = bcrypt("s3cret pass");
  ASSERT_FALSE(hash.empty());
  // Relative cert_file and key_file: the web configuration's directory.
  const std::string config = web.write("tls_server_config:\n  cert_file: server.crt\n"
                                       "  key_file: server.key\nbasic_auth_users:\n"
                                       "  prometheus: '" + hash + "'\n");
  SimNode node;
  auto agent = start_listening_agent(node, {"--web-config", config});
  ASSERT_NE(agent.port, 0);
  const std::string url = "https://127.0.0.1:" + std::to_string(agent.port) + "/metrics";

  auto ok = curl({"--cacert", web.cert(), "-u", "prometheus:s3cret pass"}, url);
  EXPECT_EQ(ok.code, 200) << ok.headers << ok.body;
  EXPECT_NE(ok.body.find("gpureap_build_info"), std::string::npos) << ok.body;

  auto wrong = curl({"--cacert", web.cert(), "-u", "prometheus:s3cret pas"}, url);
  EXPECT_EQ(wrong.code, 401) << wrong.headers;
  EXPECT_NE(wrong.headers.find("WWW-Authenticate: Basic"), std::string::npos) << wrong.headers;
  EXPECT_EQ(wrong.body.find("gpureap_"), std::string::npos) << wrong.body;

  auto none = curl({"--cacert", web.cert()}, url);
  EXPECT_EQ(none.code, 401) << none.headers;
  EXPECT_NE(none.headers.find("WWW-Authenticate: Basic"), std::string::npos) << none.headers;

  auto stranger = curl({"--cacert", web.cert(), "-u", "mallory:s3cret pass"}, url);
  EXPECT_EQ(stranger.code, 401) << stranger.headers;

  // /healthz too: every path is behind the password.
  auto health = curl({"--cacert", web.cert()},
                     "https://127.0.0.1:" + std::to_string(agent.port) + "/healthz");
  EXPECT_EQ(health.code, 401) << health.headers;

  // The certificate is checked (no --cacert: curl refuses a self-signed one), and
  // there is no plain HTTP on the port.
  auto untrusted = curl({"-u", "prometheus:s3cret pass"}, url);
  EXPECT_EQ(untrusted.code, 0);
  EXPECT_NE(untrusted.exit_code, 0);
  auto plain = http_get(agent.port, "/metrics", 5s);
  EXPECT_NE(plain.status, 200) << plain.body;
  // W4-10: the start line says HTTPS and that a password is asked.
  EXPECT_NE(agent.child->transcript().find(R"("tls":true,"basic_auth_users":1,)"),
            std::string::npos)
      << agent.child->transcript();
  EXPECT_EQ(agent.child->terminate(), 0) << agent.child->transcript();
}

TEST(WebConfig, PrometheusScrapesOverTlsWithBasicAuth) {
  if (!curl_exists()) GTEST_SKIP() << "openssl is needed (scripts/install-deps.sh)";
  WebDir web;
  ASSERT_TRUE(web.make_certificate());
  const std::string config = web.write("tls_server_config:\n  cert_file: " + web.cert() +
                                       "\n  key_file: " + web.dir + "/server.key\n"
                                       "basic_auth_users:\n  prometheus: '" +
                                       bcrypt("scrape-me") + "'\n");
  SimNode node;
  auto agent = start_listening_agent(node, {"--web-config", config});
  ASSERT_NE(agent.port, 0);
  PrometheusServer prometheus(agent.listen, {},
                              "    scheme: https\n"
                              "    tls_config:\n"
                              "      ca_file: " + web.cert() + "\n"
                              "    basic_auth:\n"
                              "      username: prometheus\n"
                              "      password: scrape-me\n");
  ASSERT_TRUE(prometheus.started());
  nlohmann::json last;
  auto up = [](const nlohmann::json& r) {
    auto v = by_label(r, "job");
    return v.size() == 1 && v.begin()->second == 1;
  };
  EXPECT_TRUE(prometheus.wait_for("up", up, 30s, &last)) << last << "\n" << prometheus.log();
  EXPECT_TRUE(prometheus.wait_for(
      "count(gpureap_gpu_up)",  // the simulated node's 8 GPUs, ingested over TLS
      [](const nlohmann::json& r) {
        auto v = by_label(r, "job");
        return v.size() == 1 && v.begin()->second == 8;
      },
      30s,
      &last))
      << last;
}

TEST(WebConfig, PrometheusWithAWrongPasswordIsKeptOut) {
  if (!curl_exists()) GTEST_SKIP() << "openssl is needed (scripts/install-deps.sh)";
  WebDir web;
  ASSERT_TRUE(web.make_certificate());
  const std::string config = web.write("tls_server_config:\n  cert_file: server.crt\n"
                                       "  key_file: server.key\nbasic_auth_users:\n"
                                       "  prometheus: '" + bcrypt("right") + "'\n");
  SimNode node;
  auto agent = start_listening_agent(node, {"--web-config", config});
  ASSERT_NE(agent.port, 0);
  PrometheusServer prometheus(agent.listen, {},
                              "    scheme: https\n    tls_config:\n      ca_file: " + web.cert() +
                                  "\n    basic_auth:\n      username: prometheus\n"
                                  "      password: wrong\n");
  ASSERT_TRUE(prometheus.started());
  nlohmann::json last;
  // The scrape happens and fails: up is 0 (a series), never 1.
  EXPECT_TRUE(prometheus.wait_for(
      "up",
      [](const nlohmann::json& r) {
        auto v = by_label(r, "job");
        return v.size() == 1 && v.begin()->second == 0;
      },
      30s, &last))
      << last << "\n" << prometheus.log();
}

TEST(WebConfig, BasicAuthAloneOverPlainHttp) {
  if (!curl_exists()) GTEST_SKIP() << "curl is needed (scripts/install-deps.sh)";
  WebDir web;
  const std::string config = web.write("basic_auth_users:\n  alice: '" + bcrypt("pw") + "'\n");
  SimNode node;
  // No GnuTLS needed when the file asks for no TLS.
  auto agent = start_listening_agent(node, {"--web-config", config});
  ASSERT_NE(agent.port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(agent.port) + "/metrics";
  EXPECT_EQ(curl({"-u", "alice:pw"}, url).code, 200);
  EXPECT_EQ(curl({"-u", "alice:pW"}, url).code, 401);
  EXPECT_EQ(http_get(agent.port, "/metrics").status, 401);
}

TEST(WebConfig, WithoutGnutlsTlsIsRefusedAtStart) {
  if (!curl_exists()) GTEST_SKIP() << "openssl is needed (scripts/install-deps.sh)";
  WebDir web;
  ASSERT_TRUE(web.make_certificate());
  const std::string config =
      web.write("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
  SimNode node;
  auto r = node.gpureap({"watch", "--listen", "127.0.0.1:0", "--web-config", config}, 30s,
                        {{"GPUREAP_GNUTLS_LIBRARY", web.dir + "/no-libgnutls.so"}});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--web-config " + config + ": tls_server_config needs GnuTLS"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
}

TEST(WebConfig, MistakesStopTheStartNamingTheOption) {
  WebDir web;
  SimNode node;
  auto start = [&](const std::string& config) {
    return node.gpureap({"watch", "--listen", "127.0.0.1:0", "--web-config", config}, 30s);
  };
  auto missing = start(web.dir + "/none.yml");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--web-config " + web.dir + "/none.yml"), std::string::npos)
      << missing.err;

  auto plain_password = start(web.write("basic_auth_users:\n  alice: hunter2\n"));
  EXPECT_EQ(plain_password.exit_code, 2) << plain_password.err;
  EXPECT_NE(plain_password.err.find("basic_auth_users.alice must be a bcrypt hash"),
            std::string::npos)
      << plain_password.err;

  auto client_auth = start(web.write(
      "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: "
      "RequireAndVerifyClientCert\n"));
  EXPECT_EQ(client_auth.exit_code, 2) << client_auth.err;
  EXPECT_NE(client_auth.err.find("client_auth_type is not supported"), std::string::npos)
      << client_auth.err;

  auto no_cert = start(web.write("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n"));
  EXPECT_EQ(no_cert.exit_code, 2) << no_cert.err;
  EXPECT_NE(no_cert.err.find("cert_file " + web.dir + "/a.crt"), std::string::npos) << no_cert.err;

  // Writable by others: whoever can write it decides who reads the metrics.
  std::string open_file = web.write("basic_auth_users:\n  alice: '" + bcrypt("pw") + "'\n");
  ::chmod(open_file.c_str(), 0666);
  auto writable = start(open_file);
  EXPECT_EQ(writable.exit_code, 2) << writable.err;
  EXPECT_NE(writable.err.find("is writable by everyone"), std::string::npos) << writable.err;

  // W4-10: a file that protects nothing (the last user removed) is refused, not served
  // to anyone over plain HTTP.
  auto emptied = start(web.write("basic_auth_users: {}\n"));
  EXPECT_EQ(emptied.exit_code, 2) << emptied.err;
  EXPECT_NE(emptied.err.find("--web-config " + web.dir + "/web.yml: protects nothing"),
            std::string::npos)
      << emptied.err;
  EXPECT_EQ(emptied.out.find("started"), std::string::npos) << emptied.out;
}

// W4-10: the private key is the agent's identity: readable by others, it is refused.
TEST(WebConfig, AKeyOthersCanReadIsRefused) {
  if (!curl_exists()) GTEST_SKIP() << "openssl is needed (scripts/install-deps.sh)";
  WebDir web;
  ASSERT_TRUE(web.make_certificate());
  const std::string key = web.dir + "/server.key";
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  SimNode node;
  auto r = node.gpureap({"watch", "--listen", "127.0.0.1:0", "--web-config",
                         web.write("tls_server_config:\n  cert_file: server.crt\n"
                                   "  key_file: server.key\n")},
                        30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--web-config " + web.dir + "/web.yml: key_file " + key +
                       ": the file is readable by everyone (mode 0644)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
}

}  // namespace watch_web_config_test
}  // namespace gpureap::e2e
