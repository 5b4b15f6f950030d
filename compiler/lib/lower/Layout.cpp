// Layout factories and the layout plan of a kernel (see Layout.h).
#include "Layout.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace tilefuse::lower::detail {

std::string Layout::str() const {
  std::string s = "reg[";
  for (int64_t r : reg) s += std::to_string(r) + ",";
  s += "] thr[";
  for (int64_t t : thr) s += std::to_string(t) + ",";
  return s + "]";
}

Layout scalarLayout(int threads) {
  Layout l;
  for (int t = 1; t < threads; t *= 2) l.thr.push_back(0);
  return l;
}

Layout blockedLayout(const std::vector<int64_t>& shape, int threads, int64_t maxRun, int runDim, int64_t minRun) {
  if (shape.empty()) return scalarLayout(threads);
  int rank = static_cast<int>(shape.size());
  int d0 = runDim < 0 ? rank - 1 : runDim;
  // Element steps (flat-index bases) in the order the layout walks them: runDim's
  // first, then the other dims from the last.
  std::vector<int64_t> steps;
  for (int i = -1; i < rank; ++i) {
    int d = i < 0 ? d0 : rank - 1 - i;
    if (i >= 0 && d == d0) continue;
    for (int64_t b = 1; b < shape[d]; b *= 2) steps.push_back(b * dimStride(shape, d));
  }
  int64_t n = int64_t{1} << steps.size();
  int64_t v = std::min<int64_t>({maxRun, std::max<int64_t>(minRun, n / threads), shape[d0]});
  Layout l;
  size_t next = 0;
  for (int64_t b = 1; b < v; b *= 2) l.reg.push_back(steps[next++]);
  for (int t = 1; t < threads; t *= 2) l.thr.push_back(next < steps.size() ? steps[next++] : 0);
  for (; next < steps.size(); ++next) l.reg.push_back(steps[next]);
  return l;
}

int64_t dimStride(const std::vector<int64_t>& shape, size_t d) {
  int64_t s = 1;
  for (size_t k = d + 1; k < shape.size(); ++k) s *= shape[k];
  return s;
}

int runDim(const Layout& l, const std::vector<int64_t>& shape) {
  if (l.reg.empty() || l.reg[0] == 0) return -1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d)
    if (shape[d] > 1 && dimStride(shape, d) == l.reg[0]) return d;
  return -1;
}

int64_t vectorRun(const Layout& l, int64_t stride) {
  int64_t run = 1;
  while (static_cast<size_t>(__builtin_ctzll(run)) < l.reg.size() && l.reg[__builtin_ctzll(run)] == run * stride)
    run *= 2;
  return run;
}

int64_t alignedRun(const Layout& l, int64_t maxRun) {
  int64_t run = std::min(vectorRun(l), maxRun);
  for (; run > 1; run /= 2) {
    bool ok = true;
    for (size_t i = __builtin_ctzll(run); i < l.reg.size(); ++i) ok &= l.reg[i] % run == 0;
    for (int64_t b : l.thr) ok &= b % run == 0;
    if (ok) break;
  }
  return run;
}

bool disjointParts(const Layout& l) {
  int64_t th = 0, rg = 0;
  for (int64_t b : l.thr) th |= b;
  for (int64_t b : l.reg) rg |= b;
  return (th & rg) == 0;
}

ExchangeSwizzle exchangeSwizzle(const std::vector<int64_t>& shape, int64_t elemBytes) {
  int64_t pitch = shape.empty() ? 0 : shape.back() * elemBytes;
  if (pitch < 32 || (pitch & (pitch - 1))) return {};
  return {pitch, std::min<int64_t>(8, pitch / 16)};
}

Layout wgmmaAccLayout(int64_t m, int64_t n, const WgmmaShape& w, int threads) {
  Layout l;
  // One instruction: d[i] holds row 8*(i/2 % 2), column (i % 2) + 8*(i/4) of the
  // thread's quad position.
  l.reg = {1, 8 * n};
  for (int64_t c = 8; c < w.instrN; c *= 2) l.reg.push_back(c);
  for (int64_t r = 1; r < w.repN; r *= 2) l.reg.push_back(r * w.instrN);
  for (int64_t r = 1; r < w.repM; r *= 2) l.reg.push_back(r * 64 * n);
  // Lanes: columns 2 and 4 within the quad, then rows 1, 2, 4; warps of the
  // warpgroup: rows 16, 32; warpgroups split M first, then N.
  l.thr = {2, 4, n, 2 * n, 4 * n, 16 * n, 32 * n};
  for (int64_t g = 1; g < w.wgM; g *= 2) l.thr.push_back(g * (m / w.wgM) * n);
  for (int64_t g = 1; g < w.wgN; g *= 2) l.thr.push_back(g * (n / w.wgN));
  while (static_cast<int64_t>(l.thr.size()) < __builtin_ctz(threads)) l.thr.push_back(0);
  return l;
}

