// Per-op rules. Each rule names the op, the operand and the types involved.
#include "tilefuse/ir/Verifier.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "VerifierRules.h"
#include "tilefuse/ir/Limits.h"

namespace tilefuse {
namespace verifier {

const Op* enclosingFunc(const Op& op) {
  const Op* p = op.parentOp();
  while (p && p->kind() != OpKind::Func) p = p->parentOp();
  return p;
}

}  // namespace verifier

using namespace verifier;
namespace {

// Types as the tile rules see them: shape and element type, without the GPU stage's
// layouts (verifyTileOpLayouts checks those).
Type ty(const Value* v) { return v->type().withoutLayout(); }

// hint: an int or pointer value passed through, with per-dim facts that are
// positive powers of two no larger than the dim (contiguity) .
void verifyHint(const Op& op) {
  const Type& t = ty(op.operand(0));
  if ((!t.isNumeric() && !t.isPtr()) || t.isFloatLike())
    fail(op, "applies to integer or pointer values, got " + t.str());
  if (ty(op.result()) != t) fail(op, "result must be " + t.str() + ", got " + ty(op.result()).str());
  size_t rank = std::max<size_t>(1, t.shape.size());
  for (const char* name : {"divisibility", "contiguity"}) {
    if (!op.attr(name)) continue;
    requireAttr(op, name, 4);
    const auto& v = op.intsAttr(name);
    if (v.size() != rank)
      fail(op, std::string("needs one ") + name + " per dimension (" + std::to_string(rank) + "), got " + shapeStr(v));
    for (size_t d = 0; d < v.size(); ++d) {
      int64_t dim = t.shape.empty() ? 1 : t.shape[d];
      if (v[d] < 1 || (v[d] & (v[d] - 1)) || (name[0] == 'c' && v[d] > dim))
        fail(op, std::string(name) + " must be powers of two" + (name[0] == 'c' ? " no larger than the dimension" : "") +
                     ", got " + shapeStr(v));
    }
  }
}

int64_t axisAttr(const Op& op, int rankBound) {
  requireAttr(op, "axis", 1);
  int64_t axis = op.intAttr("axis");
  if (axis < 0 || axis >= rankBound)
    fail(op, "axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(rankBound) + ")");
  return axis;
}

void sameType(const Op& op, const Type& a, const Type& b, const std::string& what) {
  if (a != b) fail(op, what + " must have the same type, got " + a.str() + " and " + b.str());
}

void requireNumeric(const Op& op, const Type& t, const std::string& what) {
  if (!t.isNumeric()) fail(op, what + " must be a number or a tile of numbers, got " + t.str());
}

// Tile shapes: powers of two (rule 13), checked wherever a tile type appears.
void checkTileShape(const Op& op, const Type& t) {
  if (t.isNone()) fail(op, "has a value without a type");
  if (t.isSmem()) return;  // mbarrier arrays need not be powers of two; #shared has its own rules
  int64_t n = 1;
  for (auto d : t.shape) {
    if (!isPow2(d)) fail(op, "tile dimensions must be powers of two, got " + t.str());
    if (d > kMaxTileElements / n)  // before multiplying: the product may not fit in 64 bits
      fail(op, t.str() + " exceeds the maximum tensor numel (" + std::to_string(kMaxTileElements) + " elements)");
    n *= d;
  }
}

void verifyArith(const Op& op) {
  const Type& r = ty(op.result());
  for (unsigned i = 0; i < op.numOperands(); ++i) {
    sameType(op, ty(op.operand(i)), r, "operands and result");
  }
  requireNumeric(op, r, "operands");
  if (isStorageOnly(r.elem)) fail(op, "does not compute on " + std::string(dtypeName(r.elem)) + "; cast to f16, bf16 or f32 first");
  if (op.has(IntOnly) && !isInt(r.elem)) fail(op, "needs integer operands, got " + r.str());
  if (op.has(FloatOnly) && !isFloat(r.elem)) fail(op, "needs floating-point operands, got " + r.str());
}

void verifyCmp(const Op& op) {
  static const std::set<std::string> preds = {"eq", "ne", "lt", "le", "gt", "ge", "ult", "ule", "ugt", "uge"};
  requireAttr(op, "predicate", 3);
  const std::string& p = op.strAttr("predicate");
  if (!preds.count(p)) fail(op, "has unknown predicate '" + p + "'");
  const Type& a = ty(op.operand(0));
  sameType(op, a, ty(op.operand(1)), "operands");
  if (a.isDesc()) fail(op, "cannot compare tensor descriptors");
  if (a.isNumeric() && isStorageOnly(a.elem))
    fail(op, "does not compute on " + std::string(dtypeName(a.elem)) + "; cast to f16, bf16 or f32 first");
  if (p[0] == 'u' && !a.isIntLike()) fail(op, "predicate '" + p + "' needs integer operands, got " + a.str());
  if (p != "eq" && p != "ne" && p[0] != 'u' && a.isNumeric() && isUnsigned(a.elem))
    fail(op, "predicate '" + p + "' orders signed values; unsigned operands " + a.str() + " need 'u" + p + "'");
  if (ty(op.result()) != Type::tile(DType::I1, a.shape))
    fail(op, "result must be " + Type::tile(DType::I1, a.shape).str() + ", got " + ty(op.result()).str());
}

void verifyCast(const Op& op) {
  static const std::set<std::string> modes = {"rne", "rtz", "ru", "rs"};
  requireAttr(op, "rounding", 3);
  const std::string& mode = op.strAttr("rounding");
  if (!modes.count(mode)) fail(op, "has unknown rounding '" + mode + "' (expected rne, rtz, ru or rs)");
  const Type& in = ty(op.operand(0));
  const Type& out = ty(op.result());
  requireNumeric(op, in, "operand");
  requireNumeric(op, out, "result");
  if (in.shape != out.shape) fail(op, "changes the shape from " + in.str() + " to " + out.str());
  if (mode == "rs") {
    if (op.numOperands() != 2) fail(op, "with rounding 'rs' needs a second operand of random bits");
    if (ty(op.operand(1)) != in.withElem(DType::I32))
      fail(op, "random bits must be " + in.withElem(DType::I32).str() + ", got " + ty(op.operand(1)).str());
    if (!isFloat(in.elem) || !isFloat(out.elem) || bitWidth(out.elem) >= bitWidth(in.elem))
      fail(op, "stochastic rounding needs a float narrowing cast, got " + in.str() + " to " + out.str());
    if (out.elem == DType::F8E4B15) fail(op, "has no stochastic rounding to f8e4b15 (Triton's rounds half away)");
  } else if (op.numOperands() != 1) {
    fail(op, "takes random bits only with rounding 'rs'");
  }
}

void verifyBitcast(const Op& op) {
  const Type& in = ty(op.operand(0));
  const Type& out = ty(op.result());
  if (in.shape != out.shape) fail(op, "changes the shape from " + in.str() + " to " + out.str());
  if (in.isDesc() || out.isDesc()) fail(op, "cannot bitcast tensor descriptors");
  // A pointer and a 64-bit integer convert both ways (its address: ptrtoint / inttoptr).
  auto addr = [](const Type& t) { return t.isNumeric() && (t.elem == DType::I64 || t.elem == DType::U64); };
  if (in.isPtr() != out.isPtr() && !addr(in.isPtr() ? out : in))
    fail(op, "converts pointers only to and from 64-bit integers, got " + in.str() + " to " + out.str());
  if (in.isPtr() != out.isPtr()) return;
  // f4e2m1 <-> i8 moves the 4-bit code, so packed bytes can be split and joined.
  bool fp4Code = (in.elem == DType::F4E2M1 && out.elem == DType::I8) || (in.elem == DType::I8 && out.elem == DType::F4E2M1);
  if (!in.isPtr() && !fp4Code && bitWidth(in.elem) != bitWidth(out.elem))
    fail(op, "needs equal bit widths, got " + in.str() + " to " + out.str());
}

void verifyPtrAdd(const Op& op) {
  const Type& p = ty(op.operand(0));
  const Type& off = ty(op.operand(1));
  if (!p.isPtr()) fail(op, "first operand must be a pointer or a tile of pointers, got " + p.str());
  if (!off.isIntLike() || off.shape != p.shape)
    fail(op, "offset must be an integer of the pointer's shape " + shapeStr(p.shape) + ", got " + off.str());
  sameType(op, p, ty(op.result()), "pointer and result");
}

void verifyShapeOp(const Op& op) {
  const Type& in = op.numOperands() ? ty(op.operand(0)) : Type{};
  const Type& out = ty(op.result());
  switch (op.kind()) {
    case OpKind::Arange: {
      requireAttr(op, "start", 1);
      requireAttr(op, "end", 1);
      int64_t n = op.intAttr("end") - op.intAttr("start");
      if (n <= 0 || !isPow2(n)) fail(op, "range length end - start must be a positive power of two, got " + std::to_string(n));
      if (out != Type::tile(DType::I32, {n})) fail(op, "result must be " + Type::tile(DType::I32, {n}).str() + ", got " + out.str());
      return;
    }
    case OpKind::Splat:
      if (in.isTile() || in.isDesc()) fail(op, "operand must be a scalar, got " + in.str());
      if (!out.isTile() || out.elementType() != in) fail(op, "result must be a tile of " + in.str() + ", got " + out.str());
      return;
    case OpKind::Broadcast:
      if (!in.isTile() || !out.isTile() || in.rank() != out.rank() || in.elementType() != out.elementType())
        fail(op, "needs tiles of equal rank and element type, got " + in.str() + " to " + out.str());
      for (int i = 0; i < in.rank(); ++i)
        if (in.shape[i] != out.shape[i] && in.shape[i] != 1)
          fail(op, "cannot broadcast dimension " + std::to_string(i) + " of " + in.str() + " to " + out.str());
      return;
    case OpKind::ExpandDims: {
      if (in.isDesc()) fail(op, "operand must be a tile or a scalar, got " + in.str());
      int64_t axis = axisAttr(op, in.rank() + 1);
      auto s = in.shape;
      s.insert(s.begin() + axis, 1);
      if (out != in.withShape(s)) fail(op, "result must be " + in.withShape(s).str() + ", got " + out.str());
      return;
    }
    case OpKind::Reshape:
      if (!in.isTile() || !out.isTile() || in.numel() != out.numel() || in.elementType() != out.elementType())
        fail(op, "must keep the element type and count, got " + in.str() + " to " + out.str());
      return;
    case OpKind::Trans: {
      requireAttr(op, "perm", 4);
      auto perm = op.intsAttr("perm");
      auto sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = static_cast<int>(perm.size()) == in.rank();
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int64_t>(i);
      if (!ok || !in.isTile()) fail(op, "perm " + shapeStr(perm) + " is not a permutation of the dimensions of " + in.str());
      std::vector<int64_t> s;
      for (auto p : perm) s.push_back(in.shape[p]);
      if (out != in.withShape(s)) fail(op, "result must be " + in.withShape(s).str() + ", got " + out.str());
      return;
    }
    case OpKind::Join: {
      sameType(op, in, ty(op.operand(1)), "operands");
      auto s = in.shape;
      s.push_back(2);
      if (in.isDesc() || out != in.withShape(s)) fail(op, "result must be " + in.withShape(s).str() + ", got " + out.str());
      return;
    }
    case OpKind::Split: {
      if (!in.isTile() || in.shape.back() != 2) fail(op, "operand's last dimension must be 2, got " + in.str());
      auto s = in.shape;
      s.pop_back();
      for (unsigned i = 0; i < 2; ++i)
        if (ty(op.result(i)) != in.withShape(s))
          fail(op, "results must be " + in.withShape(s).str() + ", got " + ty(op.result(i)).str());
      return;
    }
    default:
      throw InternalError("verifyShapeOp on " + opName(op));
  }
}

void checkMask(const Op& op, unsigned idx, const Type& ptr) {
  if (op.numOperands() <= idx) return;
  Type want = Type::tile(DType::I1, ptr.shape);
  if (ty(op.operand(idx)) != want) fail(op, "mask must be " + want.str() + ", got " + ty(op.operand(idx)).str());
}

// A load's or store's cache and eviction hints (Builder::MemoryHints).
void checkHints(const Op& op) {
  bool load = op.kind() == OpKind::Load;
  auto oneOf = [&](const char* name, std::initializer_list<const char*> allowed) {
    if (!op.hasAttr(name)) return;
    requireAttr(op, name, 3);
    const std::string& v = op.strAttr(name);
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
    }
    fail(op, std::string(name) + " must be one of " + list + ", got '" + v + "'");
  };
  if (load)
    oneOf("cache", {"ca", "cg", "cv"});
  else
    oneOf("cache", {"wb", "cg", "cs", "wt"});
  oneOf("evict", {"evict_first", "evict_last"});
  if (op.hasAttr("volatile")) {
    if (!load) fail(op, "takes no volatile attr");
    requireAttr(op, "volatile", 0);
  }
  // PTX's ld/st take a cache operator or eviction priorities, not both; ld.volatile neither.
  int kinds = op.hasAttr("cache") + op.hasAttr("evict") + op.hasAttr("volatile");
  if (kinds > 1) fail(op, "takes one of the cache, evict and volatile hints, got " + std::to_string(kinds));
}

void verifyMemory(const Op& op) {
  const Type& p = ty(op.operand(0));
  if (!p.isPtr()) fail(op, "first operand must be a pointer or a tile of pointers, got " + p.str());
  if (op.kind() == OpKind::Load || op.kind() == OpKind::Store) checkHints(op);
  Type value = Type::tile(p.elem, p.shape);
  switch (op.kind()) {
    case OpKind::Load:
      if (ty(op.result()) != value) fail(op, "result must be " + value.str() + ", got " + ty(op.result()).str());
      checkMask(op, 1, p);
      if (op.numOperands() == 3 && ty(op.operand(2)) != value)
        fail(op, "'other' must be " + value.str() + ", got " + ty(op.operand(2)).str());
      return;
    case OpKind::Store:
      if (ty(op.operand(1)) != value) fail(op, "value must be " + value.str() + ", got " + ty(op.operand(1)).str());
      checkMask(op, 2, p);
      return;
    default: {  // atomics
      bool cas = op.kind() == OpKind::AtomicCas;
      for (unsigned i = 1; i < (cas ? 3u : 2u); ++i)
        if (ty(op.operand(i)) != value)
          fail(op, std::string(i == 1 && cas ? "cmp" : "value") + " must be " + value.str() + ", got " +
                       ty(op.operand(i)).str());
      if (ty(op.result()) != value) fail(op, "result must be " + value.str() + ", got " + ty(op.result()).str());
      // atomic_cas compares bits: any element of 16, 32 or 64 bits, floats too.
      bool bitwise = op.kind() == OpKind::AtomicAnd || op.kind() == OpKind::AtomicOr || op.kind() == OpKind::AtomicXor;
      if (isStorageOnly(p.elem) || p.elem == DType::I1 || (bitwise && !isInt(p.elem)) ||
          (cas && bitWidth(p.elem) < 16))
        fail(op, "does not support element type " + std::string(dtypeName(p.elem)));
      if (!cas) checkMask(op, 2, p);
      if (op.hasAttr("sem")) {
        const std::string& sem = op.strAttr("sem");
        if (sem != "acq_rel" && sem != "acquire" && sem != "release" && sem != "relaxed")
          fail(op, "sem must be acq_rel, acquire, release or relaxed, got '" + sem + "'");
      }
      if (op.hasAttr("scope")) {
        const std::string& scope = op.strAttr("scope");
        if (scope != "gpu" && scope != "cta" && scope != "sys")
          fail(op, "scope must be gpu, cta or sys, got '" + scope + "'");
      }
      return;
    }
  }
}

void verifyDesc(const Op& op) {
  auto requireInts = [&](unsigned from, unsigned to, const char* what) {
    for (unsigned i = from; i < to; ++i)
      if (!ty(op.operand(i)).isIntLike() || ty(op.operand(i)).isTile())
        fail(op, std::string(what) + " must be scalar integers, got " + ty(op.operand(i)).str());
  };
  if (op.kind() == OpKind::MakeDesc) {
    requireAttr(op, "block_shape", 4);
    auto block = op.intsAttr("block_shape");
    const Type& base = ty(op.operand(0));
    if (!base.isPtr() || base.isTile()) fail(op, "base must be a scalar pointer, got " + base.str());
    unsigned rank = static_cast<unsigned>(block.size());
    if (rank == 0 || op.numOperands() != 1 + 2 * rank)
      fail(op, "needs a base, " + std::to_string(rank) + " sizes and " + std::to_string(rank) + " strides");
    requireInts(1, op.numOperands(), "sizes and strides");
    for (auto d : block)
      if (!isPow2(d)) fail(op, "block dimensions must be powers of two, got " + shapeStr(block));
    if (ty(op.result()) != Type::desc(base.elem, block))
      fail(op, "result must be " + Type::desc(base.elem, block).str() + ", got " + ty(op.result()).str());
    return;
  }
  const Type& d = ty(op.operand(0));
  if (!d.isDesc()) fail(op, "first operand must be a tensor descriptor, got " + d.str());
  Type tile = Type::tile(d.elem, d.shape);
  unsigned firstOffset = op.kind() == OpKind::DescLoad ? 1 : 2;
  if (op.numOperands() - firstOffset != d.shape.size())
    fail(op, "needs " + std::to_string(d.shape.size()) + " offsets for " + d.str());
  requireInts(firstOffset, op.numOperands(), "offsets");
  const Type& v = op.kind() == OpKind::DescLoad ? ty(op.result()) : ty(op.operand(1));
  if (v != tile) fail(op, std::string(op.kind() == OpKind::DescLoad ? "result" : "value") + " must be " + tile.str() + ", got " + v.str());
}

void verifyReduce(const Op& op) {
  const Type& in = ty(op.operand(0));
  if (!in.isTile() || !in.isNumeric()) fail(op, "operand must be a tile of numbers, got " + in.str());
  if (isStorageOnly(in.elem)) fail(op, "does not compute on " + std::string(dtypeName(in.elem)));
  int64_t axis = axisAttr(op, in.rank());
  auto s = in.shape;
  s.erase(s.begin() + axis);
  Type want = Type::tile(op.kind() == OpKind::Argmax ? DType::I32 : in.elem, s);
  if (ty(op.result()) != want) fail(op, "result must be " + want.str() + ", got " + ty(op.result()).str());
}

void verifyDot(const Op& op) {
  bool scaled = op.kind() == OpKind::DotScaled;
  const Type& a = ty(op.operand(0));
  const Type& b = ty(op.operand(scaled ? 2 : 1));
  const Type& acc = ty(op.operand(scaled ? 4 : 2));
  if (a.rank() != 2 || b.rank() != 2 || !a.isNumeric() || !b.isNumeric())
    fail(op, "operands must be 2-D tiles, got " + a.str() + " and " + b.str());
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (b.shape[0] != k) fail(op, "inner dimensions differ: " + a.str() + " times " + b.str());
  if (scaled) {
    static const std::set<DType> fmts = {DType::F8E4M3, DType::F8E5M2, DType::F4E2M1};
    if (!fmts.count(a.elem) || !fmts.count(b.elem)) fail(op, "operands must be f8e4m3, f8e5m2 or f4e2m1, got " + a.str() + " and " + b.str());
    if (k % 32) fail(op, "needs K divisible by the 32-element scale block, got K=" + std::to_string(k));
    Type as = Type::tile(DType::E8M0, {m, k / 32}), bs = Type::tile(DType::E8M0, {n, k / 32});
    if (ty(op.operand(1)) != as) fail(op, "a_scale must be " + as.str() + ", got " + ty(op.operand(1)).str());
    if (ty(op.operand(3)) != bs) fail(op, "b_scale must be " + bs.str() + ", got " + ty(op.operand(3)).str());
  } else {
    static const std::set<DType> ok = {DType::I8, DType::F16, DType::BF16, DType::F32, DType::F8E4M3, DType::F8E5M2};
    if (!ok.count(a.elem) || !ok.count(b.elem)) fail(op, "operands must be i8, f16, bf16, f32, f8e4m3 or f8e5m2, got " + a.str() + " and " + b.str());
    bool aFp8 = a.elem == DType::F8E4M3 || a.elem == DType::F8E5M2, bFp8 = b.elem == DType::F8E4M3 || b.elem == DType::F8E5M2;
    if (a.elem != b.elem && !(aFp8 && bFp8))
      fail(op, "operands must have the same element type, got " + a.str() + " and " + b.str());
  }
  // f16 and fp8 products may accumulate in f16 (Triton's out_dtype=float16).
  bool f16Acc =
      !scaled && acc.elem == DType::F16 && (a.elem == DType::F16 || a.elem == DType::F8E4M3 || a.elem == DType::F8E5M2);
  DType accT = a.elem == DType::I8 ? DType::I32 : f16Acc ? DType::F16 : DType::F32;
  Type want = Type::tile(accT, {m, n});
  if (acc != want) fail(op, "accumulator must be " + want.str() + ", got " + acc.str());
  if (ty(op.result()) != want) fail(op, "result must be " + want.str() + ", got " + ty(op.result()).str());
}

void checkTypes(const Op& op, const std::vector<Type>& want, const std::vector<Value*>& got, const std::string& what) {
  if (want.size() != got.size())
    fail(op, what + ": expected " + std::to_string(want.size()) + " values, got " + std::to_string(got.size()));
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i]->type() != want[i])
      fail(op, what + " #" + std::to_string(i) + " must be " + want[i].str() + ", got " + got[i]->type().str());
}

