// Node factories: every IR node is built here, after its operands are checked.
#include "tx/ir.hpp"

#include <atomic>

#include "tx/printer.hpp"
#include "tx/tile_op_table.hpp"

namespace tx {

ExprNode::~ExprNode() = default;
StmtNode::~StmtNode() = default;

namespace {
std::uint64_t next_var_id() {
  static std::atomic<std::uint64_t> counter{0};
  return ++counter;
}

std::string binop_op_name(BinOp op) { return std::string("T.") + binop_name(op); }

// An operand as the user would read it, shortened for a message.
std::string operand_text(const Expr& e) {
  if (!e) return "<undefined>";
  std::string s =
      e.depth() > 64 || e.tree_size() > 4096 ? std::string("<expression>") : to_string(e);
  if (s.size() > 72) s = s.substr(0, 69) + "...";
  return s;
}

// Every traversal of the IR (printer, passes, code generators, destructors)
// recurses into operands; a bounded depth keeps them all within the stack.
// The builder splits deeper expressions into T::let parts before they get
// here (builder.cpp), so this fires only for IR made by other means.
Expr checked_depth(Expr e, const char* op, SourceLoc loc) {
  if (e.depth() > kMaxExprDepth)
    fail(op, "", loc,
         "expression nests " + std::to_string(e.depth()) + " operations deep; tx takes at most " +
             std::to_string(kMaxExprDepth) + " (bind parts of it with T::let)");
  if (e.tree_size() > kMaxExprSize)
    fail(op, "", loc,
         "expression has " + std::to_string(e.tree_size()) +
             " operations when its shared parts are counted once per use (as every pass and "
             "code generator walks them); tx takes at most " +
             std::to_string(kMaxExprSize) + " (bind the shared parts with T::let)");
  return e;
}
}  // namespace

VarNode::VarNode(std::string n, DType t, SourceLoc l)
    : ExprNode(kKind, t, l), name(std::move(n)), id(next_var_id()) {}

Var::Var(std::string name, DType t, SourceLoc loc)
    : Expr(std::make_shared<const VarNode>(std::move(name), t, loc)) {}

Expr::Expr(bool v) : Expr(make_bool(v)) {}
Expr::Expr(int v) : Expr(make_int(v)) {}
Expr::Expr(double v) : Expr(make_float(v)) {}
Expr::Expr(float v) : Expr(make_float(v)) {}

// ------------------------------------------------------------------ buffers

const char* mem_scope_name(MemScope s) {
  switch (s) {
    case MemScope::global:
      return "global";
    case MemScope::shared:
      return "shared";
    case MemScope::local:
      return "local";
  }
  return "?";
}

namespace {
std::vector<Expr> static_dims(const std::vector<std::int64_t>& shape) {
  std::vector<Expr> d;
  for (auto e : shape) d.push_back(make_int(e, e > 2147483647 ? i64 : i32));
  return d;
}
}  // namespace

BufferNode::BufferNode(std::string n, DType t, std::vector<std::int64_t> s, MemScope sc,
                       TileLayout l, Var d, SourceLoc lc, std::vector<Expr> ds)
    : name(std::move(n)),
      dtype(t),
      shape(std::move(s)),
      scope(sc),
      layout(std::move(l)),
      data(std::move(d)),
      loc(lc),
      dims(ds.empty() ? static_dims(shape) : std::move(ds)) {}

bool BufferNode::symbolic() const {
  for (const Expr& d : dims)
    if (!d.as<IntImmNode>()) return true;
  return false;
}

std::int64_t BufferNode::numel() const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

std::int64_t BufferNode::storage_elems() const {
  return scope == MemScope::local ? layout.storage().cosize() : layout.cosize();
}

std::int64_t BufferNode::memory_offset() const {
  return scope == MemScope::local ? 0 : layout.offset(Axis::m);
}

namespace {
Buffer make_buffer_checked(std::string name, DType dtype, std::vector<std::int64_t> shape,
                           MemScope scope, std::optional<TileLayout> layout, SourceLoc loc,
                           bool check_bytes) {
  const std::string op = "T.alloc_buffer";
  if (dtype.is_void() || dtype.is_handle())
    fail(op, name, loc, "dtype " + dtype.name() + " cannot be a buffer element");
  if (shape.empty()) fail(op, name, loc, "a buffer needs at least one dimension");
  __int128 elems = 1;
  for (auto e : shape) {
    if (e <= 0) fail(op, name, loc, "shape extent " + std::to_string(e) + " is not positive");
    elems *= e;
    if (check_bytes && elems * dtype.bytes() > (__int128{1} << 62))
      fail(op, name, loc,
           "the shape holds more than 2^62 bytes of " + dtype.name() +
               ", past what 64-bit offsets can address");
  }
  TileLayout l = layout ? *layout : TileLayout::row_major(shape);
  if (auto why = l.mismatch(shape)) fail(op, name, loc, *why);
  if (scope != MemScope::local && l.has_thread_axes())
    fail(op, name, loc,
         std::string("a ") + mem_scope_name(scope) +
             " buffer cannot use thread axes in its layout (" + l.str() +
             "); only register (local) tiles are distributed over threads");
  if (l.swizzle() && scope != MemScope::shared)
    fail(op, name, loc,
         "a swizzled layout (" + l.str() + ") is for shared memory; a " + mem_scope_name(scope) +
             " buffer cannot carry one");
  for (const Iter& it : l.replica())
    if (it.axis == Axis::m && scope != MemScope::local)
      fail(op, name, loc, "memory replicas are not supported in " + l.str());
  Var data(name, handle_t, loc);
  return Buffer(std::make_shared<const BufferNode>(std::move(name), dtype, std::move(shape), scope,
                                                   std::move(l), std::move(data), loc));
}
}  // namespace

Buffer make_buffer(std::string name, DType dtype, std::vector<std::int64_t> shape, MemScope scope,
                   std::optional<TileLayout> layout, SourceLoc loc) {
  return make_buffer_checked(std::move(name), dtype, std::move(shape), scope, std::move(layout),
                             loc, /*check_bytes=*/true);
}

Buffer make_symbolic_buffer(std::string name, DType dtype, std::vector<Expr> dims,
                            std::vector<std::int64_t> bounds, SourceLoc loc) {
  const std::string op = "T.match_buffer";
  if (dims.size() != bounds.size() || dims.empty())
    fail(op, name, loc, "one bound per dimension is needed");
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (!dims[d].defined())
      fail(op, name, loc, "extent " + std::to_string(d) + " is an undefined tx::Expr");
    if (!dims[d].dtype().is_integer())
      fail(op, name, loc, "extent " + std::to_string(d) + " is not an integer");
  }
  // The bounds are the T::dims' max facts: their product is what layouts and
  // offsets are computed with, so it must stay within 2^62 elements. Bytes
  // are not limited here: a launch binds real tensors, which are checked.
  __int128 elems = 1;
  for (std::int64_t e : bounds) elems *= e > 0 ? e : 1;
  if (elems > (__int128{1} << 62))
    fail(op, name, loc,
         "the largest extents of its dims (their max facts) multiply to more than 2^62 "
         "elements; give the T::dims smaller maxima (DimFacts{.max = ...})");
  Buffer b = make_buffer_checked(name, dtype, bounds, MemScope::global, std::nullopt, loc,
                                 /*check_bytes=*/false);
  return Buffer(std::make_shared<const BufferNode>(b->name, b->dtype, b->shape, b->scope, b->layout,
                                                   b->data, b->loc, std::move(dims)));
}

