// GnuTLS on demand. gpureap links libmicrohttpd statically (Debian's libmicrohttpd.a):
// the portable binary needs only glibc, and no command loads GnuTLS (with libtasn1,
// nettle, p11-kit...) at start-up for TLS that only an agent with --web-config uses
// (CMakeLists.txt). Debian builds that archive with HTTPS support, so it refers to
// GnuTLS, whose static library is not fit to link (it pulls p11-kit's modules).
//
// Every GnuTLS function the archive calls is defined here as a one-instruction
// trampoline (`jmp *slot`): until gpureap_gnutls_load() runs, each slot points at a
// function that returns 0, which is all libmicrohttpd's constructor and destructor
// (gnutls_global_init and _deinit) and a plain-HTTP daemon ever reach. When
// `--web-config` asks for TLS, gpureap_gnutls_load() dlopens the system's
// libgnutls.so.30 (Debian's libgnutls30, present wherever curl or apt-transport
// work), points every slot at the real function, and calls the real
// gnutls_global_init once. A jump keeps every argument register and the stack as the
// caller left them, so no prototype is needed and none can be wrong. Where the
// library is missing the load fails and the agent refuses TLS with exit 2 (it never
// serves plain HTTP in its place).
//
// The list is `nm -u libmicrohttpd.a | grep gnutls_` (libmicrohttpd 0.9.75, bookworm);
// a newer archive that needs another symbol fails to link, loudly. x86-64 only, as the
// build is (scripts/vendor-headers.sh). Linked into every executable that links the
// agent (CMakeLists.txt, GPUREAP_GNUTLS_STUBS); declared for the agent in
// agent/gnutls_load.h.

#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#define GPUREAP_GNUTLS_FUNCTIONS(X)                                                  \
  X(gnutls_alpn_set_protocols)                                                       \
  X(gnutls_bye)                                                                      \
  X(gnutls_certificate_allocate_credentials)                                         \
  X(gnutls_certificate_free_credentials)                                             \
  X(gnutls_certificate_server_set_request)                                           \
  X(gnutls_certificate_set_dh_params)                                                \
  X(gnutls_certificate_set_retrieve_function2)                                       \
  X(gnutls_certificate_set_retrieve_function3)                                       \
  X(gnutls_certificate_set_x509_key_mem)                                             \
  X(gnutls_certificate_set_x509_key_mem2)                                            \
  X(gnutls_certificate_set_x509_trust_mem)                                           \
  X(gnutls_cipher_get)                                                               \
  X(gnutls_credentials_set)                                                          \
  X(gnutls_deinit)                                                                   \
  X(gnutls_dh_params_deinit)                                                         \
  X(gnutls_dh_params_import_pkcs3)                                                   \
  X(gnutls_dh_params_init)                                                           \
  X(gnutls_global_deinit)                                                            \
  X(gnutls_global_init)                                                              \
  X(gnutls_handshake)                                                                \
  X(gnutls_init)                                                                     \
  X(gnutls_priority_deinit)                                                          \
  X(gnutls_priority_init)                                                            \
  X(gnutls_priority_set)                                                             \
  X(gnutls_protocol_get_version)                                                     \
  X(gnutls_psk_allocate_server_credentials)                                          \
  X(gnutls_psk_free_server_credentials)                                              \
  X(gnutls_psk_set_server_credentials_function)                                      \
  X(gnutls_record_check_pending)                                                     \
  X(gnutls_record_get_direction)                                                     \
  X(gnutls_record_recv)                                                              \
  X(gnutls_record_send)                                                              \
  X(gnutls_session_get_ptr)                                                          \
  X(gnutls_session_set_ptr)                                                          \
  X(gnutls_strerror)                                                                 \
  X(gnutls_transport_set_int2)

extern "C" {

// What every slot points at until GnuTLS is loaded.
long gpureap_gnutls_not_loaded() { return 0; }

// A variable of GnuTLS (gnutls_alloc_function gnutls_malloc), read only on TLS
// paths: the real one's value once loaded.
void* gnutls_malloc = nullptr;

#define GPUREAP_GNUTLS_SLOT(name) \
  [[gnu::used]] void* gpureap_slot_##name = reinterpret_cast<void*>(&gpureap_gnutls_not_loaded);
GPUREAP_GNUTLS_FUNCTIONS(GPUREAP_GNUTLS_SLOT)
#undef GPUREAP_GNUTLS_SLOT

}  // extern "C"

#define GPUREAP_GNUTLS_TRAMPOLINE(name)                                          \
  asm(".text\n.globl " #name "\n.type " #name ", @function\n" #name ":\n"        \
      "  jmp *gpureap_slot_" #name "(%rip)\n.size " #name ", .-" #name "\n");
GPUREAP_GNUTLS_FUNCTIONS(GPUREAP_GNUTLS_TRAMPOLINE)
#undef GPUREAP_GNUTLS_TRAMPOLINE

namespace {

std::once_flag g_once;
bool g_loaded = false;
char g_why[256] = "";

void load(const char* library) {
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::snprintf(g_why, sizeof g_why, "%s", ::dlerror());
    return;
  }
  struct Resolved {
    void** slot;
    void* real;
  };
  Resolved resolved[] = {
#define GPUREAP_GNUTLS_RESOLVE(name) {&gpureap_slot_##name, ::dlsym(handle, #name)},
      GPUREAP_GNUTLS_FUNCTIONS(GPUREAP_GNUTLS_RESOLVE)
#undef GPUREAP_GNUTLS_RESOLVE
  };
  const char* names[] = {
#define GPUREAP_GNUTLS_NAME(name) #name,
      GPUREAP_GNUTLS_FUNCTIONS(GPUREAP_GNUTLS_NAME)
#undef GPUREAP_GNUTLS_NAME
  };
  auto* real_malloc = static_cast<void**>(::dlsym(handle, "gnutls_malloc"));
  for (std::size_t i = 0; i < sizeof resolved / sizeof resolved[0]; ++i) {
    if (!resolved[i].real) {
      std::snprintf(g_why, sizeof g_why, "%s has no %s", library, names[i]);
      ::dlclose(handle);
      return;
    }
  }
  if (!real_malloc) {
    std::snprintf(g_why, sizeof g_why, "%s has no gnutls_malloc", library);
    ::dlclose(handle);
    return;
  }
  // libmicrohttpd's constructor ran against the stub; the real library is
  // initialised here, once (its destructor's gnutls_global_deinit balances it).
  using Init = int (*)();
  if (int rc = reinterpret_cast<Init>(
          ::dlsym(handle, "gnutls_global_init"))();  // NOLINT: a C function
      rc < 0) {
    std::snprintf(g_why, sizeof g_why, "gnutls_global_init failed (%d)", rc);
    ::dlclose(handle);
    return;
  }
  gnutls_malloc = *real_malloc;
  for (auto& r : resolved) *r.slot = r.real;
  g_loaded = true;
}

}  // namespace

extern "C" bool gpureap_gnutls_load(const char* library, const char** why) {
  std::call_once(g_once, [library] { load(library); });
  if (why) *why = g_loaded ? "" : g_why;
  return g_loaded;
}
