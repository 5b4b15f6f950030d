// plan-layouts (compiler/lib/passes/plan_layouts.cpp) writes the lowering's layout plan
// into the IR unchanged: each value keeps the plan's bases (lanes then warps = the
// plan's thread bases), dots are named by their instruction, and the result verifies
// and round-trips through text.
#include <gtest/gtest.h>

#include <map>

#include "../../compiler/lib/lower/Layout.h"
#include "ParsedKernel.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse {
namespace {

namespace L = lower::detail;

const char* kMatmul = R"(func @k(%a: ptr<bf16>, %b: ptr<bf16>, %c: ptr<f32>, %n: i32) {kernel = true} {
  %ap = splat %a : tile<128x64xptr<bf16>>
  %bp = splat %b : tile<64x128xptr<bf16>>
  %cp = splat %c : tile<128x128xptr<f32>>
  %zero = constant {value = 0.0} : tile<128x128xf32>
  %lb = constant {value = 0} : i32
  %st = constant {value = 1} : i32
  %acc = for %lb, %n, %st, %zero : tile<128x128xf32> {
  ^(%i: i32, %acc_in: tile<128x128xf32>):
    %x = load %ap : tile<128x64xbf16>
    %y = load %bp : tile<64x128xbf16>
    %d = dot %x, %y, %acc_in : tile<128x128xf32>
    yield %d
  }
  %two = constant {value = 2.0} : tile<128x128xf32>
  %out = mul %acc, %two : tile<128x128xf32>
  store %cp, %out
  return
}
)";

const char* kElementwise = R"(func @k(%x: ptr<i8>, %y: ptr<f32>, %n: i32) {kernel = true} {
  %r = arange {end = 2048, start = 0} : tile<2048xi32>
  %ns = splat %n : tile<2048xi32>
  %mask = cmp %r, %ns {predicate = "lt"} : tile<2048xi1>
  %xs = splat %x : tile<2048xptr<i8>>
  %xp = ptr_add %xs, %r : tile<2048xptr<i8>>
  %xv = load %xp, %mask : tile<2048xi8>
  %f = cast %xv {rounding = "rne"} : tile<2048xf32>
  %ys = splat %y : tile<2048xptr<f32>>
  %yp = ptr_add %ys, %r : tile<2048xptr<f32>>
  store %yp, %f, %mask
  return
}
)";

// B [K, N] with K contiguous (a transposed weight): the plan runs its load along K.
const char* kColumnLoad = R"(func @k(%b: ptr<bf16>, %c: ptr<bf16>) {kernel = true} {
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %k = expand_dims %r {axis = 1} : tile<64x1xi32>
  %n = expand_dims %r {axis = 0} : tile<1x64xi32>
  %ld = constant {value = 64} : tile<1x64xi32>
  %nl = mul %n, %ld : tile<1x64xi32>
  %kb = broadcast %k : tile<64x64xi32>
  %nb = broadcast %nl : tile<64x64xi32>
  %off = add %kb, %nb : tile<64x64xi32>
  %bs = splat %b : tile<64x64xptr<bf16>>
  %bp = ptr_add %bs, %off : tile<64x64xptr<bf16>>
  %y = load %bp : tile<64x64xbf16>
  %cs = splat %c : tile<64x64xptr<bf16>>
  store %cs, %y
  return
}
)";

struct Case {
  const char* text;
  std::string arch;
  int warps;
  DistKind dotKind;
};

