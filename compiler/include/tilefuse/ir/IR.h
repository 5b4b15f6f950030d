// The tile IR: one generic Op class with named, typed attributes; ops live in
// blocks, each region of an op is one block; values know their uses.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tilefuse/Error.h"
#include "tilefuse/ir/Types.h"

namespace tilefuse {

enum class OpKind : uint16_t {
#define TF_OP(Name, Mnemonic, MinOps, MaxOps, NumRes, NumRegions, Traits) Name,
#include "tilefuse/ir/Ops.def"
};

enum OpTrait : uint32_t {
  None = 0,
  Pure = 1u << 0,  // no side effects: may be folded, CSE'd, hoisted, deleted when unused
  Commutative = 1u << 1,
  Terminator = 1u << 2,
  Elementwise = 1u << 3,
  IntOnly = 1u << 4,
  FloatOnly = 1u << 5,
  ConstantLike = 1u << 6,
  ReadsMemory = 1u << 7,
  WritesMemory = 1u << 8,
  Loop = 1u << 9,
  IsolatedFromAbove = 1u << 10,
  GpuLevel = 1u << 11,  // only in functions of the GPU stage ({gpu = true})
  Atomic = 1u << 12,    // a read-modify-write through its pointers, returning the old values
};

struct OpInfo {
  OpKind kind;
  std::string_view mnemonic;
  int minOperands, maxOperands;  // max -1: variadic
  int numResults;                // -1: variadic
  int numRegions;
  uint32_t traits;
  bool has(OpTrait t) const { return (traits & t) != 0; }
};

const OpInfo& opInfo(OpKind kind);
const std::vector<OpInfo>& allOps();
const OpInfo* opInfoByMnemonic(std::string_view mnemonic);

// Attribute values. Integers and floats are distinct so text round-trips.
using Attr = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<Type>>;
std::string attrToString(const Attr& a);

class Op;
class Block;

struct Use {
  Op* user;
  unsigned index;
  bool operator==(const Use&) const = default;
};

class Value {
 public:
  Value(Type type, Op* def, Block* owner, unsigned index)
      : type_(std::move(type)), def_(def), owner_(owner), index_(index) {}
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  const Type& type() const { return type_; }
  void setType(Type t) { type_ = std::move(t); }
  Op* definingOp() const { return def_; }       // null for block arguments
  Block* ownerBlock() const { return owner_; }  // the block of a block argument, else the defining op's block
  unsigned index() const { return index_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool unused() const { return uses_.empty(); }
  void replaceAllUsesWith(Value* other);
  // A readable name the printer uses when it can ("%offsets"); empty for none.
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

 private:
  friend class Op;
  friend class Block;
  Type type_;
  Op* def_;
  Block* owner_;
  unsigned index_;
  std::vector<Use> uses_;
  std::string name_;
};

class Op {
 public:
  Op(OpKind kind, Location loc);
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  OpKind kind() const { return kind_; }
  const OpInfo& info() const { return opInfo(kind_); }
  std::string_view mnemonic() const { return info().mnemonic; }
  bool has(OpTrait t) const { return info().has(t); }
  bool isPure() const { return has(Pure); }
  const Location& loc() const { return loc_; }
  void setLoc(Location l) { loc_ = l; }

  // Operands.
  unsigned numOperands() const { return static_cast<unsigned>(operands_.size()); }
  Value* operand(unsigned i) const { return operands_.at(i); }
  const std::vector<Value*>& operands() const { return operands_; }
  void addOperand(Value* v);
  void setOperand(unsigned i, Value* v);
  void setOperands(const std::vector<Value*>& vs);
  void dropAllOperands();

  // Results.
  unsigned numResults() const { return static_cast<unsigned>(results_.size()); }
  Value* result(unsigned i = 0) const { return results_.at(i).get(); }
  std::vector<Value*> results() const;
  Value* addResult(Type t);

