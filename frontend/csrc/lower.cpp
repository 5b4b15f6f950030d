// tilefuse._C.lower: tile IR -> LLVM IR -> PTX for one kernel, and its launch spec.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tilefuse/Error.h"
#include "tilefuse/lower/LowerToLLVM.h"
#include "tilefuse/runtime/LaunchSpec.h"

namespace py = pybind11;
using namespace tilefuse;
using runtime::LaunchSpec;

namespace {

struct Lowered {
  std::string gpuIR;  // the GPU-stage IR the lowering read (empty without keep_ir)
  std::string llir;   // optimized LLVM IR text (empty without keep_ir)
  std::string ptx;
  std::vector<lower::PerfHint> hints;
  std::vector<lower::DebugCheck> checks;
  LaunchSpec spec;
};

runtime::ParamKind paramKind(const Type& t) {
  if (t.isPtr()) return runtime::ParamKind::Ptr;
  switch (t.elem) {
    case DType::I1:
      return runtime::ParamKind::I1;
    case DType::I32:
      return runtime::ParamKind::I32;
    case DType::I64:
      return runtime::ParamKind::I64;
    case DType::F32:
      return runtime::ParamKind::F32;
    case DType::I8:
      return runtime::ParamKind::I8;
    case DType::I16:
      return runtime::ParamKind::I16;
    case DType::U8:
      return runtime::ParamKind::U8;
    case DType::U16:
      return runtime::ParamKind::U16;
    case DType::U32:
      return runtime::ParamKind::U32;
    case DType::U64:
      return runtime::ParamKind::U64;
    case DType::F64:
      return runtime::ParamKind::F64;
    default:
      throw InternalError("a kernel parameter of type " + t.str() + " has no launch form");
  }
}

// The launch spec of a lowered kernel: the parameters from its signature, the rest from
// the lowering and its options.
LaunchSpec launchSpec(const Module& m, const lower::LowerOptions& o, const lower::LoweredKernel& k) {
  LaunchSpec s{k.name, o.arch, o.numWarps, o.numStages, k.numThreads, k.sharedBytes, {}, {}};
  const auto& args = m.lookupFunc(k.name)->region(0).args();
  for (const Value* a : args) s.params.push_back({a->name(), paramKind(a->type())});
  if (o.debug) {  // the hidden parameters of a debug build (LowerToLLVM.h: DebugCheck)
    for (const Value* a : args)
      if (a->type().isPtr()) s.params.push_back({"__extent_" + a->name(), runtime::ParamKind::I64});
    s.params.push_back({"__debug_record", runtime::ParamKind::Ptr});
  }
  auto dims = [](const std::vector<lower::TensorMapSpec::Dim>& ds) {
    std::vector<LaunchSpec::TensorMap::Dim> out;
    for (const auto& d : ds) out.push_back({d.param, d.value, d.factor});
    return out;
  };
  for (const lower::TensorMapSpec& t : k.tensorMaps)
    s.tensorMaps.push_back({t.base, t.elemBytes, dims(t.sizes), dims(t.strides), t.box, t.swizzleBytes, t.where});
  return s;
}

}  // namespace

void init_lower(py::module_& m) {
  auto l = m.def_submodule("lower", "GPU lowering");
  py::class_<Lowered>(l, "Lowered")
      .def_readonly("gpu_ir", &Lowered::gpuIR)
      .def_readonly("llir", &Lowered::llir)
      .def_readonly("ptx", &Lowered::ptx)
      .def_readonly("spec", &Lowered::spec)
      .def_property_readonly("hints", [](const Lowered& k) {
        // (file or None, line, col, message) per missed fast path.
        py::list out;
        for (const auto& h : k.hints) {
          py::object file = h.loc.known() ? py::cast(*h.loc.file) : py::none();
          out.append(py::make_tuple(file, h.loc.line, h.loc.col, h.message));
        }
        return out;
      })
      .def_property_readonly("checks", [](const Lowered& k) {
        // (file or None, line, col, what, param, element bytes, shape) per checked access.
        py::list out;
        for (const auto& c : k.checks) {
          py::object file = c.loc.known() ? py::cast(*c.loc.file) : py::none();
          out.append(py::make_tuple(file, c.loc.line, c.loc.col, c.what, c.param, c.elemBytes, c.shape));
        }
        return out;
      });
  l.def(
      "compile",
      [](const Module& m, const std::string& kernel, const std::string& arch, int numWarps, int numStages, bool keepIR,
         const std::string& libdevice, bool debug) {
        py::gil_scoped_release release;
        lower::LowerOptions o{arch, numWarps, numStages, keepIR, libdevice, debug};
        lower::LoweredKernel k = lower::compileKernel(m, kernel, o);
        return Lowered{std::move(k.gpuIR), std::move(k.llir),   std::move(k.ptx),
                       std::move(k.hints), std::move(k.checks), launchSpec(m, o, k)};
      },
      py::arg("module"), py::arg("kernel"), py::arg("arch"), py::arg("num_warps"), py::arg("num_stages"),
      py::arg("keep_ir") = true, py::arg("libdevice") = "", py::arg("debug") = false);
  l.attr("DEBUG_RECORD_WORDS") = lower::kDebugRecordWords;
}
