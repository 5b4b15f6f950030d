#include "tilefuse/ir/Builder.h"

#include <algorithm>
#include <numeric>

#include "tilefuse/ir/Verifier.h"

namespace tilefuse {
namespace {

std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int floatRank(DType d) {
  switch (d) {
    case DType::F64: return 3;
    case DType::F32: return 2;
    default: return 1;  // f16, bf16
  }
}

}  // namespace

void Builder::fail(const std::string& message) const { throw UserError(loc_, message); }

void Builder::setInsertionPointBefore(Op* op) {
  block_ = op->parentBlock();
  pos_ = std::find_if(block_->ops().begin(), block_->ops().end(), [&](auto& p) { return p.get() == op; });
}

Op* Builder::create(OpKind kind, const std::vector<Value*>& operands, const std::vector<Type>& resultTypes,
                    std::map<std::string, Attr> attrs) {
  if (!block_) throw InternalError("builder has no insertion point");
  const OpInfo& info = opInfo(kind);
  int n = static_cast<int>(operands.size());
  if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands) ||
      (info.numResults >= 0 && static_cast<int>(resultTypes.size()) != info.numResults))
    throw InternalError("wrong arity building '" + std::string(info.mnemonic) + "'");
  auto op = std::make_unique<Op>(kind, loc_);
  for (Value* v : operands) {
    if (!v) throw InternalError("null operand building '" + std::string(info.mnemonic) + "'");
    op->addOperand(v);
  }
  for (const Type& t : resultTypes) op->addResult(t);
  for (auto& [k, v] : attrs) op->setAttr(k, std::move(v));
  for (int r = 0; r < info.numRegions; ++r) op->addRegion();
  return block_->insert(pos_, std::move(op));
}

namespace {
// Verifies a freshly built op; on failure removes it so the IR stays valid.
Value* checked(Op* op) {
  try {
    verifyOp(*op);
  } catch (...) {
    op->dropAllOperands();
    op->parentBlock()->take(op);
    throw;
  }
  return op->numResults() ? op->result(0) : nullptr;
}
}  // namespace

Op* Builder::createFunc(const std::string& name, const std::vector<Type>& params, const std::vector<Type>& results,
                        bool isKernel) {
  if (module_.lookupFunc(name)) fail("function '" + name + "' is defined twice");
  auto f = std::make_unique<Op>(OpKind::Func, loc_);
  f->setAttr("sym_name", name);
  if (!results.empty()) f->setAttr("results", results);
  if (isKernel) f->setAttr("kernel", true);
  Block& body = f->addRegion();
  for (const Type& t : params) body.addArg(t);
  Op* raw = module_.body().append(std::move(f));
  setInsertionPointToEnd(body);
  return raw;
}

Value* Builder::constInt(int64_t v, Type t) {
  if (!t.isNumeric()) fail("an integer constant needs a numeric type, got " + t.str());
  if (isFloat(t.elem)) return constFloat(static_cast<double>(v), t);
  if (t.elem == DType::I1) v = v != 0;
  // Unsigned constants hold their value (zero-extended), so the IR text reads as written.
  if (isUnsigned(t.elem) && bitWidth(t.elem) < 64) v &= (int64_t{1} << bitWidth(t.elem)) - 1;
  return checked(create(OpKind::Constant, {}, {t}, {{"value", Attr(int64_t(v))}}));
}

Value* Builder::constFloat(double v, Type t) {
  if (!t.isNumeric()) fail("a float constant needs a numeric type, got " + t.str());
  if (isInt(t.elem)) fail("cannot make a " + t.str() + " constant from the float " + attrToString(Attr(v)));
  return checked(create(OpKind::Constant, {}, {t}, {{"value", Attr(v)}}));
}

std::optional<DType> Builder::promote(DType a, DType b, OpKind kind) const {
  if (isStorageOnly(a) || isStorageOnly(b)) return std::nullopt;
  DType r;
  if (a == b) {
    r = a;
  } else if (isInt(a) && isInt(b)) {
    // C's usual arithmetic conversions, as Triton: the wider type, and on equal widths
    // (or a wider unsigned one) the unsigned type.
    int wa = bitWidth(a), wb = bitWidth(b);
    r = isUnsigned(b) && !isUnsigned(a) ? (wb >= wa ? b : a) : (wa >= wb ? a : b);
  } else if (isInt(a) != isInt(b)) {
    r = isInt(a) ? b : a;
  } else if (floatRank(a) != floatRank(b)) {
    r = floatRank(a) > floatRank(b) ? a : b;
  } else {
    r = DType::F32;  // f16 with bf16
  }
  bool logical = kind == OpKind::And || kind == OpKind::Or || kind == OpKind::Xor;
  if (r == DType::I1 && !logical && opInfo(kind).has(Elementwise) && kind != OpKind::Min && kind != OpKind::Max)
    r = DType::I32;
  return r;
}

