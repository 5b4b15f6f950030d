#include "tilefuse/target/NVPTX.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>

#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <memory>
#include <mutex>

#include "tilefuse/Error.h"

namespace tilefuse::target {
namespace {

void initNVPTX() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

[[noreturn]] void fail(const std::string& msg) { throw UserError(Location{}, msg); }

}  // namespace

std::string ptxFeatureFor(std::string_view arch) {
  // PTX 8.4: mma.sync on fp8 (sm_89 and later). PTX 7.4: eviction priorities and L2
  // cache policies of ld/st (Triton's eviction_policy), drivers from 470 on.
  if (arch == "sm_90a" || arch == "sm_90" || arch == "sm_89") return "+ptx84";
  if (arch == "sm_80" || arch == "sm_86" || arch == "sm_87") return "+ptx74";
  fail("unsupported target arch '" + std::string(arch) + "' (expected sm_80, sm_86, sm_87, sm_89, sm_90 or sm_90a)");
}

std::string llvmVersion() { return LLVM_VERSION_STRING; }

PtxResult optimizeAndEmitPTX(std::string_view llvmIR, const PtxOptions& opts) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  auto buf = llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(llvmIR.data(), llvmIR.size()), "tilefuse", false);
  std::unique_ptr<llvm::Module> mod = llvm::parseIR(buf->getMemBufferRef(), diag, ctx);
  if (!mod) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("llvm-ir", os, false);
    fail("invalid LLVM IR: " + os.str());
  }
  std::string verr;
  llvm::raw_string_ostream vos(verr);
  if (llvm::verifyModule(*mod, &vos)) fail("LLVM IR does not verify: " + vos.str());
  return optimizeAndEmitPTX(*mod, opts);
}

PtxResult optimizeAndEmitPTX(llvm::Module& mod, const PtxOptions& opts) {
  initNVPTX();
  std::string feature = ptxFeatureFor(opts.arch);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  auto t0 = now();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple.getTriple(), err);
  if (!t) throw InternalError("NVPTX target missing: " + err);
  llvm::TargetOptions to;
  // No implicit contraction of a*b+c: results stay bit-identical to the interpreter; tl.fma fuses explicitly.
  to.AllowFPOpFusion = llvm::FPOpFusion::Standard;
  auto level = opts.optLevel >= 3   ? llvm::CodeGenOptLevel::Aggressive
               : opts.optLevel == 2 ? llvm::CodeGenOptLevel::Default
               : opts.optLevel == 1 ? llvm::CodeGenOptLevel::Less
                                    : llvm::CodeGenOptLevel::None;
  std::unique_ptr<llvm::TargetMachine> tm(
      t->createTargetMachine(triple.getTriple(), opts.arch, feature, to, std::nullopt, std::nullopt, level));
  mod.setTargetTriple(triple.getTriple());
  mod.setDataLayout(tm->createDataLayout());

  if (opts.optLevel > 0) {
    // The middle end: inlining of libdevice, NVVMReflect (through the target's callbacks), O3.
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    auto ol = opts.optLevel >= 3   ? llvm::OptimizationLevel::O3
              : opts.optLevel == 2 ? llvm::OptimizationLevel::O2
                                   : llvm::OptimizationLevel::O1;
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(ol);
    mpm.run(mod, mam);
  }
  auto t1 = now();
  PtxResult result;
  if (opts.keepIR) {
    llvm::raw_string_ostream irOut(result.optimizedIR);
    mod.print(irOut, nullptr);
    irOut.flush();
  }
  auto t2 = now();
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream out(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("NVPTX target cannot emit assembly");
  pm.run(mod);
  result.ptx = std::string(ptx.str());
  if (const char* v = std::getenv("TILEFUSE_TIME_PASSES"); v && std::string(v) == "1")
    std::fprintf(stderr, "[tilefuse] llvm: optimize %.1f ms, print IR %.1f ms, PTX codegen %.1f ms\n", ms(t0, t1),
                 ms(t1, t2), ms(t2, now()));
  return result;
}

std::string compileLLVMIRToPTX(std::string_view llvmIR, const PtxOptions& opts) {
  return optimizeAndEmitPTX(llvmIR, opts).ptx;
}

}  // namespace tilefuse::target
