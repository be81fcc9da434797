// Random tile programs for the fuzzer (fuzz/tile_fuzzer.cpp) and its
// regression suite (test/test_fuzz_corpus.cpp).
//
//   bytes --generate--> Program --build--> tx::PrimFunc --lower, compile, run on the host-->
//   Program --Model--> the expected contents of every global buffer
//
// A Program is plain data: a CTA size, buffers (global / shared / local, f32
// f16 u8 i32, 1-2-D, layouts with laneid / tid_in_wg / tx / warpid axes,
// replicas and offsets) and tile ops (copy, zero, fill, cast, the unary and
// binary elementwise ops, fma, sum / max / min) at thread / warp / warpgroup /
// cta scope, on regions that may be dynamic (group id * extent), misaligned
// or out of bounds, sometimes under a guard on the thread, lane, warp or
// warpgroup id. Every op that touches shared or global memory is followed by
// a CTA barrier, so the result of a valid program does not depend on how
// threads are scheduled.
//
// The Model is written from the tile-op semantics alone (not from tx's
// lowering): it evaluates each op over logical coordinates for every active
// group of the op's scope -- copy assigns regions element by element (row
// major, extent-1 dimensions ignored), elementwise ops broadcast NumPy-style,
// reductions fold the given (or inferred) axes -- in double precision, and
// carries an error bound per element (one rounding per f32 operation, a few
// for exp/exp2/silu, one storage rounding per f16 store) so that the host's
// f32 results can be compared without a guessed tolerance. Where each element
// lives is computed from the layouts by an independent implementation of the
// layout rules of DESIGN.md section 5 (shards split the row-major index
// innermost last, replicas add every combination, offsets shift). Values that
// depend on scheduling (two groups writing one address with different values,
// a read of an address another group writes in the same op), on undefined
// inputs (poisoned outputs, uninitialized shared or register memory) or on
// undefined arithmetic (i32 overflow, NaN, Inf, an out-of-range float->int
// cast) are marked undefined and not compared.
//
// Outcomes (run_program): a program must either be rejected with a tx::Error,
// or lower, generate CUDA and -- where the host JIT is available -- run on
// the host and match the Model. Anything else is a finding: another exception
// type, tx accepting a program the tile-op rules reject (dtype or extent
// mismatch, an op needing a float dtype on integers, a group split by a guard,
// an out-of-bounds region), a mismatch, or a write outside what the program
// writes.
//
// The byte format is "whatever generate() reads": each decision takes a byte
// (0 when the input is exhausted, which always picks the plain choice).
// Changing the generator changes what every corpus file means: re-minimize
// fuzz/corpus afterwards (fuzz/run.sh --merge).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fuzz_common.hpp"
#include "tx/tx.hpp"

namespace txfuzz {

using tx::Axis;
using tx::DType;
using tx::ExecScope;
using tx::MemScope;
using Shape = std::vector<std::int64_t>;

// Bytes (the input as decisions) and avoided(): fuzz_common.hpp.

// ---------------------------------------------------------------------- program

struct LayoutIter {
  std::int64_t extent = 1;
  std::int64_t stride = 1;
  Axis axis = Axis::m;
};

struct LayoutSpec {
  std::vector<LayoutIter> shard;
  std::vector<LayoutIter> replica;
  std::array<std::int64_t, tx::kNumAxes> offset{};
};

// The group of threads that owns a local buffer (and the scope its ops use).
enum class Family { thread, warp, warpgroup, cta };

struct Buf {
  std::string name;
  MemScope scope = MemScope::global;
  DType dtype = tx::f32;
  Shape shape;
  std::optional<LayoutSpec> layout;  // none: row-major on memory
  bool poisoned = false;             // global: an output, NaN-poisoned before the launch
  Family family = Family::cta;       // local buffers
};

enum class IdVar { none, tid, lane, warp, wg };

struct RegionSpec {
  int buf = 0;
  Shape start, extent;
  int dyn_dim = -1;  // start[dyn_dim] += dyn_mult * value of dyn_var
  IdVar dyn_var = IdVar::none;
  std::int64_t dyn_mult = 0;
};

struct Arg {
  bool scalar = false;
  double value = 0;
  RegionSpec region;
};

struct Guard {
  IdVar var = IdVar::none;
  int cmp = 0;  // 0: ==, 1: <, 2: >=
  std::int64_t k = 0;
};

struct Op {
  std::string name;
  ExecScope scope = ExecScope::cta;
  std::vector<Arg> args;  // destination first
  std::optional<double> scale, bias;
  bool accum = false;
  std::vector<int> axes;
  Guard guard;
};

struct Program {
  int threads = 32;
  bool positive = true;  // float inputs in [0.25, 4) rather than [-4, 4)
  std::vector<Buf> bufs;
  std::vector<Op> ops;
};

inline std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto e : s) n *= e;
  return n;
}

inline int scope_size(ExecScope s, int threads) {
  switch (s) {
    case ExecScope::thread:
      return 1;
    case ExecScope::warp:
      return 32;
    case ExecScope::warpgroup:
      return 128;
    case ExecScope::cta:
      return threads;
  }
  return 1;
}

inline ExecScope family_scope(Family f) {
  switch (f) {
    case Family::thread:
      return ExecScope::thread;
    case Family::warp:
      return ExecScope::warp;
    case Family::warpgroup:
      return ExecScope::warpgroup;
    case Family::cta:
      return ExecScope::cta;
  }
  return ExecScope::cta;
}

// What an op is, from its row of the tile-op table (tx/tile_op_table.hpp).
inline const tx::TileOpDef* def_of(const std::string& n) { return tx::find_tile_op(n); }
// Elementwise (dst, src) ops that compute (not cast): sqrt, exp, ...
inline bool is_unary(const std::string& n) {
  const tx::TileOpDef* d = def_of(n);
  return d && d->family == "elementwise" && d->sig == tx::TileSig::dst_src && !d->converts();
}
inline bool is_binary(const std::string& n) {
  const tx::TileOpDef* d = def_of(n);
  return d && d->family == "elementwise" && d->sig == tx::TileSig::dst_2;
}
inline bool is_reduction(const std::string& n) {
  const tx::TileOpDef* d = def_of(n);
  return d && d->family == "reduction";
}
inline bool float_only(const std::string& n) {
  const tx::TileOpDef* d = def_of(n);
  return d && d->float_only();
}
inline bool commutative(const std::string& n) {
  const tx::TileOpDef* d = def_of(n);
  return d && d->commutative();
}

// ------------------------------------------------------------------- printing

inline const char* scope_name(ExecScope s) { return tx::exec_scope_name(s); }
inline const char* var_name(IdVar v) {
  switch (v) {
    case IdVar::none:
      return "";
    case IdVar::tid:
      return "tid";
    case IdVar::lane:
      return "lane";
    case IdVar::warp:
      return "warp";
    case IdVar::wg:
      return "wg";
  }
  return "?";
}

inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

inline std::string layout_str(const LayoutSpec& l) {
  auto iters = [](const std::vector<LayoutIter>& v) {
    std::string e = "{", s = "{";
    for (std::size_t i = 0; i < v.size(); ++i) {
      e += (i ? ", " : "") + std::to_string(v[i].extent);
      s += (i ? ", " : "") + std::to_string(v[i].stride);
      if (v[i].axis != Axis::m) s += std::string(" * ") + tx::axis_name(v[i].axis);
    }
    return e + "}, " + s + "}";
  };
  std::string out = "S(" + iters(l.shard) + ")";
  if (!l.replica.empty()) out += " + R(" + iters(l.replica) + ")";
  for (int a = 0; a < tx::kNumAxes; ++a)
    if (l.offset[a] != 0)
      out += " + offset(" + std::string(tx::axis_name(static_cast<Axis>(a))) + ": " +
             std::to_string(l.offset[a]) + ")";
  return out;
}

inline std::string region_str(const Program& p, const RegionSpec& r) {
  std::string out = p.bufs[static_cast<std::size_t>(r.buf)].name + "[";
  for (std::size_t d = 0; d < r.start.size(); ++d) {
    out += d ? ", " : "";
    std::string s = std::to_string(r.start[d]);
    if (static_cast<int>(d) == r.dyn_dim)
      s = std::string(var_name(r.dyn_var)) + " * " + std::to_string(r.dyn_mult) + " + " + s;
    out += s + " : +" + std::to_string(r.extent[d]);
  }
  return out + "]";
}

// The program as DSL-like text (for findings and for reading the corpus).
inline std::string describe(const Program& p) {
  std::ostringstream o;
  o << "threads " << p.threads << (p.positive ? ", positive inputs" : ", signed inputs") << "\n";
  for (const Buf& b : p.bufs) {
    o << "  " << b.name << ": " << tx::mem_scope_name(b.scope) << " " << b.dtype.short_name() << " "
      << shape_str(b.shape);
    if (b.layout) o << " " << layout_str(*b.layout);
    if (b.scope == MemScope::global) o << (b.poisoned ? " (output)" : " (input)");
    o << "\n";
  }
  for (const Op& op : p.ops) {
    o << "  ";
    if (op.guard.var != IdVar::none)
      o << "if (" << var_name(op.guard.var)
        << (op.guard.cmp == 0   ? " == "
            : op.guard.cmp == 1 ? " < "
                                : " >= ")
        << op.guard.k << ") ";
    o << "Tx." << scope_name(op.scope) << "." << op.name << "(";
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      o << (i ? ", " : "");
      if (op.args[i].scalar)
        o << op.args[i].value;
      else
        o << region_str(p, op.args[i].region);
    }
    if (op.scale) o << ", scale=" << *op.scale;
    if (op.bias) o << ", bias=" << *op.bias;
    if (op.accum) o << ", accum";
    if (!op.axes.empty()) {
      o << ", axes={";
      for (std::size_t i = 0; i < op.axes.size(); ++i) o << (i ? "," : "") << op.axes[i];
      o << "}";
    }
    o << ")\n";
  }
  return o.str();
}

// ------------------------------------------------------------------ generator