Value* Builder::castTo(Value* v, DType d) {
  if (v->type().elem == d) return v;
  return cast(v, d);
}

std::pair<Value*, Value*> Builder::broadcastPair(Value* a, Value* b) {
  const auto& sa = a->type().shape;
  const auto& sb = b->type().shape;
  if (sa == sb) return {a, b};
  size_t rank = std::max(sa.size(), sb.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i + sa.size() >= rank ? sa[i + sa.size() - rank] : 1;
    int64_t db = i + sb.size() >= rank ? sb[i + sb.size() - rank] : 1;
    if (da != db && da != 1 && db != 1) fail("cannot broadcast shapes " + shapeStr(sa) + " and " + shapeStr(sb));
    out[i] = std::max(da, db);
  }
  return {broadcastTo(a, out), broadcastTo(b, out)};
}

namespace {

DType signedOf(DType u) {
  return u == DType::U8 ? DType::I8 : u == DType::U16 ? DType::I16 : u == DType::U32 ? DType::I32 : DType::I64;
}

// Triton's words (its tests match them).
std::string signednessMessage(const Type& a, const Type& b) {
  return "Cannot use /, //, or % with " + a.str() + " and " + b.str() +
         " because they have different signedness; this is unlikely to result in a useful answer. Cast them to the "
         "same signedness.";
}

}  // namespace

Value* Builder::binary(OpKind kind, Value* a, Value* b) {
  std::string name(opInfo(kind).mnemonic);
  if (a->type().isDesc() || b->type().isDesc()) fail("'" + name + "' cannot take a tensor descriptor");
  if (a->type().isPtr() || b->type().isPtr()) {
    if (kind == OpKind::Add && a->type().isPtr() && !b->type().isPtr()) return ptrAdd(a, b);
    if (kind == OpKind::Add && b->type().isPtr() && !a->type().isPtr()) return ptrAdd(b, a);
    if (kind == OpKind::Sub && a->type().isPtr() && !b->type().isPtr()) return ptrAdd(a, neg(b));
    fail("'" + name + "' is not defined on pointers " + a->type().str() + " and " + b->type().str());
  }
  DType ea = a->type().elem, eb = b->type().elem;
  if ((kind == OpKind::Div || kind == OpKind::Rem) && isInt(ea) && isInt(eb) && isUnsigned(ea) != isUnsigned(eb))
    fail(signednessMessage(a->type(), b->type()));
  auto d = promote(ea, eb, kind);
  if (!d)
    fail("'" + name + "' does not compute on " + a->type().str() + " and " + b->type().str() +
         "; cast to f16, bf16 or f32 first");
  if (opInfo(kind).has(IntOnly) && !isInt(*d))
    fail("invalid operands of type " + a->type().str() + " and " + b->type().str() + ": '" + name + "' needs integers");
  if (opInfo(kind).has(FloatOnly) && isInt(*d)) d = DType::F32;  // as unary math: ints compute in f32
  a = castTo(a, *d);
  b = castTo(b, *d);
  std::tie(a, b) = broadcastPair(a, b);
  if (kind == OpKind::Shr && isInt(ea) && !isUnsigned(ea) && isUnsigned(*d)) {
    // As Triton: '>>' of a signed left operand shifts arithmetically, also when the
    // promotion made it unsigned (int16 >> uint16 is an arithmetic shift of u16 bits).
    Type s = a->type().withElem(signedOf(*d));
    Value* r = checked(create(kind, {bitcast(a, s), bitcast(b, s)}, {s}));
    return bitcast(r, a->type());
  }
  return checked(create(kind, {a, b}, {a->type()}));
}

Value* Builder::neg(Value* a) {
  if (a->type().isPtr() || a->type().isDesc()) fail("cannot negate " + a->type().str());
  if (a->type().elem == DType::I1) a = castTo(a, DType::I32);
  return checked(create(OpKind::Neg, {a}, {a->type()}));
}

Value* Builder::fma(Value* a, Value* b, Value* c) {
  for (Value* v : {a, b, c})
    if (!v->type().isFloatLike()) fail("'fma' needs floating-point operands, got " + v->type().str());
  auto d = promote(a->type().elem, b->type().elem, OpKind::Fma);
  if (d) d = promote(*d, c->type().elem, OpKind::Fma);
  if (!d) fail("'fma' does not compute on " + a->type().str());
  a = castTo(a, *d);
  b = castTo(b, *d);
  c = castTo(c, *d);
  std::tie(a, b) = broadcastPair(a, b);
  std::tie(a, c) = broadcastPair(a, c);
  std::tie(a, b) = broadcastPair(a, b);
  return checked(create(OpKind::Fma, {a, b, c}, {a->type()}));
}

