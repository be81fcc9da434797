// Random builder call sequences for the fuzzer (fuzz/builder_fuzzer.cpp)
// and its corpus replay (test/test_fuzz_corpus.cpp).
//
// The input bytes are a program of calls on a small pool of objects --
// handles, buffers, variables, expressions, regions, kernels, tensors --
// that starts with a default-constructed one of each and keeps everything
// made later: objects of an earlier kernel, variables and buffers of blocks
// that have ended, results of calls that failed. Each step is one of
//
//   building a kernel (T::prim_func_n) whose body is more steps:
//     T::match_buffer, T::alloc_buffer (any scope, random shapes, dtypes and
//     layouts), the scope ids, T::let, T::serial / T::unroll (with a body,
//     sometimes left by `break`), T::if_ and .else_ (also on a stale
//     IfBuilder), element stores and loads with any number of indices,
//     expression operators and functions on any two pool values (mixing
//     dtypes), literals at the edges of their dtype, regions, tile ops at
//     every scope with random attributes, barriers, expressions thousands of
//     operations deep, a kernel built inside a kernel
//   the same builder calls outside any kernel
//   tx::compile with random options (always for the host)
//   launching a kernel on the host with random tensors (undefined,
//   zero-size, of the wrong shape or dtype) or with ones that match it
//   Tensor calls with wrong sizes, shapes and dtypes
//   printing and inspecting kernels, default ones included
//
// Rule: a tx::Error is fine, anything else (a signal, a sanitizer report,
// another exception type, a tx::Error that says "internal") is a finding.
// A step's tx::Error is caught where the step stands, so the steps after it
// run on whatever state the failed call left behind (an interactive session
// does the same); sometimes it is let through to abort the kernel's body.
//
// What runs: a kernel compiled in the checked host mode may run with any
// tensors (out-of-bounds accesses are skipped and reported there). A plain
// kernel runs only after the same tensors ran clean through its checked twin,
// and only when it allocates no shared or register memory (whose
// uninitialized contents could steer the plain run elsewhere). Loops with
// bounds from the pool are clamped to 8 trips, and kernels with a large grid
// or a large literal loop bound never run: a hang is not the finding sought.
// Tensors are at most 2^20 elements, or so large that their byte size
// overflows (which must be refused before anything is allocated).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "fuzz_common.hpp"
#include "tx/tx.hpp"

namespace txbuild {

using txfuzz::Bytes;
using Shape = std::vector<std::int64_t>;

struct Result {
  bool finding = false;
  std::string message;  // the finding
  std::string trace;    // the calls made, one per line
  long steps = 0, errors = 0, compiled = 0, launched = 0;
};

namespace detail {

// Unwinds the whole session once a finding is recorded (not a
// std::exception, so that no handler of tx or of this file takes it for one).
struct Stop {};

inline const tx::DType kDTypes[] = {tx::f32, tx::f16, tx::i32, tx::u8,       tx::bf16,   tx::f64,
                                    tx::i64, tx::i8,  tx::u32, tx::boolean,  tx::f8e4m3, tx::f8e5m2,
                                    tx::i16, tx::u16, tx::u64, tx::handle_t, tx::void_t};
inline const std::int64_t kExtents[] = {1,
                                        2,
                                        4,
                                        32,
                                        8,
                                        3,
                                        64,
                                        16,
                                        128,
                                        0,
                                        -1,
                                        1 << 20,
                                        std::int64_t{1} << 31,
                                        5,
                                        256,
                                        7,
                                        1 << 12,
                                        std::int64_t{1} << 40};

inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// Elements of a shape, or -1 when it is not a small positive shape.
inline std::int64_t small_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto e : s) {
    if (e < 0 || e > (1 << 20)) return -1;
    n *= e;
    if (n > (1 << 20)) return -1;
  }
  return n;
}

// True when the byte size of the shape does not fit in a size_t (the
// tensor must be refused before anything is allocated). Sizes below that
// are requests the host may refuse or grant; they are not made (under ASan a
// refused allocation of 2^63 bytes aborts instead of returning null).
inline bool bytes_overflow(const Shape& s, tx::DType t) {
  long double n = std::max(1, t.bytes());
  for (auto e : s) {
    if (e <= 0) return false;
    n *= static_cast<long double>(e);
  }
  return n > static_cast<long double>(std::numeric_limits<std::size_t>::max());
}

// The size of an expression written out as a tree: shared subexpressions
// count once per use, as tx's passes and its CUDA printer visit them
// (memoized per node, so that this itself stays linear).
inline double tree_size(const tx::Expr& e, std::unordered_map<const tx::ExprNode*, double>& memo) {
  if (!e.defined()) return 0;
  auto it = memo.find(e.get());
  if (it != memo.end()) return it->second;
  double n = 1;
  auto add = [&](const tx::Expr& x) { n += tree_size(x, memo); };
  if (auto* c = e.as<tx::CastNode>()) add(c->value);
  if (auto* b = e.as<tx::BinaryNode>()) add(b->a), add(b->b);
  if (auto* u = e.as<tx::UnaryNode>()) add(u->a);
  if (auto* s = e.as<tx::SelectNode>()) add(s->cond), add(s->t), add(s->f);
  if (auto* c = e.as<tx::CallNode>())
    for (const tx::Expr& x : c->args) add(x);
  if (auto* l = e.as<tx::LoadNode>())
    for (const tx::Expr& x : l->indices) add(x);
  memo[e.get()] = n;
  return n;
}
inline double tree_size(const tx::Expr& e) {
  std::unordered_map<const tx::ExprNode*, double> memo;
  return tree_size(e, memo);
}

}  // namespace detail