Layout mmaAccLayout(int64_t m, int64_t n, int threads) {
  Layout l;
  // One tile: c[i] holds row 8*(i/2), column i%2 past the lane's position; lanes:
  // columns 2, 4, then rows 1, 2, 4.
  l.reg = {1, 8 * n};
  l.thr = {2, 4, n, 2 * n, 4 * n};
  // Warps over the tiles, along M first, then N; the tiles left go to slots.
  int64_t tm = m / 16, tn = n / 8, im = 1, in = 1;
  for (int w = 32; w < threads; w *= 2) {
    if (im < tm) {
      l.thr.push_back(16 * n * im);
      im *= 2;
    } else if (in < tn) {
      l.thr.push_back(8 * in);
      in *= 2;
    } else {
      l.thr.push_back(0);
    }
  }
  for (; in < tn; in *= 2) l.reg.push_back(8 * in);
  for (; im < tm; im *= 2) l.reg.push_back(16 * n * im);
  return l;
}

bool mmaApplies(const Type& at, const Type& bt, const Type& ct, const std::string& arch, bool tf32) {
  auto fp8 = [](DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; };
  DType a = at.elem, b = bt.elem;
  bool halfs = a == b && (a == DType::BF16 || a == DType::F16);
  bool ints = a == DType::I8 && b == DType::I8;
  // f32 operands that are tf32 values (input_precision "tf32"): mma.sync's tf32 form, m16n8k8.
  bool tf = tf32 && a == DType::F32 && b == DType::F32;
  bool ok = halfs || ints || tf ? arch >= "sm_80" : fp8(a) && fp8(b) ? arch >= "sm_89" : false;
  // f16 products may accumulate in f16 (mma's f16 form); fp8 ones only in f32 here.
  bool f16Acc = ct.elem == DType::F16 && a == DType::F16;
  if (ct.elem != (ints ? DType::I32 : DType::F32) && !f16Acc) return false;
  int64_t kStep = tf ? 8 : halfs ? 16 : 32;
  // Dots with M, N or K below 16 (or K below 32 for 8-bit) run on FMAs.
  return ok && at.shape[0] % 16 == 0 && bt.shape[1] % 16 == 0 && at.shape[1] % kStep == 0;
}

Layout defaultLayout(const Type& t, int threads) {
  if (!t.isTile()) return scalarLayout(threads);
  bool bytes =
      t.isPtr() && (t.elem == DType::I8 || t.elem == DType::U8 || t.elem == DType::F8E4M3 || t.elem == DType::F8E5M2 ||
                    t.elem == DType::E8M0 || t.elem == DType::F8E4B15 || t.elem == DType::I1);
  return blockedLayout(t.shape, threads, bytes ? 16 : 8);
}

WgmmaShape wgmmaTiling(int64_t m, int64_t n, int threads) {
  WgmmaShape s;
  int64_t groups = threads / 128;
  s.wgM = std::min(groups, m / 64);
  s.wgN = groups / s.wgM;
  int64_t perN = n / s.wgN;
  s.instrN = std::min<int64_t>(256, perN);
  s.repN = perN / std::max<int64_t>(1, s.instrN);
  s.repM = m / s.wgM / 64;
  return s;
}

