// Text form of the GPU-stage layouts and the shared-memory addressing (Layouts.h).
#include "tilefuse/ir/Layouts.h"

#include <cctype>
#include <charconv>

namespace tilefuse {
namespace {

constexpr std::string_view kKinds[] = {"blocked", "wgmma", "mma"};

std::string listStr(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A cursor over "name<key=value, ...>"; values are integers or integer lists.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool done() const { return i_ == s_.size(); }
  void spaces() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  bool eat(char c) {
    spaces();
    if (i_ == s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  std::string_view word() {
    spaces();
    size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    return s_.substr(b, i_ - b);
  }
  bool integer(int64_t& v) {
    spaces();
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec != std::errc()) return false;
    i_ = static_cast<size_t>(p - s_.data());
    return true;
  }
  bool list(std::vector<int64_t>& v) {
    if (!eat('[')) return false;
    if (eat(']')) return true;
    do {
      int64_t x;
      if (!integer(x)) return false;
      v.push_back(x);
    } while (eat(','));
    return eat(']');
  }
  // key=, expecting exactly `key`.
  bool key(std::string_view k) { return word() == k && eat('='); }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::string DistLayout::str() const {
  return std::string("#").append(kKinds[static_cast<size_t>(kind)]) + "<reg=" + listStr(reg) +
         ", lane=" + listStr(lane) + ", warp=" + listStr(warp) + ">";
}

std::string SharedLayout::str() const {
  return "#shared<swizzle=" + std::to_string(swizzle) + ", rows=" + std::to_string(rows) +
         ", cols=" + std::to_string(cols) + ", eb=" + std::to_string(eb) + ", stages=" + std::to_string(stages) + ">";
}

int64_t SharedLayout::stageBytes() const { return (rows * cols * eb + 1023) / 1024 * 1024; }

// Valid for layouts the verifier accepted. The column block, then the row within it; the chunk bits [4, 7) take the row
// bits [7, 10) of the offset, masked to the chunks of one swizzle span. Blocks hold whole 8-row groups, so a block's
// start never changes the XOR.
int64_t SharedLayout::offset(int64_t stage, int64_t row, int64_t col) const {
  int64_t byte = col * eb;
  if (swizzle == 0) return stage * stageBytes() + row * cols * eb + byte;  // unswizzled rows
  int64_t off = byte / swizzle * rows * swizzle + row * swizzle + byte % swizzle;
  off ^= ((off >> 7) & (swizzle / 16 - 1)) << 4;
  return stage * stageBytes() + off;
}

std::string layoutStr(const TypeLayout& l) {
  if (const auto* d = std::get_if<DistLayout>(&l)) return d->str();
  if (const auto* s = std::get_if<SharedLayout>(&l)) return s->str();
  return "";
}

std::optional<TypeLayout> parseLayout(std::string_view text) {
  Reader r(text);
  if (!r.eat('#')) return std::nullopt;
  std::string_view name = r.word();
  if (!r.eat('<')) return std::nullopt;
  TypeLayout out;
  if (name == "shared") {
    SharedLayout s;
    if (!r.key("swizzle") || !r.integer(s.swizzle) || !r.eat(',') || !r.key("rows") || !r.integer(s.rows) ||
        !r.eat(',') || !r.key("cols") || !r.integer(s.cols) || !r.eat(',') || !r.key("eb") || !r.integer(s.eb) ||
        !r.eat(',') || !r.key("stages") || !r.integer(s.stages))
      return std::nullopt;
    out = s;
  } else {
    DistLayout d;
    size_t k = 0;
    while (k < std::size(kKinds) && kKinds[k] != name) ++k;
    if (k == std::size(kKinds)) return std::nullopt;
    d.kind = static_cast<DistKind>(k);
    if (!r.key("reg") || !r.list(d.reg) || !r.eat(',') || !r.key("lane") || !r.list(d.lane) || !r.eat(',') ||
        !r.key("warp") || !r.list(d.warp))
      return std::nullopt;
    out = d;
  }
  if (!r.eat('>')) return std::nullopt;
  r.spaces();
  if (!r.done()) return std::nullopt;
  return out;
}

}  // namespace tilefuse
