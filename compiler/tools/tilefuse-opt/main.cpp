// tilefuse-opt: reads tile-IR text, verifies it, runs the named passes in the
// order given and prints the result; with --emit=llvm or --emit=ptx, the lowering of
// each GPU-stage kernel instead (for its arch and num_warps), so that emitters have lit
// tests of their own.
//   tilefuse-opt FILE|- [--split-input-file] [--print-locations] [--PASS[=key=value,...] ...] [--pipeline]
//                [--emit=llvm|ptx]
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"
#include "tilefuse/lower/LowerToLLVM.h"
#include "tilefuse/passes/Passes.h"

using namespace tilefuse;

namespace {

int usage() {
  std::cerr << "usage: tilefuse-opt FILE|- [--split-input-file] [--print-locations] [--pipeline] "
               "[--PASS[=key=value,...] ...] [--emit=llvm|ptx]\n"
               "passes:\n";
  for (const auto& p : passes::registry()) {
    std::string flag(p.name);
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::cerr << "  --" << flag << (p.options.empty() ? "" : "[=" + std::string(p.options) + "]") << "  "
              << p.description << "\n";
  }
  return 2;
}

struct Chunk {
  std::string text;
  int firstLine;
};

std::vector<Chunk> splitInput(const std::string& text, bool split) {
  std::vector<Chunk> chunks{{"", 1}};
  if (!split) return {{text, 1}};
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("// -----", 0) == 0) {
      chunks.push_back({"", n + 1});
      continue;
    }
    chunks.back().text += line + "\n";
  }
  return chunks;
}

// The lowered LLVM IR or PTX of each GPU-stage kernel of `m`, for its own arch and warps.
std::string emit(const Module& m, const std::string& what) {
  std::string out;
  for (const Op* f : m.funcs()) {
    if (!isGpuStage(*f) || !f->hasAttr("kernel") || !f->boolAttr("kernel")) continue;
    lower::LowerOptions o;
    o.arch = f->strAttr("arch");
    o.numWarps = static_cast<int>(f->intAttr("num_warps"));
    o.numStages = 1;  // GPU-stage IR carries its pipelines already expanded
    lower::LoweredKernel k = lower::compileKernel(m, funcName(*f), o);
    out += what == "ptx" ? k.ptx : k.llir;
  }
  if (out.empty()) throw UserError({}, "--emit=" + what + ": no GPU-stage kernel (gpu = true, kernel = true) to lower");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  bool split = false, pipeline = false;
  std::string emitWhat;
  PrintOptions popts;
  std::vector<std::pair<const passes::PassInfo*, passes::PassOptions>> order;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--split-input-file") {
      split = true;
    } else if (a == "--print-locations") {
      popts.locations = true;
    } else if (a == "--pipeline") {
      pipeline = true;
    } else if (a == "--emit=llvm" || a == "--emit=ptx") {
      emitWhat = a.substr(7);
    } else if (a == "--help" || a == "-h") {
      return usage();
    } else if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      const auto* p = passes::lookup(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      if (!p) {
        std::cerr << "tilefuse-opt: unknown option '" << a << "'\n";
        return usage();
      }
      try {
        auto opts = passes::parsePassOptions(eq == std::string::npos ? "" : a.substr(eq + 1));
        order.emplace_back(p, passes::completeOptions(*p, opts));
      } catch (const UserError& e) {
        std::cerr << "tilefuse-opt: " << e.message() << "\n";
        return 2;
      }
    } else if (file.empty()) {
      file = a;
    } else {
      return usage();
    }
  }
  if (file.empty()) return usage();
  std::stringstream buf;
  if (file == "-") {
    buf << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "tilefuse-opt: cannot open '" << file << "'\n";
      return 2;
    }
    buf << in.rdbuf();
  }
  int rc = 0;
  bool first = true;
  for (const Chunk& c : splitInput(buf.str(), split)) {
    if (!first) std::cout << "// -----\n";
    first = false;
    try {
      auto m = parseModule(c.text, file == "-" ? "<stdin>" : file, c.firstLine);
      verifyModule(*m);
      for (const auto& [p, opts] : order) passes::runPass(*p, *m, "opt", true, opts);
      if (pipeline) passes::runPipeline(*m);
      std::cout << (emitWhat.empty() ? printModule(*m, popts) : emit(*m, emitWhat));
    } catch (const UserError& e) {
      std::cerr << e.what() << "\n";
      rc = 1;
    } catch (const InternalError& e) {
      std::cerr << e.what() << "\n";
      rc = 3;
    }
  }
  return rc;
}
