// NumPy / PyTorch broadcasting, coalesced the way TensorIterator does it:
// right-align the shapes, give broadcast dimensions stride 0, drop
// extent-1 dimensions and merge neighbours that every operand walks
// contiguously. What is left is the fewest dimensions -- the fewest
// divisions -- a kernel needs to find each operand's element.
#pragma once

#include <cstdint>
#include <vector>

namespace tx::ops {

struct Coalesced {
  std::vector<std::int64_t> out_shape;             // the broadcast result (not coalesced)
  std::vector<std::int64_t> shape;                 // coalesced dimensions of the output
  std::vector<std::vector<std::int64_t>> strides;  // per input, over `shape` (0 = broadcast)
};

// Throws tx::Error naming the dimension when the shapes do not broadcast.
Coalesced coalesce_broadcast(const std::vector<std::vector<std::int64_t>>& input_shapes);

// Views (transposed, sliced, expanded) over an output of `out_shape`, as
// TensorIterator plans them: each operand's element strides over the
// output's dimensions (right-aligned; a missing or extent-1 dimension under
// a larger output extent has stride 0), the dimensions ordered by the
// output's strides (outermost first, so that the output is walked in its
// memory order), extent-1 dimensions dropped and neighbours merged where
// every operand (the output included, last) allows.
struct CoalescedViews {
  std::vector<std::int64_t> shape;                 // outermost first
  std::vector<std::vector<std::int64_t>> strides;  // per operand: inputs, then the output
};
CoalescedViews coalesce_views(const std::vector<std::int64_t>& out_shape,
                              const std::vector<std::vector<std::int64_t>>& in_shapes,
                              const std::vector<std::vector<std::int64_t>>& in_strides,
                              const std::vector<std::int64_t>& out_strides);

// Whether strides over `shape` walk every element of a block of memory
// exactly once (a permutation of a row-major layout; extent-1 dimensions
// may have any stride). Gives that permutation (outermost first).
bool is_dense(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& strides,
              std::vector<int>* order = nullptr);

}  // namespace tx::ops
