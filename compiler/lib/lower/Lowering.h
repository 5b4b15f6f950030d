// The lowering of one kernel from tile IR to LLVM IR (nvptx64); its methods are
// split by area: LowerToLLVM.cpp (kernel, layouts of values, control flow,
// elementwise dispatch), LowerArith.cpp (arithmetic, math, casts and rounding),
// LowerMemory.cpp, LowerReduce.cpp, LowerDot.cpp (mma.sync and FMA dots),
// LowerWgmma.cpp (Hopper dots), LowerPipeline.cpp (the ops of pipelined K loops) and
// LowerCall.cpp (noinline functions). It lowers GPU-stage IR: every layout is a
// type's, written by plan-layouts from Layout.cpp's plan.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "Layout.h"
#include "PipelinePlan.h"
#include "Staging.h"
#include "WarpSpecialize.h"
#include "tilefuse/interp/Formats.h"
#include "tilefuse/lower/AxisInfo.h"
#include "tilefuse/lower/LowerToLLVM.h"

namespace tilefuse::lower::detail {

using llvm::IRBuilder;
using LVal = llvm::Value;

// The per-thread registers of one tile-IR value: one LLVM value per slot of its
// layout. A tensor descriptor keeps [base, sizes..., strides...] (uniform scalars).
struct Regs {
  std::vector<LVal*> e;
  Layout L;
  bool undef = false;  // a value the warp-specialized producer does not compute
};

// The PTX name of a tensor-core operand type (bf16, f16, e4m3, e5m2 or s8).
inline std::string mmaTypeName(DType d) {
  switch (d) {
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F8E4M3:
      return "e4m3";
    case DType::F8E5M2:
      return "e5m2";
    case DType::F32:  // f32 operands on tensor cores are tf32 values
      return "tf32";
    default:
      return "s8";
  }
}
// Shared bytes [0, kBarrierBytes) hold the mbarriers of kernels with tensor maps.
constexpr int64_t kBarrierBytes = 1024;

// One wgmma group's operands as they lie in shared memory: A [M, K] or [K, M]
// (mMajor, 16-bit types), B [N, K] (kMajor) or [K, N]; `promote`: fp8, its products added in fp32 every 128 of K (or
// per scale block), the group waited for as it goes; `fresh`: the accumulator is zero,
// so the first instruction starts the sum (scale-d off) instead of reading registers.
struct WgmmaGroup {
  DType a, b;
  int64_t m, k, n;
  SharedTile ta, tb;
  bool kMajor, promote;
  bool fresh = false, mMajor = false;
};

// The e8m0 scale tables of a dot_scaled of fp8 ([M, K/32] and [N, K/32]), decoded to
// fp32 in shared memory from byte `at`, A's then B's; or, `inRegs`, the codes `ra` and
// `rb` in scaleTableLayout (each thread's own rows and columns). `chunk`: the K run
// promoted at once.
struct ScaleTables {
  int64_t at;
  Type a, b;
  int64_t chunk;
  bool inRegs = false;
  Regs ra, rb;
};

class Lowering {
 public:
  Lowering(llvm::LLVMContext& ctx, llvm::Module& mod, const LowerOptions& opts, const Module& module)
      : ctx_(ctx), mod_(mod), b_(ctx), threads_(32 * opts.numWarps), opts_(opts), module_(module) {}

  int sharedBytes() const { return static_cast<int>(smemBytes_); }
  // Threads per block: the num_warps, and a producer warpgroup when warp-specialized.
  int launchThreads() const { return groups_ * threads_ + 32 * producerWarps_; }
  const std::vector<PerfHint>& hints() const { return *hints_; }
  const std::vector<TensorMapSpec>& tensorMaps() const { return tensorMaps_; }
  const std::vector<DebugCheck>& checks() const { return checks_; }
  void lowerKernel(const Op& f);
  // A noinline device function as an LLVM function taking and returning the
  // registers of its arguments and results in its signature's layouts; its shared
  // memory starts at byte `floor`, above the caller's operand buffers.
  llvm::Function* lowerCallee(const Op& f, int64_t floor);

 private:
  // --- types and layout ---