Buffer flat_view(const Buffer& b) {
  std::int64_t n = b->storage_elems();
  std::vector<Expr> dims;
  if (b->symbolic()) {  // the product of the extents (row-major: the storage)
    Expr p = b->dims[0];
    for (std::size_t d = 1; d < b->dims.size(); ++d) p = make_binary(BinOp::Mul, p, b->dims[d]);
    dims.push_back(p);
  }
  return Buffer(std::make_shared<const BufferNode>(b->name, b->dtype, std::vector<std::int64_t>{n},
                                                   b->scope, TileLayout::row_major({n}), b->data,
                                                   b->loc, std::move(dims)));
}

std::vector<std::int64_t> BufferRegion::extents() const {
  std::vector<std::int64_t> e;
  for (const Range& r : ranges) e.push_back(r.extent);
  return e;
}

std::int64_t BufferRegion::numel() const {
  std::int64_t n = 1;
  for (const Range& r : ranges) n *= r.extent;
  return n;
}

// ------------------------------------------------------------ expressions

const char* binop_symbol(BinOp op) {
  switch (op) {
    case BinOp::Add:
      return "+";
    case BinOp::Sub:
      return "-";
    case BinOp::Mul:
      return "*";
    case BinOp::Div:
      return "/";
    case BinOp::Mod:
      return "%";
    case BinOp::FloorDiv:
      return "//";
    case BinOp::FloorMod:
      return "floormod";
    case BinOp::Min:
      return "min";
    case BinOp::Max:
      return "max";
    case BinOp::EQ:
      return "==";
    case BinOp::NE:
      return "!=";
    case BinOp::LT:
      return "<";
    case BinOp::LE:
      return "<=";
    case BinOp::GT:
      return ">";
    case BinOp::GE:
      return ">=";
    case BinOp::And:
      return "and";
    case BinOp::Or:
      return "or";
    case BinOp::BitAnd:
      return "&";
    case BinOp::BitOr:
      return "|";
    case BinOp::BitXor:
      return "^";
    case BinOp::Shl:
      return "<<";
    case BinOp::Shr:
      return ">>";
  }
  return "?";
}

const char* binop_name(BinOp op) {
  switch (op) {
    case BinOp::Add:
      return "add";
    case BinOp::Sub:
      return "sub";
    case BinOp::Mul:
      return "mul";
    case BinOp::Div:
      return "div";
    case BinOp::Mod:
      return "mod";
    case BinOp::FloorDiv:
      return "floordiv";
    case BinOp::FloorMod:
      return "floormod";
    case BinOp::Min:
      return "min";
    case BinOp::Max:
      return "max";
    case BinOp::EQ:
      return "eq";
    case BinOp::NE:
      return "ne";
    case BinOp::LT:
      return "lt";
    case BinOp::LE:
      return "le";
    case BinOp::GT:
      return "gt";
    case BinOp::GE:
      return "ge";
    case BinOp::And:
      return "logical_and";
    case BinOp::Or:
      return "logical_or";
    case BinOp::BitAnd:
      return "bitwise_and";
    case BinOp::BitOr:
      return "bitwise_or";
    case BinOp::BitXor:
      return "bitwise_xor";
    case BinOp::Shl:
      return "shift_left";
    case BinOp::Shr:
      return "shift_right";
  }
  return "?";
}

bool binop_is_comparison(BinOp op) { return op >= BinOp::EQ && op <= BinOp::GE; }
bool binop_is_logical(BinOp op) { return op == BinOp::And || op == BinOp::Or; }

const char* intrinsic_name(Intrinsic i) {
  switch (i) {
#define TX_CASE(N, A) \
  case Intrinsic::N:  \
    return #N;
    TX_INTRINSICS(TX_CASE)
#undef TX_CASE
  }
  return "?";
}

int intrinsic_arity(Intrinsic i) {
  switch (i) {
#define TX_CASE(N, A) \
  case Intrinsic::N:  \
    return A;
    TX_INTRINSICS(TX_CASE)
#undef TX_CASE
  }
  return 0;
}

Expr make_int(std::int64_t v, DType t, SourceLoc loc) {
  if (!t.is_integer() && !t.is_bool())
    fail("tx.make_int", "", loc, "dtype " + t.name() + " is not an integer type");
  return Expr(std::make_shared<const IntImmNode>(t, v, loc));
}

Expr make_float(double v, DType t, SourceLoc loc) {
  if (!t.is_float()) fail("tx.make_float", "", loc, "dtype " + t.name() + " is not a float type");
  return Expr(std::make_shared<const FloatImmNode>(t, v, loc));
}

Expr make_bool(bool v, SourceLoc loc) { return make_int(v ? 1 : 0, boolean, loc); }

Expr make_cast(DType t, Expr v, SourceLoc loc) {
  if (!v) fail("T.cast", "", loc, "the operand is an undefined (default-constructed) tx::Expr");
  if (t.is_void() || t.is_handle() || v.dtype().is_handle() || v.dtype().is_void())
    fail("T.cast", operand_text(v), loc, "cannot cast " + v.dtype().name() + " to " + t.name());
  if (v.dtype() == t) return v;
  return checked_depth(Expr(std::make_shared<const CastNode>(t, std::move(v), loc)), "T.cast", loc);
}

namespace {
// The type that represents both dtypes' values: floats over integers, the
// wider of two floats or of two integers of one signedness, f32 for f16
// with bf16 (neither holds the other), a wider signed integer for a signed
// and an unsigned one.
DType accurate_common_type(DType a, DType b) {
  if (a.is_bool()) return b;
  if (b.is_bool()) return a;
  if (a.is_float() != b.is_float()) return a.is_float() ? a : b;
  if (a.is_float()) {
    if (a.bits == b.bits) return a.bits <= 16 ? DType{TypeCode::Float, 32} : a;
    return a.bits > b.bits ? a : b;
  }
  if (a.is_int() == b.is_int()) return a.bits >= b.bits ? a : b;
  const DType& u = a.is_int() ? b : a;
  const DType& i = a.is_int() ? a : b;
  if (i.bits > u.bits) return i;
  return DType{TypeCode::Int, static_cast<std::uint8_t>(std::min(64, 2 * u.bits))};
}
}  // namespace

