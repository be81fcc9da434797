// Invalid tile programs for the fuzzer (fuzz/invalid_fuzzer.cpp) and its
// corpus replay (test/test_fuzz_corpus.cpp).
//
//   bytes --generate--> Program --build--> tx::PrimFunc --compile, run checked, run plain-->
//   Outcome
//
// A Program is a valid skeleton with one injected fault of a known kind:
//
//   grid (C,), block (T,)                 C in 1..3, T in 32 / 64 / 128
//   In (C, T) f32, Out (C, T) f32, Idx (C, T) i32 (indices in [0, T))
//   S shared (k*T) f32, R local (r) f32 per thread
//   prologue: every thread fills its own S elements, a CTA barrier, then
//             its whole R
//   noise:    valid statements -- lets, loops, ifs, barriers, stores to the
//             thread's own Out(bx, t) and to R -- whose indices are in
//             bounds by construction (the generator tracks the range of every
//             integer it builds and wraps an index that could leave its
//             buffer in floormod or a clamp)
//   fault:    the invalid construct, last, on buffers of its own (F shared,
//             Q / Qi global outputs, J an index buffer), so that the noise
//             never changes what the fault does
//
// The faults (Program::fault): element indices out of bounds (constants,
// affine in thread / CTA / loop ids, loaded from memory), T::let / loop
// variables and buffers used after their block or from an earlier kernel,
// races (no barrier between a shared write and another thread's read, several
// threads or CTAs writing one element), overlapping copies, writes through a
// non-injective layout, huge extents (shapes past 2^31 elements, shared memory
// over 227 KiB, register tiles over 512 KiB, 2^31 CTAs, 2048 threads),
// zero / negative extents, integer division by zero, constant arithmetic at
// the edges of its dtype, expressions thousands of operations deep, launches
// with the wrong tensors, and "wild" programs whose indices and barriers are
// random. The generator knows, by construction, what each must give
// (Program::expect):
//
//   reject        a tx::Error while building or compiling, before any run
//   error         a tx::Error at some stage; when it comes from the checked
//                 run (the fault needs the run-time values), its message names
//                 the problem (Program::keyword: "out of bounds", "race", ...)
//   clean         compiles, the checked run finds nothing, the plain run
//                 gives the checked run's bytes
//   launch_error  a launch with the wrong tensors fails before running
//   any           a tx::Error or a normal completion
//
// and, always: never a signal, a sanitizer report or another exception type
// (run_program's Outcome::finding). Invalid programs are run in the checked
// mode only; the plain host run, where an out-of-bounds index is undefined,
// follows only a clean checked run on the same inputs (the same accesses)
// or a fault whose plain result is documented (division by zero: the host
// divides by 1, checked against that rule). Huge allocations never reach a
// run: such programs are compiled only, or launched with small tensors that
// the launch must refuse.
//
// Changing the generator changes what every corpus file means: re-minimize
// fuzz/corpus-invalid afterwards (fuzz/run.sh --merge invalid).
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "tx/tx.hpp"

namespace txbad {

using tx::BinOp;
using tx::DType;
using tx::ExecScope;
using tx::MemScope;
using txfuzz::Bytes;
using Shape = std::vector<std::int64_t>;

// ---------------------------------------------------------------- program

// An expression over the ids, the bindings and the buffers of the kernel.
struct E {
  enum Kind { lit, flit, tid, bx, var, load, bin, cast, select, chain } kind = lit;
  std::int64_t i = 0;     // lit: value; var: binding id; load: buffer; chain: terms
  double f = 0;           // flit: value
  DType dtype = tx::i32;  // lit, flit, cast
  BinOp op = BinOp::Add;  // bin
  std::vector<E> args;    // load: indices; bin: a, b; cast: value; select: c, t, f
};
// chain: In(bx, (t + 0) mod T) + In(bx, (t + 1) mod T) + ... over `i` terms,
// built as a user's loop would, one operation deeper per term (args[0] is In).

// A (start, extent) range of a tile-op region.
struct Range {
  E start;
  std::int64_t extent = 1;
};

struct St {
  enum Kind { store, let, loop, if_, sync, copy, alloc, deep } kind = store;
  int buf = 0;                       // store, copy (destination), alloc, deep
  int src = 0;                       // copy: source buffer
  int id = 0;                        // let, loop: binding id
  std::vector<E> idx;                // store: indices
  E value;                           // store, let: value; if: condition; loop: extent; deep: chain
  E min;                             // loop: first value
  bool unroll = false;               // loop
  bool write_between = false;        // deep: a store between building the value and using it
  ExecScope scope = ExecScope::cta;  // sync, copy
  std::vector<Range> dst, srcr;      // copy regions
  std::vector<St> body, orelse;      // loop, if
};

// How the launch fills a global buffer.
struct Fill {
  enum Kind { floats, ints, pattern } kind = Fill::floats;
  // ints: uniform in [lo, hi]; pattern: element (c, t) holds (t * lo + c) mod hi
  // (c the row, t the column: a thread's index into a row of T)
  std::int64_t lo = 0, hi = 0;
  bool nonzero = false;                      // ints: a 0 drawn becomes 1 (divisors)
  std::map<std::int64_t, std::int64_t> set;  // element -> value, over the rest
};

struct Buf {
  std::string name;
  MemScope scope = MemScope::global;
  DType dtype = tx::f32;
  Shape shape;
  std::vector<tx::Iter> layout;  // empty: row-major on memory
  bool foreign = false;          // a parameter of an earlier kernel, not of this one
  bool by_stmt = false;          // shared / local: allocated where an St::alloc stands
  Fill fill;                     // global
  Shape launch_shape;            // global: the tensor's shape when not `shape` (huge buffers)
};

enum class Expect { clean, reject, error, launch_error, any };
enum class BadLaunch { none, shape, dtype, empty, undefined, fewer, more };

struct Program {
  std::string fault = "none";
  Expect expect = Expect::clean;
  std::string keyword;  // error: part of the checked run's message
  std::string why;      // how the generator decided `expect` (for reading findings)
  Shape grid{1}, block{32};
  std::vector<Buf> bufs;  // globals, in parameter order, then shared / local
  std::vector<St> body;
  int foreign_var = -1;  // a binding made by T::let in an earlier kernel
  bool run = true;       // false: compile only (too large to run)
  BadLaunch launch = BadLaunch::none;
  // The documented host result of integer division, checked after the plain
  // run: out = num OP den, dividing by 1 where den is 0 (or num is the
  // smallest value and den -1).
  struct Division {
    int out = -1, num = -1, den = -1;
    BinOp op = BinOp::Div;
  } division;
};

inline std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto e : s) n *= e;
  return n;
}

// ---------------------------------------------------------------- printing

inline const char* expect_name(Expect e) {
  switch (e) {
    case Expect::clean:
      return "clean";
    case Expect::reject:
      return "reject";
    case Expect::error:
      return "error";
    case Expect::launch_error:
      return "launch_error";
    case Expect::any:
      return "any";
  }
  return "?";
}

inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

inline std::string expr_str(const Program& p, const E& e) {
  auto a = [&](std::size_t k) { return expr_str(p, e.args[k]); };
  switch (e.kind) {
    case E::lit:
      return e.dtype == tx::i32 ? std::to_string(e.i)
                                : "T." + e.dtype.name() + "(" + std::to_string(e.i) + ")";
    case E::flit: {
      std::ostringstream o;
      o.precision(9);
      o << e.f;
      return e.dtype == tx::f32 ? o.str() : "T." + e.dtype.name() + "(" + o.str() + ")";
    }
    case E::tid:
      return "t";
    case E::bx:
      return "bx";
    case E::var:
      return "v" + std::to_string(e.i);
    case E::load: {
      std::string s = p.bufs[static_cast<std::size_t>(e.i)].name + "[";
      for (std::size_t k = 0; k < e.args.size(); ++k) s += (k ? ", " : "") + a(k);
      return s + "]";
    }
    case E::bin: {
      std::string name = tx::binop_symbol(e.op);
      if (std::isalpha(static_cast<unsigned char>(name[0])))
        return name + "(" + a(0) + ", " + a(1) + ")";
      return "(" + a(0) + " " + name + " " + a(1) + ")";
    }
    case E::cast:
      return "cast(" + a(0) + ", " + e.dtype.short_name() + ")";
    case E::select:
      return "select(" + a(0) + ", " + a(1) + ", " + a(2) + ")";
    case E::chain:
      return "sum of " + std::to_string(e.i) + " terms " +
             p.bufs[static_cast<std::size_t>(e.args[0].i)].name + "[bx, (t + k) mod T]";
  }
  return "?";
}

inline std::string range_str(const Program& p, int buf, const std::vector<Range>& r) {
  std::string s = p.bufs[static_cast<std::size_t>(buf)].name + "[";
  for (std::size_t d = 0; d < r.size(); ++d)
    s += (d ? ", " : "") + expr_str(p, r[d].start) + " : +" + std::to_string(r[d].extent);
  return s + "]";
}

inline void stmt_str(const Program& p, const St& s, int depth, std::ostringstream& o) {
  std::string pad(static_cast<std::size_t>(2 + 2 * depth), ' ');
  auto block = [&](const std::vector<St>& b) {
    for (const St& x : b) stmt_str(p, x, depth + 1, o);
  };
  const std::string& name = p.bufs[static_cast<std::size_t>(s.buf)].name;
  switch (s.kind) {
    case St::store: {
      o << pad << name << "[";
      for (std::size_t k = 0; k < s.idx.size(); ++k) o << (k ? ", " : "") << expr_str(p, s.idx[k]);
      o << "] = " << expr_str(p, s.value) << "\n";
      break;
    }
    case St::let:
      o << pad << "v" << s.id << " = T.let(" << expr_str(p, s.value) << ")\n";
      break;
    case St::loop:
      o << pad << "for v" << s.id << " in " << (s.unroll ? "unroll(" : "serial(")
        << expr_str(p, s.min) << ", +" << expr_str(p, s.value) << "):\n";
      block(s.body);
      break;
    case St::if_:
      o << pad << "if " << expr_str(p, s.value) << ":\n";
      block(s.body);
      if (!s.orelse.empty()) {
        o << pad << "else:\n";
        block(s.orelse);
      }
      break;
    case St::sync:
      o << pad << "T.cuda." << tx::exec_scope_name(s.scope) << "_sync()\n";
      break;
    case St::copy:
      o << pad << "Tx." << tx::exec_scope_name(s.scope) << ".copy(" << range_str(p, s.buf, s.dst)
        << ", " << range_str(p, s.src, s.srcr) << ")\n";
      break;
    case St::alloc:
      o << pad << "alloc " << name << "\n";
      break;
    case St::deep:
      o << pad << "acc = " << expr_str(p, s.value) << "\n";
      if (s.write_between) o << pad << name << "[bx, t] = 0\n";
      o << pad << name << "[bx, t] = acc\n";
      break;
  }
}

