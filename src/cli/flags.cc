#include "cli/flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>

#include "cli/environment.h"
#include "proc/process_table.h"
#include "util/units.h"

namespace gpureap::cli {
namespace {

// The option's first long name, as users type it ("--grace").
std::string long_name(const std::string& names) {
  auto comma = names.find(',');
  std::string first = names.substr(0, comma);
  if (comma != std::string::npos && first.rfind("--", 0) != 0) first = names.substr(comma + 1);
  return first;
}

// The parsed value, or the usage error "--NAME: why" (exit 2, with the hint line).
template <class T>
T value_or_throw(const std::string& name, Result<T> parsed) {
  if (!parsed) throw CLI::ValidationError(long_name(name), parsed.error().message);
  return std::move(*parsed);
}

using Take = std::function<void(const std::string&)>;

// An option of one value per flag; `take` parses the text into its destination.
CLI::Option* one_value(CLI::App& app, const std::string& name, const std::string& description,
                       const std::string& type, Take take) {
  return app.add_option_function<std::string>(name, std::move(take), description)
      ->type_name(type);
}

// An option that may be repeated; every value goes through `take`.
CLI::Option* each_value(CLI::App& app, const std::string& name, const std::string& description,
                        const std::string& type, Take take) {
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [take = std::move(take)](const std::vector<std::string>& texts) {
            if (texts.empty()) take("");  // `--pid ''`: the empty value is refused, not skipped
            for (const auto& text : texts) take(text);
          },
          description)
      ->type_name(type);
}

std::chrono::milliseconds duration_or_throw(const std::string& name, const std::string& text) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      value_or_throw(name, parse_duration(text)));
}

// The kernel's PID_MAX_LIMIT: no pid is larger.
constexpr std::uint64_t kPidMaxLimit = 4194304;

// One spelling for a process id that is not one, whichever command reads it. Digits
// only: a pid is never written "+5" (as "0x10" and "1e3" are refused, so is a sign).
pid_t pid_or_throw(const std::string& name, const std::string& text) {
  if (auto pid = parse_count(text, name, 1, kPidMaxLimit); pid && !text.starts_with('+'))
    return static_cast<pid_t>(*pid);
  throw CLI::ValidationError(long_name(name), fmt::format("'{}' is not a number from 1 to {}",
                                                          text, kPidMaxLimit));
}

}  // namespace

std::string flag_error(const std::string& name, const std::string& why) {
  return long_name(name) + ": " + why;
}

CLI::Option* add_duration(CLI::App& app, const std::string& name,
                          std::chrono::milliseconds& into, const std::string& description) {
  return one_value(app, name, description, "DURATION",
                   [&into, name](const std::string& t) { into = duration_or_throw(name, t); })
      ->default_str(duration_flag(into));
}

CLI::Option* add_optional_duration(CLI::App& app, const std::string& name,
                                   std::optional<std::chrono::milliseconds>& into,
                                   const std::string& description) {
  return one_value(app, name, description, "DURATION",
                   [&into, name](const std::string& t) { into = duration_or_throw(name, t); });
}

CLI::Option* add_release_budget(CLI::App& app, std::optional<std::chrono::milliseconds>& into) {
  const std::string name = "--release-budget";
  return one_value(
      app, name,
      "How long memory no process holds may stay flat after its holders exited before it is "
      "driver-held (a reset or reboot frees it); until then it is releasing. Default: 2 s + "
      "0.12 s per GiB of the host memory they had pinned, 30 s to 120 s. Measured on an H100: "
      "device memory back 0.06-0.07 s after SIGKILL, beside 20-50 GiB of pinned host memory "
      "0.3-3.8 s (docs/release.md)",
      "DURATION", [&into, name](const std::string& t) {
        const auto d = duration_or_throw(name, t);
        if (d.count() <= 0) throw CLI::ValidationError(name, "must be more than 0");
        into = d;
      });
}

CLI::Option* add_optional_size(CLI::App& app, const std::string& name,
                               std::optional<std::uint64_t>& into, const std::string& description) {
  return one_value(app, name, description, "SIZE", [&into, name](const std::string& t) {
    into = value_or_throw(name, parse_size(t));
  });
}

CLI::Option* add_gpu_selector(CLI::App& app, const std::string& name, gpu::GpuSelector& into,
                              const std::string& description) {
  return one_value(app, name, description, "GPU", [&into, name](const std::string& t) {
    into = value_or_throw(name, gpu::GpuSelector::parse(t));
  });
}

CLI::Option* add_pid_list(CLI::App& app, const std::string& name, std::vector<pid_t>& into,
                          const std::string& description) {
  // Split here, not by CLI11's delimiter, which drops the empty part of "1,,2".
  return each_value(app, name, description, "PID", [&into, name](const std::string& t) {
    const bool list = t.find(',') != std::string::npos;
    for (std::size_t from = 0;;) {
      const std::size_t comma = t.find(',', from);
      const std::string part = t.substr(from, comma == std::string::npos ? comma : comma - from);
      if (part.empty() && list)
        throw CLI::ValidationError(long_name(name), "'" + t + "' has an empty pid in its list");
      into.push_back(pid_or_throw(name, part));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  });
}

CLI::Option* add_optional_pid(CLI::App& app, const std::string& name, std::optional<pid_t>& into,
                              const std::string& description) {
  return one_value(app, name, description, "PID",
                   [&into, name](const std::string& t) { into = pid_or_throw(name, t); });
}

CLI::Option* add_user(CLI::App& app, const std::string& name, std::optional<uid_t>& into,
                      const std::string& description) {
  return one_value(app, name, description, "USER", [&into, name](const std::string& t) {
    if (t.empty()) throw CLI::ValidationError(long_name(name), "'' is not a user name or uid");
    into = value_or_throw(name, proc::user_uid(t));
  });
}

// One NAME=VALUE per --env: a value may hold spaces or commas.
CLI::Option* add_env_entries(CLI::App& app, const std::string& name,
                             std::vector<proc::EnvEntry>& into, const std::string& description) {
  return each_value(app, name, description, "NAME=VALUE",
                    [&into, name](const std::string& t) {
                      into.push_back(value_or_throw(name, proc::parse_env_entry(t)));
                    })
      ->allow_extra_args(false);
}

CLI::Option* add_pattern(CLI::App& app, const std::string& name, std::optional<Pattern>& into,
                         const std::string& description) {
  return one_value(app, name, description, "REGEX", [&into, name](const std::string& t) {
    if (t.empty())
      throw CLI::ValidationError(long_name(name),
                                 "'' would match every command line; give a regular expression");
    auto pattern = Pattern::compile(t);
    if (!pattern)
      throw CLI::ValidationError(long_name(name),
                                 "cannot use this regular expression: " + pattern.error().message);
    into = std::move(*pattern);
  });
}

CLI::Option* add_text(CLI::App& app, const std::string& name, std::string& into,
                      const std::string& description, const std::string& type) {
  return one_value(app, name, description, type, [&into, name, type](const std::string& t) {
    if (t.empty())
      throw CLI::ValidationError(long_name(name), fmt::format("needs a value ({}), not ''", type));
    into = t;
  });
}

}  // namespace gpureap::cli