class Session {
 public:
  explicit Session(Bytes& in, bool print = false) : in_(in), print_(print) {
    handles_.push_back(tx::Handle());
    bufs_.push_back(tx::TileBuffer());
    vars_.push_back(tx::Var());
    exprs_ = {tx::Expr(), tx::make_int(1), tx::make_float(2.0)};
    regions_.push_back(tx::BufferRegion());
    funcs_.push_back(Func{});
    kernels_.push_back(Compiled{});
    tensors_.push_back(tx::Tensor());
  }

  Result run() {
    try {
      while (!in_.exhausted() && res_.steps < 400) top_step();
    } catch (const detail::Stop&) {
    }
    return res_;
  }

 private:
  // A PrimFunc and what the session knows of it.
  struct Func {
    tx::PrimFunc f;
    int id = 0;            // unique in the session (pool slots are reused)
    bool runnable = true;  // no large literal loop bound, no big register tile
    bool allocates = false;
  };
  struct Compiled {
    tx::Kernel k;
    Func func;  // what it was compiled from
    bool checked = false;
    bool real = false;  // from tx::compile (the pool's first is a default Kernel)
  };
  // What the kernel being built has done so far.
  struct Building {
    bool runnable = true;
    bool allocates = false;
    int depth = 0;  // loops / ifs
  };

  // ------------------------------------------------------------ bookkeeping

  void log(const std::string& line) {
    std::string l = std::string(static_cast<std::size_t>(2 * nest_), ' ') + line;
    if (res_.trace.size() < 200000) res_.trace += l + "\n";
    if (print_) std::fprintf(stderr, "  %s\n", l.c_str());
  }

  [[noreturn]] void finding(const std::string& what) {
    res_.finding = true;
    res_.message = what;
    throw detail::Stop{};
  }

  // Runs one step: its tx::Error is fine (and ends the step), anything else
  // is a finding. `let_through`: rethrow the tx::Error (to abort a kernel).
  template <class F>
  void step(const char* what, F&& f, bool let_through = false) {
    ++res_.steps;
    try {
      f();
    } catch (const tx::Error& e) {
      ++res_.errors;
      std::string m = e.what();
      if (m.find("internal:") != std::string::npos ||
          m.find("invalid LLVM IR") != std::string::npos)
        finding(std::string(what) + ": an internal error: " + m);
      if (print_) log("  -> tx error: " + m.substr(0, m.find('\n')));
      if (let_through) throw;
    } catch (const detail::Stop&) {
      throw;
    } catch (const std::exception& e) {
      finding(std::string(what) + ": a non-tx exception: " + e.what());
    } catch (...) {
      finding(std::string(what) + ": an exception of unknown type");
    }
  }

  template <class T>
  static void keep(std::vector<T>& pool, T x, Bytes& in) {
    if (pool.size() < 48)
      pool.push_back(std::move(x));
    else
      pool[static_cast<std::size_t>(1 + in.below(47))] = std::move(x);
  }
  template <class T>
  std::size_t pick(const std::vector<T>& pool) {
    return static_cast<std::size_t>(in_.below(static_cast<int>(pool.size())));
  }

  // The known bug: tx walks shared subexpressions once per use, so y = y * y
  // n times costs 2^n; with it avoided, values that large are not kept.
  void keep_expr(const tx::Expr& e) {
    if (txfuzz::avoided("dag-blowup") && detail::tree_size(e) > 20000) return;
    keep(exprs_, e, in_);
  }

  tx::DType dtype() { return in_.pick(detail::kDTypes); }
  Shape shape(int max_dims = 3) {
    Shape s(static_cast<std::size_t>(1 + in_.below(max_dims)));
    for (auto& e : s) e = in_.pick(detail::kExtents);
    // The known bug: a shape of more than 2^63 elements overflows tx's
    // row-major strides.
    while (txfuzz::avoided("numel-overflow")) {
      long double n = 1;
      for (auto e : s) n *= static_cast<long double>(e > 0 ? e : 1);
      if (n <= 4e18L) break;
      *std::max_element(s.begin(), s.end()) = 1;
    }
    return s;
  }
  // Mostly small, sometimes past every limit.
  std::int64_t small_int() {
    static const std::int64_t kInts[] = {0,
                                         1,
                                         2,
                                         3,
                                         31,
                                         32,
                                         -1,
                                         7,
                                         64,
                                         100,
                                         2147483647,
                                         -2147483647 - 1,
                                         4,
                                         16,
                                         5,
                                         -3,
                                         std::int64_t{1} << 40,
                                         128};
    return in_.pick(kInts);
  }
  tx::Expr expr() { return exprs_[pick(exprs_)]; }
  tx::Var var() { return vars_[pick(vars_)]; }
  const tx::TileBuffer& buf() { return bufs_[pick(bufs_)]; }

