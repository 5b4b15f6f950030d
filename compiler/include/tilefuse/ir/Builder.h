// The builder: holds the insertion point and the current source location,
// infers result types and inserts the broadcasts and casts that Triton's
// semantics imply. Type errors are UserErrors at the current location.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse {

// Triton's cache and eviction hints of a load or store, as the op's attrs (the verifier's
// checkHints: the values each takes, one kind at most); empty: none. They change no result.
struct MemoryHints {
  std::string cache;        // load: "ca", "cg", "cv"; store: "wb", "cg", "cs", "wt"
  std::string evict;        // "evict_first", "evict_last"
  bool isVolatile = false;  // load only
};

class Builder {
 public:
  explicit Builder(Module& m) : module_(m) {}

  Module& module() { return module_; }

  // Location.
  void setLoc(Location l) { loc_ = l; }
  const Location& loc() const { return loc_; }

  // Insertion point.
  void setInsertionPointToEnd(Block& b) { block_ = &b; pos_ = b.ops().end(); }
  void setInsertionPointBefore(Op* op);
  Block* insertionBlock() const { return block_; }

  // Functions. The new function's body becomes the insertion point.
  Op* createFunc(const std::string& name, const std::vector<Type>& params, const std::vector<Type>& results,
                 bool isKernel);

  // Generic creation: checks the arity against Ops.def, no inference.
  Op* create(OpKind kind, const std::vector<Value*>& operands, const std::vector<Type>& resultTypes,
             std::map<std::string, Attr> attrs = {});

  // Constants.
  Value* constInt(int64_t v, Type t);
  Value* constFloat(double v, Type t);
  Value* i32(int64_t v) { return constInt(v, Type::scalar(DType::I32)); }

  // Arithmetic with Triton's promotion and broadcasting. `kind` is one of the
  // binary Elementwise ops (Add ... Max).
  Value* binary(OpKind kind, Value* a, Value* b);
  Value* neg(Value* a);
  Value* fma(Value* a, Value* b, Value* c);
  Value* cmp(const std::string& predicate, Value* a, Value* b);
  Value* select(Value* cond, Value* a, Value* b);
  Value* unary(OpKind kind, Value* a);  // math ops (Exp ... Abs)
  Value* cast(Value* v, DType to, const std::string& rounding = "rne", Value* randBits = nullptr);
  Value* bitcast(Value* v, Type to);
  Value* ptrAdd(Value* ptr, Value* offset);

  // Tile ops.
  Value* arange(int64_t start, int64_t end);
  Value* splat(Value* v, const std::vector<int64_t>& shape);
  Value* broadcastTo(Value* v, const std::vector<int64_t>& shape);
  Value* expandDims(Value* v, int axis);
  Value* reshape(Value* v, const std::vector<int64_t>& shape);
  Value* trans(Value* v, std::vector<int64_t> perm = {});
  // Empty lists leave that fact out; one value applies to every dim.
  Value* hint(Value* v, std::vector<int64_t> divisibility, std::vector<int64_t> contiguity);
  Value* join(Value* a, Value* b);
  std::pair<Value*, Value*> split(Value* v);
  Value* full(const std::vector<int64_t>& shape, double value, DType d);

  // Grid.
  Value* programId(int axis);
  Value* numPrograms(int axis);

  // Memory (hints: MemoryHints).
  Value* load(Value* ptr, Value* mask = nullptr, Value* other = nullptr, const MemoryHints& hints = {});
  void store(Value* ptr, Value* value, Value* mask = nullptr, const MemoryHints& hints = {});
  // sem: "" (relaxed) or a Triton sem ("acq_rel", "acquire", "release", "relaxed");
  // scope: "" (gpu) or "gpu", "cta", "sys".
  Value* atomic(OpKind kind, Value* ptr, Value* value, Value* mask = nullptr, const std::string& sem = "",
                const std::string& scope = "");
  Value* atomicCas(Value* ptr, Value* cmp, Value* value, const std::string& sem = "", const std::string& scope = "");
  void debugBarrier();
  Value* makeDesc(Value* base, const std::vector<Value*>& sizes, const std::vector<Value*>& strides,
                  const std::vector<int64_t>& blockShape);
  Value* descLoad(Value* desc, const std::vector<Value*>& offsets);
  void descStore(Value* desc, Value* value, const std::vector<Value*>& offsets);

  // Reductions and products.
  Value* reduce(OpKind kind, Value* v, int axis);
  // tl.dot: 2-D or 3-D; precision "ieee", "tf32" or "tf32x3" (for f32 operands);
  // outType F16 gives f16 and fp8 operands an f16 accumulator (Triton's out_dtype).
  Value* dot(Value* a, Value* b, Value* acc, const std::string& precision = "ieee", DType outType = DType::F32);
  // reduce / scan (Reduce or Scan) of `values` along `axis` with a combine region whose
  // arguments (acc..., x...) are added; fill it and end it with combineYield.
  Op* createCombine(OpKind kind, const std::vector<Value*>& values, int axis, bool reverse);
  void combineYield(const std::vector<Value*>& values);
  Value* gather(Value* src, Value* index, int axis);
  Value* histogram(Value* x, int64_t numBins, Value* mask);
  Value* dotScaled(Value* a, Value* aScale, Value* b, Value* bScale, Value* acc);

  // Control flow. The returned op's regions are empty blocks (with their
  // arguments added); fill them by moving the insertion point into them.
  Op* createFor(Value* lb, Value* ub, Value* step, const std::vector<Value*>& inits);
  Op* createIf(Value* cond, const std::vector<Type>& resultTypes);
  Op* createWhile(const std::vector<Value*>& inits, const std::vector<Type>& afterTypes);
  void yield(const std::vector<Value*>& values);
  void condition(Value* cond, const std::vector<Value*>& values);
  void ret(const std::vector<Value*>& values);
  std::vector<Value*> call(const std::string& callee, const std::vector<Value*>& args);

  // Debug.
  void print(const std::string& prefix, const std::vector<Value*>& values);
  void assertTrue(Value* cond, const std::string& message);

  // Promotion and broadcasting helpers, also used by the frontend.
  std::pair<Value*, Value*> broadcastPair(Value* a, Value* b);
  Value* castTo(Value* v, DType d);  // no-op when already of dtype d
  std::optional<DType> promote(DType a, DType b, OpKind kind) const;

  [[noreturn]] void fail(const std::string& message) const;

 private:
  Module& module_;
  Block* block_ = nullptr;
  Block::OpList::iterator pos_;
  Location loc_;
};

}  // namespace tilefuse
