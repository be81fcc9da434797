// The tx IR: immutable expression and statement nodes.
//
// Nodes are created only through the validating make_* factories below and
// held by shared_ptr<const ...>; nothing mutates a node after construction.
// Passes rebuild what they change (IRMutator). Every node records the user's
// source location. The node kinds are listed once in TX_EXPR_NODES /
// TX_STMT_NODES; the visitor, mutator, printer and structural hash all
// follow that list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/layout.hpp"

namespace tx {

#define TX_EXPR_NODES(X) \
  X(IntImm)              \
  X(FloatImm)            \
  X(Var)                 \
  X(Cast)                \
  X(Binary)              \
  X(Unary)               \
  X(Select)              \
  X(Call)                \
  X(Load)

#define TX_STMT_NODES(X) \
  X(Store)               \
  X(Evaluate)            \
  X(For)                 \
  X(IfThenElse)          \
  X(Seq)                 \
  X(LetStmt)             \
  X(Allocate)            \
  X(ScopeIdBind)         \
  X(TileCall)            \
  X(Barrier)             \
  X(CopyBytes)           \
  X(MatrixMove)          \
  X(Mma)                 \
  X(CpAsync)             \
  X(TmaCopy)             \
  X(Wgmma)               \
  X(Origin)              \
  X(Profile)             \
  X(PeerView)

enum class ExprKind : std::uint8_t {
#define TX_ENUM(N) N,
  TX_EXPR_NODES(TX_ENUM)
};
enum class StmtKind : std::uint8_t {
  TX_STMT_NODES(TX_ENUM)
#undef TX_ENUM
};

// ---------------------------------------------------------------- base nodes

struct ExprNode {
  ExprKind kind;
  DType dtype;
  SourceLoc loc;
  // Nesting depth (a leaf is 1). Every traversal of the IR recurses, so the
  // factories refuse expressions deeper than kMaxExprDepth, and the builder
  // splits deeper ones into T::let parts as they are built (builder.cpp).
  std::uint32_t depth = 1;
  // Nodes in the expression's tree, a shared subexpression counted once per
  // use (what a traversal visits), saturating. y = y * y repeated doubles it
  // without deepening much: the factories refuse more than kMaxExprSize, and
  // the builder binds parts of large expressions to T::let as well.
  std::uint32_t size = 1;
  ExprNode(ExprKind k, DType t, SourceLoc l, std::uint32_t d = 1, std::uint32_t n = 1)
      : kind(k), dtype(t), loc(l), depth(d), size(n) {}
  virtual ~ExprNode();
};
inline constexpr std::uint32_t kMaxExprDepth = 2048;
inline constexpr std::uint32_t kMaxExprSize = 1u << 22;

struct StmtNode {
  StmtKind kind;
  SourceLoc loc;
  StmtNode(StmtKind k, SourceLoc l) : kind(k), loc(l) {}
  virtual ~StmtNode();
};

class VarNode;
class BufferNode;

namespace detail {
// Raised by the accessors of a default-constructed (undefined) handle, so a
// misused builder object is a tx error, never a null dereference.
[[noreturn]] void fail_undefined(const char* what);
}  // namespace detail

// A handle to an immutable expression node (may be empty).
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}
  // Literal conversions (an int literal is i32, a double literal f32, a
  // bool literal bool: `Expr(false)` is a condition, not the integer 0).
  Expr(bool v);    // NOLINT: implicit so literals mix with expressions
  Expr(int v);     // NOLINT
  Expr(double v);  // NOLINT
  Expr(float v);   // NOLINT

  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  explicit operator bool() const { return node_ != nullptr; }
  bool defined() const { return node_ != nullptr; }
  DType dtype() const {
    if (!node_) [[unlikely]]
      detail::fail_undefined("tx::Expr");
    return node_->dtype;
  }
  ExprKind kind() const {
    if (!node_) [[unlikely]]
      detail::fail_undefined("tx::Expr");
    return node_->kind;
  }
  std::uint32_t depth() const { return node_ ? node_->depth : 0; }
  std::uint32_t tree_size() const { return node_ ? node_->size : 0; }
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  const std::shared_ptr<const ExprNode>& node() const { return node_; }
  bool same_as(const Expr& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(std::shared_ptr<const StmtNode> n) : node_(std::move(n)) {}
  const StmtNode* get() const { return node_.get(); }
  const StmtNode* operator->() const { return node_.get(); }
  explicit operator bool() const { return node_ != nullptr; }
  bool defined() const { return node_ != nullptr; }
  StmtKind kind() const {
    if (!node_) [[unlikely]]
      detail::fail_undefined("tx::Stmt");
    return node_->kind;
  }
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  bool same_as(const Stmt& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const StmtNode> node_;
};

// ------------------------------------------------------------------- vars

class VarNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Var;
  const std::string name;
  const std::uint64_t id;  // unique per process; printing disambiguates equal names
  VarNode(std::string n, DType t, SourceLoc l);
};

class Var : public Expr {
 public:
  Var() = default;
  explicit Var(std::shared_ptr<const VarNode> n) : Expr(n) {}
  Var(std::string name, DType t = i32, SourceLoc loc = std::source_location::current());
  const VarNode* get() const { return static_cast<const VarNode*>(Expr::get()); }
  const VarNode* operator->() const { return checked(); }
  const std::string& name() const { return checked()->name; }
  // No operator== on Var: `owner == rank` in a kernel builds the DSL
  // comparison (an Expr), never a C++ bool of the two variables' identity
  // (which silently turned T::if_(owner == rank, ...) into if False).
  // Identity: same_as, or VarEqual in containers.

 private:
  const VarNode* checked() const {
    if (!get()) [[unlikely]]
      detail::fail_undefined("tx::Var");
    return get();
  }
};

