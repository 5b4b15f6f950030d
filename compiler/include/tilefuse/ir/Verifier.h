// The verifier: structural and type rules of every op, with messages that name
// the op, the operand and the expected and actual types.
#pragma once

#include "tilefuse/ir/IR.h"

namespace tilefuse {

// Throws UserError at the first offending op.
void verifyModule(const Module& m);
void verifyOp(const Op& op);  // this op alone (not its nested ops)

}  // namespace tilefuse
