// The text form: parse errors at exact positions, print(parse(t)) == t, value
// names, attribute values and locations.
#include <gtest/gtest.h>

#include <cmath>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace tilefuse {
namespace {

struct ParseErrorCase {
  const char* name;
  const char* text;
  int line, col;
  const char* message;
};

const ParseErrorCase kParseErrors[] = {
    {"undefined value", "func @f(%a: f32) {\n  %0 = add %a, %b : f32\n  return\n}\n", 2, 16,
     "use of undefined value '%b'"},
    {"value of a closed region",
     "func @f(%c: i1) {\n  if %c {\n    %t = constant {value = 1} : i32\n    yield\n"
     "  } {\n    yield\n  }\n  return %t\n}\n",
     8, 10, "use of undefined value '%t'"},
    {"result used in its own region",
     "func @f(%c: i1) {\n  %r = if %c : i32 {\n    yield %r\n  } {\n    yield %r\n  }\n"
     "  return\n}\n",
     3, 11, "use of undefined value '%r'"},
    {"duplicate definition", "func @f(%a: f32) {\n  %x = neg %a : f32\n  %x = neg %a : f32\n  return\n}\n", 3, 3,
     "value '%x' is defined twice"},
    {"duplicate parameter", "func @f(%a: f32, %a: i32) {\n  return\n}\n", 1, 18, "value '%a' is defined twice"},
    {"block argument shadows", "func @f(%n: i32) {\n  for %n, %n, %n {\n  ^(%n: i32):\n    yield\n  }\n  return\n}\n",
     3, 5, "value '%n' is defined twice"},
    {"unknown op", "func @f(%a: f32) {\n  %0 = frobnicate %a : f32\n  return\n}\n", 2, 8, "unknown op 'frobnicate'"},
    {"nested func", "func @f() {\n  func @g() {\n    return\n  }\n  return\n}\n", 2, 3, "unknown op 'func'"},
    {"missing op", "func @f(%a: f32) {\n  %0 = : f32\n}\n", 2, 8, "expected an op"},
    {"malformed result type", "func @f(%a: f32) {\n  %0 = neg %a : tile<64xf33>\n  return\n}\n", 2, 17,
     "malformed type 'tile<64xf33>'"},
    {"malformed parameter type", "func @f(%a: tile<3x>) {\n  return\n}\n", 1, 13, "malformed type 'tile<3x>'"},
    {"malformed block argument type",
     "func @f(%n: i32) {\n  for %n, %n, %n {\n  ^(%i: int):\n    yield\n  }\n"
     "  return\n}\n",
     3, 9, "malformed type 'int'"},
    {"missing '}' of a function", "func @f(%a: f32) {\n  %0 = neg %a : f32\n  return\n", 4, 1,
     "expected '}' to close the function body"},
    {"missing '}' of a region", "func @f(%c: i1) {\n  if %c {\n    yield\n  } {\n    yield\n", 6, 1,
     "expected '}' to close the region"},
    {"more names than types", "func @f(%a: f32) {\n  %0, %1 = neg %a : f32\n  return\n}\n", 2, 3,
     "'neg' names 2 results but lists 1 result types"},
    {"types without names", "func @f(%p: ptr<f32>, %v: f32) {\n  store %p, %v : f32\n  return\n}\n", 2, 3,
     "'store' names 0 results but lists 1 result types"},
    {"names without types", "func @f(%a: f32) {\n  %0 = neg %a\n  return\n}\n", 2, 3,
     "'neg' names 1 results but lists 0 result types"},
    {"missing '='", "func @f(%a: f32) {\n  %0 neg %a : f32\n  return\n}\n", 2, 6,
     "expected '=' after the result names"},
    {"not a func at the top", "%0 = constant {value = 1} : i32\n", 1, 1, "expected 'func'"},
    {"missing parameter list", "func @f {\n  return\n}\n", 1, 9, "expected '(' to open the parameter list"},
    {"missing ':' after a parameter", "func @f(%a f32) {\n  return\n}\n", 1, 12,
     "expected ':' after the parameter name"},
    {"unterminated string", "func @f() {\n  print {prefix = \"abc}\n  return\n}\n", 2, 19, "unterminated string"},
    {"string ending in a backslash", "func @f() {\n  print {prefix = \"abc\\", 2, 19, "unterminated string"},
    {"malformed attribute value", "func @f() {\n  %0 = program_id {axis = 1x} : i32\n  return\n}\n", 2, 27,
     "malformed attribute value '1x'"},
    {"float in an integer list",
     "func @f(%a: tile<2x4xf32>) {\n  %0 = trans %a {perm = [1, 0.5]} : tile<4x2xf32>\n"
     "  return\n}\n",
     2, 25, "expected integers in the list"},
    {"unclosed attribute dictionary", "func @f() {\n  %0 = program_id {axis = 1 : i32\n  return\n}\n", 2, 29,
     "expected '}' to close the attributes"},
    {"missing attribute name", "func @f() {\n  %0 = program_id {axis = 0, = 1} : i32\n  return\n}\n", 2, 30,
     "expected an attribute name"},
    {"value name without '%'", "func @f(a: f32) {\n  return\n}\n", 1, 9, "expected a value name starting with '%'"},
    {"empty value name", "func @f(%: f32) {\n  return\n}\n", 1, 10, "empty value name"},
    {"block arguments without ':'",
     "func @f(%n: i32) {\n  for %n, %n, %n {\n  ^(%i: i32)\n    yield\n  }\n"
     "  return\n}\n",
     4, 5, "expected ':' after the block arguments"},
    {"malformed loc", "func @f() {\n  %0 = program_id {axis = 0} : i32 loc(\"f.py\":3)\n  return\n}\n", 2, 48,
     "expected ':' in loc(...)"},
};

TEST(Parser, ErrorsAtExactPositions) {
  for (const auto& c : kParseErrors) {
    SCOPED_TRACE(c.name);
    try {
      parseModule(c.text, "in.tir");
      ADD_FAILURE() << "parsed without error";
    } catch (const UserError& e) {
      EXPECT_EQ(e.message(), c.message);
      EXPECT_EQ(e.loc().line, c.line);
      EXPECT_EQ(e.loc().col, c.col);
      ASSERT_TRUE(e.loc().known());
      EXPECT_EQ(*e.loc().file, "in.tir");
    }
  }
}

TEST(Parser, DiagnosticQuotesTheLineWithACaret) {
  try {
    parseModule("func @f(%a: f32) {\n  %0 = add %a, %b : f32\n  return\n}\n", "quote.tir");
    FAIL() << "parsed without error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "quote.tir:2:16: error: use of undefined value '%b'\n"
              "  %0 = add %a, %b : f32\n"
              "               ^");
  }
}

