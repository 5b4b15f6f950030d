// Software pipelining of K loops on sm_90a: a for loop whose wgmma dots read loads of
// the loop (no other use of the loaded tiles; one A may feed several dots, as the gate
// and up projections of an MoE FC1 share their input) copies the operand tiles of
// iteration j + S - 1 into a ring of S shared-memory stages while the tensor cores
// work on iteration j, so global latency hides behind the dots. Pointer loads copy
// with cp.async (every thread its share); descriptor loads with tensor maps copy
// with TMA (thread 0 issues whole boxes that complete on the stage's mbarrier).
//
//   prologue:  copy iterations 0 .. S-2 into stages 0 .. S-2 (one cp.async group each)
//   iteration j:  wait until at most S-2 copy groups are pending and the stage's
//                 mbarrier completes (stage j is in); barrier; each dot's wgmma on
//                 stage j (left in flight); wait for the wgmma groups of j-1 and
//                 barrier, so that no warpgroup still reads stage j-1;
//                 copy iteration j+S-1 into stage (j+S-1) % S = stage of j-1
//   after the loop: drain the copies (every TMA copy issued was waited for).
//
// The pointers and masks of a later iteration are computed by lowering their
// producing ops again with the loop-carried values advanced (advance()): a pointer
// tile that the loop bumps by ptr_add each iteration is bumped S-1 more times. Copies
// past the last iteration are issued with source size 0 (zero fill, no memory access).
// Operands land in the SharedTile of wgmmaOperandTile (the layout the wgmma
// descriptors read; a TMA operand's map must have the same swizzle); every copy moves
// a run of 4, 8 or 16 contiguous, aligned bytes (AxisAnalysis::vectorWidth).
#include "Lowering.h"

