#include "TensorMaps.h"

#include <functional>
#include <set>

namespace tilefuse::lower::detail {
namespace {

// x * y as one tensor-map dim (at most two parameters), or false.
bool productDim(const TensorMapSpec::Dim& x, const TensorMapSpec::Dim& y, TensorMapSpec::Dim& d) {
  std::vector<int> params;
  int64_t scale = 1;
  for (const TensorMapSpec::Dim* f : {&x, &y}) {
    if (f->param < 0) {
      scale *= f->value;
      continue;
    }
    params.push_back(f->param);
    if (f->factor >= 0) params.push_back(f->factor);
    if (f->value) scale *= f->value;
  }
  if (params.size() > 2) return false;
  d = {};
  if (params.empty()) {
    d.value = scale;
    return true;
  }
  d.param = params[0];
  d.factor = params.size() > 1 ? params[1] : -1;
  d.value = scale == 1 ? 0 : scale;
  return true;
}

}  // namespace

TmaView tmaView(const Type& t, int64_t maxSwizzle) {
  TmaView v;
  int64_t eb = tmaElemBytes(t.elem);
  size_t rank = t.shape.size();
  if (!eb || rank < 1 || rank > 5) return v;
  int64_t cols = t.shape.back(), rowBytes = cols * eb;
  if (rank == 1) {
    v.ok = rowBytes % 16 == 0 && cols <= 256;
    v.innerBox = cols;
    return v;
  }
  int64_t outer = 1;  // rows: the outer dims flattened
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (t.shape[d] > 256) return v;
    outer *= t.shape[d];
  }
  // Column blocks must start on whole swizzle patterns (8 rows of R bytes).
  v.ok = rowBytes >= 32 && outer % 8 == 0;
  v.swizzle = std::min<int64_t>(maxSwizzle, rowBytes);
  v.innerBox = v.swizzle / eb;
  return v;
}

std::string tensorMapOperands(const Op& md, const Op& f, TensorMapSpec* s) {
  const Block& body = f.region(0);
  const Type& dt = md.result()->type();
  std::set<int64_t> aligned;
  if (const Attr* al = f.attr("aligned16"); al && std::holds_alternative<std::vector<int64_t>>(*al))
    for (int64_t i : std::get<std::vector<int64_t>>(*al)) aligned.insert(i);
  const Value* base = md.operand(0);
  if (base->definingOp() || base->ownerBlock() != &body) return "its base is computed in the kernel";
  size_t rank = dt.shape.size();
  int64_t eb = tmaElemBytes(dt.elem);
  if (!aligned.count(base->index())) return "its base is not known to be 16-byte aligned";
  // A parameter, a constant, or a product of at most two parameters and a constant.
  std::function<bool(const Value*, TensorMapSpec::Dim&)> dim = [&](const Value* v, TensorMapSpec::Dim& d) {
    const Op* def = v->definingOp();
    if (!def) {
      const Type& t = v->type();
      if (v->ownerBlock() != &body || t.isPtr() || (t.elem != DType::I32 && t.elem != DType::I64)) return false;
      d.param = static_cast<int>(v->index());
      return true;
    }
    if (def->kind() == OpKind::Mul) {
      TensorMapSpec::Dim x, y;
      if (!dim(def->operand(0), x) || !dim(def->operand(1), y)) return false;
      return productDim(x, y, d);
    }
    const Attr* a = def->kind() == OpKind::Constant ? def->attr("value") : nullptr;
    if (!a || !std::holds_alternative<int64_t>(*a)) return false;
    d.value = std::get<int64_t>(*a);
    return true;
  };
  // A row stride the copy engine takes: a multiple of 16 bytes.
  auto aligned16 = [&](const TensorMapSpec::Dim& d) {
    if (d.param < 0) return d.value > 0 && d.value * eb % 16 == 0;
    return aligned.count(d.param) || (d.factor >= 0 && aligned.count(d.factor)) || (d.value && d.value * eb % 16 == 0);
  };
  s->base = static_cast<int>(base->index());
  s->elemBytes = static_cast<int>(eb);
  s->sizes.resize(rank);
  s->strides.resize(rank);
  for (size_t a = 0; a < rank; ++a) {
    std::string dimName = "dim " + std::to_string(a);
    if (!dim(md.operand(1 + a), s->sizes[a]))
      return "the size of " + dimName +
             " is computed in the kernel (not kernel arguments or constants, or a product of them)";
    if (!dim(md.operand(1 + rank + a), s->strides[a]))
      return "the stride of " + dimName +
             " is computed in the kernel (not kernel arguments or constants, or a product of them)";
    const TensorMapSpec::Dim &size = s->sizes[a], &stride = s->strides[a];
    if (size.param < 0 && size.value < 1) return "the size of " + dimName + " is not positive";
    if (a + 1 == rank) {
      if (stride.param >= 0 || stride.value != 1) return "its last stride is not the constant 1";
    } else if (!aligned16(stride)) {
      return "the stride of " + dimName + " is not known to be a multiple of 16 bytes";
    }
  }
  const Location& loc = md.loc();
  s->where = loc.known() ? *loc.file + ":" + std::to_string(loc.line) : funcName(f);
  return "";
}

}  // namespace tilefuse::lower::detail
