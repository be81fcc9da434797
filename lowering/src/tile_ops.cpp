#include "tx/lowering/tile_ops.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "tx/expr.hpp"

namespace tx::lowering {

namespace {
Expr zero_of(DType t) { return t.is_float() ? make_float(0.0, t) : make_int(0, t); }
}  // namespace

const ElementwiseSpec* find_elementwise(const std::string& op) {
  const TileOpDef* def = find_tile_op(op);
  return def && def->family == "elementwise" ? def : nullptr;
}

Expr ReductionSpec::identity(DType t) const {
  if (combine == BinOp::Add) return zero_of(t);
  bool is_max = combine == BinOp::Max;
  if (t.is_float()) return make_float(is_max ? -INFINITY : INFINITY, t);
  if (t.is_uint())
    return make_int(is_max ? 0 : (t.bits >= 64 ? -1 : (std::int64_t{1} << t.bits) - 1), t);
  if (t.bits >= 64)
    return make_int(is_max ? std::numeric_limits<std::int64_t>::min()
                           : std::numeric_limits<std::int64_t>::max(),
                    t);
  std::int64_t half = std::int64_t{1} << (t.bits - 1);
  return make_int(is_max ? -half : half - 1, t);
}

// One ReductionSpec per reduction row, made on first use and kept (the
// variants hold the pointer while they lower a call).
const ReductionSpec* find_reduction(const std::string& op) {
  const TileOpDef* def = find_tile_op(op);
  if (!def || def->family != "reduction" || !def->combine) return nullptr;
  static std::mutex mu;
  static auto* specs = new std::map<std::string, std::unique_ptr<ReductionSpec>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*specs)[op];
  if (!slot) slot = std::make_unique<ReductionSpec>(ReductionSpec{op, *def->combine});
  return slot.get();
}

DType compute_dtype(DType t) { return t.is_low_precision_float() ? f32 : t; }

}  // namespace tx::lowering
