// instrument_checks: the checked host mode's checks, as IR, in a lowered
// kernel (before the host passes, so that each check travels with the access
// it guards into whatever thread loop the access lands in):
//
//   A[i]            -> select(check_access(slot_A, i, 1, read, site), A[i], 0)
//   A[i] = v        -> if check_access(slot_A, i, 1, write, site): A[i] = v
//                      (flags: 1 a write, 2 symmetric memory or a peer's view
//                      of it, which the checker also records across ranks)
//   copy_bytes      -> the same for the source range, then the destination range
//   barrier         -> barrier; check_barrier(scope, site)   (each thread, after it)
//   x / y (integer) -> x / check_divisor(y, site)
//   check_index(i, extent, dim, -1) -> check_index(i, extent, dim, site)
//                      (placed by lowering's guard_indices; numbered here)
//
// An access out of bounds is reported and skipped (a load reads 0), so a
// checked run never touches memory outside a buffer. See runtime/src/host/checked_mode.hpp.
#include <unordered_map>

#include "tx/lowering/host_form.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

class Instrument : public IRMutator {
 public:
  Instrument(const LoweredKernel& k, CheckPlan* plan) : plan_(plan) {
    // The user's shapes, for reporting elements as coordinates.
    for (const Param& p : k.source->params)
      if (p.buffer) source_[p.buffer->data.get()] = p.buffer;
    for_each_stmt(k.source->body, [&](const Stmt& s) {
      if (auto* a = s.as<AllocateNode>()) source_[a->buffer->data.get()] = a->buffer;
    });
    for (std::size_t i = 0; i < k.lowered->params.size(); ++i)
      if (const Buffer& b = k.lowered->params[i].buffer) {
        add_buffer(b);
        plan_->buffers.back().param = static_cast<int>(i);
        plan_->buffers.back().dist = k.lowered->params[i].symmetric;
        if (k.lowered->params[i].symmetric) plan_->buffers.back().symmetric = b->name;
      }
  }