std::vector<Type> typesOf(const std::vector<Value*>& vs) {
  std::vector<Type> t;
  for (auto* v : vs) t.push_back(v->type());
  return t;
}

const Op* terminatorOf(const Op& op, const Block& b, OpKind kind, const std::string& where) {
  const Op* t = b.terminator();
  if (!t || t->kind() != kind) fail(op, where + " must end with '" + std::string(opInfo(kind).mnemonic) + "'");
  return t;
}

// reduce / scan: N tiles of one shape, N results, a region of 2N scalar arguments
// (acc..., x...) ending in combine_yield of N scalars, all of the operands' dtypes.
void verifyCombine(const Op& op) {
  const Type& t0 = ty(op.operand(0));
  for (Value* v : op.operands()) {
    const Type& t = ty(v);
    if (!t.isTile() || !t.isNumeric()) fail(op, "operands must be tiles of numbers, got " + t.str());
    if (isStorageOnly(t.elem)) fail(op, "does not compute on " + std::string(dtypeName(t.elem)));
    if (t.shape != t0.shape) fail(op, "operands must have one shape, got " + t0.str() + " and " + t.str());
  }
  int64_t axis = axisAttr(op, t0.rank());
  if (op.kind() == OpKind::Scan) requireAttr(op, "reverse", 0);
  auto s = t0.shape;
  if (op.kind() == OpKind::Reduce) s.erase(s.begin() + axis);
  unsigned n = op.numOperands();
  if (op.numResults() != n)
    fail(op, "has one result per operand (" + std::to_string(n) + "), got " + std::to_string(op.numResults()));
  std::vector<Type> scalars;
  for (unsigned i = 0; i < n; ++i) {
    Type want = Type::tile(ty(op.operand(i)).elem, s);
    if (ty(op.result(i)) != want)
      fail(op, "result #" + std::to_string(i) + " must be " + want.str() + ", got " + ty(op.result(i)).str());
    scalars.push_back(Type::scalar(want.elem));
  }
  const Block& body = op.region(0);
  std::vector<Type> args = scalars;
  args.insert(args.end(), scalars.begin(), scalars.end());
  checkTypes(op, args, body.args(), "combine argument");
  checkTypes(op, scalars, terminatorOf(op, body, OpKind::CombineYield, "combine region")->operands(), "combined value");
}

