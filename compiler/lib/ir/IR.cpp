#include "tilefuse/ir/IR.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tilefuse {
namespace {

std::vector<OpInfo> buildOpTable() {
  std::vector<OpInfo> t;
#define TR(X) OpTrait::X
#define TF_OP(Name, Mnemonic, MinOps, MaxOps, NumRes, NumRegions, Traits) \
  t.push_back(OpInfo{OpKind::Name, Mnemonic, MinOps, MaxOps, NumRes, NumRegions, static_cast<uint32_t>(Traits)});
#include "tilefuse/ir/Ops.def"
#undef TR
  return t;
}

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> table = buildOpTable();
  return table;
}

const OpInfo& opInfo(OpKind kind) { return allOps()[static_cast<size_t>(kind)]; }

const OpInfo* opInfoByMnemonic(std::string_view mnemonic) {
  for (const auto& i : allOps())
    if (i.mnemonic == mnemonic) return &i;
  return nullptr;
}

std::string attrToString(const Attr& a) {
  struct V {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return formatDouble(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<Type>& v) const {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].str();
      return s + "]";
    }
  };
  return std::visit(V{}, a);
}

// --- Value ---

void Value::replaceAllUsesWith(Value* other) {
  if (other == this) return;
  auto uses = uses_;
  for (const Use& u : uses) u.user->setOperand(u.index, other);
}

// --- Op ---

Op::Op(OpKind kind, Location loc) : kind_(kind), loc_(loc) {}

namespace {
// Drops the operands of the ops nested in `op`, last op first: uses are appended in
// creation order, so each is found at the end of its value's use list (dropAllOperands
// searches from the back) and tearing down a value with many users stays linear.
void dropNestedOperands(Op& op) {
  for (unsigned r = op.numRegions(); r-- > 0;) {
    auto& ops = op.region(r).ops();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      dropNestedOperands(**it);
      (*it)->dropAllOperands();
    }
  }
}
}  // namespace

Op::~Op() {
  // Nested ops may use values of enclosing ops; clear inner uses first.
  dropNestedOperands(*this);
  dropAllOperands();
}

void Op::addOperand(Value* v) {
  v->uses_.push_back(Use{this, numOperands()});
  operands_.push_back(v);
}

void Op::setOperand(unsigned i, Value* v) {
  Value* old = operands_.at(i);
  auto& u = old->uses_;
  u.erase(std::find(u.begin(), u.end(), Use{this, i}));
  operands_[i] = v;
  v->uses_.push_back(Use{this, i});
}

void Op::setOperands(const std::vector<Value*>& vs) {
  dropAllOperands();
  for (Value* v : vs) addOperand(v);
}

void Op::dropAllOperands() {
  for (unsigned i = static_cast<unsigned>(operands_.size()); i-- > 0;) {
    auto& u = operands_[i]->uses_;
    auto it = std::find(u.rbegin(), u.rend(), Use{this, i});  // usually the last use
    if (it != u.rend()) u.erase(std::next(it).base());
  }
  operands_.clear();
}

std::vector<Value*> Op::results() const {
  std::vector<Value*> r;
  for (auto& v : results_) r.push_back(v.get());
  return r;
}

Value* Op::addResult(Type t) {
  results_.push_back(std::make_unique<Value>(std::move(t), this, parent_, numResults()));
  return results_.back().get();
}

const Attr* Op::attr(const std::string& n) const {
  auto it = attrs_.find(n);
  return it == attrs_.end() ? nullptr : &it->second;
}

namespace {
template <class T>
const T& getAttr(const Op& op, const std::string& n) {
  const Attr* a = op.attr(n);
  if (!a || !std::holds_alternative<T>(*a))
    throw InternalError("op '" + std::string(op.mnemonic()) + "' lacks attribute '" + n + "' of the expected kind");
  return std::get<T>(*a);
}
}  // namespace

int64_t Op::intAttr(const std::string& n) const { return getAttr<int64_t>(*this, n); }
double Op::floatAttr(const std::string& n) const { return getAttr<double>(*this, n); }
bool Op::boolAttr(const std::string& n) const { return getAttr<bool>(*this, n); }
const std::string& Op::strAttr(const std::string& n) const { return getAttr<std::string>(*this, n); }
const std::vector<int64_t>& Op::intsAttr(const std::string& n) const { return getAttr<std::vector<int64_t>>(*this, n); }

