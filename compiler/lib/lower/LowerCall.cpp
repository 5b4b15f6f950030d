// Calls of noinline device functions. A callee becomes an internal LLVM function
// whose parameters are the registers of its arguments (tiles in the layouts of its
// signature, scalars once, descriptors as base, sizes and strides) and whose return
// value is a struct of the registers of its results, in its signature's layouts.
// Every thread calls it, as in Triton, so barriers inside stay uniform.
#include "Lowering.h"

namespace tilefuse::lower::detail {

std::vector<llvm::Type*> Lowering::regTypes(const Type& t) {
  if (t.isDesc()) {
    std::vector<llvm::Type*> r = {llvm::PointerType::get(ctx_, 1)};
    for (size_t i = 0; i < 2 * t.shape.size(); ++i) r.push_back(b_.getInt64Ty());
    return r;
  }
  return std::vector<llvm::Type*>(slots(callLayout(t)), scalarType(t));
}

// The registers a call passes for `v`, and a value of type t made of the registers
// `next` yields in that order.
Regs Lowering::passed(const Value* v) { return v->type().isDesc() ? get(v) : in(v, callLayout(v->type())); }

Regs Lowering::received(const Type& t, const std::function<LVal*()>& next) {
  Regs r{{}, callLayout(t)};
  for (size_t i = 0; i < regTypes(t).size(); ++i) r.e.push_back(next());
  return r;
}

llvm::Function* Lowering::lowerCallee(const Op& f, int64_t floor) {
  const Block& body = f.region(0);
  std::vector<llvm::Type*> params, results;
  for (Value* a : body.args())
    for (llvm::Type* t : regTypes(a->type())) params.push_back(t);
  for (Value* r : body.terminator()->operands())
    for (llvm::Type* t : regTypes(r->type())) results.push_back(t);
  auto* fnTy = llvm::FunctionType::get(llvm::StructType::get(ctx_, results), params, false);
  auto* fn = llvm::Function::Create(fnTy, llvm::Function::InternalLinkage, funcName(f), mod_);
  fn->addFnAttr(llvm::Attribute::NoInline);
  floor_ = floor;
  analyzeAxes(f);
  beginFunction(fn);
  unsigned p = 0;
  for (Value* a : body.args()) vals_[a] = received(a->type(), [&] { return fn->getArg(p++); });
  reserveWgmmaOperands(body);
  lowerBlock(body);
  LVal* ret = llvm::PoisonValue::get(fnTy->getReturnType());
  unsigned k = 0;
  for (Value* v : body.terminator()->operands())
    for (LVal* x : passed(v).e) ret = b_.CreateInsertValue(ret, x, {k++});
  b_.CreateRet(ret);
  endFunction();
  return fn;
}

void Lowering::lowerCall(const Op& op) {
  const std::string& name = op.strAttr("callee");
  const Op* callee = module_.lookupFunc(name);
  if (!callee) throw InternalError("lowering: no function '" + name + "'");
  llvm::Function* fn = mod_.getFunction(name);
  if (!fn) {
    Lowering sub(ctx_, mod_, opts_, module_);
    sub.calleeSmem_ = calleeSmem_;
    sub.hints_ = hints_;
    fn = sub.lowerCallee(*callee, scratch_);
    (*calleeSmem_)[name] = static_cast<int64_t>(sub.sharedBytes());
  }
  smemBytes_ = std::max<uint64_t>(smemBytes_, (*calleeSmem_)[name]);
  std::vector<LVal*> args;
  for (Value* v : op.operands()) {
    Regs r = passed(v);
    args.insert(args.end(), r.e.begin(), r.e.end());
  }
  LVal* res = b_.CreateCall(fn, args);
  unsigned k = 0;
  std::vector<Type> results = funcResultTypes(*callee);
  for (unsigned i = 0; i < op.numResults(); ++i)
    vals_[op.result(i)] = received(results[i], [&] { return b_.CreateExtractValue(res, {k++}); });
}

}  // namespace tilefuse::lower::detail
