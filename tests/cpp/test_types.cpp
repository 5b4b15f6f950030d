// Element dtypes and value types: names, widths, classification, text form.
#include <gtest/gtest.h>

#include "tilefuse/ir/Types.h"

namespace tilefuse {
namespace {

struct DTypeCase {
  DType d;
  const char* name;
  int bits;
  bool isInt;
  bool storageOnly;
};

const DTypeCase kDTypes[] = {
    {DType::I1, "i1", 1, true, false},         {DType::I8, "i8", 8, true, false},
    {DType::I16, "i16", 16, true, false},      {DType::I32, "i32", 32, true, false},
    {DType::I64, "i64", 64, true, false},      {DType::F16, "f16", 16, false, false},
    {DType::BF16, "bf16", 16, false, false},   {DType::F32, "f32", 32, false, false},
    {DType::F64, "f64", 64, false, false},     {DType::F8E4M3, "f8e4m3", 8, false, true},
    {DType::F8E5M2, "f8e5m2", 8, false, true}, {DType::E8M0, "e8m0", 8, false, true},
    {DType::F4E2M1, "f4e2m1", 4, false, true}, {DType::U8, "u8", 8, true, false},
    {DType::U16, "u16", 16, true, false},      {DType::U32, "u32", 32, true, false},
    {DType::U64, "u64", 64, true, false},      {DType::F8E4B15, "f8e4b15", 8, false, true},
};

TEST(DTypes, NamesWidthsAndClasses) {
  for (const auto& c : kDTypes) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(dtypeName(c.d), c.name);
    EXPECT_EQ(dtypeFromName(c.name), c.d);
    EXPECT_EQ(bitWidth(c.d), c.bits);
    EXPECT_EQ(isInt(c.d), c.isInt);
    EXPECT_EQ(isFloat(c.d), !c.isInt);
    EXPECT_EQ(isStorageOnly(c.d), c.storageOnly);
    EXPECT_EQ(isUnsigned(c.d), c.name[0] == 'u');
  }
}

TEST(DTypes, UnknownNames) {
  for (const char* bad : {"", "f8", "i3", "F32", "float", "i32 ", "ptr", "tile", "e4m3", "bf"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(dtypeFromName(bad).has_value());
  }
}

TEST(Types, Factories) {
  Type s = Type::scalar(DType::F32);
  EXPECT_TRUE(s.isNumeric());
  EXPECT_FALSE(s.isTile());
  EXPECT_TRUE(s.isFloatLike());
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.numel(), 1);

  Type t = Type::tile(DType::I32, {64, 32});
  EXPECT_TRUE(t.isTile());
  EXPECT_TRUE(t.isIntLike());
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.numel(), 64 * 32);
  EXPECT_EQ(t.elementType(), Type::scalar(DType::I32));
  EXPECT_EQ(t.withElem(DType::F16), Type::tile(DType::F16, {64, 32}));
  EXPECT_EQ(t.withShape({}), Type::scalar(DType::I32));

  Type p = Type::ptrTile(DType::F16, {64});
  EXPECT_TRUE(p.isPtr());
  EXPECT_TRUE(p.isTile());
  EXPECT_FALSE(p.isNumeric());
  EXPECT_FALSE(p.isIntLike());
  EXPECT_EQ(p.elementType(), Type::ptr(DType::F16));

  Type d = Type::desc(DType::BF16, {64, 64});
  EXPECT_TRUE(d.isDesc());
  EXPECT_FALSE(d.isTile());
  EXPECT_EQ(d.rank(), 0);
  EXPECT_EQ(d.elementType(), d);

  EXPECT_TRUE(Type{}.isNone());
  EXPECT_EQ(Type{}.str(), "none");
  EXPECT_NE(Type::scalar(DType::F32), Type::ptr(DType::F32));
  EXPECT_NE(Type::tile(DType::F32, {64}), Type::desc(DType::F32, {64}));
}

TEST(Types, StrAndParseRoundTrip) {
  const std::pair<Type, const char*> cases[] = {
      {Type::scalar(DType::I1), "i1"},
      {Type::scalar(DType::F8E4M3), "f8e4m3"},
      {Type::ptr(DType::BF16), "ptr<bf16>"},
      {Type::tile(DType::F32, {128}), "tile<128xf32>"},
      {Type::tile(DType::F32, {64, 32}), "tile<64x32xf32>"},
      {Type::tile(DType::E8M0, {128, 4}), "tile<128x4xe8m0>"},
      {Type::tile(DType::I1, {1, 2, 4}), "tile<1x2x4xi1>"},
      {Type::tile(DType::U32, {16}), "tile<16xu32>"},
      {Type::ptrTile(DType::U64, {4, 8}), "tile<4x8xptr<u64>>"},
      {Type::ptrTile(DType::F16, {64}), "tile<64xptr<f16>>"},
      {Type::ptrTile(DType::F4E2M1, {16, 16}), "tile<16x16xptr<f4e2m1>>"},
      {Type::desc(DType::BF16, {64, 64}), "desc<64x64xbf16>"},
      {Type::desc(DType::F8E5M2, {128}), "desc<128xf8e5m2>"},
  };
  for (const auto& [type, text] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(type.str(), text);
    auto parsed = parseType(text);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, type);
    EXPECT_EQ(parsed->str(), text);
  }
  // Every dtype as scalar, pointer, tile and tile of pointers.
  for (const auto& c : kDTypes) {
    for (Type t : {Type::scalar(c.d), Type::ptr(c.d), Type::tile(c.d, {2, 8}), Type::ptrTile(c.d, {4}),
                   Type::desc(c.d, {16, 32})}) {
      SCOPED_TRACE(t.str());
      EXPECT_EQ(parseType(t.str()), t);
    }
  }
}

