// The builders a kernel author calls: T:: for the kernel skeleton, Tx:: for
// tile primitives. Running a kernel-building lambda records its IR.
//
//   PrimFunc f = T::prim_func("k", [&](Handle A_ptr) {
//     auto A = T::match_buffer(A_ptr, {32, 8}, f32);
//     auto tid = T::thread_id({32});
//     for (Var kk : T::serial(8)) A(tid, kk) = cast(tid * 100 + kk, f32);
//   });
//
// Names of buffers and variables are read from the user's source line
// (`auto A = T::match_buffer(...)` names the buffer "A"); pass a name
// explicitly where the source is not available (e.g. in clang-repl).
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "tx/expr.hpp"
#include "tx/ir.hpp"
#include "tx/tile_op_table.hpp"

namespace tx {

using Loc = std::source_location;
using Shape = std::vector<std::int64_t>;

// An optional name; empty means "infer from the source line".
struct Name {
  std::string value;
  Name() = default;
  Name(const char* s) : value(s) {}             // NOLINT: implicit by design
  Name(std::string s) : value(std::move(s)) {}  // NOLINT
};

// A kernel parameter (T.handle). Bound to a buffer by T::match_buffer, or
// to a scalar by T::match_scalar.
class Handle : public Var {
 public:
  Handle() = default;
  explicit Handle(Var v) : Var(std::move(v)) {}
};

// One dimension of a region: slice(0, 32) is [0, 32); span(bx * 128, 128)
// starts at an expression and has a static extent.
struct Slice {
  Expr start;
  std::int64_t extent;
  Slice(std::int64_t lo, std::int64_t hi) : start(make_int(lo)), extent(hi - lo) {}
  Slice(std::initializer_list<std::int64_t> lohi);
  Slice(Expr s, std::int64_t ext) : start(std::move(s)), extent(ext) {}
};
inline Slice slice(std::int64_t lo, std::int64_t hi) { return Slice(lo, hi); }

struct Region {
  std::vector<Slice> slices;
};
// region({0, 32}, {0, 8}) -- the seeds' (slice(0, 32), slice(0, 8)).
inline Region region(Slice a) { return Region{{a}}; }
inline Region region(Slice a, Slice b) { return Region{{a, b}}; }
inline Region region(Slice a, Slice b, Slice c) { return Region{{a, b, c}}; }
inline Region region(Slice a, Slice b, Slice c, Slice d) { return Region{{a, b, c, d}}; }

class TileBuffer;

namespace detail {
void set_current_loc(SourceLoc loc);
// Materializes a DSL value or literal as the statement at `loc`: errors in
// the expression (a dtype mismatch, an undefined operand) then name the
// user's line rather than the previous statement's.
template <class V>
Expr materialize_at(const V& v, SourceLoc loc) {
  set_current_loc(loc);
  return to_expr(v);
}
[[noreturn]] void fail_undefined_buffer(const char* op, SourceLoc loc);
}  // namespace detail

// An expression argument of a builder that remembers the line it was written
// on (T::let, T::if_, T::serial, span, fill, scalar tile operands).
struct Value {
  Expr value;
  SourceLoc loc;
  template <class V>
  requires(DslValue<V> || Literal<V>)
      Value(const V& v, Loc l = Loc::current())  // NOLINT: implicit by design
      : value(detail::materialize_at(v, l)), loc(l) {}
  operator Expr() const { return value; }  // NOLINT
};

inline Slice span(Value start, std::int64_t extent) { return Slice(start.value, extent); }

// One extent of a buffer or of the grid: a constant, or -- for kernels that
// serve every size -- a T::dim variable (buffers), or an expression of them
// and of scalar parameters (T::cta_id: ceildiv(n, 256)).
struct Extent {
  Expr value;
  // Set (and `value` left undefined) when the integer given cannot be an
  // extent at all (an unsigned value past 2^63 - 1); T::cta_id and
  // T::match_buffer report it with the user's line.
  std::string invalid;
  // Any integer type: int, long, long long, unsigned, size_t (a `1LL << 40`
  // or a `v.size()` must not be ambiguous between overloads). Negative and
  // too large values get the builders' errors.
  template <std::integral I>
  requires(!std::same_as<I, bool>) Extent(I v) {  // NOLINT: implicit by design
    if constexpr (std::is_unsigned_v<I>) {
      if (static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(INT64_MAX)) {
        invalid = "extent " + std::to_string(v) + " does not fit in a signed 64-bit integer";
        return;
      }
    }
    const auto x = static_cast<std::int64_t>(v);
    value = make_int(x, x > 2147483647 || x < -2147483648LL ? i64 : i32);
  }
  template <class V>
  requires DslValue<V> Extent(const V& v, Loc l = Loc::current())
      : value(detail::materialize_at(v, l)) {}  // NOLINT
};
struct Extents {
  std::vector<Extent> items;
  Extents(std::initializer_list<Extent> l) : items(l) {}  // NOLINT: implicit by design
  Extents(const std::vector<std::int64_t>& v) {           // NOLINT
    for (auto e : v) items.emplace_back(e);
  }
  Extents(const std::vector<Expr>& v) {  // NOLINT
    for (const Expr& e : v) items.push_back(Extent(e));
  }
};

// What is known of a T::dim before launch; checked when it is bound. The
// specialization facts of a shape-generic kernel: `multiple_of` lets
// vector accesses along the dimension be proven aligned, `max` keeps index
// arithmetic 32-bit (a buffer whose extents can pass 2^31 elements gets
// 64-bit offsets).
struct DimFacts {
  std::int64_t min = 1;
  std::int64_t max = 2147483647;
  std::int64_t multiple_of = 1;
};

// A buffer element: reads as a value, assigns as a store.
class BufferElem : public ExprTemplateTag {
 public:
  BufferElem(Buffer b, std::vector<Expr> idx, SourceLoc loc)
      : buffer_(std::move(b)), indices_(std::move(idx)), loc_(loc) {}
  BufferElem(const BufferElem&) = default;
  Expr materialize() const { return make_load(buffer_, indices_, loc_); }
  operator Expr() const { return materialize(); }  // NOLINT: implicit by design