void verifyGather(const Op& op) {
  const Type &src = ty(op.operand(0)), &index = ty(op.operand(1));
  if (!src.isTile() || !src.isNumeric()) fail(op, "source must be a tile of numbers, got " + src.str());
  if (!index.isTile() || !index.isIntLike() || index.elem == DType::I1)
    fail(op, "index must be a tile of integers, got " + index.str());
  if (index.rank() != src.rank())
    fail(op, "index must have the source's rank, got " + src.str() + " and " + index.str());
  int64_t axis = axisAttr(op, src.rank());
  for (int64_t d = 0; d < src.rank(); ++d)
    if (d != axis && index.shape[d] != src.shape[d])
      fail(op, "index " + index.str() + " must match the source " + src.str() + " in every dimension but the axis");
  Type want = Type::tile(src.elem, index.shape);
  if (ty(op.result()) != want) fail(op, "result must be " + want.str() + ", got " + ty(op.result()).str());
}

void verifyHistogram(const Op& op) {
  const Type& x = ty(op.operand(0));
  if (x.rank() != 1 || !x.isIntLike() || x.elem == DType::I1)
    fail(op, "operand must be a 1-D tile of integers, got " + x.str());
  if (op.numOperands() == 2 && ty(op.operand(1)) != Type::tile(DType::I1, x.shape))
    fail(op, "mask must be " + Type::tile(DType::I1, x.shape).str() + ", got " + ty(op.operand(1)).str());
  const Type& r = ty(op.result());
  if (r.rank() != 1 || r.elem != DType::I32)
    fail(op, "result must be a 1-D tile of i32 (one count per bin), got " + r.str());
}