TEST(Parser, FirstLineNumbersSplitInput) {
  try {
    parseModule("func @f() {\n  %0 = nope : i32\n}\n", "split.tir", 40);
    FAIL() << "parsed without error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.loc().line, 41);
    EXPECT_EQ(e.loc().col, 8);
    EXPECT_NE(std::string(e.what()).find("\n  %0 = nope : i32\n       ^"), std::string::npos) << e.what();
  }
}

TEST(Parser, OpLocationsAreTheFirstTokenOfTheLine) {
  auto m = parseModule("func @f(%a: f32) {\n  %0 = neg %a : f32\n    return\n}\n", "pos.tir");
  Op* f = m->lookupFunc("f");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->loc().str(), "pos.tir:1:1");
  EXPECT_EQ(f->region(0).front()->loc().str(), "pos.tir:2:3");
  EXPECT_EQ(f->region(0).back()->loc().str(), "pos.tir:3:5");
}

// Nested regions, block arguments, calls, multiple results, attributes of each kind.
const char* kNontrivial = R"(func @body(%x: tile<16xf32>, %s: f32) -> (tile<16xf32>, i32) {
  %0 = splat %s : tile<16xf32>
  %sum = add %x, %0 : tile<16xf32>
  %1 = constant {value = 0} : i32
  %2 = constant {value = 4} : i32
  %3 = constant {value = 1} : i32
  %acc, %n = for %1, %2, %3, %sum, %1 : tile<16xf32>, i32 {
  ^(%i: i32, %a: tile<16xf32>, %k: i32):
    %c = cmp %i, %3 {predicate = "eq"} : i1
    %4 = if %c : tile<16xf32> {
      %5 = exp %a : tile<16xf32>
      yield %5
    } {
      %6 = while %k : i32 {
      ^(%w: i32):
        %7 = cmp %w, %2 {predicate = "lt"} : i1
        condition %7, %w
      } {
      ^(%w_1: i32):
        %8 = add %w_1, %3 : i32
        yield %8
      }
      print %6 {prefix = "w"}
      yield %a
    }
    %9 = add %k, %3 : i32
    yield %4, %9
  }
  return %acc, %n
}