Value* Builder::cmp(const std::string& predicate, Value* a, Value* b) {
  if (a->type().isPtr() && b->type().isPtr()) {
    std::tie(a, b) = broadcastPair(a, b);
  } else {
    auto d = promote(a->type().elem, b->type().elem, OpKind::Cmp);
    if (!d || a->type().isPtr() || b->type().isPtr())
      fail("cannot compare " + a->type().str() + " with " + b->type().str());
    a = castTo(a, *d);
    b = castTo(b, *d);
    std::tie(a, b) = broadcastPair(a, b);
  }
  // Unsigned operands order as unsigned: the predicate names it (lt -> ult).
  bool order = predicate != "eq" && predicate != "ne" && predicate[0] != 'u';
  std::string pred = order && a->type().isNumeric() && isUnsigned(a->type().elem) ? "u" + predicate : predicate;
  return checked(create(OpKind::Cmp, {a, b}, {Type::tile(DType::I1, a->type().shape)}, {{"predicate", pred}}));
}

Value* Builder::select(Value* cond, Value* a, Value* b) {
  if (cond->type().elem != DType::I1 || !cond->type().isNumeric()) cond = cmp("ne", cond, constInt(0, cond->type().elementType()));
  if (!(a->type().isPtr() && b->type().isPtr())) {
    auto d = promote(a->type().elem, b->type().elem, OpKind::Select);
    if (a->type().elem == b->type().elem) d = a->type().elem;
    if (!d || a->type().isPtr() || b->type().isPtr()) fail("cannot select between " + a->type().str() + " and " + b->type().str());
    a = castTo(a, *d);
    b = castTo(b, *d);
  }
  std::tie(a, b) = broadcastPair(a, b);
  std::tie(cond, a) = broadcastPair(cond, a);
  std::tie(a, b) = broadcastPair(a, b);
  return checked(create(OpKind::Select, {cond, a, b}, {a->type()}));
}

Value* Builder::unary(OpKind kind, Value* a) {
  const OpInfo& info = opInfo(kind);
  if (!a->type().isNumeric()) fail("'" + std::string(info.mnemonic) + "' needs a number, got " + a->type().str());
  if (isStorageOnly(a->type().elem))
    fail("'" + std::string(info.mnemonic) + "' does not compute on " + a->type().str() + "; cast to f16, bf16 or f32 first");
  if (info.has(FloatOnly) && isInt(a->type().elem)) a = cast(a, DType::F32);
  if (kind == OpKind::Abs && isUnsigned(a->type().elem)) return a;
  return checked(create(kind, {a}, {a->type()}));
}

Value* Builder::cast(Value* v, DType to, const std::string& rounding, Value* randBits) {
  if (!v->type().isNumeric()) fail("cannot cast " + v->type().str() + " to " + std::string(dtypeName(to)));
  if (v->type().elem == to && !randBits) return v;
  std::vector<Value*> ops{v};
  if (randBits) {
    if (randBits->type().shape != v->type().shape) randBits = broadcastTo(randBits, v->type().shape);
    ops.push_back(randBits);
  }
  return checked(create(OpKind::Cast, ops, {v->type().withElem(to)}, {{"rounding", rounding}}));
}

Value* Builder::bitcast(Value* v, Type to) {
  Type t = to.withShape(v->type().shape);
  if (t == v->type()) return v;
  return checked(create(OpKind::Bitcast, {v}, {t}));
}

Value* Builder::ptrAdd(Value* ptr, Value* offset) {
  if (!offset->type().isIntLike()) fail("pointer offsets must be integers, got " + offset->type().str());
  std::tie(ptr, offset) = broadcastPair(ptr, offset);
  return checked(create(OpKind::PtrAdd, {ptr, offset}, {ptr->type()}));
}

Value* Builder::arange(int64_t start, int64_t end) {
  constexpr int64_t lo = INT32_MIN, hi = INT32_MAX;
  if (start < lo || start > hi || end < lo || end > int64_t{hi} + 1)
    fail("arange's arguments must be within int32, got start " + std::to_string(start) + " and end " +
         std::to_string(end));
  int64_t n = end - start;
  if (n <= 0 || (n & (n - 1)) != 0)
    fail("arange's length end - start must be a power of two, got " + std::to_string(end) + " - " + std::to_string(start));
  return checked(create(OpKind::Arange, {}, {Type::tile(DType::I32, {n})}, {{"start", Attr(start)}, {"end", Attr(end)}}));
}