bool wgmmaApplies(const Op& dot, const std::string& arch, int threads, WgmmaShape* w, std::string* why) {
  bool scaled = dot.kind() == OpKind::DotScaled;
  if ((dot.kind() != OpKind::Dot && !scaled) || arch != "sm_90a") return false;
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (threads % 128) return no("num_warps=" + std::to_string(threads / 32) + " is not a multiple of 4 (a warpgroup)");
  const Type& a = dot.operand(0)->type();
  const Type& b = dot.operand(scaled ? 2 : 1)->type();
  auto fp8 = [](DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; };
  DType acc = dot.result()->type().elem;
  // dot_scaled of fp8 runs on the fp8 tensor cores; one of fp4 operands is a bf16 dot
  // by the time layouts are planned (decompose-dot-scaled runs first).
  if (scaled && !(fp8(a.elem) && fp8(b.elem)))
    return no("dot_scaled of fp4 operands: decompose-dot-scaled writes it out as a bf16 dot before the GPU stage");
  // f16 products may also accumulate in f16 (wgmma's f16 form: out_dtype=float16).
  bool f16Acc = !scaled && a.elem == DType::F16 && b.elem == DType::F16 && acc == DType::F16;
  bool halves = (a.elem == b.elem && (a.elem == DType::BF16 || a.elem == DType::F16) && acc == DType::F32) || f16Acc;
  bool bytes = (fp8(a.elem) && fp8(b.elem) && acc == DType::F32) ||
               (a.elem == DType::I8 && b.elem == DType::I8 && acc == DType::I32);
  if (!halves && !bytes)
    return no("wgmma takes bf16/f16 or fp8 operands into f32, f16 into f16, or int8 into int32; this dot has " +
              std::string(dtypeName(a.elem)) + " x " + std::string(dtypeName(b.elem)) + " -> " +
              std::string(dtypeName(acc)));
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (n < 16) return no("N=" + std::to_string(n) + " is below 16");
  // One instruction takes 32 bytes of K.
  if (m % 64) return no("M=" + std::to_string(m) + " is below wgmma's 64 rows (or not a multiple of them)");
  if (k % (halves ? 16 : 32)) return no("K=" + std::to_string(k) + " is not a multiple of wgmma's 32 bytes of K");
  WgmmaShape s = wgmmaTiling(m, n, threads);
  // An N-major B (16-bit types) is staged in swizzled rows of at least 32 bytes.
  if (n % s.wgN || n / s.wgN < (halves ? 16 : 8))
    return no("N=" + std::to_string(n) + " split over " + std::to_string(s.wgN) +
              " warpgroups leaves fewer columns than wgmma's minimum; use fewer warps or a wider BLOCK_N");
  *w = s;
  return true;
}

Layout broadcastSourceLayout(const Layout& l, const std::vector<int64_t>& to, const std::vector<int64_t>& from) {
  auto project = [&](int64_t b) -> int64_t {
    if (!b) return 0;
    std::vector<int64_t> c(to.size());
    int64_t rest = b;
    for (size_t d = to.size(); d-- > 0;) {
      c[d] = rest % to[d];
      rest /= to[d];
    }
    int64_t e = 0;
    for (size_t d = 0; d < to.size(); ++d) e = e * from[d] + (from[d] == 1 ? 0 : c[d]);
    return e;
  };
  Layout s;
  for (int64_t b : l.reg) s.reg.push_back(project(b));
  for (int64_t b : l.thr) s.thr.push_back(project(b));
  return s;
}

bool reducedInWarps(const Layout& l, const std::vector<int64_t>& shape, int axis, Layout* out, bool acrossWarps) {
  std::vector<int64_t> rest;
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int>(d) != axis) rest.push_back(shape[d]);
  bool ok = true;
  // Returns b's flat index in the reduced shape; `along` when b moves along the axis.
  auto project = [&](int64_t b, bool* along) -> int64_t {
    std::vector<int64_t> c(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      c[d] = b % shape[d];
      b /= shape[d];
    }
    int64_t e = 0;
    bool other = false;
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int>(d) != axis) {
        e = e * shape[d] + c[d];
        other |= c[d] != 0;
      }
    *along = c[axis] != 0;
    if (*along && other) ok = false;
    return *along ? 0 : e;
  };
  Layout r;
  bool along = false;
  for (int64_t b : l.reg) {
    int64_t e = project(b, &along);
    if (e) r.reg.push_back(e);
  }
  for (size_t j = 0; j < l.thr.size(); ++j) {
    r.thr.push_back(project(l.thr[j], &along));
    if (along && j >= 5 && !acrossWarps) ok = false;
  }
  if (ok && out) *out = r;
  return ok;
}