func @caller(%x: tile<16xf32>) {kernel_hint = [64, 128], tags = [f32, tile<4xptr<f16>>]} {
  %0 = constant {value = 2.5} : f32
  %r, %m = call @body(%x, %0) : tile<16xf32>, i32
  %1 = reduce_sum %r {axis = 0} : f32
  %2 = cmp %m, %m {predicate = "eq"} : i1
  assert %2 {message = "ok"}
  return
}
)";

TEST(Parser, RoundTripNontrivial) {
  auto m = parseModule(kNontrivial);
  EXPECT_NO_THROW(verifyModule(*m));
  EXPECT_EQ(printModule(*m), kNontrivial);
}

TEST(Parser, RoundTripKeepsAttributeKinds) {
  auto m = parseModule(kNontrivial);
  Op* caller = m->lookupFunc("caller");
  ASSERT_NE(caller, nullptr);
  EXPECT_EQ(caller->intsAttr("kernel_hint"), (std::vector<int64_t>{64, 128}));
  const auto& tags = std::get<std::vector<Type>>(*caller->attr("tags"));
  ASSERT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags[1], Type::ptrTile(DType::F16, {4}));
}

TEST(Parser, NumbersAreRenumberedInOrder) {
  auto m = parseModule(
      "func @f(%7: f32) {\n  %42 = neg %7 : f32\n  %x = neg %42 : f32\n  %3 = neg %x : f32\n"
      "  return\n}\n");
  EXPECT_EQ(printModule(*m),
            "func @f(%0: f32) {\n  %1 = neg %0 : f32\n  %x = neg %1 : f32\n  %2 = neg %x : f32\n"
            "  return\n}\n");
}

TEST(Parser, NameHintsAreUniquified) {
  // Sibling regions may reuse a name; the printer keeps names unique per function,
  // in the order it meets them.
  const char* in =
      "func @f(%c: i1) {\n  if %c {\n    %t = constant {value = 1} : i32\n    yield\n  } {\n"
      "    %t = constant {value = 2} : i32\n    yield\n  }\n  %t_1 = constant {value = 3} : i32\n"
      "  return\n}\n";
  const char* out =
      "func @f(%c: i1) {\n  if %c {\n    %t = constant {value = 1} : i32\n    yield\n  } {\n"
      "    %t_1 = constant {value = 2} : i32\n    yield\n  }\n  %t_1_1 = constant {value = 3} : i32\n"
      "  return\n}\n";
  auto m = parseModule(in);
  std::string printed = printModule(*m);
  EXPECT_EQ(printed, out);
  EXPECT_EQ(printModule(*parseModule(printed)), printed);
}

