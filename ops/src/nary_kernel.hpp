// The one kernel template behind every op of the library: an output of N
// contiguous elements, each computed from K operands that are read through
// coalesced broadcast strides (and an element offset, so that one buffer
// can serve as two operands: the gate and the value of silu_and_mul).
//
// Strategies (seed 004):
//   direct             one element per thread
//   explicit_parallel  npt contiguous elements per thread, loaded and stored
//                      element by element
//   register_copy      npt elements per thread staged in registers through
//                      tx's register tile copy (copy/reg: vector transfers);
//                      an operand read in output order (flat: any N, odd
//                      ones included) or along whole rows (the innermost
//                      extent a multiple of npt) loads with vectors, one
//                      broadcast along the innermost dimension is read once
//                      as a scalar, others are gathered element-wise
//
// Each thread owns the chunk [t * npt, (t + 1) * npt) of the flat output.
// When N is a multiple of threads * npt every chunk is whole and the body
// has no guard. Otherwise every thread whose chunk lies inside N -- every
// thread of every CTA but the last, and most of the last -- still runs the
// vector body, behind one compare per thread; the one thread whose chunk
// straddles N runs a scalar epilogue over its fewer than npt elements, each
// guarded. So an odd N (4097, a prime, or less than one CTA's chunk) keeps
// its 128-bit loads and stores everywhere but in that one thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tx/builder.hpp"
#include "tx/ops/ops.hpp"

namespace tx::ops::detail {

struct Operand {
  int param = 0;                      // which input buffer it reads
  DType compute = f32;                // dtype its value is converted to
  std::vector<std::int64_t> strides;  // over the coalesced output shape (0 = broadcast)
  std::int64_t offset = 0;            // elements added to every index
};

struct NarySpec {
  std::string name;                 // kernel name
  std::vector<std::int64_t> shape;  // coalesced output shape
  DType out_dtype = f32;
  std::vector<DType> param_dtypes;        // input buffers
  std::vector<std::int64_t> param_numel;  // their element counts
  std::vector<Operand> operands;
  // The output element from the operands' values and its flat index.
  std::function<Expr(const std::vector<Expr>&, const Expr&)> value;
  Strategy strategy = Strategy::register_copy;
  int threads = 256;
  int npt = 4;
};

PrimFunc build_nary(const NarySpec& s);

// ----------------------------------------------- shape-generic (nary_generic.cpp)

enum class Gated { none, gate, value };

struct GenericOperand {
  int param = 0;
  DType compute = f32;
  bool flat = false;          // read in the output's order (offset = index)
  std::vector<bool> present;  // per coalesced dimension: false = broadcast (stride 0)
  Gated gated = Gated::none;  // a half of a gated op's (M, 2N) input
  // A view with strides of its own (transposed, sliced): one scalar
  // parameter per coalesced dimension, its element stride. With unit_inner
  // the innermost stride is 1, and with aligned every outer stride is a
  // multiple of the vector width too (facts checked at launch): a chunk
  // inside a row is then one vector copy.
  bool strided = false;
  bool unit_inner = false;
  bool aligned = false;
};

// What one compiled kernel serves: every shape with this coalesced rank,
// broadcast pattern (or stride class) and alignment class. Its parameters:
// the inputs, the output, the extents e[1..rank-1], then each strided
// operand's rank strides, in operand order.
struct GenericSpec {
  std::string name;
  std::size_t rank = 1;
  DType out_dtype = f32;
  std::vector<DType> param_dtypes;
  std::vector<GenericOperand> operands;
  // The innermost coalesced extent is a multiple of the vector width: a
  // chunk never crosses a row (checked at launch through e[rank-1]'s facts).
  bool inner_multiple_of_v = false;
  std::function<Expr(const std::vector<Expr>&, const Expr&)> value;
  Strategy strategy = Strategy::register_copy;
  int threads = 256;
  int npt = 4;
  // A unary op on an 8-bit input: instead of `value`, each element looks its
  // result up in a 256-entry table (one entry per input bit pattern, in the
  // output dtype; a last kernel parameter), which the CTA first copies into
  // shared memory. The library fills the table by computing the op on the
  // 256 patterns with this template's own arithmetic, so the results are the
  // same bits; the kernel then does a byte extract and a shared load per
  // element instead of the op's math (fp8 gelu: ~24 instructions per byte
  // moved, far past the copy limit's budget).
  bool lookup_table = false;
  // The buffers do not overlap (T::no_alias): what Elementwise launches
  // unless the output overlaps an input (in place), which takes the kernel
  // built without it.
  bool no_alias = false;
};

PrimFunc build_nary_generic(const GenericSpec& s);

}  // namespace tx::ops::detail
