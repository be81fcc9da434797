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
  std::vector<std::int64_t> out_shape;              // the broadcast result (not coalesced)
  std::vector<std::int64_t> shape;                  // coalesced dimensions of the output
  std::vector<std::vector<std::int64_t>> strides;   // per input, over `shape` (0 = broadcast)
};

// Throws tx::Error naming the dimension when the shapes do not broadcast.
Coalesced coalesce_broadcast(const std::vector<std::vector<std::int64_t>>& input_shapes);

}  // namespace tx::ops