// GPU stage: layouts are part of a type's identity and of its text.
TEST(Types, LayoutsArePartOfTheType) {
  DistLayout blocked{DistKind::Blocked, {1}, {2, 4, 8, 16, 32}, {}};
  DistLayout wgmma = blocked;
  wgmma.kind = DistKind::Wgmma;
  DistLayout other = blocked;
  other.reg = {32};
  other.lane = {1, 2, 4, 8, 16};
  Type t = Type::tile(DType::F32, {64});
  Type tb = t.withLayout(blocked);
  EXPECT_NE(tb, t);
  EXPECT_NE(tb, t.withLayout(wgmma));  // same bases, another kind
  EXPECT_NE(tb, t.withLayout(other));
  EXPECT_EQ(tb, t.withLayout(blocked));
  EXPECT_EQ(tb.withoutLayout(), t);
  EXPECT_TRUE(tb.hasLayout());
  EXPECT_FALSE(t.hasLayout());
  ASSERT_NE(tb.dist(), nullptr);
  EXPECT_EQ(tb.shared(), nullptr);
  EXPECT_EQ(tb.withElem(DType::BF16), Type::tile(DType::BF16, {64}).withLayout(blocked));
  EXPECT_EQ(tb.withShape({8, 8}), Type::tile(DType::F32, {8, 8}));  // a new shape drops the layout
  EXPECT_EQ(tb.str(), "tile<64xf32, #blocked<reg=[1], lane=[2, 4, 8, 16, 32], warp=[]>>");
  EXPECT_EQ(Type::ptrTile(DType::F16, {64}).withLayout(wgmma).str(),
            "tile<64xptr<f16>, #wgmma<reg=[1], lane=[2, 4, 8, 16, 32], warp=[]>>");

  SharedLayout sh{128, 64, 64, 2, 3};
  Type buf = Type::smem(DType::BF16, {64, 64}, sh);
  EXPECT_TRUE(buf.isSmem());
  EXPECT_FALSE(buf.isTile());
  EXPECT_EQ(buf.str(), "smem<64x64xbf16, #shared<swizzle=128, rows=64, cols=64, eb=2, stages=3>>");
  SharedLayout two = sh;
  two.stages = 2;
  EXPECT_NE(buf, Type::smem(DType::BF16, {64, 64}, two));
  EXPECT_EQ(Type::smem(DType::I64, {3}).str(), "smem<3xi64>");
  EXPECT_EQ(Type::token().str(), "token");
  EXPECT_TRUE(Type::token().isToken());
  EXPECT_NE(Type::token(), Type::scalar(DType::I32));

  for (const Type& g : {tb, t.withLayout(wgmma), Type::ptrTile(DType::F16, {64}).withLayout(other), buf,
                        Type::smem(DType::I64, {3}), Type::token()}) {
    SCOPED_TRACE(g.str());
    EXPECT_EQ(parseType(g.str()), g);
  }
}

TEST(Types, MalformedText) {
  for (const char* bad : {
           "",
           "f",
           "float32",
           "ptr<>",
           "ptr<f32",
           "ptr<ptr<f32>>",
           "ptr<tile<4xf32>>",
           "tile<>",
           "tile<f32>",
           "tile<64xf32",
           "tile<64x>",
           "tile<64x32>",
           "tile<0xf32>",
           "tile<-4xf32>",
           "tile<64x0x32xf32>",
           "tile<64*32xf32>",
           "tile<99999999999999999999xf32>",
           "tile<64xf33>",
           "tile<64xtile<4xf32>>",
           "tile<64xdesc<4xf32>>",
           "desc<64xptr<f16>>",
           "desc<f16>",
           "desc<64xf16",
           "Tile<64xf32>",
           "tile<64xf32>>",
           " f32",
           "f32 ",
           "tile<64xf32, >",
           "tile<64xf32, #blocked<reg=[1]>>",
           "tile<64xf32, #shared<swizzle=128, rows=8, cols=8, eb=4, stages=1>>",
           "tile<64xf32,#blocked<reg=[1], lane=[2, 4, 8, 16, 32], warp=[]>>",
           "f32, #blocked<reg=[], lane=[], warp=[]>",
           "desc<64xf32, #blocked<reg=[], lane=[], warp=[]>>",
           "smem<64xf32, #blocked<reg=[], lane=[], warp=[]>>",
           "smem<64xptr<f32>>",
           "smem<f32>",
           "token<1>",
           "tokens",
       }) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    EXPECT_FALSE(parseType(bad).has_value());
  }
}

}  // namespace
}  // namespace tilefuse
