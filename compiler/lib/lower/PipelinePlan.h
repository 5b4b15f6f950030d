// The schedule of a software-pipelined K loop (sm_90a), without LLVM: which loops
// pipeline, which loads of them are staged into the ring of shared-memory stages, in
// which layout, at which offset and by which copy (cp.async runs or TMA boxes), or why
// a loop with a wgmma dot cannot pipeline. The pipeline-schedule pass writes it into
// the GPU-stage IR; pipeline-expand writes the loop out from it.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "Staging.h"
#include "tilefuse/lower/AxisInfo.h"

namespace tilefuse::lower::detail {

// One operand tile a pipelined loop copies into each stage.
struct StagedCopy {
  const Op* load = nullptr;     // a load or descriptor load
  bool tma = false;             // copied as TMA boxes (its descriptor has a tensor map), else cp.async
  int64_t width = 1;            // elements per cp.async
  SharedTile tile;              // its layout in a stage (the one its dots read)
  int64_t offset = 0;           // its byte offset in a stage
  bool transposed = false;      // a [K, N] B in a K-major tile
  bool prefix = false;          // the mask is a valid prefix of each run (prefixMask)
  bool readBack = false;        // read back into registers (local_load), not by the dots
};

struct PipelinePlan {
  std::vector<const Op*> dots;                                 // the loop's wgmma dots, in program order
  std::vector<StagedCopy> loads;                               // distinct operand loads
  // dot -> its A and B in loads; -1: computed in the loop from read-back loads (and
  // stored to a buffer of two stages before the dot)
  std::unordered_map<const Op*, std::pair<int, int>> operand;
  // Loads computed operands read that stay in the loop, each with why it is not copied.
  std::vector<std::pair<const Op*, std::string>> unstaged;
  int stages = 0;
  int64_t stageBytes = 0;
};

// Elements per vector access through pointer tile `ptr` (in its type's layout) that
// the axis analysis proves contiguous and aligned, at most 16 bytes.
int64_t accessWidth(const AxisAnalysis& axis, const Value* ptr, const Value* mask, int threads);
// What the axis analysis knows of `ptr` (and `mask`) along its run dim, for a hint.
std::string accessReason(const AxisAnalysis& axis, const Value* ptr, const Value* mask, int threads);

// The schedule of for loop `loop` of a GPU-stage kernel for `stages` stages. False
// for a loop without a wgmma dot (`why` empty) or one that cannot pipeline (`why`
// says why; `p` is then incomplete). Descriptor loads copy with TMA when plan-tma put
// their descriptor on it.
bool planPipeline(const Op& loop, const AxisAnalysis& axis, int threads, int stages, PipelinePlan* p, std::string* why);

// The #shared tile of a ring that a load's values are read back from into registers:
// swizzled where its rows span whole swizzle widths, else unswizzled rows.
SharedTile readBackTile(const Type& t);

// The value whose bytes a wgmma operand reads: `v`, or what its bitcast reinterprets
// (dot_scaled's fp8 operands are bitcasts of loaded bytes; the copy moves the bytes).
const Value* stagedBytes(const Value* v);

// The values a copy of load `ld` depends on: pointers and mask, or the offsets.
std::vector<const Value*> copyInputs(const Op& ld);

// The loop values the copies of `loads` (loads in `body`) depend on: the induction
// variable and the carried values reachable from their copyInputs, through the yields.
std::vector<const Value*> copyLoopArgs(const std::vector<const Op*>& loads, const Block& body);

}  // namespace tilefuse::lower::detail