inline const char* launch_name(BadLaunch b) {
  switch (b) {
    case BadLaunch::none:
      return "";
    case BadLaunch::shape:
      return "a tensor of another shape";
    case BadLaunch::dtype:
      return "a tensor of another dtype";
    case BadLaunch::empty:
      return "a zero-size tensor";
    case BadLaunch::undefined:
      return "an undefined tensor";
    case BadLaunch::fewer:
      return "one tensor too few";
    case BadLaunch::more:
      return "one tensor too many";
  }
  return "?";
}

// The program as text (for findings and for reading the corpus).
inline std::string describe(const Program& p) {
  std::ostringstream o;
  o << "fault " << p.fault << ", expect " << expect_name(p.expect);
  if (!p.keyword.empty()) o << " (\"" << p.keyword << "\")";
  if (!p.why.empty()) o << ": " << p.why;
  o << "\n  grid " << shape_str(p.grid) << ", block " << shape_str(p.block)
    << (p.run ? "" : ", compiled only") << "\n";
  if (p.launch != BadLaunch::none) o << "  launched with " << launch_name(p.launch) << "\n";
  for (const Buf& b : p.bufs) {
    o << "  " << b.name << ": " << tx::mem_scope_name(b.scope) << " " << b.dtype.short_name() << " "
      << shape_str(b.shape);
    if (!b.layout.empty()) {
      o << " S(";
      for (std::size_t k = 0; k < b.layout.size(); ++k)
        o << (k ? ", " : "") << b.layout[k].extent << ":" << b.layout[k].stride;
      o << ")";
    }
    if (b.foreign) o << " (a parameter of an earlier kernel)";
    if (b.by_stmt) o << " (allocated in the body)";
    if (!b.launch_shape.empty()) o << " (launched with " << shape_str(b.launch_shape) << ")";
    if (b.scope == MemScope::global && !b.foreign) {
      if (b.fill.kind == Fill::ints) o << " ints [" << b.fill.lo << ", " << b.fill.hi << "]";
      if (b.fill.kind == Fill::pattern) o << " (t * " << b.fill.lo << " + c) mod " << b.fill.hi;
      for (auto [e, v] : b.fill.set) o << ", [" << e << "] = " << v;
    }
    o << "\n";
  }
  if (p.foreign_var >= 0) o << "  v" << p.foreign_var << ": a T.let of an earlier kernel\n";
  for (const St& s : p.body) stmt_str(p, s, 0, o);
  return o.str();
}

// ---------------------------------------------------------------- generator

namespace gen_detail {

inline E lit(std::int64_t v, DType t = tx::i32) {
  E e;
  e.kind = E::lit;
  e.i = v;
  e.dtype = t;
  return e;
}
inline E flit(double v, DType t = tx::f32) {
  E e;
  e.kind = E::flit;
  e.f = v;
  e.dtype = t;
  return e;
}
inline E leaf(E::Kind k, std::int64_t i = 0) {
  E e;
  e.kind = k;
  e.i = i;
  return e;
}
inline E bin(BinOp op, E a, E b) {
  E e;
  e.kind = E::bin;
  e.op = op;
  e.args = {std::move(a), std::move(b)};
  return e;
}
inline E load(int buf, std::vector<E> idx) {
  E e;
  e.kind = E::load;
  e.i = buf;
  e.args = std::move(idx);
  return e;
}
inline E cast(E v, DType t) {
  E e;
  e.kind = E::cast;
  e.dtype = t;
  e.args = {std::move(v)};
  return e;
}
inline E select(E c, E a, E b) {
  E e;
  e.kind = E::select;
  e.args = {std::move(c), std::move(a), std::move(b)};
  return e;
}
inline St store(int buf, std::vector<E> idx, E value) {
  St s;
  s.kind = St::store;
  s.buf = buf;
  s.idx = std::move(idx);
  s.value = std::move(value);
  return s;
}
inline St sync(ExecScope scope) {
  St s;
  s.kind = St::sync;
  s.scope = scope;
  return s;
}

// floor division and modulo, as tx::floordiv / floormod.
inline std::int64_t fdiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline std::int64_t fmod(std::int64_t a, std::int64_t b) { return a - fdiv(a, b) * b; }

// An integer the generator built, with the range of its values over every
// thread and iteration (the noise's indices are in bounds by this range).
struct IntVal {
  E e;
  std::int64_t lo = 0, hi = 0;
};

// What a block of noise may use: the integers and floats bound so far
// (copied into nested blocks, so that nothing escapes its block).
struct Ctx {
  std::vector<IntVal> ints;
  std::vector<E> floats;
  int depth = 0;
  bool top() const { return depth == 0; }
};

}  // namespace gen_detail

class Generator {
 public:
  explicit Generator(Bytes& in) : in_(in) {}

  Program run() {
    using namespace gen_detail;
    // The fault first: even a short input picks any of them.
    static const char* const kFaults[] = {
        "none",         "const_index",  "affine_index", "guarded_index", "loaded_index",
        "escape",       "shared_race",  "write_race",   "global_race",   "cta_race",
        "overlap_copy", "noninjective", "huge_shared",  "huge_local",    "huge_global",
        "huge_ids",     "zero_extent",  "div_zero",     "const_arith",   "deep_expr",
        "bad_launch",   "wild"};
    std::string fault = in_.pick(kFaults);
    wild_ = fault == "wild";
    p_.grid = {1 + in_.below(3)};
    static const int kThreads[] = {32, 64, 128};
    p_.block = {in_.pick(kThreads)};
    C_ = p_.grid[0];
    T_ = p_.block[0];
    k_ = 1 + in_.below(2);
    r_ = 1 + in_.below(4);
    in_buf_ = add_global("In", tx::f32, {C_, T_});
    out_ = add_global("Out", tx::f32, {C_, T_});
    idx_ = add_global("Idx", tx::i32, {C_, T_});
    p_.bufs[static_cast<std::size_t>(idx_)].fill = pattern_fill();
    s_ = add_local_or_shared("S", MemScope::shared, tx::f32, {k_ * T_});
    r_buf_ = add_local_or_shared("R", MemScope::local, tx::f32, {r_});

    Ctx c;
    c.ints = {{leaf(E::tid), 0, T_ - 1}, {leaf(E::bx), 0, C_ - 1}};
    prologue();
    // The fault's statements come last in the kernel but are generated
    // before the noise, so that a short input reaches their choices.
    std::vector<St> start = std::move(p_.body);
    p_.body.clear();
    p_.fault = fault;
    inject(fault);
    std::vector<St> fault_stmts = std::move(p_.body);
    p_.body = std::move(start);
    noise(p_.body, c, 1 + in_.below(6));
    p_.body.insert(p_.body.end(), fault_stmts.begin(), fault_stmts.end());
    return p_;
  }

 private:
  // ------------------------------------------------------------ buffers

  int add_global(const std::string& name, DType t, Shape shape) {
    Buf b;
    b.name = name;
    b.dtype = t;
    b.shape = std::move(shape);
    b.fill.kind = t.is_float() ? Fill::floats : Fill::ints;
    b.fill.lo = -50;
    b.fill.hi = 50;
    // The kernel's parameters are the globals in the order they appear.
    p_.bufs.push_back(std::move(b));
    return static_cast<int>(p_.bufs.size()) - 1;
  }
  int add_local_or_shared(const std::string& name, MemScope s, DType t, Shape shape) {
    Buf b;
    b.name = name;
    b.scope = s;
    b.dtype = t;
    b.shape = std::move(shape);
    p_.bufs.push_back(std::move(b));
    return static_cast<int>(p_.bufs.size()) - 1;
  }
  Buf& buf(int i) { return p_.bufs[static_cast<std::size_t>(i)]; }

  // Indices in [0, T): element (c, t) holds (t * m + c) mod T, m odd, so
  // each row is a permutation when T is a power of two.
  Fill pattern_fill() {
    Fill f;
    f.kind = Fill::pattern;
    f.lo = 1 + 2 * in_.below(8);
    f.hi = T_;
    return f;
  }
  static std::int64_t pattern_value(const Fill& f, std::int64_t elem, std::int64_t cols) {
    auto it = f.set.find(elem);
    if (it != f.set.end()) return it->second;
    return ((elem % cols) * f.lo + elem / cols) % f.hi;
  }

  // ------------------------------------------------------------ skeleton

  // Every thread writes its own elements of S, a CTA barrier, then its R:
  // afterwards S and R hold defined values everywhere (so a plain run after
  // a clean checked run reads what the checked run read).
  void prologue() {
    using namespace gen_detail;
    int j = fresh();
    St ls;
    ls.kind = St::loop;
    ls.id = j;
    ls.min = lit(0);
    ls.value = lit(k_);
    ls.body = {store(s_, {bin(BinOp::Add, bin(BinOp::Mul, leaf(E::var, j), lit(T_)), leaf(E::tid))},
                     bin(BinOp::Add, load(in_buf_, {leaf(E::bx), leaf(E::tid)}),
                         cast(leaf(E::var, j), tx::f32)))};
    p_.body.push_back(ls);
    p_.body.push_back(sync(ExecScope::cta));
    int i = fresh();
    St lr;
    lr.kind = St::loop;
    lr.id = i;
    lr.min = lit(0);
    lr.value = lit(r_);
    lr.unroll = in_.chance(30);
    lr.body = {store(r_buf_, {leaf(E::var, i)},
                     load(in_buf_, {leaf(E::bx), bin(BinOp::FloorMod,
                                                     bin(BinOp::Add, leaf(E::tid), leaf(E::var, i)),
                                                     lit(T_))}))};
    p_.body.push_back(lr);
  }

  int fresh() { return next_id_++; }

  // ------------------------------------------------------------ noise