Expr make_binary(BinOp op, Expr a, Expr b, SourceLoc loc) {
  const std::string name = binop_op_name(op);
  if (!a || !b)
    fail(name, "", loc,
         std::string("the ") + (a ? "right" : "left") +
             " operand is an undefined (default-constructed) tx::Expr");
  DType ta = a.dtype(), tb = b.dtype();
  if (ta != tb) {
    // The hint casts up, to the type that holds both operands' values (f16
    // and f32: f32; f16 and bf16: f32, as PyTorch promotes), never down.
    const DType common = accurate_common_type(ta, tb);
    std::string hint;
    if (common == ta || common == tb) {
      const Expr& narrow = common == ta ? b : a;
      hint = "cast(" + operand_text(narrow) + ", " + common.name() + ")";
    } else {
      hint = "cast both to " + common.name();
    }
    fail(name, operand_text(b), loc,
         "dtype " + tb.name() + " differs from the other operand's " + ta.name() + " (" +
             operand_text(a) + "); cast explicitly, up to the wider type: " + hint);
  }
  if (ta.is_handle() || ta.is_void())
    fail(name, operand_text(a), loc, "operands of dtype " + ta.name() + " have no arithmetic");
  DType result = ta;
  if (binop_is_comparison(op)) {
    result = boolean;
  } else if (binop_is_logical(op)) {
    if (!ta.is_bool())
      fail(name, operand_text(a), loc, "logical operators take bool operands, got " + ta.name());
  } else if (op == BinOp::BitAnd || op == BinOp::BitOr || op == BinOp::BitXor || op == BinOp::Shl ||
             op == BinOp::Shr) {
    if (!ta.is_integer() && !ta.is_bool())
      fail(name, operand_text(a), loc, "bitwise operators take integer operands, got " + ta.name());
  } else if (ta.is_bool()) {
    fail(name, operand_text(a), loc, "arithmetic on bool operands; cast to an integer type first");
  }
  return checked_depth(
      Expr(std::make_shared<const BinaryNode>(op, result, std::move(a), std::move(b), loc)),
      binop_op_name(op).c_str(), loc);
}

Expr make_unary(UnOp op, Expr a, SourceLoc loc) {
  const char* name = op == UnOp::Neg   ? "T.neg"
                     : op == UnOp::Not ? "T.logical_not"
                                       : "T.bitwise_not";
  if (!a) fail(name, "", loc, "the operand is an undefined (default-constructed) tx::Expr");
  DType t = a.dtype();
  if (op == UnOp::Not && !t.is_bool())
    fail(name, operand_text(a), loc, "takes a bool operand, got " + t.name());
  if (op == UnOp::BitNot && !t.is_integer() && !t.is_bool())
    fail(name, operand_text(a), loc, "takes an integer operand, got " + t.name());
  if (op == UnOp::Neg && (t.is_bool() || t.is_handle()))
    fail(name, operand_text(a), loc, "cannot negate a " + t.name());
  return checked_depth(Expr(std::make_shared<const UnaryNode>(op, t, std::move(a), loc)), name,
                       loc);
}

Expr make_select(Expr c, Expr t, Expr f, SourceLoc loc) {
  if (!c || !t || !f)
    fail("T.select", "", loc, "an operand is an undefined (default-constructed) tx::Expr");
  if (!c.dtype().is_bool())
    fail("T.select", operand_text(c), loc, "the condition must be bool, got " + c.dtype().name());
  if (t.dtype() != f.dtype())
    fail("T.select", operand_text(f), loc,
         "the branches have dtypes " + t.dtype().name() + " and " + f.dtype().name() +
             "; cast one of them explicitly");
  DType ty = t.dtype();
  return checked_depth(
      Expr(std::make_shared<const SelectNode>(ty, std::move(c), std::move(t), std::move(f), loc)),
      "T.select", loc);
}

// An mbarrier operand: a load of one element of a shared u64 buffer (the
// code generator takes its address).
static void check_mbarrier_operand(const char* op, const Expr& bar, SourceLoc loc) {
  const auto* ld = bar.as<LoadNode>();
  if (!ld || ld->buffer->scope != MemScope::shared || ld->dtype != u64)
    fail(op, operand_text(bar), loc,
         "the barrier must be an element of a shared u64 buffer (T::alloc_buffer({stages}, u64, "
         "scope::shared)), got " +
             operand_text(bar));
}