  // Attributes.
  const std::map<std::string, Attr>& attrs() const { return attrs_; }
  bool hasAttr(const std::string& n) const { return attrs_.count(n) != 0; }
  const Attr* attr(const std::string& n) const;
  void setAttr(const std::string& n, Attr a) { attrs_[n] = std::move(a); }
  void removeAttr(const std::string& n) { attrs_.erase(n); }
  // Typed accessors; they throw InternalError when the attribute is missing or of another kind.
  int64_t intAttr(const std::string& n) const;
  double floatAttr(const std::string& n) const;
  bool boolAttr(const std::string& n) const;
  const std::string& strAttr(const std::string& n) const;
  const std::vector<int64_t>& intsAttr(const std::string& n) const;

  // Regions: each is exactly one block.
  unsigned numRegions() const { return static_cast<unsigned>(regions_.size()); }
  Block& region(unsigned i) const { return *regions_.at(i); }
  Block& addRegion();

  // Position.
  Block* parentBlock() const { return parent_; }
  Op* parentOp() const;
  // Unlinks from the parent block and destroys the op (it must have no used results).
  void erase();
  // Moves this op to just before `other`, which may be in another block.
  void moveBefore(Op* other);
  bool isAncestorOf(const Op* other) const;  // other is nested (at any depth) inside this op

  // Walks this op and every op nested in it, outer before inner (pre-order).
  template <class F>
  void walk(F&& f);

 private:
  friend class Block;
  OpKind kind_;
  Location loc_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  std::map<std::string, Attr> attrs_;
  std::vector<std::unique_ptr<Block>> regions_;
  Block* parent_ = nullptr;
  std::list<std::unique_ptr<Op>>::iterator self_;
};

class Block {
 public:
  using OpList = std::list<std::unique_ptr<Op>>;
  explicit Block(Op* parent) : parent_(parent) {}
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block();

  Op* parentOp() const { return parent_; }
  unsigned numArgs() const { return static_cast<unsigned>(args_.size()); }
  Value* arg(unsigned i) const { return args_.at(i).get(); }
  std::vector<Value*> args() const;
  Value* addArg(Type t);

  OpList& ops() { return ops_; }
  const OpList& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  Op* front() const { return ops_.front().get(); }
  Op* back() const { return ops_.back().get(); }
  Op* terminator() const { return !ops_.empty() && ops_.back()->has(Terminator) ? ops_.back().get() : nullptr; }
  // Inserts `op` before `pos` (end() appends) and takes ownership.
  Op* insert(OpList::iterator pos, std::unique_ptr<Op> op);
  Op* append(std::unique_ptr<Op> op) { return insert(ops_.end(), std::move(op)); }
  std::unique_ptr<Op> take(Op* op);  // unlinks without destroying

 private:
  Op* parent_;
  std::vector<std::unique_ptr<Value>> args_;
  OpList ops_;
};

// A module is a list of functions (func ops) in one top-level block.
class Module {
 public:
  Module() : body_(nullptr) {}
  Block& body() { return body_; }
  const Block& body() const { return body_; }
  Op* lookupFunc(std::string_view name) const;
  std::vector<Op*> funcs() const;

 private:
  Block body_;
};

// Func helpers: the name, result types, and whether it is in the GPU stage ({gpu = true}).
std::string funcName(const Op& func);
// The kind a dispatching switch reads: every atomic as OpKind::Load, since it is
// verified, laid out and executed as an access through its pointers (its own kind
// decides only the read-modify-write).
inline OpKind accessKind(const Op& op) { return op.has(Atomic) ? OpKind::Load : op.kind(); }
std::vector<Type> funcResultTypes(const Op& func);
bool isGpuStage(const Op& func);

template <class F>
void Op::walk(F&& f) {
  f(this);
  for (auto& r : regions_) {
    for (auto it = r->ops().begin(); it != r->ops().end();) {
      Op* o = (it++)->get();
      o->walk(f);
    }
  }
}

template <class F>
void walkModule(Module& m, F&& f) {
  for (auto it = m.body().ops().begin(); it != m.body().ops().end();) (it++)->get()->walk(f);
}

// Deep copy of `op` with operands remapped through `map` (values absent from the
// map are kept); results and nested values are added to `map`.
std::unique_ptr<Op> cloneOp(const Op& op, std::map<const Value*, Value*>& map);
std::unique_ptr<Module> cloneModule(const Module& m);

}  // namespace tilefuse
