// The verifier: a selection of its rules, each with the exact message at the
// offending op's location. Every op's rules are also exercised by tests/lit/ops/invalid_*.tir.
#include <gtest/gtest.h>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace tilefuse {
namespace {

struct Case {
  const char* name;
  const char* text;
  int line, col;
  const char* message;
};

const Case kCases[] = {
    {"same type", "func @f(%a: f32, %b: i32) {\n  %0 = add %a, %b : f32\n  return\n}\n", 2, 3,
     "'add' operands and result must have the same type, got i32 and f32"},
    {"storage-only arithmetic", "func @f(%a: tile<16xf8e4m3>) {\n  %0 = mul %a, %a : tile<16xf8e4m3>\n  return\n}\n", 2,
     3, "'mul' does not compute on f8e4m3; cast to f16, bf16 or f32 first"},
    {"int-only op", "func @f(%a: f32) {\n  %0 = xor %a, %a : f32\n  return\n}\n", 2, 3,
     "'xor' needs integer operands, got f32"},
    {"float-only op", "func @f(%a: tile<8xi32>) {\n  %0 = sqrt %a : tile<8xi32>\n  return\n}\n", 2, 3,
     "'sqrt' needs floating-point operands, got tile<8xi32>"},
    {"operand count", "func @f(%a: f32) {\n  %0 = add %a : f32\n  return\n}\n", 2, 3, "'add' takes 2 operands, got 1"},
    {"variadic operand count",
     "func @f(%a: ptr<f32>) {\n  %0 = make_desc %a {block_shape = [16]} : desc<16xf32>\n"
     "  return\n}\n",
     2, 3, "'make_desc' takes at least 3 operands, got 1"},
    {"ranged operand count", "func @f(%a: ptr<f32>) {\n  %0 = load : f32\n  return\n}\n", 2, 3,
     "'load' takes 1 to 3 operands, got 0"},
    {"result count", "func @f(%a: f32) {\n  neg %a\n  return\n}\n", 2, 3, "'neg' has 1 results, got 0"},
    {"region count", "func @f(%a: f32) {\n  %0 = neg %a : f32 {\n    yield\n  }\n  return\n}\n", 2, 3,
     "'neg' has 0 regions, got 1"},
    {"non-power-of-two tile", "func @f(%a: f32) {\n  %0 = splat %a : tile<48xf32>\n  return\n}\n", 2, 3,
     "'splat' tile dimensions must be powers of two, got tile<48xf32>"},
    {"constant kind", "func @f() {\n  %0 = constant {value = 1.5} : i32\n  return\n}\n", 2, 3,
     "'constant' value 1.5 does not fit type i32"},
    {"i1 constant", "func @f() {\n  %0 = constant {value = 2} : i1\n  return\n}\n", 2, 3,
     "'constant' value of an i1 constant must be 0 or 1"},
    {"missing attribute", "func @f() {\n  %0 = program_id : i32\n  return\n}\n", 2, 3,
     "'program_id' needs attribute 'axis' (an integer)"},
    {"attribute of another kind", "func @f(%a: i32) {\n  %0 = cmp %a, %a {predicate = 1} : i1\n  return\n}\n", 2, 3,
     "'cmp' needs attribute 'predicate' (a string)"},
    {"unsigned predicate on floats", "func @f(%a: f32) {\n  %0 = cmp %a, %a {predicate = \"ult\"} : i1\n  return\n}\n",
     2, 3, "'cmp' predicate 'ult' needs integer operands, got f32"},
    {"compare storage-only", "func @f(%a: e8m0) {\n  %0 = cmp %a, %a {predicate = \"eq\"} : i1\n  return\n}\n", 2, 3,
     "'cmp' does not compute on e8m0; cast to f16, bf16 or f32 first"},
    {"select condition", "func @f(%c: i1, %a: tile<4xf32>) {\n  %0 = select %c, %a, %a : tile<4xf32>\n  return\n}\n", 2,
     3, "'select' condition must be tile<4xi1>, got i1"},
    {"stochastic rounding bits", "func @f(%a: f32) {\n  %0 = cast %a {rounding = \"rs\"} : f16\n  return\n}\n", 2, 3,
     "'cast' with rounding 'rs' needs a second operand of random bits"},
    {"bitcast widths", "func @f(%a: f32) {\n  %0 = bitcast %a : i64\n  return\n}\n", 2, 3,
     "'bitcast' needs equal bit widths, got f32 to i64"},
    {"ptr_add offset shape",
     "func @f(%p: tile<4xptr<f32>>, %o: i32) {\n  %0 = ptr_add %p, %o : tile<4xptr<f32>>\n"
     "  return\n}\n",
     2, 3, "'ptr_add' offset must be an integer of the pointer's shape [4], got i32"},
    {"arange length", "func @f() {\n  %0 = arange {end = 10, start = 4} : tile<8xi32>\n  return\n}\n", 2, 3,
     "'arange' range length end - start must be a positive power of two, got 6"},
    {"broadcast dimension", "func @f(%a: tile<4x2xf32>) {\n  %0 = broadcast %a : tile<4x4xf32>\n  return\n}\n", 2, 3,
     "'broadcast' cannot broadcast dimension 1 of tile<4x2xf32> to tile<4x4xf32>"},
    {"reduce axis", "func @f(%a: tile<4x2xf32>) {\n  %0 = reduce_max %a {axis = 2} : tile<4xf32>\n  return\n}\n", 2, 3,
     "'reduce_max' axis 2 is out of range [0, 2)"},
    {"load mask", "func @f(%p: tile<4xptr<f32>>, %m: i1) {\n  %0 = load %p, %m : tile<4xf32>\n  return\n}\n", 2, 3,
     "'load' mask must be tile<4xi1>, got i1"},
    {"atomic element type", "func @f(%p: ptr<i1>, %v: i1) {\n  %0 = atomic_add %p, %v : i1\n  return\n}\n", 2, 3,
     "'atomic_add' does not support element type i1"},
    {"atomic sem", "func @f(%p: ptr<i32>, %v: i32) {\n  %0 = atomic_or %p, %v {sem = \"seq_cst\"} : i32\n  return\n}\n",
     2, 3, "'atomic_or' sem must be acq_rel, acquire, release or relaxed, got 'seq_cst'"},
    {"atomic scope",
     "func @f(%p: ptr<i32>, %v: i32) {\n  %0 = atomic_xchg %p, %v {scope = \"device\"} : i32\n  return\n}\n", 2, 3, "'atomic_xchg' scope must be gpu, cta or sys, got 'device'"},
    {"cas cmp type", "func @f(%p: ptr<i32>, %c: i64, %v: i32) {\n  %0 = atomic_cas %p, %c, %v : i32\n  return\n}\n", 2,
     3, "'atomic_cas' cmp must be i32, got i64"},
    {"atomic xor on floats", "func @f(%p: ptr<f32>, %v: f32) {\n  %0 = atomic_xor %p, %v : f32\n  return\n}\n", 2, 3,
     "'atomic_xor' does not support element type f32"},
    {"descriptor offsets",
     "func @f(%d: desc<16x16xf16>, %i: i32) {\n  %0 = desc_load %d, %i : tile<16x16xf16>\n"
     "  return\n}\n",
     2, 3, "'desc_load' needs 2 offsets for desc<16x16xf16>"},
    {"dot f16 accumulator of bf16",
     "func @f(%a: tile<16x8xbf16>, %b: tile<8x16xbf16>, %c: tile<16x16xf16>) {\n"
     "  %0 = dot %a, %b, %c : tile<16x16xf16>\n  return\n}\n",
     2, 3, "'dot' accumulator must be tile<16x16xf32>, got tile<16x16xf16>"},
    {"dot inner dimensions",
     "func @f(%a: tile<16x16xi8>, %b: tile<32x16xi8>, %c: tile<16x16xi32>) {\n"
     "  %0 = dot %a, %b, %c : tile<16x16xi32>\n  return\n}\n",
     2, 3, "'dot' inner dimensions differ: tile<16x16xi8> times tile<32x16xi8>"},
    {"dot accumulator",
     "func @f(%a: tile<16x16xbf16>, %b: tile<16x16xbf16>, %c: tile<16x16xbf16>) {\n"
     "  %0 = dot %a, %b, %c : tile<16x16xbf16>\n  return\n}\n",
     2, 3, "'dot' accumulator must be tile<16x16xf32>, got tile<16x16xbf16>"},
    {"nested op location",
     "func @f(%n: i32) {\n  for %n, %n, %n {\n  ^(%i: i32):\n    %0 = exp %i : i32\n    yield\n"
     "  }\n  return\n}\n",
     4, 5, "'exp' needs floating-point operands, got i32"},
    {"for yield",
     "func @f(%n: i32, %x: f32) {\n  %0 = for %n, %n, %n, %x : f32 {\n  ^(%i: i32, %y: f32):\n"
     "    yield %i\n  }\n  return\n}\n",
     2, 3, "'for' yielded value #0 must be f32, got i32"},
    {"if without else yield",
     "func @f(%c: i1) {\n  if %c {\n    yield\n  } {\n    %0 = constant {value = 1} : i32\n"
     "  }\n  return\n}\n",
     2, 3, "'if' region #1 must end with a terminator"},
    {"while condition arity",
     "func @f(%n: i32) {\n  %0 = while %n : i32 {\n  ^(%i: i32):\n    condition\n  } {\n"
     "  ^(%j: i32):\n    yield %j\n  }\n  return\n}\n",
     4, 5, "'condition' takes at least 1 operands, got 0"},
    {"terminator not last", "func @f() {\n  return\n  return\n}\n", 2, 3, "'return' must be the last op of its region"},
    {"function terminator", "func @f() {\n  %0 = program_id {axis = 0} : i32\n}\n", 1, 1,
     "'func' region #0 must end with a terminator"},
    {"return types", "func @f(%a: i32) -> (f32) {\n  return %a\n}\n", 2, 3,
     "'return' returned value #0 must be f32, got i32"},
    {"kernel results", "func @k() -> (i32) {kernel = true} {\n  %0 = constant {value = 0} : i32\n  return %0\n}\n", 1,
     1, "'func' kernel '@k' cannot return values"},
    {"duplicate function", "func @f() {\n  return\n}\nfunc @f() {\n  return\n}\n", 4, 1,
     "function '@f' is defined twice"},
    {"call arguments", "func @g(%x: f32) {\n  return\n}\nfunc @f(%a: i32) {\n  call @g(%a)\n  return\n}\n", 5, 3,
     "'call' argument #0 must be f32, got i32"},
    {"callee header checked before its own turn",
     "func @f() {\n  call @g()\n  return\n}\nfunc @g() {results = 1} {\n  return\n}\n", 5, 1,
     "'func' needs attribute 'results' (a type list)"},
};

TEST(Verifier, MessagesAtTheOffendingOp) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Module> m;
    ASSERT_NO_THROW(m = parseModule(c.text, "v.tir"));
    try {
      verifyModule(*m);
      ADD_FAILURE() << "verified without error";
    } catch (const UserError& e) {
      EXPECT_EQ(e.message(), c.message);
      EXPECT_EQ(e.loc().line, c.line);
      EXPECT_EQ(e.loc().col, c.col);
    }
  }
}