Value* Builder::splat(Value* v, const std::vector<int64_t>& shape) {
  if (v->type().isTile()) fail("splat needs a scalar, got " + v->type().str());
  return checked(create(OpKind::Splat, {v}, {v->type().withShape(shape)}));
}

Value* Builder::broadcastTo(Value* v, const std::vector<int64_t>& shape) {
  const Type& t = v->type();
  if (t.isDesc()) fail("cannot broadcast a tensor descriptor");
  if (t.shape == shape) return v;
  if (!t.isTile()) return splat(v, shape);
  if (t.shape.size() > shape.size()) fail("cannot broadcast " + t.str() + " to shape " + shapeStr(shape));
  while (v->type().shape.size() < shape.size()) v = expandDims(v, 0);
  const auto& s = v->type().shape;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != shape[i] && s[i] != 1) fail("cannot broadcast " + t.str() + " to shape " + shapeStr(shape));
  if (s == shape) return v;
  return checked(create(OpKind::Broadcast, {v}, {v->type().withShape(shape)}));
}

Value* Builder::expandDims(Value* v, int axis) {
  int rank = v->type().rank();
  if (axis < 0) axis += rank + 1;
  if (axis < 0 || axis > rank) fail("expand_dims axis " + std::to_string(axis) + " is out of range for " + v->type().str());
  auto s = v->type().shape;
  s.insert(s.begin() + axis, 1);
  return checked(create(OpKind::ExpandDims, {v}, {v->type().withShape(s)}, {{"axis", Attr(int64_t(axis))}}));
}

Value* Builder::reshape(Value* v, const std::vector<int64_t>& shape) {
  if (v->type().shape == shape) return v;
  int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  if (!v->type().isTile() || n != v->type().numel())
    fail("cannot reshape " + v->type().str() + " to shape " + shapeStr(shape));
  return checked(create(OpKind::Reshape, {v}, {v->type().withShape(shape)}));
}

Value* Builder::hint(Value* v, std::vector<int64_t> divisibility, std::vector<int64_t> contiguity) {
  const Type& t = v->type();
  if ((!t.isNumeric() && !t.isPtr()) || t.isFloatLike())
    fail("hints apply to integer or pointer values, got " + t.str());
  size_t rank = std::max<size_t>(1, t.shape.size());
  std::map<std::string, Attr> attrs;
  for (auto* list : {&divisibility, &contiguity}) {
    if (list->size() == 1) list->assign(rank, list->front());
    if (!list->empty()) attrs[list == &divisibility ? "divisibility" : "contiguity"] = *list;
  }
  return checked(create(OpKind::Hint, {v}, {t}, attrs));
}

Value* Builder::trans(Value* v, std::vector<int64_t> perm) {
  int rank = v->type().rank();
  if (perm.empty())
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> s;
  for (auto p : perm) {
    if (p < 0 || p >= rank) fail("trans permutation " + shapeStr(perm) + " does not fit " + v->type().str());
    s.push_back(v->type().shape[p]);
  }
  return checked(create(OpKind::Trans, {v}, {v->type().withShape(s)}, {{"perm", perm}}));
}

Value* Builder::join(Value* a, Value* b) {
  std::tie(a, b) = broadcastPair(a, b);
  if (a->type() != b->type()) fail("join needs equal types, got " + a->type().str() + " and " + b->type().str());
  auto s = a->type().shape;
  s.push_back(2);
  return checked(create(OpKind::Join, {a, b}, {a->type().withShape(s)}));
}

std::pair<Value*, Value*> Builder::split(Value* v) {
  auto s = v->type().shape;
  if (s.empty() || s.back() != 2) fail("split needs a last dimension of 2, got " + v->type().str());
  s.pop_back();
  Op* op = create(OpKind::Split, {v}, {v->type().withShape(s), v->type().withShape(s)});
  checked(op);
  return {op->result(0), op->result(1)};
}

Value* Builder::full(const std::vector<int64_t>& shape, double value, DType d) {
  Type t = Type::tile(d, shape);
  return isInt(d) ? constInt(static_cast<int64_t>(value), t) : constFloat(value, t);
}

Value* Builder::programId(int axis) {
  return checked(create(OpKind::ProgramId, {}, {Type::scalar(DType::I32)}, {{"axis", Attr(int64_t(axis))}}));
}

Value* Builder::numPrograms(int axis) {
  return checked(create(OpKind::NumPrograms, {}, {Type::scalar(DType::I32)}, {{"axis", Attr(int64_t(axis))}}));
}

namespace {
std::map<std::string, Attr> hintAttrs(const MemoryHints& h) {
  std::map<std::string, Attr> a;
  if (!h.cache.empty()) a["cache"] = Attr(h.cache);
  if (!h.evict.empty()) a["evict"] = Attr(h.evict);
  if (h.isVolatile) a["volatile"] = Attr(true);
  return a;
}
}  // namespace