namespace gen_detail {

inline std::vector<std::int64_t> prime_factors(std::int64_t n) {
  std::vector<std::int64_t> f;
  for (std::int64_t q = 2; q * q <= n; ++q)
    while (n % q == 0) {
      f.push_back(q);
      n /= q;
    }
  if (n > 1) f.push_back(n);
  return f;
}

inline bool pow2(std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

struct Digit {
  std::int64_t extent;
  Axis axis = Axis::m;
  std::int64_t stride = 0;
};

// A layout for `shape` whose thread iters belong to family `f`: each
// dimension is split into digits (outer first); power-of-two digits are given
// to the family's thread axes while they fit, the rest of each axis becomes
// a replica, the other digits are memory with compact strides in a random
// order. Rarely: padding, an offset, or a deliberately wrong layout.
inline LayoutSpec random_layout(Bytes& in, const Shape& shape, Family f, int threads, bool local) {
  std::vector<Digit> digits;
  for (std::int64_t e : shape) {
    std::vector<std::int64_t> pf = prime_factors(e);
    std::vector<std::int64_t> ds;
    for (std::int64_t q : pf) {
      if (ds.empty() || (ds.size() < 3 && in.chance(30)))
        ds.push_back(q);
      else
        ds[static_cast<std::size_t>(in.below(static_cast<int>(ds.size())))] *= q;
    }
    for (auto d : ds) digits.push_back({d});
  }
  if (digits.empty()) digits.push_back({1});

  std::vector<std::pair<Axis, std::int64_t>> slots;
  switch (f) {
    case Family::thread:
      break;
    case Family::warp:
      slots = {{Axis::laneid, 32}};
      break;
    case Family::warpgroup:
      if (in.chance(40))
        slots = {{Axis::laneid, 32}, {Axis::wid_in_wg, 4}};
      else
        slots = {{Axis::tid_in_wg, 128}};
      break;
    case Family::cta:
      if (threads >= 64 && in.chance(40))
        slots = {{Axis::laneid, 32}, {Axis::warpid, threads / 32}};
      else
        slots = {{Axis::tx, threads}};
      break;
  }
  LayoutSpec l;
  for (auto [axis, cap] : slots) {
    // Digits on this axis, outer first, with a product dividing cap.
    std::vector<std::size_t> mine;
    std::int64_t cover = 1;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      Digit& d = digits[i];
      if (d.axis != Axis::m || !pow2(d.extent) || d.extent == 1) continue;
      if (cap % (cover * d.extent) != 0 || in.chance(15)) continue;
      d.axis = axis;
      cover *= d.extent;
      mine.push_back(i);
    }
    // Thread strides: a mixed radix over the axis, the replica (if any)
    // outermost or innermost.
    std::int64_t rep = cap / cover;
    bool rep_inner = rep > 1 && in.chance(35);
    std::int64_t s = rep_inner ? rep : 1;
    std::vector<std::size_t> order(mine.rbegin(), mine.rend());  // inner first
    if (order.size() == 2 && in.chance(25)) std::swap(order[0], order[1]);
    for (std::size_t i : order) {
      digits[i].stride = s;
      s *= digits[i].extent;
    }
    if (rep > 1) l.replica.push_back({rep, rep_inner ? 1 : cover, axis});
  }
  // Memory strides: compact, row-major by default, sometimes permuted or padded.
  std::vector<std::size_t> mem;
  for (std::size_t i = 0; i < digits.size(); ++i)
    if (digits[i].axis == Axis::m) mem.push_back(i);
  std::vector<std::size_t> order(mem.rbegin(), mem.rend());  // inner first
  if (order.size() >= 2 && in.chance(25)) std::swap(order[0], order[order.size() - 1]);
  std::int64_t s = 1;
  for (std::size_t i : order) {
    digits[i].stride = s;
    s *= digits[i].extent;
    if (in.chance(8)) s += 1 + in.below(3);  // padding
  }
  for (const Digit& d : digits) l.shard.push_back({d.extent, d.stride, d.axis});
  // A memory offset: a valid shift of the storage.
  if (in.chance(6) && !(local && avoided("local-moffset"))) l.offset[0] = 1 + in.below(4);
  // Rarely wrong on purpose: tx must reject or handle these.
  if (in.chance(3)) {
    switch (in.below(4)) {
      case 0:
        l.shard.back().extent *= 2;
        break;  // covers too many elements
      case 1:
        l.shard.back().stride = 0;
        break;  // aliasing storage
      case 2:
        if (f != Family::thread) l.offset[static_cast<int>(slots[0].first)] = 1 + in.below(8);
        break;
      default:
        l.replica.push_back({2, 1, Axis::m});
        break;  // a replica on memory
    }
  }
  return l;
}

}  // namespace gen_detail

class Generator {
 public:
  explicit Generator(Bytes& in) : in_(in) {}

  Program run() {
    static const int kThreads[] = {32, 64, 128, 256};
    p_.threads = kThreads[in_.below(4)];
    p_.positive = !in_.chance(30);
    base_ = pick_dtype();
    load_stage();
    while (!in_.exhausted() && p_.ops.size() < 10 && p_.bufs.size() < 12) {
      switch (in_.below(8)) {
        case 0:
          load_stage();
          break;
        case 1:
        case 2:
          elementwise_stage();
          break;
        case 3:
          reduction_stage();
          break;
        case 4:
          store_stage();
          break;
        case 5:
          move_stage();
          break;
        case 6:
          fill_stage();
          break;
        default:
          cast_stage();
          break;
      }
    }
    // Every written buffer that is not global goes out (at most three).
    int stores = 0;
    for (std::size_t i = 0; i < p_.bufs.size() && stores < 3; ++i)
      if (p_.bufs[i].scope != MemScope::global && written_[i] && !stored_[i]) {
        store(static_cast<int>(i));
        ++stores;
      }
    return p_;
  }

 private:
  Bytes& in_;
  Program p_;
  DType base_ = tx::f32;
  std::vector<bool> written_, stored_;
  // The id whose groups hold different data in this buffer (none: every
  // group holds the same).
  std::vector<IdVar> per_group_;

  DType pick_dtype() {
    static const DType kTypes[] = {tx::f32, tx::f16, tx::i32, tx::u8};
    return kTypes[in_.below(4)];
  }
  DType op_dtype() { return in_.chance(12) ? pick_dtype() : base_; }

  int add(Buf b, IdVar per_group = IdVar::none) {
    b.name = (b.scope == MemScope::global   ? (b.poisoned ? "out" : "in")
              : b.scope == MemScope::shared ? "sm"
                                            : "r") +
             std::to_string(p_.bufs.size());
    p_.bufs.push_back(std::move(b));
    written_.push_back(p_.bufs.back().scope == MemScope::global && !p_.bufs.back().poisoned);
    stored_.push_back(false);
    per_group_.push_back(per_group);
    return static_cast<int>(p_.bufs.size()) - 1;
  }

  Family pick_family() {
    static const Family kF[] = {Family::warp, Family::thread, Family::cta, Family::warpgroup};
    Family f = kF[in_.below(4)];
    if (f == Family::warpgroup && p_.threads < 128) f = Family::warp;
    return f;
  }
  int family_threads(Family f) const {
    switch (f) {
      case Family::thread:
        return 1;
      case Family::warp:
        return 32;
      case Family::warpgroup:
        return 128;
      case Family::cta:
        return p_.threads;
    }
    return 1;
  }
  int groups_of(IdVar v) const {
    switch (v) {
      case IdVar::tid:
        return p_.threads;
      case IdVar::lane:
        return 32;
      case IdVar::warp:
        return p_.threads / 32;
      case IdVar::wg:
        return std::max(1, p_.threads / 128);
      case IdVar::none:
        break;
    }
    return 1;
  }
  static IdVar group_var(ExecScope s) {
    switch (s) {
      case ExecScope::thread:
        return IdVar::tid;
      case ExecScope::warp:
        return IdVar::warp;
      case ExecScope::warpgroup:
        return IdVar::wg;
      case ExecScope::cta:
        break;
    }
    return IdVar::none;
  }

  // A 1-2-D shape of about `threads * regs` elements.
  Shape pick_shape(int threads) {
    static const std::int64_t kRegs[] = {4, 1, 2, 8, 3, 16, 6};
    std::int64_t regs = kRegs[in_.below(7)];
    std::int64_t total = threads * regs;
    if (total > 1024) total = 1024;
    if (in_.chance(10)) total = 1 + in_.below(40);  // odd sizes: replicas, fallbacks
    if (in_.chance(30)) return {total};
    // rows: a divisor of total, by default the thread count (one row per thread)
    std::vector<std::int64_t> divs;
    for (std::int64_t d = 1; d <= total; ++d)
      if (total % d == 0) divs.push_back(d);
    std::int64_t rows =
        total % threads == 0 && !in_.chance(40)
            ? threads
            : divs[static_cast<std::size_t>(in_.below(static_cast<int>(divs.size())))];
    return {rows, total / rows};
  }

  int new_local(const Shape& shape, Family f, DType t) {
    Buf b;
    b.scope = MemScope::local;
    b.dtype = t;
    b.shape = shape;
    b.family = f;
    b.layout = gen_detail::random_layout(in_, shape, f, p_.threads, true);
    return add(b);
  }
  int new_shared(const Shape& shape, DType t) {
    Buf b;
    b.scope = MemScope::shared;
    b.dtype = t;
    b.shape = shape;
    if (in_.chance(20))
      b.layout = gen_detail::random_layout(in_, shape, Family::thread, p_.threads, false);
    if (in_.chance(3))
      b.layout = gen_detail::random_layout(in_, shape, Family::warp, p_.threads, false);
    return add(b);
  }
  int new_global(const Shape& shape, DType t, bool output) {
    Buf b;
    b.scope = MemScope::global;
    b.dtype = t;
    b.shape = shape;
    b.poisoned = output;
    return add(b);
  }

  RegionSpec whole(int buf) const {
    RegionSpec r;
    r.buf = buf;
    r.extent = p_.bufs[static_cast<std::size_t>(buf)].shape;
    r.start.assign(r.extent.size(), 0);
    return r;
  }

  // Small perturbations of a region: misaligned or out-of-bounds starts,
  // a wrong extent.
  void mutate(RegionSpec& r) {
    if (!in_.chance(6)) return;
    std::size_t d = static_cast<std::size_t>(in_.below(static_cast<int>(r.start.size())));
    switch (in_.below(3)) {
      case 0:
        r.start[d] += 1 + in_.below(3);
        break;
      case 1:
        r.start[d] -= 1;
        break;
      default:
        r.extent[d] += in_.below(2) ? 1 : -1;
        break;
    }
    if (r.extent[d] < 1) r.extent[d] = 1;
  }

  Guard pick_guard(ExecScope s) {
    Guard g;
    if (!in_.chance(15)) return g;
    int warps = p_.threads / 32;
    switch (s) {
      case ExecScope::thread:
        g.var = in_.chance(30) ? IdVar::lane : IdVar::tid;
        g.cmp = in_.below(3);
        g.k = in_.below(g.var == IdVar::lane ? 32 : p_.threads);
        break;
      case ExecScope::warp:
        g.var = IdVar::warp;
        g.cmp = in_.below(3);
        g.k = in_.below(warps);
        break;
      case ExecScope::warpgroup:
        g.var = IdVar::wg;
        g.cmp = 0;
        g.k = in_.below(std::max(1, p_.threads / 128));
        break;
      case ExecScope::cta:
        break;  // only the finer guard below
    }
    if (in_.chance(10)) {  // a guard finer than the scope: rejected unless it keeps whole groups
      g.var = IdVar::tid;
      g.cmp = 1;
      g.k = 1 + in_.below(p_.threads);
    }
    return g;
  }