  // Records `buffer[indices] = value`.
  void operator=(const Expr& value) const;  // NOLINT: assignment records a store
  void operator=(const BufferElem& value) const { *this = value.materialize(); }
  template <class V>
  requires(DslValue<V> || Literal<V>) void operator=(const V& value) const {
    detail::set_current_loc(loc_);
    if constexpr (Literal<V>)
      *this = to_expr_like(value, make_load(buffer_, indices_, loc_));
    else
      *this = to_expr(value);
  }

 private:
  Buffer buffer_;
  std::vector<Expr> indices_;
  SourceLoc loc_;
};

// An index that remembers the source line of the expression it came from.
struct Idx {
  Expr value;
  SourceLoc loc;
  template <class V>
  requires(DslValue<V> || Literal<V>)
      Idx(const V& v, Loc l = Loc::current())  // NOLINT: implicit by design
      : value(detail::materialize_at(v, l)), loc(l) {}
};

class TileBuffer : public Buffer {
 public:
  TileBuffer() = default;
  explicit TileBuffer(Buffer b) : Buffer(std::move(b)) {}

  BufferElem operator()(Idx i0) const { return elem({i0}); }
  BufferElem operator()(Idx i0, Idx i1) const { return elem({i0, i1}); }
  BufferElem operator()(Idx i0, Idx i1, Idx i2) const { return elem({i0, i1, i2}); }
  BufferElem operator()(Idx i0, Idx i1, Idx i2, Idx i3) const { return elem({i0, i1, i2, i3}); }

  BufferRegion operator[](const Region& r) const;
  // The whole buffer as a region.
  BufferRegion all() const;
  // The calling thread's own registers of a register tile, as a flat buffer
  // over the same storage (the reference's `buf.local()`): a tile spread over
  // threads cannot be indexed (an index does not say which thread holds the
  // element), but each thread can write its own part through this view --
  // its partial sum, say, before Tx::cta::sum folds the tile.
  TileBuffer local(Loc loc = Loc::current()) const;
  // A 2-D shared tile read the other way round: the (C, R) view of an
  // (R, C) tile over the same storage, element (j, i) of the view being
  // (i, j) of the tile. For the operands the attention backward reads
  // transposed: dV += P^T dO and dK += dS^T Q take A as a tile stored (K, M),
  // which wgmma reads M-major from the view (no copy).
  TileBuffer transposed(Loc loc = Loc::current()) const;

