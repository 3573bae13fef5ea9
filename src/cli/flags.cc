#include "cli/flags.h"

#include <CLI/CLI.hpp>

#include "cli/environment.h"
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

}  // namespace gpureap::cli
