// Axis info: contiguity, divisibility and constancy of kernel values, and the vector
// widths the GPU lowering derives from them for loads and stores.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ParsedKernel.h"
#include "tilefuse/lower/AxisInfo.h"

namespace tilefuse::lower {
namespace {

using V = std::vector<int64_t>;

// A parsed kernel with its loads and stores in program order.
struct Kernel : test::ParsedKernel {
  std::vector<const Op*> memOps;
  explicit Kernel(const std::string& text) : ParsedKernel(text) {
    func->walk([&](Op* op) {
      if (op->kind() == OpKind::Load || op->kind() == OpKind::Store) memOps.push_back(op);
    });
  }
};

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

// The tutorial matmul (kernels_dsl/tutorials/matmul.py) as the frontend emits it for bf16
// with 64x64x32 blocks and unit inner strides, every argument hinted aligned16.
const char* kTutorialMatmul = R"(
func @matmul_kernel(%a_ptr: ptr<bf16>, %b_ptr: ptr<bf16>, %c_ptr: ptr<bf16>, %M: i32, %N: i32, %K: i32, %stride_am: i32, %stride_bk: i32, %stride_cm: i32) {aligned16 = [0, 1, 2, 3, 4, 5, 6, 7, 8], kernel = true} {
  %pid = program_id {axis = 0} : i32
  %0 = constant {value = 64} : i32
  %1 = constant {value = 1} : i32
  %2 = add %M, %0 : i32
  %3 = sub %2, %1 : i32
  %num_pid_m = div %3, %0 : i32
  %4 = add %N, %0 : i32
  %5 = sub %4, %1 : i32
  %num_pid_n = div %5, %0 : i32
  %6 = constant {value = 8} : i32
  %num_pid_in_group = mul %6, %num_pid_n : i32
  %group_id = div %pid, %num_pid_in_group : i32
  %first_pid_m = mul %group_id, %6 : i32
  %7 = sub %num_pid_m, %first_pid_m : i32
  %group_size_m = min %7, %6 : i32
  %8 = rem %pid, %num_pid_in_group : i32
  %9 = rem %8, %group_size_m : i32
  %pid_m = add %first_pid_m, %9 : i32
  %pid_n = div %8, %group_size_m : i32
  %10 = mul %pid_m, %0 : i32
  %11 = arange {end = 64, start = 0} : tile<64xi32>
  %12 = splat %10 : tile<64xi32>
  %13 = add %12, %11 : tile<64xi32>
  %14 = splat %M : tile<64xi32>
  %offs_am = rem %13, %14 : tile<64xi32>
  %15 = mul %pid_n, %0 : i32
  %16 = splat %15 : tile<64xi32>
  %17 = add %16, %11 : tile<64xi32>
  %18 = splat %N : tile<64xi32>
  %offs_bn = rem %17, %18 : tile<64xi32>
  %offs_k = arange {end = 32, start = 0} : tile<32xi32>
  %19 = expand_dims %offs_am {axis = 1} : tile<64x1xi32>
  %20 = splat %stride_am : tile<64x1xi32>
  %21 = mul %19, %20 : tile<64x1xi32>
  %22 = expand_dims %offs_k {axis = 0} : tile<1x32xi32>
  %23 = broadcast %21 : tile<64x32xi32>
  %24 = broadcast %22 : tile<64x32xi32>
  %25 = add %23, %24 : tile<64x32xi32>
  %26 = splat %a_ptr : tile<64x32xptr<bf16>>
  %a_ptrs = ptr_add %26, %25 : tile<64x32xptr<bf16>>
  %27 = expand_dims %offs_k {axis = 1} : tile<32x1xi32>
  %28 = splat %stride_bk : tile<32x1xi32>
  %29 = mul %27, %28 : tile<32x1xi32>
  %30 = expand_dims %offs_bn {axis = 0} : tile<1x64xi32>
  %31 = broadcast %29 : tile<32x64xi32>
  %32 = broadcast %30 : tile<32x64xi32>
  %33 = add %31, %32 : tile<32x64xi32>
  %34 = splat %b_ptr : tile<32x64xptr<bf16>>
  %b_ptrs = ptr_add %34, %33 : tile<32x64xptr<bf16>>
  %accumulator = constant {value = 0.0} : tile<64x64xf32>
  %35 = constant {value = 32} : i32
  %36 = add %K, %35 : i32
  %37 = sub %36, %1 : i32
  %38 = div %37, %35 : i32
  %39 = constant {value = 0} : i32
  %40 = constant {value = 0.0} : tile<64x32xbf16>
  %41 = constant {value = 0.0} : tile<32x64xbf16>
  %42 = constant {value = 32} : tile<64x32xi32>
  %43 = mul %35, %stride_bk : i32
  %44 = splat %43 : tile<32x64xi32>
  %a_ptrs_1, %accumulator_1, %b_ptrs_1 = for %39, %38, %1, %a_ptrs, %accumulator, %b_ptrs : tile<64x32xptr<bf16>>, tile<64x64xf32>, tile<32x64xptr<bf16>> {
  ^(%k: i32, %a_ptrs_2: tile<64x32xptr<bf16>>, %accumulator_2: tile<64x64xf32>, %b_ptrs_2: tile<32x64xptr<bf16>>):
    %45 = mul %k, %35 : i32
    %46 = sub %K, %45 : i32
    %47 = splat %46 : tile<1x32xi32>
    %48 = cmp %22, %47 {predicate = "lt"} : tile<1x32xi1>
    %49 = broadcast %48 : tile<64x32xi1>
    %a = load %a_ptrs_2, %49, %40 : tile<64x32xbf16>
    %50 = splat %46 : tile<32x1xi32>
    %51 = cmp %27, %50 {predicate = "lt"} : tile<32x1xi1>
    %52 = broadcast %51 : tile<32x64xi1>
    %b = load %b_ptrs_2, %52, %41 : tile<32x64xbf16>
    %accumulator_3 = dot %a, %b, %accumulator_2 : tile<64x64xf32>
    %a_ptrs_3 = ptr_add %a_ptrs_2, %42 : tile<64x32xptr<bf16>>
    %b_ptrs_3 = ptr_add %b_ptrs_2, %44 : tile<32x64xptr<bf16>>
    yield %a_ptrs_3, %accumulator_3, %b_ptrs_3
  }
  %c = cast %accumulator_1 {rounding = "rne"} : tile<64x64xbf16>
  %53 = expand_dims %13 {axis = 1} : tile<64x1xi32>
  %54 = splat %stride_cm : tile<64x1xi32>
  %55 = mul %54, %53 : tile<64x1xi32>
  %56 = splat %c_ptr : tile<64x1xptr<bf16>>
  %57 = ptr_add %56, %55 : tile<64x1xptr<bf16>>
  %58 = expand_dims %17 {axis = 0} : tile<1x64xi32>
  %59 = broadcast %57 : tile<64x64xptr<bf16>>
  %60 = broadcast %58 : tile<64x64xi32>
  %c_ptrs = ptr_add %59, %60 : tile<64x64xptr<bf16>>
  %61 = splat %M : tile<64x1xi32>
  %62 = cmp %53, %61 {predicate = "lt"} : tile<64x1xi1>
  %63 = splat %N : tile<1x64xi32>
  %64 = cmp %58, %63 {predicate = "lt"} : tile<1x64xi1>
  %65 = broadcast %62 : tile<64x64xi1>
  %66 = broadcast %64 : tile<64x64xi1>
  %c_mask = and %65, %66 : tile<64x64xi1>
  store %c_ptrs, %c, %c_mask
  return
}
)";

// Pointer and mask of each load and the store, in program order: a, b, then c.
std::vector<int64_t> memWidths(const std::string& text) {
  Kernel k(text);
  AxisAnalysis axis(*k.func);
  std::vector<int64_t> r;
  for (const Op* op : k.memOps) {
    const Value* mask = op->kind() == OpKind::Load ? op->operand(1) : op->operand(2);
    r.push_back(axis.vectorWidth(op->operand(0), mask));
  }
  return r;
}

TEST(AxisInfo, TutorialMatmulLoadsRowsOf16Bytes) {
  // a: offs_am*stride_am is a multiple of 16 elements and offs_k runs 32 wide, so rows of a_ptrs are
  // 32-byte aligned runs; the K mask is constant over 16 columns since K and k*32 are multiples of 16.
  // b: offs_bn = (pid_n*64 + arange) % N, and pid_n's sign depends on M and N: a negative dividend
  // would restart the run at a multiple of N, so b stays scalar. c: contiguous columns, masked by
  // offs_cn < N with N a multiple of 16.
  EXPECT_EQ(memWidths(kTutorialMatmul), (V{8, 1, 8}));
}

TEST(AxisInfo, TutorialMatmulWithoutAlignedKMasksElementwise) {
  std::string text =
      replaced(kTutorialMatmul, "aligned16 = [0, 1, 2, 3, 4, 5, 6, 7, 8]", "aligned16 = [0, 1, 2, 3, 4, 6, 7, 8]");
  EXPECT_EQ(memWidths(text), (V{1, 1, 8}));
  // Without the mask the rows are still aligned runs.
  Kernel k(text);
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.vectorWidth(k["a_ptrs_2"], nullptr), 8);
  EXPECT_EQ(axis.get(k["a_ptrs_2"]).contiguity, (V{1, 32}));
  EXPECT_EQ(axis.get(k["a_ptrs_2"]).divisibility[1], 16);
}