bool reducibleInWarps(OpKind k, DType d) {
  bool kind = k == OpKind::ReduceMax || k == OpKind::ReduceMin || (k == OpKind::ReduceSum && d == DType::I32);
  return kind && (d == DType::F32 || d == DType::I32);
}

Layout compactLayout(const Layout& l) {
  Layout c{{}, l.thr};
  for (int64_t b : l.reg)
    if (b) c.reg.push_back(b);
  return c;
}

Layout scaleTableLayout(const Layout& acc, int64_t n, int64_t kb, bool rows) {
  // A basis of the accumulator is a row bit (a multiple of n) or a column bit; the
  // table keeps the kind it follows (as that line times kb) and replicates the other.
  auto project = [&](int64_t b) { return (rows ? b / n : b % n) * kb; };
  Layout l;
  for (int64_t k = 1; k < kb; k *= 2) l.reg.push_back(k);
  for (int64_t b : acc.reg)
    if (project(b)) l.reg.push_back(project(b));
  for (int64_t b : acc.thr) l.thr.push_back(project(b));
  return l;
}

namespace {

class Planner {
 public:
  Planner(const std::string& arch, int threads, const AxisAnalysis* axis)
      : arch_(arch), threads_(threads), axis_(axis) {}

  void block(const Block& b) {
    for (const auto& o : b.ops()) op(*o);
  }
  // An fp8 dot_scaled on wgmma whose scales are one per row (column) for the whole K
  // step (FP8-block's broadcasts, a splat): the scale tables, and what they are
  // computed from, take the layout that gives each thread the scales of its own
  // accumulator slots (scaleTableLayout), so that the promotion reads registers
  // rather than tables staged in shared memory between barriers.
  void scaleTables(const Block& b) {
    for (const auto& o : b.ops()) {
      for (unsigned r = 0; r < o->numRegions(); ++r) scaleTables(o->region(r));
      WgmmaShape w;
      if (o->kind() != OpKind::DotScaled || !axis_ || !wgmmaApplies(*o, arch_, threads_, &w)) continue;
      const Type& t = o->result()->type();
      Layout acc = wgmmaAccLayout(t.shape[0], t.shape[1], w, threads_);
      const Value *sa = o->operand(1), *sb = o->operand(3);
      int64_t kb = sa->type().shape[1];
      const std::vector<int64_t>&ca = axis_->get(sa).constancy, &cb = axis_->get(sb).constancy;
      if (ca[1] >= kb) want(sa, scaleTableLayout(acc, t.shape[1], kb, true), true);
      if (cb[0] >= t.shape[1] && cb[1] >= kb) want(sb, scaleTableLayout(acc, t.shape[1], kb, false), true);
    }
  }
  // Loads whose pointers are contiguous along another dim than the last (a [K, N] tile
  // with K contiguous) take runs along that dim, and so do the pointer computations
  // feeding them (Triton's coalescing): their accesses vectorize, and a wgmma B can be
  // copied K-major. A tile too small to give each thread 4 bytes takes runs of 4 bytes
  // where its pointers allow such accesses (its mask may cut them: cp.async copies a
  // valid prefix), some threads holding copies: the smallest copy cp.async makes (scale
  // tables a pipelined loop reads back).
  void coalesce(const Block& b) {
    for (const auto& o : b.ops()) {
      for (unsigned r = 0; r < o->numRegions(); ++r) coalesce(o->region(r));
      if (o->kind() != OpKind::Load || !axis_ || o->operand(0)->type().rank() < 2) continue;
      const Value* ptr = o->operand(0);
      const Type& pt = ptr->type();
      int64_t eb = std::max(1, bitWidth(pt.elem) / 8), word = 4 / std::min<int64_t>(4, eb);
      if (vectorRun(defaultLayout(pt, threads_)) < word && pt.shape.back() >= word &&
          axis_->vectorWidth(ptr, nullptr, 4) >= word) {
        want(ptr, blockedLayout(pt.shape, threads_, word, -1, word));
        continue;
      }
      const std::vector<int64_t>& c = axis_->get(ptr).contiguity;
      size_t last = c.size() - 1;
      int along = -1;
      for (size_t d = 0; d < last; ++d)
        if (c[d] > std::max<int64_t>(1, along < 0 ? c[last] : c[along])) along = static_cast<int>(d);
      if (along < 0 || c[last] > 1) continue;
      int64_t run = vectorRun(defaultLayout(ptr->type(), threads_));  // as long as the default layout's
      want(ptr, blockedLayout(ptr->type().shape, threads_, run, along, run));
    }
  }
  LayoutPlan plan;