  ExecScope maybe_other_scope(ExecScope s) {
    if (!in_.chance(8)) return s;
    static const ExecScope kS[] = {ExecScope::thread, ExecScope::warp, ExecScope::warpgroup,
                                   ExecScope::cta};
    return kS[in_.below(4)];
  }

  ExecScope scope_for(int buf) {
    const Buf& b = p_.bufs[static_cast<std::size_t>(buf)];
    if (b.scope == MemScope::local) return family_scope(b.family);
    static const ExecScope kS[] = {ExecScope::cta, ExecScope::warp, ExecScope::thread,
                                   ExecScope::warpgroup};
    ExecScope s = kS[in_.below(4)];
    if (s == ExecScope::warpgroup && p_.threads < 128) s = ExecScope::cta;
    return s;
  }

  void push(Op op) {
    if (!op.args.empty() && !op.args[0].scalar)
      written_[static_cast<std::size_t>(op.args[0].region.buf)] = true;
    p_.ops.push_back(std::move(op));
  }

  // copy global -> dst at `scope`. Shared destinations may be loaded in
  // slabs (group g copies rows [g * slab, (g + 1) * slab)); local ones may get
  // different data per group (group g reads rows [g * E0, (g + 1) * E0) of a
  // taller global).
  void load_into(int dst, ExecScope scope, bool allow_per_group = true) {
    const Buf b = p_.bufs[static_cast<std::size_t>(dst)];
    Shape gshape = b.shape;
    RegionSpec dr = whole(dst);
    int groups = p_.threads / scope_size(scope, p_.threads);
    IdVar v = group_var(scope);
    bool slabs = b.scope == MemScope::shared && v != IdVar::none && groups > 1 &&
                 b.shape[0] % groups == 0 && !in_.chance(30);
    bool per_group = allow_per_group && b.scope == MemScope::local && v != IdVar::none &&
                     groups > 1 && groups * numel(b.shape) <= 4096 && !in_.chance(40);
    if (per_group) gshape[0] *= groups;
    std::int64_t extra = in_.chance(25) ? 1 + in_.below(8) : 0;
    gshape[0] += extra;
    int g = new_global(gshape, b.dtype, false);
    RegionSpec sr = whole(g);
    sr.extent = dr.extent;
    sr.start[0] = in_.below(static_cast<int>(extra + 1));
    if (slabs) {
      std::int64_t slab = b.shape[0] / groups;
      for (RegionSpec* r : {&dr, &sr}) {
        r->extent[0] = slab;
        r->dyn_dim = 0;
        r->dyn_var = v;
        r->dyn_mult = slab;
      }
    }
    if (per_group) {
      sr.dyn_dim = 0;
      sr.dyn_var = v;
      sr.dyn_mult = b.shape[0];
      per_group_[static_cast<std::size_t>(dst)] = v;
    }
    mutate(sr);
    Op op;
    op.name = "copy";
    op.scope = scope;
    op.args = {{false, 0, dr}, {false, 0, sr}};
    op.guard = pick_guard(scope);
    push(op);
  }

  void load_stage() {
    DType t = op_dtype();
    if (in_.chance(35)) {
      int s = new_shared(pick_shape(p_.threads), t);
      load_into(s, maybe_other_scope(scope_for(s)));
    } else {
      Family f = pick_family();
      int r = new_local(pick_shape(family_threads(f)), f, t);
      load_into(r, maybe_other_scope(family_scope(f)));
    }
  }

  // A written non-global buffer (or -1).
  int pick_written(std::optional<DType> t = std::nullopt) {
    std::vector<int> c;
    for (std::size_t i = 0; i < p_.bufs.size(); ++i)
      if (written_[i] && p_.bufs[i].scope != MemScope::global && (!t || p_.bufs[i].dtype == *t))
        c.push_back(static_cast<int>(i));
    if (c.empty()) return -1;
    return c[static_cast<std::size_t>(in_.below(static_cast<int>(c.size())))];
  }

  // A buffer like `b` (same scope, family, shape; the same layout or a fresh one).
  int like(int b, std::optional<DType> t = std::nullopt) {
    Buf nb = p_.bufs[static_cast<std::size_t>(b)];
    if (t) nb.dtype = *t;
    if (nb.scope == MemScope::local && in_.chance(20))
      nb.layout = gen_detail::random_layout(in_, nb.shape, nb.family, p_.threads, true);
    return add(nb, per_group_[static_cast<std::size_t>(b)]);
  }

  Arg scalar_for(DType t) {
    static const double kF[] = {0.5, 1.25, -2.0, 3.0, 0.75, -0.25, 2.5};
    Arg a;
    a.scalar = true;
    a.value = t.is_float() ? kF[in_.below(7)] : static_cast<double>(1 + in_.below(5));
    return a;
  }

  // An operand that broadcasts to `like_buf`'s shape: a scalar, a fresh
  // broadcast buffer ((1, C), (R, 1), (C,) or (1,)) with the same data in
  // every group, another written buffer like it, or the buffer itself.
  Arg operand(int like_buf, DType t) {
    const Buf lb = p_.bufs[static_cast<std::size_t>(like_buf)];
    if (in_.chance(15)) return scalar_for(t);
    if (in_.chance(35)) {
      Shape bs = lb.shape;
      switch (in_.below(3)) {
        case 0:
          bs.front() = 1;
          break;  // (1, C) / (1,)
        case 1:
          bs.back() = 1;
          break;  // (R, 1) / (1,)
        default:
          bs = bs.size() == 2 ? Shape{bs[1]} : Shape{1};
          break;
      }
      int nb;
      if (lb.scope == MemScope::shared || in_.chance(20)) {
        nb = new_shared(bs, t);
        load_into(nb, scope_for(nb), false);
      } else {
        // Held whole by every thread (no thread axes), loaded per thread.
        nb = new_local(bs, Family::thread, t);
        load_into(nb, ExecScope::thread, false);
      }
      Arg a;
      a.region = whole(nb);
      return a;
    }
    for (std::size_t i = 0; i < p_.bufs.size(); ++i) {
      const Buf& c = p_.bufs[i];
      if (written_[i] && c.scope == lb.scope && c.shape == lb.shape && c.dtype == t &&
          c.family == lb.family && static_cast<int>(i) != like_buf && in_.chance(50)) {
        Arg a;
        a.region = whole(static_cast<int>(i));
        return a;
      }
    }
    Arg a;
    a.region = whole(like_buf);
    return a;
  }

  void elementwise_stage() {
    int src = pick_written();
    if (src < 0) return load_stage();
    const Buf sb = p_.bufs[static_cast<std::size_t>(src)];
    // The elementwise ops the model (Model::fl / Model::in below) knows, in
    // the order the corpus was made with; their properties come from the
    // table. (An op of the table the model does not know is fuzzed by the
    // builder-call fuzzer.)
    static const char* kOps[] = {"add",     "sqrt", "mul",        "exp",  "sub",  "maximum",
                                 "minimum", "fdiv", "reciprocal", "silu", "exp2", "fma"};
    static const bool all_in_table = [] {
      for (const char* n : kOps)
        if (!def_of(n)) std::abort();  // the model names an op the table lacks
      return true;
    }();
    (void)all_in_table;
    std::string name = kOps[in_.below(12)];
    if (!sb.dtype.is_float() && float_only(name) && !in_.chance(10)) name = "add";
    int dst = in_.chance(45) ? src : like(src);
    Op op;
    op.name = name;
    op.scope = maybe_other_scope(scope_for(dst));
    RegionSpec dr = whole(dst);
    Arg a0;
    a0.region = whole(src);
    if (is_unary(name)) {
      op.args = {{false, 0, dr}, a0};
      if (in_.chance(30)) op.scale = in_.chance(50) ? 0.5 : 1.5;
      if (in_.chance(30)) op.bias = in_.chance(50) ? 0.25 : -0.5;
    } else if (name == "fma") {
      Arg b = operand(src, sb.dtype);
      Arg c = operand(src, sb.dtype);
      op.args = {{false, 0, dr}, a0, b, c};
    } else {
      Arg b = operand(src, sb.dtype);
      if (in_.chance(15)) std::swap(a0, b);  // a scalar or a broadcast on the left
      op.args = {{false, 0, dr}, a0, b};
    }
    for (Arg& a : op.args)
      if (!a.scalar) mutate(a.region);
    if (in_.chance(4) && is_binary(name)) op.scale = 2.0;  // binary ops take no scale
    op.guard = pick_guard(op.scope);
    push(op);
  }

  void fill_stage() {
    int dst = pick_written();
    if (dst < 0 || in_.chance(30)) {
      DType t = op_dtype();
      if (in_.chance(40)) {
        dst = new_shared(pick_shape(p_.threads), t);
      } else {
        Family f = pick_family();
        dst = new_local(pick_shape(family_threads(f)), f, t);
      }
    }
    const DType t = p_.bufs[static_cast<std::size_t>(dst)].dtype;
    Op op;
    op.name = in_.chance(30) ? "zero" : "fill";
    op.scope = maybe_other_scope(scope_for(dst));
    op.args = {{false, 0, whole(dst)}};
    if (op.name == "fill") op.args.push_back(scalar_for(t));
    mutate(op.args[0].region);
    op.guard = pick_guard(op.scope);
    push(op);
  }

  void cast_stage() {
    int src = pick_written();
    if (src < 0) return load_stage();
    DType t = pick_dtype();
    int dst = like(src, t);
    Op op;
    op.name = "cast";
    op.scope = maybe_other_scope(scope_for(dst));
    op.args = {{false, 0, whole(dst)}, {false, 0, whole(src)}};
    op.guard = pick_guard(op.scope);
    push(op);
  }

  // shared <-> local copies (register tiles loaded from / stored to shared
  // memory); a per-group local tile goes to its own rows of a taller shared one.
  void move_stage() {
    int src = pick_written();
    if (src < 0) return load_stage();
    const Buf sb = p_.bufs[static_cast<std::size_t>(src)];
    IdVar pg = per_group_[static_cast<std::size_t>(src)];
    Op op;
    op.name = "copy";
    if (sb.scope == MemScope::shared) {
      Family f = pick_family();
      int dst = new_local(sb.shape, f, sb.dtype);
      op.scope = family_scope(f);
      op.args = {{false, 0, whole(dst)}, {false, 0, whole(src)}};
    } else {
      Shape s = sb.shape;
      if (pg != IdVar::none) s[0] *= groups_of(pg);
      int dst = new_shared(s, sb.dtype);
      op.scope = family_scope(sb.family);
      RegionSpec dr = whole(dst);
      dr.extent = sb.shape;
      if (pg != IdVar::none) {
        dr.dyn_dim = 0;
        dr.dyn_var = pg;
        dr.dyn_mult = sb.shape[0];
      }
      op.args = {{false, 0, dr}, {false, 0, whole(src)}};
    }
    op.scope = maybe_other_scope(op.scope);
    mutate(op.args[1].region);
    op.guard = pick_guard(op.scope);
    push(op);
  }

