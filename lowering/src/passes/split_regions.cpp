// split_regions: the CTA becomes a sequential program (POCL's work-item
// loops, CuPBoP's regions). Barriers cut the kernel into regions; each region
// becomes `for thread in range(block): region`, with threadIdx.x replaced by
// the loop var. Running region k for every thread before region k+1 is a
// legal schedule of the GPU program exactly because every thread of the group
// stops at the barrier between them.
//
// Accepts: the output of isolate_shuffles (warp collectives are warp
// barriers by then) and sink_local_allocations. Statements without a barrier
// are left whole inside one thread loop; only the statements on the path to
// a barrier are taken apart:
//
//   Seq         runs of barrier-free statements become one thread loop each
//   For, If     kept outside the thread loops when their bounds / condition
//               are the same for the whole CTA (evaluated once, with any
//               thread); an If whose condition only agrees within warps (or
//               warpgroups) is pushed into each region as a guard instead,
//               which is legal when every barrier under it is at that
//               level: the groups on either side never wait for each other
//   LetStmt     a CTA-uniform value stays a scalar; a value computed from
//               the thread index alone is recomputed in every region that
//               uses it; anything else (it reads memory) is stored once into
//               a per-thread array and reloaded in later regions
//   Allocate    shared buffers stay per CTA; a register buffer whose scope
//               crosses a barrier becomes a per-thread array (scope shared,
//               indexed thread * elems + i)
//
// Rejected, with the barrier's op and source line: a barrier (or shuffle)
// under a condition that differs between threads that must meet at it, or
// inside a loop whose bounds differ between threads. On the GPU these hang
// or read undefined lanes; no sequential schedule reproduces them.
#include "tx/lowering/host_form.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

bool stmt_uses_var(const Stmt& s, const VarNode* v) {
  struct Finder : IRVisitor {
    const VarNode* v;
    bool found = false;
    using IRVisitor::visit_node;
    void visit_node(const VarNode* n) override { found |= n == v; }
  } f;
  f.v = v;
  f.visit(s);
  return f.found;
}

bool is_pure(const Expr& e) {
  struct Finder : IRVisitor {
    bool impure = false;
    using IRVisitor::visit_node;
    void visit_node(const LoadNode*) override { impure = true; }
    void visit_node(const CallNode* n) override {
      impure |= n->op == Intrinsic::shfl_xor;
      IRVisitor::visit_node(n);
    }
  } f;
  f.visit(e);
  return !f.impure;
}

bool is_empty(const Stmt& s) {
  auto* q = s.as<SeqNode>();
  return q && q->seq.empty();
}

struct PerThread {
  Buffer array;
  std::int64_t elems = 0;
};

// Inside a thread loop: threadIdx.x is the loop var, and a register buffer
// that became a per-thread array is addressed at the thread's slice.
class ThreadRewrite : public IRMutator {
 public:
  ThreadRewrite(Var thread, const std::unordered_map<const VarNode*, PerThread>& per_thread)
      : thread_(std::move(thread)), per_thread_(per_thread) {}

  using IRMutator::mutate_node;
  Expr mutate_node(const Expr& self, const CallNode* n) override {
    if (n->op == Intrinsic::thread_idx) return thread_;
    return IRMutator::mutate_node(self, n);
  }
  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    const PerThread* p = find(n->buffer);
    if (!p) return IRMutator::mutate_node(self, n);
    return make_load(p->array, {slot(*p, mutate(n->indices[0]), n->loc)}, n->loc);
  }
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    const PerThread* p = find(n->buffer);
    if (!p) return IRMutator::mutate_node(self, n);
    return make_store(p->array, mutate(n->value), {slot(*p, mutate(n->indices[0]), n->loc)},
                      n->loc);
  }
  Stmt mutate_node(const Stmt& self, const CopyBytesNode* n) override {
    const PerThread* pd = find(n->dst);
    const PerThread* ps = find(n->src);
    Expr doff = mutate(n->dst_offset), soff = mutate(n->src_offset);
    if (!pd && !ps && doff.same_as(n->dst_offset) && soff.same_as(n->src_offset)) return self;
    return make_copy_bytes(pd ? pd->array : n->dst, pd ? slot(*pd, doff, n->loc) : doff,
                           ps ? ps->array : n->src, ps ? slot(*ps, soff, n->loc) : soff, n->bytes,
                           n->loc);
  }

 private:
  const PerThread* find(const Buffer& b) const {
    auto it = per_thread_.find(b->data.get());
    return it == per_thread_.end() ? nullptr : &it->second;
  }
  Expr slot(const PerThread& p, const Expr& index, SourceLoc loc) const {
    DType t = index.dtype();
    Expr base = make_binary(BinOp::Mul, make_cast(t, thread_, loc), make_int(p.elems, t, loc), loc);
    return make_binary(BinOp::Add, base, index, loc);
  }

  Var thread_;
  const std::unordered_map<const VarNode*, PerThread>& per_thread_;
};

