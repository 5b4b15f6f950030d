// The builder: type inference, Triton promotion and broadcasting, control
// flow, and UserErrors at the builder's current location that leave the IR valid.
#include <gtest/gtest.h>

#include <functional>

#include "tilefuse/ir/Builder.h"
#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace tilefuse {
namespace {

Type f32() { return Type::scalar(DType::F32); }
Type i32() { return Type::scalar(DType::I32); }
Type tile(DType d, std::vector<int64_t> s) { return Type::tile(d, std::move(s)); }

class BuilderTest : public ::testing::Test {
 protected:
  void SetUp() override { b.setLoc(loc); }

  // A device function (tile parameters allowed) whose body is the insertion point.
  Op* func(const std::vector<Type>& params, const std::string& name = "f") {
    fn = b.createFunc(name, params, {}, false);
    return fn;
  }
  Value* arg(unsigned i) { return fn->region(0).arg(i); }

  // Ends the function, verifies the module and checks its text round-trips.
  void finish() {
    b.setInsertionPointToEnd(fn->region(0));
    b.ret({});
    ASSERT_NO_THROW(verifyModule(m)) << printModule(m);
    std::string text = printModule(m);
    EXPECT_EQ(printModule(*parseModule(text)), text);
  }

  // finish(), then takes the return back off so building can go on.
  void checkValid() {
    finish();
    fn->region(0).back()->erase();
  }

  // Runs `build`, which must throw a UserError at the builder's location whose
  // message contains `message`; then the IR must still verify.
  void expectError(const std::function<void()>& build, const std::string& message) {
    size_t before = fn->region(0).ops().size();
    try {
      build();
      ADD_FAILURE() << "expected a UserError containing: " << message;
    } catch (const UserError& e) {
      EXPECT_EQ(e.loc(), loc);
      EXPECT_NE(e.message().find(message), std::string::npos) << e.message();
      EXPECT_EQ(std::string(e.what()).rfind("kernel.py:12:7: error: ", 0), 0u) << e.what();
      for (const char* internal : {".cpp", ".h:", "tilefuse::", "internal"})
        EXPECT_EQ(std::string(e.what()).find(internal), std::string::npos) << e.what();
    }
    EXPECT_GE(fn->region(0).ops().size(), before);
    checkValid();
  }

  // The op that defines `v`.
  static Op* def(Value* v) { return v->definingOp(); }

