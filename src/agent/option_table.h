#pragma once
// The one table of `gpureap watch`'s options: each row is one option's long name (also its
// key in the options file), what it takes, its default, its help, where its text goes
// (OptionTexts), and how the running agent holds it (its value as text, the words a
// reload line says, whether a reload applies it). The command line and the options file
// (cli/watch_command.cc), --help and the man page (rendered from the command line), the
// reload line (option_changes.h) and the start line's "overridden" keys read it; a new
// option is one row here and one check in resolve_options.

#include <string>
#include <vector>

#include "agent/option_texts.h"
#include "agent/options.h"

namespace gpureap::agent {

struct WatchOptionRow {
  std::string key;           // "reap-orphans-after": --reap-orphans-after, and the file's key
  std::string type_name;     // "DURATION"; "" for a flag
  std::string default_text;  // shown by --help; "" for none
  std::string help;
  // Where the text goes: exactly one of the three.
  std::string OptionTexts::*text = nullptr;              // a value
  bool OptionTexts::*flag = nullptr;                     // a flag (the file: true or false)
  std::vector<std::string> OptionTexts::*list = nullptr;  // repeatable (the file: a list)
  /// The value as the agent holds it, as its key takes it ("15m"; "" when off). nullptr:
  /// no value of its own (--no-listen is listen's "").
  std::string (*value)(const AgentOptions&) = nullptr;
  /// What a reload applies (nullptr: bound or opened at start, waits for the next one).
  void (*apply)(AgentOptions& in_force, const AgentOptions& fresh) = nullptr;
  /// The reload line's words for it ("reaping orphans"); "" for the key itself.
  std::string words = {};
};

/// Every option of `watch` but --config, in --help's order.
const std::vector<WatchOptionRow>& watch_option_table();

/// The keys of the table (what the options file may set).
std::vector<std::string> watch_option_keys();

}  // namespace gpureap::agent