// Rules that text cannot reach (the parser already refuses such IR) or that
// concern IR built or rewritten in C++.
std::string verifyMessage(const Module& m) {
  try {
    verifyModule(m);
  } catch (const UserError& e) {
    return e.message();
  }
  return "";
}

std::string verifyOpMessage(const Op& op) {
  try {
    verifyOp(op);
  } catch (const UserError& e) {
    return e.message();
  }
  return "";
}

TEST(Verifier, UseBeforeDefinition) {
  auto m = parseModule("func @f(%a: f32) {\n  %x = neg %a : f32\n  %y = neg %x : f32\n  return\n}\n");
  ASSERT_EQ(verifyMessage(*m), "");
  Block& body = m->lookupFunc("f")->region(0);
  Op* first = body.front();
  Op* second = std::next(body.ops().begin())->get();
  second->moveBefore(first);
  EXPECT_EQ(verifyMessage(*m), "'neg' operand #0 is used where its definition is not visible");
}

TEST(Verifier, UseOfAnInnerValueOutsideItsRegion) {
  auto m = parseModule(
      "func @f(%c: i1) {\n  if %c {\n    %t = constant {value = 1} : i32\n    yield\n  } {\n    yield\n  }\n"
      "  %u = constant {value = 2} : i32\n  return\n}\n");
  Block& body = m->lookupFunc("f")->region(0);
  Op* inner = body.front()->region(0).front();
  auto use = std::make_unique<Op>(OpKind::Neg, Location{});
  use->addOperand(inner->result());
  use->addResult(Type::scalar(DType::I32));
  body.insert(std::next(body.ops().begin(), 2), std::move(use));
  EXPECT_EQ(verifyMessage(*m), "'neg' operand #0 is used where its definition is not visible");
}