  // An integer from what the block has bound, possibly transformed, with its
  // range; in wild programs, also one from a block already closed (an escape)
  // or a constant anywhere.
  gen_detail::IntVal ival(gen_detail::Ctx& c, int depth = 0) {
    using namespace gen_detail;
    if (wild_ && in_.chance(10) && !escaped_.empty())
      return escaped_[static_cast<std::size_t>(in_.below(static_cast<int>(escaped_.size())))];
    if (wild_ && in_.chance(10)) {
      static const std::int64_t kWild[] = {-1, 0, 7, 1000, -2147483647 - 1, 2147483647};
      std::int64_t v = in_.pick(kWild);
      return {lit(v), v, v};
    }
    IntVal x;
    switch (in_.below(depth < 2 ? 6 : 2)) {
      case 0:
      case 1:
        x = c.ints[static_cast<std::size_t>(in_.below(static_cast<int>(c.ints.size())))];
        break;
      case 2: {  // an index loaded from Idx: [0, T)
        IntVal col = in_range(c, T_, depth + 1);
        x = {load(idx_, {leaf(E::bx), col.e}), 0, T_ - 1};
        if (wild_ && in_.chance(20)) x.e = load(idx_, {leaf(E::bx), ival(c, depth + 1).e});
        break;
      }
      case 3: {  // a * x + b
        IntVal a = ival(c, depth + 1);
        static const std::int64_t kMul[] = {1, 2, 3, -1, 4, 0};
        std::int64_t m = in_.pick(kMul), b = in_.below(9) - 4;
        x.e = bin(BinOp::Add, bin(BinOp::Mul, a.e, lit(m)), lit(b));
        x.lo = std::min(a.lo * m, a.hi * m) + b;
        x.hi = std::max(a.lo * m, a.hi * m) + b;
        break;
      }
      case 4: {  // floordiv / floormod by a positive constant (or anything in wild programs)
        IntVal a = ival(c, depth + 1);
        std::int64_t d = 1 + in_.below(8);
        bool mod = in_.chance(50);
        if (wild_ && in_.chance(25)) {
          IntVal w = ival(c, depth + 1);
          static const BinOp kOps[] = {BinOp::Div, BinOp::Mod, BinOp::FloorDiv, BinOp::FloorMod};
          x.e = bin(in_.pick(kOps), a.e, w.e);
          x.lo = -std::max(std::abs(a.lo), std::abs(a.hi));
          x.hi = -x.lo;
          break;
        }
        x.e = bin(mod ? BinOp::FloorMod : BinOp::FloorDiv, a.e, lit(d));
        x.lo = mod ? 0 : fdiv(a.lo, d);
        x.hi = mod ? d - 1 : fdiv(a.hi, d);
        break;
      }
      default: {  // min / max with a constant
        IntVal a = ival(c, depth + 1);
        std::int64_t k = in_.below(2 * T_) - 4;
        bool mn = in_.chance(50);
        x.e = bin(mn ? BinOp::Min : BinOp::Max, a.e, lit(k));
        x.lo = mn ? std::min(a.lo, k) : std::max(a.lo, k);
        x.hi = mn ? std::min(a.hi, k) : std::max(a.hi, k);
        break;
      }
    }
    return x;
  }

  // An index in [0, n): a constant, or an integer of the block, wrapped
  // (floormod or a clamp) when its range leaves [0, n). Wild programs
  // sometimes leave it unwrapped.
  gen_detail::IntVal in_range(gen_detail::Ctx& c, std::int64_t n, int depth = 0) {
    using namespace gen_detail;
    if (depth > 2 || in_.chance(20)) {
      std::int64_t v = in_.below(static_cast<int>(std::min<std::int64_t>(n, 60000)));
      return {lit(v), v, v};
    }
    IntVal x = ival(c, depth + 1);
    if (x.lo >= 0 && x.hi < n) return x;
    if (wild_ && in_.chance(30)) return x;  // may leave the buffer
    if (in_.chance(50)) return {bin(BinOp::FloorMod, x.e, lit(n)), 0, n - 1};
    return {bin(BinOp::Min, bin(BinOp::Max, x.e, lit(0)), lit(n - 1)),
            std::max<std::int64_t>(0, std::min(x.lo, n - 1)),
            std::min(std::max<std::int64_t>(x.hi, 0), n - 1)};
  }

  // A float value of the block: constants, In anywhere, S anywhere (after
  // the prologue's barrier), R, the thread's own Out, integers cast, float
  // lets, arithmetic and selects.
  E fval(gen_detail::Ctx& c, int depth = 0) {
    using namespace gen_detail;
    switch (in_.below(depth < 3 ? 9 : 5)) {
      case 0:
        return flit(0.5 + in_.below(32) / 8.0);
      case 1:
        return load(in_buf_, {in_range(c, C_).e, in_range(c, T_).e});
      case 2:
        return load(s_, {in_range(c, k_ * T_).e});
      case 3:
        return load(r_buf_, {in_range(c, r_).e});
      case 4:
        return load(out_, {leaf(E::bx), leaf(E::tid)});
      case 5:
        return cast(ival(c, depth + 1).e, tx::f32);
      case 6:
        if (!c.floats.empty())
          return c.floats[static_cast<std::size_t>(in_.below(static_cast<int>(c.floats.size())))];
        return flit(1.5);
      case 7: {
        static const BinOp kOps[] = {BinOp::Add, BinOp::Sub, BinOp::Mul,
                                     BinOp::Min, BinOp::Max, BinOp::Div};
        return bin(in_.pick(kOps), fval(c, depth + 1), fval(c, depth + 1));
      }
      default:
        return select(cond(c), fval(c, depth + 1), fval(c, depth + 1));
    }
  }

  E cond(gen_detail::Ctx& c) {
    using namespace gen_detail;
    static const BinOp kCmp[] = {BinOp::LT, BinOp::GE, BinOp::EQ, BinOp::NE, BinOp::LE, BinOp::GT};
    IntVal x = ival(c);
    E e =
        bin(in_.pick(kCmp), x.e,
            lit(x.lo + in_.below(static_cast<int>(std::min<std::int64_t>(x.hi - x.lo + 2, 200)))));
    if (in_.chance(20)) e = bin(in_.chance(50) ? BinOp::And : BinOp::Or, e, cond(c));
    return e;
  }

  // Valid statements: nothing they do depends on the schedule, and every
  // index is in bounds (wild programs: anything).
  void noise(std::vector<St>& out, gen_detail::Ctx c, int n) {
    using namespace gen_detail;
    std::vector<IntVal> bound;  // integers bound in this block
    for (int s = 0; s < n; ++s) {
      switch (in_.below(c.depth < 2 ? 9 : 5)) {
        case 0:
        case 1:
          out.push_back(store(out_, {leaf(E::bx), leaf(E::tid)}, fval(c)));
          if (wild_ && in_.chance(30))  // another thread's element, or out of bounds
            out.back().idx = {ival(c).e, ival(c).e};
          break;
        case 2:
          out.push_back(store(r_buf_, {in_range(c, r_).e}, fval(c)));
          break;
        case 3: {
          St l;
          l.kind = St::let;
          l.id = fresh();
          if (in_.chance(60)) {
            IntVal x = ival(c);
            l.value = x.e;
            c.ints.push_back({leaf(E::var, l.id), x.lo, x.hi});
            bound.push_back(c.ints.back());
          } else {
            l.value = fval(c);
            c.floats.push_back(leaf(E::var, l.id));
          }
          out.push_back(l);
          break;
        }
        case 4:
          if (c.top() || wild_) {
            static const ExecScope kSync[] = {ExecScope::cta, ExecScope::warp, ExecScope::cta,
                                              ExecScope::warpgroup};
            ExecScope sc = in_.pick(kSync);
            if (sc == ExecScope::warpgroup && T_ % 128 != 0 && !wild_) sc = ExecScope::cta;
            out.push_back(sync(sc));
            if (wild_ && in_.chance(20))  // a shared write after the prologue: maybe racy
              out.push_back(store(s_, {in_range(c, k_ * T_).e}, fval(c)));
          }
          break;
        case 5:
        case 6: {
          St l;
          l.kind = St::loop;
          l.id = fresh();
          std::int64_t lo = in_.chance(70) ? 0 : in_.below(5) - 2;
          std::int64_t ext = in_.below(5);
          l.min = lit(lo);
          l.value = lit(ext);
          if (wild_ && in_.chance(20)) {  // a bound that varies per thread
            IntVal x = ival(c);
            if (x.hi <= 64) l.value = x.e, ext = std::max<std::int64_t>(x.hi, 1);
          }
          l.unroll = lo == 0 && in_.chance(25);
          if (l.unroll) l.min = lit(0);
          Ctx inner = c;
          ++inner.depth;
          IntVal var{leaf(E::var, l.id), lo, lo + std::max<std::int64_t>(ext, 1) - 1};
          inner.ints.push_back(var);
          noise(l.body, inner, 1 + in_.below(3));
          escaped_.push_back(var);
          out.push_back(l);
          break;
        }
        default: {
          St f;
          f.kind = St::if_;
          f.value = cond(c);
          Ctx inner = c;
          ++inner.depth;
          noise(f.body, inner, 1 + in_.below(3));
          if (in_.chance(30)) noise(f.orelse, inner, 1 + in_.below(2));
          out.push_back(f);
          break;
        }
      }
    }
    // What was bound in this block is out of scope from here (wild
    // programs may still use it: an escape).
    if (c.depth > 0) escaped_.insert(escaped_.end(), bound.begin(), bound.end());
  }

  // ------------------------------------------------------------ faults

  static std::string approx(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }

  void expect(Expect e, std::string keyword, std::string why) {
    p_.expect = e;
    p_.keyword = std::move(keyword);
    p_.why = std::move(why);
  }

  // The fault's own output (global, (C, T)) and shared buffer.
  int q(DType t = tx::f32) {
    if (q_ < 0) q_ = add_global(t == tx::f32 ? "Q" : "Qi", t, {C_, T_});
    return q_;
  }
  int f_buf(std::int64_t n) {
    if (f_ < 0) f_ = add_local_or_shared("F", MemScope::shared, tx::f32, {n});
    return f_;
  }
  // F(j * T + t) = In(bx, t) + j for j < n / T: each thread its own elements.
  void fill_f(int f, std::int64_t n) {
    using namespace gen_detail;
    int j = fresh();
    St l;
    l.kind = St::loop;
    l.id = j;
    l.min = lit(0);
    l.value = lit(n / T_);
    l.body = {store(f, {bin(BinOp::Add, bin(BinOp::Mul, leaf(E::var, j), lit(T_)), leaf(E::tid))},
                    bin(BinOp::Add, load(in_buf_, {leaf(E::bx), leaf(E::tid)}),
                        cast(leaf(E::var, j), tx::f32)))};
    p_.body.push_back(l);
  }
  E own_in() const {
    using namespace gen_detail;
    return load(in_buf_, {leaf(E::bx), leaf(E::tid)});
  }
  std::vector<E> own() const {
    using namespace gen_detail;
    return {leaf(E::bx), leaf(E::tid)};
  }

  // A constant index outside [0, n); near it when `near` (arithmetic on it
  // must not overflow 32 bits).
  std::int64_t outside(std::int64_t n, bool near = false) {
    static const std::int64_t kFar[] = {2147483647, -2147483647 - 1, 1 << 20, -1000};
    switch (in_.below(near ? 3 : 4)) {
      case 0:
        return n + in_.below(4);
      case 1:
        return -1 - in_.below(4);
      case 2:
        return n * (2 + in_.below(4));
      default:
        return in_.pick(kFar);
    }
  }