  void store(int src) {
    const Buf sb = p_.bufs[static_cast<std::size_t>(src)];
    IdVar pg = per_group_[static_cast<std::size_t>(src)];
    Shape gshape = sb.shape;
    if (pg != IdVar::none) gshape[0] *= groups_of(pg);
    std::int64_t extra = in_.chance(20) ? 1 + in_.below(8) : 0;
    gshape[0] += extra;
    int g = new_global(gshape, sb.dtype, true);
    RegionSpec dr = whole(g);
    dr.extent = sb.shape;
    dr.start[0] = in_.below(static_cast<int>(extra + 1));
    if (pg != IdVar::none) {
      dr.dyn_dim = 0;
      dr.dyn_var = pg;
      dr.dyn_mult = sb.shape[0];
    }
    Op op;
    op.name = "copy";
    op.scope = maybe_other_scope(scope_for(src));
    op.args = {{false, 0, dr}, {false, 0, whole(src)}};
    mutate(op.args[0].region);
    op.guard = in_.chance(50) ? Guard{} : pick_guard(op.scope);
    push(op);
    stored_[static_cast<std::size_t>(src)] = true;
  }

  void store_stage() {
    int src = pick_written();
    if (src < 0) return load_stage();
    store(src);
  }

  void reduction_stage() {
    static const char* kR[] = {"sum", "max", "min"};
    Op op;
    op.name = kR[in_.below(3)];
    op.accum = in_.chance(30);
    DType t = op_dtype();
    int src = -1, dst = -1;
    switch (in_.below(4)) {
      case 0: {  // warp shuffle: (A, B, k), lane = B * a + b; reduce b, a, the registers, or a and
                 // b
        static const std::int64_t kA[] = {4, 1, 2, 8, 16, 32};
        std::int64_t A = kA[in_.below(6)], B = 32 / A;
        std::int64_t k = 1 + in_.below(6);
        Buf sb;
        sb.scope = MemScope::local;
        sb.family = Family::warp;
        sb.dtype = t;
        sb.shape = {A, B, k};
        sb.layout =
            LayoutSpec{{{A, B, Axis::laneid}, {B, 1, Axis::laneid}, {k, 1, Axis::m}}, {}, {}};
        src = add(sb);
        load_into(src, ExecScope::warp);
        Buf db = sb;
        switch (in_.below(4)) {
          case 0:
            db.shape = {A, k};
            db.layout =
                LayoutSpec{{{A, B, Axis::laneid}, {k, 1, Axis::m}}, {{B, 1, Axis::laneid}}, {}};
            op.axes = {1};
            break;
          case 1:
            db.shape = {B, k};
            db.layout =
                LayoutSpec{{{B, 1, Axis::laneid}, {k, 1, Axis::m}}, {{A, B, Axis::laneid}}, {}};
            op.axes = {0};
            break;
          case 2:
            db.shape = {A, B};
            db.layout = LayoutSpec{{{A, B, Axis::laneid}, {B, 1, Axis::laneid}}, {}, {}};
            op.axes = {2};
            break;
          default:
            db.shape = {k};
            db.layout = LayoutSpec{{{k, 1, Axis::m}}, {{32, 1, Axis::laneid}}, {}};
            op.axes = {0, 1};
            break;
        }
        if (in_.chance(30)) op.axes.clear();  // inferred from the extents
        dst = add(db, per_group_[static_cast<std::size_t>(src)]);
        op.scope = ExecScope::warp;
        break;
      }
      case 1: {  // thread-private registers
        Shape s = {1 + in_.below(8), 1 + in_.below(8)};
        src = new_local(s, Family::thread, t);
        load_into(src, ExecScope::thread);
        int ax = in_.below(2);
        dst = new_local({s[static_cast<std::size_t>(1 - ax)]}, Family::thread, t);
        per_group_[static_cast<std::size_t>(dst)] = per_group_[static_cast<std::size_t>(src)];
        op.axes = {ax};
        op.scope = ExecScope::thread;
        break;
      }
      default: {  // shared, any scope (cta when accumulating: one group folds once)
        src = pick_written(t);
        if (src < 0 || p_.bufs[static_cast<std::size_t>(src)].scope != MemScope::shared) {
          Shape s = pick_shape(p_.threads);
          if (s.size() == 1 && in_.chance(50)) {
            std::int64_t c = std::gcd<std::int64_t>(s[0], 8);
            s = {s[0] / c, c};
          }
          src = new_shared(s, t);
          load_into(src, scope_for(src));
        }
        Shape s = p_.bufs[static_cast<std::size_t>(src)].shape;
        Shape ds;
        int ax = in_.below(static_cast<int>(s.size()));
        bool both = s.size() == 2 && in_.chance(20);
        bool keep = in_.chance(30);
        for (std::size_t d = 0; d < s.size(); ++d) {
          bool red = both || static_cast<int>(d) == ax;
          if (red && keep) ds.push_back(1);
          if (!red) ds.push_back(s[d]);
        }
        if (ds.empty()) ds = {1};
        op.axes = both ? std::vector<int>{0, 1} : std::vector<int>{ax};
        if (keep && in_.chance(40)) op.axes.clear();
        if (!both && in_.chance(10)) op.axes = {ax - static_cast<int>(s.size())};  // negative axis
        dst = new_shared(ds, t);
        op.scope = op.accum && !in_.chance(20) ? ExecScope::cta : scope_for(dst);
        break;
      }
    }
    if (op.accum) {
      load_into(dst, op.scope, false);
      per_group_[static_cast<std::size_t>(dst)] = per_group_[static_cast<std::size_t>(src)];
    }
    op.args = {{false, 0, whole(dst)}, {false, 0, whole(src)}};
    if (in_.chance(5)) op.axes = {5};  // out of range
    op.scope = maybe_other_scope(op.scope);
    op.guard = pick_guard(op.scope);
    push(op);
  }
};

inline Program generate(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  return Generator(in).run();
}

// -------------------------------------------------------------------- builder

namespace build_detail {

inline tx::TileLayout to_layout(const LayoutSpec& l) {
  auto conv = [](const std::vector<LayoutIter>& v) {
    std::vector<tx::Iter> out;
    for (const LayoutIter& i : v) out.push_back({i.extent, i.stride, i.axis});
    return out;
  };
  return tx::TileLayout(conv(l.shard), conv(l.replica), l.offset);
}

struct Ids {
  tx::Var tid, lane, warp, wg;
  bool has_wg = false;
  tx::Expr get(IdVar v) const {
    switch (v) {
      case IdVar::tid:
        return tid;
      case IdVar::lane:
        return lane;
      case IdVar::warp:
        return warp;
      case IdVar::wg:
        return has_wg ? tx::Expr(wg) : tx::Expr(0);
      case IdVar::none:
        break;
    }
    return tx::Expr(0);
  }
};

inline tx::BufferRegion region(const std::vector<tx::TileBuffer>& bufs, const RegionSpec& r,
                               const Ids& ids) {
  tx::Region reg;
  for (std::size_t d = 0; d < r.start.size(); ++d) {
    if (static_cast<int>(d) == r.dyn_dim) {
      tx::Expr s = ids.get(r.dyn_var) * static_cast<int>(r.dyn_mult) + static_cast<int>(r.start[d]);
      reg.slices.push_back(tx::Slice(s, r.extent[d]));
    } else {
      reg.slices.push_back(tx::Slice(r.start[d], r.start[d] + r.extent[d]));
    }
  }
  return bufs[static_cast<std::size_t>(r.buf)][reg];
}

#define TXFUZZ_SCOPED(SCOPE, CALL) \
  switch (SCOPE) {                 \
    case ExecScope::thread:        \
      tx::Tx::thread::CALL;        \
      break;                       \
    case ExecScope::warp:          \
      tx::Tx::warp::CALL;          \
      break;                       \
    case ExecScope::warpgroup:     \
      tx::Tx::warpgroup::CALL;     \
      break;                       \
    case ExecScope::cta:           \
      tx::Tx::cta::CALL;           \
      break;                       \
  }

inline void emit_op(const Op& op, const std::vector<tx::TileBuffer>& bufs, const Ids& ids) {
  auto reg = [&](std::size_t i) { return region(bufs, op.args[i].region, ids); };
  auto tos = [&](std::size_t i) -> tx::TileOrScalar {
    if (op.args[i].scalar) return tx::TileOrScalar(op.args[i].value);
    return tx::TileOrScalar(reg(i));
  };
  tx::TileAttrs at;
  if (op.scale) at.scale = tx::Expr(*op.scale);
  if (op.bias) at.bias = tx::Expr(*op.bias);
  at.accum = op.accum;
  at.axes = op.axes;
  const std::string& n = op.name;
  ExecScope s = op.scope;
  if (n == "copy") {
    TXFUZZ_SCOPED(s, copy(reg(0), reg(1), at))
  } else if (n == "zero") {
    TXFUZZ_SCOPED(s, zero(reg(0), at))
  } else if (n == "fill") {
    TXFUZZ_SCOPED(s, fill(reg(0), tx::Expr(op.args[1].value), at))
  } else if (n == "cast") {
    TXFUZZ_SCOPED(s, cast(reg(0), reg(1), at))
  } else if (n == "sqrt") {
    TXFUZZ_SCOPED(s, sqrt(reg(0), reg(1), at))
  } else if (n == "exp") {
    TXFUZZ_SCOPED(s, exp(reg(0), reg(1), at))
  } else if (n == "exp2") {
    TXFUZZ_SCOPED(s, exp2(reg(0), reg(1), at))
  } else if (n == "reciprocal") {
    TXFUZZ_SCOPED(s, reciprocal(reg(0), reg(1), at))
  } else if (n == "silu") {
    TXFUZZ_SCOPED(s, silu(reg(0), reg(1), at))
  } else if (n == "add") {
    TXFUZZ_SCOPED(s, add(reg(0), tos(1), tos(2), at))
  } else if (n == "sub") {
    TXFUZZ_SCOPED(s, sub(reg(0), tos(1), tos(2), at))
  } else if (n == "mul") {
    TXFUZZ_SCOPED(s, mul(reg(0), tos(1), tos(2), at))
  } else if (n == "fdiv") {
    TXFUZZ_SCOPED(s, fdiv(reg(0), tos(1), tos(2), at))
  } else if (n == "maximum") {
    TXFUZZ_SCOPED(s, maximum(reg(0), tos(1), tos(2), at))
  } else if (n == "minimum") {
    TXFUZZ_SCOPED(s, minimum(reg(0), tos(1), tos(2), at))
  } else if (n == "fma") {
    TXFUZZ_SCOPED(s, fma(reg(0), tos(1), tos(2), tos(3), at))
  } else if (n == "sum") {
    TXFUZZ_SCOPED(s, sum(reg(0), reg(1), at))
  } else if (n == "max") {
    TXFUZZ_SCOPED(s, max(reg(0), reg(1), at))
  } else if (n == "min") {
    TXFUZZ_SCOPED(s, min(reg(0), reg(1), at))
  }
}
#undef TXFUZZ_SCOPED

inline bool touches_memory(const Program& p, const Op& op) {
  for (const Arg& a : op.args)
    if (!a.scalar && p.bufs[static_cast<std::size_t>(a.region.buf)].scope != MemScope::local)
      return true;
  return false;
}

}  // namespace build_detail