 private:
  BufferElem elem(std::vector<Idx> idx) const;
};

// Vars bound by T::cta_id etc. It is itself the first (x) var, so
// `auto tid = T::thread_id({32});` reads as a value; ids[i] gives the others.
class IdVars : public Var {
 public:
  explicit IdVars(std::vector<Var> v) : Var(v.at(0)), vars_(std::move(v)) {}
  const Var& operator[](std::size_t i) const {
    if (i >= vars_.size()) index_error(i);
    return vars_[i];
  }
  std::size_t size() const { return vars_.size(); }

 private:
  [[noreturn]] void index_error(std::size_t i) const;
  std::vector<Var> vars_;
};

// A tile-primitive operand: a region, or a whole buffer.
// (A default-constructed TileBuffer is a tx error naming the line.)
struct TileOperand {
  BufferRegion region;
  TileOperand(const BufferRegion& r) : region(r) {}         // NOLINT: implicit by design
  TileOperand(const TileBuffer& b, Loc l = Loc::current())  // NOLINT
      : region(whole(b, l)) {}
  static BufferRegion whole(const TileBuffer& b, SourceLoc loc);
};

// An operand that may also be a scalar (binary ops, fma, fill).
struct TileOrScalar {
  TileArg arg;
  TileOrScalar(const BufferRegion& r) : arg(r) {}            // NOLINT: implicit by design
  TileOrScalar(const TileBuffer& b, Loc l = Loc::current())  // NOLINT
      : arg(TileOperand::whole(b, l)) {}
  template <class V>
  requires(DslValue<V> || Literal<V>) TileOrScalar(const V& v, Loc l = Loc::current())  // NOLINT
      : arg(detail::materialize_at(v, l)) {}
};

namespace detail {
// Builder frame management (used by the range-for loop and if helpers).
void push_frame();
Stmt pop_frame();
void discard_frame();
void emit(Stmt s);
void emit_binder(std::function<Stmt(Stmt)> wrap);
// Replace the last emitted statement (used by .else_()).
Stmt take_last();
std::string infer_name(SourceLoc loc, const std::string& fallback);
bool building();
void emit_tile(std::string op, ExecScope scope, std::vector<TileArg> args, TileAttrs attrs,
               SourceLoc loc);

// Calls fn with one fresh Handle per parameter.
template <class F>
struct lambda_arity : lambda_arity<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct lambda_arity<R (C::*)(A...) const> {
  static constexpr std::size_t value = sizeof...(A);
};
template <class C, class R, class... A>
struct lambda_arity<R (C::*)(A...)> {
  static constexpr std::size_t value = sizeof...(A);
};

class FuncScope {
 public:
  FuncScope(std::string name, SourceLoc loc);
  ~FuncScope();
  Handle param(std::size_t i, std::size_t n);
  Handle named_param(const std::string& name);
  PrimFunc finish();

 private:
  bool finished_ = false;
};
}  // namespace detail

// A range-for loop that records a For node:  for (Var i : T::serial(8)) { ... }
class LoopRange {
 public:
  LoopRange(Expr min, Expr extent, ForKind kind, Name name, SourceLoc loc);
  LoopRange(const LoopRange&) = delete;
  LoopRange& operator=(const LoopRange&) = delete;
  ~LoopRange();

  struct Sentinel {};
  class Iterator {
   public:
    explicit Iterator(LoopRange* r) : r_(r) {}
    Var operator*() const { return r_->var_; }
    Iterator& operator++() {
      r_->finish();
      return *this;
    }
    bool operator!=(Sentinel) const { return !r_->finished_; }

   private:
    LoopRange* r_;
  };
  Iterator begin();
  Sentinel end() const { return {}; }

 private:
  void finish();
  Var var_;
  Expr min_, extent_;
  ForKind kind_;
  SourceLoc loc_;
  bool started_ = false, finished_ = false;
  int exceptions_at_start_ = 0;
};

// T::if_(cond, [&] { ... }).else_([&] { ... });
class IfBuilder {
 public:
  explicit IfBuilder(SourceLoc loc) : loc_(loc) {}
  void else_(const std::function<void()>& f, Loc loc = Loc::current());