void verifyControlFlow(const Op& op) {
  auto results = typesOf(op.results());
  switch (op.kind()) {
    case OpKind::For: {
      const Type& iv = op.operand(0)->type();
      if (!iv.isIntLike() || iv.isTile()) fail(op, "bounds must be scalar integers, got " + iv.str());
      sameType(op, iv, op.operand(1)->type(), "lower and upper bounds");
      sameType(op, iv, op.operand(2)->type(), "lower bound and step");
      std::vector<Value*> inits(op.operands().begin() + 3, op.operands().end());
      checkTypes(op, results, inits, "initial value");
      const Block& body = op.region(0);
      auto args = body.args();
      if (args.empty() || args[0]->type() != iv) fail(op, "body's first argument must be the induction variable of type " + iv.str());
      checkTypes(op, results, std::vector<Value*>(args.begin() + 1, args.end()), "body argument");
      checkTypes(op, results, terminatorOf(op, body, OpKind::Yield, "body")->operands(), "yielded value");
      return;
    }
    case OpKind::If: {
      if (op.operand(0)->type() != Type::scalar(DType::I1)) fail(op, "condition must be i1, got " + op.operand(0)->type().str());
      for (unsigned r = 0; r < 2; ++r) {
        if (op.region(r).numArgs()) fail(op, "regions take no arguments");
        checkTypes(op, results, terminatorOf(op, op.region(r), OpKind::Yield, r ? "else region" : "then region")->operands(),
                   "yielded value");
      }
      return;
    }
    case OpKind::While: {
      auto inits = typesOf(op.operands());
      checkTypes(op, inits, op.region(0).args(), "before-region argument");
      const Op* cond = terminatorOf(op, op.region(0), OpKind::Condition, "before region");
      verifyOp(*cond);  // its arity first: the condition operand is read below
      std::vector<Value*> fwd(cond->operands().begin() + 1, cond->operands().end());
      checkTypes(op, results, fwd, "forwarded value");
      checkTypes(op, results, op.region(1).args(), "after-region argument");
      checkTypes(op, inits, terminatorOf(op, op.region(1), OpKind::Yield, "after region")->operands(), "yielded value");
      return;
    }
    default:
      throw InternalError("verifyControlFlow on " + opName(op));
  }
}

