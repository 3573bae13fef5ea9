#include "agent/witness_keeper.h"

#include "inventory/witness_store.h"

namespace gpureap::agent {

WitnessKeeper::Witnesses WitnessKeeper::load(const std::string& proc_root) const {
  if (state_dir_.empty()) return {};
  return inventory::load_witnesses(state_dir_, proc_root);
}

void WitnessKeeper::keep(const Witnesses& dead) {
  if (state_dir_.empty() || dead == saved_) return;
  auto saved = inventory::save_witnesses(state_dir_, dead);
  if (!saved && !failed_ && problems_)
    problems_(saved.error().message +
              "; a direct look cannot see what the agent saw die until it can be written");
  failed_ = !saved;
  saved_ = dead;
}

}  // namespace gpureap::agent