 private:
  SourceLoc loc_;
};

namespace T {

template <class F>
PrimFunc prim_func(std::string name, F&& body, Loc loc = Loc::current()) {
  detail::FuncScope scope(std::move(name), loc);
  constexpr std::size_t n = detail::lambda_arity<std::remove_cvref_t<F>>::value;
  // Handles are made first, in order (argument evaluation order is unspecified).
  std::array<Handle, n> handles;
  for (std::size_t i = 0; i < n; ++i) handles[i] = scope.param(i, n);
  [&]<std::size_t... I>(std::index_sequence<I...>) { body(handles[I]...); }
  (std::make_index_sequence<n>{});
  return scope.finish();
}

// A kernel whose parameter count is known only at run time (library code).
PrimFunc prim_func_n(std::string name, std::vector<std::string> param_names,
                     const std::function<void(const std::vector<Handle>&)>& body,
                     Loc loc = Loc::current());

// Extents are constants or T::dim variables (shape-generic kernels).
TileBuffer match_buffer(const Handle& h, Extents shape, DType dtype,
                        std::optional<TileLayout> layout = std::nullopt, Name name = {},
                        Loc loc = Loc::current());
// A symmetric buffer (several GPUs, tx/runtime/dist.hpp): a parameter every
// rank of a group passes its own copy of (Group::empty_symmetric), each copy
// addressable by the other ranks through T::peer. Element access and tile
// ops on the returned buffer reach this rank's copy. Extents as match_buffer's.
TileBuffer match_symmetric(const Handle& h, Extents shape, DType dtype, Name name = {},
                           Loc loc = Loc::current());
// Rank `rank`'s copy of symmetric parameter `x`, as a buffer of x's shape and
// dtype, from this statement to the end of the enclosing scope. Loads, stores
// and tile copies on it go to the peer's memory (over NVLink on GPUs; another
// thread's memory for host ranks). The rank must be below the group's size:
// the checked mode reports one that is not.
TileBuffer peer(const TileBuffer& x, Value rank, Name name = {}, Loc loc = Loc::current());
namespace dist {
// Release/acquire flags between ranks (and between CTAs), at system scope.
// `flag` is one u32 element of a global buffer (mostly a symmetric buffer's,
// or a peer's through T::peer). signal stores `value` with release
// semantics: every write this thread made, or observed before (after a
// cta_sync, the whole CTA's), is visible to a thread that acquires it.
// signal_add adds `value` (red.release.sys.add). wait_until waits until the
// flag, read with acquire semantics, is >= `value` modulo 2^32 (the signed
// difference flag - value is >= 0): flags are counters that only grow (an
// epoch or step count per use) and may wrap, so no reset is ever needed.
// docs/dist_kernels.md states the memory model.
void signal(Value flag, Value value, Loc loc = Loc::current());
void signal_add(Value flag, Value value, Loc loc = Loc::current());
void wait_until(Value flag, Value value, Loc loc = Loc::current());
}  // namespace dist
// A scalar parameter (an int or float passed at launch: alpha, a seed). An
// integer one may state facts that the kernel is specialized for (a row
// length that is a multiple of 8), checked at launch.
Var match_scalar(const Handle& h, DType dtype, Name name = {},
                 std::optional<DimFacts> facts = std::nullopt, Loc loc = Loc::current());
// An extent known at launch, bound from the shapes of the tensors that use it
// in T::match_buffer (they must agree), checked against `facts`.
Var dim(Name name = {}, DimFacts facts = {}, Loc loc = Loc::current());
TileBuffer alloc_buffer(Shape shape, DType dtype, MemScope scope,
                        std::optional<TileLayout> layout = std::nullopt, Name name = {},
                        Loc loc = Loc::current());

void device_entry(Loc loc = Loc::current());
// The kernel's buffers do not overlap in memory, as CUDA's __restrict__
// (TVM's "tir.noalias"): the compiler may then move a load ahead of a store
// to another buffer (the op library's broadcast kernels: +2-5% bandwidth on
// an H100). Each launch checks it: buffers whose bytes overlap, one of them
// written by the kernel, are a tx error naming both.
void no_alias(Loc loc = Loc::current());
// The grid: constants, or expressions known at launch (ceildiv(n, 256)).
IdVars cta_id(Extents extents, Name name = {}, Loc loc = Loc::current());
IdVars warpgroup_id(Shape extents, Name name = {}, Loc loc = Loc::current());
IdVars warp_id(Shape extents, Name name = {}, Loc loc = Loc::current());
IdVars lane_id(Shape extents, Name name = {}, Loc loc = Loc::current());
IdVars thread_id(Shape extents, Name name = {}, Loc loc = Loc::current());
IdVars warp_id_in_wg(Shape extents, Name name = {}, Loc loc = Loc::current());
IdVars thread_id_in_wg(Shape extents, Name name = {}, Loc loc = Loc::current());

LoopRange serial(Value extent, Name name = {}, Loc loc = Loc::current());
LoopRange serial(Value min, Value extent, Name name, Loc loc = Loc::current());
LoopRange unroll(Value extent, Name name = {}, Loc loc = Loc::current());

IfBuilder if_(Value cond, const std::function<void()>& then_body, Loc loc = Loc::current());
// A profiled region: with profiling on (CompileOptions::profile,
// TX_PROFILE=1) each warp that runs `body` records when it enters and
// leaves it, and the launch's trace (Kernel::last_profile) has a slice per
// warp and pass; off, the kernel is the same code as without the region.
//   T::profile("producer load", [&] { Tx::warpgroup::copy_async(...); });
void profile(const std::string& name, const std::function<void()>& body, Loc loc = Loc::current());

// Binds a value to a new variable (a LetStmt over the rest of the block).
Var let(Value value, Name name = {}, Loc loc = Loc::current());

namespace cuda {
void cta_sync(Loc loc = Loc::current());
void warpgroup_sync(Loc loc = Loc::current());
void warp_sync(Loc loc = Loc::current());
// Asynchronous-copy groups (Tx::<scope>::copy_async issues copies and never
// waits): commit_group closes the group of this thread's copies issued since
// the last commit; wait_group(n) waits until at most n of its committed
// groups are pending. Another thread's copies are visible after its wait and
// a barrier (T::cuda::cta_sync). No-ops on the host, where copies complete
// when issued.
void commit_group(Loc loc = Loc::current());
void wait_group(int pending, Loc loc = Loc::current());
// TMA stores (Tx::<scope>::copy_async(global, shared), sm_90: the scope's
// thread 0 issues each copy as one bulk group): tma_store_wait(n) returns
// when at most n of this thread's store groups still read shared memory --
// call it (then the scope's barrier) before writing a stored tile again.
// The kernel's end waits for all of them. No-op on the host and in threads
// that issued no store.
void tma_store_wait(int pending = 0, Loc loc = Loc::current());

// mbarriers (sm_90): `bar` is an element of a shared u64 buffer,
// T::alloc_buffer({n}, u64, scope::shared). A barrier's phase completes when
// `count` arrivals have happened and every byte it expects (expect_tx, added
// by Tx::...::copy_async with barrier=) has landed; wait(bar, parity) returns
// once the phase of that parity has completed (a fresh barrier's phase is
// 0: waiting on parity 1 returns at once). Each thread that calls arrive
// counts as one arrival. On the host the kernel runs with a fiber per
// thread; the checked mode (TX_CHECK=1) follows every phase (a read of TMA
// bytes before their phase completes, a phase that never completes, ...:
// docs/reliability.md).
void mbarrier_init(Value bar, Value count, Loc loc = Loc::current());
void mbarrier_arrive(Value bar, Loc loc = Loc::current());
void mbarrier_expect_tx(Value bar, Value bytes, Loc loc = Loc::current());
void mbarrier_wait(Value bar, Value parity, Loc loc = Loc::current());
// fence.mbarrier_init: initialized barriers visible to the other threads
// (then a CTA barrier) and to the TMA unit.
void fence_barrier_init(Loc loc = Loc::current());
// fence.proxy.async: this thread's ordinary shared-memory writes visible to
// the asynchronous proxy (TMA stores, wgmma operands written by threads).
void fence_proxy_async(Loc loc = Loc::current());
// Warpgroup MMA ordering (gemm/wgmma emits these itself; a kernel places them
// only around accumulators it touches between asynchronous MMAs).
void wgmma_fence(Loc loc = Loc::current());
void wgmma_commit(Loc loc = Loc::current());
void wgmma_wait(int pending, Loc loc = Loc::current());
// The same, then the accumulator's registers are fenced: the code that reads
// them after the wait stays after it (a kernel's own final wait, after
// gemm calls with pending = 1).
void wgmma_wait(int pending, const TileBuffer& accumulator, Loc loc = Loc::current());
// The same, and the registers of the f32 tile `after` are computed before
// the wait: the work that is meant to overlap the MMAs in flight (a softmax
// between issuing P V and waiting for it) stays ahead of the wait. Without
// it ptxas may hoist the wait above register-only code, which it does not
// see as blocking, and the overlap is lost (a predicated store a register,
// T.ptx.keep_before, pins each value).
struct WaitOrder {
  TileBuffer after;
};
void wgmma_wait(int pending, const TileBuffer& accumulator, WaitOrder order,
                Loc loc = Loc::current());
// setmaxnreg: every thread of the calling warpgroup gives registers back
// (decrease_registers: a producer that only issues copies) or takes them
// (increase_registers: a consumer holding large accumulators). A count in
// [24, 256], a multiple of 8; all the warpgroup's threads must call it.
void increase_registers(int count, Loc loc = Loc::current());
void decrease_registers(int count, Loc loc = Loc::current());
// bar.sync / bar.arrive on hardware barrier `id` for `threads` threads
// (whole warps). Kernels use T::named_barriers, which hands out ids that do
// not collide with cta_sync's and warpgroup_sync's.
void named_barrier_sync(Value id, int threads, Loc loc = Loc::current());
void named_barrier_arrive(Value id, int threads, Loc loc = Loc::current());
}  // namespace cuda

// Named barriers: hardware barriers that order groups of warps against each
// other without involving the rest of the CTA. sync(i) waits until `threads`
// threads have arrived at barrier i (the caller among them); arrive(i)
// counts the caller and goes on. The pingpong schedule of two consumer
// warpgroups is two of them: each warpgroup waits for its turn at the tensor
// cores, issues its MMAs, then lets the other one go:
//
//   auto turn = T::named_barriers({.count = 2, .threads = 256});
//   turn.sync(me);            // my turn (the other warpgroup arrived)
//   Tx::warpgroup::gemm(...);
//   turn.arrive(1 - me);      // the other's turn
//
// Every thread of a participating warp takes part (a barrier counts warps).
// Ids are handed out from 15 down; barrier 0 is T::cuda::cta_sync's and
// 1 + w warpgroup w's (T::cuda::warpgroup_sync, w < 8), so a kernel has
// kMaxNamedBarriers = 7 of its own (ids 9 to 15), whatever its size.
inline constexpr int kMaxNamedBarriers = 7;
struct NamedBarriersConfig {
  int count = 1;    // barriers (indexed 0 .. count - 1)
  int threads = 0;  // threads that arrive at each one per phase
};
class NamedBarriers {
 public:
  NamedBarriers(int base, int count, int threads) : base_(base), count_(count), threads_(threads) {}
  int count() const { return count_; }
  int threads() const { return threads_; }
  // The hardware id of barrier i.
  Expr id(Value i, Loc loc = Loc::current()) const;
  void sync(Value i = Value(0), Loc loc = Loc::current()) const;
  void arrive(Value i = Value(0), Loc loc = Loc::current()) const;

