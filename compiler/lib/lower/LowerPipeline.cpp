// Software pipelining of K loops on sm_90a. Loops of wgmma dots are expanded in IR
// (pipeline-expand, insert-waits): their ops have the per-op emitters at the end of
// this file. Loops of dot_scaled (and of operands bitcast after their load) keep their
// schedule and are still expanded here, from what pipeline-schedule wrote into the
// loop (PipelinePlan.h): a for loop whose wgmma dots read loads of
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

// The schedule pipeline-schedule wrote into `loop` (false: none), read back.
bool Lowering::readPipeline(const Op& loop, Pipeline* p) {
  if (!loop.hasAttr("pipeline_stages")) return false;
  const Block& body = loop.region(0);
  p->stages = static_cast<int>(loop.intAttr("pipeline_stages"));
  p->stageBytes = loop.intAttr("pipeline_stage_bytes");
  std::unordered_map<const Op*, int> index;
  for (const auto& o : body.ops()) {
    if (!o->hasAttr("staged_at")) continue;
    const std::vector<int64_t>& t = o->intsAttr("staged_tile");
    StagedCopy l{.load = o.get(),
                 .tma = o->strAttr("staged_copy") == "tma",
                 .width = o->hasAttr("staged_width") ? o->intAttr("staged_width") : 1,
                 .tile = {t[0], t[1], t[2], t[3]},
                 .offset = o->intAttr("staged_at"),
                 .transposed = o->hasAttr("staged_transposed") && o->boolAttr("staged_transposed"),
                 .prefix = o->hasAttr("staged_prefix") && o->boolAttr("staged_prefix")};
    index[o.get()] = static_cast<int>(p->loads.size());
    p->loads.push_back(l);
  }
  // A dot reads each operand from a staged load, possibly through a bitcast (fp8 bytes).
  auto staged = [&](const Value* v) {
    const Op* d = v->definingOp();
    const Op* cast = d && d->kind() == OpKind::Bitcast ? d : nullptr;
    if (cast) d = cast->operand(0)->definingOp();
    auto it = d ? index.find(d) : index.end();
    if (it == index.end()) throw InternalError("lowering: a pipelined dot's operand is not a staged load");
    if (cast) p->loads[it->second].bitcast = cast;
    return it->second;
  };
  for (const auto& o : body.ops()) {
    if (!onWgmma(*o)) continue;
    p->dots.push_back(o.get());
    p->operand[o.get()] = {staged(o->operand(0)), staged(wgmmaB(*o).value)};
  }
  p->args = pipelineArgs(*p, body);
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

// The loop values the copies of `p` depend on (copyLoopArgs).
std::vector<const Value*> Lowering::pipelineArgs(const Pipeline& p, const Block& body) {
  std::vector<const Op*> loads;
  for (const StagedCopy& l : p.loads) loads.push_back(l.load);
  return copyLoopArgs(loads, body);
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
    for (const StagedCopy& l : p.loads)
      if (l.tma) bytes += l.load->result()->type().numel() * l.tile.eb;
    armBarrier(bar, bytes, issue);
    for (const StagedCopy& l : p.loads) {
      if (!l.tma) continue;
      std::vector<LVal*> coords;
      for (const Value* x : copyInputs(*l.load))
        coords.push_back(b_.CreateSExtOrTrunc(evalUnder(x, body, env).e[0], b_.getInt32Ty()));
      tmaCopy(tensorMapOf(l.load->operand(0)), l.load->result()->type(), b_.CreateAdd(ring, idx(l.offset)), coords, bar,
              issue);
    }
  }
  if (p.allTma()) return;
  for (const StagedCopy& l : p.loads) {
    if (l.tma) continue;
    const Op* ld = l.load;
    bool masked = ld->numOperands() > 1;
    Regs ptrs = evalUnder(ld->operand(0), body, env);  // one builder call per statement: IR order
    Regs mask = masked ? convert(evalUnder(ld->operand(1), body, env), ld->operand(1)->type(), ptrs.L) : Regs{};
    LVal* base = b_.CreateAdd(ring, idx(l.offset));
    cpAsyncRuns(l, ptrs, mask, ld->result()->type().shape, base, valid);
  }
  ptx("cp.async.commit_group;");
}