Block& Op::addRegion() {
  regions_.push_back(std::make_unique<Block>(this));
  return *regions_.back();
}

Op* Op::parentOp() const { return parent_ ? parent_->parentOp() : nullptr; }

void Op::erase() {
  for (auto& r : results_)
    if (!r->unused()) throw InternalError("erasing op '" + std::string(mnemonic()) + "' whose result is still used");
  if (!parent_) throw InternalError("erasing an op that is not in a block");
  parent_->take(this);  // the returned unique_ptr destroys the op
}

void Op::moveBefore(Op* other) {
  std::unique_ptr<Op> self = parent_->take(this);
  other->parent_->insert(other->self_, std::move(self));
}

bool Op::isAncestorOf(const Op* other) const {
  for (const Op* p = other->parentOp(); p; p = p->parentOp())
    if (p == this) return true;
  return false;
}

// --- Block ---

Block::~Block() {
  // Destroy ops in reverse so users die before the values they use.
  while (!ops_.empty()) ops_.pop_back();
}

std::vector<Value*> Block::args() const {
  std::vector<Value*> r;
  for (auto& v : args_) r.push_back(v.get());
  return r;
}

Value* Block::addArg(Type t) {
  args_.push_back(std::make_unique<Value>(std::move(t), nullptr, this, numArgs()));
  return args_.back().get();
}

Op* Block::insert(OpList::iterator pos, std::unique_ptr<Op> op) {
  Op* raw = op.get();
  raw->parent_ = this;
  for (auto& r : raw->results_) r->owner_ = this;
  raw->self_ = ops_.insert(pos, std::move(op));
  return raw;
}

std::unique_ptr<Op> Block::take(Op* op) {
  std::unique_ptr<Op> p = std::move(*op->self_);
  ops_.erase(op->self_);
  p->parent_ = nullptr;
  return p;
}

// --- Module ---

Op* Module::lookupFunc(std::string_view name) const {
  for (auto& o : body_.ops())
    if (o->kind() == OpKind::Func && o->strAttr("sym_name") == name) return o.get();
  return nullptr;
}

std::vector<Op*> Module::funcs() const {
  std::vector<Op*> r;
  for (auto& o : body_.ops()) r.push_back(o.get());
  return r;
}

std::string funcName(const Op& func) { return func.strAttr("sym_name"); }

std::vector<Type> funcResultTypes(const Op& func) {
  // Not a type list (hand-written IR: `{results = 1}`): none here; the verifier says what is wrong.
  const Attr* a = func.attr("results");
  const auto* types = a ? std::get_if<std::vector<Type>>(a) : nullptr;
  return types ? *types : std::vector<Type>{};
}

bool isGpuStage(const Op& func) {
  const Attr* a = func.attr("gpu");
  return a && std::holds_alternative<bool>(*a) && std::get<bool>(*a);
}

std::unique_ptr<Op> cloneOp(const Op& op, std::map<const Value*, Value*>& map) {
  auto c = std::make_unique<Op>(op.kind(), op.loc());
  for (Value* v : op.operands()) {
    auto it = map.find(v);
    c->addOperand(it == map.end() ? v : it->second);
  }
  for (unsigned i = 0; i < op.numResults(); ++i) {
    Value* r = c->addResult(op.result(i)->type());
    r->setName(op.result(i)->name());
    map[op.result(i)] = r;
  }
  for (const auto& [k, v] : op.attrs()) c->setAttr(k, v);
  for (unsigned i = 0; i < op.numRegions(); ++i) {
    Block& src = op.region(i);
    Block& dst = c->addRegion();
    for (Value* a : src.args()) {
      Value* na = dst.addArg(a->type());
      na->setName(a->name());
      map[a] = na;
    }
    for (auto& o : src.ops()) dst.append(cloneOp(*o, map));
  }
  return c;
}

std::unique_ptr<Module> cloneModule(const Module& m) {
  auto c = std::make_unique<Module>();
  std::map<const Value*, Value*> map;
  for (auto& f : m.body().ops()) c->body().append(cloneOp(*f, map));
  return c;
}

}  // namespace tilefuse
