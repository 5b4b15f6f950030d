// Rules of the GPU stage: which types may appear where, well-formed layouts, the
// operands of the GPU ops, and the tokens that link asynchronous ops to their waits.
#include <algorithm>
#include <set>

#include "VerifierRules.h"

namespace tilefuse::verifier {
namespace {

int numWarps(const Op& func) {
  const Attr* a = func.attr("num_warps");
  return a && std::holds_alternative<int64_t>(*a) ? static_cast<int>(std::get<int64_t>(*a)) : 0;
}

int log2i(int64_t v) { return 63 - __builtin_clzll(static_cast<uint64_t>(v)); }

std::string layoutName(const Type& t) {
  std::string s = layoutStr(t.layout);
  return s.substr(0, s.find('<')) + " layout of " + t.withoutLayout().str();
}

// Bases are distinct powers of two below the element count and together reach every
// element; 5 lane bases and log2(num_warps) warp bases.
void checkDist(const Op& op, const Type& t, int warps) {
  const DistLayout& l = *t.dist();
  std::string what = layoutName(t);
  if (l.lane.size() != 5)
    fail(op, what + " has " + std::to_string(l.lane.size()) + " lane bases, a warp's 32 lanes need 5");
  // An invalid num_warps is verifyGpuFunc's error (log2i needs a positive count).
  if (isPow2(warps) && static_cast<int>(l.warp.size()) != log2i(warps))
    fail(op, what + " has " + std::to_string(l.warp.size()) + " warp bases, num_warps = " + std::to_string(warps) +
                 " needs " + std::to_string(log2i(warps)));
  int64_t n = t.numel();
  std::set<int64_t> seen;
  for (const auto* bases : {&l.reg, &l.lane, &l.warp})
    for (int64_t b : *bases) {
      if (b == 0) continue;
      if (!isPow2(b) || b >= n)
        fail(op, what + " has basis " + std::to_string(b) + ", not 0 or a power of two below " + std::to_string(n));
      if (!seen.insert(b).second) fail(op, what + " has basis " + std::to_string(b) + " twice");
    }
  if (static_cast<int>(seen.size()) != log2i(n))
    fail(op,
         what + " reaches " + std::to_string(int64_t{1} << seen.size()) + " of its " + std::to_string(n) + " elements");
  if (l.kind != DistKind::Blocked && t.rank() != 2) fail(op, what + " needs a 2-D tile");
}

void checkSmem(const Op& op, const Type& t) {
  const SharedLayout* s = t.shared();
  if (!s) {
    if (t.elem != DType::I64 || t.rank() != 1)
      fail(op, "buffer " + t.str() + " has no #shared layout, so it holds mbarriers and must be smem<Nxi64>");
    return;
  }
  std::string of = " of " + t.withoutLayout().str();
  if (s->swizzle != 0 && s->swizzle != 32 && s->swizzle != 64 && s->swizzle != 128)
    fail(op, "#shared swizzle must be 0 (unswizzled rows), 32, 64 or 128 bytes, got " + std::to_string(s->swizzle));
  if (s->eb * 8 != bitWidth(t.elem))
    fail(op, "#shared eb=" + std::to_string(s->eb) + of + " must be its element size in bytes");
  if (t.rank() < 2 || s->cols != t.shape.back() || s->rows * s->cols != t.numel())
    fail(op, "#shared rows=" + std::to_string(s->rows) + ", cols=" + std::to_string(s->cols) + of +
                 " must be its outer dimensions flattened and its last dimension");
  if (s->stages < 1) fail(op, "#shared stages must be at least 1, got " + std::to_string(s->stages));
  if (s->swizzle == 0) {
    if (s->cols * s->eb % 4) fail(op, "#shared unswizzled rows" + of + " must be whole 4-byte words");
    return;
  }
  if (s->rows % 8) fail(op, "#shared rows=" + std::to_string(s->rows) + of + " must be whole 8-row swizzle groups");
  if (s->cols * s->eb % s->swizzle)
    fail(op, "#shared rows of " + std::to_string(s->cols * s->eb) + " bytes" + of + " must be whole " +
                 std::to_string(s->swizzle) + "-byte swizzle spans");
}

// --- operands of the GPU ops ---

std::string nth(unsigned i) { return "operand #" + std::to_string(i); }

const Type& tileBuffer(const Op& op, unsigned i, const std::string& what) {
  const Type& t = op.operand(i)->type();
  if (!t.shared()) fail(op, what + " must be a shared-memory buffer with a #shared layout, got " + t.str());
  return t;
}

void barriers(const Op& op, unsigned i) {
  const Type& t = op.operand(i)->type();
  if (!t.isSmem() || t.shared()) fail(op, "mbarriers must be an smem<Nxi64> buffer, got " + t.str());
}

void indexOperand(const Op& op, unsigned i, const std::string& what) {
  if (op.operand(i)->type() != Type::scalar(DType::I32))
    fail(op, what + " must be i32, got " + op.operand(i)->type().str());
}

void intAttrAtLeast(const Op& op, const std::string& name, int64_t least) {
  requireAttr(op, name, 1);
  if (op.intAttr(name) < least)
    fail(op, "attribute '" + name + "' must be at least " + std::to_string(least) + ", got " +
                 std::to_string(op.intAttr(name)));
}

// The op that produced token `v`, through loop-carried values and if/while results;
// null for a function parameter.
const Op* producer(const Value* v) {
  while (v) {
    const Op* d = v->definingOp();
    const Op* p = d ? d : v->ownerBlock()->parentOp();
    auto yielded = [](const Block& b, unsigned i) { return b.terminator()->operand(i); };
    switch (p->kind()) {
      case OpKind::For: {
        // A carried value is what the body yields for it (its initial value stands in for
        // the iteration before the first), unless the body passes it through unchanged.
        const Value* y = yielded(p->region(0), d ? v->index() : v->index() - 1);
        v = d || y != v ? y : p->operand(3 + v->index() - 1);
        break;
      }
      case OpKind::If:
        v = yielded(p->region(0), v->index());
        break;
      case OpKind::While:  // results and after-arguments: forwarded by the condition
        v = !d && v->ownerBlock() == &p->region(0) ? p->operand(v->index()) : yielded(p->region(0), v->index() + 1);
        break;
      case OpKind::Func:
        return nullptr;
      default:
        return p;
    }
  }
  return nullptr;
}

void token(const Op& op, unsigned i, std::initializer_list<OpKind> from) {
  std::string want;
  for (OpKind k : from) want += (want.empty() ? "'" : " or '") + std::string(opInfo(k).mnemonic) + "'";
  const Type& t = op.operand(i)->type();
  if (!t.isToken()) fail(op, nth(i) + " must be a token of " + want + ", got " + t.str());
  const Op* p = producer(op.operand(i));
  if (!p || std::find(from.begin(), from.end(), p->kind()) == from.end())
    fail(op, nth(i) + " must be a token of " + want + ", got " + (p ? "one of " + opName(*p) : "a function parameter"));
}

void resultToken(const Op& op, unsigned i) {
  if (!op.result(i)->type().isToken())
    fail(op, "result #" + std::to_string(i) + " must be a token, got " + op.result(i)->type().str());
}

// `t`, a tile stored into or loaded from `buf`, has one stage's shape and elements.
void bufferTile(const Op& op, const Type& buf, const Type& t, const std::string& what) {
  Type want = Type::tile(buf.elem, buf.shape);
  if (t.withoutLayout() != want)
    fail(op, what + " must be " + want.str() + " (the buffer's tile), got " + t.withoutLayout().str());
}

void verifyWgmma(const Op& op) {
  const Type& a = tileBuffer(op, 0, "A");
  indexOperand(op, 1, "A's stage");
  const Type& b = tileBuffer(op, 2, "B");
  indexOperand(op, 3, "B's stage");
  const Type& acc = op.operand(4)->type();
  bool kMajor = false, mMajor = false;
  if (op.hasAttr("b_kmajor")) {
    requireAttr(op, "b_kmajor", 0);
    kMajor = op.boolAttr("b_kmajor");
  }
  if (op.hasAttr("a_mmajor")) {
    requireAttr(op, "a_mmajor", 0);
    mMajor = op.boolAttr("a_mmajor");
  }
  if (a.rank() != 2 || b.rank() != 2) fail(op, "operands must be 2-D buffers, got " + a.str() + " and " + b.str());
  if (!a.shared()->swizzle || !b.shared()->swizzle) fail(op, "operands must be swizzled buffers (swizzle 32, 64 or 128)");
  int64_t m = a.shape[mMajor ? 1 : 0], k = a.shape[mMajor ? 0 : 1], n = b.shape[kMajor ? 0 : 1];
  if (b.shape[kMajor ? 1 : 0] != k)
    fail(op, std::string("B must be ") + (kMajor ? "[N, K]" : "[K, N]") + " with K=" + std::to_string(k) + ", got " +
                 b.withoutLayout().str());
  auto fp8 = [](DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; };
  static const std::set<DType> ok = {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I8};
  if (!ok.count(a.elem) || (a.elem != b.elem && !(fp8(a.elem) && fp8(b.elem))))
    fail(op, "operands must be both bf16, f16, i8 or 8-bit floats, got " + std::string(dtypeName(a.elem)) + " and " +
                 std::string(dtypeName(b.elem)));
  if (bitWidth(a.elem) == 8 && !kMajor) fail(op, "8-bit B must be K-major (b_kmajor = true)");
  if (bitWidth(a.elem) == 8 && mMajor) fail(op, "8-bit A must be K-major (no a_mmajor)");
  if (m % 64) fail(op, "needs M to be a multiple of 64, got M=" + std::to_string(m));
  if (k * bitWidth(a.elem) % 256) fail(op, "needs K in steps of 32 bytes, got K=" + std::to_string(k));
  Type want = Type::tile(a.elem == DType::I8 ? DType::I32 : DType::F32, {m, n});
  // f16 products may accumulate in f16 (wgmma's f16 form).
  bool f16Acc = a.elem == DType::F16 && acc.withoutLayout() == Type::tile(DType::F16, {m, n});
  if (acc.withoutLayout() != want && !f16Acc)
    fail(op, "accumulator must be " + want.str() + ", got " + acc.withoutLayout().str());
  if (!acc.dist() || acc.dist()->kind != DistKind::Wgmma)
    fail(op, "accumulator must be in a #wgmma layout, got the " + layoutName(acc));
  if (op.result(0)->type() != acc) fail(op, "result #0 must be the accumulator's type " + acc.str());
  resultToken(op, 1);
  // A sixth operand of i1 alone is restart-accumulators' flag (false: D = A B).
  bool flag = op.numOperands() == 6 && op.operand(5)->type() == Type::scalar(DType::I1);
  if (op.numOperands() == 5 || flag) {
    if (op.hasAttr("scale_chunk")) fail(op, "has scale_chunk but no scale tables");
    if (flag && fp8(a.elem))
      fail(op, "an accumulate flag needs 16-bit or i8 operands, got " + std::string(dtypeName(a.elem)));
    return;
  }
  if (op.numOperands() != 7) fail(op, "takes both scale tables or none, got one");
  if (!fp8(a.elem)) fail(op, "scale tables need 8-bit float operands, got " + std::string(dtypeName(a.elem)));
  Type as = Type::tile(DType::E8M0, {m, k / 32}), bs = Type::tile(DType::E8M0, {n, k / 32});
  if (op.operand(5)->type().withoutLayout() != as)
    fail(op, "A's scales must be " + as.str() + ", got " + op.operand(5)->type().withoutLayout().str());
  if (op.operand(6)->type().withoutLayout() != bs)
    fail(op, "B's scales must be " + bs.str() + ", got " + op.operand(6)->type().withoutLayout().str());
  requireAttr(op, "scale_chunk", 1);
  int64_t chunk = op.intAttr("scale_chunk");
  if (chunk < 32 || chunk > 128 || chunk % 32 || k % chunk)
    fail(op, "scale_chunk must be 32, 64, 96 or 128 and divide K=" + std::to_string(k) + ", got " +
                 std::to_string(chunk));
}

// cp.async of a pointer tile into a stage: runs of `width` elements (4, 8 or 16 bytes,
// default 1 element), `prefix` (each run copies its mask's valid prefix) and
// `transposed` (an [N, K] buffer filled from [K, N] pointers) as pipeline-schedule chose.
void verifyAsyncCopy(const Op& op) {
  const Type& buf = tileBuffer(op, 0, "buffer");
  indexOperand(op, 1, "stage");
  bool transposed = false;
  for (const char* flag : {"prefix", "transposed"})
    if (op.hasAttr(flag)) requireAttr(op, flag, 0);
  if (op.hasAttr("transposed")) transposed = op.boolAttr("transposed");
  if (transposed && buf.rank() != 2) fail(op, "transposed needs a 2-D buffer, got " + buf.str());
  std::vector<int64_t> shape = buf.shape;
  if (transposed) std::swap(shape[0], shape[1]);
  const Type& p = op.operand(2)->type();
  // The copy moves bytes: integer pointers may fill a buffer of another type of their
  // width (fp8 operands loaded as bytes).
  DType from = p.isTile() && isInt(p.elem) && bitWidth(p.elem) == bitWidth(buf.elem) ? p.elem : buf.elem;
  Type want = Type::ptrTile(from, shape);
  if (p.withoutLayout() != want)
    fail(op, std::string("pointers must be ") + want.str() +
                 (transposed ? " (the buffer's tile transposed)" : " (the buffer's tile)") + ", got " +
                 p.withoutLayout().str());
  bool masked = op.numOperands() == 4;
  if (masked && op.operand(3)->type() != Type::tile(DType::I1, p.shape).withLayout(p.layout))
    fail(op, "mask must be " + Type::tile(DType::I1, p.shape).withLayout(p.layout).str() + ", got " +
                 op.operand(3)->type().str());
  if (op.hasAttr("width")) {
    intAttrAtLeast(op, "width", 1);
    int64_t bytes = op.intAttr("width") * bitWidth(buf.elem) / 8;
    if (bytes != 4 && bytes != 8 && bytes != 16)
      fail(op, "width=" + std::to_string(op.intAttr("width")) + " of " + std::string(dtypeName(buf.elem)) + " copies " +
                   std::to_string(bytes) + " bytes a run; cp.async moves 4, 8 or 16");
  }
  if (op.hasAttr("prefix") && op.boolAttr("prefix") && !masked) fail(op, "prefix needs a mask");
  resultToken(op, 0);
}

// plan-tma's decision on a make_desc: a box of the block's rank (each dim at most 256,
// the last dividing the block's) with its swizzle, or the reason there is none. The
// reason may come before the GPU stage too (TILEFUSE_DEBUG=1 keeps every descriptor
// off TMA), the box only from plan-tma.
void checkTmaAttrs(const Op& op, bool gpu) {
  bool box = op.hasAttr("tma_box"), none = op.hasAttr("no_tma");
  if (!box && !none && !op.hasAttr("tma_swizzle")) return;
  if (!gpu && (box || op.hasAttr("tma_swizzle")))
    fail(op, "has plan-tma's attributes in a function not marked {gpu = true}");
  if (none) {
    requireAttr(op, "no_tma", 3);
    if (box) fail(op, "has both 'tma_box' and 'no_tma'");
    return;
  }
  requireAttr(op, "tma_box", 4);
  requireAttr(op, "tma_swizzle", 1);
  const std::vector<int64_t>& b = op.intsAttr("tma_box");
  const std::vector<int64_t>& shape = op.result()->type().shape;
  if (b.size() != shape.size())
    fail(op,
         "tma_box must have the block's rank " + std::to_string(shape.size()) + ", got " + std::to_string(b.size()));
  for (size_t d = 0; d < b.size(); ++d)
    if (b[d] < 1 || b[d] > 256 || (d + 1 < b.size() ? b[d] != shape[d] : shape[d] % b[d] != 0))
      fail(op, "tma_box dim " + std::to_string(d) + " (" + std::to_string(b[d]) +
                   ") must be at most 256 and the block's (the last may divide it)");
  int64_t sw = op.intAttr("tma_swizzle");
  if (sw != 0 && sw != 32 && sw != 64 && sw != 128)
    fail(op, "tma_swizzle must be 0, 32, 64 or 128 bytes, got " + std::to_string(sw));
}

// pipeline-schedule's decision on a load of a pipelined loop: its offset in a stage,
// its layout there ([rows, cols, element bytes, swizzle] holding the loaded tile) and
// its copy; the loop holding it has the stage count and bytes.
void checkStagedAttrs(const Op& op, bool gpu) {
  if (!op.hasAttr("staged_at")) return;
  if (!gpu) fail(op, "has pipeline-schedule's attributes in a function not marked {gpu = true}");
  const Op* loop = op.parentOp();
  if (!loop || loop->kind() != OpKind::For || !loop->hasAttr("pipeline_stages"))
    fail(op, "is staged (staged_at) outside a loop with pipeline_stages");
  requireAttr(op, "staged_at", 1);
  requireAttr(op, "staged_tile", 4);
  requireAttr(op, "staged_copy", 3);
  if (op.hasAttr("staged_read_back")) requireAttr(op, "staged_read_back", 0);
  const std::vector<int64_t>& t = op.intsAttr("staged_tile");
  const Type& r = op.result()->type();
  if (t.size() != 4 || t[0] * t[1] != r.numel() || (t[3] != 0 && t[3] != 32 && t[3] != 64 && t[3] != 128))
    fail(op, "staged_tile must be [rows, cols, element bytes, swizzle 0/32/64/128] holding " + r.str());
  const std::string& copy = op.strAttr("staged_copy");
  if (copy != "tma" && copy != "cp.async")
    fail(op, "staged_copy must be \"tma\" or \"cp.async\", got \"" + copy + "\"");
  int64_t end = op.intAttr("staged_at") + t[0] * t[1] * t[2];
  if (op.intAttr("staged_at") < 0 || end > loop->intAttr("pipeline_stage_bytes"))
    fail(op, "is staged at bytes outside its loop's stage of " + std::to_string(loop->intAttr("pipeline_stage_bytes")));
}

}  // namespace

void verifyGpuFunc(const Op& func) {
  if (func.hasAttr("gpu")) requireAttr(func, "gpu", 0);
  if (!isGpuStage(func)) return;
  requireAttr(func, "arch", 3);
  requireAttr(func, "num_warps", 1);
  int64_t w = func.intAttr("num_warps");
  if (!isPow2(w) || w > 32) fail(func, "num_warps must be a power of two from 1 to 32, got " + std::to_string(w));
}

void checkStage(const Op& op, const Op* func) {
  bool gpu = func && isGpuStage(*func);
  if (op.has(GpuLevel) && !gpu)
    fail(op, "is a GPU-stage op; only functions marked {gpu = true} (plan-layouts) may hold it");
  auto check = [&](const Type& t) {
    if (!gpu) {
      if (t.hasLayout() || t.isSmem() || t.isToken())
        fail(op, "has the GPU-stage type " + t.str() + " in a function not marked {gpu = true}");
      return;
    }
    if (t.isTile() && !t.dist()) fail(op, "needs a distributed layout on " + t.str() + " in the GPU stage");
    if (t.isTile()) checkDist(op, t, numWarps(*func));
    if (t.isSmem()) checkSmem(op, t);
  };
  for (Value* r : op.results()) check(r->type());
  for (unsigned r = 0; r < op.numRegions(); ++r)
    for (Value* a : op.region(r).args()) check(a->type());
  if (op.kind() == OpKind::Func)
    for (const Type& t : funcResultTypes(op)) check(t);
  if (op.kind() == OpKind::MakeDesc) checkTmaAttrs(op, gpu);
  if (op.kind() == OpKind::Load || op.kind() == OpKind::DescLoad) checkStagedAttrs(op, gpu);
  if (op.hasAttr("ws_role")) {
    requireAttr(op, "ws_role", 3);
    const std::string& role = op.strAttr("ws_role");
    if (role != "producer" && role != "consumer") fail(op, "ws_role must be \"producer\" or \"consumer\", got \"" + role + "\"");
    const Op* p = op.parentOp();
    while (p && p->kind() != OpKind::WarpSpecialize) p = p->parentOp();
    if (!p) fail(op, "has a ws_role outside a warp_specialize body");
  }
  if (op.kind() == OpKind::For && op.hasAttr("pipeline_stages")) {
    if (!gpu) fail(op, "has pipeline-schedule's attributes in a function not marked {gpu = true}");
    requireAttr(op, "pipeline_stages", 1);
    requireAttr(op, "pipeline_stage_bytes", 1);
    if (op.intAttr("pipeline_stages") < 2 || op.intAttr("pipeline_stages") > 8)
      fail(op, "pipeline_stages must be from 2 to 8, got " + std::to_string(op.intAttr("pipeline_stages")));
    if (op.hasAttr("ring_at")) {  // allocate-shared's placement of the ring
      const Op* f = enclosingFunc(op);
      int64_t end = op.intAttr("ring_at") + op.intAttr("pipeline_stages") * op.intAttr("pipeline_stage_bytes");
      int64_t rings = f && f->hasAttr("smem_rings") ? f->intAttr("smem_rings") : 0;
      if (op.intAttr("ring_at") < 0 || end > rings)
        fail(op, "ring_at places the ring outside the function's smem_rings of " + std::to_string(rings) + " bytes");
    }
  }
}

void verifyGpuOp(const Op& op) {
  switch (op.kind()) {
    case OpKind::ConvertLayout: {
      const Type& in = op.operand(0)->type();
      const Type& out = op.result()->type();
      if (!in.isTile()) fail(op, "operand must be a tile, got " + in.str());
      if (out.withoutLayout() != in.withoutLayout())
        fail(op, "result must be " + in.withoutLayout().str() + " in another layout, got " + out.withoutLayout().str());
      if (out == in) fail(op, "converts to the layout its operand already has");
      return;
    }
    case OpKind::SmemAlloc:
      if (!op.result()->type().isSmem())
        fail(op, "result must be a shared-memory buffer smem<...>, got " + op.result()->type().str());
      if (op.hasAttr("smem_at")) intAttrAtLeast(op, "smem_at", 0);  // allocate-shared's placement
      if (op.hasAttr("barrier_slot")) {  // of mbarriers: the first of their 8-byte slots below 1024 bytes
        const Type& t = op.result()->type();
        if (t.shared()) fail(op, "barrier_slot places mbarriers, but " + t.str() + " holds a tile");
        intAttrAtLeast(op, "barrier_slot", 0);
        if ((op.intAttr("barrier_slot") + t.shape[0]) * 8 > 1024)
          fail(op, "barrier_slot " + std::to_string(op.intAttr("barrier_slot")) + " puts " + t.str() +
                       " past the 128 mbarrier slots");
      }
      return;
    case OpKind::LocalStore: {
      const Type& buf = tileBuffer(op, 0, "buffer");
      indexOperand(op, 1, "stage");
      if (op.hasAttr("transposed")) requireAttr(op, "transposed", 0);
      if (!op.hasAttr("transposed") || !op.boolAttr("transposed"))
        return bufferTile(op, buf, op.operand(2)->type(), "value");
      if (buf.rank() != 2) fail(op, "transposed needs a 2-D buffer, got " + buf.str());
      bufferTile(op, Type::smem(buf.elem, {buf.shape[1], buf.shape[0]}), op.operand(2)->type(), "transposed value");
      return;
    }
    case OpKind::Barrier:
    case OpKind::FenceAsyncShared:
      return;
    case OpKind::LocalLoad: {
      const Type& buf = tileBuffer(op, 0, "buffer");
      indexOperand(op, 1, "stage");
      bufferTile(op, buf, op.result()->type(), "result");
      return;
    }
    case OpKind::AsyncCopy:
      return verifyAsyncCopy(op);
    case OpKind::AsyncCommit:
      for (unsigned i = 0; i < op.numOperands(); ++i) token(op, i, {OpKind::AsyncCopy});
      return resultToken(op, 0);
    case OpKind::AsyncWait: {
      intAttrAtLeast(op, "pending", 0);
      token(op, 0, {OpKind::AsyncCommit, OpKind::TmaStore});
      OpKind first = producer(op.operand(0))->kind();
      for (unsigned i = 1; i < op.numOperands(); ++i) token(op, i, {first});
      return;
    }
    case OpKind::TmaLoad:
    case OpKind::TmaStore: {
      bool load = op.kind() == OpKind::TmaLoad;
      const Type& d = op.operand(0)->type();
      if (!d.isDesc()) fail(op, "first operand must be a tensor descriptor, got " + d.str());
      const Type& buf = tileBuffer(op, 1, "buffer");
      bool bytes = isInt(d.elem) && bitWidth(buf.elem) == bitWidth(d.elem);  // as async_copy's
      if ((buf.elem != d.elem && !bytes) || buf.shape != d.shape)
        fail(op, "buffer must hold the descriptor's block " + Type::tile(d.elem, d.shape).str() + ", got " +
                     buf.withoutLayout().str());
      indexOperand(op, 2, "stage");
      unsigned first = load ? 5 : 3;
      if (load) {
        barriers(op, 3);
        indexOperand(op, 4, "mbarrier");
      }
      if (op.numOperands() - first != d.shape.size())
        fail(op, "needs " + std::to_string(d.shape.size()) + " offsets for " + d.str());
      for (unsigned i = first; i < op.numOperands(); ++i) indexOperand(op, i, "offsets");
      if (!load) resultToken(op, 0);
      return;
    }
    case OpKind::MbarrierInit:
    case OpKind::MbarrierExpect:
    case OpKind::MbarrierArrive:
    case OpKind::MbarrierWait:
      barriers(op, 0);
      indexOperand(op, 1, "mbarrier");
      if (op.kind() == OpKind::MbarrierInit) intAttrAtLeast(op, "count", 1);
      if (op.kind() == OpKind::MbarrierExpect) intAttrAtLeast(op, "bytes", 1);
      if (op.kind() == OpKind::MbarrierWait) indexOperand(op, 2, "phase");
      return;
    case OpKind::Wgmma:
      return verifyWgmma(op);
    case OpKind::WgmmaWait:
      intAttrAtLeast(op, "pending", 0);
      token(op, 0, {OpKind::Wgmma});
      if (op.numResults() != op.numOperands() - 1)
        fail(op, "has one result per waited value (" + std::to_string(op.numOperands() - 1) + "), got " +
                     std::to_string(op.numResults()));
      for (unsigned i = 1; i < op.numOperands(); ++i)
        if (op.result(i - 1)->type() != op.operand(i)->type())
          fail(op, "result #" + std::to_string(i - 1) + " must be " + op.operand(i)->type().str() + ", got " +
                       op.result(i - 1)->type().str());
      return;
    case OpKind::WarpSpecialize: {
      intAttrAtLeast(op, "producer_warps", 1);
      if (op.hasAttr("consumer_groups")) {
        intAttrAtLeast(op, "consumer_groups", 1);
        if (op.intAttr("consumer_groups") > 2)
          fail(op, "consumer_groups must be 1 or 2, got " + std::to_string(op.intAttr("consumer_groups")));
      }
      const Op* parent = op.parentOp();
      if (!parent || parent->kind() != OpKind::Func) fail(op, "must be in a function's body, not in a loop or if");
      const Block& body = op.region(0);
      if (body.numArgs() || !body.terminator() || body.terminator()->kind() != OpKind::Yield ||
          body.terminator()->numOperands())
        fail(op, "body takes no arguments and ends in an empty yield");
      return;
    }
    default:
      throw InternalError("no verifier for " + opName(op));
  }
}

// Elementwise ops compute in their result's layout; loads, stores and atomics in their
// pointers'; a dot's accumulator is in its result's. Other tile ops take operands in any
// layout (the lowering moves what it reads).
void verifyTileOpLayouts(const Op& op) {
  auto same = [&](unsigned i, const Type& ref, const std::string& whose) {
    const Type& t = op.operand(i)->type();
    if (t.isTile() && t.layout != ref.layout)
      fail(op, nth(i) + " must be in " + whose + " layout " + layoutStr(ref.layout) + ", got " + layoutStr(t.layout));
  };
  const Type& r = op.numResults() ? op.result(0)->type() : Type{};
  switch (accessKind(op)) {
    case OpKind::Hint:
      return same(0, r, "the result's");
    case OpKind::Load:
    case OpKind::Store: {
      const Type& p = op.operand(0)->type();
      for (unsigned i = 1; i < op.numOperands(); ++i) same(i, p, "the pointers'");
      if (r.isTile() && r.layout != p.layout)
        fail(op, "result must be in the pointers' layout " + layoutStr(p.layout) + ", got " + layoutStr(r.layout));
      return;
    }
    case OpKind::Dot:
    case OpKind::DotScaled:
      return same(op.numOperands() - 1, r, "the result's");
    default:
      if (op.has(Elementwise) && r.isTile())
        for (unsigned i = 0; i < op.numOperands(); ++i) same(i, r, "the result's");
  }
}

}  // namespace tilefuse::verifier
