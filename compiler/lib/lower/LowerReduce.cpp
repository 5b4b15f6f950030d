// Reductions: warp shuffles for whole rank-1 tiles, shared memory otherwise.
#include "Lowering.h"

namespace tilefuse::lower::detail {

// a + x, max(a, x) or min(a, x) for a reduce_sum / _max / _min over elements of `d`.
LVal* Lowering::reduceCombine(OpKind k, DType d, LVal* a, LVal* x) {
  bool f = isFloat(d), u = isUnsigned(d);
  if (k == OpKind::ReduceSum) return f ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
  using I = llvm::Intrinsic::ID;
  I id = k == OpKind::ReduceMax ? (f   ? I(llvm::Intrinsic::maxnum)
                                   : u ? I(llvm::Intrinsic::umax)
                                       : I(llvm::Intrinsic::smax))
                                : (f   ? I(llvm::Intrinsic::minnum)
                                   : u ? I(llvm::Intrinsic::umin)
                                       : I(llvm::Intrinsic::smin));
  return b_.CreateIntrinsic(id, {a->getType()}, {a, x});
}

// A whole rank-1 tile of f32 or i32 reduced to a scalar (softmax, layernorm rows):
// each thread combines its slots, warps combine through butterfly shuffles, and
// the per-warp partials meet in shared memory, so every thread ends with the result.
bool Lowering::lowerReduceByShuffles(const Op& op) {
  const Type& in = op.operand(0)->type();
  if (in.rank() != 1 || op.kind() == OpKind::Argmax || (in.elem != DType::F32 && in.elem != DType::I32)) return false;
  bool f = in.elem == DType::F32;
  llvm::Type* ty = elemType(in.elem);
  auto combine = [&](LVal* a, LVal* x) { return reduceCombine(op.kind(), in.elem, a, x); };
  // The identity stands in for the duplicates that threads past N hold.
  LVal* identity;
  if (op.kind() == OpKind::ReduceSum)
    identity = f ? llvm::ConstantFP::get(ty, 0.0) : llvm::ConstantInt::get(ty, 0);
  else if (f)
    identity = llvm::ConstantFP::getInfinity(ty, op.kind() == OpKind::ReduceMax);
  else
    identity = op.kind() == OpKind::ReduceMax ? b_.getInt32(INT32_MIN) : b_.getInt32(INT32_MAX);
  const Regs& r = get(op.operand(0));
  LVal* acc = nullptr;
  LVal* own = owner(r.L);
  for (int s = 0; s < slots(r.L); ++s) {
    if (!slotOwned(r.L, s)) continue;
    LVal* v = own == b_.getTrue() ? r.e[s] : b_.CreateSelect(own, r.e[s], identity);
    acc = acc ? combine(acc, v) : v;
  }
  LVal* mask = b_.getInt32(-1);
  for (int off = 16; off >= 1; off /= 2) {
    LVal* bits = f ? b_.CreateBitCast(acc, b_.getInt32Ty()) : acc;
    LVal* other = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {}, {mask, bits, idx(off), idx(31)});
    acc = combine(acc, f ? b_.CreateBitCast(other, ty) : other);
  }
  int warps = threads_ / 32;
  if (warps > 1) {
    Type partial = Type::tile(in.elem, {warps});
    barrier();
    smemBytes_ = std::max<uint64_t>(smemBytes_, warps * 4);
    LVal* lane = b_.CreateAnd(tid_, idx(31));
    LVal* warp = b_.CreateLShr(tid_, idx(5));
    LVal* addr = smemAddr(0, warp, partial);
    guarded(
        b_.CreateICmpEQ(lane, idx(0)),
        [&]() -> LVal* {
          b_.CreateStore(acc, addr);
          return nullptr;
        },
        nullptr);
    barrier();
    acc = fromSmem(0, idx(0), partial);
    for (int w = 1; w < warps; ++w) acc = combine(acc, fromSmem(0, idx(w), partial));
    barrier();
  }
  vals_[op.result()] = Regs{{acc}, layoutOf(op.result())};
  return true;
}