  // A permutation-ish map of thread t to another thread's element, and
  // whether it sends some thread to an element it does not own.
  E perm(std::vector<std::int64_t>& to) {
    using namespace gen_detail;
    to.resize(static_cast<std::size_t>(T_));
    E t = leaf(E::tid);
    switch (in_.below(4)) {
      case 0: {
        std::int64_t s = in_.below(static_cast<int>(T_));
        for (std::int64_t x = 0; x < T_; ++x) to[static_cast<std::size_t>(x)] = (x + s) % T_;
        return bin(BinOp::FloorMod, bin(BinOp::Add, t, lit(s)), lit(T_));
      }
      case 1:
        for (std::int64_t x = 0; x < T_; ++x) to[static_cast<std::size_t>(x)] = T_ - 1 - x;
        return bin(BinOp::Sub, lit(T_ - 1), t);
      case 2: {
        std::int64_t m = in_.below(static_cast<int>(T_));
        for (std::int64_t x = 0; x < T_; ++x) to[static_cast<std::size_t>(x)] = x ^ m;
        return bin(BinOp::BitXor, t, lit(m));
      }
      default: {
        std::int64_t k = in_.below(static_cast<int>(T_));
        for (std::int64_t x = 0; x < T_; ++x) to[static_cast<std::size_t>(x)] = k;
        return lit(k);
      }
    }
  }

  // Threads x and y are ordered by a barrier of `scope` between them
  // (none: only a thread with itself).
  bool ordered(std::optional<ExecScope> scope, std::int64_t x, std::int64_t y) const {
    if (x == y) return true;
    if (!scope) return false;
    switch (*scope) {
      case ExecScope::cta:
        return true;
      case ExecScope::warpgroup:
        return x / 128 == y / 128;
      case ExecScope::warp:
        return x / 32 == y / 32;
      case ExecScope::thread:
        return false;
    }
    return false;
  }

  std::optional<ExecScope> pick_barrier() {
    switch (in_.below(4)) {
      case 0:
        return std::nullopt;
      case 1:
        return ExecScope::warp;
      case 2:
        return T_ % 128 == 0 ? ExecScope::warpgroup : ExecScope::warp;
      default:
        return ExecScope::cta;
    }
  }

