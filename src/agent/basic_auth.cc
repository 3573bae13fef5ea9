#include "agent/basic_auth.h"

#include <crypt.h>

#include <memory>

namespace gpureap::agent {
namespace {

// No early exit: the time taken does not say where two texts first differ.
bool same_text(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

bool bcrypt_matches(const std::string& hash, std::string_view password) {
  // crypt_r reads a C string: a password with a NUL in it would be cut short.
  if (password.find('\0') != std::string_view::npos) return false;
  const std::string phrase(password);
  auto data = std::make_unique<crypt_data>();  // about 32 KiB: not on the stack
  const char* out = ::crypt_r(phrase.c_str(), hash.c_str(), data.get());
  // libxcrypt answers a failure with a string starting with '*', never the hash.
  if (!out || out[0] == '*') return false;
  return same_text(out, hash);
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users, PasswordCheck matches)
    : users_(std::move(users)), matches_(std::move(matches)) {}

bool BasicAuth::remembered(std::string_view user, std::string_view password) {
  std::lock_guard lock(mutex_);
  auto remembered = let_in_.find(user);
  return remembered != let_in_.end() && same_text(remembered->second, password);
}

bool BasicAuth::check(std::string_view user, std::string_view password) {
  auto known = users_.find(std::string(user));
  if (known == users_.end()) {
    if (!users_.empty()) matches_(users_.begin()->second, password);  // the same cost
    return false;
  }
  if (remembered(user, password)) return true;
  if (!matches_(known->second, password)) return false;
  std::lock_guard lock(mutex_);
  let_in_.insert_or_assign(std::string(user), std::string(password));
  return true;
}

}  // namespace gpureap::agent