Expr make_call(Intrinsic op, std::vector<Expr> args, SourceLoc loc, DType t) {
  const std::string qname = std::string("T.") + intrinsic_name(op);
  const char* name = qname.c_str();
  if (static_cast<int>(args.size()) != intrinsic_arity(op))
    fail(name, "", loc,
         "takes " + std::to_string(intrinsic_arity(op)) + " arguments, got " +
             std::to_string(args.size()));
  for (const Expr& a : args)
    if (!a) fail(name, "", loc, "an operand is an undefined (default-constructed) tx::Expr");
  switch (op) {
    case Intrinsic::thread_idx:
    case Intrinsic::block_idx:
      t = i32;
      break;
    case Intrinsic::shfl_xor:
      if (args[0].dtype().bytes() > 8 || args[0].dtype().is_handle())
        fail(name, operand_text(args[0]), loc, "cannot shuffle a " + args[0].dtype().name());
      t = args[0].dtype();
      break;
    case Intrinsic::reinterpret:
      if (t.is_void() || t.bytes() != args[0].dtype().bytes())
        fail(name, "", loc, "reinterpret needs a target dtype of the same size");
      break;
    case Intrinsic::check_access:
    case Intrinsic::check_barrier:
      for (const Expr& a : args)
        if (!a.dtype().is_integer()) fail(name, operand_text(a), loc, "takes integer operands");
      t = op == Intrinsic::check_access ? boolean : i32;
      break;
    case Intrinsic::check_index:
      for (const Expr& a : args)
        if (!a.dtype().is_integer()) fail(name, operand_text(a), loc, "takes integer operands");
      t = args[0].dtype();
      break;
    case Intrinsic::check_divisor:
      if (!args[0].dtype().is_integer() || !args[1].dtype().is_integer())
        fail(name, operand_text(args[0]), loc, "takes integer operands");
      t = args[0].dtype();
      break;
    case Intrinsic::isnan:
    case Intrinsic::isinf:
    case Intrinsic::isfinite:
      if (!args[0].dtype().is_float())
        fail(name, operand_text(args[0]), loc,
             "takes a float operand, got " + args[0].dtype().name());
      t = boolean;
      break;
    case Intrinsic::cp_async_commit:
    case Intrinsic::tma_store_commit:
      t = void_t;
      break;
    case Intrinsic::tma_store_wait: {
      auto n = as_const_int(args[0]);
      if (!n || *n < 0 || *n > 7)
        fail(name, operand_text(args[0]), loc,
             "takes a constant number of pending groups in [0, 7] (cp.async.bulk.wait_group's "
             "immediate)");
      t = void_t;
      break;
    }
    case Intrinsic::cp_async_wait: {
      auto n = as_const_int(args[0]);
      if (!n || *n < 0 || *n > 7)
        fail(name, operand_text(args[0]), loc,
             "takes a constant number of pending groups in [0, 7] (cp.async.wait_group's "
             "immediate)");
      t = void_t;
      break;
    }
    case Intrinsic::mbarrier_init:
    case Intrinsic::mbarrier_arrive:
    case Intrinsic::mbarrier_expect_tx:
    case Intrinsic::mbarrier_wait:
      check_mbarrier_operand(name, args[0], loc);
      for (std::size_t i = 1; i < args.size(); ++i)
        if (!args[i].dtype().is_integer())
          fail(name, operand_text(args[i]), loc,
               "takes an integer operand, got " + args[i].dtype().name());
      t = void_t;
      break;
    case Intrinsic::atomic_add: {
      const auto* ld = args[0].as<LoadNode>();
      if (!ld || ld->dtype != f32 ||
          (ld->buffer->scope != MemScope::global && ld->buffer->scope != MemScope::shared))
        fail(name, operand_text(args[0]), loc,
             "the destination is one element of a global or shared float32 buffer");
      if (args[1].dtype() != f32)
        fail(name, operand_text(args[1]), loc,
             "adds a float32 value, got " + args[1].dtype().name());
      t = void_t;
      break;
    }
    case Intrinsic::signal:
    case Intrinsic::wait_until: {
      const auto* ld = args[0].as<LoadNode>();
      if (!ld || ld->buffer->scope != MemScope::global || ld->dtype != u32)
        fail(name, operand_text(args[0]), loc,
             "the flag is one element of a global u32 buffer (a symmetric buffer or its peer "
             "view: T::peer)");
      if (!args[1].dtype().is_integer())
        fail(name, operand_text(args[1]), loc,
             "takes an integer value, got " + args[1].dtype().name());
      if (op == Intrinsic::signal) {
        auto add = as_const_int(args[2]);
        if (!add || (*add != 0 && *add != 1))
          fail(name, operand_text(args[2]), loc, "takes 0 (store) or 1 (add)");
      }
      t = void_t;
      break;
    }
    case Intrinsic::register_fence: {
      const auto* ld = args[0].as<LoadNode>();
      if (!ld || ld->buffer->scope != MemScope::local || ld->dtype != f32)
        fail(name, operand_text(args[0]), loc, "fences an f32 register (a local buffer element)");
      t = void_t;
      break;
    }
    case Intrinsic::named_barrier_sync:
    case Intrinsic::named_barrier_arrive: {
      auto id = as_const_int(args[0]);
      auto threads = as_const_int(args[1]);
      if (!args[0].dtype().is_integer() || (id && (*id < 0 || *id > 15)))
        fail(name, operand_text(args[0]), loc, "takes a barrier id in [0, 15]");
      if (!threads || *threads <= 0 || *threads % 32 != 0 || *threads > 1024)
        fail(name, operand_text(args[1]), loc,
             "takes a constant thread count, a positive multiple of 32 up to 1024 (whole "
             "warps arrive)");
      t = void_t;
      break;
    }
    case Intrinsic::profile_mark: {
      auto region = as_const_int(args[0]);
      auto end = as_const_int(args[1]);
      if (!region || *region < 0 || *region > 0xffff)
        fail(name, operand_text(args[0]), loc, "takes a constant region index in [0, 65535]");
      if (!end || (*end != 0 && *end != 1))
        fail(name, operand_text(args[1]), loc, "takes 0 (enter) or 1 (leave)");
      t = void_t;
      break;
    }
    case Intrinsic::keep_before: {
      const auto* ld = args[0].as<LoadNode>();
      if (!ld || ld->buffer->scope != MemScope::shared || ld->dtype != f32)
        fail(name, operand_text(args[0]), loc, "the anchor is an element of a shared f32 buffer");
      if (args[1].dtype() != f32)
        fail(name, operand_text(args[1]), loc,
             "orders an f32 value, got " + args[1].dtype().name());
      t = void_t;
      break;
    }
    case Intrinsic::tile_coord: {
      auto d = as_const_int(args[0]);
      if (!d || *d < 0 || *d > 7)
        fail(name, operand_text(args[0]), loc, "takes a constant dimension in [0, 7]");
      t = i32;
      break;
    }
    case Intrinsic::fence_barrier_init:
    case Intrinsic::fence_proxy_async:
    case Intrinsic::wgmma_fence:
    case Intrinsic::wgmma_commit:
      t = void_t;
      break;
    case Intrinsic::wgmma_wait: {
      auto n = as_const_int(args[0]);
      if (!n || *n < 0 || *n > 7)
        fail(name, operand_text(args[0]), loc,
             "takes a constant number of pending groups in [0, 7] (wgmma.wait_group's "
             "immediate)");
      t = void_t;
      break;
    }
    case Intrinsic::setmaxnreg: {
      auto n = as_const_int(args[0]);
      auto inc = as_const_int(args[1]);
      if (!n || *n < 24 || *n > 256 || *n % 8 != 0)
        fail(name, operand_text(args[0]), loc,
             "takes a constant register count in [24, 256], a multiple of 8");
      if (!inc || (*inc != 0 && *inc != 1))
        fail(name, operand_text(args[1]), loc, "takes a constant 1 (increase) or 0 (decrease)");
      t = void_t;
      break;
    }
    case Intrinsic::fabs:
      if (args[0].dtype().is_bool())
        fail(name, operand_text(args[0]), loc, "takes a numeric operand");
      t = args[0].dtype();
      break;
    default:
      for (const Expr& a : args) {
        if (!a.dtype().is_float())
          fail(name, operand_text(a), loc, "takes float operands, got " + a.dtype().name());
        if (a.dtype() != args[0].dtype())
          fail(name, operand_text(a), loc,
               "dtype " + a.dtype().name() + " differs from the first operand's " +
                   args[0].dtype().name() + "; cast one of them explicitly");
      }
      t = args[0].dtype();
  }
  return checked_depth(Expr(std::make_shared<const CallNode>(op, t, std::move(args), loc)),
                       ("T." + std::string(name)).c_str(), loc);
}

Expr make_load(Buffer b, std::vector<Expr> indices, SourceLoc loc) {
  if (!b) fail("T.load", "", loc, "the buffer is an undefined (default-constructed) tx::Buffer");
  if (indices.size() != b->shape.size())
    fail("T.load", b->name, loc,
         "buffer has " + std::to_string(b->shape.size()) + " dimensions but " +
             std::to_string(indices.size()) + " indices were given");
  for (const Expr& i : indices)
    if (!i || !i.dtype().is_integer())
      fail("T.load", b->name, loc,
           i ? "index " + operand_text(i) + " of dtype " + i.dtype().name() + " is not an integer"
             : std::string("an index is an undefined (default-constructed) tx::Expr"));
  return checked_depth(
      Expr(std::make_shared<const LoadNode>(std::move(b), std::move(indices), loc)), "T.load", loc);
}

std::optional<std::int64_t> as_const_int(const Expr& e) {
  if (auto* n = e.as<IntImmNode>()) return n->value;
  return std::nullopt;
}

bool is_const_int(const Expr& e, std::int64_t v) {
  auto c = as_const_int(e);
  return c && *c == v;
}

// -------------------------------------------------------------- statements

const char* scope_id_name(ScopeIdKind k) {
  switch (k) {
    case ScopeIdKind::cta_id:
      return "cta_id";
    case ScopeIdKind::warpgroup_id:
      return "warpgroup_id";
    case ScopeIdKind::warp_id:
      return "warp_id";
    case ScopeIdKind::lane_id:
      return "lane_id";
    case ScopeIdKind::thread_id:
      return "thread_id";
    case ScopeIdKind::warp_id_in_wg:
      return "warp_id_in_wg";
    case ScopeIdKind::thread_id_in_wg:
      return "thread_id_in_wg";
  }
  return "?";
}

const char* exec_scope_name(ExecScope s) {
  switch (s) {
    case ExecScope::thread:
      return "thread";
    case ExecScope::warp:
      return "warp";
    case ExecScope::warpgroup:
      return "warpgroup";
    case ExecScope::cta:
      return "cta";
  }
  return "?";
}

int exec_scope_threads(ExecScope s, int cta_threads) {
  switch (s) {
    case ExecScope::thread:
      return 1;
    case ExecScope::warp:
      return 32;
    case ExecScope::warpgroup:
      return 128;
    case ExecScope::cta:
      return cta_threads;
  }
  return 1;
}