  void inject(const std::string& fault) {
    using namespace gen_detail;
    auto& body = p_.body;
    if (fault == "none" || fault == "wild") {
      if (fault == "wild")
        expect(Expect::any, "", "random indices, escapes and barriers");
      else
        expect(Expect::clean, "", "the skeleton alone");
      return;
    }
    if (fault == "const_index") {
      // A constant index outside its dimension, in a store or a load, at
      // the top or in a loop that runs: provably out of bounds.
      bool st = in_.chance(50);
      int dim = in_.below(2);
      std::int64_t n = dim == 0 ? C_ : T_, k = outside(n);
      std::vector<E> idx = own();
      idx[static_cast<std::size_t>(dim)] = lit(k);
      St s = st ? store(q(), idx, own_in()) : store(q(), own(), load(in_buf_, idx));
      wrap_in_loop(s);
      expect(Expect::reject, "outside",
             "index " + std::to_string(k) + " of a dimension of " + std::to_string(n));
      return;
    }
    if (fault == "affine_index") {
      // a * x + b over a thread / CTA / loop id whose range leaves [0, n)
      // for some value of the id.
      int which = in_.below(3);  // t, bx (when there are several CTAs), a loop variable
      if (which == 1 && C_ == 1) which = 0;
      std::int64_t lo = 0, hi = which == 0 ? T_ - 1 : which == 1 ? C_ - 1 : 1 + in_.below(6);
      E x = which == 0 ? leaf(E::tid) : which == 1 ? leaf(E::bx) : leaf(E::var, fresh());
      std::int64_t a = 1 + in_.below(4), n = T_;
      bool over = in_.chance(60);
      std::int64_t b = over ? n - a * hi + in_.below(3) : -a * lo - 1 - in_.below(3);
      E idx = bin(BinOp::Add, bin(BinOp::Mul, x, lit(a)), lit(b));
      bool st = in_.chance(40) && which == 0;  // a store stays one element per thread
      St s = st ? store(q(), {leaf(E::bx), idx}, own_in())
                : store(q(), own(), load(in_buf_, {leaf(E::bx), idx}));
      if (which == 2) {
        St l;
        l.kind = St::loop;
        l.id = static_cast<int>(x.i);
        l.min = lit(lo);
        l.value = lit(hi - lo + 1);
        l.body = {s};
        body.push_back(l);
      } else {
        body.push_back(s);
      }
      expect(Expect::reject, "outside",
             "reaches " + std::to_string(over ? a * hi + b : a * lo + b) + " outside [0, " +
                 std::to_string(n) + ")");
      return;
    }
    if (fault == "guarded_index") {
      // In(bx, a * t + b) under `if t < g`, in bounds for exactly the guarded
      // threads (or, rarely, one thread past them: out of bounds).
      std::int64_t a = 1 + in_.below(3), b = in_.below(4);
      std::int64_t g = std::max<std::int64_t>(1, (T_ - 1 - b) / a + 1);  // a * (g - 1) + b < T
      bool past = in_.chance(15);
      if (past) ++g;
      E idx = bin(BinOp::Add, bin(BinOp::Mul, leaf(E::tid), lit(a)), lit(b));
      St f;
      f.kind = St::if_;
      f.value = in_.chance(50) ? bin(BinOp::LT, leaf(E::tid), lit(g))
                               : bin(BinOp::LE, leaf(E::tid), lit(g - 1));
      f.body = {store(q(), own(), load(in_buf_, {leaf(E::bx), idx}))};
      body.push_back(f);
      bool oob = a * (std::min(g, T_) - 1) + b >= T_;
      if (oob)
        expect(Expect::error, "out of bounds", "the guard lets one thread past the buffer");
      else
        expect(Expect::clean, "", "the guard keeps the index in bounds");
      return;
    }
    if (fault == "loaded_index") {
      // target(J(bx, t) + k) with J a permutation of [0, T) whose element at
      // (c0, t0) may be replaced by a value outside; out of bounds iff some
      // thread's final index leaves the target.
      int j = add_global("J", tx::i32, {C_, T_});
      Fill& fill = buf(j).fill;
      fill = pattern_fill();
      std::int64_t c0 = in_.below(static_cast<int>(C_)), t0 = in_.below(static_cast<int>(T_));
      int target = in_.below(3);  // In (row of T), S (k * T), R (r)
      std::int64_t n = target == 0 ? T_ : target == 1 ? k_ * T_ : r_;
      std::int64_t k = in_.chance(70) ? 0 : in_.below(5) - 2;
      bool wrap = target == 2 && in_.chance(50);
      if (in_.chance(70)) fill.set[c0 * T_ + t0] = outside(n, k != 0 || wrap);
      E idx = load(j, own());
      if (k) idx = bin(BinOp::Add, idx, lit(k));
      if (wrap) idx = bin(BinOp::FloorMod, idx, lit(std::max<std::int64_t>(2, r_ + 1)));
      // Out of bounds in its dimension; and past the whole buffer (In is
      // (C, T): row c's index T + 1 is element (c + 1, 1) of the storage).
      bool oob = false, past_storage = false;
      for (std::int64_t e = 0; e < C_ * T_; ++e) {
        std::int64_t v = pattern_value(fill, e, T_) + k;
        if (wrap) v = fmod(v, std::max<std::int64_t>(2, r_ + 1));
        oob = oob || v < 0 || v >= n;
        std::int64_t flat = target == 0 ? (e / T_) * T_ + v : v;
        past_storage = past_storage || flat < 0 || flat >= (target == 0 ? C_ * T_ : n);
      }
      E v = target == 0   ? load(in_buf_, {leaf(E::bx), idx})
            : target == 1 ? load(s_, {idx})
                          : load(r_buf_, {idx});
      if (target == 0 && in_.chance(30) && k == 0) {
        // A store through the loaded index: each row of J is a permutation
        // (away from the replaced element), so no two threads write one element.
        body.push_back(store(q(), {leaf(E::bx), idx}, own_in()));
        bool dup = false;
        for (std::int64_t cc = 0; cc < C_; ++cc) {
          std::vector<int> seen(static_cast<std::size_t>(T_), 0);
          for (std::int64_t t = 0; t < T_; ++t) {
            std::int64_t x = pattern_value(fill, cc * T_ + t, T_);
            if (x >= 0 && x < T_ && seen[static_cast<std::size_t>(x)]++) dup = true;
          }
        }
        if (dup && !oob) {
          expect(Expect::error, "race", "two threads store through one loaded index");
          return;
        }
      } else {
        body.push_back(store(q(), own(), v));
      }
      if (oob && !past_storage && txfuzz::avoided("dim-oob"))
        // The known gap: the checked mode checks the flat offset only.
        expect(Expect::any, "", "a loaded index leaves its row but not the buffer's storage");
      else if (oob)
        expect(Expect::error, "out of bounds", "a loaded index leaves its buffer");
      else
        expect(Expect::clean, "", "every loaded index is in bounds");
      return;
    }
    if (fault == "escape") {
      escape();
      return;
    }
    if (fault == "shared_race") {
      // F filled by its owners, a barrier of some scope (or none), then each
      // thread reads F(perm(t) + j * T): a race iff some thread reads an
      // element whose owner the barrier does not order with it.
      int f = f_buf(k_ * T_);
      fill_f(f, k_ * T_);
      std::optional<ExecScope> bar = pick_barrier();
      if (bar) body.push_back(sync(*bar));
      std::vector<std::int64_t> to;
      E pe = perm(to);
      std::int64_t j = in_.below(static_cast<int>(k_));
      body.push_back(store(q(), own(), load(f, {bin(BinOp::Add, pe, lit(j * T_))})));
      bool race = false;
      for (std::int64_t t = 0; t < T_; ++t)
        race = race || !ordered(bar, to[static_cast<std::size_t>(t)], t);
      if (race)
        expect(Expect::error, "race",
               "a thread reads an element another thread wrote, no barrier of both between");
      else
        expect(Expect::clean, "", "every read is ordered after its write");
      return;
    }
    if (fault == "write_race") {
      // Threads t < g all write one element of F or of Q: a race iff g >= 2.
      std::int64_t g = 1 + in_.below(static_cast<int>(std::min<std::int64_t>(T_, 4)));
      if (in_.chance(30)) g = T_;
      bool shared = in_.chance(50);
      std::int64_t at = in_.below(static_cast<int>(T_));
      St w = shared ? store(f_buf(T_), {lit(at)}, own_in())
                    : store(q(), {leaf(E::bx), lit(at)}, own_in());
      bool pairs = !shared && in_.chance(30);
      if (pairs) {  // every thread writes Q(bx, t / d): d threads an element
        std::int64_t d = 1 + in_.below(4);
        w.idx = {leaf(E::bx), bin(BinOp::FloorDiv, leaf(E::tid), lit(d))};
        g = d;
      }
      if (g < T_ && !pairs) {
        St f;
        f.kind = St::if_;
        f.value = bin(BinOp::LT, leaf(E::tid), lit(g));
        f.body = {w};
        body.push_back(f);
      } else {
        body.push_back(w);
      }
      if (shared) {
        body.push_back(sync(ExecScope::cta));
        body.push_back(store(q(), own(), load(f_, {lit(at)})));
      }
      if (g >= 2)
        expect(Expect::error, "race", std::to_string(g) + " threads write one element");
      else
        expect(Expect::clean, "", "one thread writes it");
      return;
    }
    if (fault == "global_race") {
      // Q(bx, t) = In; a barrier or none; Q(bx, t) = Q(bx, perm(t)) + 1: the
      // second statement reads elements other threads write in it.
      int qq = q();
      body.push_back(store(qq, own(), own_in()));
      std::optional<ExecScope> bar = pick_barrier();
      if (bar) body.push_back(sync(*bar));
      std::vector<std::int64_t> to;
      E pe = perm(to);
      body.push_back(store(qq, own(), bin(BinOp::Add, load(qq, {leaf(E::bx), pe}), flit(1))));
      bool race = false;
      for (std::int64_t t = 0; t < T_; ++t) race = race || to[static_cast<std::size_t>(t)] != t;
      if (race)
        expect(Expect::error, "race",
               "threads read Q elements that other threads write in the same statement");
      else
        expect(Expect::clean, "", "each thread touches its own element");
      return;
    }
    if (fault == "cta_race") {
      int qq = q();
      if (in_.chance(50)) {
        // Every CTA writes row 0.
        body.push_back(store(qq, {lit(0), leaf(E::tid)}, own_in()));
      } else {
        // Each CTA reads the next CTA's row after writing its own.
        body.push_back(store(qq, own(), own_in()));
        body.push_back(sync(ExecScope::cta));
        body.push_back(
            store(qq, own(),
                  bin(BinOp::Add,
                      load(qq, {bin(BinOp::FloorMod, bin(BinOp::Add, leaf(E::bx), lit(1)), lit(C_)),
                                leaf(E::tid)}),
                      flit(1))));
      }
      if (C_ >= 2)
        expect(Expect::error, "race", "CTAs touch one element of Q");
      else
        expect(Expect::clean, "", "one CTA");
      return;
    }
    if (fault == "overlap_copy") {
      // Tx.cta.copy(F[a : a + n], F[b : b + n]) between CTA barriers:
      // rejected when the regions overlap and differ.
      std::int64_t size = k_ * T_;
      int f = f_buf(size);
      fill_f(f, size);
      body.push_back(sync(ExecScope::cta));
      std::int64_t n = 1 + in_.below(static_cast<int>(size));
      std::int64_t a = in_.below(static_cast<int>(size - n + 1)),
                   b = in_.below(static_cast<int>(size - n + 1));
      St cp;
      cp.kind = St::copy;
      cp.scope = ExecScope::cta;
      cp.buf = cp.src = f;
      cp.dst = {{lit(a), n}};
      cp.srcr = {{lit(b), n}};
      body.push_back(cp);
      body.push_back(sync(ExecScope::cta));
      body.push_back(store(q(), own(), load(f, {leaf(E::tid)})));
      if (a != b && std::abs(a - b) < n)
        expect(Expect::reject, "overlaps", "the regions overlap");
      else if (a == b)
        expect(Expect::any, "", "a copy onto itself");
      else
        expect(Expect::clean, "", "disjoint regions");
      return;
    }
    if (fault == "noninjective") {
      // G (n, m) with layout S((n, m) : (s, 1)), s < m: two elements share
      // a place. Stores are rejected; loads (a broadcast) are fine.
      std::int64_t n = 2 + in_.below(4), m = 2 + in_.below(6), s = in_.below(static_cast<int>(m));
      int g = add_global("G", tx::f32, {n, m});
      buf(g).layout = {{n, s, tx::Axis::m}, {m, 1, tx::Axis::m}};
      E row = bin(BinOp::FloorMod, leaf(E::tid), lit(n));
      if (in_.chance(60)) {
        body.push_back(store(g, {row, lit(in_.below(static_cast<int>(m)))}, own_in()));
        expect(Expect::reject, "one place", "a store through a layout that is not injective");
      } else {
        body.push_back(store(q(), own(), load(g, {row, lit(in_.below(static_cast<int>(m)))})));
        expect(Expect::any, "", "loads through a layout that is not injective");
      }
      return;
    }
    if (fault == "huge_shared") {
      // One or two shared buffers past 227 KiB in all (or near it).
      static const std::int64_t kSizes[] = {58113, 65536, 1 << 20, 1 << 30, std::int64_t{1} << 40,
                                            25000, 58112};
      std::int64_t a = in_.pick(kSizes);
      int f = f_buf(a);
      if (in_.chance(15) && !txfuzz::avoided("bytes-overflow"))  // bytes overflow 64 bits
        buf(f).shape = {std::int64_t{1} << 31, std::int64_t{1} << 31};
      int f2 = -1;
      std::int64_t b = 0;
      if (in_.chance(40)) {
        b = in_.pick(kSizes);
        f2 = add_local_or_shared("F2", MemScope::shared, tx::f32, {b});
      }
      std::vector<E> at(buf(f).shape.size(), leaf(E::tid));
      body.push_back(store(f, at, own_in()));
      if (f2 >= 0) body.push_back(store(f2, {leaf(E::tid)}, own_in()));
      body.push_back(sync(ExecScope::cta));
      E v = load(f, at);
      if (f2 >= 0) v = bin(BinOp::Add, v, load(f2, {leaf(E::tid)}));
      body.push_back(store(q(), own(), v));
      double total = static_cast<double>(numel(buf(f).shape)) * 4 + static_cast<double>(b) * 4 +
                     static_cast<double>(k_ * T_ * 4);
      const double limit = 227 * 1024;
      if (total > limit + 4096) {
        expect(Expect::reject, "shared memory",
               "about " + approx(total) + " bytes of shared memory");
        p_.run = false;
      } else if (total < limit - 4096) {
        expect(Expect::clean, "", "under the limit");
      } else {
        expect(Expect::any, "", "at the limit (alignment decides)");
        p_.run = false;
      }
      return;
    }
    if (fault == "huge_local") {
      // A register tile past 512 KiB per thread (or near it).
      static const std::int64_t kSizes[] = {131073, 1 << 20, 1 << 30, 4096, 131072, 200000};
      std::int64_t n = in_.pick(kSizes);
      int r2 = add_local_or_shared("R2", MemScope::local, tx::f32, {n});
      if (in_.chance(15) && !txfuzz::avoided("bytes-overflow"))  // bytes overflow 64 bits
        buf(r2).shape = {std::int64_t{1} << 31, std::int64_t{1} << 31};
      std::vector<E> at(buf(r2).shape.size(), lit(0));
      at.back() = lit(std::min<std::int64_t>(n, 1 << 20) - 1);
      body.push_back(store(r2, at, own_in()));
      body.push_back(store(q(), own(), load(r2, at)));
      // The limit counts every register tile's bytes, exactly.
      double bytes = static_cast<double>(numel(buf(r2).shape)) * 4 + static_cast<double>(r_ * 4);
      const double limit = 512 * 1024;
      if (bytes > limit) {
        expect(Expect::reject, "registers per thread",
               "about " + approx(bytes) + " bytes per thread");
        p_.run = false;
      } else if (bytes < 64 * 1024) {
        expect(Expect::clean, "", "a small tile");
      } else {
        // Legal, but the host would keep T times that per CTA: not run.
        expect(Expect::any, "", "under the limit");
        p_.run = false;
      }
      return;
    }
    if (fault == "huge_global") {
      // A global buffer of more than 2^31 elements (or 2^62: its byte size
      // overflows 64 bits). It may compile; its launch gets a small tensor,
      // which the launch must refuse before running.
      static const Shape kShapes[] = {{65537, 32768},
                                      {(std::int64_t{1} << 31) + 8},
                                      {std::int64_t{1} << 31, std::int64_t{1} << 31},
                                      {std::int64_t{1} << 62, 4},
                                      {3, std::int64_t{1} << 61}};
      Shape shape = in_.pick(kShapes);
      if (shape[0] == std::int64_t{1} << 62 && txfuzz::avoided("numel-overflow"))
        shape = {65537, 32768};
      int g = add_global("G", tx::f32, shape);
      buf(g).launch_shape = {C_, T_};
      std::vector<E> at;
      // In bounds: past 2^31 in the 1-D buffer, through 64-bit arithmetic.
      if (shape.size() == 1)
        at = {bin(BinOp::Add,
                  bin(BinOp::Mul, cast(leaf(E::bx), tx::i64), lit(std::int64_t{1} << 29, tx::i64)),
                  cast(leaf(E::tid), tx::i64))};
      else
        at = {leaf(E::bx), bin(BinOp::FloorMod, leaf(E::tid), lit(std::min(shape[1], T_)))};
      body.push_back(store(g, at, own_in()));
      expect(Expect::launch_error, "", "the launch gets a (C, T) tensor for a huge buffer");
      return;
    }
    if (fault == "huge_ids") {
      static const std::int64_t kBlock[] = {
          1025, 2048, 1 << 20, std::int64_t{1} << 31, std::int64_t{1} << 40, -5};
      static const Shape kGrid[] = {{std::int64_t{1} << 31},
                                    {std::int64_t{1} << 40},
                                    {2147483647},
                                    {65536, 65536},
                                    {1 << 20},
                                    {-1}};
      if (in_.chance(50)) {
        p_.block = {in_.pick(kBlock)};
        if (in_.chance(30)) p_.block = {32, 33};
        expect(Expect::reject, "", "more than 1024 threads, or a negative count");
      } else {
        p_.grid = in_.pick(kGrid);
        std::int64_t g = numel(p_.grid);
        bool bad = false;
        for (auto e : p_.grid) bad = bad || e <= 0 || e > 2147483647;
        if (bad)
          expect(Expect::reject, "", "a grid dimension out of range");
        else
          expect(Expect::any, "", std::to_string(g) + " CTAs: legal, too many to run here");
        p_.run = false;
      }
      return;
    }
    if (fault == "zero_extent") {
      switch (in_.below(5)) {
        case 0: {
          int g = add_global("G", tx::f32, {in_.chance(50) ? 0 : -3, T_});
          body.push_back(store(q(), own(), load(g, {lit(0), leaf(E::tid)})));
          expect(Expect::reject, "", "a parameter of zero or negative extent");
          break;
        }
        case 1: {
          int f = f_buf(0);
          buf(f).shape = {in_.chance(50) ? 0 : -7};
          if (in_.chance(50)) buf(f).scope = MemScope::local;
          body.push_back(store(q(), own(), own_in()));
          expect(Expect::reject, "", "an allocation of zero or negative extent");
          break;
        }
        case 2:
          if (in_.chance(50))
            p_.block = {0};
          else
            p_.grid = {in_.chance(50) ? 0 : -2};
          expect(Expect::reject, "", "a scope id of zero or negative extent");
          p_.run = false;
          break;
        case 3: {
          // A copy region of zero or negative extent.
          int f = f_buf(T_);
          fill_f(f, T_);
          body.push_back(sync(ExecScope::cta));
          St cp;
          cp.kind = St::copy;
          cp.buf = q();
          cp.src = f;
          std::int64_t ext = in_.chance(50) ? 0 : -4;
          cp.dst = {{leaf(E::bx), 1}, {lit(0), ext}};
          cp.srcr = {{lit(0), ext}};
          cp.scope = ExecScope::cta;
          body.push_back(cp);
          expect(Expect::reject, "", "a region of zero or negative extent");
          break;
        }
        default: {
          // A loop that never runs, over an index that would be far out of
          // bounds if it did.
          St l;
          l.kind = St::loop;
          l.id = fresh();
          l.min = lit(in_.below(3));
          l.value = lit(-in_.below(4));
          l.body = {
              store(q(), own(),
                    load(in_buf_, {leaf(E::bx), bin(BinOp::Add, leaf(E::var, l.id), lit(1000))}))};
          body.push_back(l);
          expect(Expect::any, "", "an empty loop (dead code either way)");
          break;
        }
      }
      return;
    }
    if (fault == "div_zero") {
      division();
      return;
    }
    if (fault == "const_arith") {
      const_arith();
      return;
    }
    if (fault == "deep_expr") {
      St d;
      d.kind = St::deep;
      d.buf = q();
      d.value.kind = E::chain;
      d.value.i = 260 + in_.below(700);  // past the builder's split depth (256), a few parts
      d.value.args = {load(in_buf_, {})};
      d.write_between = in_.chance(25);
      body.push_back(d);
      if (d.write_between)
        expect(Expect::any, "", "a store between building the expression and using it");
      else
        expect(Expect::clean, "", "a deep but valid expression");
      return;
    }
    if (fault == "bad_launch") {
      static const BadLaunch kBad[] = {BadLaunch::shape,     BadLaunch::dtype, BadLaunch::empty,
                                       BadLaunch::undefined, BadLaunch::fewer, BadLaunch::more};
      p_.launch = in_.pick(kBad);
      expect(Expect::launch_error, "", "the launch gets the wrong tensors");
      return;
    }
    expect(Expect::any, "", "unknown fault");
  }

