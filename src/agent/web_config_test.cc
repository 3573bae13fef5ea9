#include "agent/web_config.h"

#include <gtest/gtest.h>

namespace gpureap::agent {
namespace {

const std::string kHash = "$2y$10$0123456789abcdefghijkuVwXyZ./ABCDEFGHIJKLMNOPQRSTUVWX";

TEST(WebConfig, ReadsTlsFilesAndUsers) {
  auto c = parse_web_config("tls_server_config:\n"
                            "  cert_file: server.crt\n"
                            "  key_file: /etc/gpureap/server.key\n"
                            "basic_auth_users:\n"
                            "  prometheus: " + kHash + "\n",
                            "/etc/gpureap/web.yml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->tls());
  EXPECT_EQ(c->cert_file, "/etc/gpureap/server.crt");  // relative: the file's directory
  EXPECT_EQ(c->key_file, "/etc/gpureap/server.key");
  ASSERT_EQ(c->users.size(), 1u);
  EXPECT_EQ(c->users.at("prometheus"), kHash);
}

TEST(WebConfig, BasicAuthAlone) {
  auto c = parse_web_config("basic_auth_users: {alice: '" + kHash + "'}\n", "w.yml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(c->tls());
  EXPECT_TRUE(c->auth());
}

void expect_refused(const std::string& yaml, const std::string& says) {
  auto c = parse_web_config(yaml, "/etc/w.yml");
  ASSERT_FALSE(c) << yaml;
  EXPECT_NE(c.error().message.find("--web-config /etc/w.yml: "), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find(says), std::string::npos) << c.error().message;
}

TEST(WebConfig, RefusesWhatItDoesNotServe) {
  // Ignored, client_auth_type would let in everyone it was meant to keep out.
  expect_refused("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                 "  client_auth_type: RequireAndVerifyClientCert\n",
                 "tls_server_config.client_auth_type is not supported");
  expect_refused("http_server_config:\n  http2: false\n", "http_server_config is not supported");
  expect_refused("tls_config:\n  cert_file: a\n", "unknown key 'tls_config'");
  expect_refused("tls_server_config:\n  cert_file: a\n", "needs both cert_file and key_file");
  expect_refused("tls_server_config:\n  cert_fil: a\n", "unknown key 'cert_fil'");
  expect_refused("basic_auth_users:\n  alice: hunter2\n",
                 "basic_auth_users.alice must be a bcrypt hash");
  expect_refused("basic_auth_users:\n  alice: " + kHash + "\n  alice: " + kHash + "\n",
                 "'alice' is given twice");
  expect_refused("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping");
  expect_refused("tls_server_config: {cert_file: [a], key_file: b}\n",
                 "cert_file must be a text value");
  expect_refused("tls_server_config:\n cert_file: a\n  key_file: b\n", "not valid YAML (line ");
  expect_refused("- a\n- b\n", "the file must be a mapping");
}

// W4-10: a file that protects nothing is refused, never served as plain HTTP to anyone.
TEST(WebConfig, W4_10_RefusesAFileThatProtectsNothing) {
  for (const char* yaml : {"", "# nothing yet\n", "basic_auth_users: {}\n", "basic_auth_users:\n",
                           "tls_server_config:\nbasic_auth_users: ~\n"})
    expect_refused(yaml, "protects nothing: it names neither a certificate (tls_server_config) "
                         "nor a user (basic_auth_users)");
}

TEST(WebConfig, KnowsABcryptHash) {
  EXPECT_TRUE(is_bcrypt_hash(kHash));
  EXPECT_TRUE(is_bcrypt_hash("$2b$04$" + kHash.substr(7)));
  EXPECT_FALSE(is_bcrypt_hash("$2x$10$" + kHash.substr(7)));
  EXPECT_FALSE(is_bcrypt_hash("$2y$03$" + kHash.substr(7)));   // cost below 4
  EXPECT_FALSE(is_bcrypt_hash(kHash.substr(0, 59)));
  EXPECT_FALSE(is_bcrypt_hash("$6$salt$" + kHash.substr(8)));  // SHA-512 crypt
  EXPECT_FALSE(is_bcrypt_hash("$2y$10$" + kHash.substr(7, 52) + "!"));
}

}  // namespace
}  // namespace gpureap::agent