  std::optional<tx::TileLayout> layout() {
    if (!in_.chance(25)) return std::nullopt;
    auto iters = [&](int n) {
      std::vector<tx::Iter> v(static_cast<std::size_t>(n));
      static const std::int64_t kStrides[] = {1, 0, 2, 8, 32, -1, 4, 3};
      for (auto& it : v) {
        it.extent = in_.pick(detail::kExtents);
        it.stride = in_.pick(kStrides);
        it.axis = static_cast<tx::Axis>(in_.below(tx::kNumAxes));
      }
      return v;
    };
    std::vector<tx::Iter> shard = iters(1 + in_.below(3));
    // The known bug: shard extents of more than 2^63 elements in all
    // overflow TileLayout::size().
    while (txfuzz::avoided("numel-overflow")) {
      long double n = 1;
      for (const tx::Iter& it : shard) n *= static_cast<long double>(it.extent > 0 ? it.extent : 1);
      if (n <= 4e18L) break;
      std::max_element(shard.begin(), shard.end(), [](const tx::Iter& x, const tx::Iter& y) {
        return x.extent < y.extent;
      })->extent = 1;
    }
    std::vector<tx::Iter> replica = in_.chance(20) ? iters(1) : std::vector<tx::Iter>{};
    std::array<std::int64_t, tx::kNumAxes> off{};
    if (in_.chance(15)) off[static_cast<std::size_t>(in_.below(tx::kNumAxes))] = small_int();
    return tx::TileLayout(shard, replica, off);
  }

  // ------------------------------------------------------------ top level

  void top_step() {
    switch (in_.below(12)) {
      case 0:
      case 1:
      case 2:
        build_kernel();
        break;
      case 3:
      case 4:
        compile();
        break;
      case 5:
      case 6:
        launch();
        break;
      case 7:
        make_tensor();
        break;
      case 8:
        tensor_call();
        break;
      case 9:
        inspect();
        break;
      default:
        // A builder call with no kernel being built (or, via else_, one
        // that belongs to an earlier kernel).
        body_step();
        break;
    }
  }

  void build_kernel() {
    if (kernel_depth_ > 1) return;  // a kernel inside a kernel inside a kernel is enough
    int nparams = in_.below(5);
    std::vector<std::string> names;
    for (int i = 0; i < nparams; ++i) names.push_back("p" + std::to_string(i));
    if (in_.chance(5) && nparams > 1) names[1] = names[0];  // two parameters of one name
    int steps = 1 + in_.below(16);
    bool let_through = in_.chance(15);
    std::string name = "k" + std::to_string(kernel_count_++);
    log("kernel " + name + " with " + std::to_string(nparams) + " parameters:");
    Building saved = cur_;
    cur_ = Building{};
    ++nest_;
    ++kernel_depth_;
    step(
        "T::prim_func_n",
        [&] {
          tx::PrimFunc f = tx::T::prim_func_n(name, names, [&](const std::vector<tx::Handle>& hs) {
            for (const tx::Handle& h : hs) keep(handles_, h, in_);
            for (int s = 0; s < steps && !in_.exhausted(); ++s) body_step(let_through);
          });
          keep(funcs_, Func{f, ++func_count_, cur_.runnable, cur_.allocates}, in_);
          log("-> f" + std::to_string(func_count_));
        },
        false);
    --kernel_depth_;
    --nest_;
    cur_ = saved;
  }

  // One builder call inside the kernel being built (or outside any).
  void body_step(bool let_through = false) {
    int op = in_.below(20);
    auto run = [&](const char* what, auto&& f) { step(what, f, let_through); };
    switch (op) {
      case 0:
        run("T::match_buffer", [&] { match_buffer(); });
        break;
      case 1:
        run("T::alloc_buffer", [&] { alloc_buffer(); });
        break;
      case 2:
        run("scope id", [&] { scope_id(); });
        break;
      case 3:
        run("T::let", [&] {
          tx::Expr v = expr();
          log("let");
          keep(vars_, tx::T::let(v), in_);
        });
        break;
      case 4:
        run("T::serial", [&] { loop(let_through); });
        break;
      case 5:
        run("T::if_", [&] { if_(let_through); });
        break;
      case 6:
        run("store", [&] { store(); });
        break;
      case 7:
        run("load", [&] { load(); });
        break;
      case 8:
      case 9:
        run("binary", [&] { binary(); });
        break;
      case 10:
        run("unary", [&] { unary(); });
        break;
      case 11:
        run("literal", [&] { literal(); });
        break;
      case 12:
        run("region", [&] { region(); });
        break;
      case 13:
      case 14:
        run("tile op", [&] { tile_op(); });
        break;
      case 15:
        run("barrier", [&] { barrier(); });
        break;
      case 16:
        build_kernel();
        break;
      case 17:
        run("else_", [&] { stale_else(let_through); });
        break;
      case 18:
        run("deep expression", [&] { deep(); });
        break;
      default:
        run("T::device_entry", [&] {
          log("device_entry");
          tx::T::device_entry();
        });
        break;
    }
  }

  // ------------------------------------------------------------ builders

