#pragma once
// Sections of a command's man page that are not part of its --help: what a reader of the
// output needs and a --help has no room for (gpureap-status(1)'s FIELDS: every column and
// mark of the table). man_page adds them after the help's own sections.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpureap::report {

/// The extra sections of gpureap-`command`(1), in order: (heading, troff body). Empty for a
/// command that has none.
std::vector<std::pair<std::string, std::string>> extra_man_sections(std::string_view command);

/// The body of VERDICTS AND EVIDENCE (troff), in gpureap(1) and gpureap-status(1): orphaned,
/// detached, live; owned, witnessed, inferred and what each permits; releasing, no_holder,
/// driver_held, outside_namespace, unknown.
std::string evidence_man_section();

}  // namespace gpureap::report