std::string TileCallNode::qualified_name() const {
  return std::string("Tx.") + exec_scope_name(scope) + "." + op;
}

Stmt make_store(Buffer b, Expr value, std::vector<Expr> indices, SourceLoc loc) {
  if (!b) fail("T.store", "", loc, "the buffer is an undefined (default-constructed) tx::Buffer");
  if (!value)
    fail("T.store", b->name, loc, "the value is an undefined (default-constructed) tx::Expr");
  if (indices.size() != b->shape.size())
    fail("T.store", b->name, loc,
         "buffer has " + std::to_string(b->shape.size()) + " dimensions but " +
             std::to_string(indices.size()) + " indices were given");
  for (const Expr& i : indices)
    if (!i || !i.dtype().is_integer())
      fail("T.store", b->name, loc,
           i ? "index " + operand_text(i) + " of dtype " + i.dtype().name() + " is not an integer"
             : std::string("an index is an undefined (default-constructed) tx::Expr"));
  if (value.dtype() != b->dtype)
    fail("T.store", b->name, loc,
         "value dtype " + value.dtype().name() + " differs from the buffer's " + b->dtype.name() +
             "; cast it: cast(value, " + b->dtype.name() + ")");
  return Stmt(
      std::make_shared<const StoreNode>(std::move(b), std::move(value), std::move(indices), loc));
}

Stmt make_evaluate(Expr v, SourceLoc loc) {
  if (!v) fail("T.evaluate", "", loc, "the value is an undefined (default-constructed) tx::Expr");
  return Stmt(std::make_shared<const EvaluateNode>(std::move(v), loc));
}

Stmt make_for(Var v, Expr min, Expr extent, ForKind k, Stmt body, SourceLoc loc) {
  if (!v) fail("T.serial", "", loc, "the loop variable is an undefined tx::Var");
  if (!min || !extent || !min.dtype().is_integer() || !extent.dtype().is_integer())
    fail("T.serial", v.name(), loc, "loop bounds must be integers");
  if (auto e = as_const_int(extent); e && *e < 0)
    fail("T.serial", v.name(), loc, "negative extent " + std::to_string(*e));
  if (!body) body = make_seq({}, loc);
  return Stmt(std::make_shared<const ForNode>(std::move(v), std::move(min), std::move(extent), k,
                                              std::move(body), loc));
}

Stmt make_if(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc) {
  if (!cond) fail("T.if_", "", loc, "the condition is an undefined (default-constructed) tx::Expr");
  if (!cond.dtype().is_bool())
    fail("T.if_", operand_text(cond), loc,
         "the condition must be a bool expression, got " + cond.dtype().name());
  if (!then_case) then_case = make_seq({}, loc);
  return Stmt(std::make_shared<const IfThenElseNode>(std::move(cond), std::move(then_case),
                                                     std::move(else_case), loc));
}

Stmt make_seq(std::vector<Stmt> seq, SourceLoc loc) {
  std::vector<Stmt> flat;
  for (Stmt& s : seq) {
    if (!s) continue;
    if (auto* n = s.as<SeqNode>())
      flat.insert(flat.end(), n->seq.begin(), n->seq.end());
    else
      flat.push_back(std::move(s));
  }
  if (flat.size() == 1) return flat[0];
  return Stmt(std::make_shared<const SeqNode>(std::move(flat), loc));
}

Stmt make_let(Var v, Expr value, Stmt body, SourceLoc loc) {
  if (!v) fail("T.let", "", loc, "the variable is an undefined tx::Var");
  if (!value)
    fail("T.let", v.name(), loc, "the value is an undefined (default-constructed) tx::Expr");
  if (value.dtype() != v.dtype())
    fail("T.let", v.name(), loc,
         "value dtype " + value.dtype().name() + " differs from var dtype " + v.dtype().name());
  if (!body) body = make_seq({}, loc);
  return Stmt(
      std::make_shared<const LetStmtNode>(std::move(v), std::move(value), std::move(body), loc));
}

Stmt make_allocate(Buffer b, Stmt body, SourceLoc loc) {
  if (!b) fail("T.alloc_buffer", "", loc, "the buffer is an undefined tx::Buffer");
  if (b->scope == MemScope::global)
    fail("T.alloc_buffer", b->name, loc,
         "global buffers come from kernel arguments (T.match_buffer), not alloc_buffer");
  if (!body) body = make_seq({}, loc);
  return Stmt(std::make_shared<const AllocateNode>(std::move(b), std::move(body), loc));
}

bool ScopeIdBindNode::symbolic() const {
  for (const Expr& e : extent_exprs)
    if (!e.as<IntImmNode>()) return true;
  return false;
}

Stmt make_scope_id_bind(ScopeIdKind k, std::vector<Var> vars, std::vector<Expr> extents, Stmt body,
                        SourceLoc loc) {
  std::string op = std::string("T.") + scope_id_name(k);
  std::vector<std::int64_t> statics;
  bool symbolic = false;
  for (const Expr& e : extents) {
    if (!e.defined()) fail(op, "", loc, "an extent is an undefined tx::Expr");
    if (!e.dtype().is_integer())
      fail(op, "", loc, "extent " + operand_text(e) + " is not an integer");
    auto c = as_const_int(e);
    statics.push_back(c ? *c : 0);
    symbolic = symbolic || !c;
  }
  if (symbolic && k != ScopeIdKind::cta_id)
    fail(op, "", loc,
         "thread extents must be constants (the CTA size is fixed when compiling); only "
         "T.cta_id takes extents known at launch");
  if (!symbolic) return make_scope_id_bind(k, std::move(vars), std::move(statics), body, loc);
  if (vars.size() != extents.size() || extents.empty())
    fail(op, "", loc, "one variable per extent is needed");
  if (extents.size() > 3) fail(op, "", loc, "at most 3 dimensions");
  if (!body) body = make_seq({}, loc);
  return Stmt(std::make_shared<const ScopeIdBindNode>(k, std::move(vars), std::move(statics),
                                                      std::move(body), loc, std::move(extents)));
}

Stmt make_scope_id_bind(ScopeIdKind k, std::vector<Var> vars, std::vector<std::int64_t> extents,
                        Stmt body, SourceLoc loc) {
  std::string op = std::string("T.") + scope_id_name(k);
  if (vars.size() != extents.size() || extents.empty())
    fail(op, "", loc, "one variable per extent is needed");
  if (k != ScopeIdKind::cta_id && extents.size() != 1)
    fail(op, "", loc, "tx thread blocks are one-dimensional; give a single extent");
  if (extents.size() > 3) fail(op, "", loc, "at most 3 dimensions");
  for (auto e : extents)
    if (e <= 0) fail(op, "", loc, "extent " + std::to_string(e) + " is not positive");
  // CUDA's grid limits (the launch would fail with a driver error otherwise),
  // the same on the host so that a kernel fails alike on both.
  if (k == ScopeIdKind::cta_id)
    for (std::size_t g = 0; g < extents.size(); ++g) {
      const std::int64_t hw = g == 0 ? 2147483647 : 65535;
      if (extents[g] > hw)
        fail(op, vars[g].name(), loc,
             "grid dimension " + std::to_string(g) + " = " + std::to_string(extents[g]) +
                 " is more CTAs than a grid holds (at most " + std::to_string(hw) + ")");
    }
  if (!body) body = make_seq({}, loc);
  std::vector<Expr> ee = static_dims(extents);
  return Stmt(std::make_shared<const ScopeIdBindNode>(k, std::move(vars), std::move(extents),
                                                      std::move(body), loc, std::move(ee)));
}

