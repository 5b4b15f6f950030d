// tilefuse._C.ir: types, the module, the builder, text form and verifier.
// Values, ops and blocks are owned by their module; Python holds references.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tilefuse/ir/Builder.h"
#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace py = pybind11;
using namespace tilefuse;

namespace {
constexpr auto ref = py::return_value_policy::reference;
}

void init_ir(py::module_& m) {
  auto ir = m.def_submodule("ir", "the tile IR");

  auto dtype = py::enum_<DType>(ir, "DType");
  for (int i = 0; i <= static_cast<int>(DType::F8E4B15); ++i) {
    auto d = static_cast<DType>(i);
    dtype.value(std::string(dtypeName(d)).c_str(), d);
  }
  ir.def("dtype_name", [](DType d) { return std::string(dtypeName(d)); });
  ir.def("bit_width", &bitWidth);
  ir.def("is_int", &isInt);
  ir.def("is_unsigned", &isUnsigned);

  py::enum_<OpKind> kind(ir, "OpKind");
#define TF_OP(Name, Mnemonic, MinOps, MaxOps, NumRes, NumRegions, Traits) kind.value(#Name, OpKind::Name);
#include "tilefuse/ir/Ops.def"
  ir.def("mnemonics", [] {
    std::vector<std::string> r;
    for (const auto& i : allOps()) r.emplace_back(i.mnemonic);
    return r;
  });

  py::class_<Type>(ir, "Type")
      .def_static("scalar", &Type::scalar)
      .def_static("ptr", &Type::ptr)
      .def_static("tile", &Type::tile)
      .def_static("ptr_tile", &Type::ptrTile)
      .def_static("desc", &Type::desc)
      .def_static("parse", &parseType)
      .def_property_readonly("elem", [](const Type& t) { return t.elem; })
      .def_property_readonly("shape", [](const Type& t) { return t.shape; })
      .def_property_readonly("is_tile", &Type::isTile)
      .def_property_readonly("is_ptr", &Type::isPtr)
      .def_property_readonly("is_desc", &Type::isDesc)
      .def_property_readonly("is_numeric", &Type::isNumeric)
      .def("element_type", &Type::elementType)
      .def("with_shape", &Type::withShape)
      .def("with_elem", &Type::withElem)
      .def("__eq__", &Type::operator==)
      .def("__hash__", [](const Type& t) { return py::hash(py::str(t.str())); })
      .def("__str__", &Type::str)
      .def("__repr__", [](const Type& t) { return "<Type " + t.str() + ">"; });

  py::class_<Location>(ir, "Location")
      .def(py::init([](const std::string& f, int l, int c) { return Location::make(f, l, c); }))
      .def_property_readonly("file", [](const Location& l) { return l.known() ? py::cast(*l.file) : py::none(); })
      .def_readonly("line", &Location::line)
      .def_readonly("col", &Location::col)
      .def("__str__", &Location::str);
  ir.def("register_source", &registerSource, py::arg("file"), py::arg("text"), py::arg("first_line") = 1);

  py::class_<Value>(ir, "Value")
      .def_property_readonly("type", &Value::type)
      .def_property("name", &Value::name, &Value::setName)
      .def_property_readonly("defining_op", &Value::definingOp, ref);

  py::class_<Block>(ir, "Block")
      .def_property_readonly("args", &Block::args, ref)
      .def_property_readonly(
          "ops",
          [](Block& b) {
            std::vector<Op*> r;
            for (auto& o : b.ops()) r.push_back(o.get());
            return r;
          },
          ref);

  py::class_<Op>(ir, "Op")
      .def_property_readonly("kind", &Op::kind)
      .def_property_readonly("mnemonic", [](const Op& o) { return std::string(o.mnemonic()); })
      .def_property_readonly("operands", &Op::operands, ref)
      .def_property_readonly("results", &Op::results, ref)
      .def_property_readonly("loc", &Op::loc)
      .def("region", &Op::region, ref)
      .def("add_result", &Op::addResult, ref)
      .def("set_func_results",
           [](Op& f, const std::vector<Type>& types) {
             if (f.kind() != OpKind::Func) throw InternalError("set_func_results on a non-function op");
             if (types.empty())
               f.removeAttr("results");
             else
               f.setAttr("results", types);
           })
      .def("set_int_list_attr", [](Op& o, const std::string& n, const std::vector<int64_t>& v) { o.setAttr(n, v); })
      .def("set_bool_attr", [](Op& o, const std::string& n, bool v) { o.setAttr(n, v); })
      .def("set_int_attr", [](Op& o, const std::string& n, int64_t v) { o.setAttr(n, v); })
      .def_property_readonly("num_regions", &Op::numRegions)
      .def("__str__", [](const Op& o) { return printOp(o); });

  py::class_<Module>(ir, "Module")
      .def(py::init<>())
      .def_static("parse", &parseModule, py::arg("text"), py::arg("filename") = "<string>", py::arg("first_line") = 1)
      .def("verify", &verifyModule)
      .def("lookup_func", &Module::lookupFunc, ref)
      .def("funcs", &Module::funcs, ref)
      .def(
          "to_text", [](const Module& mod, bool locs) { return printModule(mod, PrintOptions{locs}); },
          py::arg("locations") = false)
      .def("__str__", [](const Module& mod) { return printModule(mod); });

  py::class_<Builder>(ir, "Builder")
      .def(py::init<Module&>(), py::keep_alive<1, 2>())
      .def("set_loc", [](Builder& b, const std::string& f, int l, int c) { b.setLoc(Location::make(f, l, c)); })
      .def("set_insertion_point_to_end", &Builder::setInsertionPointToEnd)
      .def("set_insertion_point_before", &Builder::setInsertionPointBefore)
      .def("insertion_block", &Builder::insertionBlock, ref)
      .def("create_func", &Builder::createFunc, ref)
      .def("const_int", &Builder::constInt, ref)
      .def("const_float", &Builder::constFloat, ref)
      .def("binary", &Builder::binary, ref)
      .def("neg", &Builder::neg, ref)
      .def("fma", &Builder::fma, ref)
      .def("cmp", &Builder::cmp, ref)
      .def("select", &Builder::select, ref)
      .def("unary", &Builder::unary, ref)
      .def("cast", &Builder::cast, ref, py::arg("value"), py::arg("to"), py::arg("rounding") = "rne",
           py::arg("rand_bits") = nullptr)
      .def("bitcast", &Builder::bitcast, ref)
      .def("ptr_add", &Builder::ptrAdd, ref)
      .def("arange", &Builder::arange, ref)
      .def("splat", &Builder::splat, ref)
      .def("broadcast_to", &Builder::broadcastTo, ref)
      .def("expand_dims", &Builder::expandDims, ref)
      .def("reshape", &Builder::reshape, ref)
      .def("trans", &Builder::trans, ref, py::arg("value"), py::arg("perm") = std::vector<int64_t>{})
      .def("hint", &Builder::hint, ref, py::arg("value"), py::arg("divisibility"), py::arg("contiguity"))
      .def("join", &Builder::join, ref)
      .def("split", &Builder::split, ref)
      .def("full", &Builder::full, ref)
      .def("program_id", &Builder::programId, ref)
      .def("num_programs", &Builder::numPrograms, ref)
      .def(
          "load",
          [](Builder& b, Value* p, Value* m, Value* o, const std::string& cache, const std::string& evict, bool vol) {
            return b.load(p, m, o, {cache, evict, vol});
          },
          ref, py::arg("ptr"), py::arg("mask") = nullptr, py::arg("other") = nullptr, py::arg("cache") = "",
          py::arg("evict") = "", py::arg("volatile") = false)
      .def(
          "store",
          [](Builder& b, Value* p, Value* v, Value* m, const std::string& cache, const std::string& evict) {
            b.store(p, v, m, {cache, evict, false});
          },
          py::arg("ptr"), py::arg("value"), py::arg("mask") = nullptr, py::arg("cache") = "", py::arg("evict") = "")
      .def("atomic", &Builder::atomic, ref, py::arg("kind"), py::arg("ptr"), py::arg("value"),
           py::arg("mask") = nullptr, py::arg("sem") = "", py::arg("scope") = "")
      .def("atomic_cas", &Builder::atomicCas, ref, py::arg("ptr"), py::arg("cmp"), py::arg("value"),
           py::arg("sem") = "", py::arg("scope") = "")
      .def("debug_barrier", &Builder::debugBarrier)
      .def("make_desc", &Builder::makeDesc, ref)
      .def("desc_load", &Builder::descLoad, ref)
      .def("desc_store", &Builder::descStore)
      .def("reduce", &Builder::reduce, ref)
      .def("create_combine", &Builder::createCombine, ref)
      .def("combine_yield", &Builder::combineYield)
      .def("gather", &Builder::gather, ref)
      .def("histogram", &Builder::histogram, ref, py::arg("x"), py::arg("num_bins"), py::arg("mask") = nullptr)
      .def("dot", &Builder::dot, ref, py::arg("a"), py::arg("b"), py::arg("acc") = nullptr,
           py::arg("precision") = "ieee", py::arg("out_type") = DType::F32)
      .def("dot_scaled", &Builder::dotScaled, ref, py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"),
           py::arg("acc") = nullptr)
      .def("create_for", &Builder::createFor, ref)
      .def("create_if", &Builder::createIf, ref)
      .def("create_while", &Builder::createWhile, ref)
      .def("yield_", &Builder::yield)
      .def("condition", &Builder::condition)
      .def("ret", &Builder::ret)
      .def("call", &Builder::call, ref)
      .def("print", &Builder::print)
      .def("assert_true", &Builder::assertTrue)
      .def("broadcast_pair", &Builder::broadcastPair, ref)
      .def("cast_to", &Builder::castTo, ref);
}
