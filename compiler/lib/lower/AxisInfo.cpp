// Axis info: the transfer rule of each op and the fixpoint over structured control flow.
// Index arithmetic is assumed not to overflow, as everywhere else in the lowering.
#include "tilefuse/lower/AxisInfo.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <string>

namespace tilefuse::lower {
namespace {

using Fact = detail::AxisFact;

constexpr int64_t kMaxDiv = int64_t{1} << 30;
constexpr int kMaxLoopIterations = 32;

// The largest power of two dividing x, capped (0 is a multiple of everything).
int64_t pow2Div(int64_t x) {
  return x == 0 ? kMaxDiv : int64_t{1} << std::min(30, std::countr_zero(static_cast<uint64_t>(x)));
}

int64_t capMul(int64_t a, int64_t b) { return std::min(kMaxDiv, a * b); }

// Bytes of one pointee; 0 for f4e2m1, whose elements have no byte address of their own.
int64_t elemBytes(DType d) { return d == DType::F4E2M1 ? 0 : std::max(1, bitWidth(d) / 8); }

// What one step of contiguity adds to the divisibility unit: bytes per element for pointers.
int64_t unitOf(const Type& t) { return t.isPtr() ? std::max<int64_t>(1, elemBytes(t.elem)) : 1; }

size_t numDims(const Type& t) { return static_cast<size_t>(std::max(1, t.rank())); }
int64_t dimSize(const Type& t, size_t d) { return t.rank() == 0 ? 1 : t.shape[d]; }

Fact bottom(const Type& t) {
  std::vector<int64_t> ones(numDims(t), 1);
  return {{ones, ones, ones}, false};
}

// Divisibility of the elements at multiples of g along d: run starts when g is a multiple of the
// contiguity, else run starts plus whole steps of g.
int64_t startDiv(const AxisInfo& a, size_t d, int64_t g, int64_t unit) {
  return g >= a.contiguity[d] ? a.divisibility[d] : std::min(a.divisibility[d], g * unit);
}
int64_t elemDiv(const AxisInfo& a, size_t d, int64_t unit) { return startDiv(a, d, 1, unit); }
// Divisibility of every element: each dim's claim holds for all of them, so take the best.
int64_t anyDiv(const AxisInfo& a, int64_t unit) {
  int64_t r = 1;
  for (size_t d = 0; d < a.divisibility.size(); ++d) r = std::max(r, elemDiv(a, d, unit));
  return r;
}

// A value that is one of a or b: shorter runs hold in both, and their starts divide as in both.
Fact meet(const Fact& a, const Fact& b, const Type& t) {
  Fact r = bottom(t);
  int64_t u = unitOf(t);
  for (size_t d = 0; d < numDims(t); ++d) {
    int64_t g = std::min(a.info.contiguity[d], b.info.contiguity[d]);
    r.info.contiguity[d] = g;
    r.info.divisibility[d] = std::min(startDiv(a.info, d, g, u), startDiv(b.info, d, g, u));
    r.info.constancy[d] = std::min(a.info.constancy[d], b.info.constancy[d]);
  }
  r.nonNeg = a.nonNeg && b.nonNeg;
  return r;
}

// The integer every element of v equals, when v is a constant or a reshaped splat of one.
std::optional<int64_t> constInt(const Value* v) {
  const Op* op = v->definingOp();
  auto k = [&] { return op ? op->kind() : OpKind::Constant; };
  while (k() == OpKind::Splat || k() == OpKind::Broadcast || k() == OpKind::ExpandDims || k() == OpKind::Reshape ||
         k() == OpKind::Trans)
    op = op->operand(0)->definingOp();
  const int64_t* i = op && op->kind() == OpKind::Constant ? std::get_if<int64_t>(op->attr("value")) : nullptr;
  return i ? std::optional<int64_t>(*i) : std::nullopt;
}

void copyDim(AxisInfo& r, size_t to, const AxisInfo& a, size_t from) {
  r.contiguity[to] = a.contiguity[from];
  r.divisibility[to] = a.divisibility[from];
  r.constancy[to] = a.constancy[from];
}

std::vector<Value*> terminatorOperands(const Block& b, unsigned from) {
  std::vector<Value*> r;
  if (const Op* t = b.terminator())
    for (unsigned i = from; i < t->numOperands(); ++i) r.push_back(t->operand(i));
  return r;
}

}  // namespace

AxisAnalysis::AxisAnalysis(const Op& func) {
  if (func.kind() != OpKind::Func) throw InternalError("axis analysis needs a func op");
  const Block& body = func.region(0);
  std::vector<int64_t> aligned;
  if (const Attr* a = func.attr("aligned16"))
    if (const auto* v = std::get_if<std::vector<int64_t>>(a)) aligned = *v;
  for (unsigned i = 0; i < body.numArgs(); ++i) {
    const Type& t = body.arg(i)->type();
    Fact f = bottom(t);
    // Hinted arguments are multiples of 16 (bytes for pointers); pointers are element-aligned anyway.
    bool hinted = std::find(aligned.begin(), aligned.end(), int64_t{i}) != aligned.end();
    if (t.rank() == 0 && (t.isIntLike() || t.isPtr())) f.info.divisibility[0] = hinted ? 16 : unitOf(t);
    facts_[body.arg(i)] = f;
  }
  visitBlock(body);
}

const Fact& AxisAnalysis::fact(const Value* v) const {
  auto it = facts_.find(v);
  if (it == facts_.end()) throw InternalError("axis info asked for a value outside the analysed function");
  return it->second;
}

const AxisInfo& AxisAnalysis::get(const Value* v) const { return fact(v).info; }

int64_t AxisAnalysis::vectorWidth(const Value* ptr, const Value* mask, int64_t maxBytes, int dim) const {
  const Type& t = ptr->type();
  int64_t bytes = t.isPtr() ? elemBytes(t.elem) : 0;
  if (t.rank() == 0 || bytes == 0 || maxBytes < bytes) return 1;
  const AxisInfo& p = get(ptr);
  size_t d = static_cast<size_t>(dim < 0 ? t.rank() - 1 : dim);
  int64_t w = std::min({p.contiguity[d], std::max<int64_t>(1, p.divisibility[d] / bytes), maxBytes / bytes});
  if (mask && mask->type().rank() == t.rank()) w = std::min(w, get(mask).constancy[d]);
  return w;
}

void AxisAnalysis::visitBlock(const Block& block) {
  for (const auto& op : block.ops()) visitOp(*op);
}

void AxisAnalysis::solveLoop(const std::vector<Value*>& args, const std::vector<Value*>& inits,
                             const std::function<std::vector<Value*>()>& body) {
  // Start from the initial values and weaken until what flows back adds nothing new.
  for (size_t i = 0; i < args.size(); ++i) facts_[args[i]] = fact(inits.at(i));
  for (int iteration = 0;; ++iteration) {
    std::vector<Value*> back = body();
    bool changed = false;
    for (size_t i = 0; i < args.size(); ++i) {
      const Type& t = args[i]->type();
      Fact m = i < back.size() ? meet(fact(inits[i]), fact(back[i]), t) : bottom(t);
      if (m == facts_[args[i]]) continue;
      facts_[args[i]] = m;
      changed = true;
    }
    if (!changed) return;
    if (iteration == kMaxLoopIterations) {  // give up: nothing is known about the carried values
      for (Value* a : args) facts_[a] = bottom(a->type());
      body();
      return;
    }
  }
}

void AxisAnalysis::visitOp(const Op& op) {
  auto forward = [&](const std::vector<Value*>& to, const std::vector<Value*>& from) {
    for (size_t i = 0; i < to.size(); ++i) facts_[to[i]] = i < from.size() ? fact(from[i]) : bottom(to[i]->type());
  };
  switch (op.kind()) {
    case OpKind::For: {
      const Block& body = op.region(0);
      // iv = lb + i*step: a multiple of whatever divides both; non-negative when both are.
      const Fact &lb = fact(op.operand(0)), &step = fact(op.operand(2));
      Fact iv = bottom(body.arg(0)->type());
      iv.info.divisibility[0] = std::min(lb.info.divisibility[0], step.info.divisibility[0]);
      iv.nonNeg = lb.nonNeg && step.nonNeg;
      facts_[body.arg(0)] = iv;
      std::vector<Value*> args = body.args(), inits = op.operands();
      args.erase(args.begin());
      inits.erase(inits.begin(), inits.begin() + 3);
      solveLoop(args, inits, [&] {
        visitBlock(body);
        return terminatorOperands(body, 0);
      });
      // The loop leaves with the initial values or the last yielded ones: the carried facts cover both.
      forward(op.results(), args);
      return;
    }
    case OpKind::While: {
      const Block &before = op.region(0), &after = op.region(1);
      solveLoop(before.args(), op.operands(), [&] {
        visitBlock(before);
        forward(after.args(), terminatorOperands(before, 1));
        visitBlock(after);
        return terminatorOperands(after, 0);
      });
      forward(op.results(), terminatorOperands(before, 1));
      return;
    }
    case OpKind::WarpSpecialize:
      return visitBlock(op.region(0));
    case OpKind::If: {
      visitBlock(op.region(0));
      visitBlock(op.region(1));
      std::vector<Value*> a = terminatorOperands(op.region(0), 0), b = terminatorOperands(op.region(1), 0);
      for (unsigned i = 0; i < op.numResults(); ++i) {
        const Type& t = op.result(i)->type();
        facts_[op.result(i)] = i < a.size() && i < b.size() ? meet(fact(a[i]), fact(b[i]), t) : bottom(t);
      }
      return;
    }
    case OpKind::Reduce:
    case OpKind::Scan:  // a combine region on scalars: nothing known of its values
      for (Value* a : op.region(0).args()) facts_[a] = bottom(a->type());
      visitBlock(op.region(0));
      for (Value* v : op.results()) facts_[v] = bottom(v->type());
      return;
    default:  // no other op has regions
      if (op.numResults() == 1) {
        facts_[op.result()] = transfer(op);
      } else {
        for (Value* v : op.results()) facts_[v] = bottom(v->type());
      }
  }
}

Fact AxisAnalysis::transfer(const Op& op) const {
  const Type& t = op.result()->type();
  const size_t n = numDims(t);
  const int64_t u = unitOf(t);
  Fact r = bottom(t);
  AxisInfo& R = r.info;
  auto in = [&](unsigned i) -> const Fact& { return fact(op.operand(i)); };
  // An elementwise op is a function of same-index operands: constant wherever they all are.
  if (op.has(Elementwise)) {
    for (size_t d = 0; d < n; ++d) R.constancy[d] = dimSize(t, d);
    for (unsigned i = 0; i < op.numOperands(); ++i) {
      if (op.operand(i)->type().rank() != t.rank()) return bottom(t);
      for (size_t d = 0; d < n; ++d) R.constancy[d] = std::min(R.constancy[d], in(i).info.constancy[d]);
    }
  }
  switch (op.kind()) {
    case OpKind::ConvertLayout:  // the same elements, held by other threads
      return in(0);
    case OpKind::Hint: {  // the kernel author's word (tl.multiple_of, tl.max_contiguous)
      r = in(0);
      for (const char* name : {"divisibility", "contiguity"}) {
        if (!op.attr(name)) continue;
        const auto& v = op.intsAttr(name);
        auto& field = name[0] == 'd' ? R.divisibility : R.contiguity;
        for (size_t d = 0; d < n && d < v.size(); ++d)
          field[d] = std::max(field[d], std::min<int64_t>(v[d], int64_t(1) << 30));
      }
      return r;
    }
    case OpKind::Constant:
    case OpKind::Splat: {  // one value everywhere
      bool splat = op.kind() == OpKind::Splat;
      const Attr* v = op.attr("value");
      const int64_t* i = v ? std::get_if<int64_t>(v) : nullptr;
      for (size_t d = 0; d < n; ++d) {
        R.constancy[d] = dimSize(t, d);
        R.divisibility[d] = splat ? in(0).info.divisibility[0] : i ? pow2Div(*i) : 1;
      }
      r.nonNeg = splat ? in(0).nonNeg : i && *i >= 0;
      break;
    }
    case OpKind::Arange: {  // one run start, start + 1, ...
      int64_t start = op.intAttr("start");
      R.contiguity[0] = t.shape[0];
      R.divisibility[0] = pow2Div(start);
      r.nonNeg = start >= 0;
      break;
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
      r.nonNeg = true;
      break;
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::PtrAdd: {
      // Contiguous plus constant steps by 1 (minus: only a contiguous lhs); a sum of multiples of 2^k is one.
      const AxisInfo &a = in(0).info, &b = in(1).info;
      const int64_t scale = op.kind() == OpKind::PtrAdd ? u : 1;  // offsets count elements
      for (size_t d = 0; d < n; ++d) {
        int64_t g = std::min(a.contiguity[d], b.constancy[d]);
        if (op.kind() != OpKind::Sub) g = std::max(g, std::min(a.constancy[d], b.contiguity[d]));
        R.contiguity[d] = g;
        R.divisibility[d] = std::min(startDiv(a, d, g, u), capMul(startDiv(b, d, g, 1), scale));
      }
      r.nonNeg = op.kind() == OpKind::Add && in(0).nonNeg && in(1).nonNeg;
      break;
    }
    case OpKind::Mul: {
      // x * 1 is x; otherwise the factors of two of every element multiply.
      for (unsigned i : {0u, 1u})
        if (constInt(op.operand(1 - i)) == 1) return in(i);
      for (size_t d = 0; d < n; ++d) R.divisibility[d] = capMul(elemDiv(in(0).info, d, 1), elemDiv(in(1).info, d, 1));
      r.nonNeg = in(0).nonNeg && in(1).nonNeg;
      break;
    }
    case OpKind::Div: {
      if (!t.isIntLike()) break;
      std::optional<int64_t> c = constInt(op.operand(1));
      if (c == 1) return in(0);
      const AxisInfo& a = in(0).info;
      for (size_t d = 0; c && *c > 0 && d < n; ++d) {
        // A non-negative aligned run that stays between two multiples of c has one quotient.
        if (in(0).nonNeg)
          R.constancy[d] = std::max(R.constancy[d], std::min({a.contiguity[d], a.divisibility[d], pow2Div(*c)}));
        // Dividing a multiple of 2^j exactly by 2^k leaves a multiple of 2^(j-k).
        if (pow2Div(*c) == *c && elemDiv(a, d, 1) >= *c) R.divisibility[d] = elemDiv(a, d, 1) / *c;
      }
      r.nonNeg = in(0).nonNeg && in(1).nonNeg;
      break;
    }
    case OpKind::Rem: {
      if (!t.isIntLike()) break;
      // x % m = x - q*m. For x >= 0 and m constant along an aligned run that crosses no multiple of m,
      // q is constant there, so the result steps like x (a negative x breaks this where q changes sign).
      const AxisInfo &a = in(0).info, &b = in(1).info;
      for (size_t d = 0; d < n; ++d) {
        int64_t m = elemDiv(b, d, 1);
        int64_t g = in(0).nonNeg ? std::min({a.contiguity[d], a.divisibility[d], m, b.constancy[d]}) : 1;
        R.contiguity[d] = g;
        R.divisibility[d] = std::min(startDiv(a, d, g, 1), m);
      }
      r.nonNeg = in(0).nonNeg;
      break;
    }
    case OpKind::Shl:
    case OpKind::Shr: {
      std::optional<int64_t> s = constInt(op.operand(1));
      if (s == 0) return in(0);
      // x << s multiplies every element by 2^s (shifts past the width are undefined).
      if (op.kind() == OpKind::Shl && s && *s > 0 && *s < bitWidth(t.elem))
        for (size_t d = 0; d < n; ++d)
          R.divisibility[d] = capMul(elemDiv(in(0).info, d, 1), int64_t{1} << std::min<int64_t>(*s, 30));
      r.nonNeg = op.kind() == OpKind::Shr && in(0).nonNeg;  // arithmetic shift keeps the sign
      break;
    }
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Xor:
    case OpKind::Min:
    case OpKind::Max:
    case OpKind::Neg:
    case OpKind::Abs: {
      // Low zero bits survive: and keeps those of either operand; or, xor, min and max those of both.
      bool either = op.kind() == OpKind::And || op.kind() == OpKind::Max;
      for (size_t d = 0; d < n; ++d) {
        int64_t x = elemDiv(in(0).info, d, 1), y = op.numOperands() > 1 ? elemDiv(in(1).info, d, 1) : x;
        R.divisibility[d] = op.kind() == OpKind::And ? std::max(x, y) : std::min(x, y);
      }
      if (op.numOperands() > 1) r.nonNeg = either ? in(0).nonNeg || in(1).nonNeg : in(0).nonNeg && in(1).nonNeg;
      break;
    }
    case OpKind::Cmp: {
      if (!op.operand(0)->type().isIntLike()) break;
      // An aligned run of a contiguous x never straddles a constant m that is a multiple of its length,
      // so x < m and x >= m are constant on it; x <= m and x > m switch at m + 1 instead. Mirrored for
      // a contiguous rhs. (Unsigned: the wrap at 0 is aligned too.)
      const std::string& p = op.strAttr("predicate");
      bool lhsRuns = p == "lt" || p == "ge" || p == "ult" || p == "uge";
      bool rhsRuns = p == "le" || p == "gt" || p == "ule" || p == "ugt";
      const AxisInfo &a = in(0).info, &b = in(1).info;
      for (size_t d = 0; d < n; ++d) {
        auto run = [&](const AxisInfo& x, const AxisInfo& m) {
          return std::min({x.contiguity[d], x.divisibility[d], m.constancy[d], elemDiv(m, d, 1)});
        };
        if (lhsRuns) R.constancy[d] = std::max(R.constancy[d], run(a, b));
        if (rhsRuns) R.constancy[d] = std::max(R.constancy[d], run(b, a));
      }
      break;
    }
    case OpKind::Select: {
      // Where the condition is constant, each aligned run comes whole from one branch.
      const AxisInfo &c = in(0).info, &a = in(1).info, &b = in(2).info;
      for (size_t d = 0; d < n; ++d) {
        int64_t g = std::min({c.constancy[d], a.contiguity[d], b.contiguity[d]});
        R.contiguity[d] = g;
        R.divisibility[d] = std::min(startDiv(a, d, g, u), startDiv(b, d, g, u));
      }
      r.nonNeg = in(1).nonNeg && in(2).nonNeg;
      break;
    }
    case OpKind::Cast:
    case OpKind::Bitcast: {
      // A widening int cast sign-extends and a bitcast keeps the bits, so ints keep their values and
      // pointers their byte addresses (and runs, for an equal element size); other casts keep constancy.
      const Type& it = op.operand(0)->type();
      bool ints = it.isIntLike() && t.isIntLike() && it.elem != DType::I1 && bitWidth(t.elem) >= bitWidth(it.elem);
      // An address as an integer (or back) counts bytes, not elements: nothing is known of it.
      if (it.isPtr() != t.isPtr()) break;
      if (ints || (it.isPtr() && elemBytes(it.elem) == elemBytes(t.elem))) {
        R.contiguity = in(0).info.contiguity;
        R.divisibility = in(0).info.divisibility;
        r.nonNeg = in(0).nonNeg && ints;
      } else if (it.isPtr()) {
        for (size_t d = 0; d < n; ++d) R.divisibility[d] = elemDiv(in(0).info, d, unitOf(it));
      }
      break;
    }
    case OpKind::Broadcast:  // a stretched unit dim repeats its one element
      for (size_t d = 0; d < n; ++d) {
        copyDim(R, d, in(0).info, d);
        if (op.operand(0)->type().shape[d] == 1 && t.shape[d] != 1) R.constancy[d] = t.shape[d];
      }
      r.nonNeg = in(0).nonNeg;
      break;
    case OpKind::ExpandDims: {  // the new unit dim: a run per element
      const AxisInfo& a = in(0).info;
      int64_t every = anyDiv(a, u);
      R = op.operand(0)->type().rank() > 0 ? a : AxisInfo{};
      auto axis = static_cast<std::ptrdiff_t>(op.intAttr("axis"));
      R.contiguity.insert(R.contiguity.begin() + axis, 1);
      R.divisibility.insert(R.divisibility.begin() + axis, every);
      R.constancy.insert(R.constancy.begin() + axis, 1);
      r.nonNeg = in(0).nonNeg;
      break;
    }
    case OpKind::Reshape: {
      // Inserting or removing unit dims keeps the others; any other reshape keeps only what holds
      // for every element.
      const std::vector<int64_t>& from = op.operand(0)->type().shape;
      std::vector<size_t> src, dst;
      for (size_t d = 0; d < from.size(); ++d)
        if (from[d] != 1) src.push_back(d);
      for (size_t d = 0; d < n; ++d)
        if (t.shape[d] != 1) dst.push_back(d);
      bool keep = src.size() == dst.size();
      for (size_t j = 0; keep && j < src.size(); ++j) keep = from[src[j]] == t.shape[dst[j]];
      R.divisibility.assign(n, anyDiv(in(0).info, u));
      for (size_t j = 0; keep && j < src.size(); ++j) copyDim(R, dst[j], in(0).info, src[j]);
      r.nonNeg = in(0).nonNeg;
      break;
    }
    case OpKind::Trans:  // dim d of the result is dim perm[d] of the operand
      for (size_t d = 0; d < n; ++d) copyDim(R, d, in(0).info, static_cast<size_t>(op.intsAttr("perm")[d]));
      r.nonNeg = in(0).nonNeg;
      break;
    default:
      break;  // loads, atomics, reductions, dot, calls, ...: nothing known beyond constancy
  }
  // Only integers and byte-addressed pointers step and divide.
  if (!t.isIntLike() && !(t.isPtr() && elemBytes(t.elem) > 0)) {
    R.contiguity.assign(n, 1);
    R.divisibility.assign(n, 1);
    r.nonNeg = false;
  }
  return r;
}

}  // namespace tilefuse::lower
