#include "proc/proc_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "util/text.h"

namespace gpureap::proc {
namespace {

template <typename T>
std::optional<T> to_number(std::string_view s, int base = 10) {
  T value{};
  if (s.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n';
}

/// Pops the next blank-separated token off the front of `rest`.
std::string_view next_token(std::string_view& rest) {
  std::size_t b = 0;
  while (b < rest.size() && is_blank(rest[b])) ++b;
  std::size_t e = b;
  while (e < rest.size() && !is_blank(rest[e])) ++e;
  std::string_view tok = rest.substr(b, e - b);
  rest.remove_prefix(e);
  return tok;
}

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

}  // namespace

Result<StatInfo> parse_stat(std::string_view text) {
  std::size_t open = text.find('(');
  std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return fail("malformed stat: no '(comm)'");
  StatInfo st;
  auto pid = to_number<pid_t>(trim(text.substr(0, open)));
  if (!pid) return fail("malformed stat: bad pid");
  st.pid = *pid;
  st.comm = std::string(text.substr(open + 1, close - open - 1));

  // Fields 3.. follow the last ')'; collect the ones we need by number.
  std::string_view rest = text.substr(close + 1);
  std::string_view field[23];
  for (int i = 3; i <= 22; ++i) {
    field[i] = next_token(rest);
    if (field[i].empty()) return fail(fmt::format("malformed stat: truncated at field {}", i));
  }
  if (field[3].size() != 1) return fail("malformed stat: bad state");
  st.state = field[3][0];
  auto ppid = to_number<pid_t>(field[4]);
  auto pgid = to_number<pid_t>(field[5]);
  auto sid = to_number<pid_t>(field[6]);
  auto tty = to_number<int>(field[7]);
  auto flags = to_number<unsigned>(field[9]);
  auto utime = to_number<std::uint64_t>(field[14]);
  auto stime = to_number<std::uint64_t>(field[15]);
  auto threads = to_number<long>(field[20]);
  auto start = to_number<std::uint64_t>(field[22]);
  if (!ppid || !pgid || !sid || !tty || !flags || !utime || !stime || !threads || !start)
    return fail("malformed stat: a numeric field is not a number");
  next_token(rest);  // field 23, vsize
  if (auto rss = to_number<long>(next_token(rest))) st.rss_pages = *rss;
  st.utime = *utime;
  st.stime = *stime;
  st.ppid = *ppid;
  st.pgid = *pgid;
  st.sid = *sid;
  st.tty_nr = *tty;
  st.flags = *flags;
  st.num_threads = *threads;
  st.start_time = *start;
  return st;
}

char parse_stat_state(std::string_view text) {
  std::size_t close = text.rfind(')');
  if (close == std::string_view::npos) return '?';
  std::string_view rest = text.substr(close + 1);
  std::string_view tok = next_token(rest);
  return tok.size() == 1 ? tok[0] : '?';
}

StatusInfo parse_status(std::string_view text) {
  StatusInfo info;
  for_each_line(text, [&](std::string_view line) {
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return;
    std::string_view key = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    if (key == "Name") {
      info.name = std::string(trim(value));
    } else if (key == "State") {
      std::string_view v = trim(value);
      if (!v.empty()) info.state = v[0];
    } else if (key == "Uid") {
      info.real_uid = to_number<uid_t>(next_token(value));
      info.effective_uid = to_number<uid_t>(next_token(value));
    } else if (key == "PPid") {
      info.ppid = to_number<pid_t>(trim(value)).value_or(0);
    } else if (key == "Threads") {
      info.threads = to_number<long>(trim(value)).value_or(0);
    } else if (key == "NSpid") {
      info.nspid.clear();
      for (std::string_view tok = next_token(value); !tok.empty(); tok = next_token(value))
        if (auto p = to_number<pid_t>(tok)) info.nspid.push_back(*p);
    } else if (key == "SigPnd") {
      info.sig_pnd = to_number<std::uint64_t>(trim(value), 16).value_or(0);
    } else if (key == "ShdPnd") {
      info.shd_pnd = to_number<std::uint64_t>(trim(value), 16).value_or(0);
    } else if (key == "VmPin" || key == "VmLck" || key == "VmRSS") {
      // "VmPin:\t  243000000 kB": the kernel always writes kB.
      const std::uint64_t kb = to_number<std::uint64_t>(next_token(value)).value_or(0);
      (key == "VmPin" ? info.vm_pin : key == "VmLck" ? info.vm_lck : info.vm_rss) = kb * 1024;
    } else if (key == "SigIgn") {
      info.sig_ign = to_number<std::uint64_t>(trim(value), 16).value_or(0);
    }
  });
  return info;
}

std::vector<CgroupEntry> parse_cgroup(std::string_view text) {
  std::vector<CgroupEntry> entries;
  for_each_line(text, [&](std::string_view line) {
    // The path may itself contain ':', so split on the first two only.
    std::size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) return;
    std::size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return;
    auto id = to_number<int>(line.substr(0, c1));
    if (!id) return;
    entries.push_back(CgroupEntry{*id, std::string(line.substr(c1 + 1, c2 - c1 - 1)),
                                  std::string(line.substr(c2 + 1))});
  });
  return entries;
}

std::string pick_cgroup_path(const std::vector<CgroupEntry>& entries) {
  if (entries.empty()) return {};
  for (const auto& e : entries)
    if (e.hierarchy == 0 && e.controllers.empty() && e.path != "/") return e.path;
  for (const auto& e : entries)
    if (e.controllers == "name=systemd" && e.path != "/") return e.path;
  for (const auto& e : entries)
    if (e.hierarchy != 0 && e.path != "/") return e.path;
  return "/";
}

namespace {

std::vector<std::string_view> path_segments(std::string_view path) {
  std::vector<std::string_view> segs;
  while (!path.empty()) {
    std::size_t slash = path.find('/');
    std::string_view seg = path.substr(0, slash);
    if (!seg.empty()) segs.push_back(seg);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return segs;
}

/// `seg` = prefix + id + suffix with id hex (at least 12 digits): the first 12.
std::optional<std::string> hex_id_between(std::string_view seg, std::string_view prefix,
                                          std::string_view suffix) {
  if (!seg.starts_with(prefix) || !seg.ends_with(suffix)) return std::nullopt;
  std::string_view id = seg.substr(prefix.size(), seg.size() - prefix.size() - suffix.size());
  if (id.size() < 12 || !is_hex(id)) return std::nullopt;
  return std::string(id.substr(0, 12));
}

std::string_view strip_unit_suffix(std::string_view s) {
  for (std::string_view suffix : {".scope", ".slice", ".service"})
    if (s.ends_with(suffix)) return s.substr(0, s.size() - suffix.size());
  return s;
}

/// The container id (first 12 hex digits) in the segment below a pod's: raw (the
/// cgroupfs driver) or a runtime's scope (systemd driver). nullopt when it is none.
std::optional<std::string> pod_container_id(std::string_view seg) {
  if (auto id = hex_id_between(seg, "", "")) return id;
  for (std::string_view prefix : {"cri-containerd-", "crio-", "docker-"})
    if (auto id = hex_id_between(seg, prefix, ".scope")) return id;
  return std::nullopt;
}

/// "k8s-pod:<pod uid>", with "/<container id>" when the path goes down to the container.
std::string kubernetes_pod(const std::vector<std::string_view>& segs) {
  bool in_kubepods = false;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    std::string_view seg = segs[i];
    if (seg == "kubepods" || seg.starts_with("kubepods.") || seg.starts_with("kubepods-"))
      in_kubepods = true;
    if (!in_kubepods) continue;
    std::string uid;
    // systemd cgroup driver: kubepods-besteffort-pod<uid with '_'>.slice
    if (seg.starts_with("kubepods") && seg.ends_with(".slice")) {
      std::size_t pod = seg.find("-pod");
      if (pod != std::string_view::npos) {
        uid = std::string(seg.substr(pod + 4, seg.size() - pod - 4 - 6));
        std::replace(uid.begin(), uid.end(), '_', '-');
      }
    }
    // cgroupfs driver: /kubepods/[burstable|besteffort/]pod<uid>/<container>
    if (uid.empty() && seg.starts_with("pod") && seg.size() > 3) uid = std::string(seg.substr(3));
    if (uid.empty()) continue;
    std::string hint = "k8s-pod:" + uid;
    if (i + 1 < segs.size())
      if (auto container = pod_container_id(segs[i + 1])) hint += "/" + *container;
    return hint;
  }
  return {};
}

}  // namespace

std::string container_hint(std::string_view cgroup_path) {
  const std::vector<std::string_view> segs = path_segments(cgroup_path);
  if (segs.empty()) return {};

  if (std::string pod = kubernetes_pod(segs); !pod.empty()) return pod;

  for (std::size_t i = 0; i < segs.size(); ++i) {
    std::string_view seg = segs[i];
    if (seg == "docker" && i + 1 < segs.size())
      if (auto id = hex_id_between(segs[i + 1], "", "")) return "docker:" + *id;
    if (auto id = hex_id_between(seg, "docker-", ".scope")) return "docker:" + *id;
    if (auto id = hex_id_between(seg, "cri-containerd-", ".scope")) return "containerd:" + *id;
    if (auto id = hex_id_between(seg, "crio-", ".scope")) return "crio:" + *id;
  }

  for (std::size_t i = 0; i < segs.size(); ++i) {
    std::string_view seg = segs[i];
    if (seg == "lxc" && i + 1 < segs.size()) return "lxc:" + std::string(segs[i + 1]);
    for (std::string_view prefix : {"lxc.payload.", "lxc.monitor."})
      if (seg.starts_with(prefix) && seg.size() > prefix.size())
        return "lxc:" + std::string(seg.substr(prefix.size()));
    for (std::string_view prefix : {"libpod-conmon-", "libpod-"}) {
      if (auto id = hex_id_between(seg, prefix, ".scope")) return "podman:" + *id;
      if (auto id = hex_id_between(seg, prefix, "")) return "podman:" + *id;
    }
  }

  for (std::string_view seg : segs) {
    constexpr std::string_view kRun = "gpureap-run-";
    if (seg.starts_with(kRun) && seg.size() > kRun.size())
      return "gpureap-run:" + std::string(strip_unit_suffix(seg.substr(kRun.size())));
  }

  for (auto it = segs.rbegin(); it != segs.rend(); ++it)
    if (it->ends_with(".service") || it->ends_with(".scope")) return "systemd:" + std::string(*it);
  return {};
}

std::optional<std::string> container_stop_command(std::string_view hint) {
  if (hint.starts_with("systemd:") && hint.ends_with(".service"))
    return "systemctl stop " + std::string(hint.substr(8));
  if (hint.starts_with("docker:")) return "docker stop " + std::string(hint.substr(7));
  if (hint.starts_with("podman:")) return "podman stop " + std::string(hint.substr(7));
  if (hint.starts_with("k8s-pod:")) {
    std::string_view pod = hint.substr(8);
    return "delete its pod (pod uid " + std::string(pod.substr(0, pod.find('/'))) + ")";
  }
  return std::nullopt;
}

namespace {

/// The fixed fields of a maps line; `rest` is left at the path column.
struct MapsPrefix {
  std::string_view range, perms, offset, major, minor;
  std::uint64_t inode = 0;
};

std::optional<MapsPrefix> split_maps_prefix(std::string_view& rest) {
  MapsPrefix p;
  p.range = next_token(rest);
  p.perms = next_token(rest);
  p.offset = next_token(rest);
  std::string_view dev = next_token(rest);
  std::string_view inode = next_token(rest);
  std::size_t colon = dev.find(':');
  if (inode.empty() || colon == std::string_view::npos) return std::nullopt;
  p.major = dev.substr(0, colon);
  p.minor = dev.substr(colon + 1);
  auto ino = to_number<std::uint64_t>(inode);
  if (!ino) return std::nullopt;
  p.inode = *ino;
  return p;
}

}  // namespace

std::optional<MapsFileId> parse_maps_file_id(std::string_view line) {
  auto p = split_maps_prefix(line);
  if (!p) return std::nullopt;
  auto major = to_number<unsigned>(p->major, 16);
  auto minor = to_number<unsigned>(p->minor, 16);
  if (!major || !minor) return std::nullopt;
  return MapsFileId{*major, *minor, p->inode};
}

std::optional<MapsEntry> parse_maps_line(std::string_view line) {
  if (line.ends_with('\n')) line.remove_suffix(1);
  std::string_view rest = line;
  auto p = split_maps_prefix(rest);
  if (!p) return std::nullopt;
  std::size_t dash = p->range.find('-');
  if (dash == std::string_view::npos || p->perms.size() != 4) return std::nullopt;
  auto start = to_number<std::uint64_t>(p->range.substr(0, dash), 16);
  auto end = to_number<std::uint64_t>(p->range.substr(dash + 1), 16);
  auto offset = to_number<std::uint64_t>(p->offset, 16);
  auto major = to_number<unsigned>(p->major, 16);
  auto minor = to_number<unsigned>(p->minor, 16);
  if (!start || !end || !offset || !major || !minor) return std::nullopt;

  MapsEntry e{*start, *end, std::string(p->perms), *offset, *major, *minor, p->inode, {}, false};
  // The kernel pads to a column, then prints the path verbatim (it may hold spaces).
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  constexpr std::string_view kDeleted = " (deleted)";
  if (rest.ends_with(kDeleted)) {
    rest.remove_suffix(kDeleted.size());
    e.deleted = true;
  }
  e.path = std::string(rest);
  return e;
}

std::string format_cmdline(std::string_view raw) {
  while (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  std::string out(raw);
  std::replace(out.begin(), out.end(), '\0', ' ');
  return out;
}

std::vector<std::string> split_cmdline(std::string_view raw) {
  while (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  std::vector<std::string> args;
  if (raw.empty()) return args;
  for (std::size_t start = 0;;) {
    const auto nul = raw.find('\0', start);
    args.emplace_back(raw.substr(start, nul - start));
    if (nul == std::string_view::npos) break;
    start = nul + 1;
  }
  return args;
}

std::optional<unsigned> parse_char_device_major(std::string_view proc_devices,
                                                std::string_view driver) {
  // "Character devices:\n  1 mem\n195 nvidia\n511 nvidia-uvm\n\nBlock devices:\n..."
  bool in_char = false;
  std::optional<unsigned> found;
  for_each_line(proc_devices, [&](std::string_view line) {
    if (found) return;
    if (line == "Character devices:") {
      in_char = true;
      return;
    }
    if (line.ends_with("devices:")) {  // "Block devices:" ends the section
      in_char = false;
      return;
    }
    if (!in_char) return;
    while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
    auto space = line.find(' ');
    if (space == std::string_view::npos) return;
    if (line.substr(space + 1) != driver) return;
    found = to_number<unsigned>(line.substr(0, space));
  });
  return found;
}

std::vector<ListeningSocket> parse_listening_tcp(std::string_view table) {
  std::vector<ListeningSocket> out;
  while (!table.empty()) {
    const auto eol = table.find('\n');
    std::string_view line = table.substr(0, eol);
    table = eol == std::string_view::npos ? std::string_view{} : table.substr(eol + 1);
    // sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode ...
    std::vector<std::string_view> fields;
    for (std::size_t at = 0; at < line.size() && fields.size() < 10;) {
      at = line.find_first_not_of(' ', at);
      if (at == std::string_view::npos) break;
      auto end = line.find(' ', at);
      fields.push_back(line.substr(at, end == std::string_view::npos ? line.size() - at : end - at));
      at = end == std::string_view::npos ? line.size() : end;
    }
    if (fields.size() < 10 || fields[3] != "0A") continue;
    const auto colon = fields[1].rfind(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view port_hex = fields[1].substr(colon + 1);
    unsigned port = 0;
    std::uint64_t inode = 0;
    auto p = std::from_chars(port_hex.data(), port_hex.data() + port_hex.size(), port, 16);
    auto i = std::from_chars(fields[9].data(), fields[9].data() + fields[9].size(), inode);
    if (p.ec != std::errc() || p.ptr != port_hex.data() + port_hex.size() || port > 65535 ||
        i.ec != std::errc() || i.ptr != fields[9].data() + fields[9].size() || inode == 0)
      continue;
    out.push_back({inode, port});
  }
  return out;
}

std::optional<std::uint64_t> parse_socket_link(std::string_view target) {
  constexpr std::string_view prefix = "socket:[";
  if (!target.starts_with(prefix) || !target.ends_with(']')) return std::nullopt;
  std::string_view digits = target.substr(prefix.size(), target.size() - prefix.size() - 1);
  std::uint64_t inode = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), inode);
  if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size())
    return std::nullopt;
  return inode;
}

}  // namespace gpureap::proc