// A reduction of max / min / i32 sum along an axis (its layout planned by
// reducedInWarps: a quantizer's block amax, a row max): each thread combines the slots
// that differ along the axis, then butterfly shuffles combine the lanes that do; where
// warps split the axis too, their partials meet in shared memory (one exchange, not a
// loop over the axis). Every thread of a group ends with the result.
bool Lowering::lowerReduceInWarps(const Op& op) {
  const Type& in = op.operand(0)->type();
  const Layout& want = layoutOf(op.result());
  const Regs& r = get(op.operand(0));
  Layout planned;
  if (in.rank() < 2 || !reducibleInWarps(op.kind(), in.elem) ||
      !reducedInWarps(r.L, in.shape, static_cast<int>(op.intAttr("axis")), &planned, true) || !(planned == want))
    return false;
  bool f = in.elem == DType::F32;
  llvm::Type* ty = elemType(in.elem);
  auto combine = [&](LVal* a, LVal* x) { return reduceCombine(op.kind(), in.elem, a, x); };
  // Slot bits: kept (the result's slot bits, in order), along the axis (combined), or
  // replicating (a copy: skipped). The result's slot bases are the kept ones in order.
  Layout one{{}, {}};
  std::vector<int> keptBit(r.L.reg.size(), -1);
  int kept = 0, skip = 0;
  for (size_t i = 0; i < r.L.reg.size(); ++i) {
    one.reg = {r.L.reg[i]};
    Layout p;
    reducedInWarps(one, in.shape, static_cast<int>(op.intAttr("axis")), &p);
    if (!r.L.reg[i])
      skip |= 1 << i;
    else if (!p.reg.empty())
      keptBit[i] = kept++;
  }
  std::vector<LVal*> acc(size_t{1} << kept, nullptr);
  for (int s = 0; s < slots(r.L); ++s) {
    if (s & skip) continue;
    size_t o = 0;
    for (size_t i = 0; i < keptBit.size(); ++i)
      if (keptBit[i] >= 0 && (s >> i & 1)) o |= size_t{1} << keptBit[i];
    acc[o] = acc[o] ? combine(acc[o], r.e[s]) : r.e[s];
  }
  LVal* mask = b_.getInt32(-1);
  for (int j = 0; j < 5; ++j) {
    if (!r.L.thr[j] || want.thr[j]) continue;  // replicating, or not along the axis
    for (LVal*& a : acc) {
      LVal* bits = f ? b_.CreateBitCast(a, b_.getInt32Ty()) : a;
      LVal* other =
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {}, {mask, bits, idx(1 << j), idx(31)});
      a = combine(a, f ? b_.CreateBitCast(other, ty) : other);
    }
  }
  acrossWarps(op, r.L, want, acc);
  vals_[op.result()] = Regs{std::move(acc), want};
  return true;
}

// The warps that split a reduction's axis (warp bits of `in` along it, replicating in
// `want`) combine their partials `acc` (slots of `want`) through shared memory: the
// partial of warp combination w for output element e at scratch[w * numel + e], equal
// values from the copies, then each thread folds the partials of its elements.
void Lowering::acrossWarps(const Op& op, const Layout& in, const Layout& want, std::vector<LVal*>& acc) {
  const Type& out = op.result()->type();
  std::vector<int> split;
  for (size_t j = 5; j < in.thr.size(); ++j)
    if (in.thr[j] && !want.thr[j]) split.push_back(static_cast<int>(j));
  if (split.empty()) return;
  int64_t n = numel(out), parts = int64_t{1} << split.size();
  Type scratch = Type::tile(out.elem, {parts * n});
  LVal* w = idx(0);
  for (size_t i = 0; i < split.size(); ++i)
    w = b_.CreateOr(w, b_.CreateShl(b_.CreateAnd(b_.CreateLShr(tid_, idx(split[i])), idx(1)), idx(i)));
  barrier();
  smemBytes_ = std::max<uint64_t>(smemBytes_, scratchBase() + parts * n * storeBytes(scratch));
  LVal* base = b_.CreateMul(w, idx(n));
  for (size_t o = 0; o < acc.size(); ++o) {
    LVal* e = out.isTile() ? flatIndex(want, static_cast<int>(o)) : idx(0);
    b_.CreateStore(acc[o], smemAddr(0, b_.CreateAdd(base, e), scratch));
  }
  barrier();
  for (size_t o = 0; o < acc.size(); ++o) {
    LVal* e = out.isTile() ? flatIndex(want, static_cast<int>(o)) : idx(0);
    LVal* a = fromSmem(0, e, scratch);
    for (int64_t p = 1; p < parts; ++p)
      a = reduceCombine(op.kind(), out.elem, a, fromSmem(0, b_.CreateAdd(idx(p * n), e), scratch));
    acc[o] = a;
  }
  barrier();
}

