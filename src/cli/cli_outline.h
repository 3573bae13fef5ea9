#pragma once
// The command line as data (report/command_outline.h), read from a CLI::App's own
// tables: the visible commands, their options, value names, defaults and help texts.
// report/man_page and report/completion render what this reads.

#include <string>
#include <vector>

#include "report/command_outline.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpureap::cli {

using report::CommandOutline;
using report::OptionOutline;
using report::summary_of;
using report::ValueKind;

/// The top level's own outline (global options) and one per visible subcommand, in
/// registration order. Hidden commands (empty group: completion, man-page) are left out.
CommandOutline outline_of(const CLI::App& app, const std::string& name);
std::vector<CommandOutline> visible_commands(const CLI::App& app);

}  // namespace gpureap::cli