// A 1-D copy: %offs = pid*128 + arange(128), pointers into unhinted %x and hinted %y.
const char* kCopy = R"(
func @copy(%x: ptr<f32>, %y: ptr<f32>, %s: i32) {aligned16 = [1, 2], kernel = true} {
  %pid = program_id {axis = 0} : i32
  %0 = constant {value = 128} : i32
  %1 = mul %pid, %0 : i32
  %2 = splat %1 : tile<128xi32>
  %3 = arange {end = 128, start = 0} : tile<128xi32>
  %offs = add %2, %3 : tile<128xi32>
  %4 = splat %x : tile<128xptr<f32>>
  %xp = ptr_add %4, %offs : tile<128xptr<f32>>
  %5 = splat %y : tile<128xptr<f32>>
  %yp = ptr_add %5, %offs : tile<128xptr<f32>>
  %6 = splat %s : tile<128xi32>
  %strided = mul %offs, %6 : tile<128xi32>
  %ys = ptr_add %5, %strided : tile<128xptr<f32>>
  %7 = constant {value = 3} : tile<128xi32>
  %plus3 = add %3, %7 : tile<128xi32>
  %y3 = ptr_add %5, %plus3 : tile<128xptr<f32>>
  %8 = constant {value = 4} : tile<128xi32>
  %plus4 = add %8, %3 : tile<128xi32>
  %y4 = ptr_add %5, %plus4 : tile<128xptr<f32>>
  return
}
)";