namespace tilefuse::lower::detail {
namespace {

// A zero, possibly splat, broadcast, converted or cast (zero in every format and rounding mode:
// an fp8 load's other=0.0 is a cast of an f32 constant).
bool isZeroConstant(const Value* v) {
  const Op* def = convertSource(v)->definingOp();
  if (def && (def->kind() == OpKind::Splat || def->kind() == OpKind::Broadcast || def->kind() == OpKind::Cast))
    return isZeroConstant(def->operand(0));
  if (!def || def->kind() != OpKind::Constant) return false;
  const Attr& a = *def->attr("value");
  // -0.0 too: masked-out products only add zeros to the dot.
  return std::holds_alternative<double>(a) ? std::get<double>(a) == 0.0 : std::get<int64_t>(a) == 0;
}

// Whether `mask`, within every aligned run of `w` elements along dim d, is true on a
// prefix of the run and false after: an `and` of masks constant on such runs and of
// comparisons x < m (m > x) with x contiguous and m constant on them, possibly
// broadcast or expanded. Such a run copies as one cp.async of the prefix's bytes.
bool prefixMask(const AxisAnalysis& axis, const Value* mask, size_t d, int64_t w) {
  if (axis.get(mask).constancy[d] >= w) return true;
  const Op* def = convertSource(mask)->definingOp();
  if (!def) return false;
  switch (def->kind()) {
    case OpKind::And:
      return prefixMask(axis, def->operand(0), d, w) && prefixMask(axis, def->operand(1), d, w);
    case OpKind::Broadcast:
      return def->operand(0)->type().shape[d] == 1 || prefixMask(axis, def->operand(0), d, w);
    case OpKind::ExpandDims: {
      auto a = static_cast<size_t>(def->intAttr("axis"));
      return d == a || prefixMask(axis, def->operand(0), d > a ? d - 1 : d, w);
    }
    case OpKind::Cmp: {
      const std::string& p = def->strAttr("predicate");
      bool lhs = p == "lt" || p == "ult", rhs = p == "gt" || p == "ugt";
      if (!lhs && !rhs) return false;
      const AxisInfo& x = axis.get(def->operand(lhs ? 0 : 1));
      const AxisInfo& m = axis.get(def->operand(lhs ? 1 : 0));
      return x.contiguity[d] >= w && m.constancy[d] >= w;
    }
    default:
      return false;
  }
}

// Ops that may be recomputed for a later iteration: pure index math.
bool indexOp(const Op& op) {
  switch (op.kind()) {
    case OpKind::Constant:
    case OpKind::Splat:
    case OpKind::Arange:
    case OpKind::Hint:
    case OpKind::ConvertLayout:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Broadcast:
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
      return true;
    default:
      return op.has(Elementwise) && op.numResults() == 1;
  }
}

// The values a copy of load `ld` depends on: pointers and mask, or the offsets.
std::vector<const Value*> copyInputs(const Op& ld) {
  if (ld.kind() == OpKind::DescLoad) return {ld.operands().begin() + 1, ld.operands().end()};
  return {ld.operands().begin(), ld.operands().begin() + std::min(2u, ld.numOperands())};
}

}  // namespace

// Whether `v` (used in `body` of a for loop) can be computed for a later iteration:
// loop invariants, the induction variable, index math of those, and loop-carried
// values whose yielded next value is such a computation.
bool Lowering::advanceable(const Value* v, const Block& body, std::set<const Value*>& seen) {
  if (!seen.insert(v).second) return true;
  if (v->ownerBlock() != &body) return true;  // defined outside the loop
  const Op* def = v->definingOp();
  if (!def) {
    if (v == body.arg(0)) return true;
    return advanceable(body.terminator()->operand(v->index() - 1), body, seen);
  }
  if (!indexOp(*def)) return false;
  for (Value* o : def->operands())
    if (!advanceable(o, body, seen)) return false;
  return true;
}

// How `l.load` copies into a stage (TMA, or cp.async runs of `l.width` elements of
// `eb` bytes), or why it cannot ("'s ..." of the operand's name).
std::string Lowering::planCopy(StagedLoad& l, const Block& body, int64_t eb) {
  const Op* ld = l.load;
  if (ld->kind() == OpKind::DescLoad) {
    l.tma = tensorMapOf(ld->operand(0));
    if (l.tma < 0) return "'s descriptor is not on TMA (see its hint)";
    // The boxes must land in the layout the wgmma descriptors read.
    if (tensorMaps_[l.tma].swizzleBytes != l.tile.swizzle) return "'s descriptor is also read with another swizzle";
  } else if (ld->kind() != OpKind::Load) {
    return " is not a load";
  } else if (ld->numOperands() > 2 && !isZeroConstant(ld->operand(2))) {
    return "'s load has an `other` value that is not 0";
  }
  std::set<const Value*> visited;
  for (const Value* x : copyInputs(*ld))
    if (!advanceable(x, body, visited))
      return "'s pointers or mask depend on values the loop computes other than by index math";
  if (l.tma >= 0) return "";
  const Value* mask = ld->numOperands() > 1 ? ld->operand(1) : nullptr;
  l.width = accessWidth(ld->operand(0), mask);
  // A ragged end inside the runs (a group's last rows along the contiguous dim): whole
  // runs still copy, each of its valid prefix, the rest zero-filled.
  if (int64_t whole = accessWidth(ld->operand(0), nullptr); mask && whole > l.width) {
    int d = runDim(layoutOf(ld->operand(0)), ld->result()->type().shape);
    if (d >= 0 && prefixMask(*axis_, mask, static_cast<size_t>(d), whole)) {
      l.width = whole;
      l.prefix = true;
    }
  }
  if (l.width * eb < 4)  // cp.async moves 4, 8 or 16 bytes
    return "'s loads are not provably contiguous and aligned in runs of 4 bytes (" +
           accessReason(ld->operand(0), mask) + ")";
  return "";
}

// Whether `loop` can be pipelined (filling `p`); `why` says why not for a loop with a
// wgmma dot (empty for loops without one).
bool Lowering::planPipeline(const Op& loop, Pipeline* p, std::string* why) {
  const Block& body = loop.region(0);
  auto no = [&](std::string reason) {
    *why = "K loop not pipelined: " + std::move(reason);
    return false;
  };
  for (const auto& o : body.ops()) {
    if (!onWgmma(*o)) continue;
    if (o->kind() != OpKind::Dot && !scaledOnFp8(*o))
      return no("dot_scaled loops of fp4 operands are not pipelined (operands dequantized in registers)");
    p->dots.push_back(o.get());
  }
  if (p->dots.empty()) return false;
  if (opts_.numStages < 2) return no("num_stages=" + std::to_string(opts_.numStages));
  std::set<const Op*> dots(p->dots.begin(), p->dots.end());
  int64_t stageBytes = 0;
  for (const Op* dot : p->dots) {
    WgmmaShape w;
    onWgmma(*dot, &w);
    WgmmaB bs = wgmmaB(*dot);
    // cp.async copies bytes as they lie: a [K, N] B staged K-major must be copied in
    // runs along K (K contiguous in memory, the layout coalesced along it).
    if (bs.transposeOnStage && runDim(layoutOf(bs.value), bs.value->type().shape) != 0)
      return no(
          "an 8-bit B loaded as [K, N] with N contiguous is transposed through registers; "
          "load it as [N, K] and pass tl.trans(b)");
    int slot[2];
    for (unsigned i = 0; i < 2; ++i) {
      std::string name = i ? "B" : "A";
      const Value* v = i ? bs.value : dot->operand(0);
      // A may feed several of the loop's dots as their A; B feeds one.
      bool onlyDots = i ? v->uses().size() == 1
                        : !v->uses().empty() && std::all_of(v->uses().begin(), v->uses().end(), [&](const Use& u) {
                            return dots.count(u.user) && u.index == 0;
                          });
      const Op* ld = v->definingOp();
      // dot_scaled's operands are fp8 bitcasts of loaded bytes: the copy moves the bytes.
      const Op* cast = ld && ld->kind() == OpKind::Bitcast ? ld : nullptr;
      if (cast) {
        v = cast->operand(0);
        ld = v->definingOp();
        onlyDots = onlyDots && v->uses().size() == 1;
      }
      if (!ld || v->ownerBlock() != &body || !onlyDots)
        return no(name + " is not a load in the loop used only by the loop's dots");
      SharedTile tile = wgmmaOperandTile(*dot, i, w);
      auto seen = std::find_if(p->loads.begin(), p->loads.end(), [&](const StagedLoad& l) { return l.load == ld; });
      if (seen != p->loads.end()) {
        if (!(seen->tile == tile)) return no(name + " feeds dots that read it in different shared-memory layouts");
        slot[i] = static_cast<int>(seen - p->loads.begin());
        continue;
      }
      StagedLoad l{
          .load = ld, .tile = tile, .offset = stageBytes, .transposed = i == 1 && bs.transposeOnStage, .bitcast = cast};
      if (std::string bad = planCopy(l, body, bs.elemBytes); !bad.empty()) return no(name + bad);
      stageBytes += swizzleAtoms(v->type().numel() * bs.elemBytes);
      slot[i] = static_cast<int>(p->loads.size());
      p->loads.push_back(l);
    }
    p->operand[dot] = {slot[0], slot[1]};
  }
  p->args = pipelineArgs(*p, body);
  p->stages = opts_.numStages;
  p->stageBytes = stageBytes;
  return true;
}

// The registers `v` would have in the iteration whose loop-carried values and
// induction variable are `env`: v's producing ops in the body, lowered again.
Regs Lowering::evalUnder(const Value* v, const Block& body, const Env& env) {
  if (auto it = env.find(v); it != env.end()) return it->second;
  if (v->ownerBlock() != &body) return get(v);
  std::vector<const Op*> slice;
  std::set<const Op*> inSlice;
  std::function<void(const Value*)> collect = [&](const Value* x) {
    if (env.count(x) || x->ownerBlock() != &body) return;
    const Op* def = x->definingOp();
    if (!def || !inSlice.insert(def).second) return;
    for (Value* o : def->operands()) collect(o);
    slice.push_back(def);  // operands first: a valid order
  };
  collect(v);
  std::unordered_map<const Value*, std::optional<Regs>> saved;
  auto override = [&](const Value* x, Regs r) {
    auto it = vals_.find(x);
    saved.emplace(x, it == vals_.end() ? std::nullopt : std::optional<Regs>(it->second));
    vals_[x] = std::move(r);
  };
  for (const auto& [x, r] : env) override(x, r);
  for (const Op* o : slice)
    for (Value* r : o->results()) saved.emplace(r, vals_.count(r) ? std::optional<Regs>(vals_[r]) : std::nullopt);
  for (const Op* o : slice) lowerOp(*o);
  Regs out = get(v);
  for (auto& [x, r] : saved) {
    if (r)
      vals_[x] = std::move(*r);
    else
      vals_.erase(x);
  }
  return out;
}

// `env` moved `steps` iterations ahead: each loop-carried value becomes what the body
// yields for it, the induction variable grows by the step.
Env Lowering::advance(Env env, const Block& body, LVal* step, int steps) {
  for (int s = 0; s < steps; ++s) {
    Env next;
    for (const auto& [x, r] : env) {
      if (x == body.arg(0)) {
        next[x] = Regs{{b_.CreateAdd(r.e[0], step)}, r.L};
        continue;
      }
      Regs y = evalUnder(body.terminator()->operand(x->index() - 1), body, env);
      next[x] = y.L == r.L ? y : convert(y, x->type(), r.L);
    }
    env = std::move(next);
  }
  return env;
}

// The loop values the copies of `p` depend on: the induction variable and the carried
// values reachable from the loads' pointers and masks, through the yields.
std::vector<const Value*> Lowering::pipelineArgs(const Pipeline& p, const Block& body) {
  std::set<const Value*> seen;
  std::function<void(const Value*)> visit = [&](const Value* v) {
    if (v->ownerBlock() != &body || !seen.insert(v).second) return;
    if (const Op* def = v->definingOp()) {
      for (Value* o : def->operands()) visit(o);
    } else if (v != body.arg(0)) {
      visit(body.terminator()->operand(v->index() - 1));
    }
  };
  for (const StagedLoad& l : p.loads)
    for (const Value* x : copyInputs(*l.load)) visit(x);
  std::vector<const Value*> args = {body.arg(0)};
  for (unsigned i = 1; i < body.numArgs(); ++i)
    if (seen.count(body.arg(i))) args.push_back(body.arg(i));
  return args;
}

// Copies every operand tile of the iteration described by `env` into `stage`;
// `valid` false copies nothing (cp.async: zero fill; TMA: nothing issued, nothing
// waited for). One cp.async commit group.
void Lowering::copyStage(const Pipeline& p, const Block& body, const Env& env, LVal* stage, LVal* valid) {
  LVal* smem32 = b_.CreatePtrToInt(smem(), b_.getInt32Ty());
  LVal* ring = b_.CreateAdd(smem32, b_.CreateAdd(idx(p.base), b_.CreateMul(stage, idx(p.stageBytes))));
  if (p.anyTma()) {
    LVal* issue = b_.CreateAnd(valid, b_.CreateICmpEQ(tid_, idx(0)));
    LVal* bar = barrierAddr(b_.CreateAdd(stage, idx(p.barrier)));
    int64_t bytes = 0;
    for (const StagedLoad& l : p.loads)
      if (l.tma >= 0) bytes += l.load->result()->type().numel() * l.tile.eb;
    armBarrier(bar, bytes, issue);
    for (const StagedLoad& l : p.loads) {
      if (l.tma < 0) continue;
      std::vector<LVal*> coords;
      for (const Value* x : copyInputs(*l.load))
        coords.push_back(b_.CreateSExtOrTrunc(evalUnder(x, body, env).e[0], b_.getInt32Ty()));
      tmaCopy(l.tma, l.load->result()->type(), b_.CreateAdd(ring, idx(l.offset)), coords, bar, issue);
    }
  }
  if (p.allTma()) return;
  for (const StagedLoad& l : p.loads) {
    if (l.tma >= 0) continue;
    const Op* ld = l.load;
    const Type& t = ld->result()->type();
    Regs ptrs = evalUnder(ld->operand(0), body, env);
    const Layout& L = ptrs.L;
    Regs mask;
    if (ld->numOperands() > 1) {
      mask = evalUnder(ld->operand(1), body, env);
      if (!(mask.L == L)) mask = convert(mask, ld->operand(1)->type(), L);
    }
    int64_t bytes = l.width * l.tile.eb;
    std::string text = std::string("cp.async.") + (bytes == 16 ? "cg" : "ca") + ".shared.global [$0], [$1], " +
                       std::to_string(bytes) + ", $2;";
    auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt64Ty(), b_.getInt32Ty()}, false);
    auto* copy = llvm::InlineAsm::get(ty, text, "r,l,r,~{memory}", true);
    LVal* base = b_.CreateAdd(ring, idx(l.offset));
    for (int s = 0; s < slots(L); s += static_cast<int>(l.width)) {
      if (!slotOwned(L, s)) continue;
      LVal* e = flatIndex(L, s);
      LVal *row = coord(e, t.shape, 0), *col = coord(e, t.shape, 1);
      LVal* dst =
          b_.CreateAdd(base, l.transposed ? swizzledOffset(col, row, l.tile) : swizzledOffset(row, col, l.tile));
      LVal* size;
      if (l.prefix) {  // the bytes of the run's valid prefix
        LVal* n = idx(0);
        for (int i = 0; i < l.width; ++i) n = b_.CreateAdd(n, b_.CreateZExt(mask.e[s + i], b_.getInt32Ty()));
        size = b_.CreateSelect(valid, b_.CreateMul(n, idx(l.tile.eb)), idx(0));
      } else {
        LVal* ok = mask.e.empty() ? valid : b_.CreateAnd(valid, mask.e[s]);
        size = b_.CreateSelect(ok, idx(bytes), idx(0));
      }
      b_.CreateCall(copy, {dst, b_.CreatePtrToInt(ptrs.e[s], b_.getInt64Ty()), size});
    }
  }
  ptx("cp.async.commit_group;");
}

