#include "tx/printer.hpp"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "tx/ir_functor.hpp"
#include "tx/tile_op_table.hpp"

namespace tx {

namespace {

int precedence(const ExprNode* e) {
  if (e->kind == ExprKind::Binary) {
    auto* b = static_cast<const BinaryNode*>(e);
    switch (b->op) {
      case BinOp::Or:
        return 1;
      case BinOp::And:
        return 2;
      case BinOp::EQ:
      case BinOp::NE:
      case BinOp::LT:
      case BinOp::LE:
      case BinOp::GT:
      case BinOp::GE:
        return 4;
      case BinOp::BitOr:
        return 5;
      case BinOp::BitXor:
        return 6;
      case BinOp::BitAnd:
        return 7;
      case BinOp::Shl:
      case BinOp::Shr:
        return 8;
      case BinOp::Add:
      case BinOp::Sub:
        return 9;
      case BinOp::Mul:
      case BinOp::Div:
      case BinOp::Mod:
      case BinOp::FloorDiv:
        return 10;
      default:
        return 12;  // printed as calls
    }
  }
  if (e->kind == ExprKind::Unary) return static_cast<const UnaryNode*>(e)->op == UnOp::Not ? 3 : 11;
  if (e->kind == ExprKind::IntImm && static_cast<const IntImmNode*>(e)->value < 0) return 11;
  if (e->kind == ExprKind::FloatImm && static_cast<const FloatImmNode*>(e)->value < 0) return 11;
  return 12;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "T.nan";
  if (std::isinf(v)) return v > 0 ? "T.inf" : "-T.inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest text that round-trips.
  for (int p = 1; p < 17; ++p) {
    char b2[64];
    std::snprintf(b2, sizeof b2, "%.*g", p, v);
    if (std::strtod(b2, nullptr) == v) {
      std::snprintf(buf, sizeof buf, "%s", b2);
      break;
    }
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

class Printer : public IRVisitor {
 public:
  explicit Printer(PrintOptions opt) : opt_(opt) {}

  std::string expr(const Expr& e) {
    if (!e) return "<undefined>";
    std::ostringstream save;
    std::swap(save, expr_os_);
    print_expr(e);
    std::swap(save, expr_os_);
    return save.str();
  }

  void print_func(const PrimFunc& f) {
    line("@T.prim_func");
    std::string sig = "def " + f->name + "(";
    for (std::size_t i = 0; i < f->params.size(); ++i)
      sig += (i ? ", " : "") + var_name(f->params[i].handle) + ": T.handle";
    line(sig + "):");
    ++indent_;
    if (f->no_alias) line("T.func_attr({\"tir.noalias\": True})");
    for (const DimParam& d : f->dims) {
      if (d.derived != DimParam::Derived::none) {
        // fast_divide's launch values: computed from the divisor at launch.
        line(var_name(d.var) + " = T.launch_value(\"" +
             (d.derived == DimParam::Derived::div_magic ? "div_magic" : "div_shift") + "\", " +
             expr(d.of) + ")");
        continue;
      }
      std::string s = var_name(d.var) + " = T.dim(\"" + d.var.name() + "\"";
      if (d.min != 1) s += ", min=" + std::to_string(d.min);
      if (d.max != 2147483647) s += ", max=" + std::to_string(d.max);
      if (d.multiple_of != 1) s += ", multiple_of=" + std::to_string(d.multiple_of);
      line(s + ")");
    }
    for (const Param& p : f->params) {
      if (!p.scalar.defined()) continue;
      std::string facts;
      if (p.has_facts) {
        if (p.min != INT64_MIN) facts += ", min=" + std::to_string(p.min);
        if (p.max != INT64_MAX) facts += ", max=" + std::to_string(p.max);
        if (p.multiple_of != 1) facts += ", multiple_of=" + std::to_string(p.multiple_of);
      }
      line(var_name(p.scalar) + " = T.match_scalar(" + var_name(p.handle) + ", \"" +
           p.scalar.dtype().name() + "\"" + facts + ")");
    }
    for (const Param& p : f->params) {
      if (!p.buffer) continue;
      std::string s =
          buffer_name(p.buffer) + (p.symmetric ? " = T.match_symmetric(" : " = T.match_buffer(") +
          var_name(p.handle) + ", " + dims_str(p.buffer) + ", \"" + p.buffer->dtype.name() + "\"";
      if (!(p.buffer->layout == TileLayout::row_major(p.buffer->shape)) || opt_.canonical)
        s += ", layout=TileLayout(" + p.buffer->layout.str() + ")";
      line(s + ")");
    }
    if (!f->lowered) line("T.device_entry()");
    print_stmt(f->body);
    --indent_;
  }

  void print_stmt(const Stmt& s) {
    if (!s) return;
    visit(s);
  }

  std::string result() const { return out_.str(); }

  std::string region(const BufferRegion& r) {
    std::string s = buffer_name(r.buffer) + "[";
    for (std::size_t d = 0; d < r.ranges.size(); ++d) {
      const Range& rg = r.ranges[d];
      if (d) s += ", ";
      if (auto c = as_const_int(rg.start); c && !opt_.canonical) {
        s += std::to_string(*c) + ":" + std::to_string(*c + rg.extent);
      } else {
        std::string st = expr(rg.start);
        s += st + " : " + st + " + " + std::to_string(rg.extent);
      }
    }
    return s + "]";
  }

  std::string tile_call(const TileCallNode* n) {
    std::string s = n->qualified_name() + "(";
    auto arg = [&](const TileArg& t) {
      if (auto* r = std::get_if<BufferRegion>(&t)) return region(*r);
      return expr(std::get<Expr>(t));
    };
    bool first = true;
    for (std::size_t i = 0; i < n->args.size(); ++i) {
      if (n->is_attr_arg(i)) continue;
      s += (first ? "" : ", ") + arg(n->args[i]);
      first = false;
    }
    const TileAttrs& a = n->attrs;
    if (a.scale_arg >= 0) s += ", scale=" + arg(n->args[static_cast<std::size_t>(a.scale_arg)]);
    if (a.scale.value.defined()) s += ", scale=" + expr(a.scale.value);
    if (a.bias_arg >= 0) s += ", bias=" + arg(n->args[static_cast<std::size_t>(a.bias_arg)]);
    if (a.bias.value.defined()) s += ", bias=" + expr(a.bias.value);
    if (const TileOpDef* def = find_tile_op(n->op); def && def->accepts(TileAttr::accum))
      s += std::string(", accum=") + (a.accum ? "True" : "False");
    if (!a.axes.empty()) {
      s += ", axes=[";
      for (std::size_t i = 0; i < a.axes.size(); ++i)
        s += (i ? ", " : "") + std::to_string(a.axes[i]);
      s += "]";
    }
    if (a.barrier.defined()) s += ", barrier=" + expr(a.barrier);
    if (a.pending != 0) s += ", pending=" + std::to_string(a.pending);
    if (a.transpose_b) s += ", transpose_b=True";
    if (a.partial) s += ", partial=True";
    if (a.where) {
      // lambda i0, i1: ... -- the coordinates as the user's lambda took them.
      s += ", where=lambda ";
      for (int d = 0; d < a.where.rank; ++d) s += (d ? ", i" : "i") + std::to_string(d);
      where_coords_ = true;
      s += ": " + expr(a.where.cond);
      where_coords_ = false;
    }
    if (!a.variant.empty()) s += ", variant=\"" + a.variant + "\"";
    return s + ")";
  }

 private:
  // A buffer's extents as written: constants, or T::dim variables.
  std::string dims_str(const Buffer& b) {
    if (!b->symbolic()) return shape_str(b->shape);
    std::string s = "(";
    for (std::size_t i = 0; i < b->dims.size(); ++i) s += (i ? ", " : "") + expr(b->dims[i]);
    if (b->dims.size() == 1) s += ",";
    return s + ")";
  }

  std::string shape_str(const std::vector<std::int64_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) s += ",";
    return s + ")";
  }

  std::string unique(const std::string& base, const void* key,
                     std::unordered_map<const void*, std::string>& table) {
    auto it = table.find(key);
    if (it != table.end()) return it->second;
    std::string name;
    if (opt_.canonical) {
      name = "v" + std::to_string(counter_++);
    } else {
      name = base.empty() ? "v" : base;
      for (int k = 1; used_.count(name); ++k) name = base + "_" + std::to_string(k);
    }
    used_.insert(name);
    table[key] = name;
    return name;
  }

  std::string var_name(const Var& v) {
    bool first = !var_names_.count(v.get());
    std::string n = unique(v.name(), v.get(), var_names_);
    return first && opt_.canonical ? n + ":" + v.dtype().name() : n;
  }
  std::string buffer_name(const Buffer& b) {
    std::string n = unique(b->name, b->data.get(), buf_names_);
    if (opt_.canonical && !declared_.count(b.get())) {
      declared_.insert(b.get());
      // Buffers are named positionally; their full description goes inline once.
      return n + "{" + dims_str(b) + "," + b->dtype.name() + "," + mem_scope_name(b->scope) + "," +
             b->layout.str() + "}";
    }
    return n;
  }

  void line(const std::string& s) {
    for (int i = 0; i < indent_; ++i) out_ << "    ";
    out_ << s << "\n";
  }

  // ------------------------------------------------------------- exprs
  void print_expr(const Expr& e) { IRVisitor::visit(e); }
  void child(const Expr& e, int parent_prec, bool right = false) {
    int p = precedence(e.get());
    bool paren = p < parent_prec || (right && p == parent_prec);
    if (paren) expr_os_ << "(";
    print_expr(e);
    if (paren) expr_os_ << ")";
  }

  void visit_node(const IntImmNode* n) override {
    if (n->dtype.is_bool())
      expr_os_ << (n->value ? "True" : "False");
    else if (n->dtype == i32 && !opt_.canonical)
      expr_os_ << n->value;
    else
      expr_os_ << "T." << n->dtype.name() << "(" << n->value << ")";
  }
  void visit_node(const FloatImmNode* n) override {
    if (n->dtype == f32 && !opt_.canonical)
      expr_os_ << format_double(n->value);
    else
      expr_os_ << "T." << n->dtype.name() << "(" << format_double(n->value) << ")";
  }
  void visit_node(const VarNode* n) override {
    bool first = !var_names_.count(n);
    expr_os_ << unique(n->name, n, var_names_);
    if (first && opt_.canonical) expr_os_ << ":" << n->dtype.name();
  }
  void visit_node(const CastNode* n) override {
    expr_os_ << "T.cast(";
    print_expr(n->value);
    expr_os_ << ", \"" << n->dtype.name() << "\")";
  }
  void visit_node(const BinaryNode* n) override {
    int p = precedence(n);
    switch (n->op) {
      case BinOp::Min:
      case BinOp::Max:
      case BinOp::FloorMod:
        expr_os_ << "T."
                 << (n->op == BinOp::Min   ? "min"
                     : n->op == BinOp::Max ? "max"
                                           : "floormod")
                 << "(";
        print_expr(n->a);
        expr_os_ << ", ";
        print_expr(n->b);
        expr_os_ << ")";
        return;
      default:
        break;
    }
    child(n->a, p);
    expr_os_ << " " << binop_symbol(n->op) << " ";
    child(n->b, p, true);
  }
  void visit_node(const UnaryNode* n) override {
    switch (n->op) {
      case UnOp::Neg:
        expr_os_ << "-";
        break;
      case UnOp::Not:
        expr_os_ << "not ";
        break;
      case UnOp::BitNot:
        expr_os_ << "~";
        break;
    }
    child(n->a, n->op == UnOp::Not ? 3 : 11);
  }
  void visit_node(const SelectNode* n) override {
    expr_os_ << "T.Select(";
    print_expr(n->cond);
    expr_os_ << ", ";
    print_expr(n->t);
    expr_os_ << ", ";
    print_expr(n->f);
    expr_os_ << ")";
  }
  void visit_node(const CallNode* n) override {
    switch (n->op) {
      case Intrinsic::tile_coord:
        if (where_coords_) {
          expr_os_ << "i" << as_const_int(n->args[0]).value_or(0);
          return;
        }
        expr_os_ << "T.tile_coord(";
        break;
      case Intrinsic::named_barrier_sync:
        expr_os_ << "T.ptx.bar.sync(";
        break;
      case Intrinsic::keep_before:
        expr_os_ << "T.ptx.keep_before(";
        break;
      case Intrinsic::signal:
        expr_os_ << "T.dist.signal(";
        break;
      case Intrinsic::atomic_add:
        expr_os_ << "T.atomic_add(";
        break;
      case Intrinsic::wait_until:
        expr_os_ << "T.dist.wait_until(";
        break;
      case Intrinsic::named_barrier_arrive:
        expr_os_ << "T.ptx.bar.arrive(";
        break;
      case Intrinsic::thread_idx:
        expr_os_ << "threadIdx.x";
        return;
      case Intrinsic::block_idx: {
        auto d = as_const_int(n->args[0]).value_or(0);
        expr_os_ << "blockIdx."
                 << "xyz"[d < 0 || d > 2 ? 0 : d];
        return;
      }
      case Intrinsic::shfl_xor:
        expr_os_ << "T.cuda.shfl_xor(";
        break;
      case Intrinsic::reinterpret:
        expr_os_ << "T.reinterpret(\"" << n->dtype.name() << "\", ";
        break;
      case Intrinsic::fabs:
        expr_os_ << "T.abs(";
        break;
      case Intrinsic::cp_async_commit:
        expr_os_ << "T.ptx.cp_async.commit_group(";
        break;
      case Intrinsic::cp_async_wait:
        expr_os_ << "T.ptx.cp_async.wait_group(";
        break;
      case Intrinsic::tma_store_commit:
        expr_os_ << "T.ptx.cp_async.bulk.commit_group(";
        break;
      case Intrinsic::tma_store_wait:
        expr_os_ << "T.ptx.cp_async.bulk.wait_group_read(";
        break;
      case Intrinsic::mbarrier_init:
      case Intrinsic::mbarrier_arrive:
      case Intrinsic::mbarrier_expect_tx:
      case Intrinsic::mbarrier_wait:
      case Intrinsic::fence_barrier_init:
      case Intrinsic::fence_proxy_async:
      case Intrinsic::setmaxnreg:
      case Intrinsic::register_fence:
        expr_os_ << "T.ptx." << intrinsic_name(n->op) << "(";
        break;
      case Intrinsic::wgmma_fence:
        expr_os_ << "T.ptx.wgmma.fence(";
        break;
      case Intrinsic::wgmma_commit:
        expr_os_ << "T.ptx.wgmma.commit_group(";
        break;
      case Intrinsic::wgmma_wait:
        expr_os_ << "T.ptx.wgmma.wait_group(";
        break;
      default:
        expr_os_ << "T." << intrinsic_name(n->op) << "(";
        break;
    }
    for (std::size_t i = 0; i < n->args.size(); ++i) {
      if (i) expr_os_ << ", ";
      print_expr(n->args[i]);
    }
    expr_os_ << ")";
  }
  void visit_node(const LoadNode* n) override {
    expr_os_ << buffer_name(n->buffer) << "[";
    for (std::size_t i = 0; i < n->indices.size(); ++i) {
      if (i) expr_os_ << ", ";
      print_expr(n->indices[i]);
    }
    expr_os_ << "]";
  }

  // ------------------------------------------------------------- stmts
  void visit_node(const StoreNode* n) override {
    std::string s = buffer_name(n->buffer) + "[";
    for (std::size_t i = 0; i < n->indices.size(); ++i) s += (i ? ", " : "") + expr(n->indices[i]);
    line(s + "] = " + expr(n->value));
  }
  void visit_node(const EvaluateNode* n) override { line(expr(n->value)); }
  void visit_node(const ForNode* n) override {
    std::string range = is_const_int(n->min, 0)
                            ? expr(n->extent)
                            : expr(n->min) + ", " + expr(n->min) + " + " + expr(n->extent);
    line("for " + var_name(n->var) + " in T." +
         (n->for_kind == ForKind::unrolled ? "unroll(" : "serial(") + range + "):");
    block(n->body);
  }
  void visit_node(const IfThenElseNode* n) override {
    line("if " + expr(n->cond) + ":");
    block(n->then_case);
    if (n->else_case) {
      line("else:");
      block(n->else_case);
    }
  }
  void visit_node(const SeqNode* n) override {
    for (const Stmt& s : n->seq) print_stmt(s);
  }
  void visit_node(const LetStmtNode* n) override {
    line(var_name(n->var) + ": T." + n->var.dtype().name() + " = " + expr(n->value));
    print_stmt(n->body);
  }
  void visit_node(const AllocateNode* n) override {
    const Buffer& b = n->buffer;
    std::string s = buffer_name(b) + " = T.alloc_buffer(" + shape_str(b->shape) + ", \"" +
                    b->dtype.name() + "\", scope=\"" + mem_scope_name(b->scope) + "\"";
    if (!(b->layout == TileLayout::row_major(b->shape)) || opt_.canonical)
      s += ", layout=TileLayout(" + b->layout.str() + ")";
    line(s + ")");
    print_stmt(n->body);
  }
  void visit_node(const ScopeIdBindNode* n) override {
    std::string lhs;
    for (std::size_t i = 0; i < n->vars.size(); ++i) lhs += (i ? ", " : "") + var_name(n->vars[i]);
    std::string ext;
    for (std::size_t i = 0; i < n->extents.size(); ++i)
      ext += (i ? ", " : "") +
             (n->symbolic() ? expr(n->extent_exprs[i]) : std::to_string(n->extents[i]));
    line(lhs + " = T." + scope_id_name(n->id_kind) + "([" + ext + "])");
    print_stmt(n->body);
  }
  void visit_node(const TileCallNode* n) override {
    std::string s = tile_call(n);
    if (opt_.show_locations && n->loc.known()) s += "  # " + n->loc.str();
    line(s);
  }
  void visit_node(const BarrierNode* n) override {
    switch (n->scope) {
      case ExecScope::cta:
        line("T.cuda.cta_sync()");
        break;
      case ExecScope::warpgroup:
        line("T.cuda.warpgroup_sync()");
        break;
      case ExecScope::warp:
        line("T.cuda.warp_sync()");
        break;
      case ExecScope::thread:
        break;
    }
  }
  void visit_node(const CopyBytesNode* n) override {
    line("T.cuda.copy_bytes(T.ptr(" + buffer_name(n->dst) + ", " + expr(n->dst_offset) +
         "), T.ptr(" + buffer_name(n->src) + ", " + expr(n->src_offset) + "), " +
         std::to_string(n->bytes) + ")");
  }
  static std::string regs_text(const std::vector<std::int64_t>& r) {
    std::string s;
    for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
    return s;
  }
  void visit_node(const MatrixMoveNode* n) override {
    std::string what = std::string(n->store ? "stmatrix" : "ldmatrix") + ".x" +
                       std::to_string(n->words.size()) + (n->trans ? ".trans" : "");
    std::string smem = "T.ptr(" + buffer_name(n->smem) + ", " + expr(n->row) + ")";
    std::string regs = buffer_name(n->regs) + "[" + regs_text(n->words) + "]";
    line("T.ptx." + what + "(" + (n->store ? smem + ", " + regs : regs + ", " + smem) + ")");
  }
  void visit_node(const MmaNode* n) override {
    line("T.ptx.mma." + n->shape + "(" + buffer_name(n->d) + "[" + regs_text(n->d_regs) + "], " +
         buffer_name(n->a) + "[" + regs_text(n->a_words) + "], " + buffer_name(n->b) + "[" +
         regs_text(n->b_words) + "])");
  }
  void visit_node(const CpAsyncNode* n) override {
    line("T.ptx.cp_async(T.ptr(" + buffer_name(n->dst) + ", " + expr(n->dst_offset) + "), T.ptr(" +
         buffer_name(n->src) + ", " + expr(n->src_offset) + "), " + std::to_string(n->bytes) +
         (n->src_bytes ? ", src_bytes=" + expr(n->src_bytes) : std::string()) + ")");
  }
  void visit_node(const TmaCopyNode* n) override {
    std::string box, coords;
    for (std::size_t i = 0; i < n->map.box.size(); ++i) {
      box += (i ? ", " : "") + std::to_string(n->map.box[i]);
      coords += (i ? ", " : "") + expr(n->coords[i]);
    }
    const std::string map = "T.tensor_map(" + buffer_name(n->map.global) + ", box=[" + box +
                            "], swizzle=" + std::to_string(n->map.swizzle_bytes) + ")";
    const std::string smem = "T.ptr(" + buffer_name(n->smem) + ", " + expr(n->smem_offset) + ")";
    if (n->store)
      line(std::string(n->reduce_add ? "T.ptx.tma_reduce_add(" : "T.ptx.tma_store(") + map + ", [" +
           coords + "], " + smem + ")");
    else
      line("T.ptx.tma_load(" + smem + ", " + map + ", [" + coords +
           "], barrier=" + expr(n->barrier) + ")");
  }
  void visit_node(const WgmmaNode* n) override {
    auto operand = [&](const WgmmaOperand& o) {
      return "T.smem_desc(" + buffer_name(o.smem) + ", " + expr(o.offset) +
             ", swizzle=" + std::to_string(o.swizzle_bytes) + ", lbo=" + std::to_string(o.lbo) +
             ", sbo=" + std::to_string(o.sbo) + (o.mn_major ? ", mn_major=True" : "") + ")";
    };
    const std::string a = n->a_regs
                              ? buffer_name(n->a_regs) + "[words " + regs_text(n->a_words) + "]"
                              : operand(n->a);
    line("T.ptx.wgmma." + n->shape + "(" + buffer_name(n->d) + "[" + regs_text(n->d_regs) + "], " +
         a + ", " + operand(n->b) + ", scale_d=" + expr(n->scale_d) + ")");
  }
  void visit_node(const PeerViewNode* n) override {
    line(buffer_name(n->view) + " = T.peer(" + buffer_name(n->of) + ", " + expr(n->rank) + ")");
    print_stmt(n->body);
  }
  void visit_node(const ProfileNode* n) override {
    line("with T.profile(\"" + n->name + "\"):");
    block(n->body);
  }
  void visit_node(const OriginNode* n) override {
    std::string s = "# " + n->text;
    if (n->loc.known() && !opt_.canonical) s += "  @ " + n->loc.str();
    line(s);
    print_stmt(n->body);
  }

  void block(const Stmt& s) {
    ++indent_;
    bool empty = !s || (s.as<SeqNode>() && s.as<SeqNode>()->seq.empty());
    if (empty)
      line("pass");
    else
      print_stmt(s);
    --indent_;
  }

  using IRVisitor::visit;
  using IRVisitor::visit_node;

  PrintOptions opt_;
  std::ostringstream out_;
  std::ostringstream expr_os_;
  int indent_ = 0;
  int counter_ = 0;
  bool where_coords_ = false;  // printing a where= predicate: T.tile_coord(d) is "id"

  std::unordered_map<const void*, std::string> var_names_, buf_names_;
  std::unordered_set<std::string> used_;
  std::unordered_set<const void*> declared_;
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string to_string(const Expr& e, PrintOptions opt) {
  Printer p(opt);
  return p.expr(e);
}
std::string to_string(const Stmt& s, PrintOptions opt) {
  Printer p(opt);
  p.print_stmt(s);
  return p.result();
}
std::string to_string(const PrimFunc& f, PrintOptions opt) {
  Printer p(opt);
  p.print_func(f);
  return p.result();
}
std::string to_string(const BufferRegion& r) {
  Printer p({});
  return p.region(r);
}
std::string tile_call_str(const TileCallNode* call) {
  Printer p({});
  return p.tile_call(call);
}

std::ostream& operator<<(std::ostream& os, const Expr& e) { return os << to_string(e); }
std::ostream& operator<<(std::ostream& os, const Stmt& s) { return os << to_string(s); }
std::ostream& operator<<(std::ostream& os, const PrimFunc& f) { return os << to_string(f); }

bool structural_equal(const PrimFunc& a, const PrimFunc& b) {
  return to_string(a, {.canonical = true}) == to_string(b, {.canonical = true});
}
bool structural_equal(const Stmt& a, const Stmt& b) {
  return to_string(a, {.canonical = true}) == to_string(b, {.canonical = true});
}
std::uint64_t structural_hash(const PrimFunc& f) {
  return fnv1a(to_string(f, {.canonical = true}));
}
std::uint64_t structural_hash(const Stmt& s) { return fnv1a(to_string(s, {.canonical = true})); }

}  // namespace tx