TEST(Verifier, OnlyFuncsAtModuleLevel) {
  Module m;
  auto c = std::make_unique<Op>(OpKind::Constant, Location::make("m.tir", 1, 1));
  c->setAttr("value", int64_t{1});
  c->addResult(Type::scalar(DType::I32));
  m.body().append(std::move(c));
  EXPECT_EQ(verifyMessage(m), "only 'func' ops may appear at module level, got 'constant'");
}

TEST(Verifier, NestedFunc) {
  auto m = parseModule("func @f(%c: i1) {\n  if %c {\n    yield\n  } {\n    yield\n  }\n  return\n}\n");
  Op* branch = m->lookupFunc("f")->region(0).front();
  auto inner = std::make_unique<Op>(OpKind::Func, Location{});
  inner->setAttr("sym_name", std::string("g"));
  inner->addRegion();
  Block& then = branch->region(0);
  then.insert(then.ops().begin(), std::move(inner));
  EXPECT_EQ(verifyMessage(*m), "'func' may only appear at module level");
}

TEST(Verifier, TerminatorsOutsideTheirParents) {
  Op yield(OpKind::Yield, Location{});
  EXPECT_EQ(verifyOpMessage(yield), "'yield' must end the region of a 'for', 'if', 'while' or 'warp_specialize'");
  Op ret(OpKind::Return, Location{});
  EXPECT_EQ(verifyOpMessage(ret), "'return' must be the last op of a function body");
  auto m = parseModule("func @f(%c: i1) {\n  return\n}\n");
  Op cond(OpKind::Condition, Location{});
  cond.addOperand(m->lookupFunc("f")->region(0).arg(0));
  EXPECT_EQ(verifyOpMessage(cond), "'condition' must end the before-region of a 'while'");
}

