#pragma once
// `gpureap watch`'s options as given (the command line and the options file alike,
// strings), checked into AgentOptions; the options file's own checks: every line a
// known key (W2-05), and the file trusted only from root or the agent's own user
// (W3-09). cli/watch_command parses the command line (CLI11) and reads the file with
// CLI11's reader; the checks and the meaning are here. Prints nothing.

#include <array>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/http_server.h"
#include "agent/watcher.h"
#include "util/result.h"
#include "util/units.h"

namespace gpureap::agent {

/// The options as given (strings: checked by to_agent_options, so that an options
/// file, read at start and re-read on SIGHUP, goes through the same checks as the
/// command line).
struct WatchFlags {
  std::string listen = kDefaultListen;
  bool no_listen = false;
  std::string textfile;
  std::string tick = duration_as_option(kDefaultTick);
  std::string full_scan = duration_as_option(kDefaultFullScan);
  bool per_holder = false;
  std::string socket_group;
  std::string reap_after;
  std::string keep;
  std::string web_config;
  bool reap_dry_run = false;
  std::string config;
  /// Keys the options file sets that the command line overrides (said in the start line).
  std::vector<std::string> overridden;
};

/// Every option of `watch` but --config is a key of the options file, by its long
/// name without the dashes: one table for the command line, the file and "the
/// command line wins".
struct OptionKey {
  const char* key;
  std::string WatchFlags::*text = nullptr;  // a value option
  bool WatchFlags::*flag = nullptr;         // a flag (the file says true or false)
};
inline constexpr std::array<OptionKey, 11> kOptionKeys{{
    {"listen", &WatchFlags::listen, nullptr},
    {"web-config", &WatchFlags::web_config, nullptr},
    {"no-listen", nullptr, &WatchFlags::no_listen},
    {"textfile", &WatchFlags::textfile, nullptr},
    {"full-scan-interval", &WatchFlags::full_scan, nullptr},
    {"socket-group", &WatchFlags::socket_group, nullptr},
    {"tick", &WatchFlags::tick, nullptr},
    {"per-holder-metrics", nullptr, &WatchFlags::per_holder},
    {"reap-orphans-after", &WatchFlags::reap_after, nullptr},
    {"keep", &WatchFlags::keep, nullptr},
    {"reap-dry-run", nullptr, &WatchFlags::reap_dry_run},
}};

/// The options as AgentOptions (durations positive, the group known, --keep compiled,
/// --web-config read and trusted, GnuTLS loaded when it asks for TLS); the error names
/// the option. `version`: the agent's (its metrics and start line say it).
Result<AgentOptions> to_agent_options(const WatchFlags& f, const std::string& state_dir,
                                      const std::string& version);

/// Every line of the options file at `path` is blank, a comment or `key = value` with a
/// key of kOptionKeys: CLI11's reader drops what it does not know, and a dropped `keep`
/// (misspelt, or under an INI `[section]`) would get the holder it protects reaped
/// (W2-05). Returns the keys it sets; the error names the line and the key. A file that
/// cannot be read gives no keys (the reader says why).
Result<std::set<std::string>> check_options_file(const std::string& path);

/// A file that steers the agent (`option`'s, as `steers` says) is refused unless it and
/// every directory on its path are owned by root or the agent's own user and writable
/// by nobody else (W3-09). A directory with the sticky bit (/tmp) keeps others from
/// replacing what its owner put there. A path that does not resolve is left to the
/// reader, which says why.
Result<void> check_file_owner(const std::string& option, const std::string& path,
                              const std::string& steers);

}  // namespace gpureap::agent