  Module m;
  Builder b{m};
  Op* fn = nullptr;
  Location loc = Location::make("kernel.py", 12, 7);
};

// --- inference, promotion, broadcasting ---

TEST_F(BuilderTest, ScalarPlusTileSplatsTheScalar) {
  func({i32()});
  Value* r = b.binary(OpKind::Add, b.arange(0, 64), arg(0));
  EXPECT_EQ(r->type(), tile(DType::I32, {64}));
  EXPECT_EQ(def(r)->kind(), OpKind::Add);
  EXPECT_EQ(def(def(r)->operand(1))->kind(), OpKind::Splat);
  EXPECT_EQ(def(r)->operand(1)->type(), tile(DType::I32, {64}));
  finish();
}

TEST_F(BuilderTest, OuterBroadcast) {
  func({});
  Value* rows = b.expandDims(b.arange(0, 64), 1);
  Value* cols = b.expandDims(b.arange(0, 32), 0);
  EXPECT_EQ(rows->type(), tile(DType::I32, {64, 1}));
  EXPECT_EQ(cols->type(), tile(DType::I32, {1, 32}));
  Value* r = b.binary(OpKind::Mul, rows, cols);
  EXPECT_EQ(r->type(), tile(DType::I32, {64, 32}));
  for (unsigned i = 0; i < 2; ++i) {
    Op* bc = def(def(r)->operand(i));
    ASSERT_EQ(bc->kind(), OpKind::Broadcast);
    EXPECT_EQ(bc->result()->type(), tile(DType::I32, {64, 32}));
  }
  finish();
}

TEST_F(BuilderTest, RankAlignmentPrependsUnitDimensions) {
  func({tile(DType::F32, {64, 32})});
  Value* row = b.cast(b.arange(0, 32), DType::F32);
  Value* r = b.binary(OpKind::Sub, row, arg(0));
  EXPECT_EQ(r->type(), tile(DType::F32, {64, 32}));
  Op* bc = def(def(r)->operand(0));
  ASSERT_EQ(bc->kind(), OpKind::Broadcast);
  Op* ex = def(bc->operand(0));
  ASSERT_EQ(ex->kind(), OpKind::ExpandDims);
  EXPECT_EQ(ex->intAttr("axis"), 0);
  EXPECT_EQ(ex->result()->type(), tile(DType::F32, {1, 32}));
  EXPECT_EQ(def(r)->operand(1), arg(0));
  finish();
}

TEST_F(BuilderTest, IntPlusFloatIsFloat) {
  func({i32(), f32()});
  Value* r = b.binary(OpKind::Add, arg(0), arg(1));
  EXPECT_EQ(r->type(), f32());
  Op* c = def(def(r)->operand(0));
  ASSERT_EQ(c->kind(), OpKind::Cast);
  EXPECT_EQ(c->operand(0), arg(0));
  EXPECT_EQ(c->strAttr("rounding"), "rne");
  EXPECT_EQ(def(r)->operand(1), arg(1));
  finish();
}

TEST_F(BuilderTest, F16PlusBf16IsF32) {
  func({Type::scalar(DType::F16), tile(DType::BF16, {16})});
  Value* r = b.binary(OpKind::Mul, arg(0), arg(1));
  EXPECT_EQ(r->type(), tile(DType::F32, {16}));
  EXPECT_EQ(def(def(r)->operand(1))->kind(), OpKind::Cast);
  finish();
}

TEST_F(BuilderTest, PromotionTable) {
  func({});
  struct Case {
    DType a, b;
    OpKind kind;
    DType want;
  };
  const Case cases[] = {
      {DType::I8, DType::I32, OpKind::Add, DType::I32},   {DType::I64, DType::I16, OpKind::Add, DType::I64},
      {DType::I32, DType::F16, OpKind::Add, DType::F16},  {DType::F64, DType::I64, OpKind::Mul, DType::F64},
      {DType::F16, DType::F32, OpKind::Add, DType::F32},  {DType::BF16, DType::F64, OpKind::Add, DType::F64},
      {DType::F16, DType::BF16, OpKind::Max, DType::F32}, {DType::BF16, DType::BF16, OpKind::Add, DType::BF16},
      {DType::I1, DType::I1, OpKind::Add, DType::I32},    {DType::I1, DType::I1, OpKind::And, DType::I1},
      {DType::I1, DType::I1, OpKind::Max, DType::I1},     {DType::I1, DType::I8, OpKind::Add, DType::I8},
      // Unsigned (C's usual arithmetic conversions, as Triton): equal widths go unsigned,
      // a wider signed type wins over a narrower unsigned one.
      {DType::I32, DType::U32, OpKind::Add, DType::U32},  {DType::I8, DType::U32, OpKind::Mul, DType::U32},
      {DType::U8, DType::I32, OpKind::Add, DType::I32},   {DType::U32, DType::I64, OpKind::Sub, DType::I64},
      {DType::I64, DType::U64, OpKind::Add, DType::U64},  {DType::U8, DType::U16, OpKind::Add, DType::U16},
      {DType::I1, DType::U8, OpKind::Add, DType::U8},     {DType::U32, DType::F16, OpKind::Add, DType::F16},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(dtypeName(c.a)) + " " + std::string(opInfo(c.kind).mnemonic) + " " +
                 std::string(dtypeName(c.b)));
    EXPECT_EQ(b.promote(c.a, c.b, c.kind), c.want);
    EXPECT_EQ(b.promote(c.b, c.a, c.kind), c.want);
  }
  for (DType d : {DType::F8E4M3, DType::F8E5M2, DType::E8M0, DType::F4E2M1})
    EXPECT_FALSE(b.promote(d, DType::F32, OpKind::Add).has_value());
  finish();
}

TEST_F(BuilderTest, BoolArithmeticWidensToI32) {
  func({Type::scalar(DType::I1), Type::scalar(DType::I1)});
  EXPECT_EQ(b.binary(OpKind::Add, arg(0), arg(1))->type(), i32());
  EXPECT_EQ(b.binary(OpKind::Xor, arg(0), arg(1))->type(), Type::scalar(DType::I1));
  EXPECT_EQ(b.neg(arg(0))->type(), i32());
  finish();
}

TEST_F(BuilderTest, PointerArithmetic) {
  func({Type::ptr(DType::F16), Type::scalar(DType::I64)});
  Value* offs = b.arange(0, 64);
  Value* p = b.binary(OpKind::Add, arg(0), offs);
  EXPECT_EQ(p->type(), Type::ptrTile(DType::F16, {64}));
  ASSERT_EQ(def(p)->kind(), OpKind::PtrAdd);
  EXPECT_EQ(def(def(p)->operand(0))->kind(), OpKind::Splat);
  // int + ptr is ptr_add with the operands swapped; ptr - int adds the negation.
  Value* q = b.binary(OpKind::Add, arg(1), arg(0));
  ASSERT_EQ(def(q)->kind(), OpKind::PtrAdd);
  EXPECT_EQ(def(q)->operand(0), arg(0));
  EXPECT_EQ(def(q)->operand(1), arg(1));
  Value* r = b.binary(OpKind::Sub, p, b.i32(1));
  ASSERT_EQ(def(r)->kind(), OpKind::PtrAdd);
  EXPECT_EQ(r->type(), Type::ptrTile(DType::F16, {64}));
  finish();
}