void Lowering::lowerReduce(const Op& op) {
  if (lowerReduceByShuffles(op) || lowerReduceInWarps(op)) return;
  const Type& in = op.operand(0)->type();
  const Type& outT = op.result()->type();
  int axis = static_cast<int>(op.intAttr("axis"));
  int64_t len = in.shape[axis];
  barrier();
  toSmem(get(op.operand(0)), in, 0);
  barrier();
  bool f = isFloat(in.elem), u = isUnsigned(in.elem);
  const Layout& L = layoutOf(op.result());
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    // Coordinates of this output element, with the reduced axis re-inserted at 0.
    LVal* e = outT.isTile() ? flatIndex(L, s) : idx(0);
    std::vector<LVal*> c;
    for (size_t d = 0; d < outT.shape.size(); ++d) c.push_back(coord(e, outT.shape, d));
    c.insert(c.begin() + axis, idx(0));
    auto at = [&](LVal* k) {
      c[axis] = k;
      return fromSmem(0, flatten(c, in.shape), in);
    };
    // A loop over the reduced axis (not unrolled: axes reach thousands of elements).
    LVal* acc = at(idx(0));
    LVal* best = idx(0);
    if (len > 1) {
      auto fin = countedLoop(1, len, {acc, best}, [&](LVal* k, const std::vector<LVal*>& cur) -> std::vector<LVal*> {
        LVal* x = at(k);
        if (op.kind() != OpKind::Argmax) return {reduceCombine(op.kind(), in.elem, cur[0], x), cur[1]};
        LVal* better = f ? b_.CreateFCmpOGT(x, cur[0]) : u ? b_.CreateICmpUGT(x, cur[0]) : b_.CreateICmpSGT(x, cur[0]);
        return {b_.CreateSelect(better, x, cur[0]), b_.CreateSelect(better, k, cur[1])};
      });
      acc = fin[0];
      best = fin[1];
    }
    out.e.push_back(op.kind() == OpKind::Argmax ? best : acc);
  }
  barrier();
  vals_[op.result()] = std::move(out);
}

}  // namespace tilefuse::lower::detail