Value* Builder::load(Value* ptr, Value* mask, Value* other, const MemoryHints& hints) {
  if (!ptr->type().isPtr()) fail("load needs a pointer or a tile of pointers, got " + ptr->type().str());
  if (mask) {
    if (mask->type().elem != DType::I1 || !mask->type().isNumeric()) fail("load mask must be boolean, got " + mask->type().str());
    std::tie(ptr, mask) = broadcastPair(ptr, mask);
  }
  Type value = Type::tile(ptr->type().elem, ptr->type().shape);
  if (other) {
    if (!mask) fail("load 'other' needs a mask");
    other = broadcastTo(castTo(other, value.elem), value.shape);
  }
  std::vector<Value*> ops{ptr};
  if (mask) ops.push_back(mask);
  if (other) ops.push_back(other);
  return checked(create(OpKind::Load, ops, {value}, hintAttrs(hints)));
}

void Builder::store(Value* ptr, Value* value, Value* mask, const MemoryHints& hints) {
  if (!ptr->type().isPtr()) fail("store needs a pointer or a tile of pointers, got " + ptr->type().str());
  if (!value->type().isNumeric()) fail("store needs a numeric value, got " + value->type().str());
  value = castTo(value, ptr->type().elem);
  std::tie(ptr, value) = broadcastPair(ptr, value);
  std::vector<Value*> ops{ptr, value};
  if (mask) {
    std::tie(ptr, mask) = broadcastPair(ptr, mask);
    ops = {ptr, broadcastTo(value, ptr->type().shape), mask};
  }
  checked(create(OpKind::Store, ops, {}, hintAttrs(hints)));
}

namespace {
std::map<std::string, Attr> semAttrs(const std::string& sem, const std::string& scope) {
  std::map<std::string, Attr> a;
  if (!sem.empty()) a.emplace("sem", Attr(sem));
  if (!scope.empty()) a.emplace("scope", Attr(scope));
  return a;
}
}  // namespace

Value* Builder::atomic(OpKind kind, Value* ptr, Value* value, Value* mask, const std::string& sem,
                       const std::string& scope) {
  if (!ptr->type().isPtr()) fail("atomics need a pointer or a tile of pointers, got " + ptr->type().str());
  value = castTo(value, ptr->type().elem);
  std::tie(ptr, value) = broadcastPair(ptr, value);
  std::vector<Value*> ops{ptr, value};
  if (mask) {
    std::tie(ptr, mask) = broadcastPair(ptr, mask);
    value = broadcastTo(value, ptr->type().shape);  // the result takes the mask's shape too
    ops = {ptr, value, mask};
  }
  return checked(create(kind, ops, {value->type()}, semAttrs(sem, scope)));
}

Value* Builder::atomicCas(Value* ptr, Value* cmp, Value* value, const std::string& sem, const std::string& scope) {
  if (!ptr->type().isPtr()) fail("atomic_cas needs a pointer or a tile of pointers, got " + ptr->type().str());
  cmp = castTo(cmp, ptr->type().elem);
  value = castTo(value, ptr->type().elem);
  std::tie(ptr, cmp) = broadcastPair(ptr, cmp);
  std::tie(ptr, value) = broadcastPair(ptr, value);
  cmp = broadcastTo(cmp, ptr->type().shape);
  return checked(create(OpKind::AtomicCas, {ptr, cmp, value}, {value->type()}, semAttrs(sem, scope)));
}

void Builder::debugBarrier() { checked(create(OpKind::DebugBarrier, {}, {})); }

Value* Builder::makeDesc(Value* base, const std::vector<Value*>& sizes, const std::vector<Value*>& strides,
                         const std::vector<int64_t>& blockShape) {
  if (sizes.size() != blockShape.size() || strides.size() != blockShape.size())
    fail("a tensor descriptor needs as many sizes and strides as block dimensions (" + std::to_string(blockShape.size()) + ")");
  std::vector<Value*> ops{base};
  for (Value* v : sizes) ops.push_back(v);
  for (Value* v : strides) ops.push_back(v);
  return checked(create(OpKind::MakeDesc, ops, {Type::desc(base->type().elem, blockShape)}, {{"block_shape", blockShape}}));
}

Value* Builder::descLoad(Value* desc, const std::vector<Value*>& offsets) {
  if (!desc->type().isDesc()) fail("desc_load needs a tensor descriptor, got " + desc->type().str());
  std::vector<Value*> ops{desc};
  for (Value* o : offsets) ops.push_back(castTo(o, DType::I32));
  return checked(create(OpKind::DescLoad, ops, {Type::tile(desc->type().elem, desc->type().shape)}));
}