TEST_F(BuilderTest, CompareAndSelect) {
  func({tile(DType::F32, {64}), i32(), Type::scalar(DType::I1)});
  Value* c = b.cmp("lt", b.arange(0, 64), arg(0));
  EXPECT_EQ(c->type(), tile(DType::I1, {64}));
  EXPECT_EQ(def(c)->strAttr("predicate"), "lt");
  EXPECT_EQ(def(c)->operand(0)->type(), tile(DType::F32, {64}));
  // A scalar i1 condition and a scalar int branch are splat and cast.
  Value* s = b.select(arg(2), arg(0), arg(1));
  EXPECT_EQ(s->type(), tile(DType::F32, {64}));
  EXPECT_EQ(def(s)->operand(0)->type(), tile(DType::I1, {64}));
  // A non-boolean condition compares against zero.
  Value* t = b.select(arg(1), arg(0), arg(0));
  EXPECT_EQ(def(def(t)->operand(0))->kind(), OpKind::Splat);
  finish();
}

TEST_F(BuilderTest, UnaryFmaCastBitcast) {
  func({tile(DType::F16, {32}), tile(DType::I32, {32}), f32()});
  EXPECT_EQ(b.unary(OpKind::Exp, arg(1))->type(), tile(DType::F32, {32}));  // ints go through f32
  EXPECT_EQ(b.unary(OpKind::Abs, arg(1))->type(), tile(DType::I32, {32}));
  EXPECT_EQ(b.unary(OpKind::Sqrt, arg(0))->type(), tile(DType::F16, {32}));
  EXPECT_EQ(b.fma(arg(0), arg(2), arg(2))->type(), tile(DType::F32, {32}));
  Value* bits = b.cast(arg(0), DType::I32, "rtz");
  EXPECT_EQ(def(bits)->strAttr("rounding"), "rtz");
  Value* q = b.cast(b.cast(arg(0), DType::F32), DType::F8E4M3, "rs", b.i32(7));
  EXPECT_EQ(q->type(), tile(DType::F8E4M3, {32}));
  ASSERT_EQ(def(q)->numOperands(), 2u);
  EXPECT_EQ(def(q)->operand(1)->type(), tile(DType::I32, {32}));
  EXPECT_EQ(b.cast(arg(0), DType::F16), arg(0));
  EXPECT_EQ(b.bitcast(arg(0), Type::scalar(DType::I16))->type(), tile(DType::I16, {32}));
  finish();
}

TEST_F(BuilderTest, ShapeOps) {
  func({tile(DType::F32, {64, 32})});
  EXPECT_EQ(b.trans(arg(0))->type(), tile(DType::F32, {32, 64}));
  EXPECT_EQ(b.reshape(arg(0), {2048})->type(), tile(DType::F32, {2048}));
  EXPECT_EQ(b.expandDims(arg(0), -1)->type(), tile(DType::F32, {64, 32, 1}));
  Value* j = b.join(arg(0), b.constFloat(1.0, f32()));
  EXPECT_EQ(j->type(), tile(DType::F32, {64, 32, 2}));
  auto [lo, hi] = b.split(j);
  EXPECT_EQ(lo->type(), arg(0)->type());
  EXPECT_EQ(hi->type(), arg(0)->type());
  EXPECT_EQ(b.arange(16, 48)->type(), tile(DType::I32, {32}));
  EXPECT_EQ(b.full({8, 8}, 0.5, DType::BF16)->type(), tile(DType::BF16, {8, 8}));
  EXPECT_EQ(b.programId(2)->type(), i32());
  EXPECT_EQ(b.numPrograms(0)->type(), i32());
  finish();
}

TEST_F(BuilderTest, ReduceShapes) {
  func({tile(DType::F32, {64, 32}), tile(DType::I8, {16})});
  EXPECT_EQ(b.reduce(OpKind::ReduceSum, arg(0), 0)->type(), tile(DType::F32, {32}));
  EXPECT_EQ(b.reduce(OpKind::ReduceMax, arg(0), 1)->type(), tile(DType::F32, {64}));
  EXPECT_EQ(b.reduce(OpKind::ReduceMin, arg(0), -1)->type(), tile(DType::F32, {64}));
  EXPECT_EQ(b.reduce(OpKind::Argmax, arg(0), 0)->type(), tile(DType::I32, {32}));
  Value* s = b.reduce(OpKind::ReduceSum, arg(1), 0);  // narrow ints accumulate in i32
  EXPECT_EQ(s->type(), i32());
  EXPECT_EQ(b.reduce(OpKind::ReduceMax, arg(1), 0)->type(), Type::scalar(DType::I8));
  finish();
}