TEST(AxisInfo, AlignedF32PointerLoadsFourElements) {
  Kernel k(kCopy);
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["offs"]).contiguity, V{128});
  EXPECT_EQ(axis.get(k["offs"]).divisibility, V{128});
  EXPECT_EQ(axis.get(k["yp"]).divisibility, V{16});
  EXPECT_EQ(axis.vectorWidth(k["yp"], nullptr), 4);
  EXPECT_EQ(axis.vectorWidth(k["yp"], nullptr, 8), 2);
  EXPECT_EQ(axis.vectorWidth(k["yp"], nullptr, 4), 1);
}

TEST(AxisInfo, UnhintedPointerIsOnlyElementAligned) {
  Kernel k(kCopy);
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["x"]).divisibility, V{4});
  EXPECT_EQ(axis.get(k["xp"]).contiguity, V{128});
  EXPECT_EQ(axis.get(k["xp"]).divisibility, V{4});
  EXPECT_EQ(axis.vectorWidth(k["xp"], nullptr), 1);
}

TEST(AxisInfo, StridedOffsetsAreNotContiguous) {
  Kernel k(kCopy);
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["strided"]).contiguity, V{1});
  EXPECT_EQ(axis.get(k["strided"]).divisibility, V{16});
  EXPECT_EQ(axis.vectorWidth(k["ys"], nullptr), 1);
}

