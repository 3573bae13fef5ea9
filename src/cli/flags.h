#pragma once
// Typed options: CLI11 reads a flag straight into the type the libraries take
// (a duration, a GPU selector), checking it when the command line is parsed. A bad
// value is a usage error (exit 2) that names the option, before anything is scanned
// or signalled, and the default shown in --help is the default used.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_select.h"
#include "proc/environ.h"
#include "util/pattern.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace gpureap::cli {

/// --NAME DURATION ("500ms", "30s", "2m"; gpureap's parse_duration) into `into`,
/// whose value on entry is the default shown in --help.
CLI::Option* add_duration(CLI::App& app, const std::string& name,
                          std::chrono::milliseconds& into, const std::string& description);

/// The same for a duration without a default (nullopt when the flag is not given).
CLI::Option* add_optional_duration(CLI::App& app, const std::string& name,
                                   std::optional<std::chrono::milliseconds>& into,
                                   const std::string& description);

/// --release-budget DURATION (more than 0) into `into`: the release model's budget
/// (inventory/release_model.h). Global: main adds it to the top level (hidden) and to the
/// commands that judge a release, where --help and their man pages list it.
CLI::Option* add_release_budget(CLI::App& app, std::optional<std::chrono::milliseconds>& into);

/// --NAME SIZE ("512MiB", "2GiB"; util/units.h parse_size), nullopt when not given.
CLI::Option* add_optional_size(CLI::App& app, const std::string& name,
                               std::optional<std::uint64_t>& into, const std::string& description);

/// --NAME GPU: a selector (gpu/gpu_select.h), parsed here and resolved by the node.
CLI::Option* add_gpu_selector(CLI::App& app, const std::string& name, gpu::GpuSelector& into,
                              const std::string& description);

/// --NAME PID[,PID...], repeatable: process ids, each from 1 to the kernel's
/// PID_MAX_LIMIT (4194304).
CLI::Option* add_pid_list(CLI::App& app, const std::string& name, std::vector<pid_t>& into,
                          const std::string& description);

/// --NAME PID: one process id as above, nullopt when not given.
CLI::Option* add_optional_pid(CLI::App& app, const std::string& name, std::optional<pid_t>& into,
                              const std::string& description);

/// --NAME USER: a user name or uid, resolved when the command line is parsed.
CLI::Option* add_user(CLI::App& app, const std::string& name, std::optional<uid_t>& into,
                      const std::string& description);

/// --NAME NAME=VALUE, repeatable, one entry per flag (a value may hold spaces or commas).
CLI::Option* add_env_entries(CLI::App& app, const std::string& name,
                             std::vector<proc::EnvEntry>& into, const std::string& description);

/// --NAME REGEX: RE2 syntax (util/pattern.h), compiled when the command line is parsed.
CLI::Option* add_pattern(CLI::App& app, const std::string& name, std::optional<Pattern>& into,
                         const std::string& description);

/// --NAME TEXT: a text that may not be empty (`--instance ''` is refused, naming the
/// option, not taken as "not given").
CLI::Option* add_text(CLI::App& app, const std::string& name, std::string& into,
                      const std::string& description, const std::string& type);

/// The message CLI11 reports for a value `name` cannot take: "--NAME: why".
std::string flag_error(const std::string& name, const std::string& why);

}  // namespace gpureap::cli
