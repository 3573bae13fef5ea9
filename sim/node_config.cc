#include "sim/node_config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace gpureap::sim {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

std::string make_uuid(unsigned index) {
  std::uint64_t hi = splitmix64(0x6770757265617000ULL + index);  // "gpureap" + index
  std::uint64_t lo = splitmix64(hi);
  return fmt::format("GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32U, (hi >> 16U) & 0xFFFFU,
                     hi & 0xFFFFU, lo >> 48U, lo & 0xFFFFFFFFFFFFULL);
}

// The bus numbers of an HGX H100/H200 board, then any free ones.
std::vector<unsigned> pci_buses(unsigned count) {
  std::vector<unsigned> buses = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
  std::set<unsigned> used(buses.begin(), buses.end());
  for (unsigned b = 0x01; buses.size() < count && b < 0x100; ++b)
    if (used.insert(b).second) buses.push_back(b);
  buses.resize(count);
  return buses;
}

std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

template <typename T>
bool parse_uint(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::optional<fs::path> sim_dir_from_env() {
  const char* sim = std::getenv("GPUREAP_SIM_DIR");
  if (sim && *sim) return fs::path(sim);
  const char* dev = std::getenv("GPUREAP_DEV_DIR");
  if (dev && *dev) {
    fs::path p(dev);
    if (!p.has_filename()) p = p.parent_path();  // "D/dev/" → "D/dev"
    return p.parent_path();
  }
  return std::nullopt;
}

NodeConfig make_node_config(unsigned gpus, std::uint64_t total, std::uint64_t baseline,
                            std::uint64_t reserved, const std::vector<unsigned>& minors,
                            const std::string& name, bool persistence) {
  NodeConfig node;
  auto buses = pci_buses(gpus);
  for (unsigned i = 0; i < gpus; ++i) {
    GpuConfig g;
    g.index = i;
    g.name = name;
    g.uuid = make_uuid(i);
    g.pci_bus = buses[i];
    g.bus_id = fmt::format("00000000:{:02X}:00.0", buses[i]);
    g.minor = minors.empty() ? i : minors[i];
    g.total = total;
    g.baseline = baseline;
    g.reserved = reserved;
    g.persistence = persistence;
    node.gpus.push_back(std::move(g));
  }
  return node;
}

void add_mig_devices(GpuConfig& gpu, unsigned instances, unsigned compute_instances) {
  gpu.mig.clear();
  instances = std::max(instances, 1U);
  compute_instances = std::max(compute_instances, 1U);
  const unsigned slices = 7 / instances;
  const std::uint64_t total = gpu.total / instances;
  for (unsigned k = 0; k < instances; ++k) {
    for (unsigned c = 0; c < compute_instances; ++c) {
      GpuConfig::Mig m;
      m.gi = k + 1;
      m.ci = c;
      const unsigned n = k * compute_instances + c;
      // Deterministic, distinct per GPU and MIG device, in NVIDIA's MIG-<uuid> form.
      m.uuid = fmt::format("MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                           0x5a3f0000U + gpu.index * 16 + n, 0x1000 + gpu.index, 0x2000 + m.gi,
                           0x3000 + m.ci, 0xabcdef000000ULL + n);
      // A compute instance smaller than its GPU instance is named "<c>c.<g>g.<mem>gb"
      // (nvidia-smi's profile names); one that is the whole GPU instance "<g>g.<mem>gb".
      const std::string ci_part =
          compute_instances > 1 ? fmt::format("{}c.", std::max(slices / compute_instances, 1U))
                                : "";
      m.name = fmt::format("{} MIG {}{}g.{}gb", gpu.name, ci_part, slices, total >> 30);
      m.total = total;
      // As the driver numbers them: 3 + GPU minor * 66 + GI * 9 for the GI, +1+CI for a CI
      // (any stable numbering works: gpureap reads the map, never a formula).
      m.gi_cap = 3 + gpu.minor * 66 + m.gi * 9;
      m.ci_cap = m.gi_cap + 1 + m.ci;
      gpu.mig.push_back(std::move(m));
    }
  }
}

std::string mig_minors_text(const NodeConfig& node) {
  std::string out = "config 1\nmonitor 2\n";
  for (const auto& g : node.gpus)
    for (std::size_t i = 0; i < g.mig.size(); ++i) {
      const auto& m = g.mig[i];
      if (i == 0 || g.mig[i - 1].gi != m.gi)
        out += fmt::format("gpu{}/gi{}/access {}\n", g.minor, m.gi, m.gi_cap);
      out += fmt::format("gpu{}/gi{}/ci{}/access {}\n", g.minor, m.gi, m.ci, m.ci_cap);
    }
  return out;
}

bool has_amd(const NodeConfig& node) {
  return std::any_of(node.gpus.begin(), node.gpus.end(), [](const GpuConfig& g) { return is_amd(g); });
}

bool has_nvidia(const NodeConfig& node) {
  return std::any_of(node.gpus.begin(), node.gpus.end(),
                     [](const GpuConfig& g) { return !is_amd(g); });
}

void number_vendor_gpus(NodeConfig& node) {
  unsigned nvidia = 0, amd = 0;
  for (GpuConfig& g : node.gpus) g.vendor_index = is_amd(g) ? amd++ : nvidia++;
}

Result<NodeConfig> load_node_config(const fs::path& node_json) {
  auto text = read_file(node_json);
  if (!text)
    return fail(fmt::format("cannot read {}: {}", node_json.string(), std::strerror(errno)));
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return fail(fmt::format("{} is not valid JSON", node_json.string()));
  try {
    NodeConfig node;
    node.driver_version = j.value("driver_version", node.driver_version);
    node.cuda_version = j.value("cuda_version", node.cuda_version);
    node.cap_devfs = j.value("cap_devfs", true);
    node.vendor = j.value("vendor", std::string("nvidia"));
    for (const auto& g : j.at("gpus")) {
      GpuConfig c;
      c.index = g.at("index").get<unsigned>();
      // Absent (a node written before mixed nodes): the node's vendor.
      c.vendor = g.value("vendor", node.vendor == "amd" ? std::string("amd") : std::string("nvidia"));
      c.name = g.at("name").get<std::string>();
      c.uuid = g.at("uuid").get<std::string>();
      c.bus_id = g.at("bus_id").get<std::string>();
      c.pci_bus = g.at("pci_bus").get<unsigned>();
      c.minor = g.at("minor").get<unsigned>();
      c.total = g.at("total").get<std::uint64_t>();
      c.baseline = g.at("baseline").get<std::uint64_t>();
      c.reserved = g.at("reserved").get<std::uint64_t>();
      c.persistence = g.at("persistence").get<bool>();
      // Absent (a node written before the sensors): the defaults; null: not supported.
      if (g.contains("temperature_c"))
        c.temperature_c = g["temperature_c"].is_null()
                              ? std::nullopt
                              : std::optional<unsigned>(g["temperature_c"].get<unsigned>());
      if (g.contains("power_mw"))
        c.power_mw = g["power_mw"].is_null() ? std::nullopt
                                             : std::optional<unsigned>(g["power_mw"].get<unsigned>());
      auto health = [&](const char* key, auto& into) {
        using T = typename std::remove_reference_t<decltype(into)>::value_type;
        if (g.contains(key)) into = g[key].is_null() ? std::nullopt : std::optional<T>(g[key].get<T>());
      };
      health("power_limit_mw", c.power_limit_mw);
      health("clock_event_reasons", c.clock_event_reasons);
      health("ecc_uncorrected", c.ecc_uncorrected);
      c.process_util = g.value("process_util", std::string("both"));
      for (const auto& m : g.value("mig", nlohmann::json::array()))
        c.mig.push_back({m.at("gi").get<unsigned>(), m.at("ci").get<unsigned>(),
                         m.at("uuid").get<std::string>(), m.at("name").get<std::string>(),
                         m.at("total").get<std::uint64_t>(), m.at("gi_cap").get<unsigned>(),
                         m.at("ci_cap").get<unsigned>()});
      node.gpus.push_back(std::move(c));
    }
    number_vendor_gpus(node);
    return node;
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("{}: {}", node_json.string(), e.what()));
  }
}