TEST(AxisInfo, OddStartKeepsContiguityButNotAlignment) {
  Kernel k(kCopy);
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["plus3"]).contiguity, V{128});
  EXPECT_EQ(axis.get(k["plus3"]).divisibility, V{1});
  EXPECT_EQ(axis.vectorWidth(k["y3"], nullptr), 1);
  EXPECT_EQ(axis.get(k["plus4"]).divisibility, V{4});
  EXPECT_EQ(axis.vectorWidth(k["y4"], nullptr), 4);
}

TEST(AxisInfo, RemainderRunsNeedANonNegativeAlignedDividend) {
  Kernel k(R"(
func @rem(%p: ptr<bf16>, %M: i32) {aligned16 = [0, 1]} {
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %0 = constant {value = 8} : tile<64xi32>
  %mod8 = rem %r, %0 : tile<64xi32>
  %1 = splat %p : tile<64xptr<bf16>>
  %pm = ptr_add %1, %mod8 : tile<64xptr<bf16>>
  %2 = constant {value = 16} : tile<64xi32>
  %shifted = sub %r, %2 : tile<64xi32>
  %neg_mod8 = rem %shifted, %0 : tile<64xi32>
  %pid = program_id {axis = 0} : i32
  %3 = constant {value = 64} : i32
  %4 = mul %pid, %3 : i32
  %5 = splat %4 : tile<64xi32>
  %rows = add %5, %r : tile<64xi32>
  %6 = splat %M : tile<64xi32>
  %mod_m = rem %rows, %6 : tile<64xi32>
  %7 = constant {value = 6} : tile<64xi32>
  %mod6 = rem %r, %7 : tile<64xi32>
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["mod8"]).contiguity, V{8});
  EXPECT_EQ(axis.get(k["mod8"]).divisibility, V{8});
  EXPECT_EQ(axis.vectorWidth(k["pm"], nullptr), 8);
  // r - 16 starts at -16, where -16 % 8 = 0 but -15 % 8 = -7: no runs.
  EXPECT_EQ(axis.get(k["shifted"]).contiguity, V{64});
  EXPECT_EQ(axis.get(k["neg_mod8"]).contiguity, V{1});
  EXPECT_EQ(axis.get(k["mod_m"]).contiguity, V{16});
  EXPECT_EQ(axis.get(k["mod_m"]).divisibility, V{16});
  EXPECT_EQ(axis.get(k["mod6"]).contiguity, V{2});
}

TEST(AxisInfo, DivisionByAConstantGroupsContiguousRuns) {
  Kernel k(R"(
func @div(%n: i32) {
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %0 = constant {value = 4} : tile<64xi32>
  %q = div %r, %0 : tile<64xi32>
  %1 = constant {value = 2} : tile<64xi32>
  %odd = sub %r, %1 : tile<64xi32>
  %q_signed = div %odd, %0 : tile<64xi32>
  %2 = constant {value = 16} : tile<64xi32>
  %3 = mul %r, %2 : tile<64xi32>
  %exact = div %3, %0 : tile<64xi32>
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["q"]).constancy, V{4});
  EXPECT_EQ(axis.get(k["q"]).contiguity, V{1});
  EXPECT_EQ(axis.get(k["q_signed"]).constancy, V{1});
  EXPECT_EQ(axis.get(k["exact"]).divisibility, V{4});
}

TEST(AxisInfo, BroadcastRowsAreConstantAlongColumns) {
  Kernel k(R"(
func @bcast(%p: ptr<f16>, %n: i32) {aligned16 = [0, 1]} {
  %r = arange {end = 32, start = 0} : tile<32xi32>
  %col = expand_dims %r {axis = 1} : tile<32x1xi32>
  %rows = broadcast %col : tile<32x64xi32>
  %0 = splat %n : tile<32x1xi32>
  %in = cmp %col, %0 {predicate = "lt"} : tile<32x1xi1>
  %mask = broadcast %in : tile<32x64xi1>
  %c = arange {end = 64, start = 0} : tile<64xi32>
  %row = expand_dims %c {axis = 0} : tile<1x64xi32>
  %cols = broadcast %row : tile<32x64xi32>
  %1 = constant {value = 64} : tile<32x64xi32>
  %2 = mul %rows, %1 : tile<32x64xi32>
  %offs = add %2, %cols : tile<32x64xi32>
  %3 = splat %p : tile<32x64xptr<f16>>
  %ptrs = ptr_add %3, %offs : tile<32x64xptr<f16>>
  %t = trans %offs {perm = [1, 0]} : tile<64x32xi32>
  %flat = reshape %col : tile<32xi32>
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["rows"]).contiguity, (V{32, 1}));
  EXPECT_EQ(axis.get(k["rows"]).constancy, (V{1, 64}));
  EXPECT_EQ(axis.get(k["cols"]).constancy, (V{32, 1}));
  EXPECT_EQ(axis.get(k["mask"]).constancy, (V{16, 64}));
  EXPECT_EQ(axis.get(k["offs"]).contiguity, (V{1, 64}));
  EXPECT_EQ(axis.get(k["offs"]).divisibility, (V{1, 64}));
  EXPECT_EQ(axis.vectorWidth(k["ptrs"], k["mask"]), 8);
  EXPECT_EQ(axis.get(k["t"]).contiguity, (V{64, 1}));
  EXPECT_EQ(axis.get(k["flat"]).contiguity, V{32});
}

