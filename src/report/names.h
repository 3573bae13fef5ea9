#pragma once
// An action's outcome in words, as shown and in JSON (docs/json-schema.md). The enums'
// words are each in its enum_name beside the enum (util/enum_names.h); signals are
// named in util/signal_name.h.

#include <string>
#include <string_view>

#include "reclaim/escalation.h"

namespace gpureap::report {

/// The fixed part of an action's outcome ("exited", "already gone", ...).
std::string_view to_string(reclaim::Outcome o);
/// An action's outcome as shown and in JSON: the fixed part plus its detail
/// ("signal failed: <why>").
std::string outcome_text(const reclaim::Action& a);

}  // namespace gpureap::report