  // Puts a statement in a loop that runs at least once, sometimes.
  void wrap_in_loop(const St& s) {
    using namespace gen_detail;
    if (in_.chance(70)) {
      p_.body.push_back(s);
      return;
    }
    St l;
    l.kind = St::loop;
    l.id = fresh();
    l.min = lit(0);
    l.value = lit(1 + in_.below(3));
    l.body = {s};
    p_.body.push_back(l);
  }

  // A T::let, loop variable or buffer used after its block, or one of an
  // earlier kernel; used as a stored value, an index, a condition, a loop
  // bound or a region start.
  void escape() {
    using namespace gen_detail;
    auto& body = p_.body;
    int kind = in_.below(5);
    E leaked;
    int leaked_buf = -1;
    St block;
    if (kind == 0 || kind == 1) {  // a let in an if / a loop
      St l;
      l.kind = St::let;
      l.id = fresh();
      l.value = bin(BinOp::Mul, leaf(E::tid), lit(0));
      leaked = leaf(E::var, l.id);
      block.kind = kind == 0 ? St::if_ : St::loop;
      if (kind == 0) {
        block.value = bin(BinOp::LT, leaf(E::tid), lit(1 + in_.below(static_cast<int>(T_))));
      } else {
        block.id = fresh();
        block.min = lit(0);
        block.value = lit(1 + in_.below(3));
      }
      block.body = {l};
      body.push_back(block);
    } else if (kind == 2) {  // the loop variable itself
      block.kind = St::loop;
      block.id = fresh();
      block.min = lit(0);
      block.value = lit(1 + in_.below(3));
      block.body = {store(r_buf_, {lit(0)}, flit(1))};
      leaked = leaf(E::var, block.id);
      body.push_back(block);
    } else if (kind == 3) {  // a buffer allocated in an if / a loop
      leaked_buf = add_local_or_shared("B", in_.chance(70) ? MemScope::local : MemScope::shared,
                                       tx::f32, {1});
      buf(leaked_buf).by_stmt = true;
      St a;
      a.kind = St::alloc;
      a.buf = leaked_buf;
      block.kind = in_.chance(50) ? St::if_ : St::loop;
      if (block.kind == St::if_) {
        block.value = bin(BinOp::LT, leaf(E::bx), lit(C_));
      } else {
        block.id = fresh();
        block.min = lit(0);
        block.value = lit(1);
      }
      block.body = {a, store(leaked_buf, {lit(0)}, flit(2))};
      body.push_back(block);
    } else {  // from an earlier kernel
      if (in_.chance(50)) {
        p_.foreign_var = fresh();
        leaked = leaf(E::var, p_.foreign_var);
      } else {
        leaked_buf = add_global("Other", tx::f32, {T_});
        buf(leaked_buf).foreign = true;
      }
    }
    if (leaked_buf >= 0) {
      std::vector<E> at(buf(leaked_buf).shape.size(), lit(0));
      if (buf(leaked_buf).foreign) at = {leaf(E::tid)};
      if (in_.chance(50))
        body.push_back(store(q(), own(), load(leaked_buf, at)));
      else
        body.push_back(store(leaked_buf, at, own_in()));
      expect(Expect::reject, "", "a buffer used outside its block or kernel");
      return;
    }
    switch (in_.below(5)) {
      case 0:
        body.push_back(store(q(), own(), cast(leaked, tx::f32)));
        break;
      case 1:
        body.push_back(store(q(), {leaf(E::bx), leaked}, own_in()));
        break;
      case 2: {
        St f;
        f.kind = St::if_;
        f.value = bin(BinOp::EQ, leaked, lit(0));
        f.body = {store(q(), own(), own_in())};
        body.push_back(f);
        break;
      }
      case 3: {
        St l;
        l.kind = St::loop;
        l.id = fresh();
        l.min = lit(0);
        l.value = leaked;
        l.body = {store(q(), own(), own_in())};
        body.push_back(l);
        break;
      }
      default: {
        St cp;
        cp.kind = St::copy;
        cp.scope = ExecScope::thread;
        cp.buf = q();
        cp.src = in_buf_;
        cp.dst = {{leaf(E::bx), 1}, {leaked, 1}};
        cp.srcr = {{leaf(E::bx), 1}, {leaf(E::tid), 1}};
        body.push_back(cp);
        break;
      }
    }
    expect(Expect::reject, "", "a binding used outside its block or kernel");
  }

  // Qi(bx, t) = N(bx, t) OP D(bx, t) (or a constant / a loaded divisor in an
  // index), D holding zeros or -1 under the smallest numerator at chosen
  // elements.
  void division() {
    using namespace gen_detail;
    DType t = in_.chance(75) ? tx::i32 : tx::i64;
    static const BinOp kOps[] = {BinOp::Div, BinOp::Mod, BinOp::FloorDiv, BinOp::FloorMod};
    BinOp op = in_.pick(kOps);
    int qi = q(t);
    int num = add_global("N", t, {C_, T_});
    int den = add_global("D", t, {C_, T_});
    Fill& nf = buf(num).fill;
    Fill& df = buf(den).fill;
    nf.lo = -100;
    nf.hi = 100;
    // Random divisors are never 0: the zeros are the chosen elements.
    df.lo = in_.chance(50) ? 1 : -9;
    df.hi = 9;
    df.nonzero = true;
    const std::int64_t smallest = t == tx::i32 ? INT32_MIN : INT64_MIN;
    int zeros = in_.below(3), minus = in_.below(3);
    for (int z = 0; z < zeros; ++z) df.set[in_.below(static_cast<int>(C_ * T_))] = 0;
    for (int m = 0; m < minus; ++m) {
      std::int64_t e = in_.below(static_cast<int>(C_ * T_));
      nf.set[e] = smallest;
      df.set[e] = -1;
    }
    bool any_zero = false;
    for (auto [e, v] : df.set) any_zero = any_zero || v == 0;
    int form = in_.below(4);
    auto& body = p_.body;
    if (form == 0 || form == 1) {
      // The plain host run divides by 1 there: checked after the run.
      E d = load(den, own());
      if (form == 1) {
        St l;
        l.kind = St::let;
        l.id = fresh();
        l.value = d;
        body.push_back(l);
        d = leaf(E::var, l.id);
      }
      body.push_back(store(qi, own(), bin(op, load(num, own()), d)));
      p_.division = {qi, num, den, op};
    } else if (form == 2) {
      // A literal zero divisor.
      body.push_back(store(qi, own(), bin(op, load(num, own()), lit(0, t))));
      any_zero = true;
    } else {
      // A loaded divisor in an index: t mod D is in [0, T) for D in [1, T]
      // (and D = -1: 0); a zero divisor divides by 1 on the host.
      df.lo = 1;
      df.hi = T_;
      df.set[in_.below(static_cast<int>(C_ * T_))] = 0;
      any_zero = true;
      body.push_back(store(
          qi, own(),
          load(num, {leaf(E::bx), bin(BinOp::FloorMod, cast(leaf(E::tid), t), load(den, own()))})));
    }
    if (any_zero)
      expect(Expect::error, "division by zero", "a divisor is zero");
    else
      expect(Expect::clean, "", "no divisor is zero");
  }

