#include "cli/cli_outline.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "util/units.h"

namespace gpureap::cli {
namespace {

// Options whose value is a path. Kinds that can be recognised from CLI11's table
// are (durations: a default with a unit); a path cannot, so it is named here.
ValueKind path_kind(const std::string& long_name) {
  if (long_name == "dev-dir") return ValueKind::directory;
  if (long_name == "nvml-library" || long_name == "from-log" || long_name == "weights" ||
      long_name == "model")
    return ValueKind::file;
  return ValueKind::text;
}

bool is_duration_default(const std::string& value) {
  if (value.empty() || !(value.back() == 's' || value.back() == 'm' || value.back() == 'h'))
    return false;
  return parse_duration(value).has_value();
}

OptionOutline option_outline(const CLI::Option& opt) {
  OptionOutline o;
  for (const auto& s : opt.get_snames()) o.names.push_back("-" + s);
  for (const auto& l : opt.get_lnames()) o.names.push_back("--" + l);
  o.description = opt.get_description();
  o.default_value = opt.get_default_str();
  if (opt.get_expected_max() == 0) return o;  // a flag
  o.value_name = opt.get_type_name();
  const std::string long_name = opt.get_lnames().empty() ? "" : opt.get_lnames().front();
  if (long_name == "gpu")
    o.kind = ValueKind::gpu;
  else if (long_name == "user")
    o.kind = ValueKind::user;
  else if (is_duration_default(o.default_value) || long_name == "deadline")  // free's has none
    o.kind = ValueKind::duration;
  else if (auto set = o.value_name.find(":{"); set != std::string::npos &&
                                                o.value_name.back() == '}') {
    // CLI::IsMember shows its set in the type name: "TEXT:{sglang,vllm}".
    o.kind = ValueKind::choice;
    std::string items = o.value_name.substr(set + 2, o.value_name.size() - set - 3);
    for (size_t start = 0; start <= items.size();) {
      size_t comma = std::min(items.find(',', start), items.size());
      o.choices.push_back(items.substr(start, comma - start));
      start = comma + 1;
    }
  } else {
    o.kind = path_kind(long_name);
  }
  if (o.kind == ValueKind::duration) o.value_name = "DURATION";
  return o;
}

}  // namespace

CommandOutline outline_of(const CLI::App& app, const std::string& name) {
  CommandOutline c;
  c.name = name;
  c.description = app.get_description();
  c.footer = app.get_footer();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr() || opt == app.get_help_all_ptr()) continue;
    if (opt->get_group().empty()) continue;  // hidden
    if (!opt->nonpositional()) {
      OptionOutline p = option_outline(*opt);
      p.names = {opt->get_name(true)};
      c.positionals.push_back(std::move(p));
      continue;
    }
    c.options.push_back(option_outline(*opt));
  }
  return c;
}

std::vector<CommandOutline> visible_commands(const CLI::App& app) {
  std::vector<CommandOutline> out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
    out.push_back(outline_of(*sub, sub->get_name()));
  return out;
}

}  // namespace gpureap::cli