// The kernel: one parameter per global buffer (in buffer order), the scope
// ids, the shared and local allocations, then the ops, each followed by a CTA
// barrier when it touches shared or global memory.
inline tx::PrimFunc build(const Program& p) {
  using namespace build_detail;
  std::vector<std::string> params;
  for (const Buf& b : p.bufs)
    if (b.scope == MemScope::global) params.push_back(b.name + "_ptr");
  return tx::T::prim_func_n("fuzz", params, [&](const std::vector<tx::Handle>& hs) {
    std::vector<tx::TileBuffer> bufs(p.bufs.size());
    std::size_t h = 0;
    for (std::size_t i = 0; i < p.bufs.size(); ++i) {
      const Buf& b = p.bufs[i];
      if (b.scope != MemScope::global) continue;
      std::optional<tx::TileLayout> l;
      if (b.layout) l = to_layout(*b.layout);
      bufs[i] = tx::T::match_buffer(hs[h++], b.shape, b.dtype, l, tx::Name(b.name));
    }
    Ids ids;
    ids.tid = tx::T::thread_id({p.threads}, "tid");
    ids.warp = tx::T::warp_id({p.threads / 32}, "warp");
    ids.lane = tx::T::lane_id({32}, "lane");
    if (p.threads % 128 == 0) {
      ids.wg = tx::T::warpgroup_id({p.threads / 128}, "wg");
      ids.has_wg = true;
    }
    for (std::size_t i = 0; i < p.bufs.size(); ++i) {
      const Buf& b = p.bufs[i];
      if (b.scope == MemScope::global) continue;
      std::optional<tx::TileLayout> l;
      if (b.layout) l = to_layout(*b.layout);
      bufs[i] = tx::T::alloc_buffer(b.shape, b.dtype, b.scope, l, tx::Name(b.name));
    }
    for (const Op& op : p.ops) {
      auto body = [&] { emit_op(op, bufs, ids); };
      if (op.guard.var != IdVar::none) {
        tx::Expr v = ids.get(op.guard.var);
        int k = static_cast<int>(op.guard.k);
        tx::Expr cond = op.guard.cmp == 0   ? tx::Expr(v == k)
                        : op.guard.cmp == 1 ? tx::Expr(v < k)
                                            : tx::Expr(v >= k);
        tx::T::if_(cond, body);
      } else {
        body();
      }
      if (touches_memory(p, op)) tx::T::cuda::cta_sync();
    }
  });
}

// ---------------------------------------------------------------------- model

// A value with a bound on its distance from what tx computes.
struct Val {
  double v = 0;
  double err = 0;
  bool def = false;
};

namespace model_detail {

using Location = std::array<std::int64_t, tx::kNumAxes>;

// ulp of |x| in float32 / float16 (subnormal spacing at the bottom).
inline double ulp(double x, DType t) {
  int mant = t == tx::f16 ? 10 : 23, emin = t == tx::f16 ? -14 : -126;
  x = std::fabs(x);
  int e = x > 0 ? std::ilogb(x) : emin;
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - mant);
}

inline double axis_value(Axis a, int t) {
  switch (a) {
    case Axis::laneid:
      return t % 32;
    case Axis::warpid:
      return t / 32;
    case Axis::tx:
      return t;
    case Axis::wgid:
      return t / 128;
    case Axis::tid_in_wg:
      return t % 128;
    case Axis::wid_in_wg:
      return (t % 128) / 32;
    case Axis::m:
      break;
  }
  return 0;
}

inline double id_value(IdVar v, int t) {
  switch (v) {
    case IdVar::tid:
      return t;
    case IdVar::lane:
      return t % 32;
    case IdVar::warp:
      return t / 32;
    case IdVar::wg:
      return t / 128;
    case IdVar::none:
      break;
  }
  return 0;
}

// Where element `flat` of a buffer lives (DESIGN.md section 5): the shard
// extents split the flat index innermost last; replicas add every
// combination; offsets shift every axis.
inline std::vector<Location> places(const LayoutSpec& l, std::int64_t flat) {
  Location base = l.offset;
  std::int64_t rem = flat;
  for (std::size_t k = l.shard.size(); k-- > 0;) {
    const LayoutIter& it = l.shard[k];
    std::int64_t c = it.extent > 0 ? rem % it.extent : 0;
    rem = it.extent > 0 ? rem / it.extent : 0;
    base[static_cast<int>(it.axis)] += c * it.stride;
  }
  std::vector<Location> out{base};
  for (const LayoutIter& r : l.replica) {
    std::vector<Location> next;
    for (const Location& loc : out)
      for (std::int64_t j = 0; j < r.extent; ++j) {
        Location n = loc;
        n[static_cast<int>(r.axis)] += j * r.stride;
        next.push_back(n);
      }
    out = std::move(next);
  }
  return out;
}

inline std::int64_t shard_size(const LayoutSpec& l) {
  std::int64_t n = 1;
  for (const LayoutIter& i : l.shard) n *= i.extent;
  return n;
}

}  // namespace model_detail

class Model {
 public:
  // Values of each global input (empty for outputs and non-global buffers).
  Model(const Program& p, const std::vector<std::vector<double>>& inputs) : p_(p) {
    using namespace model_detail;
    std::size_t nb = p.bufs.size();
    info_.resize(nb);
    for (std::size_t i = 0; i < nb; ++i) {
      const Buf& b = p.bufs[i];
      BufInfo& bi = info_[i];
      std::int64_t n = numel(b.shape);
      LayoutSpec l;
      if (b.layout) {
        l = *b.layout;
      } else {
        std::int64_t s = 1;
        for (std::size_t d = b.shape.size(); d-- > 0;) {
          l.shard.insert(l.shard.begin(), {b.shape[d], s, Axis::m});
          s *= b.shape[d];
        }
      }
      if (shard_size(l) != n) {
        set_invalid(b.name + ": layout covers " + std::to_string(shard_size(l)) +
                    " elements, the shape has " + std::to_string(n));
        continue;
      }
      std::size_t reps = 1;
      for (const LayoutIter& r : l.replica)
        reps *= static_cast<std::size_t>(std::max<std::int64_t>(r.extent, 1));
      if (static_cast<std::size_t>(n) * reps > 65536) {
        unjudged_ = "layout of " + b.name + " has too many locations to model";
        continue;
      }
      bi.places.resize(static_cast<std::size_t>(n));
      std::int64_t cosize = 1;
      for (std::int64_t f = 0; f < n; ++f) {
        bi.places[static_cast<std::size_t>(f)] = places(l, f);
        for (const Location& loc : bi.places[static_cast<std::size_t>(f)]) {
          cosize = std::max(cosize, loc[0] + 1);
          for (int a = 1; a < tx::kNumAxes; ++a)
            if (loc[a] != 0) bi.thread_axes[a] = true;
        }
      }
      for (const LayoutIter& it : l.shard)
        if (it.axis != Axis::m) bi.thread_axes[static_cast<int>(it.axis)] = true;
      for (const LayoutIter& it : l.replica)
        if (it.axis != Axis::m) bi.thread_axes[static_cast<int>(it.axis)] = true;
      bool any_thread = false;
      for (int a = 1; a < tx::kNumAxes; ++a) any_thread |= bi.thread_axes[a];
      if (any_thread && b.scope != MemScope::local)
        set_invalid(b.name + ": a " + tx::mem_scope_name(b.scope) + " buffer with thread axes");
      bi.cosize = cosize;
      if (b.scope == MemScope::local) {
        bi.local.resize(static_cast<std::size_t>(p.threads));
      } else {
        bi.mem.assign(static_cast<std::size_t>(cosize), Val{});
        bi.written.assign(static_cast<std::size_t>(cosize), 0);
        if (b.scope == MemScope::global && i < inputs.size() && !inputs[i].empty())
          for (std::int64_t f = 0; f < n && f < static_cast<std::int64_t>(inputs[i].size()); ++f)
            bi.mem[static_cast<std::size_t>(f)] = {inputs[i][static_cast<std::size_t>(f)], 0, true};
      }
    }
  }

  void run() {
    for (const Op& op : p_.ops) {
      if (!invalid_.empty() || !unjudged_.empty() || !oob_.empty()) return;
      exec(op);
      discard();
    }
  }

  // Non-empty: the program breaks a tile-op rule and tx must reject it.
  const std::string& invalid() const { return invalid_; }
  // Non-empty: an active group accesses outside a buffer (tx must reject).
  const std::string& out_of_bounds() const { return oob_; }
  // Non-empty: the model cannot judge this program (nothing is compared).
  const std::string& unjudged() const { return unjudged_; }

  // Global buffer `b`, element `f` (row-major): its expected value and
  // whether the program wrote it.
  Val value(std::size_t b, std::int64_t f) const {
    return info_[b].mem[static_cast<std::size_t>(f)];
  }
  bool written(std::size_t b, std::int64_t f) const {
    return info_[b].written[static_cast<std::size_t>(f)] != 0;
  }

 private:
  struct BufInfo {
    std::vector<std::vector<model_detail::Location>> places;  // per logical element
    std::array<bool, tx::kNumAxes> thread_axes{};
    std::int64_t cosize = 1;
    std::vector<Val> mem;                 // global / shared
    std::vector<char> written;            // global / shared
    std::vector<std::vector<Val>> local;  // local: per thread, per storage slot
  };

  const Program& p_;
  std::vector<BufInfo> info_;
  std::string invalid_, oob_, unjudged_;

  void set_invalid(const std::string& why) {
    if (invalid_.empty()) invalid_ = why;
  }