struct VarHash {
  std::size_t operator()(const Var& v) const { return std::hash<const void*>()(v.get()); }
};
struct VarEqual {
  bool operator()(const Var& a, const Var& b) const { return a.same_as(b); }
};

// ------------------------------------------------------------------ buffers

enum class MemScope : std::uint8_t { global, shared, local };
const char* mem_scope_name(MemScope s);
namespace scope {
inline constexpr MemScope global = MemScope::global;
inline constexpr MemScope shared = MemScope::shared;
inline constexpr MemScope local = MemScope::local;
}  // namespace scope

class BufferNode {
 public:
  const std::string name;
  const DType dtype;
  // Static extents; for a dimension of symbolic extent, its upper bound (the
  // T::dim's max), which is what layouts and storage sizes are computed with.
  const std::vector<std::int64_t> shape;
  const MemScope scope;
  const TileLayout layout;  // always set; defaults to row-major on memory
  const Var data;           // identity of the storage; views share it
  const SourceLoc loc;
  // The extents as expressions: an IntImm per static dimension, the T::dim
  // variable of a symbolic one (global buffers only, row-major).
  const std::vector<Expr> dims;
  BufferNode(std::string n, DType t, std::vector<std::int64_t> s, MemScope sc, TileLayout l, Var d,
             SourceLoc lc, std::vector<Expr> dims = {});

  // Some extent is known only at launch.
  bool symbolic() const;

  std::int64_t numel() const;
  // Elements one thread stores: the layout's storage cosize for local
  // buffers, the layout's cosize otherwise.
  std::int64_t storage_elems() const;
  // Where element 0 sits in that storage: the layout's memory-axis offset,
  // except for local buffers, whose per-thread storage drops offsets.
  std::int64_t memory_offset() const;
};

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::shared_ptr<const BufferNode> n) : node_(std::move(n)) {}
  const BufferNode* get() const { return node_.get(); }
  const BufferNode* operator->() const {
    if (!node_) [[unlikely]]
      detail::fail_undefined("tx::Buffer");
    return node_.get();
  }
  explicit operator bool() const { return node_ != nullptr; }
  bool defined() const { return node_ != nullptr; }
  bool same_as(const Buffer& o) const { return node_ == o.node_; }
  bool operator==(const Buffer& o) const { return node_ == o.node_; }
  // Same storage (this buffer or a view of it).
  bool aliases(const Buffer& o) const { return (*this)->data.same_as(o->data); }
  const std::shared_ptr<const BufferNode>& node() const { return node_; }

 private:
  std::shared_ptr<const BufferNode> node_;
};

// Validates: positive shape, layout describes the shape, thread axes only on local buffers.
Buffer make_buffer(std::string name, DType dtype, std::vector<std::int64_t> shape, MemScope scope,
                   std::optional<TileLayout> layout, SourceLoc loc);
// A global buffer some of whose extents are T::dim variables (the others
// IntImms); `bounds` are their static upper bounds. Row-major only.
Buffer make_symbolic_buffer(std::string name, DType dtype, std::vector<Expr> dims,
                            std::vector<std::int64_t> bounds, SourceLoc loc);
// A flat 1-D view of a buffer's storage (per-thread storage for local buffers).
Buffer flat_view(const Buffer& b);

// One dimension of a region: [start, start + extent), extent static.
struct Range {
  Expr start;
  std::int64_t extent = 1;
};

struct BufferRegion {
  Buffer buffer;
  std::vector<Range> ranges;
  std::vector<std::int64_t> extents() const;
  std::int64_t numel() const;
};

// ------------------------------------------------------------ expressions

inline std::uint32_t max_depth(const std::vector<Expr>& es) {
  std::uint32_t d = 0;
  for (const Expr& e : es) d = std::max(d, e.depth());
  return d;
}
// 1 + the operands' tree sizes, saturating at 2^32 - 1.
inline std::uint32_t node_size(std::initializer_list<std::uint32_t> sizes) {
  std::uint64_t n = 1;
  for (std::uint32_t s : sizes) n += s;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, 0xFFFFFFFFu));
}
inline std::uint32_t node_size(const std::vector<Expr>& es) {
  std::uint64_t n = 1;
  for (const Expr& e : es) n += e.tree_size();
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, 0xFFFFFFFFu));
}

class IntImmNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::IntImm;
  const std::int64_t value;
  IntImmNode(DType t, std::int64_t v, SourceLoc l) : ExprNode(kKind, t, l), value(v) {}
};

class FloatImmNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  const double value;
  FloatImmNode(DType t, double v, SourceLoc l) : ExprNode(kKind, t, l), value(v) {}
};

class CastNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Cast;
  const Expr value;
  CastNode(DType t, Expr v, SourceLoc l)
      : ExprNode(kKind, t, l, 1 + v.depth(), node_size({v.tree_size()})), value(std::move(v)) {}
};

enum class BinOp : std::uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Mod,
  FloorDiv,
  FloorMod,
  Min,
  Max,
  EQ,
  NE,
  LT,
  LE,
  GT,
  GE,
  And,
  Or,
  BitAnd,
  BitOr,
  BitXor,
  Shl,
  Shr,
};
const char* binop_symbol(BinOp op);  // "+", "//", "min", ...
const char* binop_name(BinOp op);    // "add", "floordiv", ...
bool binop_is_comparison(BinOp op);
bool binop_is_logical(BinOp op);

class BinaryNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Binary;
  const BinOp op;
  const Expr a, b;
  BinaryNode(BinOp o, DType t, Expr x, Expr y, SourceLoc l)
      : ExprNode(kKind, t, l, 1 + std::max(x.depth(), y.depth()),
                 node_size({x.tree_size(), y.tree_size()})),
        op(o),
        a(std::move(x)),
        b(std::move(y)) {}
};