TEST_F(BuilderTest, CombineGatherHistogramShapes) {
  func({tile(DType::F32, {16, 32}), tile(DType::I32, {16, 32}), tile(DType::I64, {64})});
  Block* top = b.insertionBlock();
  Op* r = b.createCombine(OpKind::Reduce, {arg(0), arg(1)}, -1, false);
  EXPECT_EQ(r->result(0)->type(), tile(DType::F32, {16}));
  EXPECT_EQ(r->result(1)->type(), tile(DType::I32, {16}));
  ASSERT_EQ(r->region(0).numArgs(), 4u);  // (acc..., x...)
  EXPECT_EQ(r->region(0).arg(2)->type(), f32());
  EXPECT_EQ(r->region(0).arg(3)->type(), i32());
  b.setInsertionPointToEnd(r->region(0));
  b.combineYield({r->region(0).arg(0), r->region(0).arg(1)});
  b.setInsertionPointToEnd(*top);
  Op* s = b.createCombine(OpKind::Scan, {arg(0)}, 0, true);
  EXPECT_EQ(s->result(0)->type(), tile(DType::F32, {16, 32}));
  EXPECT_TRUE(s->boolAttr("reverse"));
  b.setInsertionPointToEnd(s->region(0));
  b.combineYield({b.binary(OpKind::Add, s->region(0).arg(0), s->region(0).arg(1))});
  b.setInsertionPointToEnd(*top);
  Value* index = b.broadcastTo(b.expandDims(b.arange(0, 8), 0), {16, 8});
  EXPECT_EQ(b.gather(arg(0), index, 1)->type(), tile(DType::F32, {16, 8}));
  EXPECT_EQ(b.histogram(arg(2), 16, nullptr)->type(), tile(DType::I32, {16}));
  finish();
}

TEST_F(BuilderTest, LoadStoreWithBroadcastMask) {
  func({Type::ptr(DType::F32), tile(DType::I1, {64, 1})});
  Value* rows = b.expandDims(b.arange(0, 64), 1);
  Value* cols = b.expandDims(b.arange(0, 32), 0);
  Value* ptrs = b.binary(OpKind::Add, arg(0), b.binary(OpKind::Add, rows, cols));
  ASSERT_EQ(ptrs->type(), Type::ptrTile(DType::F32, {64, 32}));
  // The [64, 1] mask broadcasts to the pointers; an i32 `other` is cast and splat.
  Value* v = b.load(ptrs, arg(1), b.i32(0));
  EXPECT_EQ(v->type(), tile(DType::F32, {64, 32}));
  Op* ld = def(v);
  ASSERT_EQ(ld->numOperands(), 3u);
  EXPECT_EQ(ld->operand(1)->type(), tile(DType::I1, {64, 32}));
  EXPECT_EQ(ld->operand(2)->type(), tile(DType::F32, {64, 32}));
  // A scalar pointer with a tile mask loads a tile.
  EXPECT_EQ(b.load(arg(0), arg(1))->type(), tile(DType::F32, {64, 1}));
  // A scalar value with a broadcast mask stores a splat.
  b.store(ptrs, b.constFloat(2.0, Type::scalar(DType::F16)), arg(1));
  Op* st = fn->region(0).back();
  ASSERT_EQ(st->kind(), OpKind::Store);
  EXPECT_EQ(st->operand(1)->type(), tile(DType::F32, {64, 32}));
  EXPECT_EQ(st->operand(2)->type(), tile(DType::I1, {64, 32}));
  finish();
}

TEST_F(BuilderTest, AtomicsBroadcastToTheMask) {
  func({Type::ptr(DType::F32), tile(DType::I1, {64}), Type::ptr(DType::I32)});
  Value* old = b.atomic(OpKind::AtomicAdd, arg(0), b.constFloat(1.0, f32()), arg(1));
  EXPECT_EQ(old->type(), tile(DType::F32, {64}));
  Value* ptrs = b.binary(OpKind::Add, arg(2), b.arange(0, 64));
  EXPECT_EQ(b.atomic(OpKind::AtomicMax, ptrs, b.i32(3))->type(), tile(DType::I32, {64}));
  finish();
}

