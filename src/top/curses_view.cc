#include "top/curses_view.h"

// Functions, not the macros ncurses also defines (erase, move, timeout...), which would
// rewrite any later code that uses those names.
#define NCURSES_NOMACROS 1
#include <curses.h>
#include <langinfo.h>

#include <algorithm>
#include <clocale>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace gpureap::top {
namespace {

// Colour pairs, one per ink that has a colour.
enum Pair : short { kRed = 1, kYellow, kGreen, kCyan, kBlue };

}  // namespace

Result<std::unique_ptr<CursesView>> CursesView::open(bool color) {
  // ncursesw writes UTF-8 only under a UTF-8 locale: take the user's.
  std::setlocale(LC_ALL, "");
  std::unique_ptr<CursesView> view(new CursesView);
  view->unicode_ = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  SCREEN* term = ::newterm(nullptr, stdout, stdin);
  if (!term) {
    const char* name = std::getenv("TERM");
    return fail(std::string("cannot drive this terminal (TERM=") + (name ? name : "") +
                "): no terminfo entry for it");
  }
  view->term_ = term;
  ::set_term(term);
  ::cbreak();  // keys at once; Ctrl-C still interrupts
  ::noecho();
  ::nonl();
  ::keypad(stdscr, TRUE);
  ::curs_set(0);
  ::set_escdelay(25);
  if (color && ::has_colors()) {
    ::start_color();
    ::use_default_colors();
    ::init_pair(kRed, COLOR_RED, -1);
    ::init_pair(kYellow, COLOR_YELLOW, -1);
    ::init_pair(kGreen, COLOR_GREEN, -1);
    ::init_pair(kCyan, COLOR_CYAN, -1);
    ::init_pair(kBlue, COLOR_BLUE, -1);
    view->color_ = true;
  }
  return view;
}

CursesView::~CursesView() {
  ::endwin();
  if (term_) ::delscreen(static_cast<SCREEN*>(term_));
}

std::size_t CursesView::width() const {
  return static_cast<std::size_t>(std::max(COLS, 0));
}
std::size_t CursesView::height() const {
  return static_cast<std::size_t>(std::max(LINES, 0));
}

int CursesView::attributes(Ink ink) const {
  // Without colour every ink that matters still differs: bold, dim, underline.
  const auto colored = [&](short pair, int mono) {
    return color_ ? static_cast<int>(COLOR_PAIR(pair)) : mono;
  };
  switch (ink) {
    case Ink::normal:
      return A_NORMAL;
    case Ink::dim:
      return A_DIM;
    case Ink::title:
      return A_BOLD;
    case Ink::heading:
      return colored(kCyan, A_BOLD);
    case Ink::orphan:
      return colored(kRed, A_BOLD) | A_BOLD;
    case Ink::detached:
      return colored(kYellow, A_UNDERLINE);
    case Ink::warn:
      return colored(kYellow, A_BOLD);
    case Ink::ok:
      return colored(kGreen, A_BOLD);
    case Ink::bar_baseline:
      return colored(kBlue, A_DIM);
    case Ink::bar_live:
      return colored(kGreen, A_NORMAL);
    case Ink::bar_orphan:
      return colored(kRed, A_BOLD) | A_BOLD;
    case Ink::bar_unexplained:
      return colored(kYellow, A_UNDERLINE);
    case Ink::box:
      return A_BOLD;
  }
  return A_NORMAL;
}

void CursesView::draw(const Screen& screen) {
  ::erase();
  const int rows = std::min<int>(LINES, static_cast<int>(screen.lines.size()));
  for (int y = 0; y < rows; ++y) {
    const Line& line = screen.lines[static_cast<std::size_t>(y)];
    ::move(y, 0);
    for (const auto& span : line.spans) {
      ::attrset(attributes(span.ink) | (line.cursor ? A_REVERSE : 0));
      // The bottom-right cell cannot be written without scrolling: addstr stops there
      // (ERR), which is harmless.
      ::addstr(span.text.c_str());
    }
  }
  ::attrset(A_NORMAL);
  ::refresh();
}

Key CursesView::read_key(std::chrono::milliseconds timeout) {
  ::timeout(static_cast<int>(std::max<long long>(0, timeout.count())));
  const int ch = ::getch();
  switch (ch) {
    case ERR:
      return {};
    case KEY_RESIZE:
      return {KeyCode::resize, 0};
    case KEY_UP:
      return {KeyCode::up, 0};
    case KEY_DOWN:
      return {KeyCode::down, 0};
    case KEY_PPAGE:
      return {KeyCode::page_up, 0};
    case KEY_NPAGE:
      return {KeyCode::page_down, 0};
    case KEY_HOME:
      return {KeyCode::home, 0};
    case KEY_END:
      return {KeyCode::end, 0};
    case KEY_LEFT:
      return {KeyCode::left, 0};
    case KEY_RIGHT:
      return {KeyCode::right, 0};
    case KEY_ENTER:
    case '\n':
    case '\r':
      return {KeyCode::enter, 0};
    case 27:
      return {KeyCode::escape, 0};
    case KEY_BACKSPACE:
    case 127:
    case 8:
      return {KeyCode::backspace, 0};
    default:
      break;
  }
  if (ch == KEY_F(9)) return {KeyCode::character, 'F'};  // htop's and nvitop's kill key
  if (ch >= 32 && ch < 127) return {KeyCode::character, static_cast<char>(ch)};
  return {};
}

}  // namespace gpureap::top