// Runs the plan and the pass on the same kernel and compares them by value name.
void expectPlanWritten(const Case& c) {
  SCOPED_TRACE(c.arch + ", " + std::to_string(c.warps) + " warps");
  test::ParsedKernel k(c.text);
  lower::AxisAnalysis axis(*k.func);
  L::LayoutPlan plan = L::planLayouts(*k.func, c.arch, 32 * c.warps, &axis);
  std::map<std::string, L::Layout> planned;
  for (const auto& [name, v] : k.named)
    if (v->type().isTile()) planned[name] = plan.at(v);
  passes::runPass(*passes::lookup("plan_layouts"), *k.module, "test", true,
                  {{"arch", c.arch}, {"num_warps", std::to_string(c.warps)}});
  int checked = 0;
  k.func->walk([&](Op* op) {
    std::vector<Value*> values = op->results();
    for (unsigned r = 0; r < op->numRegions(); ++r)
      for (Value* a : op->region(r).args()) values.push_back(a);
    // Converts are new; constants and splats are made again where users need other layouts.
    if (op->kind() == OpKind::ConvertLayout || op->kind() == OpKind::Constant || op->kind() == OpKind::Splat) return;
    for (Value* v : values) {
      if (!v->type().isTile()) continue;
      SCOPED_TRACE(v->name());
      const DistLayout* d = v->type().dist();
      ASSERT_NE(d, nullptr);
      const L::Layout& want = planned.at(v->name());
      std::vector<int64_t> thr = d->lane;
      thr.insert(thr.end(), d->warp.begin(), d->warp.end());
      EXPECT_EQ(d->reg, want.reg);
      EXPECT_EQ(thr, want.thr);
      if (op->kind() == OpKind::Dot) {
        EXPECT_EQ(d->kind, c.dotKind);
      }
      ++checked;
    }
  });
  EXPECT_GT(checked, 3);
  std::string text = printModule(*k.module);
  auto again = parseModule(text);
  verifyModule(*again);
  EXPECT_EQ(printModule(*again), text);
}

TEST(PlanLayouts, WritesThePlanOfAMatmulLoop) {
  expectPlanWritten({kMatmul, "sm_90a", 8, DistKind::Wgmma});
  expectPlanWritten({kMatmul, "sm_90a", 4, DistKind::Wgmma});
  expectPlanWritten({kMatmul, "sm_80", 4, DistKind::Mma});
}

TEST(PlanLayouts, WritesThePlanOfAnElementwiseKernel) {
  expectPlanWritten({kElementwise, "sm_90a", 4, DistKind::Blocked});
  expectPlanWritten({kElementwise, "sm_90a", 1, DistKind::Blocked});
}

TEST(PlanLayouts, WritesTheRunsOfAColumnLoad) {
  expectPlanWritten({kColumnLoad, "sm_90a", 4, DistKind::Blocked});
  test::ParsedKernel k(kColumnLoad);
  passes::runPass(*passes::lookup("plan_layouts"), *k.module, "test", true, {});
  k.func->walk([](Op* op) {
    if (op->kind() == OpKind::Load) {
      EXPECT_EQ(op->result()->type().dist()->reg.at(0), 64);  // along K
    }
  });
}

TEST(PlanLayouts, MarksTheGpuStage) {
  test::ParsedKernel k(kElementwise);
  passes::runPass(*passes::lookup("plan-layouts"), *k.module, "test", true, {{"num_warps", "2"}});
  EXPECT_TRUE(isGpuStage(*k.func));
  EXPECT_EQ(k.func->strAttr("arch"), "sm_90a");
  EXPECT_EQ(k.func->intAttr("num_warps"), 2);
  EXPECT_THROW(passes::runPass(*passes::lookup("plan_layouts"), *k.module, "test", true, {}), UserError);
  EXPECT_THROW(passes::completeOptions(*passes::lookup("plan_layouts"), {{"warps", "2"}}), UserError);
  EXPECT_THROW(passes::completeOptions(*passes::lookup("cse"), {{"arch", "sm_90a"}}), UserError);
}

TEST(PlanLayouts, TheGpuStageIsACopy) {
  test::ParsedKernel k(kMatmul);
  std::string tile = printModule(*k.module);
  auto gpu = passes::runGpuStage(*k.module, "sm_90a", 8);
  EXPECT_EQ(printModule(*k.module), tile);
  EXPECT_TRUE(isGpuStage(*gpu->funcs().at(0)));
}

}  // namespace
}  // namespace tilefuse