TEST_F(BuilderTest, TensorDescriptors) {
  func({Type::ptr(DType::BF16), i32(), Type::scalar(DType::I64)});
  Value* d = b.makeDesc(arg(0), {arg(1), arg(1)}, {arg(1), b.i32(1)}, {64, 64});
  EXPECT_EQ(d->type(), Type::desc(DType::BF16, {64, 64}));
  Value* t = b.descLoad(d, {arg(1), arg(2)});
  EXPECT_EQ(t->type(), tile(DType::BF16, {64, 64}));
  b.descStore(d, b.cast(t, DType::F32), {arg(1), arg(1)});
  Op* st = fn->region(0).back();
  ASSERT_EQ(st->kind(), OpKind::DescStore);
  EXPECT_EQ(st->operand(1)->type(), tile(DType::BF16, {64, 64}));
  finish();
}

TEST_F(BuilderTest, DotShapes) {
  func({tile(DType::F16, {64, 32}), tile(DType::F16, {32, 128}), tile(DType::I8, {16, 32}), tile(DType::I8, {32, 16})});
  Value* c = b.dot(arg(0), arg(1), nullptr);
  EXPECT_EQ(c->type(), tile(DType::F32, {64, 128}));
  EXPECT_EQ(def(def(c)->operand(2))->kind(), OpKind::Constant);
  EXPECT_EQ(b.dot(arg(0), arg(1), c)->type(), tile(DType::F32, {64, 128}));
  EXPECT_EQ(b.dot(arg(2), arg(3), nullptr)->type(), tile(DType::I32, {16, 16}));
  finish();
}

// Small dots, f16 accumulators (out_dtype), 3-D dots (one 2-D dot per batch index)
// and tf32 (operands rounded by integer ops before an ieee dot).
TEST_F(BuilderTest, DotVariants) {
  func({tile(DType::F16, {4, 8}), tile(DType::F16, {8, 2}), tile(DType::F16, {4, 32, 16}), tile(DType::F16, {4, 16, 8}),
        tile(DType::F32, {16, 16}), tile(DType::BF16, {16, 16})});
  EXPECT_EQ(b.dot(arg(0), arg(1), nullptr)->type(), tile(DType::F32, {4, 2}));
  EXPECT_EQ(b.dot(arg(0), arg(1), nullptr, "ieee", DType::F16)->type(), tile(DType::F16, {4, 2}));
  EXPECT_EQ(b.dot(arg(5), arg(5), nullptr, "ieee", DType::F16)->type(), tile(DType::F32, {16, 16}));
  auto countDots = [&] {
    int n = 0;
    for (auto& o : fn->region(0).ops()) n += o->kind() == OpKind::Dot;
    return n;
  };
  int before = countDots();
  EXPECT_EQ(b.dot(arg(2), arg(3), nullptr)->type(), tile(DType::F32, {4, 32, 8}));
  EXPECT_EQ(countDots() - before, 4);
  before = countDots();
  Value* t = b.dot(arg(4), arg(4), nullptr, "tf32");
  EXPECT_EQ(countDots() - before, 1);
  EXPECT_EQ(def(def(t)->operand(0))->kind(), OpKind::Bitcast);
  before = countDots();
  b.dot(arg(4), arg(4), nullptr, "tf32x3");
  EXPECT_EQ(countDots() - before, 3);
  finish();
}

TEST_F(BuilderTest, DotScaledShapes) {
  func({tile(DType::F8E4M3, {64, 64}), tile(DType::E8M0, {64, 2}), tile(DType::F4E2M1, {64, 32}),
        tile(DType::E8M0, {32, 2})});
  Value* c = b.dotScaled(arg(0), arg(1), arg(2), arg(3), nullptr);
  EXPECT_EQ(c->type(), tile(DType::F32, {64, 32}));
  finish();
}

// --- control flow ---

TEST_F(BuilderTest, ForLoopWithIterArgs) {
  func({Type::scalar(DType::I64), tile(DType::F32, {16})});
  Op* loop = b.createFor(b.i32(0), arg(0), b.i32(1), {arg(1)});
  // Mixed i32 / i64 bounds are widened to i64.
  for (unsigned i = 0; i < 3; ++i) EXPECT_EQ(loop->operand(i)->type(), Type::scalar(DType::I64));
  Block& body = loop->region(0);
  ASSERT_EQ(body.numArgs(), 2u);
  EXPECT_EQ(body.arg(0)->type(), Type::scalar(DType::I64));
  EXPECT_EQ(body.arg(1)->type(), tile(DType::F32, {16}));
  ASSERT_EQ(loop->numResults(), 1u);
  b.setInsertionPointToEnd(body);
  b.yield({b.binary(OpKind::Add, body.arg(1), body.arg(0))});
  b.setInsertionPointToEnd(fn->region(0));
  EXPECT_EQ(loop->result()->type(), tile(DType::F32, {16}));
  finish();
}