  // Qi = K1 OP K2 over constants at the edges of the dtype (the lowering
  // folds them), or the same as an index, or a float constant cast to an
  // integer.
  void const_arith() {
    using namespace gen_detail;
    static const DType kTypes[] = {tx::i32, tx::i64, tx::u32, tx::i8, tx::u8, tx::i16, tx::u64};
    DType t = in_.pick(kTypes);
    auto edge = [&]() -> std::int64_t {
      bool sg = t.is_int();
      int bits = t.bits;
      std::int64_t mx = bits == 64 ? (sg ? INT64_MAX : -1)
                        : sg       ? (std::int64_t{1} << (bits - 1)) - 1
                                   : (std::int64_t{1} << bits) - 1;
      std::int64_t mn = sg ? (bits == 64 ? INT64_MIN : -(std::int64_t{1} << (bits - 1))) : 0;
      switch (in_.below(8)) {
        case 0:
          return 0;
        case 1:
          return -1;
        case 2:
          return mx;
        case 3:
          return bits == 64 && sg && txfuzz::avoided("int64-min") ? mn + 1 : mn;
        case 4:
          return bits;
        case 5:
          return bits - 1;
        case 6:
          return in_.below(100);
        default:
          return mx - 1;
      }
    };
    static const BinOp kOps[] = {BinOp::Add,   BinOp::Sub,      BinOp::Mul,      BinOp::Div,
                                 BinOp::Mod,   BinOp::FloorDiv, BinOp::FloorMod, BinOp::Shl,
                                 BinOp::Shr,   BinOp::Min,      BinOp::Max,      BinOp::BitAnd,
                                 BinOp::BitXor};
    BinOp op = in_.pick(kOps);
    if (txfuzz::avoided("const-fold")) op = BinOp::Min;
    std::int64_t a = edge(), b = edge();
    E v = bin(op, lit(a, t), lit(b, t));
    auto& body = p_.body;
    switch (in_.below(3)) {
      case 0:
        body.push_back(store(q(t), own(), v));
        break;
      case 1:
        body.push_back(
            store(q(), own(),
                  load(in_buf_, {leaf(E::bx), bin(BinOp::FloorMod, cast(v, tx::i32), lit(T_))})));
        break;
      default: {
        static const double kF[] = {1e30,     -1e30, 2147483648.0, -2147483649.0, 1e300,
                                    INFINITY, NAN,   255.5,        -0.5};
        DType ft = in_.chance(50) ? tx::f32 : tx::f64;
        body.push_back(store(q(t), own(), cast(flit(in_.pick(kF), ft), t)));
        break;
      }
    }
    expect(Expect::any, "", "constants at the edges of " + t.name());
  }

  Bytes& in_;
  Program p_;
  int next_id_ = 0;
  bool wild_ = false;
  std::int64_t C_ = 1, T_ = 32, k_ = 1, r_ = 1;
  int in_buf_ = -1, out_ = -1, idx_ = -1, s_ = -1, r_buf_ = -1, q_ = -1, f_ = -1;
  std::vector<gen_detail::IntVal> escaped_;  // bound in blocks already closed
};

inline Program generate(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  return Generator(in).run();
}

// ---------------------------------------------------------------- builder

namespace build_detail {

inline tx::BufferElem elem(const tx::TileBuffer& b, const std::vector<tx::Expr>& i) {
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

// Interprets a Program's statements with the builders, as a user's C++
// would write them: bindings and buffers live in tables keyed by id, so a
// statement that names one after its block uses the stale C++ object (an
// escape).
class Emitter {
 public:
  Emitter(const Program& p, std::vector<tx::TileBuffer>& bufs, std::map<int, tx::Var>& vars)
      : p_(p), bufs_(bufs), vars_(vars) {}
  tx::Expr t, bx;

  tx::Expr expr(const E& e) {
    auto a = [&](std::size_t k) { return expr(e.args[k]); };
    switch (e.kind) {
      case E::lit:
        return tx::make_int(e.i, e.dtype);
      case E::flit:
        return tx::make_float(e.f, e.dtype);
      case E::tid:
        return t;
      case E::bx:
        return bx;
      case E::var:
        return vars_[static_cast<int>(e.i)];
      case E::load: {
        std::vector<tx::Expr> idx;
        for (std::size_t k = 0; k < e.args.size(); ++k) idx.push_back(a(k));
        return elem(bufs_[static_cast<std::size_t>(e.i)], idx);
      }
      case E::bin:
        return binary(e.op, a(0), a(1));
      case E::cast:
        return tx::cast(a(0), e.dtype);
      case E::select:
        return tx::select(a(0), a(1), a(2));
      case E::chain:
        break;  // St::deep builds it
    }
    return tx::Expr();
  }

  static tx::Expr binary(BinOp op, const tx::Expr& a, const tx::Expr& b) {
    switch (op) {
      case BinOp::Add:
        return a + b;
      case BinOp::Sub:
        return a - b;
      case BinOp::Mul:
        return a * b;
      case BinOp::Div:
        return a / b;
      case BinOp::Mod:
        return a % b;
      case BinOp::FloorDiv:
        return tx::floordiv(a, b);
      case BinOp::FloorMod:
        return tx::floormod(a, b);
      case BinOp::Min:
        return tx::min(a, b);
      case BinOp::Max:
        return tx::max(a, b);
      case BinOp::EQ:
        return a == b;
      case BinOp::NE:
        return a != b;
      case BinOp::LT:
        return a < b;
      case BinOp::LE:
        return a <= b;
      case BinOp::GT:
        return a > b;
      case BinOp::GE:
        return a >= b;
      case BinOp::And:
        return a && b;
      case BinOp::Or:
        return a || b;
      case BinOp::BitAnd:
        return a & b;
      case BinOp::BitOr:
        return a | b;
      case BinOp::BitXor:
        return a ^ b;
      case BinOp::Shl:
        return a << b;
      case BinOp::Shr:
        return a >> b;
    }
    return tx::Expr();
  }

  tx::BufferRegion region(int buf, const std::vector<Range>& r) {
    tx::Region reg;
    for (const Range& x : r) reg.slices.push_back(tx::Slice(expr(x.start), x.extent));
    return bufs_[static_cast<std::size_t>(buf)][reg];
  }

  void stmts(const std::vector<St>& b) {
    for (const St& s : b) stmt(s);
  }

  void stmt(const St& s) {
    namespace T = tx::T;
    switch (s.kind) {
      case St::store: {
        std::vector<tx::Expr> idx;
        for (const E& e : s.idx) idx.push_back(expr(e));
        elem(bufs_[static_cast<std::size_t>(s.buf)], idx) = expr(s.value);
        break;
      }
      case St::let:
        vars_[s.id] = T::let(expr(s.value), tx::Name("v" + std::to_string(s.id)));
        break;
      case St::loop: {
        tx::Name name("v" + std::to_string(s.id));
        auto body = [&](const tx::Var& v) {
          vars_[s.id] = v;
          stmts(s.body);
        };
        if (s.unroll) {
          for (tx::Var v : T::unroll(expr(s.value), name)) body(v);
        } else {
          for (tx::Var v : T::serial(expr(s.min), expr(s.value), name)) body(v);
        }
        break;
      }
      case St::if_: {
        tx::IfBuilder ib = T::if_(expr(s.value), [&] { stmts(s.body); });
        if (!s.orelse.empty()) ib.else_([&] { stmts(s.orelse); });
        break;
      }
      case St::sync:
        if (s.scope == ExecScope::cta) T::cuda::cta_sync();
        if (s.scope == ExecScope::warpgroup) T::cuda::warpgroup_sync();
        if (s.scope == ExecScope::warp) T::cuda::warp_sync();
        break;
      case St::copy: {
        tx::BufferRegion d = region(s.buf, s.dst), r = region(s.src, s.srcr);
        switch (s.scope) {
          case ExecScope::thread:
            tx::Tx::thread::copy(d, r);
            break;
          case ExecScope::warp:
            tx::Tx::warp::copy(d, r);
            break;
          case ExecScope::warpgroup:
            tx::Tx::warpgroup::copy(d, r);
            break;
          case ExecScope::cta:
            tx::Tx::cta::copy(d, r);
            break;
        }
        break;
      }
      case St::alloc:
        alloc(s.buf);
        break;
      case St::deep: {
        // acc = acc + In(bx, (t + k) mod T), term by term: tx splits it into
        // T::let parts as it grows past its depth limit.
        const tx::TileBuffer& in = bufs_[static_cast<std::size_t>(s.value.args[0].i)];
        std::int64_t threads = p_.block.empty() ? 1 : p_.block[0];
        tx::Expr acc = tx::make_float(0.0);
        for (std::int64_t k = 0; k < s.value.i; ++k)
          acc = acc + in(bx, tx::floormod(t + static_cast<int>(k), static_cast<int>(threads)));
        tx::TileBuffer q = bufs_[static_cast<std::size_t>(s.buf)];
        if (s.write_between) q(bx, t) = 0.0f;
        q(bx, t) = acc;
        break;
      }
    }
  }

  void alloc(int i) {
    const Buf& b = p_.bufs[static_cast<std::size_t>(i)];
    std::optional<tx::TileLayout> l;
    if (!b.layout.empty()) l = tx::TileLayout(b.layout);
    bufs_[static_cast<std::size_t>(i)] =
        tx::T::alloc_buffer(b.shape, b.dtype, b.scope, l, tx::Name(b.name));
  }

 private:
  const Program& p_;
  std::vector<tx::TileBuffer>& bufs_;
  std::map<int, tx::Var>& vars_;
};

}  // namespace build_detail

// The kernel: an earlier kernel first when the program leaks from one, then
// one parameter per global buffer (in buffer order), the ids, the shared and
// local allocations, the statements.
inline tx::PrimFunc build(const Program& p) {
  using namespace build_detail;
  namespace T = tx::T;
  std::vector<tx::TileBuffer> bufs(p.bufs.size());
  std::map<int, tx::Var> vars;
  bool foreign_buf =
      std::any_of(p.bufs.begin(), p.bufs.end(), [](const Buf& b) { return b.foreign; });
  if (foreign_buf || p.foreign_var >= 0) {
    T::prim_func_n("earlier", {"E_ptr"}, [&](const std::vector<tx::Handle>& hs) {
      tx::TileBuffer e;
      for (std::size_t i = 0; i < p.bufs.size(); ++i)
        if (p.bufs[i].foreign)
          bufs[i] = e = T::match_buffer(hs[0], p.bufs[i].shape, p.bufs[i].dtype, std::nullopt,
                                        tx::Name(p.bufs[i].name));
      if (!e) e = T::match_buffer(hs[0], {32}, tx::f32, std::nullopt, "E");
      auto t = T::thread_id({32}, "t");
      if (p.foreign_var >= 0)
        vars[p.foreign_var] = T::let(t * 2, tx::Name("v" + std::to_string(p.foreign_var)));
      e(t) = 1.0f;
    });
  }
  std::vector<std::string> params;
  for (const Buf& b : p.bufs)
    if (b.scope == MemScope::global && !b.foreign) params.push_back(b.name + "_ptr");
  return T::prim_func_n("bad", params, [&](const std::vector<tx::Handle>& hs) {
    std::size_t h = 0;
    for (std::size_t i = 0; i < p.bufs.size(); ++i) {
      const Buf& b = p.bufs[i];
      if (b.scope != MemScope::global || b.foreign) continue;
      std::optional<tx::TileLayout> l;
      if (!b.layout.empty()) l = tx::TileLayout(b.layout);
      bufs[i] = T::match_buffer(hs[h++], b.shape, b.dtype, l, tx::Name(b.name));
    }
    Emitter em(p, bufs, vars);
    em.bx = T::cta_id(p.grid, "bx");
    em.t = T::thread_id(p.block, "t");
    for (std::size_t i = 0; i < p.bufs.size(); ++i)
      if (p.bufs[i].scope != MemScope::global && !p.bufs[i].by_stmt) em.alloc(static_cast<int>(i));
    em.stmts(p.body);
  });
}

// ---------------------------------------------------------------- runner

struct Outcome {
  // rejected: a tx error while building or compiling; reported: by the
  // checked run; refused: a launch with the wrong tensors; clean: compiled
  // and ran clean (or compiled only, where the program is not run).
  enum Kind { rejected, reported, refused, clean, finding } kind = clean;
  std::string message;
};

inline const char* outcome_name(Outcome::Kind k) {
  switch (k) {
    case Outcome::rejected:
      return "rejected";
    case Outcome::reported:
      return "reported";
    case Outcome::refused:
      return "refused";
    case Outcome::clean:
      return "clean";
    case Outcome::finding:
      return "FINDING";
  }
  return "?";
}

namespace run_detail {

// Element values for a global buffer's launch (integers exactly, as bytes).
inline tx::Tensor make_tensor(const Buf& b, std::mt19937_64& rng, std::vector<std::int64_t>* ints) {
  Shape shape = b.launch_shape.empty() ? b.shape : b.launch_shape;
  std::int64_t n = numel(shape);
  std::int64_t cols = shape.back();
  if (b.dtype.is_float()) {
    std::vector<double> v(static_cast<std::size_t>(n));
    std::uniform_real_distribution<double> d(0.5, 4.0);
    for (double& x : v) x = d(rng);
    return tx::Tensor::from_doubles(v, shape, b.dtype, tx::Device::host());
  }
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::uniform_int_distribution<std::int64_t> d(b.fill.lo, std::max(b.fill.lo, b.fill.hi));
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t x;
    if (b.fill.kind == Fill::pattern)
      x = ((e % cols) * b.fill.lo + e / cols) % b.fill.hi;
    else
      x = d(rng);
    if (b.fill.nonzero && x == 0) x = 1;
    auto it = b.fill.set.find(e);
    v[static_cast<std::size_t>(e)] = it != b.fill.set.end() ? it->second : x;
  }
  if (ints) *ints = v;
  std::size_t es = static_cast<std::size_t>(b.dtype.bytes());
  std::vector<std::uint8_t> bytes(v.size() * es);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint64_t u = static_cast<std::uint64_t>(v[i]);
    for (std::size_t k = 0; k < es; ++k)
      bytes[i * es + k] = static_cast<std::uint8_t>(u >> (8 * k));
  }
  return tx::Tensor::from_bytes(bytes.data(), bytes.size(), shape, b.dtype, tx::Device::host());
}