// An IRMutator whose every statement with a barrier inside is taken apart by
// the mutate_node hooks below, and every statement without one becomes (part
// of) a thread loop.
class RegionSplitter : public IRMutator {
 public:
  explicit RegionSplitter(HostContext& cx)
      : cx_(cx), dep_(cx.launch.block), block_(cx.launch.block) {
    // T::dim extents and scalar parameters are the same for every thread.
    for (const auto& [v, f] : cx.launch.param_facts) dep_.bind(v, {});
  }

  using IRMutator::mutate;
  Stmt mutate(const Stmt& s) override {
    if (!s || !contains_barrier(s)) return s ? thread_loop(s) : s;
    switch (s.kind()) {
      case StmtKind::Seq:
      case StmtKind::Barrier:
      case StmtKind::Origin:
      case StmtKind::Profile:
      case StmtKind::Allocate:
      case StmtKind::LetStmt:
      case StmtKind::IfThenElse:
      case StmtKind::For:
        return IRMutator::mutate(s);
      default:
        fail("tx.host_jit", "", s->loc,
             "internal: a barrier inside a statement that cannot hold one");
    }
  }

  using IRMutator::mutate_node;
  Stmt mutate_node(const Stmt&, const SeqNode* n) override { return lower_seq(n); }
  Stmt mutate_node(const Stmt& s, const BarrierNode* n) override {
    check_barrier(n);
    return make_seq({}, s->loc);
  }
  Stmt mutate_node(const Stmt&, const AllocateNode* n) override { return lower_allocate(n); }
  Stmt mutate_node(const Stmt&, const LetStmtNode* n) override { return lower_let(n); }
  Stmt mutate_node(const Stmt&, const IfThenElseNode* n) override { return lower_if(n); }
  Stmt mutate_node(const Stmt&, const ForNode* n) override { return lower_for(n); }

 private:
  // What encloses the statement being lowered, innermost last: every region
  // under it re-creates these around its thread loop's body.
  struct Item {
    enum Kind { guard, remat, array } kind;
    Expr cond;  // guard
    Uniformity level = Uniformity::thread;
    std::string text;
    SourceLoc loc;
    Var var;      // remat / array
    Expr value;   // remat
    Buffer slot;  // array: one element per thread
  };

  Stmt thread_loop(const Stmt& piece) {
    if (is_empty(piece)) return piece;
    Stmt body = piece;
    for (auto it = ctx_.rbegin(); it != ctx_.rend(); ++it) {
      switch (it->kind) {
        case Item::guard:
          body = make_if(it->cond, body, {}, it->loc);
          break;
        case Item::remat:
          if (stmt_uses_var(body, it->var.get()))
            body = make_let(it->var, it->value, body, it->loc);
          break;
        case Item::array:
          if (stmt_uses_var(body, it->var.get()))
            body = make_let(it->var, make_load(it->slot, {thread_idx(it->loc)}, it->loc), body,
                            it->loc);
          break;
      }
    }
    body = make_for(cx_.thread, make_int(0), make_int(block_), ForKind::serial, body, piece->loc);
    ThreadRewrite rw(cx_.thread, per_thread_);
    return rw.mutate(body);
  }

  Stmt lower_seq(const SeqNode* n) {
    std::vector<Stmt> out, run;
    auto flush = [&]() {
      if (run.empty()) return;
      out.push_back(thread_loop(make_seq(run, run.front()->loc)));
      run.clear();
    };
    for (const Stmt& c : n->seq) {
      if (!contains_barrier(c)) {
        run.push_back(c);
        continue;
      }
      flush();
      if (auto* b = c.as<BarrierNode>())
        check_barrier(b);
      else
        out.push_back(mutate(c));
    }
    flush();
    return make_seq(std::move(out), n->loc);
  }

  Stmt lower_allocate(const AllocateNode* n) {
    const Buffer& b = n->buffer;
    if (b->scope != MemScope::local) return make_allocate(b, mutate(n->body), n->loc);
    std::int64_t elems = b->storage_elems();
    Buffer arr =
        make_buffer(b->name, b->dtype, {elems * block_}, MemScope::shared, std::nullopt, b->loc);
    per_thread_[b->data.get()] = {arr, elems};
    Stmt body = mutate(n->body);
    per_thread_.erase(b->data.get());
    return make_allocate(arr, body, n->loc);
  }

