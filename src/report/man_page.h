#pragma once
// The man pages as troff, rendered from the command line as data (report/command_outline.h),
// so they cannot drift from --help. gpureap(1) gets the global options, the commands, one
// example each and every exit status; gpureap-COMMAND(1) gets the command's description,
// options, exit status and examples (the "Examples:" and "Exit status:" paragraphs of its
// help become sections) and its extra sections (report/man_sections.h). ENVIRONMENT and
// FILES are written here: they are not part of any --help. Pure.

#include <string>
#include <vector>

#include "report/command_outline.h"

namespace gpureap::report {

struct ManPage {
  std::string file;  // "gpureap-free.1"
  std::string text;  // troff
};

/// What the pages' .TH line names: the date of the commit ("2026-12-05") and the version
/// ("0.9.1", no build details).
struct ManPageStamp {
  std::string date;
  std::string version;
};

/// gpureap(1) from `top` (the global options, gpureap's description and footer), then
/// gpureap-COMMAND(1) for each of `commands`, in their order. Paths of the source tree
/// (docs/, contrib/) in the help texts are named where the package installs them.
std::vector<ManPage> man_pages(const CommandOutline& top, const std::vector<CommandOutline>& commands,
                               const ManPageStamp& stamp);

}  // namespace gpureap::report
