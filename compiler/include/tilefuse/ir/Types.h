// Element dtypes and value types of the tile IR: scalars, pointers, tiles of
// static shape, and tensor descriptors; in the GPU stage also shared-memory buffers,
// tokens, and layouts on tiles and buffers (Layouts.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tilefuse/ir/Layouts.h"

namespace tilefuse {

enum class DType : uint8_t {
  I1, I8, I16, I32, I64,
  F16, BF16, F32, F64,
  F8E4M3, F8E5M2, E8M0, F4E2M1,
  U8, U16, U32, U64,
  F8E4B15,  // Triton's float8e4b15: f16's bits without the top exponent bit (bias 15, no inf or NaN)
};

std::string_view dtypeName(DType d);
std::optional<DType> dtypeFromName(std::string_view name);
int bitWidth(DType d);
bool isInt(DType d);       // signed and unsigned integers and i1
bool isUnsigned(DType d);  // u8, u16, u32, u64
bool isFloat(DType d);  // every non-integer dtype, the scale type e8m0 included
// Formats too narrow for arithmetic: only casts, bitcasts and dot_scaled take them.
bool isStorageOnly(DType d);

enum class TypeKind : uint8_t { None, Scalar, Ptr, Desc, Smem, Token };

// A value type. Scalar and Ptr may carry a tile shape (a tile of numbers or of
// pointers); Desc is a tensor descriptor whose `shape` is its block shape. In the GPU
// stage a tile carries a distributed layout; Smem is a shared-memory buffer of one
// stage's shape, with a #shared layout (tiles) or none (mbarriers, one i64 each);
// Token links an asynchronous op to the op that waits for it.
struct Type {
  TypeKind kind = TypeKind::None;
  DType elem = DType::I32;
  std::vector<int64_t> shape;
  TypeLayout layout;  // part of the type: equality compares it

  static Type scalar(DType d) { return {TypeKind::Scalar, d, {}, {}}; }
  static Type ptr(DType d) { return {TypeKind::Ptr, d, {}, {}}; }
  static Type tile(DType d, std::vector<int64_t> s) { return {TypeKind::Scalar, d, std::move(s), {}}; }
  static Type ptrTile(DType d, std::vector<int64_t> s) { return {TypeKind::Ptr, d, std::move(s), {}}; }
  static Type desc(DType d, std::vector<int64_t> block) { return {TypeKind::Desc, d, std::move(block), {}}; }
  static Type smem(DType d, std::vector<int64_t> s, TypeLayout l = {}) {
    return {TypeKind::Smem, d, std::move(s), std::move(l)};
  }
  static Type token() { return {TypeKind::Token, DType::I32, {}, {}}; }

  bool isNone() const { return kind == TypeKind::None; }
  bool isTile() const { return (kind == TypeKind::Scalar || kind == TypeKind::Ptr) && !shape.empty(); }
  bool isPtr() const { return kind == TypeKind::Ptr; }
  bool isDesc() const { return kind == TypeKind::Desc; }
  bool isSmem() const { return kind == TypeKind::Smem; }
  bool isToken() const { return kind == TypeKind::Token; }
  bool isNumeric() const { return kind == TypeKind::Scalar; }
  bool isIntLike() const { return isNumeric() && isInt(elem); }
  bool isFloatLike() const { return isNumeric() && isFloat(elem); }
  int rank() const { return isDesc() ? 0 : static_cast<int>(shape.size()); }
  int64_t numel() const;
  // The element type of a tile (or the type itself for a scalar).
  Type elementType() const { return isDesc() ? *this : Type{kind, elem, {}, {}}; }
  // A new shape drops the layout; a new element type keeps it (a cast stays in place).
  Type withShape(std::vector<int64_t> s) const { return {kind, elem, std::move(s), {}}; }
  Type withElem(DType d) const { return {kind, d, shape, layout}; }
  Type withLayout(TypeLayout l) const { return {kind, elem, shape, std::move(l)}; }
  Type withoutLayout() const { return {kind, elem, shape, {}}; }
  bool hasLayout() const { return !std::holds_alternative<std::monostate>(layout); }
  const DistLayout* dist() const { return std::get_if<DistLayout>(&layout); }
  const SharedLayout* shared() const { return std::get_if<SharedLayout>(&layout); }

  bool operator==(const Type& o) const = default;
  std::string str() const;
};

// Parses the text form of a type ("f32", "ptr<bf16>", "tile<64x32xf32>",
// "tile<64xptr<f16>>", "desc<64x64xbf16>"; GPU stage: "tile<64x32xf32, #blocked<...>>",
// "smem<64x64xbf16, #shared<...>>", "smem<2xi64>", "token"). Returns nullopt on
// malformed text.
std::optional<Type> parseType(std::string_view text);

}  // namespace tilefuse
