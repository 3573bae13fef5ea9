#include "agent/basic_auth.h"

#include <crypt.h>
#include <gtest/gtest.h>

#include "agent/web_config.h"

namespace gpureap::agent {
namespace {

// A bcrypt hash made by libxcrypt itself (as htpasswd -B makes one), cost 4 to
// keep the test quick.
std::string hash_of(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!::crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof salt)) return "";
  crypt_data data{};
  const char* out = ::crypt_r(password.c_str(), salt, &data);
  return out && out[0] != '*' ? out : "";
}

TEST(BasicAuth, BcryptHashesAreCheckedByCrypt) {
  const std::string hash = hash_of("correct horse");
  ASSERT_TRUE(is_bcrypt_hash(hash)) << hash;
  EXPECT_TRUE(bcrypt_matches(hash, "correct horse"));
  EXPECT_FALSE(bcrypt_matches(hash, "correct hors"));
  EXPECT_FALSE(bcrypt_matches(hash, "correct horse "));
  EXPECT_FALSE(bcrypt_matches(hash, ""));
  EXPECT_FALSE(bcrypt_matches(hash, std::string("correct horse\0x", 15)));
}

TEST(BasicAuth, LetsInOnlyAKnownUserWithItsPassword) {
  BasicAuth auth({{"prometheus", hash_of("s3cret")}, {"alice", hash_of("wonderland")}});
  EXPECT_TRUE(auth.enabled());
  EXPECT_TRUE(auth.check("prometheus", "s3cret"));
  EXPECT_TRUE(auth.check("prometheus", "s3cret"));  // remembered: the same answer
  EXPECT_FALSE(auth.check("prometheus", "s3cret2"));
  EXPECT_FALSE(auth.check("prometheus", "wonderland"));  // another user's password
  EXPECT_TRUE(auth.check("alice", "wonderland"));
  EXPECT_FALSE(auth.check("bob", "s3cret"));
  EXPECT_FALSE(auth.check("", ""));
  EXPECT_FALSE(BasicAuth().enabled());
}

}  // namespace
}  // namespace gpureap::agent
