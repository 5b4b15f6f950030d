// Text form, parsing side; see Printer.cpp for the grammar.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tilefuse/ir/Limits.h"
#include "tilefuse/ir/Text.h"

namespace tilefuse {
namespace {

bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'; }

class Parser {
 public:
  Parser(std::string_view text, std::string_view file, int firstLine)
      : s_(text), file_(file), line_(firstLine) {}

  std::unique_ptr<Module> parse() {
    auto m = std::make_unique<Module>();
    skipSpace();
    while (!atEnd()) {
      Location at = here();
      expectWord("func");
      m->body().append(parseFunc(at));
      skipSpace();
    }
    return m;
  }

 private:
  // --- characters ---
  bool atEnd() const { return i_ >= s_.size(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  void advance() {
    if (atEnd()) return;
    if (s_[i_] == '\n') {
      ++line_;
      lineStart_ = i_ + 1;
    }
    ++i_;
  }
  Location here() const { return Location::make(file_, line_, static_cast<int>(i_ - lineStart_) + 1); }
  [[noreturn]] void fail(const std::string& msg) const { throw UserError(here(), msg); }

  // Skips blanks and // comments; stops at a newline when `stopAtNewline`.
  void skipSpace(bool stopAtNewline = false) {
    while (!atEnd()) {
      char c = peek();
      if (c == '\n' && stopAtNewline) return;
      if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (!atEnd() && peek() != '\n') advance();
      } else {
        return;
      }
    }
  }
  bool sameLineNext(char c) {
    skipSpace(true);
    return peek() == c;
  }
  bool consume(char c) {
    skipSpace();
    if (peek() != c) return false;
    advance();
    return true;
  }
  void expect(char c, const char* what) {
    if (!consume(c)) fail(std::string("expected '") + c + "' " + what);
  }
  std::string word() {
    skipSpace();
    size_t b = i_;
    while (!atEnd() && isIdentChar(peek())) advance();
    return std::string(s_.substr(b, i_ - b));
  }
  void expectWord(const char* w) {
    Location at = here();
    if (word() != w) throw UserError(at, std::string("expected '") + w + "'");
  }

  // --- pieces ---
  Type parseTypeText() {
    skipSpace();
    Location at = here();
    size_t b = i_;
    int depth = 0;
    // Inside <...> a type may hold a layout ("tile<64xf32, #blocked<reg=[1, 2], ...>>").
    while (!atEnd()) {
      char c = peek();
      if (c == '<') {
        ++depth;
      } else if (c == '>' && depth > 0) {
        --depth;
      } else if (c == '\n' || (depth == 0 && !isIdentChar(c))) {
        break;
      }
      advance();
    }
    std::string_view t = s_.substr(b, i_ - b);
    auto ty = parseType(t);
    if (!ty) throw UserError(at, "malformed type '" + std::string(t) + "'");
    return *ty;
  }

  std::string valueName() {
    skipSpace();
    if (peek() != '%') fail("expected a value name starting with '%'");
    advance();
    size_t b = i_;
    while (!atEnd() && isIdentChar(peek())) advance();
    if (i_ == b) fail("empty value name");
    return std::string(s_.substr(b, i_ - b));
  }

  Value* useValue() {
    Location at = here();
    skipSpace();
    at = here();
    std::string n = valueName();
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    throw UserError(at, "use of undefined value '%" + n + "'");
  }

  void define(const std::string& n, Value* v, Location at) {
    for (auto& sc : scopes_)
      if (sc.count(n)) throw UserError(at, "value '%" + n + "' is defined twice");
    scopes_.back()[n] = v;
    bool numeric = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!numeric) v->setName(n);
  }