void Builder::descStore(Value* desc, Value* value, const std::vector<Value*>& offsets) {
  if (!desc->type().isDesc()) fail("desc_store needs a tensor descriptor, got " + desc->type().str());
  std::vector<Value*> ops{desc, castTo(value, desc->type().elem)};
  for (Value* o : offsets) ops.push_back(castTo(o, DType::I32));
  checked(create(OpKind::DescStore, ops, {}));
}

Value* Builder::reduce(OpKind kind, Value* v, int axis) {
  const Type& t = v->type();
  if (!t.isTile()) fail("reductions need a tile, got " + t.str());
  if (axis < 0) axis += t.rank();
  if (axis < 0 || axis >= t.rank()) fail("reduction axis " + std::to_string(axis) + " is out of range for " + t.str());
  if (kind == OpKind::ReduceSum && isInt(t.elem) && bitWidth(t.elem) < 32)
    v = castTo(v, isUnsigned(t.elem) ? DType::U32 : DType::I32);
  auto s = v->type().shape;
  s.erase(s.begin() + axis);
  DType d = kind == OpKind::Argmax ? DType::I32 : v->type().elem;
  return checked(create(kind, {v}, {Type::tile(d, s)}, {{"axis", Attr(int64_t(axis))}}));
}

Op* Builder::createCombine(OpKind kind, const std::vector<Value*>& values, int axis, bool reverse) {
  const char* what = kind == OpKind::Scan ? "scan" : "reduce";
  if (values.empty()) fail(std::string(what) + " needs at least one tile");
  const Type& t0 = values[0]->type();
  for (Value* v : values) {
    const Type& t = v->type();
    if (!t.isTile() || !t.isNumeric()) fail(std::string(what) + " needs tiles of numbers, got " + t.str());
    if (t.shape != t0.shape) fail(std::string(what) + " needs tiles of one shape, got " + t0.str() + " and " + t.str());
  }
  if (axis < 0) axis += t0.rank();
  if (axis < 0 || axis >= t0.rank())
    fail(std::string(what) + " axis " + std::to_string(axis) + " is out of range for " + t0.str());
  auto s = t0.shape;
  if (kind == OpKind::Reduce) s.erase(s.begin() + axis);
  std::vector<Type> results;
  for (Value* v : values) results.push_back(Type::tile(v->type().elem, s));
  std::map<std::string, Attr> attrs{{"axis", Attr(int64_t(axis))}};
  if (kind == OpKind::Scan) attrs["reverse"] = reverse;
  Op* op = create(kind, values, results, attrs);
  for (int side = 0; side < 2; ++side)
    for (Value* v : values) op->region(0).addArg(Type::scalar(v->type().elem));
  return op;
}

void Builder::combineYield(const std::vector<Value*>& values) { create(OpKind::CombineYield, values, {}); }

Value* Builder::gather(Value* src, Value* index, int axis) {
  const Type &s = src->type(), &i = index->type();
  if (!s.isTile() || !s.isNumeric()) fail("gather needs a tile of numbers as its source, got " + s.str());
  if (!i.isTile() || !i.isIntLike() || i.elem == DType::I1)
    fail("gather needs a tile of integer indices, got " + i.str());
  if (i.rank() != s.rank())
    fail("gather index must have the source's rank " + std::to_string(s.rank()) + ", got " + i.str());
  if (axis < 0) axis += s.rank();
  if (axis < 0 || axis >= s.rank()) fail("gather axis " + std::to_string(axis) + " is out of range for " + s.str());
  for (int d = 0; d < s.rank(); ++d)
    if (d != axis && i.shape[d] != s.shape[d])
      fail("gather index " + i.str() + " must match the source " + s.str() + " in every dimension but axis " +
           std::to_string(axis));
  return checked(create(OpKind::Gather, {src, index}, {Type::tile(s.elem, i.shape)}, {{"axis", Attr(int64_t(axis))}}));
}

Value* Builder::histogram(Value* x, int64_t numBins, Value* mask) {
  const Type& t = x->type();
  if (t.rank() != 1 || !t.isIntLike() || t.elem == DType::I1)
    fail("histogram needs a 1-D tile of integers, got " + t.str());
  std::vector<Value*> ops{x};
  if (mask) {
    if (!mask->type().isTile()) mask = splat(mask, t.shape);
    ops.push_back(mask);
  }
  return checked(create(OpKind::Histogram, ops, {Type::tile(DType::I32, {numBins})}));
}