enum class UnOp : std::uint8_t { Neg, Not, BitNot };
class UnaryNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Unary;
  const UnOp op;
  const Expr a;
  UnaryNode(UnOp o, DType t, Expr x, SourceLoc l)
      : ExprNode(kKind, t, l, 1 + x.depth(), node_size({x.tree_size()})), op(o), a(std::move(x)) {}
};

class SelectNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Select;
  const Expr cond, t, f;
  SelectNode(DType ty, Expr c, Expr x, Expr y, SourceLoc l)
      : ExprNode(kKind, ty, l, 1 + std::max({c.depth(), x.depth(), y.depth()}),
                 node_size({c.tree_size(), x.tree_size(), y.tree_size()})),
        cond(std::move(c)),
        t(std::move(x)),
        f(std::move(y)) {}
};

#define TX_INTRINSICS(X)                                                                           \
  X(sqrt, 1)                                                                                       \
  X(rsqrt, 1)                                                                                      \
  X(exp, 1)                                                                                        \
  X(exp2, 1)                                                                                       \
  X(log, 1)                                                                                        \
  X(log2, 1)                                                                                       \
  X(log1p, 1)                                                                                      \
  X(expm1, 1)                                                                                      \
  X(sin, 1)                                                                                        \
  X(cos, 1)                                                                                        \
  X(tan, 1)                                                                                        \
  X(tanh, 1)                                                                                       \
  X(erf, 1)                                                                                        \
  X(erfc, 1)                                                                                       \
  X(normcdf, 1) X(fabs, 1) X(floor, 1) X(ceil, 1) X(round, 1) X(trunc, 1) X(isnan, 1) X(isinf, 1)  \
      X(isfinite, 1) X(pow, 2) X(fmod, 2) X(copysign, 2) X(fma, 3) X(shfl_xor, 2) X(thread_idx, 0) \
          X(block_idx, 1) X(reinterpret, 1) X(check_access, 5) X(check_barrier, 2)                 \
              X(check_divisor, 2) X(check_index, 4) X(cp_async_commit, 0) X(cp_async_wait, 1)      \
                  X(mbarrier_init, 2) X(mbarrier_arrive, 1) X(mbarrier_expect_tx, 2)               \
                      X(mbarrier_wait, 2) X(fence_barrier_init, 0) X(fence_proxy_async, 0)         \
                          X(wgmma_fence, 0) X(wgmma_commit, 0) X(wgmma_wait, 1) X(setmaxnreg, 2)   \
                              X(register_fence, 1) X(named_barrier_sync, 2)                        \
                                  X(named_barrier_arrive, 2) X(tile_coord, 1) X(keep_before, 2)    \
                                      X(profile_mark, 2) X(tma_store_commit, 0)                    \
                                          X(tma_store_wait, 1) X(signal, 3) X(wait_until, 2)       \
                                              X(atomic_add, 2)

// check_*: the checked host mode's run-time checks (TX_CHECK=1), inserted by
// the host's instrument_checks pass only; no other code generator sees them.
//   check_access(slot, index i64, count, flags, site) -> bool: in bounds?
//   check_barrier(scope, site) -> i32: the calling thread passed a barrier
//   check_divisor(divisor, site) -> divisor: reports a zero divisor
//   check_index(index, extent, dim, site) -> index: reports an index of a
//     multi-dimensional access outside [0, extent) (lowering's guard_indices)
// cp_async_commit() / cp_async_wait(n): cp.async.commit_group and
// cp.async.wait_group n (T::cuda::commit_group / wait_group). Void; no-ops
// on the host, whose asynchronous copies complete when they are issued.
// mbarrier_*(bar, ...): the sm_90 shared-memory barriers (T::cuda::mbarrier_*);
// `bar` is a load of one element of a shared u64 buffer, whose address the
// code generator takes. mbarrier_init(bar, count), mbarrier_arrive(bar),
// mbarrier_expect_tx(bar, bytes), mbarrier_wait(bar, parity): void.
// fence_barrier_init / fence_proxy_async: fence.mbarrier_init and
// fence.proxy.async (generic-proxy writes visible to TMA and wgmma).
// wgmma_fence / wgmma_commit / wgmma_wait(n): the warpgroup MMA's fence,
// commit_group and wait_group n. setmaxnreg(count, increase): the warpgroup
// reallocates its registers to `count` per thread (setmaxnreg.inc / .dec).
// register_fence(r): r (a load of a local f32 register) is read and written
// here, so the compiler keeps its other uses on their side (a wgmma
// accumulator is written asynchronously until wgmma_wait).
// named_barrier_sync(id, threads) / named_barrier_arrive(id, threads): bar.sync
// and bar.arrive on hardware barrier `id` (T::named_barriers) completing when
// `threads` threads (a multiple of 32) have arrived; sync waits for it, arrive
// does not. Void.
// keep_before(anchor, v): v (an f32 register) is computed before the next
// asynchronous wait. ptxas moves a wgmma.wait_group above register-only
// code (it does not model the wait as blocking), so the softmax meant to
// overlap an MMA would run after the wait; a store of v into `anchor` (a
// shared f32 element) under a condition that holds only for NaN is a memory
// operation it keeps in place. Void; nothing on the host.
// tma_store_commit() / tma_store_wait(n): cp.async.bulk.commit_group and
// cp.async.bulk.wait_group.read n -- the calling thread's TMA stores
// (copy_async/tma_store) issued since its last commit become a group; the
// wait returns when at most n of its groups still read shared memory. Void;
// no-ops on the host, whose stores complete when issued.
// profile_mark(region, end): the calling warp enters (end = 0) or leaves
// (1) profiled region `region` (an index into LoweredKernel::profile_regions);
// placed by lower_profile when profiling is on. Void.
// signal(flag, value, add): flag (a load of one u32 element of a global
// buffer, usually a peer's: T::peer) is set to `value` (add = 0) or
// incremented by it (add = 1) with release semantics at system scope
// (st.release.sys / red.release.sys.add): every write the calling thread made
// or observed before (a CTA barrier makes the CTA's writes observed) is
// visible to whoever acquires the new value. wait_until(flag, value): the
// calling thread waits until the u32 at flag is >= value modulo 2^32 (the
// signed 32-bit difference is >= 0: counters may wrap), reading
// it with acquire semantics at system scope (ld.acquire.sys). Void. On the
// host, atomics with the same orders; a waiting thread lets the CTA's other
// threads run (the kernel runs as fibers).
// atomic_add(dst, v): dst (a load of one f32 element of a global or shared
// buffer) += v (f32), atomically (CUDA atomicAdd, relaxed; an atomicrmw
// fadd on the host): the tile op atomic_add's element step, for sums that
// several CTAs or threads add into (the attention backward's dQ). Void.
// tile_coord(d): inside a where= predicate of a tile op only, the element's
// coordinate along dimension d of the destination region (i32); the variant
// that expands the op substitutes it.
enum class Intrinsic : std::uint8_t {
#define TX_ENUM(N, A) N,
  TX_INTRINSICS(TX_ENUM)
#undef TX_ENUM
};
const char* intrinsic_name(Intrinsic i);
int intrinsic_arity(Intrinsic i);
// The sm_90 asynchronous machinery (mbarriers, proxy fences, wgmma ordering,
// register reallocation): GPU-only, no host form.
inline bool is_sm90_async_intrinsic(Intrinsic i) {
  switch (i) {
    case Intrinsic::mbarrier_init:
    case Intrinsic::mbarrier_arrive:
    case Intrinsic::mbarrier_expect_tx:
    case Intrinsic::mbarrier_wait:
    case Intrinsic::fence_barrier_init:
    case Intrinsic::fence_proxy_async:
    case Intrinsic::wgmma_fence:
    case Intrinsic::wgmma_commit:
    case Intrinsic::wgmma_wait:
    case Intrinsic::setmaxnreg:
    case Intrinsic::register_fence:
      return true;
    default:
      return false;
  }
}

class CallNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Call;
  const Intrinsic op;
  const std::vector<Expr> args;
  CallNode(Intrinsic o, DType t, std::vector<Expr> a, SourceLoc l)
      : ExprNode(kKind, t, l, 1 + max_depth(a), node_size(a)), op(o), args(std::move(a)) {}
};

class LoadNode : public ExprNode {
 public:
  static constexpr ExprKind kKind = ExprKind::Load;
  const Buffer buffer;
  const std::vector<Expr> indices;
  LoadNode(Buffer b, std::vector<Expr> i, SourceLoc l)
      : ExprNode(kKind, b->dtype, l, 1 + max_depth(i), node_size(i)),
        buffer(std::move(b)),
        indices(std::move(i)) {}
};

// Factories. They check operand types and throw tx::Error naming `loc`.
Expr make_int(std::int64_t v, DType t = i32, SourceLoc loc = {});
Expr make_float(double v, DType t = f32, SourceLoc loc = {});
Expr make_bool(bool v, SourceLoc loc = {});
Expr make_cast(DType t, Expr v, SourceLoc loc = {});
Expr make_binary(BinOp op, Expr a, Expr b, SourceLoc loc = {});
Expr make_unary(UnOp op, Expr a, SourceLoc loc = {});
Expr make_select(Expr c, Expr t, Expr f, SourceLoc loc = {});
Expr make_call(Intrinsic op, std::vector<Expr> args, SourceLoc loc = {}, DType t = void_t);
Expr make_load(Buffer b, std::vector<Expr> indices, SourceLoc loc = {});

// Constant helpers used all over lowering.
std::optional<std::int64_t> as_const_int(const Expr& e);
bool is_const_int(const Expr& e, std::int64_t v);

// -------------------------------------------------------------- statements

class StoreNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Store;
  const Buffer buffer;
  const Expr value;
  const std::vector<Expr> indices;
  StoreNode(Buffer b, Expr v, std::vector<Expr> i, SourceLoc l)
      : StmtNode(kKind, l), buffer(std::move(b)), value(std::move(v)), indices(std::move(i)) {}
};

class EvaluateNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Evaluate;
  const Expr value;
  EvaluateNode(Expr v, SourceLoc l) : StmtNode(kKind, l), value(std::move(v)) {}
};

enum class ForKind : std::uint8_t { serial, unrolled };
class ForNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::For;
  const Var var;
  const Expr min, extent;
  const ForKind for_kind;
  const Stmt body;
  ForNode(Var v, Expr mn, Expr ex, ForKind k, Stmt b, SourceLoc l)
      : StmtNode(kKind, l),
        var(std::move(v)),
        min(std::move(mn)),
        extent(std::move(ex)),
        for_kind(k),
        body(std::move(b)) {}
};

class IfThenElseNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::IfThenElse;
  const Expr cond;
  const Stmt then_case, else_case;  // else_case may be empty
  IfThenElseNode(Expr c, Stmt t, Stmt e, SourceLoc l)
      : StmtNode(kKind, l), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
};

class SeqNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Seq;
  const std::vector<Stmt> seq;
  SeqNode(std::vector<Stmt> s, SourceLoc l) : StmtNode(kKind, l), seq(std::move(s)) {}
};

class LetStmtNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::LetStmt;
  const Var var;
  const Expr value;
  const Stmt body;
  LetStmtNode(Var v, Expr x, Stmt b, SourceLoc l)
      : StmtNode(kKind, l), var(std::move(v)), value(std::move(x)), body(std::move(b)) {}
};

class AllocateNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Allocate;
  const Buffer buffer;
  const Stmt body;
  AllocateNode(Buffer b, Stmt s, SourceLoc l)
      : StmtNode(kKind, l), buffer(std::move(b)), body(std::move(s)) {}
};