  Attr parseAttrValue() {
    skipSpace();
    Location at = here();
    char c = peek();
    if (c == '"') {
      advance();
      std::string out;
      while (!atEnd() && peek() != '"') {
        char ch = peek();
        advance();
        if (ch == '\\') {
          if (atEnd()) break;  // a trailing backslash: reported as unterminated below
          char e = peek();
          advance();
          out += e == 'n' ? '\n' : e;
        } else {
          out += ch;
        }
      }
      if (atEnd()) throw UserError(at, "unterminated string");
      advance();
      return out;
    }
    if (c == '[') {
      advance();
      skipSpace();
      if (consume(']')) return std::vector<int64_t>{};
      if (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '-') {
        std::vector<int64_t> v;
        do {
          Attr a = parseAttrValue();
          if (!std::holds_alternative<int64_t>(a)) throw UserError(at, "expected integers in the list");
          v.push_back(std::get<int64_t>(a));
        } while (consume(','));
        expect(']', "to close the list");
        return v;
      }
      std::vector<Type> v;
      do v.push_back(parseTypeText());
      while (consume(','));
      expect(']', "to close the list");
      return v;
    }
    size_t b = i_;
    if (peek() == '-' || peek() == '+') advance();
    while (!atEnd() && (isIdentChar(peek()) || ((peek() == '-' || peek() == '+') && (s_[i_ - 1] == 'e')))) advance();
    std::string tok(s_.substr(b, i_ - b));
    if (tok == "true") return true;
    if (tok == "false") return false;
    if (tok == "inf" || tok == "+inf") return std::numeric_limits<double>::infinity();
    if (tok == "-inf") return -std::numeric_limits<double>::infinity();
    if (tok == "nan") return std::numeric_limits<double>::quiet_NaN();
    const char* first = tok.data();
    const char* last = tok.data() + tok.size();
    if (tok.find_first_of(".e") == std::string::npos) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && p == last && !tok.empty()) return v;
    } else {
      double d = 0;
      auto [p, ec] = std::from_chars(first, last, d);
      if (ec == std::errc() && p == last) return d;
    }
    throw UserError(at, "malformed attribute value '" + tok + "'");
  }

  void parseAttrDict(Op& op) {
    // Caller saw '{' followed by "name =".
    expect('{', "to open attributes");
    do {
      skipSpace();
      Location at = here();
      std::string k = word();
      if (k.empty()) throw UserError(at, "expected an attribute name");
      // A function's name has its own syntax (func @name).
      if (op.kind() == OpKind::Func && k == "sym_name")
        throw UserError(at, "'sym_name' is not an attribute to write: a function's name follows 'func @'");
      expect('=', "after the attribute name");
      op.setAttr(k, parseAttrValue());
    } while (consume(','));
    expect('}', "to close the attributes");
  }

  // '{' followed by `ident =` opens an attribute dictionary (a region never does).
  bool atAttrDict() {
    if (!sameLineNext('{')) return false;
    size_t j = i_ + 1;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
    size_t b = j;
    while (j < s_.size() && isIdentChar(s_[j])) ++j;
    if (j == b) return false;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
    return j < s_.size() && s_[j] == '=';
  }

  void parseLoc(Op& op) {
    skipSpace(true);
    if (s_.substr(i_, 4) != "loc(") return;
    for (int k = 0; k < 4; ++k) advance();
    Attr f = parseAttrValue();
    if (!std::holds_alternative<std::string>(f)) fail("expected a file name in loc(...)");
    expect(':', "in loc(...)");
    Attr l = parseAttrValue();
    expect(':', "in loc(...)");
    Attr c = parseAttrValue();
    if (!std::holds_alternative<int64_t>(l) || !std::holds_alternative<int64_t>(c)) fail("expected line:col in loc(...)");
    expect(')', "to close loc(...)");
    op.setLoc(Location::make(std::get<std::string>(f), static_cast<int>(std::get<int64_t>(l)),
                             static_cast<int>(std::get<int64_t>(c))));
  }

  void parseRegion(Block& b) {
    Location open = here();
    expect('{', "to open a region");
    if (scopes_.size() > kMaxRegionDepth)  // one scope per enclosing region, and the function's
      throw UserError(open, "regions are nested more than " + std::to_string(kMaxRegionDepth) + " deep");
    scopes_.emplace_back();
    skipSpace();
    if (peek() == '^') {
      advance();
      expect('(', "after '^'");
      if (!consume(')')) {
        do {
          skipSpace();
          Location at = here();
          std::string n = valueName();
          expect(':', "after the block argument name");
          define(n, b.addArg(parseTypeText()), at);
        } while (consume(','));
        expect(')', "to close the block arguments");
      }
      expect(':', "after the block arguments");
    }
    while (true) {
      skipSpace();
      if (atEnd()) fail("expected '}' to close the region");
      if (peek() == '}') break;
      b.append(parseOp());
    }
    advance();
    scopes_.pop_back();
  }