namespace {

const TileOpDef* def_of(const std::string& qn, const std::string& op, SourceLoc loc) {
  const TileOpDef* def = find_tile_op(op);
  if (!def)
    fail(qn, "", loc,
         "unknown tile primitive '" + op + "' (the tile ops are TX_TILE_OP_TABLE's rows)");
  return def;
}

// What the table says of a call: its scope, its operands' count and roles
// (a tile scale / bias, already moved into args, aside), and the attributes
// a builder call can be checked for (the variants check the rest, knowing
// the operands' memories and layouts).
void check_tile_call(const TileOpDef& def, const std::string& qn, ExecScope scope,
                     const std::vector<TileArg>& args, const TileAttrs& attrs, SourceLoc loc) {
  if (!def.runs_at(scope))
    fail(qn, "", loc, def.name + " does not run at " + exec_scope_name(scope) + " scope");
  const std::vector<OperandDef>& ops = def.operands();
  const std::size_t attr_args = (attrs.scale_arg >= 0) + (attrs.bias_arg >= 0);
  if (args.size() != ops.size() + attr_args) {
    std::string names;
    for (const OperandDef& o : ops) names += (names.empty() ? "" : ", ") + std::string(o.name);
    fail(qn, "", loc,
         def.name + " takes " + std::to_string(ops.size()) + " operands (" + names + "), got " +
             std::to_string(args.size() - attr_args));
  }
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const bool region = std::holds_alternative<BufferRegion>(args[i]);
    if (ops[i].role == OperandRole::tile && !region)
      fail(qn, "", loc,
           std::string("operand ") + ops[i].name + " must be a tile (a buffer region)");
    if (ops[i].role == OperandRole::scalar && region)
      fail(qn, "", loc, std::string("operand ") + ops[i].name + " must be a scalar");
  }
  if (attrs.partial && !def.accepts(TileAttr::partial))
    fail(qn, "", loc,
         "partial= (tiles reaching past a tensor's end) applies to " +
             ops_accepting(TileAttr::partial));
  if (attrs.transpose_b && !def.accepts(TileAttr::transpose_b))
    fail(qn, "", loc,
         "transpose_b= (B given as (N, K)) applies to " + ops_accepting(TileAttr::transpose_b));
  if (attrs.where) {
    if (!def.accepts(TileAttr::where))
      fail(qn, "", loc,
           "where= (write only where a condition on the coordinates holds) applies to " +
               ops_accepting(TileAttr::where));
    if (!attrs.where.cond.dtype().is_bool())
      fail(qn, "", loc,
           "where= must be a condition (a comparison), got a " + attrs.where.cond.dtype().name() +
               " expression: " + operand_text(attrs.where.cond));
    const auto* dst = args.empty() ? nullptr : std::get_if<BufferRegion>(&args[0]);
    if (dst && dst->buffer && static_cast<std::size_t>(attrs.where.rank) != dst->ranges.size())
      fail(qn, dst->buffer->name, loc,
           "the where= lambda takes " + std::to_string(attrs.where.rank) +
               " coordinates, but the destination region has " +
               std::to_string(dst->ranges.size()) + " dimensions (one coordinate per dimension)");
  }
}

}  // namespace

Stmt make_tile_call(std::string op, ExecScope scope, std::vector<TileArg> args, TileAttrs attrs,
                    SourceLoc loc) {
  std::string qn = std::string("Tx.") + exec_scope_name(scope) + "." + op;
  // A tile scale / bias becomes an operand (validated, visited and bounds
  // checked like the others); attrs keep its index.
  for (auto [sb, at] :
       {std::pair{&attrs.scale, &attrs.scale_arg}, {&attrs.bias, &attrs.bias_arg}}) {
    if (!sb->tile) continue;
    if (sb->value.defined())
      fail(qn, sb->tile->buffer ? sb->tile->buffer->name : "", loc,
           "scale/bias is both a scalar and a tile");
    *at = static_cast<int>(args.size());
    args.emplace_back(std::move(*sb->tile));
    sb->tile.reset();
  }
  check_tile_call(*def_of(qn, op, loc), qn, scope, args, attrs, loc);
  for (const TileArg& a : args) {
    if (auto* r = std::get_if<BufferRegion>(&a)) {
      if (!r->buffer) fail(qn, "", loc, "undefined buffer operand");
      // A partial tile of a global tensor may reach past its end, not before its start.
      const bool may_reach_past = attrs.partial && r->buffer->scope == MemScope::global;
      if (r->ranges.size() != r->buffer->shape.size())
        fail(qn, r->buffer->name, loc,
             "region has " + std::to_string(r->ranges.size()) + " dimensions but the buffer has " +
                 std::to_string(r->buffer->shape.size()));
      for (std::size_t d = 0; d < r->ranges.size(); ++d) {
        const Range& rg = r->ranges[d];
        if (rg.extent <= 0)
          fail(qn, r->buffer->name, loc,
               "region extent " + std::to_string(rg.extent) + " in dimension " + std::to_string(d) +
                   " is not positive");
        if (!rg.start || !rg.start.dtype().is_integer())
          fail(qn, r->buffer->name, loc, "region start must be an integer");
        if (auto s = as_const_int(rg.start)) {
          if (*s < 0 || (*s + rg.extent > r->buffer->shape[d] && !may_reach_past))
            fail(qn, r->buffer->name, loc,
                 "region [" + std::to_string(*s) + ":" + std::to_string(*s + rg.extent) +
                     "] in dimension " + std::to_string(d) + " is out of bounds of extent " +
                     std::to_string(r->buffer->shape[d]));
        }
      }
    } else if (!std::get<Expr>(a)) {
      fail(qn, "", loc, "undefined scalar operand");
    }
  }
  // A reduction's axes name dimensions of its source (args[1]). Checked
  // here, not only when a variant is chosen: a call in a branch the
  // lowering proves dead (if (warp < 0) ...) is never dispatched, and a
  // wrong program must not pass because of where it sits (found by
  // fuzz/tile_fuzzer).
  if (!attrs.axes.empty() && args.size() >= 2)
    if (auto* src = std::get_if<BufferRegion>(&args[1])) {
      const int rank = static_cast<int>(src->ranges.size());
      for (int a : attrs.axes)
        if (a < -rank || a >= rank)
          fail(qn, src->buffer->name, loc,
               "axis " + std::to_string(a) + " is out of range for a rank-" + std::to_string(rank) +
                   " source");
    }
  return Stmt(std::make_shared<const TileCallNode>(std::move(op), scope, std::move(args),
                                                   std::move(attrs), loc));
}

Expr tile_coord(int dim) { return make_call(Intrinsic::tile_coord, {make_int(dim)}); }

Stmt make_barrier(ExecScope s, SourceLoc loc) {
  if (s == ExecScope::thread) fail("T.cuda.sync", "", loc, "a thread has nothing to synchronize");
  return Stmt(std::make_shared<const BarrierNode>(s, loc));
}

