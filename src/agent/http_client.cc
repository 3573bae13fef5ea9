#include "agent/http_client.h"

#include <dlfcn.h>

#include <mutex>

// Types and constants only: every function is reached through the pointers below.
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>

namespace gpureap::agent {
namespace {

// Debian's libcurl4 (OpenSSL) and libcurl3-gnutls (GnuTLS) keep the soname of libcurl 7/8.
constexpr const char* kCurlLibraries[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};

struct Curl {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

template <typename F>
bool resolve(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  return f != nullptr;
}

// Loaded once per process; the first outcome stands.
Result<const Curl*> load_curl() {
  static std::once_flag once;
  static Curl curl{};
  static std::string why;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : kCurlLibraries)
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      why = "libcurl is not installed (libcurl.so.4: Debian's libcurl4 or libcurl3-gnutls)";
      return;
    }
    bool ok = resolve(lib, "curl_global_init", curl.global_init) &&
              resolve(lib, "curl_easy_init", curl.easy_init) &&
              resolve(lib, "curl_easy_reset", curl.easy_reset) &&
              resolve(lib, "curl_easy_setopt", curl.easy_setopt) &&
              resolve(lib, "curl_easy_perform", curl.easy_perform) &&
              resolve(lib, "curl_easy_getinfo", curl.easy_getinfo) &&
              resolve(lib, "curl_easy_cleanup", curl.easy_cleanup) &&
              resolve(lib, "curl_easy_strerror", curl.easy_strerror) &&
              resolve(lib, "curl_slist_append", curl.slist_append) &&
              resolve(lib, "curl_slist_free_all", curl.slist_free_all);
    if (!ok) {
      why = "libcurl.so.4 lacks a function gpureap calls";
      return;
    }
    // Not thread-safe: done here, once, before any handle exists.
    if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) why = "libcurl did not initialise";
  });
  if (!why.empty()) return fail(why);
  return &curl;
}

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

class CurlTransport final : public HttpTransport {
 public:
  CurlTransport(const Curl* curl, std::string ca_file, std::chrono::milliseconds timeout)
      : curl_(curl), handle_(curl->easy_init()), ca_file_(std::move(ca_file)), timeout_(timeout) {}
  ~CurlTransport() override {
    if (handle_) curl_->easy_cleanup(handle_);
  }

  Result<HttpReply> send(const HttpCall& request) override {
    if (!handle_) return fail("libcurl could not make a handle");
    // A reset keeps the open connection (the next request reuses it), not the options.
    curl_->easy_reset(handle_);
    HttpReply response;
    curl_slist* headers = nullptr;
    for (const auto& h : request.headers) headers = curl_->slist_append(headers, h.c_str());
    auto& set = curl_->easy_setopt;
    set(handle_, CURLOPT_URL, request.url.c_str());
    set(handle_, CURLOPT_NOSIGNAL, 1L);  // a thread of a process with its own signal handling
    set(handle_, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
    set(handle_, CURLOPT_HTTPHEADER, headers);
    set(handle_, CURLOPT_WRITEFUNCTION, &append_body);
    set(handle_, CURLOPT_WRITEDATA, &response.body);
    if (!ca_file_.empty()) set(handle_, CURLOPT_CAINFO, ca_file_.c_str());
    if (request.method == "GET") {
      set(handle_, CURLOPT_HTTPGET, 1L);
    } else {
      set(handle_, CURLOPT_CUSTOMREQUEST, request.method.c_str());
      set(handle_, CURLOPT_POSTFIELDS, request.body.c_str());
      set(handle_, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
    }
    const CURLcode code = curl_->easy_perform(handle_);
    curl_->slist_free_all(headers);
    if (code != CURLE_OK)
      return fail(request.method + " " + request.url + ": " + curl_->easy_strerror(code));
    curl_->easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &response.status);
    return response;
  }

 private:
  const Curl* curl_;
  CURL* handle_;
  std::string ca_file_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

Result<std::unique_ptr<HttpTransport>> make_curl_transport(std::string ca_file,
                                                           std::chrono::milliseconds timeout) {
  auto curl = load_curl();
  if (!curl) return std::unexpected(curl.error());
  return std::make_unique<CurlTransport>(*curl, std::move(ca_file), timeout);
}

}  // namespace gpureap::agent