  // ---- per-op access tracking (scheduling-dependent values become undefined)
  struct Access {
    int group = -1;
    std::int64_t elem = -1;
    bool many = false;  // accessed by more than one (group, element)
  };
  struct PendingWrite {
    std::uint64_t key;
    std::size_t buf;
    int thread;  // -1: global/shared
    std::int64_t slot;
    Val val;
    int group;
    std::int64_t elem;
  };
  std::unordered_map<std::uint64_t, Access> reads_;
  std::vector<PendingWrite> writes_;
  std::set<std::uint64_t> src_keys_;  // read as a reduction's source
  bool reading_src_ = false;

  static std::uint64_t key(std::size_t buf, int thread, std::int64_t slot) {
    return (static_cast<std::uint64_t>(buf) << 56) |
           (static_cast<std::uint64_t>(thread + 1) << 40) | static_cast<std::uint64_t>(slot);
  }
  void note_read(std::uint64_t k, int group, std::int64_t elem) {
    if (reading_src_) src_keys_.insert(k);
    auto [it, fresh] = reads_.try_emplace(k, Access{group, elem, false});
    if (!fresh && (it->second.group != group || it->second.elem != elem)) it->second.many = true;
  }

  static bool holds(const BufInfo& bi, const model_detail::Location& loc, int t) {
    for (int a = 1; a < tx::kNumAxes; ++a)
      if (bi.thread_axes[a] && loc[a] != model_detail::axis_value(static_cast<Axis>(a), t))
        return false;
    return true;
  }

  std::int64_t flat_of(const Buf& b, const Shape& coord) const {
    std::int64_t f = 0;
    for (std::size_t d = 0; d < coord.size(); ++d) f = f * b.shape[d] + coord[d];
    return f;
  }

  // The value of element `coord` of buffer `bi` as group (threads t0..t1) sees it.
  Val read(std::size_t buf, const Shape& coord, int t0, int t1, int group, std::int64_t elem) {
    const Buf& b = p_.bufs[buf];
    BufInfo& bi = info_[buf];
    const auto& locs = bi.places[static_cast<std::size_t>(flat_of(b, coord))];
    std::optional<Val> got;
    bool agree = true;
    auto see = [&](const Val& v) {
      if (!got)
        got = v;
      else if (got->def != v.def || got->v != v.v)
        agree = false;
      else
        got->err = std::max(got->err, v.err);
    };
    for (const auto& loc : locs) {
      std::int64_t slot = loc[0];
      if (slot < 0 || slot >= bi.cosize) return {};
      if (b.scope != MemScope::local) {
        note_read(key(buf, -1, slot), group, elem);
        see(bi.mem[static_cast<std::size_t>(slot)]);
        continue;
      }
      for (int t = t0; t < t1; ++t) {
        if (!holds(bi, loc, t)) continue;
        note_read(key(buf, t, slot), group, elem);
        auto& st = bi.local[static_cast<std::size_t>(t)];
        if (st.empty()) st.assign(static_cast<std::size_t>(bi.cosize), Val{});
        see(st[static_cast<std::size_t>(slot)]);
      }
    }
    if (!got || !agree) return {};
    return *got;
  }

  void write(std::size_t buf, const Shape& coord, int t0, int t1, int group, std::int64_t elem,
             const Val& v) {
    const Buf& b = p_.bufs[buf];
    BufInfo& bi = info_[buf];
    for (const auto& loc : bi.places[static_cast<std::size_t>(flat_of(b, coord))]) {
      std::int64_t slot = loc[0];
      if (slot < 0 || slot >= bi.cosize) continue;
      if (b.scope != MemScope::local) {
        writes_.push_back({key(buf, -1, slot), buf, -1, slot, v, group, elem});
        continue;
      }
      for (int t = t0; t < t1; ++t)
        if (holds(bi, loc, t)) writes_.push_back({key(buf, t, slot), buf, t, slot, v, group, elem});
    }
  }

  // Applies the op's writes. A value that depends on the order in which
  // groups (or the threads of a group) run becomes undefined: several
  // writers with different values, a read of an address that another
  // (group, element) writes, a reduction whose source overlaps what it writes.
  void commit() {
    bool taint_all = false;
    std::set<std::pair<int, std::int64_t>> tainted;
    for (const PendingWrite& w : writes_) {
      if (src_keys_.count(w.key)) taint_all = true;
      auto r = reads_.find(w.key);
      if (r == reads_.end()) continue;
      if (r->second.many)
        taint_all = true;
      else if (r->second.group != w.group || r->second.elem != w.elem)
        tainted.insert({r->second.group, r->second.elem});
    }
    std::unordered_map<std::uint64_t, Val> final_val;
    for (const PendingWrite& w : writes_) {
      Val v = w.val;
      if (taint_all || tainted.count({w.group, w.elem})) v = Val{};
      auto [it, fresh] = final_val.try_emplace(w.key, v);
      if (!fresh) {
        Val& o = it->second;
        if (o.def != v.def || o.v != v.v)
          o = Val{};
        else
          o.err = std::max(o.err, v.err);
      }
    }
    for (const PendingWrite& w : writes_) {
      auto it = final_val.find(w.key);
      if (it == final_val.end()) continue;
      BufInfo& bi = info_[w.buf];
      if (w.thread < 0) {
        bi.mem[static_cast<std::size_t>(w.slot)] = it->second;
        bi.written[static_cast<std::size_t>(w.slot)] = 1;
      } else {
        auto& st = bi.local[static_cast<std::size_t>(w.thread)];
        if (st.empty()) st.assign(static_cast<std::size_t>(bi.cosize), Val{});
        st[static_cast<std::size_t>(w.slot)] = it->second;
      }
      final_val.erase(it);
    }
    discard();
  }
  void discard() {
    writes_.clear();
    reads_.clear();
    src_keys_.clear();
  }

  // ---- arithmetic with error bounds

  static Val undef() { return {}; }

  // A float result computed in f32 with `ulps` roundings.
  static Val f32r(double v, double err, double ulps) {
    if (!std::isfinite(v) || std::fabs(v) > 1e37 || !std::isfinite(err)) return undef();
    // FLT_MIN per rounding: results near the subnormal range lose relative accuracy.
    return {v, err + ulps * (model_detail::ulp(v, tx::f32) + 1.2e-38), true};
  }
  static Val intr(double v, DType t) {
    if (!std::isfinite(v)) return undef();
    if (t == tx::u8) {
      double m = std::fmod(v, 256.0);
      if (m < 0) m += 256;
      return {m, 0, true};
    }
    if (t == tx::i32 && (v >= 2147483648.0 || v < -2147483648.0)) return undef();  // overflow
    return {v, 0, true};
  }
  // Storage rounding to `t` of a value computed in f32 (or exactly).
  static Val store_float(Val x, DType t) {
    if (!x.def) return x;
    if (t == tx::f32) {
      double q = static_cast<double>(static_cast<float>(x.v));
      if (!std::isfinite(q)) return undef();
      double e = x.err > 0 ? x.err + model_detail::ulp(x.v, t) : std::fabs(q - x.v);
      return {q, e, true};
    }
    double q = tx::quantize(x.v, t);
    if (!std::isfinite(q) || std::fabs(x.v) + x.err > 65504.0) return undef();
    return {q, x.err > 0 ? x.err + model_detail::ulp(std::fabs(x.v) + x.err, t) + 6e-8 : 0, true};
  }
  static Val float_to_int(Val x, DType t) {
    if (!x.def) return x;
    double lo = std::trunc(x.v - x.err), hi = std::trunc(x.v + x.err);
    if (lo != hi) return undef();  // the truncation is not determined by the bound
    double lim_lo = t == tx::u8 ? 0 : -2147483648.0, lim_hi = t == tx::u8 ? 255 : 2147483647.0;
    if (lo < lim_lo || lo > lim_hi) return undef();  // out of range: undefined in C++ and LLVM
    return {lo, 0, true};
  }
  // A value of storage dtype `from` as an operand of compute dtype f32.
  static Val to_f32(Val x, DType from) {
    if (!x.def) return x;
    if (from.is_integer() && std::fabs(x.v) > 16777216.0) return f32r(x.v, 0, 1);
    return x;
  }

  static Val fl(const std::string& op, const std::vector<Val>& xs) {
    for (const Val& x : xs)
      if (!x.def) return undef();
    const Val& a = xs[0];
    auto second = [&]() -> const Val& { return xs[1]; };
    if (op == "copy" || op == "cast") return a;
    if (op == "sqrt") {
      if (a.v - a.err < 0) return undef();
      double r = std::sqrt(a.v);
      double e = a.v - a.err > 0 ? a.err / (2 * std::sqrt(a.v - a.err)) : std::sqrt(a.err);
      return f32r(r, e, 2);
    }
    if (op == "exp" || op == "exp2") {
      bool two = op == "exp2";
      double r = two ? std::exp2(a.v) : std::exp(a.v);
      double e = r * ((two ? std::exp2(a.err) : std::exp(a.err)) - 1);
      return f32r(r, e, 4);
    }
    if (op == "reciprocal") {
      if (std::fabs(a.v) <= 2 * a.err || a.v == 0) return undef();
      double r = 1.0 / a.v;
      return f32r(r, a.err / (std::fabs(a.v) * (std::fabs(a.v) - a.err)), 2);
    }
    if (op == "silu") {
      if (a.v < -80) return undef();  // exp(-x) overflows f32
      double r = a.v / (1 + std::exp(-a.v));
      return f32r(r, 1.1 * a.err, 6);  // |silu'| < 1.1
    }
    const Val& b = second();
    if (op == "add") return f32r(a.v + b.v, a.err + b.err, 1);
    if (op == "sub") return f32r(a.v - b.v, a.err + b.err, 1);
    if (op == "mul")
      return f32r(a.v * b.v, std::fabs(a.v) * b.err + std::fabs(b.v) * a.err + a.err * b.err, 1);
    if (op == "fdiv") {
      if (std::fabs(b.v) <= 2 * b.err || b.v == 0) return undef();
      double r = a.v / b.v;
      return f32r(r, (a.err + std::fabs(r) * b.err) / (std::fabs(b.v) - b.err), 2);
    }
    if (op == "maximum" || op == "minimum") {
      double r = op == "maximum" ? std::max(a.v, b.v) : std::min(a.v, b.v);
      return {r, std::max(a.err, b.err), true};
    }
    if (op == "fma") {
      const Val& c = xs[2];
      double r = std::fma(a.v, b.v, c.v);
      return f32r(r, std::fabs(a.v) * b.err + std::fabs(b.v) * a.err + a.err * b.err + c.err, 1);
    }
    return undef();
  }