Stmt make_copy_bytes(Buffer dst, Expr dst_off, Buffer src, Expr src_off, int bytes, SourceLoc loc) {
  const char* op = "T.cuda.copy_bytes";
  if (!dst || !src || !dst_off || !src_off) fail(op, "", loc, "an operand is undefined");
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8 && bytes != 16)
    fail(op, "", loc, "unsupported transfer width " + std::to_string(bytes));
  if (dst->dtype.bytes() != src->dtype.bytes())
    fail(op, dst->name, loc, "element sizes differ between source and destination");
  if (bytes % dst->dtype.bytes() != 0)
    fail(op, dst->name, loc, "width is not a multiple of the element size");
  return Stmt(std::make_shared<const CopyBytesNode>(
      std::move(dst), std::move(dst_off), std::move(src), std::move(src_off), bytes, loc));
}

Stmt make_matrix_move(bool store, bool trans, Buffer smem, Expr row, Buffer regs,
                      std::vector<std::int64_t> words, SourceLoc loc) {
  const char* op = store ? "T.ptx.stmatrix" : "T.ptx.ldmatrix";
  if (!smem || !regs || !row) fail(op, "", loc, "an operand is undefined");
  if (smem->scope != MemScope::shared)
    fail(op, smem->name, loc, "the matrix side must be shared memory");
  if (regs->scope != MemScope::local) fail(op, regs->name, loc, "the register side must be local");
  if (smem->dtype.bytes() != 2 || regs->dtype.bytes() != 2)
    fail(op, regs->name, loc, "moves 16-bit elements");
  if (words.size() != 1 && words.size() != 2 && words.size() != 4)
    fail(op, regs->name, loc, "moves 1, 2 or 4 matrices, not " + std::to_string(words.size()));
  for (std::int64_t w : words)
    if (w < 0 || w % 2 != 0 || w + 2 > regs->storage_elems())
      fail(op, regs->name, loc,
           "register word at element " + std::to_string(w) + " is not an aligned pair inside " +
               regs->name);
  return Stmt(std::make_shared<const MatrixMoveNode>(store, trans, std::move(smem), std::move(row),
                                                     std::move(regs), std::move(words), loc));
}

Stmt make_mma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, Buffer a,
              std::vector<std::int64_t> a_words, Buffer b, std::vector<std::int64_t> b_words,
              SourceLoc loc) {
  const char* op = "T.ptx.mma";
  if (!d || !a || !b) fail(op, "", loc, "an operand is undefined");
  int per_word = 0;
  if (shape == "m16n8k16")
    per_word = 2;
  else if (shape == "m16n8k32")
    per_word = 4;
  else
    fail(op, "", loc, "unknown shape " + shape + " (have m16n8k16, m16n8k32)");
  if (d->dtype != f32) fail(op, d->name, loc, "the accumulator must be f32");
  for (const Buffer* x : {&d, &a, &b})
    if ((*x)->scope != MemScope::local) fail(op, (*x)->name, loc, "operands live in registers");
  for (const Buffer* x : {&a, &b}) {
    DType t = (*x)->dtype;
    bool ok = per_word == 2 ? (t == f16 || t == bf16) : (t == f8e4m3 || t == f8e5m2);
    if (!ok) fail(op, (*x)->name, loc, shape + " does not take " + t.name());
  }
  if (per_word == 2 && a->dtype != b->dtype)
    fail(op, b->name, loc,
         "A and B differ in dtype (" + a->dtype.name() + ", " + b->dtype.name() + ")");
  auto check = [&](const Buffer& buf, const std::vector<std::int64_t>& regs, std::size_t count,
                   int align) {
    if (regs.size() != count)
      fail(op, buf->name, loc, "takes " + std::to_string(count) + " registers of " + buf->name);
    for (std::int64_t r : regs)
      if (r < 0 || r % align != 0 || r + align > buf->storage_elems())
        fail(op, buf->name, loc,
             "register at element " + std::to_string(r) + " of " + buf->name +
                 " is not aligned or not inside it");
  };
  check(d, d_regs, 4, 1);
  check(a, a_words, 4, per_word);
  check(b, b_words, 2, per_word);
  return Stmt(std::make_shared<const MmaNode>(std::move(shape), std::move(d), std::move(d_regs),
                                              std::move(a), std::move(a_words), std::move(b),
                                              std::move(b_words), loc));
}

Stmt make_cp_async(Buffer dst, Expr dst_off, Buffer src, Expr src_off, int bytes, Expr src_bytes,
                   SourceLoc loc) {
  const char* op = "T.ptx.cp_async";
  if (!dst || !src || !dst_off || !src_off) fail(op, "", loc, "an operand is undefined");
  if (dst->scope != MemScope::shared) fail(op, dst->name, loc, "copies into shared memory only");
  if (src->scope != MemScope::global) fail(op, src->name, loc, "copies from global memory only");
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail(op, dst->name, loc, "moves 4, 8 or 16 bytes, not " + std::to_string(bytes));
  if (dst->dtype.bytes() != src->dtype.bytes())
    fail(op, dst->name, loc, "element sizes differ between source and destination");
  if (src_bytes && !src_bytes.dtype().is_integer())
    fail(op, src->name, loc, "src_bytes must be an integer");
  return Stmt(std::make_shared<const CpAsyncNode>(std::move(dst), std::move(dst_off),
                                                  std::move(src), std::move(src_off), bytes,
                                                  std::move(src_bytes), loc));
}

namespace {
// What a TMA box must be, loads and stores alike.
void check_tma_box(const char* op, const TensorMapDesc& map, const Buffer& smem,
                   const Expr& smem_offset, const std::vector<Expr>& coords, SourceLoc loc) {
  if (!map.global || !smem || !smem_offset) fail(op, "", loc, "an operand is undefined");
  if (map.global->scope != MemScope::global)
    fail(op, map.global->name, loc, "the tensor map describes a global buffer");
  if (smem->scope != MemScope::shared)
    fail(op, smem->name, loc, "the box's other side is shared memory");
  if (smem->dtype.bytes() != map.global->dtype.bytes())
    fail(op, smem->name, loc, "element sizes differ between source and destination");
  if (map.box.empty() || map.box.size() > 5 || coords.size() != map.box.size())
    fail(op, map.global->name, loc,
         "a box of 1 to 5 dimensions with one coordinate each (got " +
             std::to_string(map.box.size()) + " and " + std::to_string(coords.size()) + ")");
  for (std::int64_t b : map.box)
    if (b < 1 || b > 256) fail(op, map.global->name, loc, "box extents are in [1, 256]");
  if (map.swizzle_bytes != 0 && map.swizzle_bytes != 32 && map.swizzle_bytes != 64 &&
      map.swizzle_bytes != 128)
    fail(op, map.global->name, loc, "swizzle of 0, 32, 64 or 128 bytes");
  for (const Expr& c : coords)
    if (!c || !c.dtype().is_integer()) fail(op, map.global->name, loc, "integer coordinates");
}
}  // namespace

