// isolate_shuffles: every T.cuda.shfl_xor(v, m) becomes two phases joined by
// a warp barrier, so that the region splitter sees warp collectives as what
// they are on the host: a point where every lane must have produced its
// value before any lane reads another's.
//
//   x = x + shfl_xor(x, 16)   =>   lane_0[threadIdx.x] = x
//                                  T.cuda.warp_sync()        (reported as shfl_xor)
//                                  x = x + lane_0[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ 16)]
//
// Accepts: lowered IR. A shuffle may sit in any expression a statement owns
// (store value or index, let value, loop bounds, condition, copy offsets);
// nested shuffles are taken innermost first. Each shuffle site gets its own
// lane array (per-CTA storage, rounded up to whole warps): a later site
// cannot overwrite a slot that a lane of an earlier site has yet to read,
// even when the two end up in the same region. The operand is evaluated at
// the statement, as on the GPU; the mask only in the reading phase, so a
// mask that varies per lane still reads the right partner.
#include "tx/lowering/host_form.hpp"

namespace tx::lowering {

namespace {

// The innermost shuffle of an expression: the first one whose operands hold
// no other shuffle (post-order).
class InnermostShuffle : public IRVisitor {
 public:
  const CallNode* found = nullptr;
  Expr found_expr;
  using IRVisitor::visit_node;
  void visit(const Expr& e) override {
    if (found || !e) return;
    IRVisitor::visit(e);
    if (!found) {
      if (auto* c = e.as<CallNode>(); c && c->op == Intrinsic::shfl_xor) {
        found = c;
        found_expr = e;
      }
    }
  }
  using IRVisitor::visit;
};

// Replaces one node (every occurrence of it: a shared subexpression is one value).
class ReplaceNode : public IRMutator {
 public:
  ReplaceNode(const ExprNode* target, Expr with) : target_(target), with_(std::move(with)) {}
  Expr mutate(const Expr& e) override {
    if (e.get() == target_) return with_;
    return IRMutator::mutate(e);
  }
  using IRMutator::mutate;

 private:
  const ExprNode* target_;
  Expr with_;
};

// The expressions a statement owns (not those of its child statements).
std::vector<Expr> own_exprs(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::Store: {
      auto* n = s.as<StoreNode>();
      std::vector<Expr> v{n->value};
      v.insert(v.end(), n->indices.begin(), n->indices.end());
      return v;
    }
    case StmtKind::Evaluate:
      return {s.as<EvaluateNode>()->value};
    case StmtKind::LetStmt:
      return {s.as<LetStmtNode>()->value};
    case StmtKind::For:
      return {s.as<ForNode>()->min, s.as<ForNode>()->extent};
    case StmtKind::IfThenElse:
      return {s.as<IfThenElseNode>()->cond};
    case StmtKind::CopyBytes:
      return {s.as<CopyBytesNode>()->dst_offset, s.as<CopyBytesNode>()->src_offset};
    default:
      return {};
  }
}

// s with its own expressions mapped through f.
Stmt with_own_exprs(const Stmt& s, IRMutator& f) {
  switch (s.kind()) {
    case StmtKind::Store: {
      auto* n = s.as<StoreNode>();
      std::vector<Expr> idx;
      for (const Expr& i : n->indices) idx.push_back(f.mutate(i));
      return make_store(n->buffer, f.mutate(n->value), std::move(idx), n->loc);
    }
    case StmtKind::Evaluate:
      return make_evaluate(f.mutate(s.as<EvaluateNode>()->value), s->loc);
    case StmtKind::LetStmt: {
      auto* n = s.as<LetStmtNode>();
      return make_let(n->var, f.mutate(n->value), n->body, n->loc);
    }
    case StmtKind::For: {
      auto* n = s.as<ForNode>();
      return make_for(n->var, f.mutate(n->min), f.mutate(n->extent), n->for_kind, n->body, n->loc);
    }
    case StmtKind::IfThenElse: {
      auto* n = s.as<IfThenElseNode>();
      return make_if(f.mutate(n->cond), n->then_case, n->else_case, n->loc);
    }
    case StmtKind::CopyBytes: {
      auto* n = s.as<CopyBytesNode>();
      return make_copy_bytes(n->dst, f.mutate(n->dst_offset), n->src, f.mutate(n->src_offset),
                             n->bytes, n->loc);
    }
    default:
      return s;
  }
}

class ShuffleIsolator : public IRMutator {
 public:
  explicit ShuffleIsolator(HostContext& cx) : cx_(cx) {}
  std::vector<Buffer> lanes;

  using IRMutator::mutate;
  Stmt mutate(const Stmt& s) override {
    Stmt cur = IRMutator::mutate(s);  // child statements first
    if (!cur) return cur;
    std::vector<Stmt> prelude;
    for (;;) {
      InnermostShuffle find;
      for (const Expr& e : own_exprs(cur)) find.visit(e);
      if (!find.found) break;
      const CallNode* sh = find.found;
      SourceLoc loc = sh->loc.known() ? sh->loc : cur->loc;
      Expr value = sh->args[0], mask = make_cast(i32, sh->args[1], loc);
      std::int64_t warps = (cx_.launch.block + 31) / 32;
      Buffer lane = make_buffer("lane_" + std::to_string(lanes.size()), value.dtype(), {warps * 32},
                                MemScope::shared, std::nullopt, loc);
      lanes.push_back(lane);
      Expr t = make_call(Intrinsic::thread_idx, {}, loc);
      prelude.push_back(make_store(lane, value, {t}, loc));
      Stmt bar = make_barrier(ExecScope::warp, loc);
      cx_.barrier_ops[bar.get()] = "T.cuda.shfl_xor";
      prelude.push_back(bar);
      Expr warp_base = make_binary(BinOp::BitAnd, t, make_int(~31), loc);
      Expr lane_id = make_binary(BinOp::BitAnd, t, make_int(31), loc);
      Expr partner =
          make_binary(BinOp::BitOr, warp_base, make_binary(BinOp::BitXor, lane_id, mask, loc), loc);
      ReplaceNode r(sh, make_load(lane, {partner}, loc));
      cur = with_own_exprs(cur, r);
    }
    if (prelude.empty()) return cur;
    prelude.push_back(cur);
    return make_seq(std::move(prelude), cur->loc);
  }

 private:
  HostContext& cx_;
};

}  // namespace

Stmt isolate_shuffles(const Stmt& s, HostContext& cx) {
  ShuffleIsolator iso(cx);
  Stmt body = iso.mutate(s);
  for (auto it = iso.lanes.rbegin(); it != iso.lanes.rend(); ++it)
    body = make_allocate(*it, body, (*it)->loc);
  return body;
}

}  // namespace tx::lowering