// Before the loop (insertion point in its preheader): stages 0 .. S-2.
void Lowering::pipelinePrologue(Pipeline& p, const Op& loop, LVal* lb, LVal* ub, LVal* step,
                                const std::vector<Regs>& inits) {
  const Block& body = loop.region(0);
  p.ub = ub;
  p.step = step;
  IRBuilder<> eb(entry_);
  p.counter = eb.CreateAlloca(b_.getInt32Ty());
  b_.CreateStore(idx(0), p.counter);
  if (p.anyTma()) {
    // Phases continue across entries of the loop (an outer loop): set once.
    p.phases = eb.CreateAlloca(b_.getInt32Ty());
    eb.CreateStore(eb.getInt32(0), p.phases);
  }
  // Iteration 0 sees the loop's initial values.
  Env env;
  for (const Value* a : p.args) env[a] = a == body.arg(0) ? Regs{{lb}, layoutOf(a)} : inits[a->index() - 1];
  for (int d = 0; d + 1 < p.stages; ++d) {
    if (d) env = advance(std::move(env), body, step, 1);
    copyStage(p, body, env, idx(d), b_.CreateICmpSLT(env[body.arg(0)].e[0], ub));
  }
}

// The first dot of an iteration waits until its stage is in; each dot issues its
// wgmma group on the stage; the last waits for the previous iteration's groups (so no
// warpgroup still reads that stage) and copies iteration j + S - 1 into it.
void Lowering::lowerPipelinedDot(const Op& op, const WgmmaShape& w, const Pipeline& p) {
  const Block& body = *op.parentBlock();
  Regs acc = in(op.operand(accOperand(op)), layoutOf(op.result()));
  LVal* stage = b_.CreateLoad(b_.getInt32Ty(), p.counter);
  if (&op == p.dots.front()) {
    if (!p.allTma()) {
      ptx("cp.async.wait_group " + std::to_string(p.stages - 2) + ";");
      ptx("fence.proxy.async.shared::cta;");
    }
    if (p.phases) {
      LVal* phases = b_.CreateLoad(b_.getInt32Ty(), p.phases);
      waitBarrier(barrierAddr(b_.CreateAdd(stage, idx(p.barrier))), b_.CreateAnd(b_.CreateLShr(phases, stage), idx(1)));
      b_.CreateStore(b_.CreateXor(phases, b_.CreateShl(idx(1), stage)), p.phases);
    }
    // Each thread's own mbarrier wait shows it the TMA data; cp.async data needs the barrier.
    if (!p.allTma()) barrier();
  }
  int64_t scales = scaledOnFp8(op) ? stageScales(op) : -1;
  LVal* stageBase = b_.CreateAdd(idx(p.base), b_.CreateMul(stage, idx(p.stageBytes)));
  auto [ia, ib] = p.operand.at(&op);
  vals_[op.result()] = issueWgmma(op, w, std::move(acc), b_.CreateAdd(stageBase, idx(p.loads[ia].offset)),
                                  b_.CreateAdd(stageBase, idx(p.loads[ib].offset)), scales);
  if (!wgmmaPromotes(op)) wgmmaPending_.insert(op.result());
  if (&op != p.dots.back()) return;
  // fp8 dots wait for their groups as they promote; the others' stay in flight.
  int inFlight = 0;
  for (const Op* d : p.dots) inFlight += !wgmmaPromotes(*d);
  ptx("wgmma.wait_group.sync.aligned " + std::to_string(inFlight) + ";");
  barrier();
  Env now;
  for (const Value* a : p.args) now[a] = get(a);
  Env ahead = advance(std::move(now), body, p.step, p.stages - 1);
  LVal* ahead1 = b_.CreateAdd(stage, idx(p.stages - 1));
  LVal* wrap = b_.CreateSelect(b_.CreateICmpUGE(ahead1, idx(p.stages)), b_.CreateSub(ahead1, idx(p.stages)), ahead1);
  copyStage(p, body, ahead, wrap, b_.CreateICmpSLT(ahead[body.arg(0)].e[0], p.ub));
  LVal* next = b_.CreateAdd(stage, idx(1));
  b_.CreateStore(b_.CreateSelect(b_.CreateICmpEQ(next, idx(p.stages)), idx(0), next), p.counter);
}

}  // namespace tilefuse::lower::detail