TEST(Verifier, ValueWithoutAType) {
  auto m = parseModule("func @f(%a: f32) {\n  return\n}\n");
  Op neg(OpKind::Neg, Location{});
  neg.addOperand(m->lookupFunc("f")->region(0).arg(0));
  neg.addResult(Type{});
  EXPECT_EQ(verifyOpMessage(neg), "'neg' has a value without a type");
}

TEST(Verifier, ConstantWithoutValue) {
  Op c(OpKind::Constant, Location{});
  c.addResult(Type::scalar(DType::F32));
  EXPECT_EQ(verifyOpMessage(c), "'constant' needs attribute 'value'");
}

TEST(Verifier, FuncWithoutName) {
  Module m;
  auto f = std::make_unique<Op>(OpKind::Func, Location{});
  Block& body = f->addRegion();
  body.append(std::make_unique<Op>(OpKind::Return, Location{}));
  m.body().append(std::move(f));
  EXPECT_EQ(verifyMessage(m), "'func' needs attribute 'sym_name' (a string)");
}

TEST(Verifier, ErrorsNameNoCompilerInternals) {
  for (const auto& c : kCases) {
    auto m = parseModule(c.text, "v.tir");
    try {
      verifyModule(*m);
    } catch (const UserError& e) {
      std::string what = e.what();
      for (const char* internal : {".cpp", "Verifier", "tilefuse::", "internal"})
        EXPECT_EQ(what.find(internal), std::string::npos) << what;
      EXPECT_NE(what.find("\n"), std::string::npos) << "no source line quoted: " << what;
    }
  }
}

}  // namespace
}  // namespace tilefuse
