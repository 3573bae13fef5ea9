// Linked into gpureap and the portable binary (gpureap-portable, CMakeLists.txt), so that
// both run on glibc 2.34 (Ubuntu 22.04 has 2.35, RHEL 9 2.34), not only on bookworm's 2.36.
//
// Linking libstdc++ and libgcc statically brings in two references to symbols that
// are newer than anything gpureap itself uses:
// - arc4random@GLIBC_2.36, from libstdc++.a(random.o) (std::random_device, pulled in
//   by the string instantiations; gpureap never makes a random_device);
// - arc4random_buf@GLIBC_2.36, from libcrypt.a (libxcrypt's salt generator, which the
//   agent's bcrypt check through crypt_r links in but never calls: a check needs no salt);
// - _dl_find_object@GLIBC_2.35, from libgcc_eh.a(unwind-dw2-fde-dip.o): the unwinder
//   asks it which loaded object holds a return address, to find its .eh_frame_hdr.
// A definition here is found before libc.so's, so the binary asks the loader for
// neither. Both do what glibc's do, with interfaces older glibc has: getrandom(2)
// (2.25) and dl_iterate_phdr(3) (2.2.4). Neither symbol is exported (a PIE exports
// nothing, and they are hidden), so libc and NVML keep using glibc's own.

#include <dlfcn.h>
#include <link.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" {

__attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t value = 0;
  auto* p = reinterpret_cast<unsigned char*>(&value);
  size_t got = 0;
  while (got < sizeof value) {
    ssize_t n = getrandom(p + got, sizeof value - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::abort();  // glibc's arc4random also aborts when it cannot get entropy
    got += static_cast<size_t>(n);
  }
  return value;
}

__attribute__((visibility("hidden"))) void arc4random_buf(void* buffer, size_t size) noexcept {
  auto* p = static_cast<unsigned char*>(buffer);
  size_t got = 0;
  while (got < size) {
    ssize_t n = getrandom(p + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::abort();  // as glibc's: no entropy is not an error to return
    got += static_cast<size_t>(n);
  }
}

__attribute__((visibility("hidden"))) int _dl_find_object(void* address,
                                                         dl_find_object* result) noexcept {
  struct Query {
    uintptr_t pc;
    dl_find_object* out;
    bool found;
  } query{reinterpret_cast<uintptr_t>(address), result, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* q = static_cast<Query*>(data);
        uintptr_t start = UINTPTR_MAX, end = 0;
        bool contains = false;
        const void* eh_frame = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD) {
            if (lo < start) start = lo;
            if (lo + ph.p_memsz > end) end = lo + ph.p_memsz;
            if (q->pc >= lo && q->pc < lo + ph.p_memsz) contains = true;
          } else if (ph.p_type == PT_GNU_EH_FRAME) {
            eh_frame = reinterpret_cast<const void*>(lo);
          }
        }
        if (!contains) return 0;
        q->out->dlfo_flags = 0;
        q->out->dlfo_map_start = reinterpret_cast<void*>(start);
        q->out->dlfo_map_end = reinterpret_cast<void*>(end);
        q->out->dlfo_link_map = nullptr;
        q->out->dlfo_eh_frame = const_cast<void*>(eh_frame);
        q->found = true;
        return 1;
      },
      &query);
  return query.found ? 0 : -1;
}

}  // extern "C"
