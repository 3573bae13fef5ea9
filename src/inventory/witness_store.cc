#include "inventory/witness_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace gpureap::inventory {

namespace {
constexpr off_t kMaxWitnessFile = 4 << 20;
}

Result<void> save_witnesses(const std::string& dir, const std::map<pid_t, proc::DeadParent>& dead) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& [holder, d] : dead) {
    if (d.holder_start == 0) continue;
    records.push_back({{"holder_pid", holder},
                       {"holder_start", d.holder_start},
                       {"pid", d.pid},
                       {"comm", d.comm},
                       {"cmdline", d.cmdline},
                       {"died_at", d.died_at},
                       {"was_parent", d.was_parent},
                       {"held_gpu", d.held_gpu},
                       {"gpu_children", d.gpu_children},
                       {"run_supervisor", d.run_supervisor}});
  }
  // Text from processes may be any bytes: replaced, never a throw.
  const std::string text =
      nlohmann::json{{"witnessed", records}}.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace) +
      "\n";
  const std::string path = dir + "/" + kWitnessFile;
  const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + tmp));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const bool ok = done == text.size() && ::close(fd) == 0;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = Error::from_errno("cannot write " + path);
    ::unlink(tmp.c_str());
    return std::unexpected(err);
  }
  return {};
}

std::map<pid_t, proc::DeadParent> load_witnesses(const std::string& dir) {
  std::map<pid_t, proc::DeadParent> out;
  if (dir.empty()) return out;
  const std::string path = dir + "/" + kWitnessFile;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxWitnessFile) {
    text.resize(static_cast<std::size_t>(st.st_size));
    ssize_t n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("witnessed") || !doc["witnessed"].is_array()) return out;
  for (const auto& r : doc["witnessed"]) {
    try {
      proc::DeadParent d;
      const auto holder = r.at("holder_pid").get<pid_t>();
      d.holder_start = r.at("holder_start").get<std::uint64_t>();
      d.pid = r.at("pid").get<pid_t>();
      d.comm = r.at("comm").get<std::string>();
      d.cmdline = r.at("cmdline").get<std::string>();
      d.died_at = r.at("died_at").get<double>();
      d.was_parent = r.at("was_parent").get<bool>();
      d.held_gpu = r.at("held_gpu").get<bool>();
      d.gpu_children = r.at("gpu_children").get<std::size_t>();
      d.run_supervisor = r.at("run_supervisor").get<bool>();
      if (holder > 0 && d.holder_start != 0) out[holder] = std::move(d);
    } catch (const nlohmann::json::exception&) {
      continue;  // a malformed record is no record
    }
  }
  return out;
}

}  // namespace gpureap::inventory