Result<void> save_node_config(const fs::path& node_json, const NodeConfig& config) {
  nlohmann::json j;
  j["driver_version"] = config.driver_version;
  j["cuda_version"] = config.cuda_version;
  j["cap_devfs"] = config.cap_devfs;
  j["vendor"] = config.vendor;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : config.gpus) {
    j["gpus"].push_back({{"index", g.index},
                         {"vendor", g.vendor},
                         {"name", g.name},
                         {"uuid", g.uuid},
                         {"bus_id", g.bus_id},
                         {"pci_bus", g.pci_bus},
                         {"minor", g.minor},
                         {"total", g.total},
                         {"baseline", g.baseline},
                         {"reserved", g.reserved},
                         {"persistence", g.persistence},
                         {"temperature_c", g.temperature_c ? nlohmann::json(*g.temperature_c)
                                                           : nlohmann::json(nullptr)},
                         {"power_mw", g.power_mw ? nlohmann::json(*g.power_mw)
                                                 : nlohmann::json(nullptr)}});
    auto health = [&](const char* key, const auto& v) {
      j["gpus"].back()[key] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    health("power_limit_mw", g.power_limit_mw);
    health("clock_event_reasons", g.clock_event_reasons);
    health("ecc_uncorrected", g.ecc_uncorrected);
    j["gpus"].back()["process_util"] = g.process_util;
    auto mig = nlohmann::json::array();
    for (const auto& m : g.mig)
      mig.push_back({{"gi", m.gi}, {"ci", m.ci}, {"uuid", m.uuid}, {"name", m.name},
                     {"total", m.total}, {"gi_cap", m.gi_cap}, {"ci_cap", m.ci_cap}});
    j["gpus"].back()["mig"] = mig;
  }
  return write_file_atomic(node_json, j.dump(2) + "\n");
}