  void match_buffer() {
    tx::Handle h = handles_[pick(handles_)];
    Shape s = shape();
    tx::DType t = dtype();
    std::optional<tx::TileLayout> l = layout();
    log("match_buffer(" + detail::shape_str(s) + ", " + t.short_name() + (l ? ", layout" : "") +
        ")");
    keep(bufs_, tx::T::match_buffer(h, s, t, l, in_.chance(50) ? tx::Name() : tx::Name("M")), in_);
  }

  void alloc_buffer() {
    Shape s = shape();
    tx::DType t = dtype();
    static const tx::MemScope kScopes[] = {tx::MemScope::shared, tx::MemScope::local,
                                           tx::MemScope::global};
    tx::MemScope sc = in_.pick(kScopes);
    std::optional<tx::TileLayout> l = layout();
    log(std::string("alloc_buffer(") + detail::shape_str(s) + ", " + t.short_name() + ", " +
        tx::mem_scope_name(sc) + (l ? ", layout" : "") + ")");
    tx::TileBuffer b = tx::T::alloc_buffer(s, t, sc, l);
    cur_.allocates = true;
    // A big register tile is legal, but the host would keep one per thread.
    if (detail::small_numel(s) < 0 || detail::small_numel(s) > 4096) cur_.runnable = false;
    keep(bufs_, b, in_);
  }

  void scope_id() {
    static const std::int64_t kIds[] = {
        32, 1, 64, 128, 2, 4, 256, 1024, 0, 2048, -1, 3, 1 << 20, std::int64_t{1} << 31, 96, 8};
    Shape e(static_cast<std::size_t>(1 + (in_.chance(15) ? in_.below(3) : 0)));
    for (auto& x : e) x = in_.pick(kIds);
    int kind = in_.below(7);
    static const char* const kNames[] = {"cta_id",         "thread_id",    "warp_id",
                                         "lane_id",        "warpgroup_id", "warp_id_in_wg",
                                         "thread_id_in_wg"};
    log(std::string(kNames[kind]) + detail::shape_str(e));
    std::optional<tx::IdVars> ids;
    switch (kind) {
      case 0:
        ids = tx::T::cta_id(e);
        break;
      case 1:
        ids = tx::T::thread_id(e);
        break;
      case 2:
        ids = tx::T::warp_id(e);
        break;
      case 3:
        ids = tx::T::lane_id(e);
        break;
      case 4:
        ids = tx::T::warpgroup_id(e);
        break;
      case 5:
        ids = tx::T::warp_id_in_wg(e);
        break;
      default:
        ids = tx::T::thread_id_in_wg(e);
        break;
    }
    keep(vars_, tx::Var(*ids), in_);
    // ids[i] past the last dimension must be a tx error like any misuse.
    if (in_.chance(20) && !txfuzz::avoided("idvars-index")) {
      std::size_t i = static_cast<std::size_t>(in_.below(4));
      log("ids[" + std::to_string(i) + "] of " + std::to_string(ids->size()));
      keep(vars_, (*ids)[i], in_);
    }
  }

  // A loop bound: a literal (large ones make the kernel unrunnable) or a
  // pool value clamped to 8 trips.
  tx::Expr loop_bound() {
    if (in_.chance(50)) {
      std::int64_t n = small_int();
      if (n > 8) cur_.runnable = false;
      return tx::make_int(n, in_.chance(90) ? tx::i32 : tx::i64);
    }
    return tx::min(expr(), 8);
  }

  void loop(bool let_through) {
    bool unroll = in_.chance(20);
    tx::Expr lo = in_.chance(50) ? tx::make_int(0) : expr();
    tx::Expr ext = loop_bound();
    int steps = 1 + in_.below(5);
    bool brk = in_.chance(10);
    log(std::string(unroll ? "unroll" : "serial") + (brk ? " (break)" : "") + ":");
    ++nest_;
    ++cur_.depth;
    auto body = [&](const tx::Var& v) {
      keep(vars_, v, in_);
      for (int s = 0; s < steps && !in_.exhausted(); ++s) body_step(let_through);
    };
    // The loop var, the nesting and the frames must come back right whether
    // the body ends, breaks or throws.
    struct Restore {
      int& n;
      int& d;
      ~Restore() {
        --n;
        --d;
      }
    } restore{nest_, cur_.depth};
    if (cur_.depth > 3) return;
    if (unroll) {
      for (tx::Var v : tx::T::unroll(ext)) {
        body(v);
        if (brk) break;
      }
    } else {
      for (tx::Var v : tx::T::serial(lo, ext, "i")) {
        body(v);
        if (brk) break;
      }
    }
  }

  void if_(bool let_through) {
    tx::Expr c = expr();
    if (in_.chance(60) && c.defined()) {
      // A comparison is usually what a condition is.
      tx::Expr other = expr();
      if (other.defined()) c = c < other;
    }
    int steps = 1 + in_.below(4);
    bool has_else = in_.chance(30);
    log(std::string("if") + (has_else ? " / else" : "") + ":");
    ++nest_;
    ++cur_.depth;
    struct Restore {
      int& n;
      int& d;
      ~Restore() {
        --n;
        --d;
      }
    } restore{nest_, cur_.depth};
    if (cur_.depth > 3) return;
    auto block = [&] {
      for (int s = 0; s < steps && !in_.exhausted(); ++s) body_step(let_through);
    };
    tx::IfBuilder ib = tx::T::if_(c, block);
    last_if_ = ib;
    if (has_else) ib.else_(block);
  }