  static Val in(const std::string& op, const std::vector<Val>& xs, DType t) {
    for (const Val& x : xs)
      if (!x.def) return undef();
    double a = xs[0].v;
    if (op == "copy" || op == "cast") return xs[0];
    double b = xs.size() > 1 ? xs[1].v : 0;
    if (op == "add") return intr(a + b, t);
    if (op == "sub") return intr(a - b, t);
    if (op == "mul") return intr(a * b, t);
    if (op == "maximum") return {std::max(a, b), 0, true};
    if (op == "minimum") return {std::min(a, b), 0, true};
    if (op == "fma") {
      Val m = intr(a * b, t);
      if (!m.def) return m;
      return intr(m.v + xs[2].v, t);
    }
    return undef();
  }

  // ---- one op

  struct Resolved {
    std::size_t buf;
    Shape start, extent;
  };

  static Shape unflatten(std::int64_t i, const Shape& ext) {
    Shape c(ext.size());
    for (std::size_t d = ext.size(); d-- > 0;) {
      c[d] = i % ext[d];
      i /= ext[d];
    }
    return c;
  }
  static Shape squeeze(const Shape& s) {
    Shape o;
    for (auto e : s)
      if (e != 1) o.push_back(e);
    return o;
  }

  bool check_static(const Op& op) {
    auto dt = [&](std::size_t i) {
      return p_.bufs[static_cast<std::size_t>(op.args[i].region.buf)].dtype;
    };
    auto ext = [&](std::size_t i) { return op.args[i].region.extent; };
    const std::string& n = op.name;
    int size = scope_size(op.scope, p_.threads);
    if (size > p_.threads || p_.threads % size != 0) {
      set_invalid(std::string(scope_name(op.scope)) + " scope in a CTA of " +
                  std::to_string(p_.threads));
      return false;
    }
    for (const Arg& a : op.args)
      if (!a.scalar &&
          a.region.extent.size() != p_.bufs[static_cast<std::size_t>(a.region.buf)].shape.size()) {
        unjudged_ = "a region of the wrong rank";
        return false;
      }
    if (op.args.empty() || op.args[0].scalar) {
      unjudged_ = "no destination";
      return false;
    }
    DType d = dt(0);
    if (n == "copy") {
      if (dt(1) != d) return set_invalid("copy between dtypes"), false;
      if (squeeze(ext(0)) != squeeze(ext(1))) return set_invalid("copy extents differ"), false;
      return true;
    }
    if (is_reduction(n)) {
      if (dt(1) != d) return set_invalid("reduction between dtypes"), false;
      if (op.scale || op.bias) return set_invalid("reduction with scale/bias"), false;
      return reduce_plan(op).has_value();
    }
    // elementwise
    if (op.accum || !op.axes.empty()) return set_invalid(n + " with axes/accum"), false;
    if ((op.scale || op.bias) && !is_unary(n))
      return set_invalid(n + " takes no scale/bias"), false;
    if (float_only(n) && !d.is_float()) return set_invalid(n + " on " + d.name()), false;
    if (n == "fill" || n == "zero") return true;
    // Float tiles may mix dtypes (math in f32, one rounding on the store);
    // integer tiles must match the destination.
    if (n != "cast")
      for (std::size_t i = 1; i < op.args.size(); ++i)
        if (!op.args[i].scalar && dt(i) != d && !(dt(i).is_float() && d.is_float()))
          return set_invalid(n + " between dtypes"), false;
    if (op.args.size() >= 3 && op.args[1].scalar) {
      if (!commutative(n)) return set_invalid("scalar left operand of " + n), false;
      if (op.args[2].scalar) return set_invalid(n + " without a tile input"), false;
    }
    const Shape& target = ext(0);
    for (std::size_t i = 1; i < op.args.size(); ++i) {
      if (op.args[i].scalar) continue;
      const Shape& e = ext(i);
      std::size_t extra = e.size() > target.size() ? e.size() - target.size() : 0;
      for (std::size_t j = 0; j < extra; ++j)
        if (e[j] != 1) return set_invalid("operand of higher rank"), false;
      for (std::size_t j = extra; j < e.size(); ++j) {
        std::size_t td = target.size() - (e.size() - j);
        if (e[j] != target[td] && e[j] != 1) return set_invalid("extents do not broadcast"), false;
      }
    }
    return true;
  }

  struct ReducePlan {
    std::vector<bool> reduced;
  };
  // parse as documented in lowering/src/variants/reduce_common.hpp
  std::optional<ReducePlan> reduce_plan(const Op& op) {
    const Shape& se = op.args[1].region.extent;
    const Shape& de = op.args[0].region.extent;
    std::size_t rank = se.size();
    ReducePlan rp;
    rp.reduced.assign(rank, false);
    if (!op.axes.empty()) {
      for (int a : op.axes) {
        int ax = a < 0 ? a + static_cast<int>(rank) : a;
        if (ax < 0 || ax >= static_cast<int>(rank))
          return set_invalid("axis out of range"), std::nullopt;
        rp.reduced[static_cast<std::size_t>(ax)] = true;
      }
    } else if (de.size() == rank) {
      for (std::size_t d = 0; d < rank; ++d) rp.reduced[d] = de[d] == 1 && se[d] != 1;
    } else if (de.size() < rank) {
      for (std::size_t d = de.size(); d < rank; ++d) rp.reduced[d] = true;
    } else {
      return set_invalid("reduction destination of higher rank"), std::nullopt;
    }
    Shape kept;
    bool any = false;
    for (std::size_t d = 0; d < rank; ++d) {
      kept.push_back(rp.reduced[d] ? 1 : se[d]);
      any |= rp.reduced[d];
    }
    if (squeeze(de) != squeeze(kept)) return set_invalid("reduction extents"), std::nullopt;
    if (!any) return set_invalid("no axis to reduce"), std::nullopt;
    return rp;
  }

  void exec(const Op& op) {
    if (!check_static(op)) return;
    int size = scope_size(op.scope, p_.threads);
    int groups = p_.threads / size;
    auto active = [&](int t) {
      const Guard& g = op.guard;
      if (g.var == IdVar::none) return true;
      double v = model_detail::id_value(g.var, t);
      return g.cmp == 0 ? v == g.k : g.cmp == 1 ? v < g.k : v >= g.k;
    };
    bool reduction = is_reduction(op.name);
    for (int g = 0; g < groups; ++g) {
      int t0 = g * size, t1 = t0 + size;
      int on = 0;
      for (int t = t0; t < t1; ++t) on += active(t);
      if (on == 0) continue;
      if (on != size) {
        set_invalid("the guard splits a " + std::string(scope_name(op.scope)));
        return;
      }
      // Resolve regions for this group.
      std::vector<Resolved> rs;
      for (const Arg& a : op.args) {
        if (a.scalar) {
          rs.push_back({});
          continue;
        }
        const RegionSpec& r = a.region;
        Resolved x{static_cast<std::size_t>(r.buf), r.start, r.extent};
        if (r.dyn_dim >= 0) {
          double v0 = model_detail::id_value(r.dyn_var, t0);
          for (int t = t0; t < t1; ++t)
            if (model_detail::id_value(r.dyn_var, t) != v0) {
              unjudged_ = "a region start that varies inside a group";
              return;
            }
          x.start[static_cast<std::size_t>(r.dyn_dim)] +=
              r.dyn_mult * static_cast<std::int64_t>(v0);
        }
        const Buf& b = p_.bufs[x.buf];
        for (std::size_t d = 0; d < x.start.size(); ++d)
          if (x.start[d] < 0 || x.start[d] + x.extent[d] > b.shape[d]) {
            if (oob_.empty())
              oob_ = "Tx." + std::string(scope_name(op.scope)) + "." + op.name + ": " + b.name +
                     " dimension " + std::to_string(d) + " [" + std::to_string(x.start[d]) + ", " +
                     std::to_string(x.start[d] + x.extent[d]) + ") outside extent " +
                     std::to_string(b.shape[d]) + " (group " + std::to_string(g) + ")";
            return;
          }
        rs.push_back(x);
      }
      if (reduction)
        group_reduce(op, rs, t0, t1, g);
      else
        group_elementwise(op, rs, t0, t1, g);
    }
    commit();
  }

  Shape at(const Resolved& r, const Shape& c) const {
    Shape o(c.size());
    for (std::size_t d = 0; d < c.size(); ++d) o[d] = r.start[d] + c[d];
    return o;
  }

  void group_elementwise(const Op& op, const std::vector<Resolved>& rs, int t0, int t1, int g) {
    const std::string& n = op.name;
    const Resolved& dr = rs[0];
    DType dt = p_.bufs[dr.buf].dtype;
    std::int64_t total = numel(dr.extent);
    Shape src_sq = n == "copy" ? squeeze(rs[1].extent) : Shape{};
    for (std::int64_t i = 0; i < total; ++i) {
      Shape c = unflatten(i, dr.extent);
      Val out;
      if (n == "zero") {
        out = {0, 0, true};
      } else if (n == "fill") {
        double v = op.args[1].value;  // an f32 literal, converted to the destination dtype
        out = dt.is_float() ? store_float({v, 0, true}, dt) : float_to_int({v, 0, true}, dt);
        if (out.def && !dt.is_float()) out = intr(out.v, dt);
      } else if (n == "copy") {
        const Resolved& sr = rs[1];
        out = read(sr.buf, at(sr, unflatten(i, sr.extent)), t0, t1, g, i);
      } else {
        std::vector<Val> xs;
        std::vector<DType> types;
        for (std::size_t k = 1; k < op.args.size(); ++k) {
          if (op.args[k].scalar) {
            double v = op.args[k].value;  // f32 literal cast to the compute dtype
            Val s{v, 0, true};
            if (!dt.is_float()) s = float_to_int(s, dt);
            xs.push_back(s);
            types.push_back(dt.is_float() ? tx::f32 : dt);
            continue;
          }
          const Resolved& sr = rs[k];
          Shape sc(sr.extent.size(), 0);
          for (std::size_t j = 0; j < sr.extent.size(); ++j) {
            std::ptrdiff_t td = static_cast<std::ptrdiff_t>(c.size()) -
                                static_cast<std::ptrdiff_t>(sr.extent.size() - j);
            sc[j] = td >= 0 && sr.extent[j] != 1 ? c[static_cast<std::size_t>(td)] : 0;
          }
          xs.push_back(read(sr.buf, at(sr, sc), t0, t1, g, i));
          types.push_back(p_.bufs[sr.buf].dtype);
        }
        out = compute(op, xs, types, dt);
      }
      write(dr.buf, at(dr, c), t0, t1, g, i, out);
    }
  }