  llvm::Type* elemType(DType d) {
    switch (d) {
      case DType::I1:
        return b_.getInt1Ty();
      case DType::I8:
      case DType::U8:
      case DType::F8E4M3:
      case DType::F8E5M2:
      case DType::E8M0:
      case DType::F4E2M1:
      case DType::F8E4B15:
        return b_.getInt8Ty();
      case DType::I16:
      case DType::U16:
        return b_.getInt16Ty();
      case DType::I32:
      case DType::U32:
        return b_.getInt32Ty();
      case DType::I64:
      case DType::U64:
        return b_.getInt64Ty();
      case DType::F16:
        return b_.getHalfTy();
      case DType::BF16:
        return b_.getBFloatTy();
      case DType::F32:
        return b_.getFloatTy();
      case DType::F64:
        return b_.getDoubleTy();
    }
    throw InternalError("elemType");
  }
  llvm::Type* scalarType(const Type& t) {
    if (t.isPtr()) return llvm::PointerType::get(ctx_, 1);
    return elemType(t.elem);
  }
  static int64_t numel(const Type& t) { return t.isTile() ? t.numel() : 1; }
  static int slots(const Layout& l) { return l.slots(); }
  LVal* idx(int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); }
  // The layout of v's type (plan-layouts wrote it; remat() relabels for a moment).
  const Layout& layoutOf(const Value* v) {
    auto it = layouts_.find(v);
    if (it == layouts_.end()) it = layouts_.emplace(v, typeLayout(v->type())).first;
    return it->second;
  }
  Layout typeLayout(const Type& t) const { return detail::typeLayout(t, threads_); }
  // Flat element index of slot s in this thread.
  LVal* flatIndex(const Layout& l, int s) { return b_.CreateAdd(threadPart(l), idx(l.slotPart(s)), "", true, true); }
  // Whether slot s is the copy that performs side effects (static), and whether this
  // thread holds that copy (dynamic).
  static bool slotOwned(const Layout& l, int s) {
    for (size_t i = 0; i < l.reg.size(); ++i)
      if ((s >> i & 1) && l.reg[i] == 0) return false;
    return true;
  }
  LVal* owner(const Layout& l);
  Regs shareOwned(const Regs& r, const Type& t);
  LVal* threadPart(const Layout& l);
  // Registers of `v` in layout `l`: copied (scalars, constants, splats), relabeled,
  // recomputed (index math) or moved through shared memory (convert).
  Regs in(const Value* v, const Layout& l);
  Regs convert(const Regs& r, const Type& t, const Layout& to);
  Regs exchange(const Regs& r, const Type& t, const Layout& to);
  bool rematerializable(const Value* v, int& budget);
  Regs remat(const Value* v, const Layout& l);
  static Layout sliceLayout(const Layout& l, const std::vector<int64_t>& to, const std::vector<int64_t>& from);
  // Coordinate `d` of flat index e in a row-major shape of power-of-two dims.
  LVal* coord(LVal* e, const std::vector<int64_t>& shape, size_t d) {
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    return b_.CreateAnd(b_.CreateLShr(e, idx(__builtin_ctzll(inner))), idx(shape[d] - 1));
  }
  LVal* flatten(const std::vector<LVal*>& c, const std::vector<int64_t>& shape) {
    LVal* e = idx(0);
    for (size_t d = 0; d < shape.size(); ++d) e = b_.CreateAdd(b_.CreateMul(e, idx(shape[d])), c[d]);
    return e;
  }

  const Regs& get(const Value* v) {
    auto it = vals_.find(convertSource(v));
    if (it == vals_.end()) throw InternalError("lowering: value used before definition");
    return it->second;
  }
  // Records that `op` misses a fast path, and why (once per op and message).
  void hint(const Op& op, const std::string& message) {
    for (const PerfHint& h : *hints_)
      if (h.message == message && h.loc == op.loc()) return;
    hints_->push_back({op.loc(), message});
  }
  [[noreturn]] void unsupported(const Op& op, const std::string& what) {
    throw UserError(op.loc(), "the GPU backend does not lower " + what + " yet (the interpreter runs it)");
  }

  // --- shared memory round trips ---