TEST(Parser, NameHintsSetInCpp) {
  auto m = parseModule(
      "func @f(%a: f32) {\n  %0 = neg %a : f32\n  %1 = neg %0 : f32\n  %2 = neg %1 : f32\n"
      "  return\n}\n");
  auto& ops = m->lookupFunc("f")->region(0).ops();
  auto it = ops.begin();
  (*it++)->result()->setName("x");
  (*it++)->result()->setName("x");
  (*it++)->result()->setName("a");  // clashes with the parameter
  EXPECT_EQ(printModule(*m),
            "func @f(%a: f32) {\n  %x = neg %a : f32\n  %x_1 = neg %x : f32\n"
            "  %a_1 = neg %x_1 : f32\n  return\n}\n");
}

TEST(Parser, FloatAttributes) {
  auto m = parseModule(
      "func @f() {\n"
      "  %0 = constant {value = 1.0e-10} : f32\n"
      "  %1 = constant {value = inf} : f32\n"
      "  %2 = constant {value = -0.5} : f32\n"
      "  %3 = constant {value = -inf} : f32\n"
      "  %4 = constant {value = nan} : f32\n"
      "  %5 = constant {value = 100.0} : f32\n"
      "  %6 = constant {value = 2.5E3} : f32\n"
      "  %7 = constant {value = -0.0} : f32\n"
      "  %8 = constant {value = 1e+300} : f64\n"
      "  %9 = constant {value = 100} : i32\n"
      "  return\n}\n");
  std::vector<const Attr*> v;
  for (auto& o : m->lookupFunc("f")->region(0).ops())
    if (o->kind() == OpKind::Constant) v.push_back(o->attr("value"));
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(std::get<double>(*v[0]), 1e-10);
  EXPECT_EQ(std::get<double>(*v[1]), INFINITY);
  EXPECT_EQ(std::get<double>(*v[2]), -0.5);
  EXPECT_EQ(std::get<double>(*v[3]), -INFINITY);
  EXPECT_TRUE(std::isnan(std::get<double>(*v[4])));
  EXPECT_EQ(std::get<double>(*v[5]), 100.0);
  EXPECT_EQ(std::get<double>(*v[6]), 2500.0);
  EXPECT_TRUE(std::signbit(std::get<double>(*v[7])));
  EXPECT_EQ(std::get<double>(*v[8]), 1e300);
  EXPECT_EQ(std::get<int64_t>(*v[9]), 100);
  // Printing is canonical: the shortest form that reads back exactly, floats keep a '.' or an exponent.
  std::string printed = printModule(*m);
  EXPECT_EQ(printed,
            "func @f() {\n"
            "  %0 = constant {value = 1e-10} : f32\n"
            "  %1 = constant {value = inf} : f32\n"
            "  %2 = constant {value = -0.5} : f32\n"
            "  %3 = constant {value = -inf} : f32\n"
            "  %4 = constant {value = nan} : f32\n"
            "  %5 = constant {value = 100.0} : f32\n"
            "  %6 = constant {value = 2500.0} : f32\n"
            "  %7 = constant {value = -0.0} : f32\n"
            "  %8 = constant {value = 1e+300} : f64\n"
            "  %9 = constant {value = 100} : i32\n"
            "  return\n}\n");
  EXPECT_EQ(printModule(*parseModule(printed)), printed);
}

TEST(Parser, DoublesRoundTripExactly) {
  for (double d : {0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, 1.7976931348623157e308, -123456.789, 0.0}) {
    std::string text = attrToString(Attr(d));
    std::string src = "func @f() {\n  print {prefix = " + text + "}\n  return\n}\n";
    auto parsed = parseModule(src);
    EXPECT_EQ(std::get<double>(*parsed->lookupFunc("f")->region(0).front()->attr("prefix")), d) << text;
  }
}

