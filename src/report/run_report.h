#pragma once
// Rendering of `gpureap run`'s own lines (stderr: stdout belongs to CMD): what
// went wrong at the teardown, and what the run's GPUs still hold, classified.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/replace_report.h"
#include "supervise/run_session.h"

namespace gpureap::report {

/// One line of run's own output: "gpureap run: <text>\n", with process text escaped.
std::string run_line(const std::string& text);
/// The same, broken at words to `columns` (stderr's terminal width) when given.
std::string run_line(const std::string& text, std::optional<std::size_t> columns);

/// Everything worth knowing after a run ended: warnings, a lost reaper, survivors
/// of SIGKILL, each GPU still held (with evidence and the next step), memory that
/// could not be verified. Empty when all went well.
std::string run_problems_text(const supervise::RunOutcome& out);

/// `gpureap --json run`'s document (docs/json-schema.md), for stderr: stdout is the
/// command's. `exit_code` is gpureap's own exit status.
/// `replace`: what --replace/--replace-orphans/--free-first did first (its "replace"
/// object, replace_json), or nullptr (null).
nlohmann::ordered_json run_json(const std::vector<std::string>& argv,
                                const supervise::RunOutcome& out, int exit_code,
                                const ReplaceRecord* replace = nullptr);

/// The document of a run whose CMD was not started because what had to be freed first
/// was not (`started` false, the "replace" object says why in its messages).
nlohmann::ordered_json run_not_started_json(const std::vector<std::string>& argv,
                                            const ReplaceRecord& replace, int exit_code);

}  // namespace gpureap::report