void verifyTerminator(const Op& op) {
  const Op* parent = op.parentOp();
  OpKind pk = parent ? parent->kind() : OpKind::Func;
  switch (op.kind()) {
    case OpKind::Return:
      if (!parent || pk != OpKind::Func) fail(op, "must be the last op of a function body");
      checkTypes(op, funcResultTypes(*parent), op.operands(), "returned value");
      return;
    case OpKind::Yield:
      if (!parent || (pk != OpKind::For && pk != OpKind::If && pk != OpKind::While && pk != OpKind::WarpSpecialize))
        fail(op, "must end the region of a 'for', 'if', 'while' or 'warp_specialize'");
      return;
    case OpKind::CombineYield:
      if (!parent || (pk != OpKind::Reduce && pk != OpKind::Scan))
        fail(op, "must end the region of a 'reduce' or 'scan'");
      return;
    case OpKind::Condition:
      if (!parent || pk != OpKind::While || &parent->region(0) != op.parentBlock())
        fail(op, "must end the before-region of a 'while'");
      if (op.operand(0)->type() != Type::scalar(DType::I1)) fail(op, "condition must be i1, got " + op.operand(0)->type().str());
      return;
    default:
      throw InternalError("verifyTerminator on " + opName(op));
  }
}

// The attributes of a func's header; calls check them on callees not verified yet.
void checkFuncAttrs(const Op& func) {
  requireAttr(func, "sym_name", 3);
  if (func.hasAttr("results")) requireAttr(func, "results", 5);
  if (func.hasAttr("kernel")) requireAttr(func, "kernel", 0);
  if (func.hasAttr("aligned16")) {  // the specialization's hints: indices of the arguments
    requireAttr(func, "aligned16", 4);
    auto n = static_cast<int64_t>(func.region(0).numArgs());
    for (int64_t i : std::get<std::vector<int64_t>>(*func.attr("aligned16")))
      if (i < 0 || i >= n)
        fail(func, "'aligned16' names argument " + std::to_string(i) + ", but the function has " + std::to_string(n));
  }
  if (func.hasAttr("maxnreg")) {  // the launch's register cap per thread (PTX .maxnreg)
    requireAttr(func, "maxnreg", 1);
    int64_t r = func.intAttr("maxnreg");
    if (r < 1 || r > 255) fail(func, "'maxnreg' must be in [1, 255], got " + std::to_string(r));
  }
}

