#include "agent/watch_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>

#include "agent/gnutls_load.h"
#include "agent/web_config.h"
#include "report/terminal_text.h"
#include "util/pattern.h"
#include "util/text.h"

namespace gpureap::agent {
namespace {

Result<std::chrono::milliseconds> positive_duration(const std::string& flag,
                                                    const std::string& text) {
  auto d = parse_duration(text);
  if (!d) return fail(fmt::format("{}: {}", flag, d.error().message));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  if (ms.count() <= 0) return fail(fmt::format("{}: must be more than 0 (got {})", flag, text));
  return ms;
}

/// --web-config: the file trusted as the options file is (it says who may read the
/// metrics), parsed, its certificate and key read, and GnuTLS loaded when it asks
/// for TLS, so that a machine without GnuTLS (or the file's mistakes) stops the
/// start with exit 2 instead of serving plain HTTP.
Result<WebConfig> read_web_config_option(const WatchFlags& f) {
  const std::string& path = f.web_config;
  if (f.no_listen) return fail("--web-config: nothing is served with --no-listen");
  if (::access(path.c_str(), F_OK) != 0)
    return fail(fmt::format("--web-config {}: {}", path, std::strerror(errno)));
  if (auto trusted = check_file_owner("--web-config", path, "decides who may read the metrics");
      !trusted)
    return std::unexpected(trusted.error());
  auto web = read_web_config(path);
  if (!web) return web;
  if (web->tls()) {
    const char* library = std::getenv("GPUREAP_GNUTLS_LIBRARY");
    auto loaded = load_gnutls(library && *library ? library : kGnutlsLibrary);
    if (!loaded)
      return fail(fmt::format(
          "--web-config {}: tls_server_config needs GnuTLS ({}), which could not be loaded: {}. "
          "Install libgnutls30, or leave tls_server_config out and put a TLS proxy in front",
          path, kGnutlsLibrary, loaded.error().message));
  }
  return web;
}

}  // namespace

Result<AgentOptions> to_agent_options(const WatchFlags& f, const std::string& state_dir,
                                      const std::string& version) {
  AgentOptions o;
  o.state_dir = state_dir;
  auto tick = positive_duration("--tick", f.tick);
  if (!tick) return std::unexpected(tick.error());
  o.watch.tick = *tick;
  auto full = positive_duration("--full-scan-interval", f.full_scan);
  if (!full) return std::unexpected(full.error());
  o.watch.full_scan = *full;
  if (!f.no_listen) o.listen = f.listen;
  if (!f.textfile.empty()) o.textfile_dir = f.textfile;
  o.per_holder = f.per_holder;
  if (!f.socket_group.empty()) {
    if (const group* g = ::getgrnam(f.socket_group.c_str())) {
      o.socket_group = g->gr_gid;
    } else if (auto gid = parse_count(f.socket_group, "--socket-group", 0, 0xfffffffe); gid) {
      o.socket_group = static_cast<gid_t>(*gid);
    } else {
      return fail(fmt::format("--socket-group: no group named {}", f.socket_group));
    }
  }
  if (!f.reap_after.empty()) {
    auto after = positive_duration("--reap-orphans-after", f.reap_after);
    if (!after) return std::unexpected(after.error());
    o.reap_orphans_after = *after;
  }
  if (!f.keep.empty()) {
    auto pattern = Pattern::compile(f.keep);
    if (!pattern) return fail("--keep: " + pattern.error().message);
    o.keep_regex = f.keep;
  }
  if (!f.web_config.empty()) {
    auto web = read_web_config_option(f);
    if (!web) return std::unexpected(web.error());
    o.web = std::move(*web);
  }
  o.reap_dry_run = f.reap_dry_run;
  if (o.reap_dry_run && !o.reap_orphans_after)
    return fail("--reap-dry-run: needs --reap-orphans-after (what would be reaped, and when)");
  o.version = version;
  return o;
}

Result<std::set<std::string>> check_options_file(const std::string& path) {
  std::set<std::string> keys_set;
  std::ifstream in(path);
  if (!in) return keys_set;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = trim(line);
    if (text.empty() || text.front() == '#' || text.front() == ';') continue;
    auto where = [&] { return fmt::format("--config {}, line {}", path, number); };
    if (text.front() == '[')
      return fail(
          fmt::format("{}: sections are not read ({}): put the keys at the top of the "
                      "file, without a section",
                      where(), report::terminal_text(text)));
    const auto eq = text.find('=');
    if (eq == std::string_view::npos)
      return fail(fmt::format("{}: expected `key = value`, got '{}'", where(),
                              report::terminal_text(text)));
    std::string_view key = trim(text.substr(0, eq));
    if (key.size() >= 2 && key.front() == '"' && key.back() == '"')
      key = key.substr(1, key.size() - 2);
    if (std::none_of(kOptionKeys.begin(), kOptionKeys.end(),
                     [&](const OptionKey& k) { return key == k.key; })) {
      std::vector<std::string_view> keys;
      for (const auto& k : kOptionKeys) keys.push_back(k.key);
      return fail(fmt::format("{}: unknown key '{}' (the file takes {})", where(),
                              report::terminal_text(key), fmt::join(keys, ", ")));
    }
    // After a quoted value, only a `#` comment: CLI11 reads `"x" ; note` as several
    // values ("At Most 1 required but received 4", W3-12d).
    std::string_view value = trim(text.substr(eq + 1));
    if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
      const auto close = value.find(value.front(), 1);
      std::string_view rest =
          close == std::string_view::npos ? std::string_view{} : trim(value.substr(close + 1));
      if (!rest.empty() && rest.front() != '#')
        return fail(fmt::format("{}: '{}' after the value of '{}': a comment after a value starts "
                                "with # (; starts a comment only at the start of a line)",
                                where(), report::terminal_text(rest), report::terminal_text(key)));
    }
    keys_set.insert(std::string(key));
  }
  return keys_set;
}

Result<void> check_file_owner(const std::string& option, const std::string& path,
                              const std::string& steers) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (!real) return {};
  const uid_t me = ::geteuid();
  std::string at = real.get();
  for (bool is_file = true;; is_file = false) {
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0) return {};
    const std::string what = is_file ? "the file" : "its directory " + at;
    auto refuse = [&](const std::string& why) {
      return fail(fmt::format(
          "{} {}: {} {}: whoever can write it {}; refusing it. It must be owned by root{} and "
          "writable by no one else",
          option, path, what, why, steers, me == 0 ? "" : fmt::format(" or uid {}", me)));
    };
    if (st.st_uid != 0 && st.st_uid != me)
      return refuse(fmt::format("is owned by uid {}", st.st_uid));
    const bool sticky_dir = !is_file && (st.st_mode & S_ISVTX) != 0;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !sticky_dir)
      return refuse(fmt::format("is writable by {} (mode {:04o})",
                                (st.st_mode & S_IWOTH) ? "everyone" : "its group",
                                st.st_mode & 07777));
    if (at == "/") return {};
    const auto slash = at.rfind('/');
    at = slash == 0 ? "/" : at.substr(0, slash);
  }
}

}  // namespace gpureap::agent