  void stale_else(bool let_through) {
    if (!last_if_) return;
    log("else_ on an earlier if");
    int steps = 1 + in_.below(2);
    last_if_->else_([&] {
      for (int s = 0; s < steps && !in_.exhausted(); ++s) body_step(let_through);
    });
  }

  std::vector<tx::Expr> indices() {
    std::vector<tx::Expr> idx(static_cast<std::size_t>(1 + in_.below(4)));
    for (auto& i : idx) i = in_.chance(30) ? tx::make_int(small_int()) : expr();
    return idx;
  }
  static tx::BufferElem elem(const tx::TileBuffer& b, const std::vector<tx::Expr>& i) {
    switch (i.size()) {
      case 1:
        return b(i[0]);
      case 2:
        return b(i[0], i[1]);
      case 3:
        return b(i[0], i[1], i[2]);
      default:
        return b(i[0], i[1], i[2], i[3]);
    }
  }

  void store() {
    const tx::TileBuffer& b = buf();
    std::vector<tx::Expr> idx = indices();
    log("store with " + std::to_string(idx.size()) + " indices");
    if (in_.chance(20)) {
      elem(b, idx) = 1.5f;  // a literal adopts the buffer's dtype
    } else if (in_.chance(10)) {
      const tx::TileBuffer& from = buf();
      std::vector<tx::Expr> at = indices();
      elem(b, idx) = elem(from, at);  // element to element
    } else {
      elem(b, idx) = expr();
    }
  }

  void load() {
    const tx::TileBuffer& b = buf();
    std::vector<tx::Expr> idx = indices();
    log("load with " + std::to_string(idx.size()) + " indices");
    tx::Expr e = elem(b, idx);
    keep_expr(e);
  }

  void binary() {
    tx::Expr a = expr(), b = expr();
    int op = in_.below(26);
    // The known bug: tx folds integer constants in 64-bit arithmetic that
    // may overflow (or divide INT64_MIN by -1, shift by 64); with it avoided,
    // no operation gets two constants, and no shifts.
    if (txfuzz::avoided("const-fold") &&
        ((tx::as_const_int(a) && tx::as_const_int(b)) || op == 13 || op == 14))
      return;
    log("binary " + std::to_string(op));
    tx::Expr r;
    switch (op) {
      case 0:
        r = a + b;
        break;
      case 1:
        r = a - b;
        break;
      case 2:
        r = a * b;
        break;
      case 3:
        r = a / b;
        break;
      case 4:
        r = a % b;
        break;
      case 5:
        r = a == b;
        break;
      case 6:
        r = a < b;
        break;
      case 7:
        r = a >= b;
        break;
      case 8:
        r = a && b;
        break;
      case 9:
        r = a || b;
        break;
      case 10:
        r = a & b;
        break;
      case 11:
        r = a | b;
        break;
      case 12:
        r = a ^ b;
        break;
      case 13:
        r = a << b;
        break;
      case 14:
        r = a >> b;
        break;
      case 15:
        r = tx::min(a, b);
        break;
      case 16:
        r = tx::max(a, b);
        break;
      case 17:
        r = tx::floordiv(a, b);
        break;
      case 18:
        r = tx::floormod(a, b);
        break;
      case 19:
        r = tx::pow(a, b);
        break;
      case 20:
        r = tx::fmod(a, b);
        break;
      case 21:
        r = tx::copysign(a, b);
        break;
      case 22:
        r = tx::fma(a, b, expr());
        break;
      case 23:
        r = tx::select(a, b, expr());
        break;
      case 24:
        r = a + 3;
        break;  // literals adopt the other operand's dtype
      default:
        r = 2.5 * a;
        break;
    }
    keep_expr(r);
  }

  void unary() {
    tx::Expr a = expr();
    int op = in_.below(14);
    log("unary " + std::to_string(op));
    tx::Expr r;
    switch (op) {
      case 0:
        r = -a;
        break;
      case 1:
        r = !a;
        break;
      case 2:
        r = ~a;
        break;
      case 3:
        r = tx::sqrt(a);
        break;
      case 4:
        r = tx::exp(a);
        break;
      case 5:
        r = tx::abs(a);
        break;
      case 6:
        r = tx::isnan(a);
        break;
      case 7:
        r = tx::floor(a);
        break;
      case 8:
        r = tx::normcdf(a);
        break;
      case 9:
        r = tx::log1p(a);
        break;
      case 10:
        r = tx::round(a);
        break;
      case 11:
        r = tx::tanh(a);
        break;
      default:
        r = tx::cast(a, dtype());
        break;
    }
    keep_expr(r);
  }