void verifyCall(const Op& op) {
  requireAttr(op, "callee", 3);
  const Op* f = enclosingFunc(op);
  const Block* top = f ? f->parentBlock() : nullptr;
  const Op* callee = nullptr;
  if (top)
    for (auto& o : top->ops())
      if (o->kind() == OpKind::Func && funcName(*o) == op.strAttr("callee")) callee = o.get();
  if (!callee) fail(op, "calls unknown function '@" + op.strAttr("callee") + "'");
  checkFuncAttrs(*callee);
  if (callee->hasAttr("kernel") && callee->boolAttr("kernel")) fail(op, "cannot call the kernel '@" + funcName(*callee) + "'");
  if (f && isGpuStage(*f) != isGpuStage(*callee))
    fail(op, "calls '@" + funcName(*callee) + "' of the " + (isGpuStage(*callee) ? "GPU stage" : "tile level") +
                 " from a function of the " + (isGpuStage(*f) ? "GPU stage" : "tile level"));
  checkTypes(op, typesOf(callee->region(0).args()), op.operands(), "argument");
  auto res = funcResultTypes(*callee);
  if (res != typesOf(op.results())) fail(op, "result types do not match '@" + funcName(*callee) + "'");
}

void verifyFunc(const Op& op) {
  checkFuncAttrs(op);
  verifyGpuFunc(op);
  const Block& body = op.region(0);
  terminatorOf(op, body, OpKind::Return, "function body");
  bool kernel = op.hasAttr("kernel") && op.boolAttr("kernel");
  if (kernel && !funcResultTypes(op).empty()) fail(op, "kernel '@" + funcName(op) + "' cannot return values");
  for (Value* a : body.args())
    if (a->type().isTile()) {
      if (kernel) fail(op, "kernel parameters must be scalars or pointers, got " + a->type().str());
      checkTileShape(op, a->type());
    }
}