namespace {

// The B tiles [R, C] of x = [R, C, B] (B a power of two), in order: halves by split.
std::vector<Value*> batchSlices(Builder& bld, Value* x) {
  auto s = x->type().shape;
  int64_t n = s[2];
  if (n == 1) return {bld.reshape(x, {s[0], s[1]})};
  auto [even, odd] = bld.split(bld.reshape(x, {s[0], s[1], n / 2, 2}));
  auto e = batchSlices(bld, even), o = batchSlices(bld, odd);
  std::vector<Value*> r;
  for (size_t i = 0; i < e.size(); ++i) r.insert(r.end(), {e[i], o[i]});
  return r;
}

// The inverse of batchSlices: B tiles [R, C] into [R, C, B].
Value* batchStack(Builder& bld, const std::vector<Value*>& parts) {
  auto s = parts[0]->type().shape;
  int64_t n = static_cast<int64_t>(parts.size());
  if (n == 1) return bld.reshape(parts[0], {s[0], s[1], 1});
  std::vector<Value*> even, odd;
  for (int64_t i = 0; i < n; ++i) (i % 2 ? odd : even).push_back(parts[i]);
  return bld.reshape(bld.join(batchStack(bld, even), batchStack(bld, odd)), {s[0], s[1], n});
}

// f32 to the nearest tf32 value (10 mantissa bits), ties away from zero, as
// cvt.rna.tf32.f32 rounds; infinities and NaNs pass through.
Value* roundToTf32(Builder& bld, Value* x) {
  Type it = x->type().withElem(DType::I32);
  Value* bits = bld.bitcast(x, it);
  Value* expMask = bld.constInt(0x7F800000, it);
  Value* special = bld.cmp("eq", bld.binary(OpKind::And, bits, expMask), expMask);
  Value* rounded =
      bld.binary(OpKind::And, bld.binary(OpKind::Add, bits, bld.constInt(0x1000, it)), bld.constInt(~0x1FFF, it));
  return bld.bitcast(bld.select(special, bits, rounded), x->type());
}

bool isFp8(DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; }

}  // namespace

// Triton's tl.dot: 3-D (batched) dots become one 2-D dot per batch index; tf32 and
// tf32x3 become ieee dots of operands rounded to tf32 (tf32x3: a = big + small per
// operand, big*big + big*small + small*big), so that both backends compute the same
// products and the IR shows the rounding.
Value* Builder::dot(Value* a, Value* b, Value* acc, const std::string& precision, DType outType) {
  const Type &at = a->type(), &bt = b->type();
  int rank = at.rank();
  if ((rank != 2 && rank != 3) || bt.rank() != rank)
    fail("dot needs two 2-D or two 3-D tiles, got " + at.str() + " and " + bt.str());
  if (precision != "ieee" && precision != "tf32" && precision != "tf32x3")
    fail("input_precision must be 'ieee', 'tf32' or 'tf32x3', got '" + precision + "'");
  if (outType == DType::BF16)
    fail("out_dtype=bfloat16 is unsupported. Please use out_dtype=float32/float16 and cast with `.to(tl.bfloat16)`");
  int64_t k = at.shape[rank - 1], k2 = bt.shape[rank - 2];
  if (k != k2)
    fail("First input shape " + shapeStr(at.shape) + " and second input shape " + shapeStr(bt.shape) +
         " are not compatible for matmul (second index of first shape (" + std::to_string(k) +
         ") must be equal to first index of second shape (" + std::to_string(k2) + ")");
  if (rank == 3) {
    int64_t batch = at.shape[0];
    if (bt.shape[0] != batch) fail("dot batch dimensions differ: " + at.str() + " times " + bt.str());
    if (batch & (batch - 1)) fail("3-D dot needs a batch size that is a power of two, got " + std::to_string(batch));
    auto as = batchSlices(*this, trans(a, {1, 2, 0})), bs = batchSlices(*this, trans(b, {1, 2, 0}));
    std::vector<Value*> accs(as.size(), nullptr), parts;
    if (acc) {
      if (acc->type().rank() != 3) fail("the accumulator of a 3-D dot must be 3-D, got " + acc->type().str());
      accs = batchSlices(*this, trans(acc, {1, 2, 0}));
    }
    for (size_t i = 0; i < as.size(); ++i) parts.push_back(dot(as[i], bs[i], accs[i], precision, outType));
    return trans(batchStack(*this, parts), {2, 0, 1});
  }
  DType accT = at.elem == DType::I8                                                 ? DType::I32
               : outType == DType::F16 && (at.elem == DType::F16 || isFp8(at.elem)) ? DType::F16
                                                                                    : DType::F32;
  if (!acc) acc = full({at.shape[0], bt.shape[1]}, 0, accT);
  if (at.elem == DType::F32 && bt.elem == DType::F32 && precision != "ieee") {
    Value *aBig = roundToTf32(*this, a), *bBig = roundToTf32(*this, b);
    if (precision == "tf32x3") {
      Value* aSmall = roundToTf32(*this, binary(OpKind::Sub, a, aBig));
      Value* bSmall = roundToTf32(*this, binary(OpKind::Sub, b, bBig));
      acc = dot(aSmall, bBig, acc);
      acc->definingOp()->setAttr("tf32", true);
      acc = dot(aBig, bSmall, acc);
      acc->definingOp()->setAttr("tf32", true);
    }
    // Operands that are tf32 values: the GPU may take them on tf32 tensor cores.
    Value* r = dot(aBig, bBig, acc);
    r->definingOp()->setAttr("tf32", true);
    return r;
  }
  return checked(create(OpKind::Dot, {a, b, acc}, {acc->type()}));
}

