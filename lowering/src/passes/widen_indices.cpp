// widen_indices: accesses to a buffer of 2^31 elements or more compute their
// offset in 64-bit integers.
//
// Index arithmetic in tx is 32-bit (scope ids, loop variables, literals are
// i32), which keeps the address math of ordinary kernels as cheap as the
// GPU makes it. An offset into a buffer past 2^31 - 1 elements would wrap
// (`bx * 32768 + t` with bx = 65536 is negative), so for such buffers -- and
// only those -- the whole offset expression is rebuilt in i64: every integer
// leaf (variable, thread or block index, load, literal) is widened first and
// the arithmetic above it is done in i64, which gives the mathematical value
// of what the user wrote. Runs after flatten_buffers (offsets are flat) and
// before simplification.
#include <limits>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

bool needs_wide(const Buffer& b) { return needs_wide_offsets(b); }

class Widen : public IRMutator {
 public:
  using IRMutator::mutate_node;
  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    Expr out = IRMutator::mutate_node(self, n);
    if (!needs_wide(n->buffer)) return out;
    auto* l = out.as<LoadNode>();
    return make_load(l->buffer, {widen_to_i64(l->indices[0])}, l->loc);
  }
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    Stmt out = IRMutator::mutate_node(self, n);
    if (!needs_wide(n->buffer)) return out;
    auto* s = out.as<StoreNode>();
    return make_store(s->buffer, s->value, {widen_to_i64(s->indices[0])}, s->loc);
  }
  Stmt mutate_node(const Stmt& self, const CopyBytesNode* n) override {
    if (!needs_wide(n->dst) && !needs_wide(n->src)) return IRMutator::mutate_node(self, n);
    Expr d = mutate(n->dst_offset), s = mutate(n->src_offset);
    return make_copy_bytes(n->dst, needs_wide(n->dst) ? widen_to_i64(d) : d, n->src,
                           needs_wide(n->src) ? widen_to_i64(s) : s, n->bytes, n->loc);
  }
  Stmt mutate_node(const Stmt& self, const CpAsyncNode* n) override {
    if (!needs_wide(n->src)) return IRMutator::mutate_node(self, n);
    Expr d = mutate(n->dst_offset), s = mutate(n->src_offset);
    Expr sb = n->src_bytes ? mutate(n->src_bytes) : Expr();
    return make_cp_async(n->dst, d, n->src, widen_to_i64(s), n->bytes, sb, n->loc);
  }
};

}  // namespace

Stmt widen_indices(const Stmt& s) {
  Widen w;
  return w.mutate(s);
}

}  // namespace tx::lowering