  void literal() {
    tx::DType t = dtype();
    tx::Expr r;
    if (in_.chance(50)) {
      std::int64_t v = small_int();
      if (in_.chance(20) && !txfuzz::avoided("int64-min"))
        v = std::numeric_limits<std::int64_t>::min();
      if (txfuzz::avoided("const-fold") && (v > (1 << 15) || v < -(1 << 15))) v = 3;
      log("make_int(" + std::to_string(v) + ", " + t.short_name() + ")");
      r = tx::make_int(v, t);
    } else {
      static const double kF[] = {0.5,
                                  -1.0,
                                  1e30,
                                  -0.0,
                                  65504.0,
                                  1e-40,
                                  3.0,
                                  std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN(),
                                  448.0,
                                  1e300};
      double v = in_.pick(kF);
      log("make_float(" + std::to_string(v) + ", " + t.short_name() + ")");
      r = tx::make_float(v, t);
    }
    keep_expr(r);
  }

  tx::BufferRegion make_region() {
    const tx::TileBuffer& b = buf();
    if (in_.chance(30)) return b.all();
    tx::Region r;
    int dims = 1 + in_.below(3);
    for (int d = 0; d < dims; ++d) {
      static const std::int64_t kExt[] = {1, 32, 8, 4, 0, -2, 16, 64, 2, 1 << 20};
      std::int64_t ext = in_.pick(kExt);
      if (in_.chance(40))
        r.slices.push_back(tx::Slice(expr(), ext));
      else {
        std::int64_t lo = small_int(), hi = small_int();
        r.slices.push_back(tx::Slice(lo, hi));
      }
    }
    return b[r];
  }

  void region() {
    log("region");
    keep(regions_, make_region(), in_);
  }

  // An operand of a tile op: a kept region, a new one, or a whole buffer.
  tx::BufferRegion operand() {
    switch (in_.below(3)) {
      case 0:
        return regions_[pick(regions_)];
      case 1:
        return make_region();
      default: {
        const tx::TileBuffer& b = buf();
        return b.get() ? b.all() : tx::BufferRegion{};
      }
    }
  }
  tx::TileOrScalar scalar_or_tile() {
    if (in_.chance(30)) return tx::TileOrScalar(expr());
    if (in_.chance(10)) return tx::TileOrScalar(1.5);
    return tx::TileOrScalar(operand());
  }

  void tile_op() {
    // The ops the table (tx/tile_op_table.hpp) marks for this fuzzer, in
    // table order: a new row with TX_FLAG(fuzz) is called here without
    // touching this file.
    static const std::vector<const tx::TileOpDef*> kOps = [] {
      std::vector<const tx::TileOpDef*> v;
      for (const tx::TileOpDef* d : tx::tile_ops())
        if (d->has(tx::TileOpFlag::fuzz)) v.push_back(d);
      return v;
    }();
    const tx::TileOpDef& def =
        *kOps[static_cast<std::size_t>(in_.below(static_cast<int>(kOps.size())))];
    tx::ExecScope sc = static_cast<tx::ExecScope>(in_.below(4));
    tx::TileAttrs at;
    if (in_.chance(15)) at.scale = expr();
    if (in_.chance(10)) at.bias = expr();
    at.accum = in_.chance(15);
    if (in_.chance(20)) {
      int n = in_.below(3);
      for (int i = 0; i < n; ++i) at.axes.push_back(in_.below(6) - 1);
    }
    static const char* const kVariants[] = {"", "fallback", "reg", "gmem_smem", "nonsense"};
    if (in_.chance(15)) at.variant = in_.pick(kVariants);
    if (in_.chance(5)) at.dtype = dtype();
    log(std::string("Tx.") + tx::exec_scope_name(sc) + "." + def.name);
    // Operands drawn in a fixed order (a call's arguments are evaluated in
    // an order the compiler picks, and the same bytes must make the same
    // calls under gcc and clang), then given to the op in its roles: tiles
    // take d, then src; tiles-or-scalars a, b, c; scalars the value. The
    // call is what the op's builder Tx::<scope>::<op> records.
    tx::BufferRegion d = operand();
    tx::BufferRegion src = operand();
    tx::TileOrScalar a = scalar_or_tile(), b = scalar_or_tile(), c3 = scalar_or_tile();
    tx::Expr value = expr();
    const tx::BufferRegion tiles[] = {d, src};
    const tx::TileArg either[] = {a.arg, b.arg, c3.arg};
    std::vector<tx::TileArg> args;
    std::size_t ti = 0, ei = 0;
    for (const tx::OperandDef& o : def.operands()) {
      if (o.role == tx::OperandRole::tile)
        args.push_back(tiles[ti++ % 2]);
      else if (o.role == tx::OperandRole::tile_or_scalar)
        args.push_back(either[ei++ % 3]);
      else
        args.push_back(value);
    }
    tx::detail::emit_tile(def.name, sc, std::move(args), std::move(at),
                          std::source_location::current());
  }

  void barrier() {
    int k = in_.below(3);
    log(k == 0 ? "cta_sync" : k == 1 ? "warp_sync" : "warpgroup_sync");
    if (k == 0) tx::T::cuda::cta_sync();
    if (k == 1) tx::T::cuda::warp_sync();
    if (k == 2) tx::T::cuda::warpgroup_sync();
  }

  // acc = acc OP x, thousands of times: tx splits it into T::let parts.
  void deep() {
    int n = 100 + in_.below(3000);
    tx::Expr x = expr(), acc = expr();
    if (txfuzz::avoided("dag-blowup") && detail::tree_size(x) > 8) x = tx::make_float(1.0);
    if (txfuzz::avoided("const-fold") && tx::as_const_int(x)) return;
    bool mul = in_.chance(30);
    log("deep expression of " + std::to_string(n));
    for (int i = 0; i < n; ++i) acc = mul ? tx::Expr(acc * x) : tx::Expr(acc + x);
    keep_expr(acc);
  }

