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

bool needs_wide(const Buffer& b) {
  return b->storage_elems() > std::numeric_limits<std::int32_t>::max();
}

// `e` as an i64 expression whose value is the mathematical value of `e`
// computed without 32-bit wrap-around.
Expr widen(const Expr& e) {
  DType t = e.dtype();
  if (t == i64) return e;
  // Only signed integers of up to 32 bits: unsigned arithmetic wraps by
  // definition, so its value is kept and converted.
  bool signed_narrow = t.is_int() && t.bits <= 32;
  if (auto c = as_const_int(e); c && (signed_narrow || t.is_uint()))
    return make_int(*c, i64, e->loc);
  if (!signed_narrow) return make_cast(i64, e, e->loc);
  if (auto* b = e.as<BinaryNode>()) {
    switch (b->op) {
      case BinOp::Add:
      case BinOp::Sub:
      case BinOp::Mul:
      case BinOp::Div:
      case BinOp::Mod:
      case BinOp::FloorDiv:
      case BinOp::FloorMod:
      case BinOp::Min:
      case BinOp::Max:
      case BinOp::BitAnd:
      case BinOp::BitOr:
      case BinOp::BitXor:
        return make_binary(b->op, widen(b->a), widen(b->b), b->loc);
      case BinOp::Shl:
      case BinOp::Shr:
        return make_binary(b->op, widen(b->a), make_cast(i64, b->b, b->loc), b->loc);
      default:
        break;
    }
  }
  if (auto* u = e.as<UnaryNode>(); u && u->op == UnOp::Neg)
    return make_unary(UnOp::Neg, widen(u->a), u->loc);
  if (auto* s = e.as<SelectNode>()) return make_select(s->cond, widen(s->t), widen(s->f), s->loc);
  if (auto* c = e.as<CastNode>(); c && c->value.dtype().is_int() && c->value.dtype().bits <= 32)
    return widen(c->value);  // a widening (or same-width) cast between signed ints
  return make_cast(i64, e, e->loc);
}

class Widen : public IRMutator {
 public:
  using IRMutator::mutate_node;
  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    Expr out = IRMutator::mutate_node(self, n);
    if (!needs_wide(n->buffer)) return out;
    auto* l = out.as<LoadNode>();
    return make_load(l->buffer, {widen(l->indices[0])}, l->loc);
  }
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    Stmt out = IRMutator::mutate_node(self, n);
    if (!needs_wide(n->buffer)) return out;
    auto* s = out.as<StoreNode>();
    return make_store(s->buffer, s->value, {widen(s->indices[0])}, s->loc);
  }
  Stmt mutate_node(const Stmt& self, const CopyBytesNode* n) override {
    if (!needs_wide(n->dst) && !needs_wide(n->src)) return IRMutator::mutate_node(self, n);
    Expr d = mutate(n->dst_offset), s = mutate(n->src_offset);
    return make_copy_bytes(n->dst, needs_wide(n->dst) ? widen(d) : d, n->src,
                           needs_wide(n->src) ? widen(s) : s, n->bytes, n->loc);
  }
  Stmt mutate_node(const Stmt& self, const CpAsyncNode* n) override {
    if (!needs_wide(n->src)) return IRMutator::mutate_node(self, n);
    Expr d = mutate(n->dst_offset), s = mutate(n->src_offset);
    Expr sb = n->src_bytes ? mutate(n->src_bytes) : Expr();
    return make_cp_async(n->dst, d, n->src, widen(s), n->bytes, sb, n->loc);
  }
};

}  // namespace

Stmt widen_indices(const Stmt& s) {
  Widen w;
  return w.mutate(s);
}

}  // namespace tx::lowering