Value* Builder::dotScaled(Value* a, Value* aScale, Value* b, Value* bScale, Value* acc) {
  if (a->type().rank() != 2 || b->type().rank() != 2) fail("dot_scaled needs 2-D tiles, got " + a->type().str() + " and " + b->type().str());
  if (!acc) acc = full({a->type().shape[0], b->type().shape[1]}, 0, DType::F32);
  return checked(create(OpKind::DotScaled, {a, aScale, b, bScale, acc}, {acc->type()}));
}

Op* Builder::createFor(Value* lb, Value* ub, Value* step, const std::vector<Value*>& inits) {
  for (Value* v : {lb, ub, step})
    if (!v->type().isIntLike() || v->type().isTile()) fail("loop bounds must be scalar integers, got " + v->type().str());
  bool wide = lb->type().elem == DType::I64 || ub->type().elem == DType::I64 || step->type().elem == DType::I64;
  DType d = wide ? DType::I64 : DType::I32;
  lb = castTo(lb, d);
  ub = castTo(ub, d);
  step = castTo(step, d);
  std::vector<Value*> ops{lb, ub, step};
  std::vector<Type> types;
  for (Value* v : inits) {
    ops.push_back(v);
    types.push_back(v->type());
  }
  Op* op = create(OpKind::For, ops, types);
  op->region(0).addArg(Type::scalar(d));
  for (auto& t : types) op->region(0).addArg(t);
  return op;
}

Op* Builder::createIf(Value* cond, const std::vector<Type>& resultTypes) {
  if (cond->type() != Type::scalar(DType::I1)) {
    if (!cond->type().isNumeric() || cond->type().isTile()) fail("an if condition must be a scalar, got " + cond->type().str());
    cond = cmp("ne", cond, constInt(0, cond->type()));
  }
  return create(OpKind::If, {cond}, resultTypes);
}

Op* Builder::createWhile(const std::vector<Value*>& inits, const std::vector<Type>& afterTypes) {
  std::vector<Type> initTypes;
  for (Value* v : inits) initTypes.push_back(v->type());
  Op* op = create(OpKind::While, inits, afterTypes);
  for (auto& t : initTypes) op->region(0).addArg(t);
  for (auto& t : afterTypes) op->region(1).addArg(t);
  return op;
}

void Builder::yield(const std::vector<Value*>& values) { create(OpKind::Yield, values, {}); }

void Builder::condition(Value* cond, const std::vector<Value*>& values) {
  if (cond->type() != Type::scalar(DType::I1)) {
    if (!cond->type().isNumeric() || cond->type().isTile()) fail("a while condition must be a scalar, got " + cond->type().str());
    cond = cmp("ne", cond, constInt(0, cond->type()));
  }
  std::vector<Value*> ops{cond};
  ops.insert(ops.end(), values.begin(), values.end());
  create(OpKind::Condition, ops, {});
}

void Builder::ret(const std::vector<Value*>& values) { create(OpKind::Return, values, {}); }

std::vector<Value*> Builder::call(const std::string& callee, const std::vector<Value*>& args) {
  Op* f = module_.lookupFunc(callee);
  if (!f) fail("call of unknown function '" + callee + "'");
  Op* op = create(OpKind::Call, args, funcResultTypes(*f), {{"callee", callee}});
  checked(op);
  return op->results();
}

void Builder::print(const std::string& prefix, const std::vector<Value*>& values) {
  checked(create(OpKind::Print, values, {}, {{"prefix", prefix}}));
}

void Builder::assertTrue(Value* cond, const std::string& message) {
  if (cond->type().elem != DType::I1 || !cond->type().isNumeric()) cond = cmp("ne", cond, constInt(0, cond->type().elementType()));
  checked(create(OpKind::Assert, {cond}, {}, {{"message", message}}));
}

}  // namespace tilefuse
