#include "reduce_common.hpp"

namespace tx::lowering::variants {

std::variant<ReducePlan, std::string> parse_reduction(const DispatchContext& ctx) {
  const TileCallNode* call = ctx.call;
  ReducePlan p;
  p.spec = find_reduction(call->op);
  if (!p.spec) return "not a reduction";
  if (call->attrs.scale || call->attrs.bias || call->attrs.scale_arg >= 0 ||
      call->attrs.bias_arg >= 0)
    return "reductions take no scale/bias";
  if (call->args.size() != 2) return "a reduction takes a destination and a source";
  const BufferRegion* dst = region_arg(call, 0);
  const BufferRegion* src = region_arg(call, 1);
  if (!dst || !src) return "reduction operands must be buffer regions";
  p.dst = *dst;
  p.src = *src;
  p.accum = call->attrs.accum;
  if (dst->buffer->dtype != src->buffer->dtype)
    return operand_reason(*dst, "dtype " + dst->buffer->dtype.name() + " differs from " +
                                    src->buffer->name + "'s " + src->buffer->dtype.name());
  if (dst->buffer->dtype.is_bool()) return operand_reason(*dst, "cannot reduce bool tiles");
  Extents se = src->extents(), de = dst->extents();
  std::size_t rank = se.size();
  p.reduced.assign(rank, false);
  if (!call->attrs.axes.empty()) {
    for (int a : call->attrs.axes) {
      int ax = a < 0 ? a + static_cast<int>(rank) : a;
      if (ax < 0 || ax >= static_cast<int>(rank))
        return "axis " + std::to_string(a) + " is out of range for a rank-" + std::to_string(rank) +
               " source";
      p.reduced[static_cast<std::size_t>(ax)] = true;
    }
  } else if (de.size() == rank) {
    for (std::size_t d = 0; d < rank; ++d) p.reduced[d] = de[d] == 1 && se[d] != 1;
  } else if (de.size() < rank) {
    for (std::size_t d = de.size(); d < rank; ++d) p.reduced[d] = true;
  } else {
    return operand_reason(*dst, "has more dimensions than the source");
  }
  Extents kept, dropped;
  for (std::size_t d = 0; d < rank; ++d) {
    kept.push_back(p.reduced[d] ? 1 : se[d]);
    if (!p.reduced[d]) {
      dropped.push_back(se[d]);
      p.spatial.push_back(se[d]);
    }
  }
  if (squeeze(de) != squeeze(kept))
    return operand_reason(*dst, "extents do not match the source with the reduced axes removed");
  bool any = false;
  for (bool r : p.reduced) any |= r;
  if (!any) return "no axis to reduce";
  return p;
}

}  // namespace tx::lowering::variants