  Val compute(const Op& op, std::vector<Val> xs, const std::vector<DType>& types, DType dt) {
    const std::string& n = op.name;
    if (n == "cast") {
      DType st = types[0];
      Val x = xs[0];
      if (!x.def) return x;
      if (st.is_integer() && dt.is_integer()) return intr(x.v, dt);
      if (st.is_integer()) return store_float(to_f32(x, st), dt);  // int -> f32 -> float
      if (dt.is_integer()) return float_to_int(x, dt);             // (f16 ->) f32 -> int
      return store_float(x, dt);
    }
    if (!dt.is_float()) return in(n, xs, dt);
    for (std::size_t k = 0; k < xs.size(); ++k) xs[k] = to_f32(xs[k], types[k]);
    if (op.scale || op.bias) {
      Val x = xs[0];
      if (!x.def) return x;
      if (op.scale) x = f32r(x.v * *op.scale, x.err * std::fabs(*op.scale), 1);
      if (op.bias && x.def) x = f32r(x.v + *op.bias, x.err, 1);
      xs[0] = x;
    }
    return store_float(fl(n, xs), dt);
  }

  void group_reduce(const Op& op, const std::vector<Resolved>& rs, int t0, int t1, int g) {
    const Resolved& dr = rs[0];
    const Resolved& sr = rs[1];
    DType t = p_.bufs[dr.buf].dtype;
    ReducePlan rp = *reduce_plan(op);
    Shape spatial;
    for (std::size_t d = 0; d < sr.extent.size(); ++d)
      if (!rp.reduced[d]) spatial.push_back(sr.extent[d]);
    std::int64_t nout = numel(spatial);
    std::vector<std::vector<Val>> parts(static_cast<std::size_t>(nout));
    std::int64_t total = numel(sr.extent);
    reading_src_ = true;
    for (std::int64_t i = 0; i < total; ++i) {
      Shape c = unflatten(i, sr.extent);
      std::int64_t o = 0;
      std::size_t k = 0;
      for (std::size_t d = 0; d < c.size(); ++d)
        if (!rp.reduced[d]) o = o * spatial[k++] + c[d];
      parts[static_cast<std::size_t>(o)].push_back(read(sr.buf, at(sr, c), t0, t1, g, o));
    }
    reading_src_ = false;
    for (std::int64_t o = 0; o < nout; ++o) {
      std::vector<Val>& xs = parts[static_cast<std::size_t>(o)];
      Shape dc = unflatten(o, dr.extent);  // same row-major order once extent-1 dims are dropped
      if (op.accum) xs.push_back(read(dr.buf, at(dr, dc), t0, t1, g, o));
      write(dr.buf, at(dr, dc), t0, t1, g, o, fold(op.name, xs, t));
    }
  }

  static Val fold(const std::string& n, const std::vector<Val>& xs, DType t) {
    for (const Val& x : xs)
      if (!x.def || !std::isfinite(x.v)) return undef();
    if (n == "max" || n == "min") {
      Val r = xs[0];
      for (const Val& x : xs) {
        r.v = n == "max" ? std::max(r.v, x.v) : std::min(r.v, x.v);
        r.err = std::max(r.err, x.err);
      }
      return r;
    }
    double s = 0, mag = 0, err = 0;
    for (const Val& x : xs) {
      s += x.v;
      mag += std::fabs(x.v);
      err += x.err;
    }
    if (!t.is_float()) {
      if (t == tx::i32 && mag >= 2147483648.0) return undef();
      return intr(s, t);
    }
    // Each fold rounds the partial result to t (n roundings of at most ulp(sum |x|)).
    double steps = static_cast<double>(xs.size());
    Val r{s, err + steps * (model_detail::ulp(mag + err, t) + 1.2e-38), true};
    if (t == tx::f32) {
      if (!std::isfinite(static_cast<float>(mag))) return undef();
      r.v = static_cast<double>(static_cast<float>(s));
      return r;
    }
    if (mag + err > 65504.0) return undef();
    r.v = tx::quantize(s, t);
    r.err += model_detail::ulp(mag, t);
    return r;
  }
};

// --------------------------------------------------------------------- runner

struct Outcome {
  enum Kind { rejected, lowered, checked, finding };
  Kind kind = rejected;
  std::string message;
  std::size_t compared = 0;  // elements compared with the model
};

inline const char* outcome_name(Outcome::Kind k) {
  switch (k) {
    case Outcome::rejected:
      return "rejected";
    case Outcome::lowered:
      return "lowered";
    case Outcome::checked:
      return "checked";
    case Outcome::finding:
      return "FINDING";
  }
  return "?";
}

inline std::uint64_t poison_bits(DType t) {
  if (t == tx::f32) return 0x7fc0deadull;
  if (t == tx::f16) return 0x7e01ull;
  return 0xa5a5a5a5a5a5a5a5ull;
}

// Random values for a global input: never zero, rounded to the dtype.
inline std::vector<double> input_values(std::int64_t n, DType t, bool positive,
                                        std::mt19937_64& rng) {
  std::vector<double> v(static_cast<std::size_t>(n));
  if (t.is_integer()) {
    std::uniform_int_distribution<int> d(t == tx::u8 ? 1 : -50, t == tx::u8 ? 255 : 50);
    for (double& x : v) {
      do x = d(rng);
      while (x == 0);
    }
    return v;
  }
  std::uniform_real_distribution<double> d(positive ? 0.25 : -4.0, 4.0);
  for (double& x : v) {
    do x = tx::quantize(d(rng), t);
    while (x == 0);
  }
  return v;
}

struct RunOptions {
  bool run_host = true;  // launch on the host JIT when it is available
  // For the checker's own tests: 1 perturbs the first element the model can
  // check, 2 changes an element the program does not write, as if the kernel
  // had got them wrong. Either must come out as a finding.
  int sabotage = 0;
};

// Builds, lowers and (where possible) runs `p` on the host with inputs drawn
// from `seed`, and checks it against the Model.
inline Outcome run_program(const Program& p, std::uint64_t seed, RunOptions opt = {}) {
  Outcome out;
  auto finding = [&](std::string m) {
    out.kind = Outcome::finding;
    out.message = std::move(m);
    return out;
  };
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> inputs(p.bufs.size());
  for (std::size_t i = 0; i < p.bufs.size(); ++i)
    if (p.bufs[i].scope == MemScope::global && !p.bufs[i].poisoned)
      inputs[i] = input_values(numel(p.bufs[i].shape), p.bufs[i].dtype, p.positive, rng);
  Model model(p, inputs);
  model.run();

  tx::Kernel k;
  try {
    tx::PrimFunc f = build(p);
    k = tx::compile(f, {.device = tx::Device::host()});
    if (k.cuda_source().find("extern \"C\"") == std::string::npos)
      return finding("the generated CUDA has no extern \"C\" kernel");
    (void)k.lowered_ir();
  } catch (const tx::Error& e) {
    out.kind = Outcome::rejected;
    out.message = e.what();
    if (out.message.find("internal") != std::string::npos)
      return finding(std::string("internal error while lowering: ") + e.what());
    return out;
  } catch (const std::exception& e) {
    return finding(std::string("non-tx exception while lowering: ") + e.what());
  } catch (...) {
    return finding("unknown exception while lowering");
  }
  if (!model.invalid().empty())
    return finding("tx accepted a program that breaks a rule: " + model.invalid());
  if (!model.out_of_bounds().empty())
    return finding("tx accepted an out-of-bounds region: " + model.out_of_bounds());
  out.kind = Outcome::lowered;
  if (!opt.run_host || !tx::runtime::host_jit_available()) return out;

  std::vector<tx::Tensor> tensors;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < p.bufs.size(); ++i) {
    const Buf& b = p.bufs[i];
    if (b.scope != MemScope::global) continue;
    if (b.poisoned) {
      tx::Tensor t = tx::Tensor::empty(b.shape, b.dtype, tx::Device::host());
      t.fill_bits(poison_bits(b.dtype));
      tensors.push_back(t);
    } else {
      tensors.push_back(tx::Tensor::from_doubles(inputs[i], b.shape, b.dtype, tx::Device::host()));
    }
    which.push_back(i);
  }
  std::vector<std::vector<std::uint8_t>> before;
  for (const tx::Tensor& t : tensors) before.push_back(t.to_bytes());
  try {
    k.launch(tensors);
  } catch (const tx::Error& e) {
    std::string m = e.what();
    if (m.find("internal") != std::string::npos || m.find("invalid LLVM IR") != std::string::npos)
      return finding("host JIT failed on a lowered kernel: " + m);
    out.kind = Outcome::rejected;
    out.message = "host: " + m;
    return out;
  } catch (const std::exception& e) {
    return finding(std::string("non-tx exception while running: ") + e.what());
  }
  if (!model.unjudged().empty()) {
    out.message = "not compared: " + model.unjudged();
    return out;
  }
  std::ostringstream bad;
  int nbad = 0;
  for (std::size_t j = 0; j < tensors.size(); ++j) {
    std::size_t i = which[j];
    const Buf& b = p.bufs[i];
    std::vector<double> got = tensors[j].to_doubles();
    std::vector<std::uint8_t> bytes = tensors[j].to_bytes();
    std::size_t es = static_cast<std::size_t>(b.dtype.bytes());
    for (std::int64_t f = 0; f < numel(b.shape); ++f) {
      std::size_t uf = static_cast<std::size_t>(f);
      if (opt.sabotage == 1 && model.written(i, f) && model.value(i, f).def) {
        got[uf] += 1 + std::fabs(got[uf]) * 0.01;
        opt.sabotage = 0;
      } else if (opt.sabotage == 2 && !model.written(i, f)) {
        bytes[uf * es] ^= 1;
        opt.sabotage = 0;
      }
      std::string what;
      if (!model.written(i, f)) {
        if (std::memcmp(bytes.data() + uf * es, before[j].data() + uf * es, es) != 0)
          what = "changed, but the program does not write it";
      } else {
        Val w = model.value(i, f);
        if (!w.def) continue;
        ++out.compared;
        double tol = 2 * w.err;
        if (!(std::fabs(got[uf] - w.v) <= tol)) {
          std::ostringstream m;
          m.precision(9);
          m << "got " << got[uf] << ", want " << w.v << " +- " << tol;
          what = m.str();
        }
      }
      if (!what.empty() && nbad++ < 6)
        bad << "  " << b.name << " element " << f << ": " << what << "\n";
    }
  }
  if (nbad) return finding(std::to_string(nbad) + " wrong elements:\n" + bad.str());
  out.kind = Outcome::checked;
  return out;
}

inline Outcome run_bytes(const std::uint8_t* data, std::size_t size, std::uint64_t seed,
                         RunOptions opt = {}) {
  return run_program(generate(data, size), seed, opt);
}

}  // namespace txfuzz