// Before the loop (insertion point in its preheader): stages 0 .. S-2.
void Lowering::pipelinePrologue(Pipeline& p, const Op& loop, LVal* lb, LVal* ub, LVal* step,
                                const std::vector<Regs>& inits) {
  const Block& body = loop.region(0);
  // A ring used before (allocate-shared's ring_sync): no warpgroup may still read a
  // stage of it when the first copies land.
  if (loop.hasAttr("ring_sync")) barrier();
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
  vals_[op.result()] =
      issueWgmma(dotGroup(op, w), w, std::move(acc), b_.CreateAdd(stageBase, idx(p.loads[ia].offset)),
                 b_.CreateAdd(stageBase, idx(p.loads[ib].offset)), scales >= 0 ? &op : nullptr, scales);
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

namespace tilefuse::lower::detail {

// Shared byte (32-bit shared address) of stage `stage` of tile buffer `buf`.
LVal* Lowering::sharedStage(const Value* buf, const Value* stage) {
  LVal* smem32 = b_.CreatePtrToInt(smem(), b_.getInt32Ty());
  int64_t bytes = buf->type().shared()->stageBytes();
  return b_.CreateAdd(smem32, b_.CreateAdd(get(buf).e[0], b_.CreateMul(get(stage).e[0], idx(bytes))));
}

// The ops of an expanded pipeline (pipeline-expand, insert-waits): each takes its
// addresses from its buffer's #shared layout and allocate-shared's placement, and its
// instruction from its attributes. TMA loads and mbarrier updates are thread 0's.
void Lowering::lowerAsyncOp(const Op& op) {
  LVal* first = b_.CreateICmpEQ(tid_, idx(0));
  auto bar = [&](unsigned at) {
    return barrierAddr(b_.CreateAdd(get(op.operand(at)).e[0], get(op.operand(at + 1)).e[0]));
  };
  switch (op.kind()) {
    case OpKind::AsyncCopy:
      cpAsyncInFlight_ = true;
      return asyncCopy(op);
    case OpKind::AsyncCommit:
      vals_[op.result()] = Regs{{}, layoutOf(op.result())};
      return ptx("cp.async.commit_group;");
    case OpKind::AsyncWait:
      if (op.intAttr("pending") == 0) cpAsyncInFlight_ = false;
      return ptx("cp.async.wait_group " + std::to_string(op.intAttr("pending")) + ";");
    case OpKind::TmaLoad: {
      tmaInFlight_ = true;
      const Type& d = op.operand(0)->type();
      int map = tensorMapOf(op.operand(0));
      if (map < 0) throw InternalError("lowering: a tma_load of a descriptor not on TMA");
      return tmaCopy(map, Type::tile(d.elem, d.shape), sharedStage(op.operand(1), op.operand(2)), descCoords(op, 5),
                     bar(3), first);
    }
    case OpKind::MbarrierInit: {
      std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p mbarrier.init.shared::cta.b64 [$1], " +
                         std::to_string(op.intAttr("count")) + ";\n@p fence.mbarrier_init.release.cluster;\n}";
      auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
      b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true),
                    {b_.CreateZExt(first, b_.getInt32Ty()), bar(0)});
      return;
    }
    case OpKind::MbarrierExpect:
      return armBarrier(bar(0), op.intAttr("bytes"), first);
    case OpKind::MbarrierWait:
      return waitBarrier(bar(0), get(op.operand(2)).e[0]);
    default:
      throw InternalError("lowering: no emitter for " + std::string(op.mnemonic()));
  }
}

// async_copy: the runs of its pointer tile into its stage of the buffer, laid out by
// the buffer's #shared layout (the iteration's validity is and-ed into its mask).
void Lowering::asyncCopy(const Op& op) {
  const SharedLayout& sl = *op.operand(0)->type().shared();
  StagedCopy l;
  l.tile = SharedTile{sl.rows, sl.cols, sl.eb, sl.swizzle};
  l.width = op.hasAttr("width") ? op.intAttr("width") : 1;
  l.transposed = op.hasAttr("transposed") && op.boolAttr("transposed");
  l.prefix = op.hasAttr("prefix") && op.boolAttr("prefix");
  const Regs& ptrs = get(op.operand(2));
  Regs mask = op.numOperands() > 3 ? convert(get(op.operand(3)), op.operand(3)->type(), ptrs.L) : Regs{};
  LVal* base = sharedStage(op.operand(0), op.operand(1));
  cpAsyncRuns(l, ptrs, mask, op.operand(2)->type().shape, base, nullptr);
  vals_[op.result()] = Regs{{}, layoutOf(op.result())};
}

// One cp.async per owned run of l.width elements of `ptrs` (a 2-D tile of `shape`) to
// its address in l.tile from `base`, transposed for a K-major B; each copies its bytes,
// or its mask's valid prefix (l.prefix), zero-filling the rest; nothing where `mask` (in
// the pointers' layout; may be empty) or `valid` (may be null) is off.
void Lowering::cpAsyncRuns(const StagedCopy& l, const Regs& ptrs, const Regs& mask, const std::vector<int64_t>& shape,
                           LVal* base, LVal* valid) {
  const Layout& L = ptrs.L;
  int64_t bytes = l.width * l.tile.eb;
  std::string text = std::string("cp.async.") + (bytes == 16 ? "cg" : "ca") + ".shared.global [$0], [$1], " +
                     std::to_string(bytes) + ", $2;";
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt64Ty(), b_.getInt32Ty()}, false);
  auto* copy = llvm::InlineAsm::get(ty, text, "r,l,r,~{memory}", true);
  for (int s = 0; s < slots(L); s += static_cast<int>(l.width)) {
    if (!slotOwned(L, s)) continue;
    LVal* e = flatIndex(L, s);
    LVal *row = coord(e, shape, 0), *col = coord(e, shape, 1);
    LVal* dst = b_.CreateAdd(base, l.transposed ? swizzledOffset(col, row, l.tile) : swizzledOffset(row, col, l.tile));
    LVal* size;
    if (l.prefix) {  // the bytes of the run's valid prefix
      LVal* n = idx(0);
      for (int i = 0; i < l.width; ++i) n = b_.CreateAdd(n, b_.CreateZExt(mask.e[s + i], b_.getInt32Ty()));
      size = b_.CreateMul(n, idx(l.tile.eb));
      if (valid) size = b_.CreateSelect(valid, size, idx(0));
    } else {
      LVal* ok = mask.e.empty() ? valid : valid ? b_.CreateAnd(valid, mask.e[s]) : mask.e[s];
      size = ok ? b_.CreateSelect(ok, idx(bytes), idx(0)) : idx(bytes);
    }
    b_.CreateCall(copy, {dst, b_.CreatePtrToInt(ptrs.e[s], b_.getInt64Ty()), size});
  }
}

}  // namespace tilefuse::lower::detail