TEST(Parser, StringsWithQuotesAndEscapes) {
  const char* text = "func @f(%c: i1) {\n  assert %c {message = \"say \\\"hi\\\" \\\\ to\\nme\"}\n  return\n}\n";
  auto m = parseModule(text);
  Op* a = m->lookupFunc("f")->region(0).front();
  EXPECT_EQ(a->strAttr("message"), "say \"hi\" \\ to\nme");
  EXPECT_EQ(printModule(*m), text);
  // Unknown escapes keep the character.
  auto m2 = parseModule("func @f(%c: i1) {\n  assert %c {message = \"\\q\"}\n  return\n}\n");
  EXPECT_EQ(m2->lookupFunc("f")->region(0).front()->strAttr("message"), "q");
}

TEST(Parser, LocationsPrintAndParseBack) {
  auto m = parseModule("func @f(%c: i1) {\n  if %c {\n    yield\n  } {\n    yield\n  }\n  return\n}\n", "loc.tir");
  std::string printed = printModule(*m, PrintOptions{true});
  EXPECT_EQ(printed,
            "func @f(%c: i1) loc(\"loc.tir\":1:1) {\n"
            "  if %c loc(\"loc.tir\":2:3) {\n"
            "    yield loc(\"loc.tir\":3:5)\n"
            "  } {\n"
            "    yield loc(\"loc.tir\":5:5)\n"
            "  }\n"
            "  return loc(\"loc.tir\":7:3)\n"
            "}\n");
  // Explicit locations win over positions in the text, and survive another round.
  auto again = parseModule(printed, "other.tir");
  EXPECT_EQ(printModule(*again, PrintOptions{true}), printed);
  EXPECT_EQ(again->lookupFunc("f")->region(0).back()->loc().str(), "loc.tir:7:3");
  // Without the option no loc is printed.
  EXPECT_EQ(printModule(*again), printModule(*m));
}

TEST(Parser, LocationFileNamesAreEscaped) {
  auto m = parseModule(
      "func @f() {\n  %0 = program_id {axis = 0} : i32 loc(\"dir\\\\my \\\"k\\\".py\":12:34)\n"
      "  return\n}\n");
  Op* op = m->lookupFunc("f")->region(0).front();
  EXPECT_EQ(*op->loc().file, "dir\\my \"k\".py");
  EXPECT_EQ(op->loc().line, 12);
  EXPECT_EQ(op->loc().col, 34);
  EXPECT_EQ(printOp(*op, PrintOptions{true}),
            "%0 = program_id {axis = 0} : i32 loc(\"dir\\\\my \\\"k\\\".py\":12:34)\n");
}

TEST(Parser, ErrorsAfterExplicitLocationsPointAtThem) {
  auto m = parseModule("func @f() {\n  %0 = program_id {axis = 5} : i32 loc(\"kernel.py\":7:9)\n  return\n}\n");
  try {
    verifyModule(*m);
    FAIL() << "verified";
  } catch (const UserError& e) {
    EXPECT_EQ(e.loc().str(), "kernel.py:7:9");
    EXPECT_EQ(e.message(), "'program_id' axis 5 is out of range [0, 3)");
  }
}

TEST(Parser, PrintOpAlone) {
  auto m = parseModule(kNontrivial);
  Op* f = m->lookupFunc("caller");
  EXPECT_EQ(printOp(*f->region(0).front()), "%0 = constant {value = 2.5} : f32\n");
  EXPECT_EQ(printOp(*f).rfind("func @caller(%x: tile<16xf32>)", 0), 0u);
}

TEST(Parser, CommentsAndBlankLinesAreIgnored) {
  auto m = parseModule(
      "// leading comment\n\nfunc @f(%a: f32) { // trailing\n  // own line\n  %0 = neg %a : f32"
      "  // after an op\n\n  return\n}\n// end\n");
  EXPECT_EQ(printModule(*m), "func @f(%a: f32) {\n  %0 = neg %a : f32\n  return\n}\n");
}

TEST(Parser, EmptyModule) {
  auto m = parseModule("  \n// nothing\n");
  EXPECT_TRUE(m->body().empty());
  EXPECT_EQ(printModule(*m), "");
}

}  // namespace
}  // namespace tilefuse
