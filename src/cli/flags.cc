#include "cli/flags.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

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

std::chrono::milliseconds duration_or_throw(const std::string& name, const std::string& text) {
  auto d = parse_duration(text);
  if (!d) throw CLI::ValidationError(long_name(name), d.error().message);
  return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
}

// The kernel's PID_MAX_LIMIT: no pid is larger.
constexpr std::uint64_t kPidMaxLimit = 4194304;

// One spelling for a process id that is not one, whichever command reads it.
pid_t pid_or_throw(const std::string& name, const std::string& text) {
  if (auto pid = parse_count(text, name, 1, kPidMaxLimit)) return static_cast<pid_t>(*pid);
  throw CLI::ValidationError(long_name(name), fmt::format("'{}' is not a number from 1 to {}",
                                                          text, kPidMaxLimit));
}

}  // namespace

std::string flag_error(const std::string& name, const std::string& why) {
  return long_name(name) + ": " + why;
}

CLI::Option* add_duration(CLI::App& app, const std::string& name,
                          std::chrono::milliseconds& into, const std::string& description) {
  return app
      .add_option_function<std::string>(
          name, [&into, name](const std::string& text) { into = duration_or_throw(name, text); },
          description)
      ->type_name("DURATION")
      ->default_str(duration_flag(into));
}

CLI::Option* add_optional_duration(CLI::App& app, const std::string& name,
                                   std::optional<std::chrono::milliseconds>& into,
                                   const std::string& description) {
  return app
      .add_option_function<std::string>(
          name, [&into, name](const std::string& text) { into = duration_or_throw(name, text); },
          description)
      ->type_name("DURATION");
}

CLI::Option* add_optional_size(CLI::App& app, const std::string& name,
                               std::optional<std::uint64_t>& into, const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [&into, name](const std::string& text) {
            auto size = parse_size(text);
            if (!size) throw CLI::ValidationError(long_name(name), size.error().message);
            into = *size;
          },
          description)
      ->type_name("SIZE");
}

CLI::Option* add_gpu_selector(CLI::App& app, const std::string& name, gpu::GpuSelector& into,
                              const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [&into, name](const std::string& text) {
            auto selector = gpu::GpuSelector::parse(text);
            if (!selector) throw CLI::ValidationError(long_name(name), selector.error().message);
            into = std::move(*selector);
          },
          description)
      ->type_name("GPU");
}

CLI::Option* add_pid_list(CLI::App& app, const std::string& name, std::vector<pid_t>& into,
                          const std::string& description) {
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [&into, name](const std::vector<std::string>& texts) {
            if (texts.empty()) pid_or_throw(name, "");  // --pid '' (throws)
            for (const auto& text : texts) into.push_back(pid_or_throw(name, text));
          },
          description)
      ->delimiter(',')
      ->type_name("PID");
}

CLI::Option* add_optional_pid(CLI::App& app, const std::string& name, std::optional<pid_t>& into,
                              const std::string& description) {
  return app
      .add_option_function<std::string>(
          name, [&into, name](const std::string& text) { into = pid_or_throw(name, text); },
          description)
      ->type_name("PID");
}

CLI::Option* add_user(CLI::App& app, const std::string& name, std::optional<uid_t>& into,
                      const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [&into, name](const std::string& text) {
            if (text.empty())
              throw CLI::ValidationError(long_name(name), "'' is not a user name or uid");
            auto uid = proc::user_uid(text);
            if (!uid) throw CLI::ValidationError(long_name(name), uid.error().message);
            into = *uid;
          },
          description)
      ->type_name("USER");
}

CLI::Option* add_env_entries(CLI::App& app, const std::string& name,
                             std::vector<proc::EnvEntry>& into, const std::string& description) {
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [&into, name](const std::vector<std::string>& texts) {
            for (const auto& text : texts) {
              auto entry = proc::parse_env_entry(text);
              if (!entry) throw CLI::ValidationError(long_name(name), entry.error().message);
              into.push_back(std::move(*entry));
            }
          },
          description)
      ->allow_extra_args(false)
      ->type_name("NAME=VALUE");
}

CLI::Option* add_pattern(CLI::App& app, const std::string& name, std::optional<Pattern>& into,
                         const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [&into, name](const std::string& text) {
            auto pattern = Pattern::compile(text);
            if (!pattern)
              throw CLI::ValidationError(
                  long_name(name), "cannot use this regular expression: " + pattern.error().message);
            into = std::move(*pattern);
          },
          description)
      ->type_name("REGEX");
}

}  // namespace gpureap::cli
