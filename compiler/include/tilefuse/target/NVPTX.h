// NVPTX code generation through an in-process LLVM TargetMachine.
#pragma once

#include <string>
#include <string_view>

namespace llvm {
class Module;
}

namespace tilefuse::target {

struct PtxOptions {
  std::string arch = "sm_90a";  // sm_90a and sm_89 use +ptx84 (fp8 mma.sync); sm_80 +ptx70
  int optLevel = 3;
  bool keepIR = true;  // also return the optimized LLVM IR as text
};

struct PtxResult {
  std::string optimizedIR;  // after the O<optLevel> middle-end pipeline (NVVMReflect included)
  std::string ptx;
};

// Optimizes textual LLVM IR for nvptx64 and emits PTX.
PtxResult optimizeAndEmitPTX(std::string_view llvmIR, const PtxOptions& opts = {});
// The same for a verified module in memory (which it optimizes in place).
PtxResult optimizeAndEmitPTX(llvm::Module& mod, const PtxOptions& opts = {});

// Compiles textual LLVM IR for nvptx64 to PTX text. Malformed IR raises
// UserError with LLVM's diagnostic; an unknown arch raises UserError too.
std::string compileLLVMIRToPTX(std::string_view llvmIR, const PtxOptions& opts = {});

// The PTX ISA feature the arch needs ("+ptx84" for sm_90a).
std::string ptxFeatureFor(std::string_view arch);

std::string llvmVersion();

}  // namespace tilefuse::target
