#include "util/libsystemd.h"

#include <dlfcn.h>

#include <mutex>

namespace gpureap {

void* libsystemd_symbol(const char* name, std::string* why) {
  static std::mutex mutex;
  static void* handle = nullptr;
  static std::string open_error;
  static bool tried = false;
  std::lock_guard lock(mutex);
  if (!tried) {
    tried = true;
    // RTLD_LOCAL: its symbols stay out of the global namespace; never closed, so
    // a pointer handed out stays valid.
    handle = ::dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = ::dlerror();
      open_error = e ? e : "libsystemd.so.0 cannot be loaded";
    }
  }
  if (!handle) {
    if (why) *why = open_error;
    return nullptr;
  }
  void* symbol = ::dlsym(handle, name);
  if (!symbol && why) *why = std::string("libsystemd.so.0 has no ") + name;
  return symbol;
}

}  // namespace gpureap
