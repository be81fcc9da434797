#include "tx/ir_functor.hpp"

#include <functional>

namespace tx {

IRVisitor::~IRVisitor() = default;
IRMutator::~IRMutator() = default;

// ------------------------------------------------------------------ visitor

void IRVisitor::visit(const Expr& e) {
  if (!e) return;
  switch (e.kind()) {
#define TX_CASE(N)                                    \
  case ExprKind::N:                                   \
    visit_node(static_cast<const N##Node*>(e.get())); \
    break;
    TX_EXPR_NODES(TX_CASE)
#undef TX_CASE
  }
}

void IRVisitor::visit(const Stmt& s) {
  if (!s) return;
  switch (s.kind()) {
#define TX_CASE(N)                                    \
  case StmtKind::N:                                   \
    visit_node(static_cast<const N##Node*>(s.get())); \
    break;
    TX_STMT_NODES(TX_CASE)
#undef TX_CASE
  }
}

void IRVisitor::visit_region(const BufferRegion& r) {
  visit_buffer(r.buffer);
  for (const Range& rg : r.ranges) visit(rg.start);
}

void IRVisitor::visit_node(const IntImmNode*) {}
void IRVisitor::visit_node(const FloatImmNode*) {}
void IRVisitor::visit_node(const VarNode*) {}
void IRVisitor::visit_node(const CastNode* n) { visit(n->value); }
void IRVisitor::visit_node(const BinaryNode* n) {
  visit(n->a);
  visit(n->b);
}
void IRVisitor::visit_node(const UnaryNode* n) { visit(n->a); }
void IRVisitor::visit_node(const SelectNode* n) {
  visit(n->cond);
  visit(n->t);
  visit(n->f);
}
void IRVisitor::visit_node(const CallNode* n) {
  for (const Expr& a : n->args) visit(a);
}
void IRVisitor::visit_node(const LoadNode* n) {
  visit_buffer(n->buffer);
  for (const Expr& i : n->indices) visit(i);
}
void IRVisitor::visit_node(const StoreNode* n) {
  visit_buffer(n->buffer);
  visit(n->value);
  for (const Expr& i : n->indices) visit(i);
}
void IRVisitor::visit_node(const EvaluateNode* n) { visit(n->value); }
void IRVisitor::visit_node(const ForNode* n) {
  visit(n->min);
  visit(n->extent);
  visit(n->body);
}
void IRVisitor::visit_node(const IfThenElseNode* n) {
  visit(n->cond);
  visit(n->then_case);
  visit(n->else_case);
}
void IRVisitor::visit_node(const SeqNode* n) {
  for (const Stmt& s : n->seq) visit(s);
}
void IRVisitor::visit_node(const LetStmtNode* n) {
  visit(n->value);
  visit(n->body);
}
void IRVisitor::visit_node(const AllocateNode* n) {
  visit_buffer(n->buffer);
  visit(n->body);
}
void IRVisitor::visit_node(const ScopeIdBindNode* n) {
  if (n->symbolic())
    for (const Expr& e : n->extent_exprs) visit(e);
  visit(n->body);
}
void IRVisitor::visit_node(const TileCallNode* n) {
  for (const TileArg& a : n->args) {
    if (auto* r = std::get_if<BufferRegion>(&a))
      visit_region(*r);
    else
      visit(std::get<Expr>(a));
  }
  visit(n->attrs.scale.value);
  visit(n->attrs.bias.value);
  visit(n->attrs.barrier);
  visit(n->attrs.where.cond);
}
void IRVisitor::visit_node(const BarrierNode*) {}
void IRVisitor::visit_node(const CopyBytesNode* n) {
  visit_buffer(n->dst);
  visit(n->dst_offset);
  visit_buffer(n->src);
  visit(n->src_offset);
}
void IRVisitor::visit_node(const MatrixMoveNode* n) {
  visit_buffer(n->smem);
  visit(n->row);
  visit_buffer(n->regs);
}
void IRVisitor::visit_node(const MmaNode* n) {
  visit_buffer(n->d);
  visit_buffer(n->a);
  visit_buffer(n->b);
}
void IRVisitor::visit_node(const CpAsyncNode* n) {
  visit_buffer(n->dst);
  visit(n->dst_offset);
  visit_buffer(n->src);
  visit(n->src_offset);
  if (n->src_bytes) visit(n->src_bytes);
}
void IRVisitor::visit_node(const TmaCopyNode* n) {
  visit_buffer(n->map.global);
  visit_buffer(n->smem);
  visit(n->smem_offset);
  for (const Expr& c : n->coords) visit(c);
  if (n->barrier) visit(n->barrier);
}
void IRVisitor::visit_node(const WgmmaNode* n) {
  visit_buffer(n->d);
  if (n->a_regs) {
    visit_buffer(n->a_regs);
  } else {
    visit_buffer(n->a.smem);
    visit(n->a.offset);
  }
  visit_buffer(n->b.smem);
  visit(n->b.offset);
  visit(n->scale_d);
}
void IRVisitor::visit_node(const OriginNode* n) { visit(n->body); }
void IRVisitor::visit_node(const ProfileNode* n) { visit(n->body); }
void IRVisitor::visit_node(const PeerViewNode* n) {
  visit_buffer(n->view);
  visit_buffer(n->of);
  visit(n->rank);
  visit(n->body);
}

// ------------------------------------------------------------------ mutator

Expr IRMutator::mutate(const Expr& e) {
  if (!e) return e;
  switch (e.kind()) {
#define TX_CASE(N)  \
  case ExprKind::N: \
    return mutate_node(e, static_cast<const N##Node*>(e.get()));
    TX_EXPR_NODES(TX_CASE)
#undef TX_CASE
  }
  return e;
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s) return s;
  switch (s.kind()) {
#define TX_CASE(N)  \
  case StmtKind::N: \
    return mutate_node(s, static_cast<const N##Node*>(s.get()));
    TX_STMT_NODES(TX_CASE)
#undef TX_CASE
  }
  return s;
}

BufferRegion IRMutator::mutate_region(const BufferRegion& r) {
  BufferRegion out{mutate_buffer(r.buffer), {}};
  for (const Range& rg : r.ranges) out.ranges.push_back({mutate(rg.start), rg.extent});
  return out;
}

namespace {
bool same(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!a[i].same_as(b[i])) return false;
  return true;
}
std::vector<Expr> mutate_all(IRMutator& m, const std::vector<Expr>& xs) {
  std::vector<Expr> out;
  out.reserve(xs.size());
  for (const Expr& x : xs) out.push_back(m.mutate(x));
  return out;
}
}  // namespace

Expr IRMutator::mutate_node(const Expr& self, const IntImmNode*) { return self; }
Expr IRMutator::mutate_node(const Expr& self, const FloatImmNode*) { return self; }
Expr IRMutator::mutate_node(const Expr& self, const VarNode*) { return self; }
Expr IRMutator::mutate_node(const Expr& self, const CastNode* n) {
  Expr v = mutate(n->value);
  return v.same_as(n->value) ? self : make_cast(n->dtype, v, n->loc);
}
Expr IRMutator::mutate_node(const Expr& self, const BinaryNode* n) {
  Expr a = mutate(n->a), b = mutate(n->b);
  return a.same_as(n->a) && b.same_as(n->b) ? self : make_binary(n->op, a, b, n->loc);
}
Expr IRMutator::mutate_node(const Expr& self, const UnaryNode* n) {
  Expr a = mutate(n->a);
  return a.same_as(n->a) ? self : make_unary(n->op, a, n->loc);
}
Expr IRMutator::mutate_node(const Expr& self, const SelectNode* n) {
  Expr c = mutate(n->cond), t = mutate(n->t), f = mutate(n->f);
  return c.same_as(n->cond) && t.same_as(n->t) && f.same_as(n->f) ? self
                                                                  : make_select(c, t, f, n->loc);
}
Expr IRMutator::mutate_node(const Expr& self, const CallNode* n) {
  auto args = mutate_all(*this, n->args);
  return same(args, n->args) ? self : make_call(n->op, std::move(args), n->loc, n->dtype);
}
Expr IRMutator::mutate_node(const Expr& self, const LoadNode* n) {
  Buffer b = mutate_buffer(n->buffer);
  auto idx = mutate_all(*this, n->indices);
  return b.same_as(n->buffer) && same(idx, n->indices) ? self
                                                       : make_load(b, std::move(idx), n->loc);
}

Stmt IRMutator::mutate_node(const Stmt& self, const StoreNode* n) {
  Buffer b = mutate_buffer(n->buffer);
  Expr v = mutate(n->value);
  auto idx = mutate_all(*this, n->indices);
  if (b.same_as(n->buffer) && v.same_as(n->value) && same(idx, n->indices)) return self;
  return make_store(b, v, std::move(idx), n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const EvaluateNode* n) {
  Expr v = mutate(n->value);
  return v.same_as(n->value) ? self : make_evaluate(v, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const ForNode* n) {
  Expr mn = mutate(n->min), ex = mutate(n->extent);
  Stmt body = mutate(n->body);
  if (mn.same_as(n->min) && ex.same_as(n->extent) && body.same_as(n->body)) return self;
  return make_for(n->var, mn, ex, n->for_kind, body, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const IfThenElseNode* n) {
  Expr c = mutate(n->cond);
  Stmt t = mutate(n->then_case), e = mutate(n->else_case);
  if (c.same_as(n->cond) && t.same_as(n->then_case) && e.same_as(n->else_case)) return self;
  return make_if(c, t, e, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const SeqNode* n) {
  std::vector<Stmt> out;
  bool changed = false;
  for (const Stmt& s : n->seq) {
    out.push_back(mutate(s));
    changed |= !out.back().same_as(s);
  }
  return changed ? make_seq(std::move(out), n->loc) : self;
}
Stmt IRMutator::mutate_node(const Stmt& self, const LetStmtNode* n) {
  Expr v = mutate(n->value);
  Stmt body = mutate(n->body);
  if (v.same_as(n->value) && body.same_as(n->body)) return self;
  return make_let(n->var, v, body, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const AllocateNode* n) {
  Buffer b = mutate_buffer(n->buffer);
  Stmt body = mutate(n->body);
  if (b.same_as(n->buffer) && body.same_as(n->body)) return self;
  return make_allocate(b, body, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const ScopeIdBindNode* n) {
  Stmt body = mutate(n->body);
  if (body.same_as(n->body)) return self;
  return make_scope_id_bind(n->id_kind, n->vars, n->extent_exprs, body, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const TileCallNode* n) {
  std::vector<TileArg> args;
  bool changed = false;
  for (const TileArg& a : n->args) {
    if (auto* r = std::get_if<BufferRegion>(&a)) {
      BufferRegion nr = mutate_region(*r);
      changed |= !nr.buffer.same_as(r->buffer);
      for (std::size_t i = 0; i < nr.ranges.size(); ++i)
        changed |= !nr.ranges[i].start.same_as(r->ranges[i].start);
      args.emplace_back(std::move(nr));
    } else {
      Expr e = mutate(std::get<Expr>(a));
      changed |= !e.same_as(std::get<Expr>(a));
      args.emplace_back(e);
    }
  }
  TileAttrs attrs = n->attrs;
  attrs.scale.value = mutate(n->attrs.scale.value);
  attrs.bias.value = mutate(n->attrs.bias.value);
  attrs.barrier = mutate(n->attrs.barrier);
  attrs.where.cond = mutate(n->attrs.where.cond);
  changed |= !attrs.scale.value.same_as(n->attrs.scale.value) ||
             !attrs.bias.value.same_as(n->attrs.bias.value) ||
             !attrs.barrier.same_as(n->attrs.barrier) ||
             !attrs.where.cond.same_as(n->attrs.where.cond);
  if (!changed) return self;
  return make_tile_call(n->op, n->scope, std::move(args), std::move(attrs), n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const BarrierNode*) { return self; }
Stmt IRMutator::mutate_node(const Stmt& self, const CopyBytesNode* n) {
  Buffer d = mutate_buffer(n->dst), s = mutate_buffer(n->src);
  Expr doff = mutate(n->dst_offset), soff = mutate(n->src_offset);
  if (d.same_as(n->dst) && s.same_as(n->src) && doff.same_as(n->dst_offset) &&
      soff.same_as(n->src_offset))
    return self;
  return make_copy_bytes(d, doff, s, soff, n->bytes, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const MatrixMoveNode* n) {
  Buffer sm = mutate_buffer(n->smem), rg = mutate_buffer(n->regs);
  Expr row = mutate(n->row);
  if (sm.same_as(n->smem) && rg.same_as(n->regs) && row.same_as(n->row)) return self;
  return make_matrix_move(n->store, n->trans, sm, row, rg, n->words, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const MmaNode* n) {
  Buffer d = mutate_buffer(n->d), a = mutate_buffer(n->a), b = mutate_buffer(n->b);
  if (d.same_as(n->d) && a.same_as(n->a) && b.same_as(n->b)) return self;
  return make_mma(n->shape, d, n->d_regs, a, n->a_words, b, n->b_words, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const CpAsyncNode* n) {
  Buffer d = mutate_buffer(n->dst), s = mutate_buffer(n->src);
  Expr doff = mutate(n->dst_offset), soff = mutate(n->src_offset);
  Expr sb = n->src_bytes ? mutate(n->src_bytes) : Expr();
  if (d.same_as(n->dst) && s.same_as(n->src) && doff.same_as(n->dst_offset) &&
      soff.same_as(n->src_offset) && sb.same_as(n->src_bytes))
    return self;
  return make_cp_async(d, doff, s, soff, n->bytes, sb, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const TmaCopyNode* n) {
  TensorMapDesc map = n->map;
  map.global = mutate_buffer(n->map.global);
  Buffer sm = mutate_buffer(n->smem);
  Expr off = mutate(n->smem_offset), bar = n->barrier ? mutate(n->barrier) : Expr();
  bool changed = !map.global.same_as(n->map.global) || !sm.same_as(n->smem) ||
                 !off.same_as(n->smem_offset) || !bar.same_as(n->barrier);
  std::vector<Expr> coords;
  for (const Expr& c : n->coords) {
    coords.push_back(mutate(c));
    changed |= !coords.back().same_as(c);
  }
  if (!changed) return self;
  if (n->store && n->reduce_add) return make_tma_reduce_add(map, sm, off, coords, n->loc);
  if (n->store) return make_tma_store(map, sm, off, coords, n->loc);
  return make_tma_copy(map, sm, off, coords, bar, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const WgmmaNode* n) {
  Buffer d = mutate_buffer(n->d);
  WgmmaOperand a = n->a, b = n->b;
  Buffer ar;
  if (n->a_regs) {
    ar = mutate_buffer(n->a_regs);
  } else {
    a.smem = mutate_buffer(n->a.smem);
    a.offset = mutate(n->a.offset);
  }
  b.smem = mutate_buffer(n->b.smem);
  b.offset = mutate(n->b.offset);
  Expr sd = mutate(n->scale_d);
  if (d.same_as(n->d) && a.smem.same_as(n->a.smem) && a.offset.same_as(n->a.offset) &&
      ar.same_as(n->a_regs) && b.smem.same_as(n->b.smem) && b.offset.same_as(n->b.offset) &&
      sd.same_as(n->scale_d))
    return self;
  if (n->a_regs) return make_wgmma(n->shape, d, n->d_regs, ar, n->a_words, b, sd, n->loc);
  return make_wgmma(n->shape, d, n->d_regs, a, b, sd, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const OriginNode* n) {
  Stmt body = mutate(n->body);
  return body.same_as(n->body) ? self : make_origin(n->text, body, n->loc);
}
Stmt IRMutator::mutate_node(const Stmt& self, const ProfileNode* n) {
  Stmt body = mutate(n->body);
  return body.same_as(n->body) ? self : make_profile(n->name, body, n->loc);
}

Stmt IRMutator::mutate_node(const Stmt& self, const PeerViewNode* n) {
  Buffer view = mutate_buffer(n->view), of = mutate_buffer(n->of);
  Expr rank = mutate(n->rank);
  Stmt body = mutate(n->body);
  if (view.same_as(n->view) && of.same_as(n->of) && rank.same_as(n->rank) && body.same_as(n->body))
    return self;
  return make_peer_view(view, of, rank, body, n->loc);
}

// ---------------------------------------------------------------- helpers

namespace {
class Substituter : public IRMutator {
 public:
  explicit Substituter(const std::vector<std::pair<Var, Expr>>& m) : map_(m) {}
  Expr mutate_node(const Expr& self, const VarNode* n) override {
    for (const auto& [v, e] : map_)
      if (v.get() == n) return e;
    return self;
  }
  using IRMutator::mutate_node;

 private:
  const std::vector<std::pair<Var, Expr>>& map_;
};

class StmtCollector : public IRVisitor {
 public:
  explicit StmtCollector(const std::function<void(const Stmt&)>& f) : f_(f) {}
  void visit(const Stmt& s) override {
    if (!s) return;
    f_(s);
    IRVisitor::visit(s);
  }
  using IRVisitor::visit;

 private:
  const std::function<void(const Stmt&)>& f_;
};

class VarUse : public IRVisitor {
 public:
  explicit VarUse(const Var& v) : v_(v) {}
  bool found = false;
  void visit_node(const VarNode* n) override { found |= n == v_.get(); }
  using IRVisitor::visit_node;

 private:
  const Var& v_;
};
}  // namespace

Expr substitute(const Expr& e, const std::vector<std::pair<Var, Expr>>& map) {
  Substituter s(map);
  return s.mutate(e);
}

Stmt substitute(const Stmt& st, const std::vector<std::pair<Var, Expr>>& map) {
  Substituter s(map);
  return s.mutate(st);
}

void for_each_stmt(const Stmt& s, const std::function<void(const Stmt&)>& on_stmt) {
  StmtCollector c(on_stmt);
  c.visit(s);
}

bool expr_uses_var(const Expr& e, const Var& v) {
  VarUse u(v);
  u.visit(e);
  return u.found;
}

}  // namespace tx
