#pragma once
// `gpureap watch`'s options as given (text, from the command line or the options file)
// and the one check that turns them into the agent's options: the command line at start
// and the options file re-read on SIGHUP go through the same function, so a value the
// command line refuses is refused in the file too. docs/watch.md.

#include <string>
#include <vector>

#include "agent/options.h"
#include "agent/http_server.h"
#include "agent/web_config.h"
#include "util/result.h"
#include "util/units.h"

namespace gpureap::agent {

/// One field per option of `watch` that the options file may set (its key is the
/// option's long name without the dashes).
struct OptionTexts {
  std::string listen = kDefaultListen;
  bool no_listen = false;
  std::string textfile;
  std::string tick = duration_as_option(kDefaultTick);
  std::string full_scan = "auto";
  bool per_holder = false;
  std::string socket_group;  // a group name or gid
  std::string reap_after;
  std::string keep;          // RE2
  std::string web_config;    // a file
  bool reap_dry_run = false;
  std::vector<std::string> gate;  // --gate, repeatable
  bool gate_dry_run = false;
};

/// The agent's options (state directory `state_dir`; `version` left empty for the
/// caller), or the first value that cannot be taken, named by its option (exit 2).
Result<AgentOptions> resolve_options(const OptionTexts& texts, const std::string& state_dir);

/// --web-config: the file trusted as the options file is (it says who may read the
/// metrics), parsed, its certificate and key read, and GnuTLS loaded when it asks for
/// TLS, so that a machine without GnuTLS (or the file's mistakes) stops the start
/// instead of serving plain HTTP.
Result<WebConfig> read_web_config_option(const OptionTexts& texts);

}  // namespace gpureap::agent
