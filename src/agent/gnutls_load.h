#pragma once
// GnuTLS, loaded only when the agent serves TLS (packaging/gnutls_on_demand.cc
// says how and why; that file is linked into every executable linking the agent).

#include <string>

#include "util/result.h"

extern "C" bool gpureap_gnutls_load(const char* library, const char** why);

namespace gpureap::agent {

/// Debian's libgnutls30 (GnuTLS 3.x keeps this soname).
inline constexpr const char* kGnutlsLibrary = "libgnutls.so.30";

/// Loads `library` once per process (the first call's library wins); afterwards
/// libmicrohttpd's TLS runs on it. Fails saying why (not installed, a symbol
/// missing).
inline Result<void> load_gnutls(const std::string& library) {
  const char* why = "";
  if (gpureap_gnutls_load(library.c_str(), &why)) return {};
  return fail(std::string(why));
}

}  // namespace gpureap::agent