// T.cta_id([2, 4]), T.warp_id([8]), T.lane_id([32]), T.thread_id([256]), ...
enum class ScopeIdKind : std::uint8_t {
  cta_id,
  warpgroup_id,
  warp_id,
  lane_id,
  thread_id,
  warp_id_in_wg,
  thread_id_in_wg
};
const char* scope_id_name(ScopeIdKind k);
class ScopeIdBindNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::ScopeIdBind;
  const ScopeIdKind id_kind;
  const std::vector<Var> vars;
  // Static extents; 0 where the extent is an expression of T::dim variables
  // or scalar parameters (cta_id only: the grid is computed at launch).
  const std::vector<std::int64_t> extents;
  const Stmt body;
  // The extents as expressions (IntImms where static).
  const std::vector<Expr> extent_exprs;
  ScopeIdBindNode(ScopeIdKind k, std::vector<Var> v, std::vector<std::int64_t> e, Stmt b,
                  SourceLoc l, std::vector<Expr> ee)
      : StmtNode(kKind, l),
        id_kind(k),
        vars(std::move(v)),
        extents(std::move(e)),
        body(std::move(b)),
        extent_exprs(std::move(ee)) {}
  bool symbolic() const;
};

// Execution scope of a tile primitive: which threads cooperate on it.
enum class ExecScope : std::uint8_t { thread, warp, warpgroup, cta };
const char* exec_scope_name(ExecScope s);
int exec_scope_threads(ExecScope s, int cta_threads);

// An operand of a tile call: a buffer region or a scalar expression.
using TileArg = std::variant<BufferRegion, Expr>;

// scale= / bias= of an elementwise op, op(x * scale + bias): a scalar, or a
// tile region that broadcasts to the destination (a weight row, a per-row
// statistic), as the reference system's elementwise ops take them.
struct ScaleBias {
  Expr value{};                        // the scalar
  std::optional<BufferRegion> tile{};  // or the region (make_tile_call moves it into args)
  ScaleBias() = default;
  template <class E>
  requires std::is_convertible_v<E, Expr> ScaleBias(const E& e) : value(e) {}  // NOLINT
  ScaleBias(BufferRegion r) : tile(std::move(r)) {}                            // NOLINT
  explicit operator bool() const { return value.defined() || tile.has_value(); }
};

// where= of a tile op: which elements of the destination it writes, as a
// condition on their coordinates in the destination region (NumPy's where=:
// elsewhere the destination keeps its old value). Written as a lambda taking
// one coordinate per dimension of the destination region:
//
//   // causal masking of a score tile S (rows m0 + r, columns n0 + c)
//   Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr r, Expr c) { return n0 + c > m0 + r; }});
//
// The coordinates are T.tile_coord(d) calls in the condition, replaced by
// each element's own coordinates when the op is expanded.
Expr tile_coord(int dim);
struct IndexPredicate {
  Expr cond{};
  int rank = 0;  // the number of coordinates the lambda takes
  IndexPredicate() = default;
  template <class F>
  requires(std::is_invocable_v<F, Expr> || std::is_invocable_v<F, Expr, Expr> ||
           std::is_invocable_v<F, Expr, Expr, Expr> ||
           std::is_invocable_v<F, Expr, Expr, Expr, Expr>)
      IndexPredicate(const F& f) {  // NOLINT: implicit by design ({.where = lambda})
    if constexpr (std::is_invocable_v<F, Expr>) {
      rank = 1;
      cond = Expr(f(tile_coord(0)));
    } else if constexpr (std::is_invocable_v<F, Expr, Expr>) {
      rank = 2;
      cond = Expr(f(tile_coord(0), tile_coord(1)));
    } else if constexpr (std::is_invocable_v<F, Expr, Expr, Expr>) {
      rank = 3;
      cond = Expr(f(tile_coord(0), tile_coord(1), tile_coord(2)));
    } else {
      rank = 4;
      cond = Expr(f(tile_coord(0), tile_coord(1), tile_coord(2), tile_coord(3)));
    }
  }
  explicit operator bool() const { return cond.defined(); }
};

struct TileAttrs {
  ScaleBias scale{};  // elementwise: op(x * scale + bias)
  ScaleBias bias{};
  bool accum = false;       // reductions, gemm: fold into the destination's old value (D += A B)
  std::vector<int> axes{};  // reductions: source axes to reduce (empty: inferred)
  std::string variant{};    // force a dispatch variant by name
  // copy_async: the mbarrier (a load of a shared u64 element) the copy
  // completes on (the TMA's complete_tx; tx adds the bytes to its expected
  // transaction count). Empty: the copy completes through commit / wait groups.
  Expr barrier{};
  // gemm on wgmma: warpgroup MMA groups left in flight when the call returns
  // (0: the product is in the accumulator; 1: this call's group may still
  // run, so the caller may overlap it with the next stage's wait).
  int pending = 0;
  // gemm: B is given as (N, K) -- D = A B^T -- as a row-major N x K matrix
  // (cuBLAS's transposed operand, torch's b.t() of an (N, K) tensor). A
  // shared tile filled that way is K-major, which wgmma reads for every
  // dtype and fp8 wgmma requires (the instruction has no 8-bit transpose).
  bool transpose_b = false;
  // copy / copy_async: partial tiles. A global operand's region may reach
  // past the tensor's end (the last tile of a shape that is not a multiple
  // of the tile): elements of a global source outside it read as zero (the
  // TMA's out-of-bounds fill), elements of a global destination outside it
  // are not written. Only variants that mask accept such regions
  // (copy_async/tma, copy/reg, copy/fallback).
  bool partial = false;
  DType dtype = void_t;  // cast: destination dtype is the buffer's; kept for printing
  // Where make_tile_call put a tile scale / bias: its index in the call's
  // args (-1: none), so every pass that walks the operands sees it.
  int scale_arg = -1;
  int bias_arg = -1;
  // Elementwise ops and copies: write only the elements where this holds.
  IndexPredicate where{};
};

class TileCallNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::TileCall;
  const std::string op;  // "copy", "sqrt", "add", "sum", ...
  const ExecScope scope;
  const std::vector<TileArg> args;  // destination first
  const TileAttrs attrs;
  TileCallNode(std::string o, ExecScope s, std::vector<TileArg> a, TileAttrs at, SourceLoc l)
      : StmtNode(kKind, l), op(std::move(o)), scope(s), args(std::move(a)), attrs(std::move(at)) {}
  // "Tx.warp.copy"
  std::string qualified_name() const;
  // Whether args[i] is a tile scale= or bias= (not one of the op's operands).
  bool is_attr_arg(std::size_t i) const {
    const auto k = static_cast<int>(i);
    return k == attrs.scale_arg || k == attrs.bias_arg;
  }
  // The op's operands: args without a tile scale / bias.
  std::vector<TileArg> operands() const {
    std::vector<TileArg> out;
    for (std::size_t i = 0; i < args.size(); ++i)
      if (!is_attr_arg(i)) out.push_back(args[i]);
    return out;
  }
};

// cta: __syncthreads(); warpgroup: bar.sync (1 + wgid), 128; warp: __syncwarp().
class BarrierNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Barrier;
  const ExecScope scope;
  BarrierNode(ExecScope s, SourceLoc l) : StmtNode(kKind, l), scope(s) {}
};

// A vector transfer of `bytes` (1, 2, 4, 8 or 16) between two flat buffers,
// offsets in elements. The lowered form of the seeds' copy_bytes / copy_128b.
class CopyBytesNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::CopyBytes;
  const Buffer dst;
  const Expr dst_offset;
  const Buffer src;
  const Expr src_offset;
  const int bytes;
  CopyBytesNode(Buffer d, Expr doff, Buffer s, Expr soff, int n, SourceLoc l)
      : StmtNode(kKind, l),
        dst(std::move(d)),
        dst_offset(std::move(doff)),
        src(std::move(s)),
        src_offset(std::move(soff)),
        bytes(n) {}
};

// ldmatrix (store = false) or stmatrix (store = true): `num` (1, 2 or 4) 8x8
// matrices of 16-bit elements between shared memory and a warp's registers.
// `row` is this lane's row address (an element offset into the flat shared
// buffer, 16-byte aligned); words[j] is the element offset in `regs` of the
// 32-bit register that matrix j lands in (two elements, 4-byte aligned).
// trans: each lane receives a column pair instead of a row pair.
class MatrixMoveNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::MatrixMove;
  const bool store;
  const bool trans;
  const Buffer smem;
  const Expr row;
  const Buffer regs;
  const std::vector<std::int64_t> words;
  MatrixMoveNode(bool st, bool tr, Buffer s, Expr r, Buffer g, std::vector<std::int64_t> w,
                 SourceLoc l)
      : StmtNode(kKind, l),
        store(st),
        trans(tr),
        smem(std::move(s)),
        row(std::move(r)),
        regs(std::move(g)),
        words(std::move(w)) {}
};

// One warp-wide mma.sync.aligned.<shape>.row.col.f32.<atype>.<btype>.f32:
// D += A * B with D four f32 registers (element offsets d[i] into `d`), A four
// 32-bit words and B two (element offsets of each word's first element).
// m16n8k16 takes f16 or bf16 (two per word), m16n8k32 e4m3 / e5m2 (four).
class MmaNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Mma;
  const std::string shape;  // "m16n8k16" or "m16n8k32"
  const Buffer d;
  const std::vector<std::int64_t> d_regs;
  const Buffer a;
  const std::vector<std::int64_t> a_words;
  const Buffer b;
  const std::vector<std::int64_t> b_words;
  MmaNode(std::string sh, Buffer dd, std::vector<std::int64_t> dr, Buffer aa,
          std::vector<std::int64_t> aw, Buffer bb, std::vector<std::int64_t> bw, SourceLoc l)
      : StmtNode(kKind, l),
        shape(std::move(sh)),
        d(std::move(dd)),
        d_regs(std::move(dr)),
        a(std::move(aa)),
        a_words(std::move(aw)),
        b(std::move(bb)),
        b_words(std::move(bw)) {}
};

// cp.async: `bytes` (4, 8 or 16) from global `src` to shared `dst`, offsets in
// elements. When src_bytes is given and evaluates to 0, nothing is read and
// the destination is zero-filled (a chunk past the end of a tensor); the
// variant points src at the tensor's start then, so no address outside it is
// ever formed. Completion is the program's business (commit / wait groups).
class CpAsyncNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::CpAsync;
  const Buffer dst;
  const Expr dst_offset;
  const Buffer src;
  const Expr src_offset;
  const int bytes;
  const Expr src_bytes;  // optional: bytes or 0
  CpAsyncNode(Buffer d, Expr doff, Buffer s, Expr soff, int n, Expr sb, SourceLoc l)
      : StmtNode(kKind, l),
        dst(std::move(d)),
        dst_offset(std::move(doff)),
        src(std::move(s)),
        src_offset(std::move(soff)),
        bytes(n),
        src_bytes(std::move(sb)) {}
};

// A TMA tensor map: the runtime encodes one per kernel launch
// (cuTensorMapEncodeTiled) for a global buffer parameter, a box and a
// swizzle, and passes it as a __grid_constant__ parameter. Dims are the
// buffer's, outermost first (the map itself lists them innermost first).
struct TensorMapDesc {
  Buffer global;                  // a T::match_buffer parameter, row-major
  std::vector<std::int64_t> box;  // the box, outermost first (each 1..256)
  int swizzle_bytes = 0;          // 0, 32, 64 or 128
  bool same_as(const TensorMapDesc& o) const {
    return global->data.get() == o.global->data.get() && box == o.box &&
           swizzle_bytes == o.swizzle_bytes;
  }
  std::int64_t box_bytes() const {
    std::int64_t n = global->dtype.bytes();
    for (std::int64_t b : box) n *= b;
    return n;
  }
};

