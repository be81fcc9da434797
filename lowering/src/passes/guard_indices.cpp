// guard_indices (checked mode only): each index of a multi-dimensional access
// that may leave its dimension is wrapped in check_index(index, extent, dim,
// site), which the checked host run reports when the index is outside
// [0, extent) and otherwise passes through.
//
// Why: the run-time check of an access (instrument_checks, in the host
// runtime) sees the flat offset only, after flatten_buffers. A(r, 9) on a
// (32, 8) buffer lands in row r + 1, inside the storage, so the flat check
// passes and the kernel reads a neighbour -- the GPU would too, silently.
// Checking each coordinate against its extent before flattening is what the
// checked mode promises: every element access in bounds. Indices the range
// analysis proves in range get no check (most of them: scope ids, loops).
// The site argument is -1 here; the host runtime numbers it.
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

class GuardIndices : public ScopedMutator {
 public:
  using ScopedMutator::mutate_node;
  using ScopedMutator::ScopedMutator;

  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    Expr out = ScopedMutator::mutate_node(self, n);
    auto* l = out.as<LoadNode>();
    std::vector<Expr> idx = guard(l->buffer, l->indices);
    if (idx.empty()) return out;
    return make_load(l->buffer, std::move(idx), l->loc);
  }
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    Stmt out = ScopedMutator::mutate_node(self, n);
    auto* st = out.as<StoreNode>();
    std::vector<Expr> idx = guard(st->buffer, st->indices);
    if (idx.empty()) return out;
    return make_store(st->buffer, st->value, std::move(idx), st->loc);
  }

 private:
  // The guarded indices, or empty when every index is proved in range.
  std::vector<Expr> guard(const Buffer& b, const std::vector<Expr>& indices) {
    if (indices.size() < 2 || indices.size() != b->shape.size()) return {};
    std::vector<Expr> out = indices;
    bool changed = false;
    for (std::size_t d = 0; d < indices.size(); ++d) {
      // A symbolic extent (a T::dim) is known at launch only: always checked.
      const Expr& extent = b->dims[d];
      auto fixed = as_const_int(extent);
      Interval r = env_.bound(indices[d]);
      if (fixed && r.lo >= 0 && r.hi < *fixed) continue;
      const Expr& i = indices[d];
      out[d] = make_call(Intrinsic::check_index,
                         {i, extent, make_int(static_cast<std::int64_t>(d)), make_int(-1)}, i->loc);
      changed = true;
    }
    return changed ? out : std::vector<Expr>{};
  }
};

}  // namespace

Stmt guard_indices(const Stmt& s, const LaunchConfig& launch) {
  return GuardIndices(launch).mutate(s);
}

}  // namespace tx::lowering