Stmt make_tma_copy(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                   Expr barrier, SourceLoc loc) {
  const char* op = "T.ptx.cp_async_bulk_tensor";
  check_tma_box(op, map, smem, smem_offset, coords, loc);
  if (!barrier) fail(op, "", loc, "a TMA load completes on an mbarrier: the barrier is undefined");
  check_mbarrier_operand(op, barrier, loc);
  return Stmt(std::make_shared<const TmaCopyNode>(std::move(map), std::move(smem),
                                                  std::move(smem_offset), std::move(coords),
                                                  std::move(barrier), /*store=*/false, loc));
}

Stmt make_tma_store(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                    SourceLoc loc) {
  check_tma_box("T.ptx.tma_store", map, smem, smem_offset, coords, loc);
  return Stmt(std::make_shared<const TmaCopyNode>(std::move(map), std::move(smem),
                                                  std::move(smem_offset), std::move(coords), Expr(),
                                                  /*store=*/true, loc));
}

Stmt make_tma_reduce_add(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                         SourceLoc loc) {
  const char* op = "T.ptx.tma_reduce_add";
  check_tma_box(op, map, smem, smem_offset, coords, loc);
  if (map.global->dtype != f32)
    fail(op, map.global->name, loc,
         "dtype " + map.global->dtype.name() + ": the TMA adds into float32 here");
  return Stmt(std::make_shared<const TmaCopyNode>(std::move(map), std::move(smem),
                                                  std::move(smem_offset), std::move(coords), Expr(),
                                                  /*store=*/true, loc, /*add=*/true));
}

namespace {
// What both forms of wgmma check: D, the shared operands, the shape, scale_d.
void check_wgmma(const char* op, const std::string& shape, const Buffer& d,
                 const std::vector<std::int64_t>& d_regs,
                 std::initializer_list<const WgmmaOperand*> shared, const Expr& scale_d,
                 SourceLoc loc) {
  if (d->scope != MemScope::local || d->dtype != f32)
    fail(op, d->name, loc, "the accumulator is f32 registers");
  for (const WgmmaOperand* x : shared) {
    if (x->smem->scope != MemScope::shared) fail(op, x->smem->name, loc, "A and B are shared");
    if (x->swizzle_bytes != 32 && x->swizzle_bytes != 64 && x->swizzle_bytes != 128)
      fail(op, x->smem->name, loc, "swizzle of 32, 64 or 128 bytes");
    if (x->lbo < 0 || x->sbo < 0 || x->lbo % 16 || x->sbo % 16 || x->lbo >= (1 << 18) ||
        x->sbo >= (1 << 18))
      fail(op, x->smem->name, loc, "byte offsets are multiples of 16 below 2^18");
  }
  std::int64_t n = 0;
  if (std::sscanf(shape.c_str(), "m64n%lldk", reinterpret_cast<long long*>(&n)) != 1 || n < 8 ||
      n > 256 || n % 8 != 0)
    fail(op, shape, loc, "shape m64nNk16 / k32 with N a multiple of 8 up to 256");
  if (static_cast<std::int64_t>(d_regs.size()) != n / 2)
    fail(op, d->name, loc, "takes N / 2 = " + std::to_string(n / 2) + " accumulator registers");
  for (std::int64_t r : d_regs)
    if (r < 0 || r >= d->storage_elems())
      fail(op, d->name, loc, "register " + std::to_string(r) + " outside " + d->name);
  if (!scale_d.dtype().is_integer()) fail(op, "scale_d", loc, "scale_d is an integer");
}
}  // namespace

Stmt make_wgmma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, WgmmaOperand a,
                WgmmaOperand b, Expr scale_d, SourceLoc loc) {
  const char* op = "T.ptx.wgmma";
  if (!d || !a.smem || !b.smem || !a.offset || !b.offset || !scale_d)
    fail(op, "", loc, "an operand is undefined");
  check_wgmma(op, shape, d, d_regs, {&a, &b}, scale_d, loc);
  return Stmt(std::make_shared<const WgmmaNode>(std::move(shape), std::move(d), std::move(d_regs),
                                                std::move(a), std::move(b), std::move(scale_d),
                                                Buffer(), std::vector<std::int64_t>{}, loc));
}

Stmt make_wgmma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, Buffer a_regs,
                std::vector<std::int64_t> a_words, WgmmaOperand b, Expr scale_d, SourceLoc loc) {
  const char* op = "T.ptx.wgmma";
  if (!d || !a_regs || !b.smem || !b.offset || !scale_d)
    fail(op, "", loc, "an operand is undefined");
  check_wgmma(op, shape, d, d_regs, {&b}, scale_d, loc);
  const int bytes = a_regs->dtype.bytes();
  if (a_regs->scope != MemScope::local || (bytes != 1 && bytes != 2))
    fail(op, a_regs->name, loc, "A from registers is a local tile of 16-bit or 8-bit elements");
  if (a_words.size() != 4) fail(op, a_regs->name, loc, "A takes four 32-bit words per thread");
  const std::int64_t per_word = 4 / bytes;
  for (std::int64_t w : a_words)
    if (w < 0 || w % per_word != 0 || w + per_word > a_regs->storage_elems())
      fail(op, a_regs->name, loc,
           "word at element " + std::to_string(w) + " is not a whole aligned word of " +
               a_regs->name);
  return Stmt(std::make_shared<const WgmmaNode>(std::move(shape), std::move(d), std::move(d_regs),
                                                WgmmaOperand{}, std::move(b), std::move(scale_d),
                                                std::move(a_regs), std::move(a_words), loc));
}

Stmt make_profile(std::string name, Stmt body, SourceLoc loc) {
  if (name.empty() || name.size() > 64)
    fail("T.profile", name, loc, "a region's name has 1 to 64 characters");
  for (char c : name)
    if (c < 32 || c > 126 || c == '"' || c == '\\')
      fail("T.profile", name, loc,
           "a region's name is printable characters without quotes or backslashes (it names a "
           "slice of the trace)");
  if (!body) fail("T.profile", name, loc, "the region's body is empty");
  return Stmt(std::make_shared<const ProfileNode>(std::move(name), std::move(body), loc));
}

Stmt make_peer_view(Buffer view, Buffer of, Expr rank, Stmt body, SourceLoc loc) {
  const std::string op = "T.peer";
  if (!view || !of) fail(op, "", loc, "needs the symmetric buffer and its view");
  if (of->scope != MemScope::global || view->scope != MemScope::global)
    fail(op, of->name, loc, "views a global (symmetric) buffer");
  if (view->dtype != of->dtype || view->shape != of->shape)
    fail(op, of->name, loc, "the view has the symmetric buffer's dtype and shape");
  if (!rank.defined() || !rank.dtype().is_integer())
    fail(op, of->name, loc, "the rank is an integer expression");
  if (!body) fail(op, of->name, loc, "the view's body is empty");
  return Stmt(std::make_shared<const PeerViewNode>(std::move(view), std::move(of), std::move(rank),
                                                   std::move(body), loc));
}

Stmt make_origin(std::string text, Stmt body, SourceLoc loc) {
  return Stmt(std::make_shared<const OriginNode>(std::move(text), std::move(body), loc));
}

PrimFunc PrimFunc::with_body(Stmt body, bool lowered) const {
  return PrimFunc(std::make_shared<const PrimFuncNode>(node_->name, node_->params, std::move(body),
                                                       node_->loc, lowered, node_->dims,
                                                       node_->no_alias));
}

}  // namespace tx