  // ------------------------------------------------------------ compile, run

  void compile() {
    Func fn = funcs_[pick(funcs_)];
    tx::CompileOptions opt;
    opt.device = tx::Device::host();
    static const char* const kArch[] = {"",           "sm_90a", "sm_75", "sm_80",
                                        "compute_90", "sm_",    "bogus"};
    opt.arch = in_.pick(kArch);
    opt.checked = in_.chance(60);
    opt.approx_math = in_.chance(10);
    log("compile f" + std::to_string(fn.id) + (*opt.checked ? " checked" : "") + " arch '" +
        opt.arch + "'");
    step("tx::compile", [&] {
      tx::Kernel k = tx::compile(fn.f, opt);
      ++res_.compiled;
      keep(kernels_, Compiled{k, fn, *opt.checked, true}, in_);
      // The twin in the other mode, for a plain run after a clean checked one.
      if (in_.chance(50)) {
        opt.checked = !*opt.checked;
        keep(kernels_, Compiled{tx::compile(fn.f, opt), fn, *opt.checked, true}, in_);
      }
    });
  }

  // A tensor of the shape and dtype a kernel declares, with small values
  // (integers in [-4, 40]: plausible indices), or NaN-poisoned.
  tx::Tensor matching(const tx::lowering::KernelParamInfo& p, std::mt19937_64& rng) {
    std::int64_t n = detail::small_numel(p.shape);
    if (n <= 0) return tx::Tensor();
    std::vector<double> v(static_cast<std::size_t>(n));
    std::uniform_int_distribution<int> d(-4, 40);
    for (double& x : v)
      x = p.dtype.is_float() ? d(rng) / 8.0 : p.dtype.is_bool() ? (d(rng) & 1) : d(rng);
    tx::Tensor t = tx::Tensor::from_doubles(v, p.shape, p.dtype, tx::Device::host());
    if (p.dtype.is_float() && in_.chance(10)) t.fill_bits(0x7fc0deadull);
    return t;
  }

  static std::vector<tx::Tensor> copies(const std::vector<tx::Tensor>& ts) {
    std::vector<tx::Tensor> out;
    for (const tx::Tensor& t : ts) {
      if (!t.defined() || t.numel() == 0) {
        out.push_back(t);
        continue;
      }
      std::vector<std::uint8_t> b = t.to_bytes();
      out.push_back(
          tx::Tensor::from_bytes(b.data(), b.size(), t.shape(), t.dtype(), tx::Device::host()));
    }
    return out;
  }

  void launch() {
    const Compiled& c = kernels_[pick(kernels_)];
    if (!c.real && txfuzz::avoided("default-kernel")) return;
    bool match = in_.chance(60);
    bool from_pool = !match || in_.chance(20);
    int n = in_.below(5);
    std::mt19937_64 rng(in_.byte());
    std::vector<tx::Tensor> args;
    bool runnable = false, refused = true;
    step("prepare a launch", [&] {
      if (!c.k.checked() && c.checked) finding("a kernel compiled checked says it is not");
      const tx::lowering::LaunchConfig& l = c.k.info().launch;
      runnable = c.func.runnable && l.grid[0] * l.grid[1] * l.grid[2] <= 16 && l.block <= 1024;
      if (match)
        for (const auto& p : c.k.info().params) args.push_back(matching(p, rng));
      if (from_pool) {
        // Tensors from the pool: any count, undefined, empty, mismatched.
        if (match && !args.empty())
          args[static_cast<std::size_t>(in_.below(static_cast<int>(args.size())))] =
              tensors_[pick(tensors_)];
        else
          for (int i = 0; i < n; ++i) args.push_back(tensors_[pick(tensors_)]);
      }
      refused = must_refuse(c.k, args);
    });
    if (!runnable) return;
    log(std::string("launch ") + (c.checked ? "checked" : "plain") + " kernel of f" +
        std::to_string(c.func.id) + " with " + std::to_string(args.size()) + " tensors");
    if (!c.checked) {
      // A plain kernel alone runs only with tensors it must refuse: a wrong
      // count, an undefined or empty tensor, another shape or dtype.
      if (!refused) return;
      step("launch (plain, refused)", [&] {
        c.k.launch(args);
        finding("a plain launch with tensors that do not match its parameters ran");
      });
      return;
    }
    bool clean = false;
    step("launch (checked)", [&] {
      std::vector<tx::Tensor> mine = copies(args);
      c.k.launch(mine);
      clean = true;
      ++res_.launched;
    });
    // The plain twin on the same tensors, where its run is defined: after a
    // clean checked run, and without shared or register memory.
    if (!clean || c.func.allocates || !in_.chance(60)) return;
    for (const Compiled& other : kernels_) {
      if (other.func.id != c.func.id || other.checked) continue;
      log("launch its plain twin");
      step("launch (plain)", [&] {
        other.k.launch(args);
        ++res_.launched;
      });
      break;
    }
  }