  Stmt lower_let(const LetStmtNode* n) {
    ThreadDep d = dep_.of(n->value);
    if (d.group == ThreadDep::kUniform) {
      dep_.bind(n->var, d);
      return make_let(n->var, n->value, mutate(n->body), n->loc);
    }
    if (is_pure(n->value)) {
      dep_.bind(n->var, d);
      remat_[n->var.get()] = n->value;
      ctx_.push_back({Item::remat, {}, {}, {}, n->loc, n->var, n->value, {}});
      Stmt body = mutate(n->body);
      ctx_.pop_back();
      return body;
    }
    Buffer slot = make_buffer(n->var.name() + "_per_thread", n->var.dtype(), {block_},
                              MemScope::shared, std::nullopt, n->loc);
    Stmt store = thread_loop(make_store(slot, n->value, {thread_idx(n->loc)}, n->loc));
    dep_.bind(n->var, {1, 0});
    ctx_.push_back({Item::array, {}, {}, {}, n->loc, n->var, {}, slot});
    Stmt body = mutate(n->body);
    ctx_.pop_back();
    return make_allocate(slot, make_seq({store, body}, n->loc), n->loc);
  }

  Stmt lower_if(const IfThenElseNode* n) {
    Uniformity level = dep_.level(n->cond);
    if (level == Uniformity::cta) {
      Stmt t = mutate(n->then_case);
      Stmt e = n->else_case ? mutate(n->else_case) : Stmt();
      return make_if(hoist(n->cond), t, e, n->loc);
    }
    std::string text = to_string(n->cond);
    ctx_.push_back({Item::guard, n->cond, level, text, n->loc, {}, {}, {}});
    Stmt t = mutate(n->then_case);
    ctx_.pop_back();
    if (!n->else_case) return t;
    ctx_.push_back({Item::guard,
                    make_unary(UnOp::Not, n->cond, n->loc),
                    level,
                    "not (" + text + ")",
                    n->loc,
                    {},
                    {},
                    {}});
    Stmt e = mutate(n->else_case);
    ctx_.pop_back();
    return make_seq({t, e}, n->loc);
  }

  Stmt lower_for(const ForNode* n) {
    ThreadDep lo = dep_.of(n->min), ex = dep_.of(n->extent);
    if (dep_.level(lo) != Uniformity::cta || dep_.level(ex) != Uniformity::cta) {
      const BarrierNode* b = first_barrier(n->body);
      fail(barrier_op(b, cx_), "", b->loc,
           "sits in the loop `for " + n->var.name() + " in range(" + to_string(n->extent) + ")`" +
               where(n->loc) +
               ", whose bounds differ between threads; the host fallback needs every thread of "
               "the CTA to run the same iterations of a loop around a barrier");
    }
    dep_.bind(n->var, {});
    return make_for(n->var, hoist(n->min), hoist(n->extent), n->for_kind, mutate(n->body), n->loc);
  }

  void check_barrier(const BarrierNode* b) {
    Uniformity need = scope_level(b->scope);
    for (const Item& it : ctx_) {
      if (it.kind != Item::guard || static_cast<int>(it.level) >= static_cast<int>(need)) continue;
      std::string group = uniformity_name(need);
      fail(barrier_op(b, cx_), "", b->loc,
           "runs under the condition `" + it.text + "`" + where(it.loc) + ", which varies per " +
               uniformity_name(it.level) + ": not every thread of its " + group +
               " reaches it. On the GPU that hangs or reads undefined lanes; the host fallback, "
               "which runs a " +
               group + "'s threads region by region, rejects it");
    }
  }

  static std::string where(SourceLoc loc) { return loc.known() ? " (" + loc.str() + ")" : ""; }

  // A CTA-uniform expression evaluated outside the thread loops: recomputed
  // lets are expanded, and the thread index is any thread's (0).
  Expr hoist(const Expr& e) const {
    struct Hoist : IRMutator {
      const std::unordered_map<const VarNode*, Expr>* remat;
      using IRMutator::mutate_node;
      Expr mutate_node(const Expr& self, const VarNode* n) override {
        auto it = remat->find(n);
        return it == remat->end() ? self : mutate(it->second);
      }
      Expr mutate_node(const Expr& self, const CallNode* n) override {
        if (n->op == Intrinsic::thread_idx) return make_int(0, i32, n->loc);
        return IRMutator::mutate_node(self, n);
      }
    } h;
    h.remat = &remat_;
    return h.mutate(e);
  }

  static Expr thread_idx(SourceLoc loc) { return make_call(Intrinsic::thread_idx, {}, loc); }

  HostContext& cx_;
  ThreadDependence dep_;
  std::int64_t block_;
  std::vector<Item> ctx_;
  std::unordered_map<const VarNode*, PerThread> per_thread_;
  std::unordered_map<const VarNode*, Expr> remat_;
};

}  // namespace

Stmt split_regions(const Stmt& s, HostContext& cx) {
  RegionSplitter r(cx);
  return r.mutate(s);
}

}  // namespace tx::lowering