 private:
  int base_, count_, threads_;
};
NamedBarriers named_barriers(NamedBarriersConfig config, Loc loc = Loc::current());

// A multi-stage pipeline over mbarriers: `stages` shared buffers, each
// guarded by a `full` barrier (the producer's copies landed) and an `empty`
// one (the consumers are done reading). Stage positions are running counts
// `it` (0, 1, 2, ...) of the stages a side has handled: stage it % stages,
// phase (it / stages) % 2 -- the (stage, phase) cursor, computed rather than
// stored, so persistent loops need no loop-carried state.
//
//   auto pipe = T::pipeline({.stages = 4, .consumer_arrivals = 2});
//   producer: pipe.producer_acquire(it);
//             Tx::warpgroup::copy_async(As[...], A[...], {.barrier = pipe.full(it)});
//             T::if_(tid_in_wg == 0, [&] { pipe.producer_commit(it); });
//   consumer: pipe.consumer_wait(it); ... T::if_(..., [&] { pipe.consumer_release(it); });
struct PipelineConfig {
  int stages = 2;
  int producer_arrivals = 1;  // arrive calls that (with the bytes) fill a stage
  int consumer_arrivals = 1;  // arrive calls that release a stage
};
class Pipeline {
 public:
  Pipeline(TileBuffer full, TileBuffer empty, int stages)
      : full_(std::move(full)), empty_(std::move(empty)), stages_(stages) {}
  int stages() const { return stages_; }
  // The stage index of position `it`.
  Expr stage(Value it) const;
  // The barrier a producer's copies for position `it` complete on.
  BufferElem full(Value it, Loc loc = Loc::current()) const;
  BufferElem empty(Value it, Loc loc = Loc::current()) const;
  // Waits until the consumers released the stage of `it` (its previous use).
  void producer_acquire(Value it, Loc loc = Loc::current()) const;
  // One producer arrival on the stage's full barrier.
  void producer_commit(Value it, Loc loc = Loc::current()) const;
  // Waits until the stage of `it` is full.
  void consumer_wait(Value it, Loc loc = Loc::current()) const;
  // One consumer arrival on the stage's empty barrier.
  void consumer_release(Value it, Loc loc = Loc::current()) const;

