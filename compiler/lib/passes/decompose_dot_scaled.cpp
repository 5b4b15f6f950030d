// decompose-dot-scaled: no tensor core multiplies fp4 on sm_90 or earlier, so a
// dot_scaled with an f4e2m1 operand becomes a bf16 dot of its dequantized operands,
// written out as tile ops that the GPU stage lays out, pipelines and stages like any
// other computation. Every scaled value x * 2^(s - 127) of an f4e2m1 or fp8 operand
// (at most 3 significant bits, an 8-bit exponent) is a bf16 value, so the products on
// the bf16 tensor cores are exact and sum in fp32, as the interpreter's dot_scaled
// does; a NaN scale (0xff) makes its block NaN. Runs before plan-layouts; dot_scaled of
// two fp8 operands stays (fp8 wgmma, each 32-wide K block scaled as it promotes).
//
// before:
//   %d = dot_scaled %a, %sa, %b, %sb, %c : tile<64x64xf32>       (%a: 64x128xf4e2m1, %sa: 64x4xe8m0,
//                                                                 %b = trans %bt, %sb: 64x4xe8m0)
// after:
//   %af = cast %a : tile<64x128xf32>
//   %s3 = expand_dims (cast %sa : tile<64x4xf32>) {axis = 2} ; broadcast to 64x4x32 ; reshape to 64x128
//   %ab = cast (mul %af, %s) : tile<64x128xbf16>
//   (the same for B on its [N, K] form %bt, with %sb, giving %bb : tile<64x128xbf16>)
//   %d = dot %ab, (trans %bb), %c : tile<64x64xf32>
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

// x [R, K] (f4e2m1 or fp8) times the scales s [R, K/32] (e8m0) of its 32-wide K
// blocks, in bf16.
Value* dequantize(Builder& b, Value* x, Value* s) {
  const std::vector<int64_t>& shape = x->type().shape;
  int64_t blocks = s->type().shape[1];
  Value* scale = b.expandDims(b.cast(s, DType::F32), 2);
  scale = b.reshape(b.broadcastTo(scale, {shape[0], blocks, shape[1] / blocks}), shape);
  return b.cast(b.binary(OpKind::Mul, b.cast(x, DType::F32), scale), DType::BF16);
}

bool hasFp4(const Op& op) {
  return op.operand(0)->type().elem == DType::F4E2M1 || op.operand(2)->type().elem == DType::F4E2M1;
}

void decompose(Builder& b, Op& op) {
  b.setInsertionPointBefore(&op);
  b.setLoc(op.loc());
  Value* a = dequantize(b, op.operand(0), op.operand(1));
  // B [K, N] dequantized as [N, K], the form its scales have: the frontend builds an
  // e2m1 B as the transpose of one unpacked along its rows, so this undoes that trans
  // and lets the dot stage B K-major from the [N, K] tile.
  Value* bk = op.operand(2);
  Op* t = bk->definingOp();
  Value* bn = t && t->kind() == OpKind::Trans ? t->operand(0) : b.trans(bk);
  Value* d = b.dot(a, b.trans(dequantize(b, bn, op.operand(3))), op.operand(4));
  d->setName(op.result()->name());
  op.result()->replaceAllUsesWith(d);
  op.erase();
  if (t && t->kind() == OpKind::Trans && t->result()->unused()) t->erase();
}

}  // namespace

void decompose_dot_scaled(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    std::vector<Op*> ops;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::DotScaled && hasFp4(*o)) ops.push_back(o);
    });
    for (Op* o : ops) decompose(b, *o);
  }
}

}  // namespace tilefuse::passes
