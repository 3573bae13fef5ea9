#include "agent/option_changes.h"

#include "agent/option_table.h"
#include "agent/options.h"

namespace gpureap::agent {
namespace {

/// The table's rows with a value, what is set at start first, then the reloadable
/// (docs/watch.md's order), each in the table's order.
std::vector<const WatchOptionRow*> reload_order() {
  std::vector<const WatchOptionRow*> rows;
  for (bool reloadable : {false, true})
    for (const auto& row : watch_option_table())
      if (row.value && (row.apply != nullptr) == reloadable) rows.push_back(&row);
  return rows;
}

}  // namespace

std::vector<OptionChange> option_changes(const AgentOptions& before, const AgentOptions& after) {
  std::vector<OptionChange> out;
  for (const WatchOptionRow* row : reload_order()) {
    std::string was = row->value(before), now = row->value(after);
    if (was != now)
      out.push_back({row->key, std::move(was), std::move(now), row->apply != nullptr, row->words});
  }
  return out;
}

void apply_reloadable(AgentOptions& in_force, const AgentOptions& fresh) {
  for (const auto& row : watch_option_table())
    if (row.apply) row.apply(in_force, fresh);
}

}  // namespace gpureap::agent
