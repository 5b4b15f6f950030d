// Text form, printing side. Grammar (the parser accepts exactly this):
//   func @name(%a: T, ...) [-> (T, ...)] [{attrs}] [loc(...)] { body }
//   [%r, ... =] mnemonic [%operand, ...] [{name = value, ...}] [: T, ...] [loc(...)] [{ region }]*
//   region: { [^(%arg: T, ...):] ops }
#include <cctype>
#include <set>
#include <sstream>
#include <unordered_map>

#include "tilefuse/ir/Text.h"

namespace tilefuse {
namespace {

bool isNumeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

class Printer {
 public:
  Printer(std::ostream& os, const PrintOptions& opts) : os_(os), opts_(opts) {}

  void printFunc(const Op& f) {
    names_.clear();
    used_.clear();
    suffix_.clear();
    next_ = 0;
    os_ << "func @" << funcName(f) << "(";
    const Block& body = f.region(0);
    for (unsigned i = 0; i < body.numArgs(); ++i) {
      os_ << (i ? ", " : "") << name(body.arg(i)) << ": " << body.arg(i)->type().str();
    }
    os_ << ")";
    auto results = funcResultTypes(f);
    if (!results.empty()) {
      os_ << " -> (";
      for (size_t i = 0; i < results.size(); ++i) os_ << (i ? ", " : "") << results[i].str();
      os_ << ")";
    }
    printAttrs(f, {"sym_name", "results"});
    printLoc(f);
    os_ << " {\n";
    printOps(body, 1);
    os_ << "}\n";
  }

  void printOp(const Op& op, int indent) {
    pad(indent);
    if (op.numResults()) {
      for (unsigned i = 0; i < op.numResults(); ++i) os_ << (i ? ", " : "") << name(op.result(i));
      os_ << " = ";
    }
    os_ << op.mnemonic();
    if (op.kind() == OpKind::Call) {
      os_ << " @" << op.strAttr("callee") << "(";
      for (unsigned i = 0; i < op.numOperands(); ++i) os_ << (i ? ", " : "") << name(op.operand(i));
      os_ << ")";
      printAttrs(op, {"callee"});
    } else {
      for (unsigned i = 0; i < op.numOperands(); ++i) os_ << (i ? ", " : " ") << name(op.operand(i));
      printAttrs(op, {});
    }
    if (op.numResults()) {
      os_ << " : ";
      for (unsigned i = 0; i < op.numResults(); ++i) os_ << (i ? ", " : "") << op.result(i)->type().str();
    }
    printLoc(op);
    for (unsigned r = 0; r < op.numRegions(); ++r) {
      const Block& b = op.region(r);
      os_ << " {\n";
      if (b.numArgs()) {
        pad(indent);
        os_ << "^(";
        for (unsigned i = 0; i < b.numArgs(); ++i)
          os_ << (i ? ", " : "") << name(b.arg(i)) << ": " << b.arg(i)->type().str();
        os_ << "):\n";
      }
      printOps(b, indent + 1);
      pad(indent);
      os_ << "}";
    }
    os_ << "\n";
  }

 private:
  void pad(int indent) {
    for (int i = 0; i < indent; ++i) os_ << "  ";
  }

  void printOps(const Block& b, int indent) {
    for (auto& o : b.ops()) printOp(*o, indent);
  }

  void printAttrs(const Op& op, std::set<std::string> skip) {
    bool first = true;
    for (const auto& [k, v] : op.attrs()) {
      if (skip.count(k)) continue;
      os_ << (first ? " {" : ", ") << k << " = " << attrToString(v);
      first = false;
    }
    if (!first) os_ << "}";
  }

  void printLoc(const Op& op) {
    if (!opts_.locations || !op.loc().known()) return;
    std::string file;
    for (char c : *op.loc().file) {
      if (c == '"' || c == '\\') file += '\\';
      file += c;
    }
    os_ << " loc(\"" << file << "\":" << op.loc().line << ":" << op.loc().col << ")";
  }

  // Values print under their name hint when they have one, uniquified within
  // the function; others are numbered in order of definition.
  std::string name(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    std::string n;
    if (!v->name().empty() && !isNumeric(v->name())) {
      n = v->name();
      // Suffixes below the last one given to this hint are taken (names are never freed):
      // starting there keeps the names and makes many values of one hint linear, not quadratic.
      int& k = suffix_[n];
      while (used_.count(n)) n = v->name() + "_" + std::to_string(++k);
    } else {
      do n = std::to_string(next_++);
      while (used_.count(n));
    }
    used_.insert(n);
    return names_[v] = "%" + n;
  }

  std::ostream& os_;
  const PrintOptions& opts_;
  std::unordered_map<const Value*, std::string> names_;
  std::set<std::string> used_;
  std::unordered_map<std::string, int> suffix_;  // by name hint: the last suffix given
  int next_ = 0;
};

}  // namespace

std::string printModule(const Module& m, const PrintOptions& opts) {
  std::ostringstream os;
  Printer p(os, opts);
  bool first = true;
  for (auto& f : m.body().ops()) {
    if (!first) os << "\n";
    first = false;
    p.printFunc(*f);
  }
  return os.str();
}

std::string printOp(const Op& op, const PrintOptions& opts) {
  std::ostringstream os;
  Printer p(os, opts);
  if (op.kind() == OpKind::Func)
    p.printFunc(op);
  else
    p.printOp(op, 0);
  return os.str();
}

}  // namespace tilefuse