Result<Mode> parse_mode(std::string_view text) {
  auto words = split_words(text);
  if (words.empty()) return Mode{};
  Mode m;
  const std::string& kind = words[0];
  std::size_t next = 1;
  if (kind == "ok") {
    m.kind = Mode::Kind::ok;
  } else if (kind == "init_fail") {
    m.kind = Mode::Kind::init_fail;
    if (next < words.size() && words[next] == "unknown") {
      m.init_fail_unknown = true;
      ++next;
    }
  } else if (kind == "query_fail") {
    m.kind = Mode::Kind::query_fail;
  } else if (kind == "hang_init") {
    m.kind = Mode::Kind::hang_init;
  } else if (kind == "hang_query") {
    m.kind = Mode::Kind::hang_query;
  } else if (kind == "fail_after") {
    m.kind = Mode::Kind::fail_after;
    if (next >= words.size() || !parse_uint(words[next], m.after))
      return fail("fail_after needs a count of queries, e.g. 'fail_after 3'");
    ++next;
  } else {
    return fail(
        fmt::format("unknown mode '{}' (expected ok, init_fail, query_fail, hang_init, hang_query, "
                    "fail_after N)",
                    kind));
  }
  for (; next < words.size(); ++next) {
    std::string_view w = words[next];
    unsigned gpu = 0;
    bool per_gpu = m.kind == Mode::Kind::query_fail || m.kind == Mode::Kind::hang_query ||
                   m.kind == Mode::Kind::fail_after;
    if (per_gpu && w.starts_with("gpu=") && parse_uint(w.substr(4), gpu)) {
      m.gpu = gpu;
    } else {
      return fail(fmt::format("unexpected '{}' after mode '{}'", w, kind));
    }
  }
  return m;
}

std::string format_mode(const Mode& m) {
  std::string s;
  switch (m.kind) {
    case Mode::Kind::ok:
      return "ok";
    case Mode::Kind::init_fail:
      return m.init_fail_unknown ? "init_fail unknown" : "init_fail";
    case Mode::Kind::hang_init:
      return "hang_init";
    case Mode::Kind::query_fail:
      s = "query_fail";
      break;
    case Mode::Kind::hang_query:
      s = "hang_query";
      break;
    case Mode::Kind::fail_after:
      s = fmt::format("fail_after {}", m.after);
      break;
  }
  if (m.gpu) s += fmt::format(" gpu={}", *m.gpu);
  return s;
}

Result<void> write_file_atomic(const fs::path& path, std::string_view content) {
  static std::atomic<unsigned> counter{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}.{}", ::getpid(), counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + tmp.string()));
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      auto err = Error::from_errno("cannot write " + tmp.string());
      ::close(fd);
      ::unlink(tmp.c_str());
      return std::unexpected(err);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = Error::from_errno("cannot rename to " + path.string());
    ::unlink(tmp.c_str());
    return std::unexpected(err);
  }
  return {};
}

std::optional<std::string> read_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  std::array<char, 4096> buf;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace gpureap::sim