  static bool must_refuse(const tx::Kernel& k, const std::vector<tx::Tensor>& args) {
    const auto& ps = k.info().params;
    if (ps.size() != args.size()) return true;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const tx::Tensor& t = args[i];
      if (!t.defined() || t.numel() == 0 || t.dtype() != ps[i].dtype || t.shape() != ps[i].shape)
        return true;
    }
    return false;
  }

  void make_tensor() {
    Shape s = shape(3);
    tx::DType t = dtype();
    std::int64_t n = detail::small_numel(s);
    bool overflow = detail::bytes_overflow(s, t);
    // Keep real allocations small: a shape of 2^21 .. 2^63 bytes is a
    // request a machine may grant, not a misuse.
    if (n < 0 && !overflow && std::all_of(s.begin(), s.end(), [](std::int64_t e) { return e > 0; }))
      return;
    int how = in_.below(4);
    log("tensor " + detail::shape_str(s) + " " + t.short_name() + " way " + std::to_string(how));
    step("tx::Tensor", [&] {
      tx::Tensor x;
      switch (how) {
        case 0:
          x = tx::Tensor::empty(s, t, tx::Device::host());
          break;
        case 1: {
          std::size_t count = n > 0 ? static_cast<std::size_t>(n) : 0;
          if (in_.chance(20)) count += 1;  // one value too many
          x = tx::Tensor::from_doubles(std::vector<double>(count, 1.0), s, t, tx::Device::host());
          break;
        }
        case 2: {
          std::size_t bytes =
              n > 0 ? static_cast<std::size_t>(n) * static_cast<std::size_t>(std::max(1, t.bytes()))
                    : 0;
          if (in_.chance(20)) bytes += 3;
          std::vector<std::uint8_t> raw(bytes, 0x3c);
          x = tx::Tensor::from_bytes(raw.data(), raw.size(), s, t, tx::Device::host());
          break;
        }
        default:
          x = tx::Tensor::empty(s, t, tx::Device::host());
          x.fill_bits(0x7fc0deadull);
          break;
      }
      keep(tensors_, x, in_);
    });
  }

  void tensor_call() {
    tx::Tensor t = tensors_[pick(tensors_)];
    int op = in_.below(8);
    log("tensor call " + std::to_string(op));
    step("tx::Tensor call", [&] {
      switch (op) {
        case 0: {
          Shape s = shape(3);
          if (detail::small_numel(s) < 0 && !detail::bytes_overflow(s, tx::f32)) return;
          keep(tensors_, t.reshape(s), in_);
          break;
        }
        case 1:
          (void)t.to_doubles();
          break;
        case 2:
          (void)t.to_vector<float>();
          break;
        case 3:
          (void)t.to_vector<std::int32_t>();
          break;
        case 4: {
          std::vector<std::uint8_t> raw(static_cast<std::size_t>(in_.below(64)), 1);
          t.copy_from_bytes(raw.data(), raw.size());
          break;
        }
        case 5:
          t.fill_bits(0xffffffffffffffffull);
          break;
        case 6:
          keep(tensors_, t.to(tx::Device::host()), in_);
          break;
        default:
          (void)t.to_bytes();
          break;
      }
    });
  }

  void inspect() {
    int op = in_.below(8);
    log("inspect " + std::to_string(op));
    step("inspect", [&] {
      const Compiled& c = kernels_[pick(kernels_)];
      const Func& f = funcs_[pick(funcs_)];
      if (!c.real && op >= 1 && op <= 6 && op != 4 && op != 5 && txfuzz::avoided("default-kernel"))
        return;
      std::ostringstream o;
      switch (op) {
        case 0:
          o << f.f;
          break;
        case 1:
          o << c.k.lowered_ir();
          break;
        case 2:
          o << c.k.cuda_source();
          break;
        case 3:
          o << c.k.tirx() << c.k.name() << c.k.device().str();
          break;
        case 4:
          o << tx::structural_hash(f.f) << tx::structural_equal(f.f, funcs_[pick(funcs_)].f);
          break;
        case 5:
          o << tx::to_string(expr()) << tx::to_string(regions_[pick(regions_)]);
          break;
        case 6:
          o << c.k.info().params.size() << c.k.source()->name << c.k.lowered()->name;
          break;
        default:
          o << tx::to_string(f.f, {.canonical = true, .show_locations = true});
          break;
      }
    });
  }

  Bytes& in_;
  bool print_;
  Result res_;
  int nest_ = 0;          // indentation of the trace
  int kernel_depth_ = 0;  // kernels being built
  int kernel_count_ = 0;
  int func_count_ = 0;
  Building cur_;
  std::vector<tx::Handle> handles_;
  std::vector<tx::TileBuffer> bufs_;
  std::vector<tx::Var> vars_;
  std::vector<tx::Expr> exprs_;
  std::vector<tx::BufferRegion> regions_;
  std::vector<Func> funcs_;
  std::vector<Compiled> kernels_;
  std::vector<tx::Tensor> tensors_;
  std::optional<tx::IfBuilder> last_if_;
};

inline Result run_bytes(const std::uint8_t* data, std::size_t size, bool print = false) {
  Bytes in(data, size);
  return Session(in, print).run();
}

}  // namespace txbuild