 private:
  // `v` and the pointer arithmetic of its shape it is computed from take layout `l`
  // (through a loop's carried value, its initial value and its update too). `deep`
  // (scale tables): also through unit dims, broadcasts (their operand in the slice of
  // `l`) and loads (their value, pointers and masks), so that a chain from the loads
  // to the dot computes in registers.
  void want(const Value* v, const Layout& l, bool deep = false) {
    if (!wanted_.emplace(v, l).second) return;
    if (deep) deep_.insert(v);
    const Op* def = v->definingOp();
    if (!def) {
      const Op* loop = v->ownerBlock()->parentOp();
      if (loop && loop->kind() == OpKind::For && v->index() > 0) {
        want(loop->operand(v->index() + 2), l, deep);
        want(v->ownerBlock()->terminator()->operand(v->index() - 1), l, deep);
      }
      return;
    }
    // Only into operands nothing else reads: shared index math keeps its own layout.
    auto into = [&](const Value* x, const Layout& xl) {
      if (x->type().isTile() && x->uses().size() == 1) want(x, xl, deep);
    };
    if (def->has(Elementwise) || (deep && def->kind() == OpKind::Load)) {
      for (Value* x : def->operands())
        if (x->type().shape == v->type().shape) into(x, l);
    } else if (deep && (def->kind() == OpKind::ExpandDims || def->kind() == OpKind::Reshape)) {
      into(def->operand(0), l);  // the same row-major order
    } else if (deep && def->kind() == OpKind::Broadcast) {
      into(def->operand(0), compactLayout(broadcastSourceLayout(l, v->type().shape, def->operand(0)->type().shape)));
    }
  }
  Layout blocked(const Value* v) {
    auto it = wanted_.find(v);
    return it != wanted_.end() ? it->second : defaultLayout(v->type(), threads_);
  }
  const Layout& of(const Value* v) {
    auto it = plan.find(v);
    if (it == plan.end()) it = plan.emplace(v, blocked(v)).first;
    return it->second;
  }
  std::vector<Layout> yielded(const Block& b, unsigned first = 0) {
    std::vector<Layout> out;
    const auto& ops = b.terminator()->operands();
    for (size_t i = first; i < ops.size(); ++i) out.push_back(of(ops[i]));
    return out;
  }
  // Runs `body` until the layouts it yields match the ones its carried arguments had.
  std::vector<Layout> fixpoint(std::vector<Layout> cur,
                               const std::function<std::vector<Layout>(const std::vector<Layout>&)>& body) {
    for (int round = 0; round < 4; ++round) {
      std::vector<Layout> next = body(cur);
      if (next == cur) return cur;
      cur = std::move(next);
    }
    throw InternalError("layout plan: loop-carried layouts do not settle");
  }