namespace tilefuse::lower::detail {

// The combine region of a reduce / scan on scalars: acc (the accumulated values) and x.
std::vector<LVal*> Lowering::combineRegion(const Op& op, const std::vector<LVal*>& acc, const std::vector<LVal*>& x) {
  const Block& body = op.region(0);
  unsigned n = op.numOperands();
  for (unsigned i = 0; i < n; ++i) {
    vals_[body.arg(i)] = Regs{{acc[i]}, layoutOf(body.arg(i))};
    vals_[body.arg(n + i)] = Regs{{x[i]}, layoutOf(body.arg(n + i))};
  }
  lowerBlock(body);
  std::vector<LVal*> out;
  for (const Value* v : body.terminator()->operands()) out.push_back(get(v).e[0]);
  return out;
}

// reduce / scan with a combine region, through shared memory. A line (the elements
// along the axis at one position of the other dims) is split into `chunks` runs of
// `run` elements where threads would idle otherwise. Reduce: each run folds left to
// right into a partial, then each output element folds its line's partials. Scan, in
// place and in scan order: (1) each run is scanned sequentially, (2) the runs' last
// elements, sequentially, become the prefixes up to each run's end, (3) every other
// element of run c > 0 becomes combine(prefix of run c - 1, itself). With one run this
// is the interpreter's order; with more, equal for an associative combine and within
// rounding for floats.
void Lowering::lowerCombine(const Op& op) {
  unsigned n = op.numOperands();
  const Type& in = op.operand(0)->type();
  int axis = static_cast<int>(op.intAttr("axis"));
  bool scan = op.kind() == OpKind::Scan, reverse = scan && op.boolAttr("reverse");
  int64_t len = in.shape[axis], inner = dimStride(in.shape, axis), lines = numel(in) / len;
  // The cost in sequential steps: a reduce folds a run, then the partials; a scan makes
  // two passes over a run and one over the runs.
  int64_t chunks = 1, cost = len;
  for (int64_t c = 2; c <= len && lines * c <= threads_; c *= 2) {
    int64_t k = (scan ? 2 : 1) * (len / c) + c;
    if (k < cost) chunks = c, cost = k;
  }
  int64_t run = len / chunks;
  // Shared memory: the operands, then (reduce) the partials of each run.
  std::vector<int64_t> base, partial;
  int64_t bytes = 0;
  barrier();
  for (unsigned i = 0; i < n; ++i) {
    const Type& t = op.operand(i)->type();
    base.push_back(bytes);
    toSmem(get(op.operand(i)), t, bytes);
    bytes += (numel(t) * storeBytes(t) + 15) / 16 * 16;
  }
  for (unsigned i = 0; i < n && !scan && chunks > 1; ++i) {
    partial.push_back(bytes);
    bytes += (lines * chunks * storeBytes(op.operand(i)->type()) + 15) / 16 * 16;
  }
  smemBytes_ = std::max<uint64_t>(smemBytes_, scratchBase() + bytes);
  barrier();
  auto load = [&](const std::vector<int64_t>& at, LVal* e) {
    std::vector<LVal*> v;
    for (unsigned i = 0; i < n; ++i) v.push_back(fromSmem(at[i], e, op.operand(i)->type()));
    return v;
  };
  auto store = [&](const std::vector<int64_t>& at, LVal* e, const std::vector<LVal*>& v) {
    for (unsigned i = 0; i < n; ++i) {
      const Type& t = op.operand(i)->type();
      b_.CreateStore(isBool(t) ? b_.CreateZExt(v[i], b_.getInt8Ty()) : v[i], smemAddr(at[i], e, t));
    }
  };
  // Flat index of position p of line `line` (lines in row-major order of the other dims;
  // positions in scan order).
  auto at = [&](LVal* line, LVal* p) {
    LVal* k = reverse ? b_.CreateSub(idx(len - 1), p) : p;
    LVal* o = b_.CreateUDiv(line, idx(inner));
    LVal* e = b_.CreateURem(line, idx(inner));
    return b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(o, idx(len)), k), idx(inner)), e);
  };
  // Combines `count` positions from `first` in steps of `stride`; a scan stores each result.
  auto fold = [&](LVal* line, LVal* first, int64_t count, int64_t stride) {
    std::vector<LVal*> acc = load(base, at(line, first));
    if (count < 2) return acc;
    return countedLoop(1, count, acc, [&](LVal* k, const std::vector<LVal*>& cur) {
      LVal* e = at(line, b_.CreateAdd(first, b_.CreateMul(k, idx(stride))));
      std::vector<LVal*> r = combineRegion(op, cur, load(base, e));
      if (scan) store(base, e, r);
      return r;
    });
  };
  // Runs body(w) for w in [0, workers), thread t taking t, t + threads, ...
  auto forWorkers = [&](int64_t workers, const std::function<void(LVal*)>& body) {
    countedLoop(0, (workers + threads_ - 1) / threads_, {}, [&](LVal* r, const std::vector<LVal*>&) {
      LVal* w = b_.CreateAdd(b_.CreateMul(r, idx(threads_)), tid_);
      auto call = [&]() -> LVal* {
        body(w);
        return nullptr;
      };
      if (workers % threads_ == 0)
        call();
      else
        guarded(b_.CreateICmpULT(w, idx(workers)), call, nullptr);
      return std::vector<LVal*>{};
    });
    barrier();
  };
  auto runFirst = [&](LVal* w) { return b_.CreateMul(b_.CreateURem(w, idx(chunks)), idx(run)); };
  if (!scan) {
    if (chunks > 1)
      forWorkers(lines * chunks,
                 [&](LVal* w) { store(partial, w, fold(b_.CreateUDiv(w, idx(chunks)), runFirst(w), run, 1)); });
    const Layout& L = layoutOf(op.result(0));
    std::vector<Regs> out(n, Regs{{}, L});
    for (int s = 0; s < slots(L); ++s) {
      LVal* line = op.result(0)->type().isTile() ? flatIndex(L, s) : idx(0);
      std::vector<LVal*> acc =
          chunks == 1 ? fold(line, idx(0), len, 1) : load(partial, b_.CreateMul(line, idx(chunks)));
      if (chunks > 1)
        acc = countedLoop(1, chunks, acc, [&](LVal* c, const std::vector<LVal*>& cur) {
          return combineRegion(op, cur, load(partial, b_.CreateAdd(b_.CreateMul(line, idx(chunks)), c)));
        });
      for (unsigned i = 0; i < n; ++i) out[i].e.push_back(acc[i]);
    }
    barrier();
    for (unsigned i = 0; i < n; ++i) {
      const Layout& Li = layoutOf(op.result(i));
      vals_[op.result(i)] = Li == L ? std::move(out[i]) : convert(out[i], op.result(i)->type(), Li);
    }
    return;
  }
  if (run > 1) forWorkers(lines * chunks, [&](LVal* w) { fold(b_.CreateUDiv(w, idx(chunks)), runFirst(w), run, 1); });
  if (chunks > 1) {
    forWorkers(lines, [&](LVal* line) { fold(line, idx(run - 1), chunks, run); });
    forWorkers(lines * chunks, [&](LVal* w) {
      LVal* line = b_.CreateUDiv(w, idx(chunks));
      LVal* first = runFirst(w);
      guarded(
          b_.CreateICmpNE(first, idx(0)),
          [&]() -> LVal* {
            std::vector<LVal*> prefix = load(base, at(line, b_.CreateSub(first, idx(1))));
            countedLoop(0, run - 1, {}, [&](LVal* k, const std::vector<LVal*>&) {
              LVal* e = at(line, b_.CreateAdd(first, k));
              store(base, e, combineRegion(op, prefix, load(base, e)));
              return std::vector<LVal*>{};
            });
            return nullptr;
          },
          nullptr);
    });
  }
  for (unsigned i = 0; i < n; ++i) {
    const Type& t = op.result(i)->type();
    const Layout& L = layoutOf(op.result(i));
    Regs out{{}, L};
    for (int s = 0; s < slots(L); ++s) out.e.push_back(fromSmem(base[i], flatIndex(L, s), t));
    vals_[op.result(i)] = std::move(out);
  }
  barrier();
}

