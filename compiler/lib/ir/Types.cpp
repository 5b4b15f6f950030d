#include "tilefuse/ir/Types.h"

#include <array>
#include <charconv>

namespace tilefuse {
namespace {

struct DTypeRow {
  DType d;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeRow, 18> kDTypes = {{
    {DType::I1, "i1", 1},       {DType::I8, "i8", 8},           {DType::I16, "i16", 16},
    {DType::I32, "i32", 32},    {DType::I64, "i64", 64},        {DType::F16, "f16", 16},
    {DType::BF16, "bf16", 16},  {DType::F32, "f32", 32},        {DType::F64, "f64", 64},
    {DType::F8E4M3, "f8e4m3", 8}, {DType::F8E5M2, "f8e5m2", 8}, {DType::E8M0, "e8m0", 8},
    {DType::F4E2M1, "f4e2m1", 4}, {DType::U8, "u8", 8},         {DType::U16, "u16", 16},
    {DType::U32, "u32", 32},    {DType::U64, "u64", 64},        {DType::F8E4B15, "f8e4b15", 8},
}};

// Parses "64x32x" dims followed by the element; returns false when malformed.
bool parseDims(std::string_view& s, std::vector<int64_t>& dims) {
  while (!s.empty() && s[0] >= '0' && s[0] <= '9') {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || v <= 0 || p == s.data() + s.size() || *p != 'x') return false;
    dims.push_back(v);
    s.remove_prefix(static_cast<size_t>(p - s.data()) + 1);
  }
  return true;
}

std::optional<Type> parseScalarOrPtr(std::string_view s) {
  if (s.substr(0, 4) == "ptr<" && s.back() == '>') {
    auto d = dtypeFromName(s.substr(4, s.size() - 5));
    if (!d) return std::nullopt;
    return Type::ptr(*d);
  }
  auto d = dtypeFromName(s);
  if (!d) return std::nullopt;
  return Type::scalar(*d);
}

}  // namespace

std::string_view dtypeName(DType d) { return kDTypes[static_cast<size_t>(d)].name; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const auto& r : kDTypes)
    if (r.name == name) return r.d;
  return std::nullopt;
}

int bitWidth(DType d) { return kDTypes[static_cast<size_t>(d)].bits; }
bool isInt(DType d) { return d <= DType::I64 || isUnsigned(d); }
bool isUnsigned(DType d) { return d >= DType::U8 && d <= DType::U64; }
bool isFloat(DType d) { return !isInt(d); }
bool isStorageOnly(DType d) { return (d >= DType::F8E4M3 && d <= DType::F4E2M1) || d == DType::F8E4B15; }

int64_t Type::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string Type::str() const {
  if (kind == TypeKind::None) return "none";
  if (kind == TypeKind::Token) return "token";
  std::string e = std::string(dtypeName(elem));
  if (kind == TypeKind::Ptr) e = "ptr<" + e + ">";
  if (kind != TypeKind::Desc && kind != TypeKind::Smem && shape.empty()) return e;
  std::string dims;
  for (auto s : shape) dims += std::to_string(s) + "x";
  std::string l = hasLayout() ? ", " + layoutStr(layout) : "";
  return (kind == TypeKind::Desc ? "desc<" : kind == TypeKind::Smem ? "smem<" : "tile<") + dims + e + l + ">";
}

std::optional<Type> parseType(std::string_view s) {
  if (s == "token") return Type::token();
  std::string_view head = s.substr(0, 5);
  if (head != "tile<" && head != "desc<" && head != "smem<") return parseScalarOrPtr(s);
  if (s.back() != '>') return std::nullopt;
  std::string_view body = s.substr(5, s.size() - 6);
  std::vector<int64_t> dims;
  if (!parseDims(body, dims) || dims.empty()) return std::nullopt;
  TypeLayout layout;
  if (size_t comma = body.find(", #"); comma != std::string_view::npos) {
    auto l = parseLayout(body.substr(comma + 2));
    if (!l || head == "desc<") return std::nullopt;
    layout = *l;
    body = body.substr(0, comma);
  }
  auto elem = parseScalarOrPtr(body);
  if (!elem) return std::nullopt;
  bool shared = std::holds_alternative<SharedLayout>(layout), dist = std::holds_alternative<DistLayout>(layout);
  if (head == "tile<") return shared ? std::nullopt : std::optional(elem->withShape(dims).withLayout(layout));
  if (elem->isPtr() || dist) return std::nullopt;
  return head == "desc<" ? Type::desc(elem->elem, dims) : Type::smem(elem->elem, dims, layout);
}

}  // namespace tilefuse