  void op(const Op& o) {
    switch (accessKind(o)) {
      case OpKind::Dot:
      case OpKind::DotScaled: {
        WgmmaShape w;
        const Type& t = o.result()->type();
        if (wgmmaApplies(o, arch_, threads_, &w))
          plan[o.result()] = wgmmaAccLayout(t.shape[0], t.shape[1], w, threads_);
        else if (o.kind() == OpKind::Dot &&
                 mmaApplies(o.operand(0)->type(), o.operand(1)->type(), t, arch_, o.hasAttr("tf32")))
          plan[o.result()] = mmaAccLayout(t.shape[0], t.shape[1], threads_);
        else
          plan[o.result()] = blocked(o.result());
        return;
      }
      case OpKind::Hint:
        plan[o.result()] = of(o.operand(0));
        return;
      case OpKind::ReduceMax:
      case OpKind::ReduceMin:
      case OpKind::ReduceSum: {
        // Within warps (and then across them) where the operand's layout allows it
        // (Lowering::lowerReduceInWarps).
        Layout r;
        const Type& in = o.operand(0)->type();
        if (in.rank() > 1 && reducibleInWarps(o.kind(), in.elem) &&
            reducedInWarps(of(o.operand(0)), in.shape, static_cast<int>(o.intAttr("axis")), &r, true)) {
          plan[o.result()] = r;
          sliced_.insert(o.result());
        } else {
          plan[o.result()] = blocked(o.result());
        }
        return;
      }
      case OpKind::ExpandDims:
      case OpKind::Reshape:
        // A reduction's result keeps its layout (the same flat order) on its way back to
        // a broadcast, which then takes its registers as they are.
        if (sliced_.count(o.operand(0)) || !(of(o.operand(0)) == blocked(o.operand(0)))) {
          plan[o.result()] = of(o.operand(0));
          if (sliced_.count(o.operand(0))) sliced_.insert(o.result());
        } else {
          plan[o.result()] = blocked(o.result());
        }
        return;
      case OpKind::Load: {  // its pointers' layout, unless a scale table wants its value
        auto it = wanted_.find(o.result());
        plan[o.result()] = deep_.count(o.result()) ? it->second : of(o.operand(0));
        return;
      }
      case OpKind::For: {
        const Block& body = o.region(0);
        std::vector<Layout> init;
        for (unsigned i = 3; i < o.numOperands(); ++i) init.push_back(of(o.operand(i)));
        auto fin = fixpoint(init, [&](const std::vector<Layout>& cur) {
          for (size_t i = 0; i < cur.size(); ++i) plan[body.arg(i + 1)] = cur[i];
          block(body);
          return yielded(body);
        });
        for (size_t i = 0; i < fin.size(); ++i) plan[o.result(i)] = fin[i];
        return;
      }
      case OpKind::While: {
        const Block& before = o.region(0);
        const Block& after = o.region(1);
        std::vector<Layout> init;
        for (Value* v : o.operands()) init.push_back(of(v));
        auto fin = fixpoint(init, [&](const std::vector<Layout>& cur) {
          for (size_t i = 0; i < cur.size(); ++i) plan[before.arg(i)] = cur[i];
          block(before);
          auto passed = yielded(before, 1);
          for (size_t i = 0; i < passed.size(); ++i) plan[after.arg(i)] = passed[i];
          block(after);
          return yielded(after);
        });
        for (size_t i = 0; i < fin.size(); ++i) plan[before.arg(i)] = fin[i];
        block(before);
        auto passed = yielded(before, 1);
        for (size_t i = 0; i < passed.size(); ++i) plan[o.result(i)] = passed[i];
        return;
      }
      case OpKind::If: {
        block(o.region(0));
        block(o.region(1));
        auto a = yielded(o.region(0));
        auto b = yielded(o.region(1));
        // A branch yielding a constant or a splat (made again in any layout) takes the
        // other's: an accumulator reset in one branch keeps the dot's layout.
        auto remade = [&](unsigned r, unsigned i) {
          const Op* d = o.region(r).terminator()->operand(i)->definingOp();
          return d && (d->kind() == OpKind::Constant || d->kind() == OpKind::Splat);
        };
        for (unsigned i = 0; i < o.numResults(); ++i)
          plan[o.result(i)] = a[i] == b[i] ? a[i] : remade(0, i) ? b[i] : remade(1, i) ? a[i] : blocked(o.result(i));
        return;
      }
      default:
        break;
    }
    for (unsigned i = 0; i < o.numResults(); ++i) {
      const Value* r = o.result(i);
      Layout l = blocked(r);
      if (o.has(Elementwise) && r->type().isTile())
        for (Value* v : o.operands())
          if (v->type().isTile() && !(of(v) == blocked(v))) {
            l = of(v);
            if (sliced_.count(v)) sliced_.insert(r);
            break;
          }
      plan[r] = l;
    }
  }

  std::string arch_;
  int threads_;
  const AxisAnalysis* axis_;
  std::unordered_map<const Value*, Layout> wanted_;
  std::unordered_set<const Value*> deep_;
  std::unordered_set<const Value*> sliced_;  // reduced within warps, and what keeps that layout
};

}  // namespace

LayoutPlan planLayouts(const Op& func, const std::string& arch, int threads, const AxisAnalysis* axis) {
  Planner p(arch, threads, axis);
  for (Value* a : func.region(0).args()) p.plan[a] = defaultLayout(a->type(), threads);
  p.scaleTables(func.region(0));
  p.coalesce(func.region(0));
  p.block(func.region(0));
  return std::move(p.plan);
}

}  // namespace tilefuse::lower::detail
