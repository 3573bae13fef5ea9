#include "proc/run_id.h"

#include <sys/stat.h>

#include "proc/environ.h"
#include "proc/proc_files.h"

namespace gpureap::proc {

std::string make_run_id(std::string_view name, pid_t pid, std::uint64_t pid_namespace) {
  std::string clean;
  for (char c : name.substr(0, 40)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.';
    clean += ok ? c : '_';
  }
  // A leading dot would make a hidden directory; an empty name is no name.
  while (!clean.empty() && clean.front() == '.') clean.erase(0, 1);
  if (clean.empty()) clean = "run";
  if (pid_namespace != 0) clean += "-ns" + std::to_string(pid_namespace);
  return clean + "-" + std::to_string(pid);
}

std::uint64_t run_pid_namespace(const std::string& proc_root) {
  constexpr std::uint64_t kProcPidInitIno = 0xEFFFFFFCU;  // the kernel's initial namespace
  struct stat st {};
  if (::stat((proc_root + "/self/ns/pid").c_str(), &st) != 0 || st.st_ino == kProcPidInitIno)
    return 0;
  return st.st_ino;
}

std::string default_run_name(std::string_view argv0) {
  auto slash = argv0.rfind('/');
  return std::string(slash == std::string_view::npos ? argv0 : argv0.substr(slash + 1));
}

std::optional<pid_t> run_owner(std::string_view run_id) {
  auto dash = run_id.rfind('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  pid_t pid = proc::parse_pid(run_id.substr(dash + 1));
  if (pid <= 0) return std::nullopt;
  return pid;
}

std::optional<std::string> run_id_from_environ(std::string_view environ) {
  auto value = environ_value(environ, kRunIdVariable);
  if (!value || value->empty()) return std::nullopt;
  return std::string(*value);
}

}  // namespace gpureap::proc
