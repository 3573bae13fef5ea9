#include "sim/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <nlohmann/json.hpp>

#include "sim/proc_stat.h"

namespace gpureap::sim {
namespace {

std::optional<std::int64_t> parse_i64(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<Allocation> parse_allocation(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  try {
    Allocation a;
    a.pid = j.at("pid").get<pid_t>();
    a.start_time = j.at("start_time").get<std::uint64_t>();
    a.gpu = j.at("gpu").get<unsigned>();
    a.bytes = j.at("bytes").get<std::uint64_t>();
    a.stuck = j.value("stuck", false);
    a.client = j.value("client", false);
    a.util = j.value("util", 0U);
    a.ghost = j.value("ghost", false);
    a.ghost_reads = j.value("ghost_reads", 0U);
    a.release_delay = std::chrono::nanoseconds(j.value("release_delay_ns", std::int64_t{0}));
    a.comm = j.value("comm", "");
    a.pid_ns = j.value("pid_ns", std::uint64_t{0});
    a.referenced = j.value("referenced", false);
    a.imports = j.value("imports", "");
    if (j.contains("gi") && !j.at("gi").is_null()) a.gi = j.at("gi").get<unsigned>();
    a.ci = j.value("ci", 0U);
    return a;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string Allocation::name() const {
  return fmt::format("g{}-{}-{}", gpu, pid, start_time);
}

std::int64_t boottime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

const char* to_string(AllocState state) {
  switch (state) {
    case AllocState::held:
      return "alive";
    case AllocState::releasing:
      return "releasing";
    case AllocState::stuck:
      return "stuck";
    case AllocState::ghost:
      return "ghost";
    case AllocState::released:
      return "dead";
  }
  return "?";
}

Result<void> register_process(const SimPaths& paths, const ProcRecord& r) {
  nlohmann::json j = {{"pid", r.pid},   {"start_time", r.start_time},
                      {"role", r.role}, {"pgid", r.pgid},
                      {"comm", r.comm}, {"registered_ns", boottime_ns()}};
  return write_file_atomic(paths.procs() / fmt::format("{}-{}.json", r.pid, r.start_time),
                           j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::uint64_t own_pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

Result<int> lock_allocation(const SimPaths& paths, const Allocation& a) {
  fs::path path = paths.allocs() / (a.name() + ".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + path.string()));
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    ::close(fd);
    return std::unexpected(Error::from_errno("cannot lock " + path.string()));
  }
  return fd;  // stays open: the lock lives as long as this process's files
}

namespace {

// Whether someone still holds the allocation's lock: an OFD lock belongs to the
// open file description, so it is released when the holder's last descriptor of
// it closes (its exit, or a zombie leader's last thread), in any PID namespace.
bool lock_held(const SimPaths& paths, const std::string& name) {
  fs::path path = paths.allocs() / (name + ".lock");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock probe {};
  probe.l_type = F_RDLCK;
  probe.l_whence = SEEK_SET;
  bool held = ::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

}  // namespace

int open_nvml_session(const SimPaths& paths) {
  std::error_code ec;
  fs::create_directories(paths.sessions(), ec);
  fs::path path = paths.sessions() / (std::to_string(::getpid()) + ".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void close_nvml_session(const SimPaths& paths, int fd) {
  if (fd < 0) return;
  std::error_code ec;
  fs::remove(paths.sessions() / (std::to_string(::getpid()) + ".lock"), ec);
  ::close(fd);
}

std::vector<pid_t> open_nvml_sessions(const SimPaths& paths, pid_t except) {
  std::vector<pid_t> open;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(paths.sessions(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".lock")) continue;
    pid_t pid = 0;
    auto [end, err] = std::from_chars(name.data(), name.data() + name.size() - 5, pid);
    if (err != std::errc() || end != name.data() + name.size() - 5 || pid == except) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct flock probe {};
    probe.l_type = F_RDLCK;
    probe.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK) open.push_back(pid);
    ::close(fd);
  }
  std::sort(open.begin(), open.end());
  return open;
}

Result<void> register_allocation(const SimPaths& paths, const Allocation& a) {
  nlohmann::json j = {{"pid", a.pid},
                      {"start_time", a.start_time},
                      {"gpu", a.gpu},
                      {"bytes", a.bytes},
                      {"stuck", a.stuck},
                      {"client", a.client},
                      {"util", a.util},
                      {"ghost", a.ghost},
                      {"ghost_reads", a.ghost_reads},
                      {"release_delay_ns", a.release_delay.count()},
                      {"comm", a.comm},
                      {"pid_ns", a.pid_ns},
                      {"referenced", a.referenced},
                      {"imports", a.imports},
                      {"gi", a.gi ? nlohmann::json(*a.gi) : nlohmann::json(nullptr)},
                      {"ci", a.ci}};
  return write_file_atomic(paths.allocs() / (a.name() + ".json"), j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<ProcRecord> read_process_records(const SimPaths& paths) {
  std::vector<std::pair<std::int64_t, ProcRecord>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(paths.procs(), ec)) {
    if (entry.path().extension() != ".json") continue;
    auto text = read_file(entry.path());
    if (!text) continue;
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) continue;
    try {
      ProcRecord r;
      r.pid = j.at("pid").get<pid_t>();
      r.start_time = j.at("start_time").get<std::uint64_t>();
      r.role = j.value("role", "");
      r.pgid = j.value("pgid", 0);
      r.comm = j.value("comm", "");
      found.emplace_back(j.value("registered_ns", std::int64_t{0}), std::move(r));
    } catch (const nlohmann::json::exception&) {
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.pid < b.second.pid;
  });
  std::vector<ProcRecord> out;
  for (auto& [t, r] : found) out.push_back(std::move(r));
  return out;
}

std::int64_t AllocationTable::dead_at(const std::string& name, Cached& c) {
  if (c.dead_at_ns) return *c.dead_at_ns;
  fs::path sidecar = paths_.allocs() / (name + ".dead");
  if (auto text = read_file(sidecar)) {
    if (auto v = parse_i64(*text)) return *(c.dead_at_ns = *v);
  }
  // First observer: write a temp file and link(2) it into place. link fails with
  // EEXIST if another process won the race, and then its time is the one to use.
  std::int64_t now = boottime_ns();
  static std::atomic<unsigned> counter{0};
  fs::path tmp = paths_.allocs() / fmt::format(".{}.dead.{}.{}", name, ::getpid(), counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    std::string content = std::to_string(now) + "\n";
    bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
    ::close(fd);
    if (ok && ::link(tmp.c_str(), sidecar.c_str()) != 0 && errno == EEXIST) {
      if (auto text = read_file(sidecar))
        if (auto v = parse_i64(*text)) now = *v;
    }
    ::unlink(tmp.c_str());
  }
  // If the directory is not writable, the time stays private to this process.
  c.dead_at_ns = now;
  return now;
}

std::vector<AllocationTable::Entry> AllocationTable::evaluate(std::optional<unsigned> gpu) {
  std::string prefix = gpu ? fmt::format("g{}-", *gpu) : "g";
  std::vector<std::string> names;
  if (DIR* d = ::opendir(paths_.allocs().c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n.starts_with(prefix) && n.ends_with(".json"))
        names.emplace_back(n.substr(0, n.size() - 5));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  // Drop cached entries whose file is gone (cleared by a reset).
  for (auto it = cache_.begin(); it != cache_.end();) {
    bool in_scope = it->first.starts_with(prefix);
    if (in_scope && !std::binary_search(names.begin(), names.end(), it->first))
      it = cache_.erase(it);
    else
      ++it;
  }
  std::vector<Entry> out;
  for (const auto& name : names) {
    auto it = cache_.find(name);
    if (it == cache_.end()) {
      auto text = read_file(paths_.allocs() / (name + ".json"));
      if (!text) continue;
      auto alloc = parse_allocation(*text);
      if (!alloc) continue;
      it = cache_.emplace(name, Cached{*alloc, false, std::nullopt}).first;
    }
    Cached& c = it->second;
    // A holder is visible when it is in our PID namespace or our /proc shows it (a
    // caller on the host sees a holder of a container); a caller inside a container
    // cannot look up a host holder in its /proc, and the holder's lock says whether
    // it still holds.
    static const std::uint64_t ours = own_pid_namespace();
    bool visible = true, kept = false;
    if (!c.dead) {
      const bool shown = holds_resources(c.alloc.pid, c.alloc.start_time);
      visible = c.alloc.pid_ns == 0 || c.alloc.pid_ns == ours || shown;
      bool holds = visible ? shown : lock_held(paths_, name);
      // A referenced allocation outlives its holder while its lock's open file
      // description lives (an inheritor's descriptor, an importer's mapping).
      if (!holds && c.alloc.referenced) holds = kept = lock_held(paths_, name);
      if (!holds) c.dead = true;
    }
    Entry e{c.alloc, AllocState::held, std::nullopt};
    e.visible = visible;
    e.kept = kept;
    if (!c.dead) {
      e.state = AllocState::held;
    } else if (c.alloc.stuck) {
      e.state = AllocState::stuck;
    } else if (c.alloc.ghost) {
      // Not cached: reads and a reset (which removes the files) end a ghost.
      std::error_code ec;
      auto reads = fs::file_size(paths_.allocs() / (name + ".reads"), ec);
      if (ec) reads = 0;
      e.state = c.alloc.ghost_reads == 0 || reads < c.alloc.ghost_reads ? AllocState::ghost
                                                                          : AllocState::released;
    } else if (c.alloc.release_delay.count() > 0) {
      std::int64_t left = dead_at(name, c) + c.alloc.release_delay.count() - boottime_ns();
      if (left > 0) {
        e.state = AllocState::releasing;
        e.release_left = std::chrono::nanoseconds(left);
      } else {
        e.state = AllocState::released;
      }
    } else {
      e.state = AllocState::released;
    }
    out.push_back(std::move(e));
  }
  return out;
}

GpuUsage summarize(const std::vector<AllocationTable::Entry>& entries, unsigned gpu,
                   std::optional<unsigned> gi, std::optional<unsigned> ci) {
  GpuUsage u;
  for (const auto& e : entries) {
    if (e.alloc.gpu != gpu || e.state == AllocState::released) continue;
    if (gi && e.alloc.gi != gi) continue;
    if (e.state == AllocState::ghost) {
      u.utilization = std::max(u.utilization, e.alloc.util);
      if (e.alloc.ghost_reads > 0) u.ghosts_with_reads.push_back(e.alloc.name());
      continue;
    }
    u.counted_bytes += e.alloc.bytes;
    if (e.state == AllocState::held) u.utilization = std::max(u.utilization, e.alloc.util);
    if (e.state != AllocState::held || e.alloc.client || !e.visible) continue;
    if (ci && e.alloc.ci != *ci) continue;  // another compute instance's process
    // A dead exporter's memory that a live importer keeps is the importer's.
    pid_t pid = e.alloc.pid;
    if (e.kept)
      for (const auto& other : entries)
        if (!other.kept && other.state == AllocState::held && other.alloc.imports == e.alloc.name())
          pid = other.alloc.pid;
    auto it = std::find_if(u.processes.begin(), u.processes.end(),
                           [&](const auto& p) { return p.pid == pid; });
    if (it != u.processes.end()) {
      it->bytes += e.alloc.bytes;
      it->util = std::max(it->util, e.alloc.util);
    } else {
      u.processes.push_back({pid, e.alloc.bytes, e.alloc.util});
    }
  }
  return u;
}

void count_ghost_reads(const SimPaths& paths, const GpuUsage& usage) {
  for (const std::string& name : usage.ghosts_with_reads) {
    // O_APPEND: concurrent readers each add their byte; the size is the count.
    fs::path path = paths.allocs() / (name + ".reads");
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    (void)!::write(fd, "r", 1);
    ::close(fd);
  }
}

}  // namespace gpureap::sim