TEST(AxisInfo, ComparisonsAreConstantOnlyWhereTheBoundaryIsAligned) {
  Kernel k(R"(
func @cmp(%n: i32, %m: i32) {aligned16 = [0]} {
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %0 = splat %n : tile<64xi32>
  %lt = cmp %r, %0 {predicate = "lt"} : tile<64xi1>
  %ge = cmp %r, %0 {predicate = "ge"} : tile<64xi1>
  %le = cmp %r, %0 {predicate = "le"} : tile<64xi1>
  %gt = cmp %r, %0 {predicate = "gt"} : tile<64xi1>
  %eq = cmp %r, %0 {predicate = "eq"} : tile<64xi1>
  %ult = cmp %r, %0 {predicate = "ult"} : tile<64xi1>
  %rgt = cmp %0, %r {predicate = "gt"} : tile<64xi1>
  %rge = cmp %0, %r {predicate = "ge"} : tile<64xi1>
  %1 = splat %m : tile<64xi32>
  %unaligned = cmp %r, %1 {predicate = "lt"} : tile<64xi1>
  return
}
)");
  AxisAnalysis axis(*k.func);
  for (const char* name : {"lt", "ge", "ult", "rgt"}) EXPECT_EQ(axis.get(k[name]).constancy, V{16}) << name;
  for (const char* name : {"le", "gt", "eq", "rge", "unaligned"}) EXPECT_EQ(axis.get(k[name]).constancy, V{1}) << name;
}

TEST(AxisInfo, LoopCarriedPointersMeetTheirUpdates) {
  Kernel k(R"(
func @loop(%p: ptr<f32>, %n: i32) {aligned16 = [0]} {
  %r = arange {end = 128, start = 0} : tile<128xi32>
  %0 = splat %p : tile<128xptr<f32>>
  %start = ptr_add %0, %r : tile<128xptr<f32>>
  %c0 = constant {value = 0} : i32
  %c4 = constant {value = 4} : i32
  %by128 = constant {value = 128} : tile<128xi32>
  %by3 = constant {value = 3} : tile<128xi32>
  %good, %bad = for %c0, %n, %c4, %start, %start : tile<128xptr<f32>>, tile<128xptr<f32>> {
  ^(%i: i32, %g: tile<128xptr<f32>>, %b: tile<128xptr<f32>>):
    %g2 = ptr_add %g, %by128 : tile<128xptr<f32>>
    %b2 = ptr_add %b, %by3 : tile<128xptr<f32>>
    yield %g2, %b2
  }
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["i"]).divisibility, V{4});
  EXPECT_EQ(axis.vectorWidth(k["g"], nullptr), 4);
  EXPECT_EQ(axis.vectorWidth(k["good"], nullptr), 4);
  EXPECT_EQ(axis.get(k["b"]).contiguity, V{128});
  EXPECT_EQ(axis.get(k["b"]).divisibility, V{4});
  EXPECT_EQ(axis.vectorWidth(k["b"], nullptr), 1);
  EXPECT_EQ(axis.vectorWidth(k["bad"], nullptr), 1);
}

