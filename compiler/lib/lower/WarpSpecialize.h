// The producer warps' share of a warp_specialize body (Ops.def): the ops they run are
// the roots (their copies and mbarrier updates) and the backward slice those need (the
// copies' coordinates and descriptors, the bounds of the loops and the conditions of the
// ifs around them, the scalar loads of a tile schedule), which must be scalar work: the
// producer runs no tile op (it has no share of the consumers' layouts and no shared
// memory of its own). The warp-specialize pass checks this slice before expansion (its
// roots: the staged TMA loads); the lowering emits it (its roots: the ops
// {ws_role = "producer"}).
#pragma once

#include <functional>
#include <set>

#include "tilefuse/ir/IR.h"

namespace tilefuse::lower::detail {

inline bool producerRole(const Op& op) { return op.hasAttr("ws_role") && op.strAttr("ws_role") == "producer"; }
inline bool consumerRole(const Op& op) { return op.hasAttr("ws_role") && op.strAttr("ws_role") == "consumer"; }

// The ops of `ws`'s body the producer runs: the roots, the control flow around them and
// every op their operands (and those of that control flow) come from. Throws a UserError
// at the first op the slice needs that the producer cannot run, naming it.
std::set<const Op*> producerSlice(const Op& ws, const std::function<bool(const Op&)>& root);

// The ops of `loop`'s body (the ping-pong loop of `ws`) that compute what it yields (the
// ring's position), with their control flow: what a consumer group runs of the other
// group's iteration. Throws a UserError at one that is not scalar work.
std::set<const Op*> turnSlice(const Op& ws, const Op& loop);

}  // namespace tilefuse::lower::detail