TEST_F(BuilderTest, IfWithResults) {
  func({i32()});
  Op* branch = b.createIf(arg(0), {f32()});  // an int condition compares with zero
  ASSERT_EQ(def(branch->operand(0))->kind(), OpKind::Cmp);
  EXPECT_EQ(branch->operand(0)->type(), Type::scalar(DType::I1));
  ASSERT_EQ(branch->numRegions(), 2u);
  b.setInsertionPointToEnd(branch->region(0));
  b.yield({b.constFloat(1.0, f32())});
  b.setInsertionPointToEnd(branch->region(1));
  b.yield({b.cast(arg(0), DType::F32)});
  b.setInsertionPointToEnd(fn->region(0));
  EXPECT_EQ(branch->result()->type(), f32());
  finish();
}

TEST_F(BuilderTest, WhileLoop) {
  func({i32()});
  Op* loop = b.createWhile({arg(0)}, {i32()});
  Block& before = loop->region(0);
  Block& after = loop->region(1);
  ASSERT_EQ(before.numArgs(), 1u);
  ASSERT_EQ(after.numArgs(), 1u);
  b.setInsertionPointToEnd(before);
  b.condition(b.cmp("lt", before.arg(0), b.i32(100)), {before.arg(0)});
  b.setInsertionPointToEnd(after);
  b.yield({b.binary(OpKind::Mul, after.arg(0), b.i32(2))});
  finish();
}

TEST_F(BuilderTest, InsertionPointBefore) {
  func({i32()});
  Value* x = b.binary(OpKind::Add, arg(0), arg(0));
  b.setInsertionPointBefore(def(x));
  Value* y = b.i32(5);
  EXPECT_EQ(fn->region(0).front(), def(y));
  finish();
}

TEST_F(BuilderTest, CallsAndDebugOps) {
  Op* helper = b.createFunc("helper", {f32()}, {f32()}, false);
  b.ret({b.unary(OpKind::Tanh, helper->region(0).arg(0))});
  func({f32()});
  auto res = b.call("helper", {arg(0)});
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0]->type(), f32());
  b.print("x = ", {res[0], arg(0)});
  b.assertTrue(b.arange(0, 16), "nonzero");  // an int tile compares with zero
  Op* as = fn->region(0).back();
  ASSERT_EQ(as->kind(), OpKind::Assert);
  EXPECT_EQ(as->operand(0)->type(), tile(DType::I1, {16}));
  finish();
}

TEST_F(BuilderTest, OpsCarryTheCurrentLocation) {
  func({});
  Value* a = b.arange(0, 16);
  Location other = Location::make("kernel.py", 30, 2);
  b.setLoc(other);
  Value* c = b.binary(OpKind::Add, a, b.i32(1));
  EXPECT_EQ(def(a)->loc(), loc);
  EXPECT_EQ(def(c)->loc(), other);
  EXPECT_EQ(def(def(c)->operand(1))->loc(), other);  // the implicit splat too
  b.setLoc(loc);
  finish();
}

TEST_F(BuilderTest, CreateChecksArityAgainstTheTable) {
  func({f32()});
  EXPECT_THROW(b.create(OpKind::Add, {arg(0)}, {f32()}), InternalError);
  EXPECT_THROW(b.create(OpKind::Neg, {arg(0)}, {}), InternalError);
  EXPECT_THROW(b.create(OpKind::Neg, {nullptr}, {f32()}), InternalError);
  finish();
}

TEST(Builder, NoInsertionPointIsAnInternalError) {
  Module m;
  Builder b(m);
  EXPECT_THROW(b.i32(1), InternalError);
}

// --- errors: a UserError at the current location, the IR left valid ---

TEST_F(BuilderTest, ErrorDotInnerDimensions) {
  func({tile(DType::F16, {32, 32}), tile(DType::F16, {64, 32})});
  expectError([&] { b.dot(arg(0), arg(1), nullptr); },
              "First input shape [32, 32] and second input shape [64, 32] are not compatible for matmul");
  for (auto& o : fn->region(0).ops()) EXPECT_NE(o->kind(), OpKind::Dot);
  EXPECT_TRUE(arg(0)->unused());  // the failed op left no dangling use
}

TEST_F(BuilderTest, ErrorDotOutBf16) {
  func({tile(DType::BF16, {16, 16}), tile(DType::BF16, {16, 16})});
  expectError([&] { b.dot(arg(0), arg(1), nullptr, "ieee", DType::BF16); }, "out_dtype=bfloat16 is unsupported");
}

