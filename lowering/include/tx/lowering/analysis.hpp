// Facts about expressions that lowering relies on: value ranges (for bounds
// checks), known divisors (for vector alignment), uniformity across threads
// (for the active-threads rule of tile primitives), and a simplifier.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

#include "tx/ir.hpp"

namespace tx::lowering {

// Which threads are guaranteed to agree on a value. A guard on a value of
// level L keeps whole groups of level <= L together.
enum class Uniformity : int { thread = 0, warp = 1, warpgroup = 2, cta = 3 };
Uniformity scope_level(ExecScope s);
const char* uniformity_name(Uniformity u);

struct Interval {
  static constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min() / 4;
  static constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max() / 4;
  std::int64_t lo = kMin, hi = kMax;  // inclusive
  bool bounded() const { return lo > kMin && hi < kMax; }
  static Interval point(std::int64_t v) { return {v, v}; }
  static Interval everything() { return {}; }
};

struct VarFact {
  Interval range;
  Uniformity level = Uniformity::cta;
  std::int64_t divisor = 1;  // the var is always a multiple of this
  // For a buffer's data var: its memory does not change while the kernel
  // runs (a global parameter the kernel never writes, in a T::no_alias
  // kernel), so a load from it is as uniform as its index.
  bool invariant_memory = false;
  // For a local buffer's data var: how uniform what it holds is (verify_kernel's
  // inference: written only with values, at indices and under control flow
  // the same for a warpgroup or the CTA). A load is as uniform as this and its index.
  Uniformity memory_level = Uniformity::thread;
};

// The facts in scope at one point of a kernel (vars bound by ids, loops, lets).
class Env {
 public:
  // Unknown launch: the hardware limits.
  int cta_threads = 1024;
  std::array<std::int64_t, 3> grid{2147483647, 65535, 65535};

  void bind(const Var& v, VarFact f) { vars_[v.get()] = f; }
  void bind(const VarNode* v, VarFact f) { vars_[v] = f; }
  const VarFact* find(const VarNode* v) const;
  // The value a let gave a var: linear_form looks through it, so that a
  // guard and a region written over different lets can be compared.
  // (Out of line, as every member here that touches a container: tx.hpp
  // includes this header, and what it instantiates changes which template
  // code a clang-repl session has -- test/repl depends on it.)
  void define(const Var& v, const Expr& value);
  const Expr* definition(const VarNode* v) const;

  Interval bound(const Expr& e) const;
  Uniformity level(const Expr& e) const;
  // Largest d such that e is always a multiple of d (1 if unknown; 0 for e == 0).
  std::int64_t known_divisor(const Expr& e) const;

 private:
  std::unordered_map<const VarNode*, VarFact> vars_;
  std::unordered_map<const VarNode*, Expr> defs_;
};

// An integer expression as constant + sum of coefficient * atom, looking
// through lets; an atom is a var without a definition or a subexpression
// that is not linear (a product of two vars, a division, a load, ...).
// Atoms are equal when they are the same var or the same node. nullopt when
// a coefficient would overflow.
struct LinearForm {
  std::vector<std::pair<Expr, std::int64_t>> terms;
  std::int64_t constant = 0;
};
std::optional<LinearForm> linear_form(const Expr& e, const Env& env);

// Whether a <= b for every value the vars can take (as mathematical
// integers): the common atoms of a - b cancel and the ranges of the others
// bound the rest. False when it cannot tell.
bool provably_le(const Expr& a, const Expr& b, const Env& env);
// Whether a < b, in the same sense (a + 1 <= b with the 1 added in 64 bits:
// `a + 1` built as an expression of a's type could wrap).
bool provably_lt(const Expr& a, const Expr& b, const Env& env);

// The value of an integer (or bool) expression, given the values of its
// variables (`var` returns nullopt for an unknown one); nullopt when it
// reads memory, calls a function, divides by zero or leaves the range of its
// type (which would wrap on the GPU). The launch evaluates grids with it; the
// bounds check, witnesses.
// With `mathematical`, integers do not wrap at their type's width (only at
// 64 bits): what a launch computes on the host for a grid written in i32.
std::optional<std::int64_t> evaluate_int(
    const Expr& e, const std::function<std::optional<std::int64_t>(const VarNode*)>& var,
    bool mathematical = false);

// Constant folding and the identities that index arithmetic needs
// (x*1, x+0, (x*c)/c, (x%c) when 0 <= x < c, ...). With an Env, ranges of
// vars let it drop divisions and modulos that cannot change the value.
Expr simplify(const Expr& e, const Env* env = nullptr);

// Small builders for lowering code.
inline Expr c32(std::int64_t v) { return make_int(v, i32); }
// `e` rebuilt in i64 from its integer leaves up, so that its value is the
// mathematical value of what was written, without 32-bit wrap-around.
Expr widen_to_i64(const Expr& e);
// A buffer of 2^31 elements or more: its offsets are computed in i64.
bool needs_wide_offsets(const Buffer& b);
Expr add(Expr a, Expr b);
Expr mul(Expr a, Expr b);
Expr sub(Expr a, Expr b);
Expr div(Expr a, Expr b);  // truncating (operands are non-negative in lowering)
Expr mod(Expr a, Expr b);
Expr lt(Expr a, Expr b);
Expr land(Expr a, Expr b);  // logical and
Expr eq(Expr a, Expr b);

}  // namespace tx::lowering