 private:
  TileBuffer full_, empty_;
  int stages_;
};
// Allocates the barriers and initializes them (thread 0, then fences and a
// CTA barrier): call it where every thread of the CTA passes.
Pipeline pipeline(PipelineConfig config, Name name = {}, Loc loc = Loc::current());

// Output tiles of a tiles_m x tiles_n grid, in an order that shares operand
// panels in L2: groups of `group` tile rows, walked column by column inside
// a group (consecutive tiles share a B panel; a group's rows share A panels).
// `group` is clamped to gcd(group, tiles_m), so every group is whole.
// Persistent CTAs: with `ctas` > 0 the grid has min(ctas, tiles) CTAs and
// CTA c takes tiles c, c + ctas, c + 2 ctas, ... in rounds; 0 is one CTA per
// tile (one round).
//
//   auto sched = T::tile_scheduler({.tiles_m = M / BM, .tiles_n = N / BN, .ctas = 132});
//   auto cta = T::cta_id({sched.ctas()});
//   for (Var r : T::serial(sched.rounds(), "r")) {
//     auto tile = sched.tile(cta, r);  // tile.valid, tile.m, tile.n
//     T::if_(tile.valid, [&] { ... C[region(span(tile.m * BM, BM), span(tile.n * BN, BN))] ... });
//   }
struct TileSchedulerConfig {
  std::int64_t tiles_m = 1, tiles_n = 1;
  std::int64_t group = 8;  // tile rows per group
  std::int64_t ctas = 0;   // persistent CTAs (the SM count); 0: one CTA per tile
  // Tile rows from the last to the first: where later rows cost more (causal
  // attention, whose row block m attends to m + 1 key blocks), the longest
  // tiles are taken first and the short ones fill the last round.
  bool m_descending = false;
  // Mirrored pairs (causal attention): a CTA takes row tiles_m - 1 - j and
  // then row j of the same column back to back, so every pair costs the
  // same (tiles_m + 1 key blocks) and static rounds balance without taking
  // rows longest-first across all columns; pairs are numbered column by
  // column, so the pairs running at once span few columns (heads), whose
  // operands stay in L2. `group` and `m_descending` do not apply; rounds
  // come in twos (an odd tiles_m's middle row is a pair of one: its second
  // round is not valid).
  bool pairs = false;
};
// One round's tile of a CTA: `valid` is false past the last tile, where m and
// n stay clamped to the last tile (indices provably in range either way).
struct ScheduledTile {
  Var valid, m, n;
};
class TileScheduler {
 public:
  explicit TileScheduler(TileSchedulerConfig c);
  std::int64_t tiles() const { return c_.tiles_m * c_.tiles_n; }
  // Pairs of tiles (pairs = true): ceil(tiles_m / 2) per column.
  std::int64_t pair_count() const { return (c_.tiles_m + 1) / 2 * c_.tiles_n; }
  std::int64_t ctas() const { return ctas_; }      // the grid
  std::int64_t rounds() const { return rounds_; }  // tiles per CTA, at most
  std::int64_t group() const { return c_.group; }  // after clamping
  // The tile CTA `cta` takes in round `round` (three T::let bindings).
  ScheduledTile tile(Value cta, Value round = Value(0), Loc loc = Loc::current()) const;