  // `at` is the position of the `func` keyword, which the caller consumed.
  std::unique_ptr<Op> parseFunc(Location at) {
    auto f = std::make_unique<Op>(OpKind::Func, at);
    expect('@', "before the function name");
    f->setAttr("sym_name", std::string(word()));
    Block& body = f->addRegion();
    scopes_.clear();
    scopes_.emplace_back();
    expect('(', "to open the parameter list");
    if (!consume(')')) {
      do {
        skipSpace();
        Location a = here();
        std::string n = valueName();
        expect(':', "after the parameter name");
        define(n, body.addArg(parseTypeText()), a);
      } while (consume(','));
      expect(')', "to close the parameter list");
    }
    skipSpace();
    if (peek() == '-' && peek(1) == '>') {
      advance();
      advance();
      expect('(', "to open the result types");
      std::vector<Type> res;
      if (!consume(')')) {
        do res.push_back(parseTypeText());
        while (consume(','));
        expect(')', "to close the result types");
      }
      f->setAttr("results", res);
    }
    if (atAttrDict()) parseAttrDict(*f);
    parseLoc(*f);
    // The body's scope is the parameters' scope.
    expect('{', "to open the function body");
    while (true) {
      skipSpace();
      if (atEnd()) fail("expected '}' to close the function body");
      if (peek() == '}') break;
      body.append(parseOp());
    }
    advance();
    scopes_.clear();
    return f;
  }

  std::unique_ptr<Op> parseOp() {
    skipSpace();
    Location start = here();
    std::vector<std::pair<std::string, Location>> resultNames;
    if (peek() == '%') {
      do {
        Location at = here();
        skipSpace();
        at = here();
        resultNames.emplace_back(valueName(), at);
      } while (consume(','));
      expect('=', "after the result names");
    }
    skipSpace();
    Location opLoc = resultNames.empty() ? here() : start;
    Location mnemonicLoc = here();
    std::string mn = word();
    const OpInfo* info = opInfoByMnemonic(mn);
    if (!info || info->kind == OpKind::Func)
      throw UserError(mnemonicLoc, mn.empty() ? "expected an op" : "unknown op '" + mn + "'");
    auto op = std::make_unique<Op>(info->kind, opLoc);
    if (info->kind == OpKind::Call) {
      expect('@', "before the callee name");
      op->setAttr("callee", word());
      expect('(', "to open the call arguments");
      if (!consume(')')) {
        do op->addOperand(useValue());
        while (consume(','));
        expect(')', "to close the call arguments");
      }
    } else if (sameLineNext('%')) {
      do op->addOperand(useValue());
      while (consume(','));
    }
    if (atAttrDict()) parseAttrDict(*op);
    std::vector<Type> types;
    if (sameLineNext(':')) {
      advance();
      do types.push_back(parseTypeText());
      while (consume(','));
    }
    if (types.size() != resultNames.size())
      throw UserError(opLoc, "'" + mn + "' names " + std::to_string(resultNames.size()) + " results but lists " +
                                 std::to_string(types.size()) + " result types");
    for (auto& t : types) op->addResult(t);
    parseLoc(*op);
    while (sameLineNext('{')) parseRegion(op->addRegion());
    // Results are visible after the op (not inside its own regions).
    for (size_t k = 0; k < resultNames.size(); ++k) define(resultNames[k].first, op->result(k), resultNames[k].second);
    return op;
  }

  std::string_view s_;
  std::string file_;
  size_t i_ = 0;
  int line_;
  size_t lineStart_ = 0;
  std::vector<std::unordered_map<std::string, Value*>> scopes_;
};

}  // namespace

std::unique_ptr<Module> parseModule(std::string_view text, std::string_view filename, int firstLine) {
  registerSource(filename, std::string(text), firstLine);
  Parser p(text, filename, firstLine);
  return p.parse();
}

}  // namespace tilefuse
