#pragma once
// HTTP basic authentication against the bcrypt hashes of a web configuration
// (agent/web_config.h), checked by libxcrypt's crypt_r (Debian's libcrypt-dev).

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace gpureap::agent {

/// True when `password` hashes to `hash` (bcrypt, through crypt_r); the
/// comparison takes the same time wherever the two differ.
bool bcrypt_matches(const std::string& hash, std::string_view password);

/// How a password is checked against its hash: bcrypt_matches, or a test's stand-in.
using PasswordCheck = std::function<bool(const std::string& hash, std::string_view password)>;

class BasicAuth {
 public:
  /// `users`: name -> bcrypt hash; none: every request is let in.
  explicit BasicAuth(std::map<std::string, std::string> users = {},
                     PasswordCheck matches = bcrypt_matches);

  bool enabled() const { return !users_.empty(); }

  /// True when `user` was let in with `password` before (no bcrypt: microseconds), so
  /// that a scrape is answered at once whatever checks wait (W4-09). Thread-safe.
  bool remembered(std::string_view user, std::string_view password);

  /// True when `user` is known and `password` is its password. Thread-safe. A
  /// bcrypt check takes tens of milliseconds by design, so the pair last let in
  /// for each user is remembered (in this process's memory only): a scrape every
  /// few seconds costs one check, not one per scrape, as the exporter-toolkit
  /// does. An unknown user costs a check too, so timing does not tell names apart.
  bool check(std::string_view user, std::string_view password);

 private:
  std::map<std::string, std::string> users_;
  PasswordCheck matches_;
  std::mutex mutex_;
  std::map<std::string, std::string, std::less<>> let_in_;  // user -> password last let in
};

}  // namespace gpureap::agent
