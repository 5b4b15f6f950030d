#include "PipelinePlan.h"

#include <algorithm>
#include <functional>
#include <set>

namespace tilefuse::lower::detail {
namespace {

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

// The arch of the GPU-stage function holding `op`.
std::string funcArch(const Op& op) {
  const Op* f = &op;
  while (f->parentOp()) f = f->parentOp();
  return f->strAttr("arch");
}

// Whether `v` (used in `body` of a for loop) can be computed for a later iteration:
// loop invariants, the induction variable, index math of those, scalar loads at such
// addresses (a tile schedule a flattened persistent loop reads; the loop must not write
// what they read, as for every load it copies ahead), and loop-carried values whose
// yielded next value is such a computation.
bool advanceable(const Value* v, const Block& body, std::set<const Value*>& seen) {
  if (!seen.insert(v).second) return true;
  if (v->ownerBlock() != &body) return true;  // defined outside the loop
  const Op* def = v->definingOp();
  if (!def) {
    if (v == body.arg(0)) return true;
    return advanceable(body.terminator()->operand(v->index() - 1), body, seen);
  }
  bool scalarLoad = def->kind() == OpKind::Load && !v->type().isTile() && v->type().isNumeric();
  if (!indexOp(*def) && !scalarLoad) return false;
  for (Value* o : def->operands())
    if (!advanceable(o, body, seen)) return false;
  return true;
}

// How `l.load` copies into a stage (TMA, or cp.async runs of `l.width` elements of
// `eb` bytes), or why it cannot ("'s ..." of the operand's name).
std::string planCopy(StagedCopy& l, const Block& body, int64_t eb, const AxisAnalysis& axis, int threads) {
  const Op* ld = l.load;
  if (ld->kind() == OpKind::DescLoad) {
    const Op* md = ld->operand(0)->definingOp();
    if (!md || md->kind() != OpKind::MakeDesc || !md->hasAttr("tma_box"))
      return "'s descriptor is not on TMA (see its hint)";
    // The boxes must land in the layout the wgmma descriptors read.
    if (md->intAttr("tma_swizzle") != l.tile.swizzle) return "'s descriptor is also read with another swizzle";
    l.tma = true;
  } else if (ld->kind() != OpKind::Load) {
    return " is not a load";
  } else if (ld->numOperands() > 2 && !isZeroConstant(ld->operand(2))) {
    return "'s load has an `other` value that is not 0";
  }
  std::set<const Value*> visited;
  for (const Value* x : copyInputs(*ld))
    if (!advanceable(x, body, visited))
      return "'s pointers or mask depend on values the loop computes other than by index math";
  if (l.tma) return "";
  const Value* mask = ld->numOperands() > 1 ? ld->operand(1) : nullptr;
  l.width = accessWidth(axis, ld->operand(0), mask, threads);
  // A ragged end inside the runs (a group's last rows along the contiguous dim): whole
  // runs still copy, each of its valid prefix, the rest zero-filled.
  if (int64_t whole = accessWidth(axis, ld->operand(0), nullptr, threads); mask && whole > l.width) {
    int d = runDim(typeLayout(ld->operand(0)->type(), threads), ld->result()->type().shape);
    if (d >= 0 && prefixMask(axis, mask, static_cast<size_t>(d), whole)) {
      l.width = whole;
      l.prefix = true;
    }
  }
  if (l.width * eb < 4)  // cp.async moves 4, 8 or 16 bytes
    return "'s loads are not provably contiguous and aligned in runs of 4 bytes (" +
           accessReason(axis, ld->operand(0), mask, threads) + ")";
  return "";
}

// Ops a dot operand computed in the loop may be made of (its loads aside): they stay
// where they are, computing from what the loads read back from their rings.
bool computeOp(const Op& op) {
  switch (op.kind()) {
    case OpKind::Cast:
    case OpKind::Bitcast:
    case OpKind::Join:
    case OpKind::Reshape:
    case OpKind::Trans:
      return true;
    default:
      return indexOp(op);
  }
}

// The loads in `body` that the computation of `v` reads (into `leaves`), or why `v`
// cannot be computed from loads read back from rings.
std::string computedFrom(const Value* v, const Block& body, std::set<const Value*>& seen,
                         std::vector<const Op*>& leaves) {
  if (v->ownerBlock() != &body || !seen.insert(v).second) return "";
  const Op* def = v->definingOp();
  if (!def) return "";  // the induction variable or a carried value
  if (def->kind() == OpKind::Load) {
    if (def->result()->type().rank() != 2) return " is computed from a load that is not 2-D";
    leaves.push_back(def);
    return "";
  }
  if (def->kind() == OpKind::DescLoad)
    return " is computed from a descriptor load (read back only from cp.async copies)";
  if (!computeOp(*def))
    return " is computed in the loop by " + std::string(def->mnemonic()) +
           " (a computed operand may only convert, reshape and combine elementwise what the loop loads)";
  for (const Value* o : def->operands())
    if (std::string bad = computedFrom(o, body, seen, leaves); !bad.empty()) return bad;
  return "";
}

}  // namespace

SharedTile readBackTile(const Type& t) {
  int64_t eb = std::max(1, bitWidth(t.elem) / 8), cols = t.shape.back(), rows = t.numel() / cols;
  int64_t rowBytes = cols * eb, sw = 128;
  while (sw >= 32 && rowBytes % sw) sw /= 2;
  if (sw < 32 || rows % 8) sw = 0;
  return {rows, cols, eb, sw};
}

std::vector<const Value*> copyInputs(const Op& ld) {
  if (ld.kind() == OpKind::DescLoad) return {ld.operands().begin() + 1, ld.operands().end()};
  return {ld.operands().begin(), ld.operands().begin() + std::min(2u, ld.numOperands())};
}

std::vector<const Value*> copyLoopArgs(const std::vector<const Op*>& loads, const Block& body) {
  std::set<const Value*> seen;
  std::function<void(const Value*)> visit = [&](const Value* v) {
    if (v->ownerBlock() != &body || !seen.insert(v).second) return;
    if (const Op* def = v->definingOp()) {
      for (Value* o : def->operands()) visit(o);
    } else if (v != body.arg(0)) {
      visit(body.terminator()->operand(v->index() - 1));
    }
  };
  for (const Op* ld : loads)
    for (const Value* x : copyInputs(*ld)) visit(x);
  std::vector<const Value*> args = {body.arg(0)};
  for (unsigned i = 1; i < body.numArgs(); ++i)
    if (seen.count(body.arg(i))) args.push_back(body.arg(i));
  return args;
}

int64_t accessWidth(const AxisAnalysis& axis, const Value* ptr, const Value* mask, int threads) {
  Layout L = typeLayout(ptr->type(), threads);
  const std::vector<int64_t>& shape = ptr->type().shape;
  int d = runDim(L, shape);
  if (d < 0) return 1;
  return std::min(vectorRun(L, dimStride(shape, d)), axis.vectorWidth(ptr, mask, 16, d));
}

std::string accessReason(const AxisAnalysis& axis, const Value* ptr, const Value* mask, int threads) {
  const std::vector<int64_t>& shape = ptr->type().shape;
  int rd = runDim(typeLayout(ptr->type(), threads), shape);
  size_t d = static_cast<size_t>(rd < 0 ? ptr->type().rank() - 1 : rd);
  const AxisInfo& p = axis.get(ptr);
  std::string along = d + 1 == shape.size() ? "the last dim" : "dim " + std::to_string(d);
  std::string r = "along " + along + " the pointers are contiguous in runs of " + std::to_string(p.contiguity[d]) +
                  " with addresses divisible by " + std::to_string(p.divisibility[d]) + " bytes";
  if (mask && mask->type().rank() == ptr->type().rank())
    r += ", the mask is constant in runs of " + std::to_string(axis.get(mask).constancy[d]);
  return r + " (tl.multiple_of / tl.max_contiguous state what the analysis cannot prove)";
}

// Whether `loop` can be pipelined (filling `p`); `why` says why not for a loop with a
// wgmma dot (empty for loops without one).
bool planPipeline(const Op& loop, const AxisAnalysis& axis, int threads, int stages, PipelinePlan* p,
                  std::string* why) {
  const Block& body = loop.region(0);
  auto no = [&](std::string reason) {
    *why = std::move(reason);
    return false;
  };
  for (const auto& o : body.ops())
    if (onWgmmaLayout(*o)) p->dots.push_back(o.get());
  if (p->dots.empty()) return false;
  if (stages < 2) return no("num_stages=" + std::to_string(stages));
  std::set<const Op*> dots(p->dots.begin(), p->dots.end());
  int64_t stageBytes = 0;
  // The staged copy of load `ld` in `tile` (its index in p->loads), or -1 with `why`
  // (-2: the load cannot be copied asynchronously).
  auto stageLoad = [&](const Op* ld, const SharedTile& tile, bool readBack, bool transposed, int64_t eb,
                       const std::string& name) {
    auto seen = std::find_if(p->loads.begin(), p->loads.end(), [&](const StagedCopy& l) { return l.load == ld; });
    std::string bad;
    if (seen != p->loads.end()) {
      if (seen->readBack != readBack)
        bad = " reads a load that is also a dot's operand as it is";
      else if (!(seen->tile == tile))
        bad = " feeds dots that read it in different shared-memory layouts";
      else
        return static_cast<int>(seen - p->loads.begin());
      *why = name + bad;
      return -1;
    }
    StagedCopy l{.load = ld, .tile = tile, .offset = stageBytes, .transposed = transposed, .readBack = readBack};
    if (bad = planCopy(l, body, eb, axis, threads); !bad.empty()) {
      *why = name + bad;
      return -2;
    }
    stageBytes += swizzleAtoms(ld->result()->type().numel() * tile.eb);
    p->loads.push_back(l);
    return static_cast<int>(p->loads.size()) - 1;
  };
  for (const Op* dot : p->dots) {
    WgmmaShape w;
    if (!wgmmaApplies(*dot, funcArch(loop), threads, &w))
      throw InternalError("pipeline schedule: a dot in a #wgmma layout that wgmma cannot run");
    WgmmaB bs = wgmmaB(*dot, threads);
    WgmmaA as = wgmmaA(*dot);
    // cp.async copies bytes as they lie: a [K, N] B staged K-major must be copied in
    // runs along K (K contiguous in memory, the layout coalesced along it).
    if (bs.transposeOnStage && runDim(typeLayout(bs.value->type(), threads), bs.value->type().shape) != 0)
      return no(
          "an 8-bit B loaded as [K, N] with N contiguous is transposed through registers; "
          "load it as [N, K] and pass tl.trans(b)");
    int slot[2];
    for (unsigned i = 0; i < 2; ++i) {
      std::string name = i ? "B" : "A";
      const Value* v = i ? bs.value : as.value;
      // A may feed several of the loop's dots as their A; B, or a transposed A, feeds one.
      bool onlyDots = i || as.mMajor
                          ? v->uses().size() == 1
                          : !v->uses().empty() && std::all_of(v->uses().begin(), v->uses().end(), [&](const Use& u) {
                              return dots.count(u.user) && u.index == 0;
                            });
      if (const Value* bytes = stagedBytes(v); bytes != v) {
        v = bytes;
        onlyDots = onlyDots && v->uses().size() == 1;
      }
      const Op* ld = v->definingOp();
      bool direct =
          ld && v->ownerBlock() == &body && onlyDots && (ld->kind() == OpKind::DescLoad || ld->kind() == OpKind::Load);
      if (direct) {
        slot[i] = stageLoad(ld, wgmmaOperandTile(*dot, i, w, threads), false, i == 1 && bs.transposeOnStage,
                            bs.elemBytes, name);
        if (slot[i] < 0) return false;
        continue;
      }
      // Computed from what the loop loads: the loads are copied ahead into rings and
      // read back; the operand is stored for the dot where it is computed.
      std::set<const Value*> visited;
      std::vector<const Op*> leaves;
      if (std::string bad = computedFrom(v, body, visited, leaves); !bad.empty())
        return no(name + bad);
      // A load cp.async cannot copy (a small scale table in runs under 4 bytes) stays
      // where it is, loaded each iteration: the rest of the loop still pipelines.
      for (const Op* leaf : leaves) {
        SharedTile tile = readBackTile(leaf->result()->type());
        int at = stageLoad(leaf, tile, true, false, tile.eb, name + "'s input");
        if (at == -2) {
          p->unstaged.emplace_back(leaf, *why);
          why->clear();
        } else if (at < 0) {
          return false;
        }
      }
      slot[i] = -1;
    }
    p->operand[dot] = {slot[0], slot[1]};
  }
  if (p->loads.empty()) return no("none of its dots' operands is loaded in a way cp.async or TMA can copy ahead");
  p->stages = stages;
  p->stageBytes = stageBytes;
  return true;
}

const Value* stagedBytes(const Value* v) {
  const Op* d = v->definingOp();
  return d && d->kind() == OpKind::Bitcast ? d->operand(0) : v;
}

}  // namespace tilefuse::lower::detail
