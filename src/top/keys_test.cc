#include "top/keys.h"

#include <gtest/gtest.h>

#include "top/test_inventory.h"

namespace gpureap::top {
namespace {

using namespace testing;

Key ch(char c) {
  return {KeyCode::character, c};
}

TEST(TopKeys, SpaceOnAnInstanceTagsItsMembersAndFOnlyFreesWhatIsTagged) {
  const auto inv = case_study();
  ViewState state;
  auto rows = build_rows(inv, state);
  state.cursor = rows[0].id;
  EXPECT_EQ(handle_key(state, rows, ch('F'), 10, {}).action, Action::none) << "nothing tagged";
  handle_key(state, rows, ch(' '), 10, {});
  EXPECT_EQ(state.tagged, (std::set<proc::ProcessId>{{kOrphanA, 1000}, {kOrphanB, 1000}}));
  EXPECT_EQ(state.cursor, rows[1].id) << "the cursor moves on after tagging";
  rows = build_rows(inv, state);
  EXPECT_TRUE(rows[0].tagged);
  EXPECT_EQ(handle_key(state, rows, ch('F'), 10, {}).action, Action::free_tagged);
  // Space on a tagged member untags it alone.
  handle_key(state, rows, ch(' '), 10, {});
  EXPECT_EQ(state.tagged.size(), 1u);
  handle_key(state, rows, ch('u'), 10, {});
  EXPECT_TRUE(state.tagged.empty());
}

TEST(TopKeys, ReadOnlyRefusesTaggingAndFreeing) {
  const auto inv = case_study();
  ViewState state;
  state.readonly = true;
  auto rows = build_rows(inv, state);
  auto r = handle_key(state, rows, ch(' '), 10, {});
  EXPECT_TRUE(state.tagged.empty());
  EXPECT_NE(r.message.find("read-only"), std::string::npos);
  state.tagged.insert({kOrphanA, 1000});  // even so, F never frees
  r = handle_key(state, rows, ch('F'), 10, {});
  EXPECT_EQ(r.action, Action::none);
  EXPECT_NE(r.message.find("read-only"), std::string::npos);
}

TEST(TopKeys, MovingFoldingSortingAndFiltering) {
  const auto inv = case_study();
  ViewState state;
  auto rows = build_rows(inv, state);
  state.cursor = rows[0].id;
  handle_key(state, rows, {KeyCode::down}, 10, {});
  handle_key(state, rows, {KeyCode::down}, 10, {});
  EXPECT_EQ(state.cursor, "p:4723:1000");
  handle_key(state, rows, {KeyCode::end}, 10, {});
  EXPECT_EQ(state.cursor, "p:5001:1000");
  handle_key(state, rows, {KeyCode::page_up}, 10, {});
  EXPECT_EQ(state.cursor, "i:4721");
  // Enter on a heading folds its instance; Enter again unfolds.
  state.cursor = "i:4721";
  handle_key(state, rows, {KeyCode::enter}, 10, {});
  EXPECT_TRUE(state.collapsed.contains("4721"));
  EXPECT_EQ(state.cursor, "i:4721");
  handle_key(state, rows, {KeyCode::enter}, 10, {});
  EXPECT_FALSE(state.collapsed.contains("4721"));
  // Left and right scroll the list sideways, a step at a time, never before column 0;
  // they fold nothing and leave the cursor where it is.
  state.cursor = "p:4722:1000";
  handle_key(state, rows, {KeyCode::right}, 10, {});
  handle_key(state, rows, {KeyCode::right}, 10, {});
  EXPECT_EQ(state.hscroll, 2 * kHScrollStep);
  handle_key(state, rows, {KeyCode::left}, 10, {});
  EXPECT_EQ(state.hscroll, kHScrollStep);
  handle_key(state, rows, {KeyCode::left}, 10, {});
  handle_key(state, rows, {KeyCode::left}, 10, {});
  EXPECT_EQ(state.hscroll, 0U);
  EXPECT_TRUE(state.collapsed.empty());
  EXPECT_EQ(state.cursor, "p:4722:1000");
  // Enter on a process shows it whole (nvitop's Enter), as d does.
  state.cursor = "p:4722:1000";
  EXPECT_EQ(handle_key(state, rows, {KeyCode::enter}, 10, {}).action, Action::detail);
  EXPECT_FALSE(state.collapsed.contains("4721"));
  EXPECT_EQ(handle_key(state, rows, ch('d'), 10, {}).action, Action::detail);
  state.cursor = "i:4721";
  handle_key(state, rows, ch('s'), 10, {});
  EXPECT_EQ(state.sort, SortKey::memory);
  for (int i = 0; i < 3; ++i) handle_key(state, rows, ch('s'), 10, {});
  EXPECT_EQ(state.sort, SortKey::gpu) << "s cycles back";
  handle_key(state, rows, ch('o'), 10, {});
  EXPECT_TRUE(state.orphans_only);
  const std::vector<gpu::DeviceId> gpus = {gpu::dev(0), gpu::dev(1)};
  handle_key(state, rows, ch('g'), 10, gpus);
  EXPECT_EQ(state.gpu, gpu::dev(0));
  handle_key(state, rows, ch('g'), 10, gpus);
  handle_key(state, rows, ch('g'), 10, gpus);
  EXPECT_FALSE(state.gpu) << "g cycles back to every GPU";
  EXPECT_EQ(handle_key(state, rows, ch('q'), 10, {}).action, Action::quit);
  EXPECT_EQ(handle_key(state, rows, ch('/'), 10, {}).action, Action::find);
}

// W4_12: r reverses the order (nvitop's / does; / finds here, as in less); , and . choose
// the sort key as nvitop's do.
TEST(TopKeys, W4_12_ReverseAndNvitopSortKeys) {
  const auto inv = case_study();
  ViewState state;
  auto rows = build_rows(inv, state);
  state.cursor = rows[0].id;
  auto r = handle_key(state, rows, ch('r'), 10, {});
  EXPECT_TRUE(state.reverse);
  EXPECT_NE(r.message.find("reversed"), std::string::npos) << r.message;
  rows = build_rows(inv, state);
  EXPECT_EQ(rows.front().id, "p:5001:1000") << "the lone GPU 1 process first, reversed";
  EXPECT_EQ(rows.back().id, "p:4722:1000");
  handle_key(state, rows, ch('r'), 10, {});
  EXPECT_FALSE(state.reverse);
  handle_key(state, rows, ch('.'), 10, {});
  EXPECT_EQ(state.sort, SortKey::memory);
  handle_key(state, rows, ch(','), 10, {});
  EXPECT_EQ(state.sort, SortKey::gpu);
  handle_key(state, rows, ch(','), 10, {});
  EXPECT_EQ(state.sort, SortKey::pid) << ", goes back, wrapping";
}

// W4_12: nvitop's t, K, T, I answer with a word instead of silence; k moves up and says
// where kill is.
TEST(TopKeys, W4_12_NvitopKeysGetAWord) {
  const auto inv = case_study();
  ViewState state;
  auto rows = build_rows(inv, state);
  state.cursor = rows[1].id;
  for (char c : {'t', 'K', 'T', 'I'}) {
    const auto before = state.tagged;
    auto r = handle_key(state, rows, ch(c), 10, {});
    EXPECT_EQ(r.action, Action::none) << c;
    EXPECT_FALSE(r.message.empty()) << c;
    EXPECT_EQ(state.tagged, before) << c << " tags nothing";
  }
  EXPECT_NE(handle_key(state, rows, ch('K'), 10, {}).message.find("F"), std::string::npos);
  auto up = handle_key(state, rows, ch('k'), 10, {});
  EXPECT_EQ(state.cursor, rows[0].id) << "k still moves up";
  EXPECT_NE(up.message.find("F"), std::string::npos) << up.message;
  for (const auto& line : key_help(false)) EXPECT_LE(line.size(), 76u) << line;
}

}  // namespace
}  // namespace gpureap::top