// Every operand must be defined earlier in its block or in an enclosing one.
void checkDominance(const Block& b, std::vector<std::set<const Value*>>& scopes) {
  auto args = b.args();  // by value: begin and end must come from the same vector
  scopes.emplace_back(args.begin(), args.end());
  for (auto& o : b.ops()) {
    for (unsigned i = 0; i < o->numOperands(); ++i) {
      const Value* v = o->operand(i);
      bool seen = std::any_of(scopes.begin(), scopes.end(), [&](auto& s) { return s.count(v) != 0; });
      if (!seen) fail(*o, "operand #" + std::to_string(i) + " is used where its definition is not visible");
    }
    for (unsigned r = 0; r < o->numRegions(); ++r) checkDominance(o->region(r), scopes);
    for (Value* v : o->results()) scopes.back().insert(v);
  }
  scopes.pop_back();
}

void verifyStructure(const Op& op) {
  const OpInfo& info = op.info();
  int n = static_cast<int>(op.numOperands());
  if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands)) {
    std::string want = info.minOperands == info.maxOperands ? std::to_string(info.minOperands)
                       : info.maxOperands < 0 ? "at least " + std::to_string(info.minOperands)
                                              : std::to_string(info.minOperands) + " to " + std::to_string(info.maxOperands);
    fail(op, "takes " + want + " operands, got " + std::to_string(n));
  }
  if (info.numResults >= 0 && static_cast<int>(op.numResults()) != info.numResults)
    fail(op, "has " + std::to_string(info.numResults) + " results, got " + std::to_string(op.numResults()));
  if (static_cast<int>(op.numRegions()) != info.numRegions)
    fail(op, "has " + std::to_string(info.numRegions) + " regions, got " + std::to_string(op.numRegions()));
  for (Value* r : op.results()) checkTileShape(op, r->type());
  if (op.has(Terminator) && op.parentBlock() && op.parentBlock()->back() != &op) fail(op, "must be the last op of its region");
  if (op.numRegions() && op.kind() != OpKind::Func) {
    int depth = 0;
    for (const Block* b = op.parentBlock(); b && b->parentOp() && b->parentOp()->kind() != OpKind::Func;
         b = b->parentOp()->parentBlock())
      ++depth;
    if (depth >= kMaxRegionDepth)
      fail(op, "regions are nested more than " + std::to_string(kMaxRegionDepth) + " deep");
  }
  for (unsigned r = 0; r < op.numRegions(); ++r) {
    const Block& b = op.region(r);
    if (op.kind() != OpKind::Func) {
      for (Value* a : b.args()) checkTileShape(op, a->type());
    }
    if (b.empty() || !b.terminator()) fail(op, "region #" + std::to_string(r) + " must end with a terminator");
  }
}