// cp.async.bulk.tensor: one TMA box between global memory (through `map`,
// at element coordinates `coords`, outermost first) and shared memory (the
// box laid out densely from element `smem_offset`, swizzled by the map's
// mode). A load (global -> shared) completes on the mbarrier `barrier` (a
// load of a shared u64 element) with complete_tx of box_bytes; a store
// (`store`: shared -> global, no barrier) joins the issuing thread's bulk
// group (tma_store_commit / tma_store_wait), and the TMA clips the box at
// the tensor's bounds. Issued by the one thread that executes it.
class TmaCopyNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::TmaCopy;
  const TensorMapDesc map;
  const Buffer smem;
  const Expr smem_offset;
  const std::vector<Expr> coords;
  const Expr barrier;  // loads only
  const bool store;
  // Stores only: the box is added into global memory element by element
  // (cp.reduce.async.bulk.tensor .add) instead of written.
  const bool reduce_add;
  TmaCopyNode(TensorMapDesc m, Buffer s, Expr off, std::vector<Expr> c, Expr bar, bool st,
              SourceLoc l, bool add = false)
      : StmtNode(kKind, l),
        map(std::move(m)),
        smem(std::move(s)),
        smem_offset(std::move(off)),
        coords(std::move(c)),
        barrier(std::move(bar)),
        store(st),
        reduce_add(add) {}
};

// A shared-memory operand of wgmma: the matrix descriptor's fields. `offset`
// is the element offset (pre-swizzle) of the operand's first element in
// `smem`; lbo / sbo are the leading / stride byte offsets; swizzle_bytes the
// mode (128, 64 or 32); mn_major: M (A) or N (B) is the contiguous
// dimension (the instruction's transpose bit).
struct WgmmaOperand {
  Buffer smem;
  Expr offset;
  std::int64_t lbo = 0, sbo = 0;
  int swizzle_bytes = 128;
  bool mn_major = false;
};

// wgmma.mma_async.sync.aligned.<shape>.f32.<a>.<b>: a warpgroup's D (+)= A B
// with B in shared memory (a descriptor), A in shared memory too (`a`) or in
// registers (`a_regs`: four 32-bit words per thread, element offsets of each
// word's first element in a_words; then `a` is empty), and D the N / 2 f32
// registers d_regs (element offsets into `d`) of every thread. scale_d: an
// i32, 0 for D = A B, else D += A B. Asynchronous: wgmma_fence before,
// commit / wait after (the gemm/wgmma variant emits them).
class WgmmaNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Wgmma;
  const std::string shape;  // "m64n256k16"
  const Buffer d;
  const std::vector<std::int64_t> d_regs;
  const WgmmaOperand a, b;
  const Expr scale_d;
  const Buffer a_regs;  // set for A from registers
  const std::vector<std::int64_t> a_words;
  WgmmaNode(std::string sh, Buffer dd, std::vector<std::int64_t> dr, WgmmaOperand aa,
            WgmmaOperand bb, Expr sd, Buffer ar, std::vector<std::int64_t> aw, SourceLoc l)
      : StmtNode(kKind, l),
        shape(std::move(sh)),
        d(std::move(dd)),
        d_regs(std::move(dr)),
        a(std::move(aa)),
        b(std::move(bb)),
        scale_d(std::move(sd)),
        a_regs(std::move(ar)),
        a_words(std::move(aw)) {}
};

// Marks lowered code with the tile call it came from (printed as a comment).
class OriginNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Origin;
  const std::string text;  // e.g. "Tx.warp.copy(R[0:32, 0:8], A_smem[0:32, 0:8]) -> copy/reg"
  const Stmt body;
  OriginNode(std::string t, Stmt b, SourceLoc l)
      : StmtNode(kKind, l), text(std::move(t)), body(std::move(b)) {}
};

// A profiled region (T::profile): when profiling is on for a compile, the
// warps that run `body` record when they enter and leave it (lowering's
// lower_profile turns it into profile_mark intrinsics); off, it is `body`.
class ProfileNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::Profile;
  const std::string name;  // "producer load": the trace's slice name
  const Stmt body;
  ProfileNode(std::string n, Stmt b, SourceLoc l)
      : StmtNode(kKind, l), name(std::move(n)), body(std::move(b)) {}
};

// T::peer(X, rank): within `body`, `view` addresses rank `rank`'s copy of the
// symmetric kernel parameter `of` (T::match_symmetric): the same shape, dtype
// and layout at another address, which the launch passes in a per-parameter
// table of every rank's copy (see tx/runtime/dist.hpp). A peer's copy is
// global memory of another GPU (over NVLink) or, for host ranks, another
// thread's memory; accesses to it are ordinary loads and stores, ordered
// against the peer by T::dist::signal / wait_until.
class PeerViewNode : public StmtNode {
 public:
  static constexpr StmtKind kKind = StmtKind::PeerView;
  const Buffer view;
  const Buffer of;
  const Expr rank;
  const Stmt body;
  PeerViewNode(Buffer v, Buffer o, Expr r, Stmt b, SourceLoc l)
      : StmtNode(kKind, l),
        view(std::move(v)),
        of(std::move(o)),
        rank(std::move(r)),
        body(std::move(b)) {}
};