// gather: the source in shared memory, each result slot reads the element its index names.
void Lowering::lowerGather(const Op& op) {
  const Type& src = op.operand(0)->type();
  const Type& t = op.result()->type();
  int axis = static_cast<int>(op.intAttr("axis"));
  const Layout& L = layoutOf(op.result());
  Regs index = in(op.operand(1), L);
  barrier();
  toSmem(get(op.operand(0)), src, 0);
  barrier();
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    LVal* e = flatIndex(L, s);
    std::vector<LVal*> c;
    for (size_t d = 0; d < t.shape.size(); ++d) c.push_back(coord(e, t.shape, d));
    c[axis] = b_.CreateSExtOrTrunc(index.e[s], b_.getInt32Ty());
    out.e.push_back(fromSmem(0, flatten(c, src.shape), src));
  }
  barrier();
  vals_[op.result()] = std::move(out);
}

// histogram: bins in shared memory, one shared atomic add per counted element.
void Lowering::lowerHistogram(const Op& op) {
  const Type& binsT = op.result()->type();
  int64_t bins = binsT.shape[0];
  const Regs& x = get(op.operand(0));
  Regs mask = op.numOperands() == 2 ? in(op.operand(1), x.L) : Regs{};
  barrier();
  smemBytes_ = std::max<uint64_t>(smemBytes_, scratchBase() + bins * 4);
  int64_t rounds = (bins + threads_ - 1) / threads_;
  countedLoop(0, rounds, {}, [&](LVal* r, const std::vector<LVal*>&) {
    LVal* bin = b_.CreateAdd(b_.CreateMul(r, idx(threads_)), tid_);
    guarded(
        b_.CreateICmpULT(bin, idx(bins)),
        [&]() -> LVal* {
          b_.CreateStore(b_.getInt32(0), smemAddr(0, bin, binsT));
          return nullptr;
        },
        nullptr);
    return std::vector<LVal*>{};
  });
  barrier();
  LVal* own = owner(x.L);
  for (int s = 0; s < slots(x.L); ++s) {
    if (!slotOwned(x.L, s)) continue;
    // Negative values are huge unsigned: out of range like values past the last bin.
    LVal* v = b_.CreateSExt(x.e[s], b_.getInt64Ty());
    LVal* counted = b_.CreateAnd(own, b_.CreateICmpULT(v, b_.getInt64(bins)));
    if (!mask.e.empty()) counted = b_.CreateAnd(counted, mask.e[s]);
    guarded(
        counted,
        [&]() -> LVal* {
          LVal* addr = smemAddr(0, b_.CreateTrunc(v, b_.getInt32Ty()), binsT);
          b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, addr, b_.getInt32(1), llvm::MaybeAlign(4),
                             llvm::AtomicOrdering::Monotonic);
          return nullptr;
        },
        nullptr);
  }
  barrier();
  const Layout& L = layoutOf(op.result());
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) out.e.push_back(fromSmem(0, flatIndex(L, s), binsT));
  barrier();
  vals_[op.result()] = std::move(out);
}

}  // namespace tilefuse::lower::detail
