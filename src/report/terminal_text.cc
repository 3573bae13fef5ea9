#include "report/terminal_text.h"

#include <fmt/format.h>

#include <cstdint>

namespace gpureap::report {
namespace {

struct Decoded {
  char32_t code_point = 0;
  std::size_t length = 0;  // 0: not a valid UTF-8 sequence
};

// One UTF-8 character at the start of `s` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF).
Decoded decode_utf8(std::string_view s) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char lead = byte(0);
  std::size_t length = lead >= 0xc2 && lead <= 0xdf   ? 2
                       : lead >= 0xe0 && lead <= 0xef ? 3
                       : lead >= 0xf0 && lead <= 0xf4 ? 4
                                                      : 0;
  if (length == 0 || s.size() < length) return {};
  // The second byte's range depends on the lead (this is what rules out
  // overlong forms, surrogates and code points past U+10FFFF).
  unsigned char low = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
  unsigned char high = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
  if (byte(1) < low || byte(1) > high) return {};
  char32_t cp = lead & (length == 2 ? 0x1f : length == 3 ? 0x0f : 0x07);
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return {};
    cp = (cp << 6) | (byte(i) & 0x3f);
  }
  return {cp, length};
}

bool is_bidi_control(char32_t cp) {
  return (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// Appends the visible form of the character at the start of `s`; returns how many
// bytes of `s` it used.
std::size_t append_escaped(std::string& out, std::string_view s) {
  auto c = static_cast<unsigned char>(s[0]);
  if (c < 0x80) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
    return 1;
  }
  Decoded d = decode_utf8(s);
  if (d.length == 0) {
    out += fmt::format("\\x{:02x}", c);
    return 1;
  }
  if (d.code_point < 0xa0 || is_bidi_control(d.code_point))
    out += fmt::format("\\u{:04x}", static_cast<std::uint32_t>(d.code_point));
  else
    out.append(s.substr(0, d.length));
  return d.length;
}

}  // namespace

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) i += append_escaped(out, text.substr(i));
  return out;
}

std::string terminal_text(std::string_view text, std::size_t width) {
  std::string out;
  const std::size_t room = width > 3 ? width - 3 : 0;
  std::size_t fits = 0;  // length of `out` after the last whole character within `room`
  for (std::size_t i = 0; i < text.size();) {
    i += append_escaped(out, text.substr(i));
    if (out.size() > width) {
      out.resize(fits);
      return out + std::string("...").substr(0, width - fits);
    }
    if (out.size() <= room) fits = out.size();
  }
  return out;
}

std::vector<std::string> terminal_text_lines(std::string_view text, std::size_t width) {
  std::vector<std::string> lines(1);
  while (!text.empty()) {
    const auto space = text.find(' ');
    std::string word = terminal_text(text.substr(0, space), width);
    text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    if (word.empty()) continue;
    std::string& line = lines.back();
    if (line.empty())
      line = std::move(word);
    else if (line.size() + 1 + word.size() <= width)
      line += " " + word;
    else
      lines.push_back(std::move(word));
  }
  return lines;
}

}  // namespace gpureap::report