TEST_F(BuilderTest, ErrorDotPrecision) {
  func({tile(DType::F32, {16, 16}), tile(DType::F32, {16, 16})});
  expectError([&] { b.dot(arg(0), arg(1), nullptr, "tf64"); }, "input_precision must be 'ieee', 'tf32' or 'tf32x3'");
}

TEST_F(BuilderTest, ErrorDotBatchDiffers) {
  func({tile(DType::F16, {2, 16, 16}), tile(DType::F16, {4, 16, 16})});
  expectError([&] { b.dot(arg(0), arg(1), nullptr); }, "dot batch dimensions differ");
}

TEST_F(BuilderTest, ErrorIncompatibleShapes) {
  func({tile(DType::F32, {64}), tile(DType::F32, {32})});
  expectError([&] { b.binary(OpKind::Add, arg(0), arg(1)); }, "cannot broadcast shapes [64] and [32]");
}

TEST_F(BuilderTest, ErrorBroadcastToSmallerRank) {
  func({tile(DType::F32, {4, 8})});
  expectError([&] { b.broadcastTo(arg(0), {8}); }, "cannot broadcast tile<4x8xf32> to shape [8]");
}

TEST_F(BuilderTest, ErrorArithmeticOnFp8) {
  func({tile(DType::F8E4M3, {32}), tile(DType::F8E4M3, {32})});
  expectError([&] { b.binary(OpKind::Add, arg(0), arg(1)); },
              "'add' does not compute on tile<32xf8e4m3> and tile<32xf8e4m3>; cast to f16, bf16 or f32 first");
}

TEST_F(BuilderTest, ErrorMathOnFp8) {
  func({Type::scalar(DType::E8M0)});
  expectError([&] { b.unary(OpKind::Exp, arg(0)); }, "'exp' does not compute on e8m0");
}

TEST_F(BuilderTest, ErrorCompareFp8) {
  func({Type::scalar(DType::F8E5M2)});
  expectError([&] { b.cmp("lt", arg(0), arg(0)); }, "cannot compare f8e5m2 with f8e5m2");
}

TEST_F(BuilderTest, ErrorIntOnlyOnFloats) {
  func({f32(), i32()});
  expectError([&] { b.binary(OpKind::Shl, arg(1), arg(0)); },
              "invalid operands of type i32 and f32: 'shl' needs integers");
}

TEST_F(BuilderTest, ErrorPointerArithmetic) {
  func({Type::ptr(DType::F32), Type::ptr(DType::F32), f32()});
  expectError([&] { b.binary(OpKind::Add, arg(0), arg(1)); }, "'add' is not defined on pointers ptr<f32> and ptr<f32>");
  expectError([&] { b.binary(OpKind::Add, arg(0), arg(2)); }, "pointer offsets must be integers, got f32");
  expectError([&] { b.binary(OpKind::Mul, arg(0), b.i32(2)); }, "'mul' is not defined on pointers");
}

TEST_F(BuilderTest, ErrorShapeOps) {
  func({tile(DType::F32, {64, 32}), tile(DType::F32, {16})});
  expectError([&] { b.arange(0, 48); }, "arange's length end - start must be a power of two, got 48 - 0");
  expectError([&] { b.reshape(arg(0), {1000}); }, "cannot reshape tile<64x32xf32> to shape [1000]");
  expectError([&] { b.trans(arg(0), {0, 2}); }, "trans permutation [0, 2] does not fit tile<64x32xf32>");
  expectError([&] { b.trans(arg(0), {0, 0}); }, "'trans' perm [0, 0] is not a permutation");
  expectError([&] { b.split(arg(1)); }, "split needs a last dimension of 2, got tile<16xf32>");
  expectError([&] { b.expandDims(arg(1), 3); }, "expand_dims axis 3 is out of range for tile<16xf32>");
  expectError([&] { b.splat(arg(1), {4, 16}); }, "splat needs a scalar, got tile<16xf32>");
  expectError([&] { b.splat(b.i32(1), {48}); }, "'splat' tile dimensions must be powers of two, got tile<48xi32>");
  expectError([&] { b.programId(3); }, "'program_id' axis 3 is out of range [0, 3)");
}

TEST_F(BuilderTest, ErrorReductions) {
  func({tile(DType::F32, {64, 32}), f32(), tile(DType::F8E4M3, {16})});
  expectError([&] { b.reduce(OpKind::ReduceSum, arg(0), 2); }, "reduction axis 2 is out of range for tile<64x32xf32>");
  expectError([&] { b.reduce(OpKind::ReduceMax, arg(1), 0); }, "reductions need a tile, got f32");
  expectError([&] { b.reduce(OpKind::ReduceMin, arg(2), 0); }, "'reduce_min' does not compute on f8e4m3");
}

