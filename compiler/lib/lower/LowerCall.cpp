// Calls of noinline device functions. A callee becomes an internal LLVM function
// whose parameters are the registers of its arguments (tiles in the blocked layout,
// scalars once, descriptors as base, sizes and strides) and whose return value is a
// struct of the registers of its results, in the same layouts. Every thread calls it,
// as in Triton, so barriers inside stay uniform.
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
  beginFunction(f, fn);
  unsigned p = 0;
  for (Value* a : body.args()) {
    Regs r{{}, a->type().isDesc() ? Layout{} : callLayout(a->type())};
    for (size_t i = 0; i < regTypes(a->type()).size(); ++i) r.e.push_back(fn->getArg(p++));
    vals_[a] = std::move(r);
  }
  reserveWgmmaOperands(body);
  lowerBlock(body);
  waitPending(*body.terminator());
  LVal* ret = llvm::PoisonValue::get(fnTy->getReturnType());
  unsigned k = 0;
  for (Value* v : body.terminator()->operands()) {
    Regs r = v->type().isDesc() ? get(v) : in(v, callLayout(v->type()));
    for (LVal* x : r.e) ret = b_.CreateInsertValue(ret, x, {k++});
  }
  b_.CreateRet(ret);
  endFunction();
  return fn;
}

void Lowering::lowerCall(const Op& op) {
  const std::string& name = op.strAttr("callee");
  llvm::Function* fn = mod_.getFunction(name);
  if (!fn) {
    const Op* callee = module_.lookupFunc(name);
    if (!callee) throw InternalError("lowering: no function '" + name + "'");
    Lowering sub(ctx_, mod_, opts_, module_);
    sub.calleeSmem_ = calleeSmem_;
    fn = sub.lowerCallee(*callee, scratch_);
    (*calleeSmem_)[name] = static_cast<int64_t>(sub.sharedBytes());
  }
  smemBytes_ = std::max<uint64_t>(smemBytes_, (*calleeSmem_)[name]);
  std::vector<LVal*> args;
  for (Value* v : op.operands()) {
    Regs r = v->type().isDesc() ? get(v) : in(v, callLayout(v->type()));
    args.insert(args.end(), r.e.begin(), r.e.end());
  }
  LVal* res = b_.CreateCall(fn, args);
  unsigned k = 0;
  for (Value* r : op.results()) {
    Regs out{{}, r->type().isDesc() ? Layout{} : callLayout(r->type())};
    for (size_t i = 0; i < regTypes(r->type()).size(); ++i) out.e.push_back(b_.CreateExtractValue(res, {k++}));
    vals_[r] = std::move(out);
  }
}

}  // namespace tilefuse::lower::detail