  using IRMutator::mutate;
  using IRMutator::mutate_node;

  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    Access saved = access_;
    access_ = {"T.load", &n->buffer};
    Expr out = IRMutator::mutate_node(self, n);
    access_ = saved;
    auto* l = out.as<LoadNode>();
    Expr ok = check(l->buffer, l->indices[0], 1, /*write=*/false,
                    site("T.load", l->buffer->name, l->loc));
    return make_select(ok, out, zero(l->dtype), l->loc);
  }
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    access_ = {"T.store", &n->buffer};
    Stmt out = IRMutator::mutate_node(self, n);
    access_ = {};
    auto* st = out.as<StoreNode>();
    Expr ok =
        check(st->buffer, st->indices[0], 1, true, site("T.store", st->buffer->name, st->loc));
    // A warp shuffle in the value is a collective: every lane runs it, so it
    // is bound before the per-thread condition that guards the store.
    if (has_shuffle(st->value)) {
      Var v("stored", st->value.dtype(), st->loc);
      return make_let(v, st->value,
                      make_if(ok, make_store(st->buffer, v, st->indices, st->loc), Stmt(), st->loc),
                      st->loc);
    }
    return make_if(ok, out, Stmt(), st->loc);
  }
  Stmt mutate_node(const Stmt& self, const CopyBytesNode* n) override {
    Stmt out = IRMutator::mutate_node(self, n);
    auto* c = out.as<CopyBytesNode>();
    std::int64_t elems = c->bytes / c->dst->dtype.bytes();
    Expr rd = check(c->src, c->src_offset, elems, false, site("T.load", c->src->name, c->loc));
    Expr wr = check(c->dst, c->dst_offset, elems, true, site("T.store", c->dst->name, c->loc));
    return make_if(rd, make_if(wr, out, Stmt(), c->loc), Stmt(), c->loc);
  }
  Stmt mutate_node(const Stmt& self, const BarrierNode* n) override {
    int scope = n->scope == ExecScope::cta ? 3 : n->scope == ExecScope::warpgroup ? 2 : 1;
    Expr mark = make_call(Intrinsic::check_barrier,
                          {make_int(scope), make_int(site("T.cuda.sync", "", n->loc))}, n->loc);
    return make_seq({self, make_evaluate(mark, n->loc)}, n->loc);
  }
  // A warp shuffle is a rendezvous of the warp's lanes: what a lane did
  // before it happens before what the other lanes do after it (tx's warp
  // reductions rely on it). Each statement holding one counts as a warp
  // barrier, marked just before it.
  Stmt mutate(const Stmt& st) override {
    Stmt out = IRMutator::mutate(st);
    if (!st || !(st.as<StoreNode>() || st.as<LetStmtNode>() || st.as<EvaluateNode>() ||
                 st.as<IfThenElseNode>()))
      return out;
    Expr top = st.as<StoreNode>()      ? st.as<StoreNode>()->value
               : st.as<LetStmtNode>()  ? st.as<LetStmtNode>()->value
               : st.as<EvaluateNode>() ? st.as<EvaluateNode>()->value
                                       : st.as<IfThenElseNode>()->cond;
    if (!has_shuffle(top)) return out;
    Expr mark = make_call(Intrinsic::check_barrier,
                          {make_int(1), make_int(site("T.cuda.shfl_xor", "", st->loc))}, st->loc);
    return make_seq({make_evaluate(mark, st->loc), out}, st->loc);
  }

  // A peer's copy of a symmetric buffer: its accesses are checked across
  // ranks too (check_access's flags & 2: the code generator passes their
  // addresses to the checker).
  Stmt mutate_node(const Stmt& self, const PeerViewNode* n) override {
    add_buffer(n->view);
    CheckBuffer& cb = plan_->buffers[static_cast<std::size_t>(slots_[n->view->data.get()])];
    cb.dist = true;
    cb.symmetric = n->of->name;
    return IRMutator::mutate_node(self, n);
  }
  Stmt mutate_node(const Stmt& self, const AllocateNode* n) override {
    add_buffer(n->buffer);
    return IRMutator::mutate_node(self, n);
  }
  Stmt mutate_node(const Stmt& self, const OriginNode* n) override {
    std::string saved = origin_;
    origin_ = n->text.substr(0, n->text.find('('));
    Stmt out = IRMutator::mutate_node(self, n);
    origin_ = saved;
    return out;
  }
  // The sm_90 instructions the checked mode models (TMA copies, warpgroup
  // MMA) are checked by the model itself, element by element, when it runs
  // them: their operands get slots here, their expressions no checks.
  Stmt mutate_node(const Stmt& self, const TmaCopyNode* n) override {
    add_buffer(n->map.global);
    add_buffer(n->smem);
    return self;
  }
  Stmt mutate_node(const Stmt& self, const WgmmaNode* n) override {
    add_buffer(n->d);
    if (n->a_regs) add_buffer(n->a_regs);
    if (n->a.smem) add_buffer(n->a.smem);
    add_buffer(n->b.smem);
    return self;
  }
  Expr mutate_node(const Expr& self, const CallNode* n) override {
    // An mbarrier's operand names the barrier (its address), and
    // register_fence / keep_before name a register without reading it:
    // none is an access. The mbarrier model checks the barrier's use.
    // T::dist::signal / wait_until: the flag operand is the flag's address;
    // the checker orders the ranks by them (dist_check.hpp). atomic_add's
    // destination is its address too: atomics do not race with each other.
    if (is_sm90_async_intrinsic(n->op) || n->op == Intrinsic::keep_before ||
        n->op == Intrinsic::named_barrier_sync || n->op == Intrinsic::named_barrier_arrive ||
        n->op == Intrinsic::signal || n->op == Intrinsic::wait_until ||
        n->op == Intrinsic::atomic_add) {
      if (n->args.empty()) return self;
      std::vector<Expr> args = n->args;
      for (std::size_t i = 1; i < args.size(); ++i) args[i] = mutate(args[i]);
      if (auto* l = args[0].as<LoadNode>()) add_buffer(l->buffer);
      return make_call(n->op, std::move(args), n->loc, n->dtype);
    }
    Expr out = IRMutator::mutate_node(self, n);
    auto* c = out.as<CallNode>();
    if (c->op != Intrinsic::check_index) return out;
    // Which access the index belongs to: the load or store around it.
    std::string what = "an access";
    if (access_.buffer) {
      const Buffer& b = *access_.buffer;
      auto it = source_.find(b->data.get());
      const Buffer& shown = it != source_.end() ? it->second : b;
      what = shown->name + " (";
      for (std::size_t d = 0; d < shown->dims.size(); ++d)
        what += (d ? ", " : "") + to_string(shown->dims[d]);
      what += shown->dims.size() == 1 ? ",)" : ")";
    }
    std::vector<Expr> args = c->args;
    args[3] = make_int(site(access_.op ? access_.op : "T.load", what, c->loc));
    return make_call(Intrinsic::check_index, std::move(args), c->loc);
  }
  Expr mutate_node(const Expr& self, const BinaryNode* n) override {
    Expr out = IRMutator::mutate_node(self, n);
    bool divides = n->op == BinOp::Div || n->op == BinOp::Mod || n->op == BinOp::FloorDiv ||
                   n->op == BinOp::FloorMod;
    if (!divides || !n->a.dtype().is_integer()) return out;
    auto* b = out.as<BinaryNode>();
    if (auto c = as_const_int(b->b); c && *c != 0) return out;
    int s = site(std::string("T.") + binop_name(n->op), to_string(self), n->loc);
    Expr d = make_call(Intrinsic::check_divisor, {b->b, make_int(s)}, n->loc);
    return make_binary(b->op, b->a, d, b->loc);
  }

 private:
  void add_buffer(const Buffer& b) {
    const VarNode* d = b->data.get();
    if (slots_.count(d)) return;
    CheckBuffer cb;
    cb.data = d;
    cb.name = b->name;
    cb.scope = b->scope;
    cb.elems = b->storage_elems();
    cb.elem_bytes = b->dtype.bytes();
    cb.races = b->scope != MemScope::local;
    auto it = source_.find(d);
    if (it != source_.end() && it->second->layout == TileLayout::row_major(it->second->shape) &&
        b->scope != MemScope::local && !it->second->symbolic())
      cb.shape = it->second->shape;
    else if (it != source_.end() && b->scope == MemScope::shared && it->second->shape.size() > 1 &&
             it->second->numel() == cb.elems)
      cb.stages = it->second->shape[0];  // a swizzled ring of stages: name the stage
    slots_[d] = static_cast<int>(plan_->buffers.size());
    plan_->buffers.push_back(std::move(cb));
  }

  Expr check(const Buffer& b, const Expr& index, std::int64_t count, bool write, int s) {
    auto it = slots_.find(b->data.get());
    if (it == slots_.end()) add_buffer(b), it = slots_.find(b->data.get());
    // The offset once more, without its check_index calls: each index is
    // reported once, by the access itself.
    struct Strip : IRMutator {
      using IRMutator::mutate_node;
      Expr mutate_node(const Expr& self, const CallNode* c) override {
        if (c->op == Intrinsic::check_index) return mutate(c->args[0]);
        return IRMutator::mutate_node(self, c);
      }
    } strip;
    Expr plain = strip.mutate(index);
    Expr i = plain.dtype() == i64 ? plain : make_cast(i64, plain, index->loc);
    const bool dist = plan_->buffers[static_cast<std::size_t>(it->second)].dist;
    return make_call(Intrinsic::check_access,
                     {make_int(it->second), i, make_int(count),
                      make_int((write ? 1 : 0) | (dist ? 2 : 0)), make_int(s)},
                     index->loc);
  }

  // One site per distinct (op, operand, line): an unrolled loop's copies of
  // an access are reported once.
  int site(const std::string& op, const std::string& what, SourceLoc loc) {
    const std::string& shown = origin_.empty() ? op : origin_;
    std::string key = shown + '\n' + what + '\n' + loc.str();
    auto [it, fresh] = site_ids_.emplace(key, static_cast<int>(plan_->sites.size()));
    if (fresh) plan_->sites.push_back({shown, what, loc});
    return it->second;
  }

  static bool has_shuffle(const Expr& e) {
    struct V : IRVisitor {
      bool found = false;
      void visit_node(const CallNode* c) override {
        found = found || c->op == Intrinsic::shfl_xor;
        IRVisitor::visit_node(c);
      }
      using IRVisitor::visit_node;
    } v;
    v.visit(e);
    return v.found;
  }

  static Expr zero(DType t) {
    if (t.is_bool()) return make_bool(false);
    if (t.is_integer()) return make_int(0, t);
    if (t.is_low_precision_float())
      return make_call(Intrinsic::reinterpret, {make_int(0, t.bytes() == 1 ? u8 : u16)}, {}, t);
    return make_float(0.0, t);
  }

  // The load or store whose indices are being rewritten.
  struct Access {
    const char* op = nullptr;
    const Buffer* buffer = nullptr;
  };
  Access access_;
  CheckPlan* plan_;
  std::unordered_map<const VarNode*, Buffer> source_;
  std::unordered_map<const VarNode*, int> slots_;
  std::unordered_map<std::string, int> site_ids_;
  std::string origin_;
};

}  // namespace

Stmt instrument_checks(const LoweredKernel& k, CheckPlan* plan) {
  Instrument ins(k, plan);
  return ins.mutate(k.lowered->body);
}

}  // namespace tx::lowering