TEST_F(BuilderTest, ErrorCombineGatherHistogram) {
  func({tile(DType::F32, {16, 32}), tile(DType::I32, {8, 32}), f32(), tile(DType::I32, {16, 4})});
  expectError(
      [&] {
        b.createCombine(OpKind::Scan, {arg(0), arg(1)}, 0, false);
      },
      "scan needs tiles of one shape, got tile<16x32xf32> and tile<8x32xi32>");
  expectError([&] { b.createCombine(OpKind::Reduce, {arg(0)}, 2, false); },
              "reduce axis 2 is out of range for tile<16x32xf32>");
  expectError([&] { b.createCombine(OpKind::Reduce, {arg(2)}, 0, false); }, "reduce needs tiles of numbers, got f32");
  expectError([&] { b.gather(arg(0), arg(3), 0); },
              "gather index tile<16x4xi32> must match the source tile<16x32xf32> in every dimension but axis 0");
  expectError([&] { b.gather(arg(0), arg(0), 1); }, "gather needs a tile of integer indices, got tile<16x32xf32>");
  expectError([&] { b.histogram(arg(0), 16, nullptr); }, "histogram needs a 1-D tile of integers, got tile<16x32xf32>");
}

TEST_F(BuilderTest, ErrorMemory) {
  func({Type::ptr(DType::F32), tile(DType::I32, {16}), Type::ptr(DType::F64), f32()});
  expectError([&] { b.load(arg(3)); }, "load needs a pointer or a tile of pointers, got f32");
  expectError([&] { b.load(arg(0), arg(1)); }, "load mask must be boolean, got tile<16xi32>");
  expectError([&] { b.load(arg(0), nullptr, arg(3)); }, "load 'other' needs a mask");
  expectError([&] { b.store(arg(0), arg(1), arg(1)); }, "'store' mask must be tile<16xi1>, got tile<16xi32>");
  expectError([&] { b.atomic(OpKind::AtomicAnd, arg(2), arg(3)); }, "'atomic_and' does not support element type f64");
  expectError([&] { b.makeDesc(arg(0), {b.i32(1)}, {}, {64}); },
              "a tensor descriptor needs as many sizes and strides as block dimensions (1)");
  expectError([&] { b.makeDesc(arg(0), {b.i32(1)}, {b.i32(1)}, {48}); },
              "'make_desc' tile dimensions must be powers of two, got desc<48xf32>");
  expectError([&] { b.descLoad(arg(0), {}); }, "desc_load needs a tensor descriptor, got ptr<f32>");
}

TEST_F(BuilderTest, ErrorConversions) {
  func({tile(DType::F16, {16}), Type::ptr(DType::F32)});
  expectError([&] { b.cast(arg(0), DType::F32, "rs", b.i32(1)); },
              "'cast' stochastic rounding needs a float narrowing cast, got tile<16xf16> to tile<16xf32>");
  expectError([&] { b.cast(arg(0), DType::F8E4M3, "rz"); }, "'cast' has unknown rounding 'rz'");
  expectError([&] { b.cast(arg(1), DType::I64); }, "cannot cast ptr<f32> to i64");
  expectError([&] { b.bitcast(arg(0), f32()); }, "'bitcast' needs equal bit widths, got tile<16xf16> to tile<16xf32>");
  expectError([&] { b.constFloat(0.5, i32()); }, "cannot make a i32 constant from the float 0.5");
  expectError([&] { b.constInt(1, Type::ptr(DType::F32)); }, "an integer constant needs a numeric type, got ptr<f32>");
}

TEST_F(BuilderTest, ErrorControlFlowAndCalls) {
  Op* kernel = b.createFunc("kern", {}, {}, true);
  b.ret({});
  func({f32(), tile(DType::I1, {16})});
  expectError([&] { b.createFor(arg(0), b.i32(4), b.i32(1), {}); }, "loop bounds must be scalar integers, got f32");
  expectError([&] { b.createIf(arg(1), {}); }, "an if condition must be a scalar, got tile<16xi1>");
  expectError([&] { b.call("nowhere", {}); }, "call of unknown function 'nowhere'");
  expectError([&] { b.call("kern", {}); }, "'call' cannot call the kernel '@kern'");
  expectError([&] { b.createFunc("kern", {}, {}, false); }, "function 'kern' is defined twice");
  EXPECT_EQ(m.lookupFunc("kern"), kernel);
}

}  // namespace
}  // namespace tilefuse