 private:
  TileSchedulerConfig c_;
  std::int64_t ctas_ = 1, rounds_ = 1;
};
TileScheduler tile_scheduler(TileSchedulerConfig config, Loc loc = Loc::current());

}  // namespace T

// ------------------------------------------------------------ tile primitives
//
// Tx::<scope>::<op>(dst, srcs..., attrs). Unqualified Tx::<op> is thread scope.
// One builder per row of TX_TILE_OP_TABLE (tile_op_table.hpp) and scope; its
// parameters are the row's signature.

// A signature's builder; `kScope` is the namespace's execution scope.
#define TX_TILE_SIG_dst_src(NAME)                                                        \
  inline void NAME(::tx::TileOperand dst, ::tx::TileOperand src, ::tx::TileAttrs a = {}, \
                   ::tx::Loc loc = ::tx::Loc::current()) {                               \
    ::tx::detail::emit_tile(#NAME, kScope, {dst.region, src.region}, std::move(a), loc); \
  }
#define TX_TILE_SIG_dst(NAME)                                                \
  inline void NAME(::tx::TileOperand dst, ::tx::TileAttrs a = {},            \
                   ::tx::Loc loc = ::tx::Loc::current()) {                   \
    ::tx::detail::emit_tile(#NAME, kScope, {dst.region}, std::move(a), loc); \
  }
#define TX_TILE_SIG_dst_value(NAME)                                                       \
  inline void NAME(::tx::TileOperand dst, ::tx::Value value, ::tx::TileAttrs a = {},      \
                   ::tx::Loc loc = ::tx::Loc::current()) {                                \
    ::tx::detail::emit_tile(#NAME, kScope, {dst.region, value.value}, std::move(a), loc); \
  }
#define TX_TILE_SIG_dst_2(NAME)                                                             \
  inline void NAME(::tx::TileOperand dst, ::tx::TileOrScalar a, ::tx::TileOrScalar b,       \
                   ::tx::TileAttrs at = {}, ::tx::Loc loc = ::tx::Loc::current()) {         \
    ::tx::detail::emit_tile(#NAME, kScope, {dst.region, a.arg, b.arg}, std::move(at), loc); \
  }
#define TX_TILE_SIG_dst_3(NAME)                                                                    \
  inline void NAME(::tx::TileOperand dst, ::tx::TileOrScalar a, ::tx::TileOrScalar b,              \
                   ::tx::TileOrScalar c, ::tx::TileAttrs at = {},                                  \
                   ::tx::Loc loc = ::tx::Loc::current()) {                                         \
    ::tx::detail::emit_tile(#NAME, kScope, {dst.region, a.arg, b.arg, c.arg}, std::move(at), loc); \
  }
#define TX_TILE_SIG_d_a_b(NAME)                                                                 \
  inline void NAME(::tx::TileOperand d, ::tx::TileOperand a, ::tx::TileOperand b,               \
                   ::tx::TileAttrs at = {}, ::tx::Loc loc = ::tx::Loc::current()) {             \
    ::tx::detail::emit_tile(#NAME, kScope, {d.region, a.region, b.region}, std::move(at), loc); \
  }
#define TX_TILE_BUILDER(NAME, FAMILY, SIG, ...) TX_TILE_SIG_##SIG(NAME)

// The builders of a table of rows (TX_TILE_OP_TABLE's form), in namespaces
// thread, warp, warpgroup and cta of the enclosing one.
#define TX_DEFINE_TILE_BUILDERS(TABLE)                                  \
  namespace thread {                                                    \
  inline constexpr ::tx::ExecScope kScope = ::tx::ExecScope::thread;    \
  TABLE(TX_TILE_BUILDER)                                                \
  }                                                                     \
  namespace warp {                                                      \
  inline constexpr ::tx::ExecScope kScope = ::tx::ExecScope::warp;      \
  TABLE(TX_TILE_BUILDER)                                                \
  }                                                                     \
  namespace warpgroup {                                                 \
  inline constexpr ::tx::ExecScope kScope = ::tx::ExecScope::warpgroup; \
  TABLE(TX_TILE_BUILDER)                                                \
  }                                                                     \
  namespace cta {                                                       \
  inline constexpr ::tx::ExecScope kScope = ::tx::ExecScope::cta;       \
  TABLE(TX_TILE_BUILDER)                                                \
  }

namespace Tx {

TX_DEFINE_TILE_BUILDERS(TX_TILE_OP_TABLE)
using namespace thread;  // NOLINT: Tx::sum(...) is Tx::thread::sum(...)

}  // namespace Tx

}  // namespace tx
