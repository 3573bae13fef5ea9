#pragma once
// What each key does to the view (pure): the drawing layer turns the terminal's key
// codes into Key, the command acts on the Action returned (a refresh, a free, quit).

#include <cstddef>
#include <string>
#include <vector>

#include "top/rows.h"

namespace gpureap::top {

enum class KeyCode { none, character, up, down, page_up, page_down, home, end, left, right,
                     enter, escape, backspace, resize };

struct Key {
  KeyCode code = KeyCode::none;
  char c = 0;  // KeyCode::character: the character typed
};

enum class Action {
  none,        // the view changed (or not): draw again
  quit,
  free_tagged,  // free the tagged set (never returned when read-only)
  find,        // ask for the text filter ('/')
  help,        // show the keys
  detail,      // show everything known of the row under the cursor ('d', Enter on a process)
};

/// The result of one key: the action, and a message for the message line ("" keeps it).
struct KeyResult {
  Action action = Action::none;
  std::string message;
};

/// Columns one left/right arrow scrolls the list.
inline constexpr std::size_t kHScrollStep = 8;

/// Applies `key` to `state` over the rows on screen (`page`: how many fit). The GPUs of
/// the look, for `g` (cycles all -> each GPU -> all).
KeyResult handle_key(ViewState& state, const std::vector<Row>& rows, const Key& key,
                     std::size_t page, const std::vector<gpu::DeviceId>& gpus);

/// The keys, one per line, for the help box.
std::vector<std::string> key_help(bool readonly);

}  // namespace gpureap::top
