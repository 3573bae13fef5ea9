#include "agent/option_texts.h"

#include <fmt/format.h>
#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent/gate.h"
#include "agent/gate_modes.h"
#include "agent/gnutls_load.h"
#include "agent/options_file.h"
#include "util/pattern.h"

namespace gpureap::agent {

Result<WebConfig> read_web_config_option(const OptionTexts& f) {
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
    if (auto key = check_private_file(fmt::format("--web-config {}: key_file", path),
                                      web->key_file, "can pose as this agent");
        !key)
      return std::unexpected(key.error());
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

Result<AgentOptions> resolve_options(const OptionTexts& f, const std::string& state_dir) {
  AgentOptions o;
  o.state_dir = state_dir;
  auto tick = parse_positive_duration(f.tick, "--tick");
  if (!tick) return std::unexpected(tick.error());
  o.watch.tick = *tick;
  if (f.full_scan == "auto") {
    o.watch.full_scan = kDefaultFullScan;
    o.watch.full_scan_auto = true;
  } else {
    auto full = parse_positive_duration(f.full_scan, "--full-scan-interval");
    if (!full) return std::unexpected(full.error());
    o.watch.full_scan = *full;
  }
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
    auto after = parse_positive_duration(f.reap_after, "--reap-orphans-after");
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
  if (auto actions = make_node_actions(f.gate, f.gate_dry_run); !actions)
    return std::unexpected(actions.error());
  o.gate = f.gate;
  o.gate_dry_run = f.gate_dry_run;
  if (o.gate_dry_run && o.gate.empty())
    return fail("--gate-dry-run: needs --gate (what would be closed, and when)");
  o.reap_dry_run = f.reap_dry_run;
  if (o.reap_dry_run && !o.reap_orphans_after)
    return fail("--reap-dry-run: needs --reap-orphans-after (what would be reaped, and when)");
  return o;
}

}  // namespace gpureap::agent
