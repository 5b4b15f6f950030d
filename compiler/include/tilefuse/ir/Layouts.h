// Layouts carried by the types of GPU-stage IR (functions marked {gpu = true}).
// Tile-level IR never has them.
//
// A distributed layout (#blocked, #wgmma, #mma) says which thread holds which element
// of a tile: slot s of lane l of warp w holds the element whose flat row-major index
// is the sum of reg[i] over the set bits i of s, lane[j] over the bits of l
// and warp[k] over the bits of w. Each basis is a distinct power of two, or 0 where
// that bit holds a copy (lib/lower/Layout.h plans them; the kind names who made it).
//
// A shared layout (#shared) is how a tile sits in shared memory: rows x cols elements
// of eb bytes as column blocks of `swizzle` bytes (32, 64 or 128), each block rows x
// swizzle bytes, the 16-byte chunks of a row XOR-swizzled by the row within its
// 8-row group (PTX ISA, "Shared Memory Matrix Layout"); a ring of `stages` such
// tiles, each starting on a 1024-byte boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tilefuse {

enum class DistKind : uint8_t { Blocked, Wgmma, Mma };

struct DistLayout {
  DistKind kind = DistKind::Blocked;
  std::vector<int64_t> reg, lane, warp;
  bool operator==(const DistLayout&) const = default;
  std::string str() const;  // #blocked<reg=[1, 2], lane=[4, 8, 16, 32, 64], warp=[128, 256]>
};

struct SharedLayout {
  int64_t swizzle = 0, rows = 0, cols = 0, eb = 0, stages = 1;
  bool operator==(const SharedLayout&) const = default;
  std::string str() const;  // #shared<swizzle=128, rows=64, cols=64, eb=2, stages=1>
  // Bytes of one stage: the tile rounded up to whole 1024-byte swizzle atoms.
  int64_t stageBytes() const;
  // Byte offset of element (row, col) of stage `stage` from the buffer's start. Every
  // writer and reader of the buffer derives its addresses from this.
  int64_t offset(int64_t stage, int64_t row, int64_t col) const;
};

// None for tile-level types and for scalars, pointers, descriptors and tokens.
using TypeLayout = std::variant<std::monostate, DistLayout, SharedLayout>;

std::string layoutStr(const TypeLayout& l);  // "" for none
// Parses "#blocked<...>", "#wgmma<...>", "#mma<...>" or "#shared<...>" (the whole text).
std::optional<TypeLayout> parseLayout(std::string_view text);

}  // namespace tilefuse