Stmt make_store(Buffer b, Expr value, std::vector<Expr> indices, SourceLoc loc = {});
Stmt make_evaluate(Expr v, SourceLoc loc = {});
Stmt make_for(Var v, Expr min, Expr extent, ForKind k, Stmt body, SourceLoc loc = {});
Stmt make_if(Expr cond, Stmt then_case, Stmt else_case = {}, SourceLoc loc = {});
// Flattens nested Seqs; a one-element sequence is returned as that element.
Stmt make_seq(std::vector<Stmt> seq, SourceLoc loc = {});
Stmt make_let(Var v, Expr value, Stmt body, SourceLoc loc = {});
Stmt make_allocate(Buffer b, Stmt body, SourceLoc loc = {});
Stmt make_scope_id_bind(ScopeIdKind k, std::vector<Var> vars, std::vector<std::int64_t> extents,
                        Stmt body, SourceLoc loc = {});
// With extents that may be expressions (cta_id over a symbolic grid).
Stmt make_scope_id_bind(ScopeIdKind k, std::vector<Var> vars, std::vector<Expr> extents, Stmt body,
                        SourceLoc loc = {});
Stmt make_tile_call(std::string op, ExecScope scope, std::vector<TileArg> args, TileAttrs attrs,
                    SourceLoc loc = {});
Stmt make_barrier(ExecScope s, SourceLoc loc = {});
Stmt make_copy_bytes(Buffer dst, Expr dst_off, Buffer src, Expr src_off, int bytes,
                     SourceLoc loc = {});
Stmt make_matrix_move(bool store, bool trans, Buffer smem, Expr row, Buffer regs,
                      std::vector<std::int64_t> words, SourceLoc loc = {});
Stmt make_mma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, Buffer a,
              std::vector<std::int64_t> a_words, Buffer b, std::vector<std::int64_t> b_words,
              SourceLoc loc = {});
Stmt make_cp_async(Buffer dst, Expr dst_off, Buffer src, Expr src_off, int bytes,
                   Expr src_bytes = {}, SourceLoc loc = {});
Stmt make_tma_copy(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                   Expr barrier, SourceLoc loc = {});
// The TMA store of one box, shared -> global (TmaCopyNode with store).
Stmt make_tma_store(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                    SourceLoc loc = {});
// The TMA reduction of one box, shared -> global: each element added into
// global memory (float32 only here), in the thread's bulk group.
Stmt make_tma_reduce_add(TensorMapDesc map, Buffer smem, Expr smem_offset, std::vector<Expr> coords,
                         SourceLoc loc = {});
Stmt make_wgmma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, WgmmaOperand a,
                WgmmaOperand b, Expr scale_d, SourceLoc loc = {});
// A from registers: four words of a_regs (local, 16-bit or fp8 elements).
Stmt make_wgmma(std::string shape, Buffer d, std::vector<std::int64_t> d_regs, Buffer a_regs,
                std::vector<std::int64_t> a_words, WgmmaOperand b, Expr scale_d,
                SourceLoc loc = {});
Stmt make_origin(std::string text, Stmt body, SourceLoc loc = {});
// `name`: 1 to 64 printable characters without quotes or backslashes.
Stmt make_profile(std::string name, Stmt body, SourceLoc loc = {});
// Validates: `of` and `view` are global buffers of one dtype and shape, `rank`
// an integer.
Stmt make_peer_view(Buffer view, Buffer of, Expr rank, Stmt body, SourceLoc loc = {});

// ----------------------------------------------------------------- function

struct Param {
  Var handle;     // the T.handle parameter
  Buffer buffer;  // bound by T.match_buffer (empty if not a buffer)
  Var scalar;     // bound by T.match_scalar (empty if not a scalar)
  // Bound by T::match_symmetric: a buffer every rank of a group holds, each
  // copy addressable by the others (T::peer); the launch passes the table of
  // the copies' addresses after the T::dim extents.
  bool symmetric = false;
  // An integer scalar's facts, checked at launch (full range when not given).
  std::int64_t min = INT64_MIN, max = INT64_MAX, multiple_of = 1;
  bool has_facts = false;
};

// An extent known at launch (T::dim): bound from the shapes of the tensors
// passed, checked against these facts, passed to the kernel as an int.
struct DimParam {
  Var var;
  std::int64_t min = 1;
  std::int64_t max = 2147483647;
  std::int64_t multiple_of = 1;
  SourceLoc loc;
  // Only in a lowered kernel, after the T::dim extents: a value the launch
  // computes from `of` (an expression of extents and scalar parameters)
  // instead of binding it from a tensor -- the magic multiplier (as the bits
  // of an int) or the shift of a division by `of` (lowering's fast_divide).
  enum class Derived : std::uint8_t { none, div_magic, div_shift };
  Derived derived = Derived::none;
  Expr of{};
};

class PrimFuncNode {
 public:
  const std::string name;
  const std::vector<Param> params;
  const Stmt body;
  const SourceLoc loc;
  const bool lowered;  // true once tile calls are expanded
  const std::vector<DimParam> dims;
  // T::no_alias: the buffers passed do not overlap in memory (CUDA's
  // __restrict__; the launch checks it).
  const bool no_alias;
  PrimFuncNode(std::string n, std::vector<Param> p, Stmt b, SourceLoc l, bool low,
               std::vector<DimParam> d = {}, bool noalias = false)
      : name(std::move(n)),
        params(std::move(p)),
        body(std::move(b)),
        loc(l),
        lowered(low),
        dims(std::move(d)),
        no_alias(noalias) {}
};

class PrimFunc {
 public:
  PrimFunc() = default;
  explicit PrimFunc(std::shared_ptr<const PrimFuncNode> n) : node_(std::move(n)) {}
  const PrimFuncNode* operator->() const {
    if (!node_) [[unlikely]]
      detail::fail_undefined("tx::PrimFunc");
    return node_.get();
  }
  const PrimFuncNode* get() const { return node_.get(); }
  explicit operator bool() const { return node_ != nullptr; }
  PrimFunc with_body(Stmt body, bool lowered) const;

 private:
  std::shared_ptr<const PrimFuncNode> node_;
};

}  // namespace tx