  llvm::GlobalVariable* smem() {
    if (!smem_) {
      auto* ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
      smem_ = new llvm::GlobalVariable(mod_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr, "tf_smem", nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 3);
      smem_->setAlignment(llvm::Align(1024));  // swizzled wgmma operands need 1024-byte atoms
    }
    return smem_;
  }
  // The type an element of `t` takes in shared memory: i1 as a byte, pointers as pointers.
  llvm::Type* smemType(const Type& t) {
    if (t.isPtr()) return llvm::PointerType::get(ctx_, 1);
    return t.elem == DType::I1 ? b_.getInt8Ty() : elemType(t.elem);
  }
  int storeBytes(const Type& t) { return static_cast<int>(mod_.getDataLayout().getTypeAllocSize(smemType(t))); }
  LVal* smemAddr(int64_t base, LVal* index, const Type& t) {
    LVal* off = b_.CreateAdd(idx(scratchBase() + base), b_.CreateMul(index, idx(storeBytes(t))));
    return b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), off);
  }
  // Shared memory as the scratch space's users address it: ping-pong consumer groups
  // each have their own copy of the scratch space (groupBase_).
  LVal* scratchSpace() { return groupBase_ ? groupBase_ : smem(); }
  // bar.sync of the block, or of the warps of this role in a warp-specialized kernel
  // (named barriers: 1 + consumer group, then the producer's; the other warps run on).
  void barrier() {
    if (role_ == Role::All) return (void)b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
    if (role_ == Role::Producer)
      return ptx("bar.sync " + std::to_string(1 + groups_) + ", " + std::to_string(32 * producerWarps_) + ";");
    namedBarrier("bar.sync", b_.CreateAdd(cg_, idx(1)), threads_);
  }
  void namedBarrier(const std::string& op, LVal* id, int threads);
  bool isBool(const Type& t) { return !t.isPtr() && t.elem == DType::I1; }
  // Writes every element of `r` (type t) at scratch[base + flat * size]; copies write equal values.
  void toSmem(const Regs& r, const Type& t, int64_t base) { toSmemAt(r, t, scratchBase() + base); }
  // The same at shared byte `at` (not relative to the scratch space).
  void toSmemAt(const Regs& r, const Type& t, int64_t at) {
    smemBytes_ = std::max<uint64_t>(smemBytes_, at + numel(t) * storeBytes(t));
    for (int s = 0; s < slots(r.L); ++s) {
      if (!slotOwned(r.L, s)) continue;
      LVal* v = isBool(t) ? b_.CreateZExt(r.e[s], b_.getInt8Ty()) : r.e[s];
      LVal* off = b_.CreateAdd(idx(at), b_.CreateMul(flatIndex(r.L, s), idx(storeBytes(t))));
      b_.CreateStore(v, b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), off));
    }
  }
  LVal* fromSmem(int64_t base, LVal* index, const Type& t) {
    LVal* v = b_.CreateLoad(smemType(t), smemAddr(base, index, t));
    return isBool(t) ? b_.CreateTrunc(v, b_.getInt1Ty()) : v;
  }
  // Result[e] (layout `to`) = source element srcIndex(e), through shared memory.
  Regs gather(const Regs& src, const Type& srcT, const Layout& to, const std::function<LVal*(LVal*)>& srcIndex) {
    barrier();
    toSmem(src, srcT, 0);
    barrier();
    Regs out{{}, to};
    for (int s = 0; s < slots(to); ++s) out.e.push_back(fromSmem(0, srcIndex(flatIndex(to, s)), srcT));
    return out;
  }

  // --- blocks ---

  void lowerBlock(const Block& b) {
    for (const auto& o : b.ops()) {
      if (o->has(Terminator)) continue;
      if (o.get() == orderStart_ && role_ == Role::Consumer) takeTurn();
      if (runs(*o))
        lowerOp(*o);
      else
        for (Value* r : o->results()) vals_[r] = undefRegs(r->type(), layoutOf(r));
      if (o.get() == orderPoint_ && role_ == Role::Consumer) passTurn();
    }
  }
  // Warp specialization (lowerWarpSpecialize): which ops this role runs. A ping-pong
  // group skipping the other's iteration runs the ring position's scalar work only.
  enum class Role { All, Consumer, Producer, Skipper };
  bool runs(const Op& op) const {
    if (role_ == Role::Consumer) return !producerRole(op);
    if (role_ == Role::Producer) return producerOps_.count(&op) > 0;
    if (role_ == Role::Skipper) return skipOps_.count(&op) > 0;
    return true;
  }
  Regs undefRegs(const Type& t, const Layout& l) {
    Regs r{{}, l, true};
    if (t.isToken() || t.isSmem()) return r;
    std::vector<llvm::Type*> types = t.isDesc() ? regTypes(t) : std::vector<llvm::Type*>(slots(l), scalarType(t));
    for (llvm::Type* ty : types) r.e.push_back(llvm::UndefValue::get(ty));
    return r;
  }
  void lowerWarpSpecialize(const Op& op);
  std::vector<Regs> lowerTurn(const Op& loop, LVal* iv, LVal* lb, LVal* ub, LVal* step);
  std::vector<Regs> mergeBranches(const std::vector<Regs>& a, llvm::BasicBlock* aEnd, const std::vector<Regs>& b,
                                  llvm::BasicBlock* bEnd);
  void takeTurn();
  void passTurn();
  void finishGroups();
  std::vector<Regs> inLayouts(const std::vector<Value*>& vals, const std::vector<Value*>& to);
  std::vector<Value*> yieldedValues(const Block& b, unsigned first = 0);

  void lowerOp(const Op& op);
  LVal* arith(const Op& op, const std::vector<LVal*>& a, const Type& t);
  LVal* castElem(const Op& op, LVal* v, const Type& from, const Type& to);
  LVal* castRounded(const Op& op, LVal* v, const Type& from, const Type& to, LVal* rbits);
  LVal* castE4B15(const Op& op, LVal* v, const Type& from, const Type& to);
  LVal* roundToFormat(LVal* x, DType to, const std::string& mode, LVal* rbits);
  LVal* u64ToOddDouble(LVal* v);
  LVal* roundToE8M0(LVal* x, const std::string& mode, LVal* rbits);
  LVal* roundWideToE8M0(LVal* x, const std::string& mode, LVal* rbits);
  LVal* decodeE8M0(LVal* v);
  LVal* decodeF4(LVal* v);
  Regs dequantize(const Op& op, const Type& t, const Regs& vals, const Type& st, const Regs& scales, bool kIsColumn);
  void lowerDotScaled(const Op& op);
  LVal* mathCall(const Op& op, const char* f32name, const char* f64name, std::vector<LVal*> xs, DType d);
  LVal* exactInF32(llvm::Intrinsic::ID id, std::vector<LVal*> xs, DType d);
  void lowerMemory(const Op& op);
  LVal* ptxAtomic(const Op& op, DType d, LVal* ptr, LVal* v, LVal* cmp);
  LVal* hintedAccess(const Op& op, llvm::Type* ty, LVal* ptr, LVal* value, int64_t bytes);
  void lowerVectorAccess(const Op& op, const Regs& p, const Regs* mask, const Regs* other, const Regs& value,
                         int64_t width, Regs& out);
  // Slots s .. s+n-1 of `r` as one LLVM vector (for a vector load or store).
  LVal* packSlots(const Regs& r, int s, int n) {
    LVal* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(r.e[s]->getType(), n));
    for (int i = 0; i < n; ++i) v = b_.CreateInsertElement(v, r.e[s + i], b_.getInt32(i));
    return v;
  }
  // What the axis analysis knows of the accesses through pointer tile `ptr`, for a hint
  // (PipelinePlan.h).
  std::string accessReason(const Value* ptr, const Value* mask) {
    return detail::accessReason(*axis_, ptr, mask, threads_);
  }
  void lowerDesc(const Op& op);
  void lowerCheckedDesc(const Op& op);
  // --- TILEFUSE_DEBUG bounds checks (LowerMemory.cpp) ---
  // The index in checks_ of `op`'s accesses through pointer (or descriptor) `ptr`; -1
  // when not checked (not a debug build, or a pointer not derived from one argument).
  int debugCheck(const Op& op, const Value* ptr);
  int rootParam(const Value* v, std::set<const Value*>& seen) const;
  // Whether slot s's access at `addr` lies in its buffer; reports it when not and
  // `active` (null: always).
  LVal* inBounds(int check, LVal* addr, const Layout& L, int s, LVal* active);
  llvm::Function* reportFn();
  // --- TMA (LowerTma.cpp) ---
  void planTensorMaps(const Op& f);
  int tensorMapOf(const Value* desc) const;  // -1: bounds-checked accesses
  LVal* tensorMapAddr(int map);
  LVal* barrierAddr(LVal* slot);
  void initBarriers();
  void armBarrier(LVal* bar, int64_t bytes, LVal* issue);
  void waitBarrier(LVal* bar, LVal* parity);
  void tmaCopy(int map, const Type& t, LVal* smemAddr, const std::vector<LVal*>& coords, LVal* bar, LVal* issue);
  LVal* tileOffset(LVal* e, const Type& t, int map);
  Regs readTile(int64_t base, const Type& t, const Layout& L, int map);
  void writeTile(int64_t base, const Type& t, const Regs& r, int map);
  std::vector<LVal*> descCoords(const Op& op, unsigned first);
  void lowerTmaLoad(const Op& op, int map);
  void lowerTmaStore(const Op& op, int map);
  void lowerReduce(const Op& op);
  bool lowerReduceByShuffles(const Op& op);
  bool lowerReduceInWarps(const Op& op);
  LVal* reduceCombine(OpKind k, DType d, LVal* a, LVal* x);
  void acrossWarps(const Op& op, const Layout& in, const Layout& want, std::vector<LVal*>& acc);
  void lowerCombine(const Op& op);
  std::vector<LVal*> combineRegion(const Op& op, const std::vector<LVal*>& acc, const std::vector<LVal*>& x);
  void lowerGather(const Op& op);
  void lowerHistogram(const Op& op);
  void lowerDot(const Op& op);
  void hintDot(const Op& op, const std::string& whyNotWgmma);
  Regs dotRegs(const Op& op, const Type& at, const Regs& aRegs, const Type& bt, const Regs& bRegs, const Regs& acc,
               const Type& ct);
  Regs dotByMma(const Type& at, const Type& bt, const Type& ct, const Regs& acc, int64_t aBytes);
  // Whether `op` is a dot on wgmma: plan-layouts gave its result the #wgmma layout
  // (its tiling in `w`; else `why` says why wgmma does not apply, for a hint).
  bool onWgmma(const Op& op, WgmmaShape* w = nullptr, std::string* why = nullptr) {
    if (op.kind() != OpKind::Dot && op.kind() != OpKind::DotScaled) return false;
    bool planned = onWgmmaLayout(op);
    WgmmaShape unused;
    bool applies = wgmmaApplies(op, opts_.arch, threads_, w ? w : &unused, planned ? nullptr : why);
    if (planned && !applies) throw InternalError("lowering: a dot in a #wgmma layout that wgmma cannot run");
    return planned;
  }
  WgmmaB wgmmaB(const Op& dot) const { return detail::wgmmaB(dot, threads_); }
  SharedTile wgmmaOperandTile(const Op& dot, unsigned which, const WgmmaShape& w) const {
    return detail::wgmmaOperandTile(dot, which, w, threads_);
  }
  WgmmaOperandBytes wgmmaOperandBytes(const Op& dot) const { return detail::wgmmaOperandBytes(dot, threads_); }
  void reserveWgmmaOperands(const Block& body);
  void stageOperand(const Regs& r, const Type& t, LVal* base, bool transpose, const SharedTile& tile);
  Regs readStaged(const Type& t, const Layout& L, LVal* base, const SharedTile& tile);
  LVal* swizzledOffset(LVal* row, LVal* col, const SharedTile& tile);
  // `scaled`: the scale tables of a dot_scaled on fp8; `accumulate`: an i1, false to
  // take D = A B in the group's first K step (restart-accumulators).
  // tid_ / 128, broadcast from lane 0 in the entry block: warp-uniform to ptxas, so
  // that what derives from it (wgmma descriptors) lives in uniform registers.
  LVal* warpgroupIndex();
  Regs issueWgmma(const WgmmaGroup& g, const WgmmaShape& w, Regs acc, LVal* aBase, LVal* bBase,
                  const ScaleTables* scaled = nullptr, LVal* accumulate = nullptr);
  // The GPU-stage ops of staged dots (stage-dot-operands), each from its operands' types.
  void lowerSmemOp(const Op& op);
  LVal* stageAddr(const Op& op, unsigned buf);
  ScaleTables stageScales(const Value* sa, const Value* sb, int64_t chunk, const Layout& acc, int64_t n);
  // The decoded scale of `table`'s line `line` (a fragment line's constant part) and K block.
  LVal* scaleInRegs(const Regs& table, int64_t kb, int64_t line, int64_t block);
  LVal* scaleOf(int64_t table, const Type& t, LVal* row, int64_t block);
  // A layout's distinct rows and columns in this thread, and each slot's among them.
  struct FragmentLines {
    std::vector<LVal*> rows, cols;
    std::vector<int64_t> rowConst, colConst;  // each line's part from the slot
    std::vector<int> rowOf, colOf;
  };
  FragmentLines fragmentLines(const Layout& l, int64_t n);
  // The ops of expanded pipelines (LowerPipeline.cpp).
  void lowerAsyncOp(const Op& op);
  void asyncCopy(const Op& op);
  void cpAsyncRuns(const StagedCopy& l, const Regs& ptrs, const Regs& mask, const std::vector<int64_t>& shape,
                   LVal* base, LVal* valid);
  LVal* sharedStage(const Value* buf, const Value* stage);
  void ptx(const std::string& text);
  Regs waitWgmma(const Regs& r, int pending, bool alone = false);
  Regs pinRegs(const Regs& r);
  // f16 values in pairs as the i32 registers (f16x2) that hold them, and back.
  Regs packHalves(const Regs& r);
  Regs unpackHalves(const Regs& r);
  void lowerPrint(const Op& op);
  void lowerAssert(const Op& op);
  std::vector<Regs> loopPhis(const std::vector<Regs>& inits, llvm::BasicBlock* pre);
  void closeLoop(const std::vector<Regs>& phis, const std::vector<Regs>& yields);
  void lowerFor(const Op& op);
  void lowerIf(const Op& op);
  void lowerWhile(const Op& op);
  void lowerCall(const Op& op);
  void analyzeAxes(const Op& f);
  void beginFunction(llvm::Function* fn);
  void endFunction();
  std::vector<llvm::Type*> regTypes(const Type& t);
  // The layout in which a call passes a value of type t (the callee's signature's;
  // descriptors have none).
  Layout callLayout(const Type& t) const { return t.isDesc() ? Layout{} : typeLayout(t); }
  Regs passed(const Value* v);
  Regs received(const Type& t, const std::function<LVal*()>& next);

  // Runs `body` only when `cond`; returns the phi of body's value and `otherwise`.
  LVal* guarded(LVal* cond, const std::function<LVal*()>& body, LVal* otherwise) {
    llvm::BasicBlock* from = b_.GetInsertBlock();
    auto* then = llvm::BasicBlock::Create(ctx_, "g.then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "g.done", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    LVal* v = body();
    llvm::BasicBlock* thenEnd = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    if (!otherwise) return nullptr;
    auto* phi = b_.CreatePHI(otherwise->getType(), 2);
    phi->addIncoming(v, thenEnd);
    phi->addIncoming(otherwise, from);
    return phi;
  }

  // Emits `for (k = from; k < to; ++k) carried = step(k, carried)` as an LLVM loop
  // (not unrolled) and returns the final carried values. Needs from < to.
  std::vector<LVal*> countedLoop(int64_t from, int64_t to, std::vector<LVal*> carried,
                                 const std::function<std::vector<LVal*>(LVal*, const std::vector<LVal*>&)>& step) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.done", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    auto* k = b_.CreatePHI(b_.getInt32Ty(), 2);
    k->addIncoming(idx(from), pre);
    std::vector<llvm::PHINode*> phis;
    std::vector<LVal*> cur;
    for (LVal* v : carried) {
      phis.push_back(b_.CreatePHI(v->getType(), 2));
      phis.back()->addIncoming(v, pre);
      cur.push_back(phis.back());
    }
    std::vector<LVal*> next = step(k, cur);
    LVal* k1 = b_.CreateAdd(k, idx(1));
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    k->addIncoming(k1, latch);
    for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
    b_.CreateCondBr(b_.CreateICmpSLT(k1, idx(to)), loop, exit);
    b_.SetInsertPoint(exit);
    return next;  // defined in the loop block, which dominates the exit
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  IRBuilder<> b_;
  int threads_;
  LowerOptions opts_;
  const Module& module_;
  llvm::Function* fn_ = nullptr;
  LVal* tid_ = nullptr;
  std::map<LVal*, LVal*> warpgroups_;  // warpgroupIndex() per tid_ (roles rebase it)
  Role role_ = Role::All;
  int producerWarps_ = 0;            // a warp-specialized kernel's producer warps
  bool maxnreg_ = false;             // the kernel caps its registers (launch option)
  std::set<const Op*> producerOps_;  // what they run (WarpSpecialize.h)
  // Ping-pong consumers ({consumer_groups = 2}): the group (tid / threads_), its scratch
  // space (smem + group x the scratch's size, a constant set once all is lowered), what
  // a group runs of the other's iteration, the ops before which it takes its turn and
  // after which it passes it on, and whether the loop has an iteration before / after.
  int groups_ = 1;
  LVal* cg_ = nullptr;
  LVal* groupBase_ = nullptr;
  llvm::GlobalVariable* groupStride_ = nullptr;
  std::set<const Op*> skipOps_;
  const Op* orderStart_ = nullptr;
  const Op* orderPoint_ = nullptr;
  LVal* hasNext_ = nullptr;
  LVal* notFirst_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  uint64_t smemBytes_ = 0;
  std::unordered_map<const Value*, Regs> vals_;
  std::unordered_map<const Value*, Layout> layouts_;  // of the types, and remat()'s
  std::unique_ptr<AxisAnalysis> axis_;
  llvm::BasicBlock* entry_ = nullptr;  // thread-invariant index math goes here, ahead of the body
  llvm::BasicBlock* start_ = nullptr;
  // Shared memory of the device functions lowered so far, by name (shared by the
  // kernel's lowering and its callees').
  std::shared_ptr<std::map<std::string, int64_t>> calleeSmem_ = std::make_shared<std::map<std::string, int64_t>>();
  std::shared_ptr<std::vector<PerfHint>> hints_ = std::make_shared<std::vector<PerfHint>>();  // shared with callees
  std::map<std::vector<int64_t>, LVal*> threadParts_, owners_;
  // Shared memory: [0, scratch_) holds wgmma operands (pipeline rings, the two stages
  // of dot_scaled, the staged operand buffers). Layout conversions and reductions, one
  // at a time between barriers, use the space after it while operands may be in use (a
  // wgmma in flight, staged operands not yet read, or inside a pipelined loop), and all
  // of shared memory otherwise.
  int64_t scratch_ = 0;
  int64_t floor_ = 0;       // a callee's shared memory starts here
  int pipelinedLoops_ = 0;  // pipelined loops being lowered (their copies in flight)
  // An expanded pipeline's copies issued and not yet complete: cp.async ones until an
  // async_wait {pending = 0}, TMA ones until the end of the loop that consumes them (a
  // prologue's copies are in flight before its loop starts, while its masks convert).
  bool cpAsyncInFlight_ = false, tmaInFlight_ = false;
  bool operandsBusy() const {
    // Warp-specialized, the producer fills its rings at any time.
    return pipelinedLoops_ || cpAsyncInFlight_ || tmaInFlight_ || staging_ || producerWarps_;
  }
  int64_t scratchBase() {
    if (operandsBusy()) return scratch_;
    scratchOverOperands_ = scratch_ > floor_;
    return floor_;
  }
  // Before the first write into the operand space (a copy or a staged operand) after
  // conversions used it as scratch: every thread's reads of that scratch come first,
  // else a fast thread's copy overwrites what a slow thread has yet to read.
  void claimOperandSpace(bool asyncProxy) {
    if (operandsBusy() || !scratchOverOperands_) return;
    scratchOverOperands_ = false;
    barrier();
    if (asyncProxy) ptx("fence.proxy.async.shared::cta;");  // TMA writes through the async proxy
  }
  bool staging_ = false;              // staged operands written, their wgmma not yet waited for
  bool scratchOverOperands_ = false;  // scratch at floor_ used since the operand space was last claimed
  std::vector<TensorMapSpec> tensorMaps_;
  std::unordered_map<const Op*, int> tmaMaps_;  // make_desc -> tensor map
  int barrierSlots_ = 0;
  llvm::AllocaInst* tmaPhase_ = nullptr;  // parity of barrier slot 0
  // Debug builds: the hidden parameters (LowerToLLVM.h, DebugCheck) and the checks so far.
  std::unordered_map<int, LVal*> extents_;  // by pointer parameter
  LVal* record_ = nullptr;
  const Op* kernelOp_ = nullptr;
  std::vector<DebugCheck> checks_;
  std::unordered_map<const Op*, int> checkOf_;
};

}  // namespace tilefuse::lower::detail
