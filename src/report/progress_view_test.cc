#include "report/progress_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace gpureap::report {
namespace {

constexpr std::uint64_t kViewGiB = 1ULL << 30;

// A terminal of `columns` columns that understands what a progress view writes: text,
// "\r", "\n", ESC[K, ESC[J and ESC[nA; it wraps at the last column as a terminal does.
// rows_used is how many rows of the screen ever held the cursor.
struct Screen {
  std::size_t columns;
  std::vector<std::string> rows{""};
  std::size_t row = 0, col = 0, rows_used = 1;

  void put(const std::string& text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '\033') {
        std::size_t j = i + 2;  // past "ESC["
        std::size_t n = 0;
        while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])))
          n = n * 10 + static_cast<std::size_t>(text[j++] - '0');
        const char op = text[j];
        if (op == 'A') row -= std::min(row, n == 0 ? 1 : n);
        if (op == 'K') rows[row].resize(std::min(rows[row].size(), col));
        if (op == 'J') {
          rows[row].resize(std::min(rows[row].size(), col));
          rows.resize(row + 1);
        }
        i = j;
        continue;
      }
      if (c == '\r') { col = 0; continue; }
      if (c == '\n') { newline(); continue; }
      if (col == columns) newline();  // the wrap a redraw must never cause
      if (rows[row].size() <= col) rows[row].resize(col + 1, ' ');
      rows[row][col++] = c;
    }
  }
  void newline() {
    ++row;
    col = 0;
    if (rows.size() <= row) rows.resize(row + 1);
    rows_used = std::max(rows_used, row + 1);
  }
};

std::vector<reclaim::GpuRelease> eight_gpus() {
  std::vector<reclaim::GpuRelease> gpus(8);
  for (unsigned i = 0; i < 8; ++i) {
    gpus[i].gpu = gpu::DeviceId{i};
    gpus[i].before = 62 * kViewGiB + i;
    gpus[i].used = gpus[i].before;
  }
  return gpus;
}

// Issue 53: a 6 s release of 8 GPUs printed 248 rows on an 80-column terminal (one line
// redrawn with "\r", wrapped at GPU 3). The view keeps one row per GPU however many
// readings come, never wider than the terminal, and says "releasing".
TEST(ProgressView, ATerminalKeepsOneRowPerGpuThroughAWholeRelease) {
  ProgressView view(true, 80);
  Screen screen{80};
  auto gpus = eight_gpus();
  for (auto& g : gpus) g.signalled_at = 0.0;
  screen.put(view.update(gpus));
  for (int reading = 0; reading < 600; ++reading) {  // 6 s at one reading each 10 ms
    const double t = reading * 0.01;
    for (auto& g : gpus) {
      g.exited_at = 0.1;
      g.used = g.before - static_cast<std::uint64_t>(t / 6.0 * static_cast<double>(g.before));
    }
    if (reading == 599)
      for (auto& g : gpus) g.freed_at = 6.0, g.used = 2 * kViewGiB;
    screen.put(view.update(gpus));
    if (reading == 300) {
      ASSERT_GE(screen.rows.size(), 8u);
      EXPECT_NE(screen.rows[3].find("releasing"), std::string::npos) << screen.rows[3];
    }
  }
  EXPECT_LE(screen.rows_used, 9u) << "8 rows and the cursor beneath them";
  EXPECT_NE(screen.rows[7].find("GPU 7"), std::string::npos) << screen.rows[7];
  EXPECT_NE(screen.rows[7].find("freed"), std::string::npos) << screen.rows[7];
  for (const auto& r : screen.rows) EXPECT_LT(r.size(), 80u) << r;
  // At the end the rows are cleared for the report, which says how each GPU ended.
  screen.put(view.finish());
  EXPECT_EQ(screen.row, 0u);
  EXPECT_TRUE(screen.rows[0].empty()) << screen.rows[0];
}

TEST(ProgressView, ANarrowTerminalCutsRowsInsteadOfWrapping) {
  ProgressView view(true, 24);
  Screen screen{24};
  auto gpus = eight_gpus();
  for (int i = 0; i < 50; ++i) {
    for (auto& g : gpus) g.used = *g.used - kViewGiB;
    screen.put(view.update(gpus));
  }
  EXPECT_LE(screen.rows_used, 9u);
}

TEST(ProgressView, AReadingThatChangesNothingWritesNothing) {
  ProgressView view(true, 80);
  auto gpus = eight_gpus();
  EXPECT_FALSE(view.update(gpus).empty());
  EXPECT_EQ(view.update(gpus), "");
}

// Through a pipe: one line per change of a GPU's phase, none for the memory's fall.
TEST(ProgressView, APipeGetsOneLinePerPhaseChange) {
  ProgressView view(false, 80);
  std::vector<reclaim::GpuRelease> gpus(1);
  gpus[0].gpu = gpu::DeviceId{3};
  gpus[0].before = 62 * kViewGiB;
  gpus[0].used = 62 * kViewGiB;
  std::string out = view.update(gpus);
  gpus[0].signalled_at = 0.0;
  out += view.update(gpus);
  gpus[0].exited_at = 0.1;
  for (int i = 0; i < 100; ++i) {
    gpus[0].used = *gpus[0].used - kViewGiB / 2;
    out += view.update(gpus);
  }
  gpus[0].freed_at = 1.25;
  gpus[0].used = 2ULL << 20;
  out += view.update(gpus);
  out += view.update(gpus);
  out += view.finish();
  EXPECT_EQ(out,
            "GPU 3: stopping its holders (62.0 GiB held)\n"
            "GPU 3: releasing: its holders are gone, 61.5 GiB still in use\n"
            "GPU 3: freed: 62.0 GiB -> 2.00 MiB in 1.25 s\n");
}

TEST(ProgressView, PhasesFollowWhatTheWaitSaw) {
  reclaim::GpuRelease g;
  EXPECT_EQ(release_phase(g), ReleasePhase::held);
  g.signalled_at = 0;
  EXPECT_EQ(release_phase(g), ReleasePhase::stopping);
  g.unlisted_at = 0.2;
  EXPECT_EQ(release_phase(g), ReleasePhase::releasing);
  g.freed_at = 0.3;
  EXPECT_EQ(release_phase(g), ReleasePhase::freed);
  g.measured = false;
  EXPECT_EQ(release_phase(g), ReleasePhase::unreadable);
}

}  // namespace
}  // namespace gpureap::report
