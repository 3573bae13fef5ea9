#pragma once
// The terminal of `gpureap top`, through ncurses (Debian's libncurses-dev): draws a
// Screen (top/screen_model.h) and reads keys. The only file that includes <curses.h>;
// everything it draws was laid out, and escaped, by the screen model.

#include <chrono>
#include <cstddef>
#include <memory>

#include "top/keys.h"
#include "top/screen_model.h"
#include "top/terminal.h"
#include "util/result.h"

namespace gpureap::top {

class CursesView final : public Terminal {
 public:
  /// Takes over the terminal on stdin/stdout (newterm: an unknown $TERM is an error,
  /// not an exit inside the library). `color`: colours when the terminal has them;
  /// else, and on a monochrome terminal, attributes only (bold, dim, reverse).
  static Result<std::unique_ptr<CursesView>> open(bool color);
  /// Gives the terminal back (endwin).
  ~CursesView() override;
  CursesView(const CursesView&) = delete;
  CursesView& operator=(const CursesView&) = delete;

  std::size_t width() const override;
  std::size_t height() const override;
  bool unicode() const override { return unicode_; }
  void draw(const Screen& screen) override;
  Key read_key(std::chrono::milliseconds timeout) override;

 private:
  CursesView() = default;
  int attributes(Ink ink) const;

  void* term_ = nullptr;  // SCREEN*
  bool color_ = false;
  bool unicode_ = false;
};

}  // namespace gpureap::top
