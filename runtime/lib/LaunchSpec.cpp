#include "tilefuse/runtime/LaunchSpec.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>

namespace tilefuse::runtime {
namespace {

constexpr std::string_view kKinds[] = {"ptr", "i1", "i32", "i64", "f32", "i8", "i16", "u8", "u16", "u32", "u64", "f64"};

void quote(std::string& o, std::string_view s) {
  o += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      o += esc;
    } else {
      o += c;  // UTF-8 passes through
    }
  }
  o += '"';
}

void value(std::string& o, int64_t v) { o += std::to_string(v); }
void value(std::string& o, const std::string& v) { quote(o, v); }
void value(std::string& o, ParamKind k) { quote(o, kKinds[static_cast<int>(k)]); }
void value(std::string& o, const LaunchSpec::Param& p);
void value(std::string& o, const LaunchSpec::TensorMap::Dim& d);
void value(std::string& o, const LaunchSpec::TensorMap& m);

template <class T>
void value(std::string& o, const std::vector<T>& v) {
  o += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ',';
    value(o, v[i]);
  }
  o += ']';
}

// One JSON object: a call per field; the destructor closes the brace.
class Fields {
 public:
  explicit Fields(std::string& o) : o_(o) { o_ += '{'; }
  ~Fields() { o_ += '}'; }
  template <class T>
  Fields& operator()(std::string_view key, const T& v) {
    if (n_++) o_ += ',';
    quote(o_, key);
    o_ += ':';
    value(o_, v);
    return *this;
  }

 private:
  std::string& o_;
  int n_ = 0;
};

void value(std::string& o, const LaunchSpec::Param& p) {
  Fields f(o);
  f("name", p.name)("kind", p.kind);
}
void value(std::string& o, const LaunchSpec::TensorMap::Dim& d) {
  Fields f(o);
  f("param", d.param)("value", d.value)("factor", d.factor);
}
void value(std::string& o, const LaunchSpec::TensorMap& m) {
  Fields f(o);
  f("base", m.base)("elem_bytes", m.elemBytes)("sizes", m.sizes)("strides", m.strides)("box", m.box);
  f("swizzle_bytes", m.swizzleBytes)("where", m.where);
}

// Reads what toJson writes, checking the shape as it goes.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  // An object with exactly `keys` (any order); field(key) reads each value.
  template <class F>
  void object(std::initializer_list<std::string_view> keys, F&& field) {
    expect('{');
    uint32_t seen = 0;
    if (!take('}')) {
      do {
        std::string k = string();
        expect(':');
        uint32_t bit = 1;
        auto it = keys.begin();
        for (; it != keys.end() && *it != k; ++it) bit <<= 1;
        if (it == keys.end() || (seen & bit)) fail("unexpected key '" + k + "'");
        seen |= bit;
        field(std::string_view(k));
      } while (take(','));
      expect('}');
    }
    if (seen != (1u << keys.size()) - 1) fail("missing keys");
  }
  template <class F>
  void array(F&& item) {
    expect('[');
    if (take(']')) return;
    do item();
    while (take(','));
    expect(']');
  }
  int64_t integer() {
    skip();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
    if (ec != std::errc()) fail("expected an integer");
    pos_ = static_cast<size_t>(end - s_.data());
    return v;
  }
  int int32() {
    int64_t v = integer();
    if (v < INT32_MIN || v > INT32_MAX) fail("integer out of range");
    return static_cast<int>(v);
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = pos_ < s_.size() ? s_[pos_++] : 0;
      if (e == '"' || e == '\\') {
        out += e;
        continue;
      }
      // toJson writes control characters as \u00XX.
      unsigned code = 0;
      const char* at = s_.data() + pos_;
      auto [end, ec] = std::from_chars(at, at + std::min<size_t>(4, s_.size() - pos_), code, 16);
      if (e != 'u' || ec != std::errc() || end - at != 4 || code >= 0x20) fail("bad escape");
      out += static_cast<char>(code);
      pos_ += 4;
    }
    if (pos_ == s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
  ParamKind kind() {
    std::string k = string();
    for (size_t i = 0; i < std::size(kKinds); ++i)
      if (kKinds[i] == k) return static_cast<ParamKind>(i);
    fail("unknown parameter kind '" + k + "'");
  }
  void end() {
    skip();
    if (pos_ != s_.size()) fail("text after the spec");
  }

 private:
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool take(char c) {
    skip();
    if (pos_ == s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("launch spec JSON, offset " + std::to_string(pos_) + ": " + what);
  }
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string toJson(const LaunchSpec& s) {
  std::string o;
  {
    Fields f(o);
    f("kernel", s.kernel)("arch", s.arch)("num_warps", s.numWarps)("num_stages", s.numStages);
    f("num_threads", s.numThreads)("shared_bytes", s.sharedBytes)("params", s.params)("tensor_maps", s.tensorMaps);
  }
  return o;
}

LaunchSpec launchSpecFromJson(std::string_view json) {
  Reader r(json);
  LaunchSpec s;
  auto dims = [&](std::vector<LaunchSpec::TensorMap::Dim>& out) {
    r.array([&] {
      LaunchSpec::TensorMap::Dim d;
      r.object({"param", "value", "factor"}, [&](std::string_view k) {
        if (k == "param") d.param = r.int32();
        if (k == "value") d.value = r.integer();
        if (k == "factor") d.factor = r.int32();
      });
      out.push_back(d);
    });
  };
  auto map = [&] {
    LaunchSpec::TensorMap m;
    r.object({"base", "elem_bytes", "sizes", "strides", "box", "swizzle_bytes", "where"}, [&](std::string_view k) {
      if (k == "base") m.base = r.int32();
      if (k == "elem_bytes") m.elemBytes = r.int32();
      if (k == "sizes") dims(m.sizes);
      if (k == "strides") dims(m.strides);
      if (k == "box") r.array([&] { m.box.push_back(r.integer()); });
      if (k == "swizzle_bytes") m.swizzleBytes = r.int32();
      if (k == "where") m.where = r.string();
    });
    s.tensorMaps.push_back(std::move(m));
  };
  auto param = [&] {
    LaunchSpec::Param p;
    r.object({"name", "kind"}, [&](std::string_view k) {
      if (k == "name") p.name = r.string();
      if (k == "kind") p.kind = r.kind();
    });
    s.params.push_back(std::move(p));
  };
  r.object({"kernel", "arch", "num_warps", "num_stages", "num_threads", "shared_bytes", "params", "tensor_maps"},
           [&](std::string_view k) {
             if (k == "kernel") s.kernel = r.string();
             if (k == "arch") s.arch = r.string();
             if (k == "num_warps") s.numWarps = r.int32();
             if (k == "num_stages") s.numStages = r.int32();
             if (k == "num_threads") s.numThreads = r.int32();
             if (k == "shared_bytes") s.sharedBytes = r.int32();
             if (k == "params") r.array(param);
             if (k == "tensor_maps") r.array(map);
           });
  r.end();
  return s;
}

}  // namespace tilefuse::runtime
