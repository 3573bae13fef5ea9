#include "sim/proc_title.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>

namespace gpureap::sim {
namespace {

char* g_area = nullptr;
std::size_t g_size = 0;

}  // namespace

void remember_argv(int argc, char** argv) {
  if (argc <= 0 || !argv[0]) return;
  // The arguments lie end to end; the area ends with the last one's NUL.
  g_area = argv[0];
  char* end = argv[0] + std::strlen(argv[0]);
  for (int i = 1; i < argc; ++i)
    if (argv[i] == end + 1) end = argv[i] + std::strlen(argv[i]);
  g_size = static_cast<std::size_t>(end - g_area);  // without the last NUL
}

void set_process_title(const std::string& title) {
  if (g_area && g_size > 0) {
    const std::size_t n = std::min(title.size(), g_size);
    std::memcpy(g_area, title.data(), n);
    std::memset(g_area + n, 0, g_size - n);
  }
  ::prctl(PR_SET_NAME, title.substr(0, 15).c_str(), 0, 0, 0);
}

}  // namespace gpureap::sim