void verifyTileOp(const Op& op) {
  switch (accessKind(op)) {
    case OpKind::Func: return verifyFunc(op);
    case OpKind::Return:
    case OpKind::Yield:
    case OpKind::CombineYield:
    case OpKind::Condition: return verifyTerminator(op);
    case OpKind::Call: return verifyCall(op);
    case OpKind::Constant: {
      const Type& t = ty(op.result());
      requireNumeric(op, t, "result");
      const Attr* v = op.attr("value");
      if (!v) fail(op, "needs attribute 'value'");
      bool isF = std::holds_alternative<double>(*v), isI = std::holds_alternative<int64_t>(*v);
      if (isFloat(t.elem) ? !isF : !isI)
        fail(op, "value " + attrToString(*v) + " does not fit type " + t.str());
      if (t.elem == DType::I1 && isI && std::get<int64_t>(*v) != 0 && std::get<int64_t>(*v) != 1)
        fail(op, "value of an i1 constant must be 0 or 1");
      return;
    }
    case OpKind::Cmp: return verifyCmp(op);
    case OpKind::Select: {
      const Type& r = ty(op.result());
      sameType(op, ty(op.operand(1)), r, "true value and result");
      sameType(op, ty(op.operand(2)), r, "false value and result");
      if (ty(op.operand(0)) != Type::tile(DType::I1, r.shape))
        fail(op, "condition must be " + Type::tile(DType::I1, r.shape).str() + ", got " + ty(op.operand(0)).str());
      return;
    }
    case OpKind::Cast: return verifyCast(op);
    case OpKind::Bitcast: return verifyBitcast(op);
    case OpKind::PtrAdd: return verifyPtrAdd(op);
    case OpKind::Abs:
      return verifyArith(op);
    case OpKind::Arange:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Trans:
    case OpKind::Join:
    case OpKind::Split: return verifyShapeOp(op);
    case OpKind::Hint: return verifyHint(op);
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
      axisAttr(op, 3);
      if (ty(op.result()) != Type::scalar(DType::I32)) fail(op, "result must be i32, got " + ty(op.result()).str());
      return;
    case OpKind::Load:
    case OpKind::Store: return verifyMemory(op);
    case OpKind::MakeDesc:
    case OpKind::DescLoad:
    case OpKind::DescStore: return verifyDesc(op);
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::Argmax: return verifyReduce(op);
    case OpKind::Reduce:
    case OpKind::Scan:
      return verifyCombine(op);
    case OpKind::Gather:
      return verifyGather(op);
    case OpKind::Histogram:
      return verifyHistogram(op);
    case OpKind::Dot:
    case OpKind::DotScaled: return verifyDot(op);
    case OpKind::For:
    case OpKind::If:
    case OpKind::While: return verifyControlFlow(op);
    case OpKind::Print:
      requireAttr(op, "prefix", 3);
      return;
    case OpKind::DebugBarrier:
      return;  // no operands, results or attributes: the op table's counts say it all
    case OpKind::Assert:
      requireAttr(op, "message", 3);
      if (!ty(op.operand(0)).isNumeric() || ty(op.operand(0)).elem != DType::I1)
        fail(op, "condition must be i1 or a tile of i1, got " + ty(op.operand(0)).str());
      return;
    default:
      if (op.has(Elementwise)) return verifyArith(op);
      throw InternalError("no verifier for " + opName(op));
  }
}

}  // namespace

void verifyOp(const Op& op) {
  verifyStructure(op);
  const Op* func = op.kind() == OpKind::Func ? &op : enclosingFunc(op);
  checkStage(op, func);
  if (op.has(GpuLevel)) return verifyGpuOp(op);
  verifyTileOp(op);
  if (func && isGpuStage(*func)) verifyTileOpLayouts(op);
}

// Calls form no cycle: the interpreter and the GPU have no call stack to grow, and the
// inliner would not terminate.
void checkNoRecursion(const Module& m) {
  std::map<std::string, std::vector<const Op*>> calls;  // function -> its call ops
  for (auto& f : m.body().ops()) {
    if (f->kind() != OpKind::Func || !f->hasAttr("sym_name")) continue;
    auto& out = calls[funcName(*f)];
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::Call && o->hasAttr("callee")) out.push_back(o);
    });
  }
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& f) {
    state[f] = 1;
    path.push_back(f);
    for (const Op* c : calls[f]) {
      const std::string& g = c->strAttr("callee");
      if (state[g] == 1) {
        std::string cycle;
        for (auto it = std::find(path.begin(), path.end(), g); it != path.end(); ++it) cycle += "@" + *it + " -> ";
        fail(*c, "recursion is not supported: " + cycle + "@" + g);
      }
      if (state[g] == 0 && calls.count(g)) visit(g);
    }
    path.pop_back();
    state[f] = 2;
  };
  for (auto& [f, _] : calls)
    if (state[f] == 0) visit(f);
}

void verifyModule(const Module& m) {
  std::set<std::string> names;
  for (auto& f : m.body().ops()) {
    if (f->kind() != OpKind::Func) throw UserError(f->loc(), "only 'func' ops may appear at module level, got " + opName(*f));
    if (f->hasAttr("sym_name") && !names.insert(funcName(*f)).second)
      throw UserError(f->loc(), "function '@" + funcName(*f) + "' is defined twice");
    f->walk([](Op* o) {
      if (o->kind() == OpKind::Func && o->parentBlock() && o->parentBlock()->parentOp())
        fail(*o, "may only appear at module level");
      verifyOp(*o);
    });
    std::vector<std::set<const Value*>> scopes;
    checkDominance(f->region(0), scopes);
  }
  checkNoRecursion(m);
}

}  // namespace tilefuse