inline std::vector<tx::Tensor> copies(const std::vector<tx::Tensor>& ts) {
  std::vector<tx::Tensor> out;
  for (const tx::Tensor& t : ts) {
    if (!t.defined() || t.numel() == 0) {
      out.push_back(t.defined() ? tx::Tensor::empty(t.shape(), t.dtype(), tx::Device::host()) : t);
      continue;
    }
    std::vector<std::uint8_t> b = t.to_bytes();
    out.push_back(
        tx::Tensor::from_bytes(b.data(), b.size(), t.shape(), t.dtype(), tx::Device::host()));
  }
  return out;
}

// The host's documented result of integer division: a zero divisor (and
// the smallest value over -1) divides by 1.
inline std::int64_t host_divide(BinOp op, std::int64_t a, std::int64_t b, DType t) {
  const std::int64_t smallest = t.bits == 64 ? INT64_MIN : -(std::int64_t{1} << (t.bits - 1));
  if (b == 0 || (a == smallest && b == -1)) b = 1;
  switch (op) {
    case BinOp::Div:
      return a / b;
    case BinOp::Mod:
      return a % b;
    case BinOp::FloorDiv:
      return gen_detail::fdiv(a, b);
    default:
      return gen_detail::fmod(a, b);
  }
}

// The same bytes, or the same values where only NaN payloads differ.
inline bool same_values(const tx::Tensor& a, const tx::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0) return a.defined() == b.defined();
  if (a.to_bytes() == b.to_bytes()) return true;
  if (!a.dtype().is_float()) return false;
  std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

inline bool bad_message(const std::string& m) {
  return m.find("internal:") != std::string::npos || m.find("invalid LLVM IR") != std::string::npos;
}

}  // namespace run_detail

// Builds, compiles and runs `p` (checked, then plain where that is safe) with
// inputs drawn from `seed`, and judges the outcome against p.expect.
inline Outcome run_program(const Program& p, std::uint64_t seed, bool run_host = true) {
  using namespace run_detail;
  Outcome out;
  auto finding = [&](std::string m) {
    out.kind = Outcome::finding;
    out.message = std::move(m);
    return out;
  };
  // Stage 1: build and compile, plain and checked.
  tx::Kernel plain, checked;
  try {
    tx::PrimFunc f = build(p);
    plain = tx::compile(f, {.device = tx::Device::host()});
    checked = tx::compile(f, {.device = tx::Device::host(), .checked = true});
  } catch (const tx::Error& e) {
    out.kind = Outcome::rejected;
    out.message = e.what();
    if (bad_message(out.message)) return finding("internal error while compiling: " + out.message);
    if (p.expect == Expect::clean)
      return finding("tx rejected a valid program (" + p.why + "): " + out.message);
    if (p.expect == Expect::reject && !p.keyword.empty() &&
        out.message.find(p.keyword) == std::string::npos &&
        out.message.find("outside the block") == std::string::npos)
      out.message = "(not the expected \"" + p.keyword + "\") " + out.message;
    return out;
  } catch (const std::exception& e) {
    return finding(std::string("non-tx exception while building or compiling: ") + e.what());
  } catch (...) {
    return finding("unknown exception while building or compiling");
  }
  if (p.expect == Expect::reject)
    return finding("tx compiled a program it must reject (" + p.why + ")");
  if (!p.run || !run_host || !tx::runtime::host_jit_available()) return out;

  // Stage 2: the tensors (never huge: a huge buffer gets its launch_shape).
  std::mt19937_64 rng(seed);
  std::vector<tx::Tensor> args;
  std::vector<std::vector<std::int64_t>> ints(p.bufs.size());
  std::vector<int> which;
  for (std::size_t i = 0; i < p.bufs.size(); ++i) {
    const Buf& b = p.bufs[i];
    if (b.scope != MemScope::global || b.foreign) continue;
    args.push_back(make_tensor(b, rng, &ints[i]));
    which.push_back(static_cast<int>(i));
  }
  if (p.launch != BadLaunch::none && !args.empty()) {
    tx::Tensor& a0 = args[0];
    switch (p.launch) {
      case BadLaunch::shape: {
        Shape s = a0.shape();
        s.back() += 1;
        a0 = tx::Tensor::empty(s, a0.dtype(), tx::Device::host());
        break;
      }
      case BadLaunch::dtype:
        a0 = tx::Tensor::empty(a0.shape(), a0.dtype() == tx::f32 ? tx::i32 : tx::f32,
                               tx::Device::host());
        break;
      case BadLaunch::empty:
        a0 = tx::Tensor::empty({0}, a0.dtype(), tx::Device::host());
        break;
      case BadLaunch::undefined:
        a0 = tx::Tensor();
        break;
      case BadLaunch::fewer:
        args.pop_back();
        break;
      case BadLaunch::more:
        args.push_back(args.back());
        break;
      case BadLaunch::none:
        break;
    }
  }
  bool huge = std::any_of(p.bufs.begin(), p.bufs.end(),
                          [](const Buf& b) { return !b.launch_shape.empty(); });

  // Stage 3: the checked run.
  std::vector<tx::Tensor> in_checked = copies(args);
  std::string report;
  try {
    checked.launch(in_checked);
  } catch (const tx::Error& e) {
    report = e.what();
    if (bad_message(report)) return finding("internal error in the checked run: " + report);
  } catch (const std::exception& e) {
    return finding(std::string("non-tx exception in the checked run: ") + e.what());
  }
  if (p.expect == Expect::launch_error || p.launch != BadLaunch::none || huge) {
    if (report.empty()) return finding("a launch with the wrong tensors ran (" + p.why + ")");
    out.kind = Outcome::refused;
    out.message = report;
    // The plain launch must refuse them too (it checks before running).
    try {
      plain.launch(args);
    } catch (const tx::Error&) {
      return out;
    } catch (const std::exception& e) {
      return finding(std::string("non-tx exception from a plain launch with the wrong tensors: ") +
                     e.what());
    }
    return finding("a plain launch with the wrong tensors ran (" + p.why + ")");
  }
  if (!report.empty()) {
    out.kind = Outcome::reported;
    out.message = report;
    if (p.expect == Expect::clean)
      return finding("the checked run reported a valid program (" + p.why + "): " + report);
    if (p.expect == Expect::error && !p.keyword.empty() &&
        report.find(p.keyword) == std::string::npos)
      return finding("the checked run's report does not name \"" + p.keyword + "\" (" + p.why +
                     "): " + report);
  } else if (p.expect == Expect::error) {
    return finding("the checked run found nothing (" + p.why + ")");
  }

  // Stage 4: the plain run, where it is defined: after a clean checked run
  // (the same inputs take the same accesses), or for division by zero (the
  // host's documented result, checked below).
  bool division = p.division.out >= 0;
  if (!report.empty() && !division) return out;
  std::vector<tx::Tensor> in_plain = copies(args);
  try {
    plain.launch(in_plain);
  } catch (const tx::Error& e) {
    return finding(std::string("the plain run failed where the checked run did not: ") + e.what());
  } catch (const std::exception& e) {
    return finding(std::string("non-tx exception in the plain run: ") + e.what());
  }
  if (report.empty()) {
    for (std::size_t j = 0; j < in_plain.size(); ++j)
      if (!same_values(in_plain[j], in_checked[j]))
        return finding("the plain and the checked run differ in " +
                       p.bufs[static_cast<std::size_t>(which[j])].name);
  }
  if (division) {
    std::size_t oi = 0;
    while (which[oi] != p.division.out) ++oi;
    const Buf& ob = p.bufs[static_cast<std::size_t>(p.division.out)];
    std::vector<std::uint8_t> bytes = in_plain[oi].to_bytes();
    std::size_t es = static_cast<std::size_t>(ob.dtype.bytes());
    const auto& nv = ints[static_cast<std::size_t>(p.division.num)];
    const auto& dv = ints[static_cast<std::size_t>(p.division.den)];
    for (std::size_t e = 0; e < nv.size(); ++e) {
      std::int64_t got = 0;
      std::memcpy(&got, bytes.data() + e * es, es);
      if (es == 4) got = static_cast<std::int32_t>(got);
      std::int64_t want = host_divide(p.division.op, nv[e], dv[e], ob.dtype);
      if (got != want)
        return finding("element " + std::to_string(e) + ": " + std::to_string(nv[e]) + " " +
                       tx::binop_symbol(p.division.op) + " " + std::to_string(dv[e]) + " gave " +
                       std::to_string(got) + ", the documented host result is " +
                       std::to_string(want));
    }
  }
  return out;
}

}  // namespace txbad
