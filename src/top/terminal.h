#pragma once
// What `gpureap top` draws on and reads keys from: the terminal through ncurses
// (top/curses_view.h), or a unit test's scripted one (top/session_test.cc).

#include <chrono>
#include <cstddef>

#include "top/keys.h"
#include "top/screen_model.h"

namespace gpureap::top {

class Terminal {
 public:
  virtual ~Terminal() = default;
  virtual std::size_t width() const = 0;
  virtual std::size_t height() const = 0;
  /// True when the locale's character set is UTF-8 (the sparkline's blocks).
  virtual bool unicode() const = 0;
  /// Draws `screen` in place of what is shown.
  virtual void draw(const Screen& screen) = 0;
  /// The next key, or KeyCode::none when `timeout` passes first (or a signal came).
  /// A resized terminal is KeyCode::resize; the next width()/height() are the new ones.
  virtual Key read_key(std::chrono::milliseconds timeout) = 0;
};

}  // namespace gpureap::top