TEST(AxisInfo, WhileAndIfMeetTheirIncomingValues) {
  Kernel k(R"(
func @flow(%n: i32, %c: i1) {aligned16 = [0]} {
  %c0 = constant {value = 0} : i32
  %c8 = constant {value = 8} : i32
  %c2 = constant {value = 2} : i32
  %x, %y = while %c0, %c0 : i32, i32 {
  ^(%wx: i32, %wy: i32):
    %go = cmp %wx, %n {predicate = "lt"} : i1
    condition %go, %wx, %wy
  } {
  ^(%ax: i32, %ay: i32):
    %nx = add %ax, %c8 : i32
    %ny = add %ay, %c2 : i32
    yield %nx, %ny
  }
  %z = if %c : i32 {
    yield %n
  } {
    %m = mul %n, %c2 : i32
    yield %m
  }
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["wx"]).divisibility, V{8});
  EXPECT_EQ(axis.get(k["x"]).divisibility, V{8});
  EXPECT_EQ(axis.get(k["y"]).divisibility, V{2});
  EXPECT_EQ(axis.get(k["z"]).divisibility, V{16});
}

TEST(AxisInfo, OpaqueValuesKnowNothing) {
  Kernel k(R"(
func @opaque(%p: ptr<i32>) {aligned16 = [0]} {
  %r = arange {end = 32, start = 0} : tile<32xi32>
  %0 = splat %p : tile<32xptr<i32>>
  %ptrs = ptr_add %0, %r : tile<32xptr<i32>>
  %vals = load %ptrs : tile<32xi32>
  %sum = reduce_sum %vals {axis = 0} : i32
  %wide = cast %r {rounding = "rne"} : tile<32xi64>
  %narrow = cast %r {rounding = "rne"} : tile<32xi8>
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.vectorWidth(k["ptrs"], nullptr), 4);
  for (const char* name : {"vals", "narrow"}) {
    EXPECT_EQ(axis.get(k[name]).contiguity, V{1}) << name;
    EXPECT_EQ(axis.get(k[name]).divisibility, V{1}) << name;
  }
  EXPECT_EQ(axis.get(k["sum"]).divisibility, V{1});
  EXPECT_EQ(axis.get(k["wide"]).contiguity, V{32});
  Kernel other(kCopy);
  EXPECT_THROW(axis.get(other["offs"]), InternalError);
}

TEST(AxisInfo, HintsRaiseWhatTheAnalysisCannotProve) {
  Kernel k(R"(
func @hinted(%p: ptr<bf16>, %x: ptr<bf16>, %N: i32) {aligned16 = [0, 2]} {
  %pid = program_id {axis = 0} : i32
  %0 = constant {value = 64} : i32
  %1 = mul %pid, %0 : i32
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %2 = splat %1 : tile<64xi32>
  %3 = constant {value = -16} : tile<64xi32>
  %4 = add %2, %3 : tile<64xi32>
  %5 = add %4, %r : tile<64xi32>
  %6 = splat %N : tile<64xi32>
  %wrapped = rem %5, %6 : tile<64xi32>
  %hinted = hint %wrapped {contiguity = [64], divisibility = [64]} : tile<64xi32>
  %7 = splat %p : tile<64xptr<bf16>>
  %plain = ptr_add %7, %wrapped : tile<64xptr<bf16>>
  %fast = ptr_add %7, %hinted : tile<64xptr<bf16>>
  %xa = hint %x {divisibility = [16]} : ptr<bf16>
  %8 = splat %xa : tile<64xptr<bf16>>
  %xs = ptr_add %8, %r : tile<64xptr<bf16>>
  return
}
)");
  AxisAnalysis axis(*k.func);
  EXPECT_EQ(axis.get(k["wrapped"]).contiguity, V{1});  // may be negative: no claim
  EXPECT_EQ(axis.vectorWidth(k["plain"], nullptr), 1);
  EXPECT_EQ(axis.get(k["hinted"]).contiguity, V{64});
  EXPECT_EQ(axis.vectorWidth(k["fast"], nullptr), 8);
  EXPECT_EQ(axis.get(k["xa"]).divisibility, V{16});
  EXPECT_EQ(axis.vectorWidth(k["xs"], nullptr), 8);
}

}  // namespace
}  // namespace tilefuse::lower
