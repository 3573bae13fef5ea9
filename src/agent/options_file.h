#pragma once
// What `gpureap watch` checks of a file before it takes options from it: the options
// file's lines (CLI11's reader then reads the values), and who could have written a file
// that steers a root agent (the options file, --web-config's). docs/watch.md, "Options
// file and SIGHUP".

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::agent {

/// The keys the options file at `path` sets, once every line is found blank, a comment or
/// `key = value` with a key of `keys`: CLI11's reader drops what it does not know, and a
/// dropped `keep` (misspelt, or under an INI `[section]`) would get the holder it protects
/// reaped (W2-05). After a quoted value only a `#` comment may follow (W3-12d). The error
/// names the line and the key. A file that cannot be read is an empty set: left to CLI11,
/// which says why.
Result<std::set<std::string>> check_options_file(const std::string& path,
                                                 const std::vector<std::string_view>& keys);

/// Nothing, when the file at `path` and every directory on its path are owned by root or
/// the effective uid and writable by nobody else (a directory with the sticky bit, /tmp,
/// keeps others from replacing what its owner put there); else an error naming `option`,
/// the path, what is wrong and what the file `steers` (W3-09). A path that does not
/// resolve is left to the reader, which says why.
Result<void> check_file_owner(const std::string& option, const std::string& path,
                              const std::string& steers);

/// check_file_owner, and the file readable by its owner alone (no group or other bit):
/// a private key, whose reader can pose as the agent (W4-10).
Result<void> check_private_file(const std::string& option, const std::string& path,
                                const std::string& steers);

}  // namespace gpureap::agent
