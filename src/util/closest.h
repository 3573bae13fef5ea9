#pragma once
// "Did you mean": the nearest of a list of names to a mistyped word, by edit distance.

#include <string>
#include <string_view>
#include <vector>

namespace gpureap {

/// The candidate closest to `word` by edit distance (a swap of neighbours counting one),
/// when close enough to be a typo (at most 1 edit for short words, a third of the word's
/// length for longer ones); "" otherwise. The first of equally close candidates wins.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace gpureap
