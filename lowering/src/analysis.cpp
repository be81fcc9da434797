#include "tx/lowering/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "tx/ir_functor.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

Uniformity scope_level(ExecScope s) {
  switch (s) {
    case ExecScope::thread:
      return Uniformity::thread;
    case ExecScope::warp:
      return Uniformity::warp;
    case ExecScope::warpgroup:
      return Uniformity::warpgroup;
    case ExecScope::cta:
      return Uniformity::cta;
  }
  return Uniformity::thread;
}

const char* uniformity_name(Uniformity u) {
  switch (u) {
    case Uniformity::thread:
      return "thread";
    case Uniformity::warp:
      return "warp";
    case Uniformity::warpgroup:
      return "warpgroup";
    case Uniformity::cta:
      return "cta";
  }
  return "?";
}

const VarFact* Env::find(const VarNode* v) const {
  auto it = vars_.find(v);
  return it == vars_.end() ? nullptr : &it->second;
}

void Env::define(const Var& v, const Expr& value) { defs_[v.get()] = value; }

const Expr* Env::definition(const VarNode* v) const {
  auto it = defs_.find(v);
  return it == defs_.end() ? nullptr : &it->second;
}

namespace {

std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  __int128 r = static_cast<__int128>(a) * b;
  if (r > Interval::kMax) return Interval::kMax;
  if (r < Interval::kMin) return Interval::kMin;
  return static_cast<std::int64_t>(r);
}
std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  if (a <= Interval::kMin || b <= Interval::kMin) return Interval::kMin;
  if (a >= Interval::kMax || b >= Interval::kMax) return Interval::kMax;
  return std::clamp(a + b, Interval::kMin, Interval::kMax);
}

std::int64_t sat_neg(std::int64_t a) {
  if (a <= Interval::kMin) return Interval::kMax;
  if (a >= Interval::kMax) return Interval::kMin;
  return -a;
}

Interval dtype_range(DType t) {
  if (t.is_bool()) return {0, 1};
  if (t.is_uint() && t.bits < 62) return {0, (std::int64_t{1} << t.bits) - 1};
  if (t.is_int() && t.bits < 62)
    return {-(std::int64_t{1} << (t.bits - 1)), (std::int64_t{1} << (t.bits - 1)) - 1};
  return Interval::everything();
}

}  // namespace

Interval Env::bound(const Expr& e) const {
  if (!e || !(e.dtype().is_integer() || e.dtype().is_bool())) return Interval::everything();
  if (auto c = as_const_int(e)) return Interval::point(*c);
  if (auto* v = e.as<VarNode>()) {
    if (auto* f = find(v)) return f->range;
    return dtype_range(e.dtype());
  }
  if (auto* c = e.as<CallNode>()) {
    if (c->op == Intrinsic::thread_idx) return {0, cta_threads - 1};
    if (c->op == Intrinsic::block_idx) {
      auto d = as_const_int(c->args[0]).value_or(0);
      return {0, grid[static_cast<std::size_t>(std::clamp<std::int64_t>(d, 0, 2))] - 1};
    }
    return dtype_range(e.dtype());
  }
  if (auto* c = e.as<CastNode>()) {
    if (c->value.dtype().is_integer() || c->value.dtype().is_bool()) {
      Interval a = bound(c->value), t = dtype_range(c->dtype);
      if (a.lo >= t.lo && a.hi <= t.hi) return a;
    }
    return dtype_range(e.dtype());
  }
  if (auto* s = e.as<SelectNode>()) {
    Interval a = bound(s->t), b = bound(s->f);
    return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
  }
  auto* b = e.as<BinaryNode>();
  if (!b) return dtype_range(e.dtype());
  if (binop_is_comparison(b->op) || binop_is_logical(b->op)) return {0, 1};
  Interval x = bound(b->a), y = bound(b->b);
  switch (b->op) {
    case BinOp::Add:
      return {sat_add(x.lo, y.lo), sat_add(x.hi, y.hi)};
    case BinOp::Sub:
      return {sat_add(x.lo, sat_neg(y.hi)), sat_add(x.hi, sat_neg(y.lo))};
    case BinOp::Mul: {
      if (!x.bounded() || !y.bounded()) {
        if (x.lo >= 0 && y.lo >= 0) return {sat_mul(x.lo, y.lo), Interval::kMax};
        return Interval::everything();
      }
      std::int64_t c[4] = {sat_mul(x.lo, y.lo), sat_mul(x.lo, y.hi), sat_mul(x.hi, y.lo),
                           sat_mul(x.hi, y.hi)};
      return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
    }
    case BinOp::Div:
    case BinOp::FloorDiv:
      if (y.lo == y.hi && y.lo > 0 && x.lo >= 0) return {x.lo / y.lo, x.hi / y.lo};
      if (y.lo > 0 && x.lo >= 0) return {0, x.hi};
      return Interval::everything();
    case BinOp::Mod:
    case BinOp::FloorMod:
      if (y.lo > 0 && x.lo >= 0) {
        // A multiple of g modulo c (a constant multiple of g) is at most c - g.
        std::int64_t hi = std::min(x.hi, y.hi - 1);
        if (y.lo == y.hi) {
          std::int64_t g = std::gcd(known_divisor(b->a), y.lo);
          if (g > 1) hi = std::min(hi, y.lo - g);
        }
        return {0, hi};
      }
      if (y.lo > 0 && b->op == BinOp::FloorMod) return {0, y.hi - 1};
      if (y.lo > 0) return {-(y.hi - 1), y.hi - 1};
      return Interval::everything();
    case BinOp::Min:
      return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
    case BinOp::Max:
      return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
    case BinOp::BitAnd:
      if (x.lo >= 0 && y.lo >= 0) return {0, std::min(x.hi, y.hi)};
      return dtype_range(e.dtype());
    case BinOp::Shr:
      if (x.lo >= 0 && y.lo == y.hi && y.lo >= 0 && y.lo < 62) return {x.lo >> y.lo, x.hi >> y.lo};
      return dtype_range(e.dtype());
    default:
      return dtype_range(e.dtype());
  }
}

Uniformity Env::level(const Expr& e) const {
  struct Walker : IRVisitor {
    const Env* env;
    Uniformity level = Uniformity::cta;
    void lower(Uniformity u) { level = std::min(level, u); }
    void visit_node(const VarNode* v) override {
      const VarFact* f = env->find(v);
      lower(f ? f->level : Uniformity::thread);
    }
    void visit_node(const CallNode* c) override {
      if (c->op == Intrinsic::thread_idx || c->op == Intrinsic::shfl_xor) lower(Uniformity::thread);
      IRVisitor::visit_node(c);
    }
    void visit_node(const LoadNode* l) override {
      // Memory may differ per thread, unless nothing writes it during the
      // kernel, or it is local memory every thread of a group writes alike.
      const VarFact* f = env->find(l->buffer->data.get());
      if (!f)
        lower(Uniformity::thread);
      else if (!f->invariant_memory)
        lower(f->memory_level);
      IRVisitor::visit_node(l);
    }
    using IRVisitor::visit_node;
  } w;
  w.env = this;
  w.visit(e);
  return w.level;
}

std::int64_t Env::known_divisor(const Expr& e) const {
  if (!e || !e.dtype().is_integer()) return 1;
  if (auto c = as_const_int(e)) {
    // |INT64_MIN| is not an int64; 2^62 divides it and keeps std::gcd defined.
    if (*c == std::numeric_limits<std::int64_t>::min()) return std::int64_t{1} << 62;
    return *c < 0 ? -*c : *c;
  }
  if (auto* v = e.as<VarNode>()) {
    const VarFact* f = find(v);
    return f ? f->divisor : 1;
  }
  if (auto* b = e.as<BinaryNode>()) {
    switch (b->op) {
      case BinOp::Mul: {
        std::int64_t x = known_divisor(b->a), y = known_divisor(b->b);
        if (x == 0 || y == 0) return 0;
        return sat_mul(x, y);
      }
      case BinOp::Add:
      case BinOp::Sub:
        return std::gcd(known_divisor(b->a), known_divisor(b->b));
      case BinOp::Shl:
        if (auto s = as_const_int(b->b); s && *s >= 0 && *s < 40)
          return sat_mul(known_divisor(b->a), std::int64_t{1} << *s);
        return 1;
      case BinOp::Mod:
      case BinOp::FloorMod: {
        // a % c = a - c * (a / c): divisible by whatever divides both a and c
        // (c a constant, or a variable whose facts give a divisor).
        std::int64_t da = known_divisor(b->a);
        if (auto c = as_const_int(b->b); c && *c > 0) return da == 0 ? 0 : std::gcd(da, *c);
        std::int64_t dc = known_divisor(b->b);
        if (da == 0) return dc;
        return std::gcd(da, dc);
      }
      case BinOp::Div:
      case BinOp::FloorDiv:
        if (auto c = as_const_int(b->b); c && *c > 0) {
          std::int64_t da = known_divisor(b->a);
          if (da == 0) return 0;
          if (da % *c == 0) return da / *c;
        }
        return 1;
      default:
        return 1;
    }
  }
  if (auto* c = e.as<CastNode>()) return known_divisor(c->value);
  return 1;
}

namespace {

bool same_atom(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  auto* x = a.as<VarNode>();
  auto* y = b.as<VarNode>();
  return x && x == y;
}

// Adds k * e to f; false on overflow. `depth` limits how many lets are
// looked through (definitions are finite, the limit only bounds the work).
bool accumulate(const Expr& e, std::int64_t k, const Env& env, int depth, LinearForm& f) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 60;
  auto fits = [&](std::int64_t v) { return v > -kLimit && v < kLimit; };
  if (k == 0) return true;
  if (auto c = as_const_int(e)) {
    std::int64_t v = sat_mul(*c, k);
    if (!fits(v) || !fits(f.constant + v)) return false;
    f.constant += v;
    return true;
  }
  if (auto* v = e.as<VarNode>(); v && depth > 0) {
    if (const Expr* d = env.definition(v); d && d->dtype().is_integer())
      return accumulate(*d, k, env, depth - 1, f);
  }
  if (auto* b = e.as<BinaryNode>()) {
    switch (b->op) {
      case BinOp::Add:
        return accumulate(b->a, k, env, depth, f) && accumulate(b->b, k, env, depth, f);
      case BinOp::Sub:
        return accumulate(b->a, k, env, depth, f) && accumulate(b->b, -k, env, depth, f);
      case BinOp::Mul:
        if (auto c = as_const_int(b->b)) {
          std::int64_t m = sat_mul(k, *c);
          return fits(m) && accumulate(b->a, m, env, depth, f);
        }
        if (auto c = as_const_int(b->a)) {
          std::int64_t m = sat_mul(k, *c);
          return fits(m) && accumulate(b->b, m, env, depth, f);
        }
        break;
      default:
        break;
    }
  }
  // A widening integer cast keeps the value.
  if (auto* c = e.as<CastNode>();
      c && c->value.dtype().is_int() && c->dtype.is_int() && c->dtype.bits >= c->value.dtype().bits)
    return accumulate(c->value, k, env, depth, f);
  for (auto& [atom, coeff] : f.terms)
    if (same_atom(atom, e)) {
      coeff += k;
      return fits(coeff);
    }
  f.terms.emplace_back(e, k);
  return true;
}

}  // namespace

std::optional<LinearForm> linear_form(const Expr& e, const Env& env) {
  LinearForm f;
  if (!e.defined() || !e.dtype().is_integer() || !accumulate(e, 1, env, 16, f)) return std::nullopt;
  return f;
}

namespace {
// a + offset <= b, the offset added in the linear form's 64-bit arithmetic
// (never folded into an expression of a's type, where it could wrap).
bool provably_le_offset(const Expr& a, const Expr& b, const Env& env, std::int64_t offset) {
  if (!a.defined() || !b.defined() || !a.dtype().is_integer() || !b.dtype().is_integer())
    return false;
  // Twice: looking through lets (terms of a and b cancel), then not (a let
  // whose range a guard narrowed keeps that range).
  for (int depth : {16, 0}) {
    LinearForm f;
    f.constant = offset;
    if (!accumulate(a, 1, env, depth, f) || !accumulate(b, -1, env, depth, f)) continue;
    std::int64_t hi = f.constant;
    bool bounded = true;
    for (const auto& [atom, coeff] : f.terms) {
      if (coeff == 0) continue;
      Interval r = env.bound(atom);
      if (!r.bounded()) {
        bounded = false;
        break;
      }
      hi = sat_add(hi, coeff > 0 ? sat_mul(coeff, r.hi) : sat_mul(coeff, r.lo));
      if (hi >= Interval::kMax / 2) {
        bounded = false;
        break;
      }
    }
    if (bounded && hi <= 0) return true;
  }
  return false;
}
}  // namespace

bool provably_le(const Expr& a, const Expr& b, const Env& env) {
  return provably_le_offset(a, b, env, 0);
}
bool provably_lt(const Expr& a, const Expr& b, const Env& env) {
  return provably_le_offset(a, b, env, 1);
}

std::optional<std::int64_t> evaluate_int(
    const Expr& e, const std::function<std::optional<std::int64_t>(const VarNode*)>& var,
    bool mathematical) {
  if (!e.defined()) return std::nullopt;
  DType t = e.dtype();
  if (!t.is_integer() && !t.is_bool()) return std::nullopt;
  if (auto c = as_const_int(e)) return *c;
  if (auto* v = e.as<VarNode>()) return var(v);
  auto fits = [&](__int128 r) -> std::optional<std::int64_t> {
    if (t.is_bool()) return r != 0;
    if (t.bits >= 64 || mathematical) {
      if (r > INT64_MAX || r < INT64_MIN) return std::nullopt;
      return static_cast<std::int64_t>(r);
    }
    __int128 lo = t.is_uint() ? 0 : -(static_cast<__int128>(1) << (t.bits - 1));
    __int128 hi = t.is_uint() ? (static_cast<__int128>(1) << t.bits) - 1
                              : (static_cast<__int128>(1) << (t.bits - 1)) - 1;
    if (r < lo || r > hi) return std::nullopt;  // wraps on the GPU: not a value to trust
    return static_cast<std::int64_t>(r);
  };
  auto sub = [&](const Expr& x) { return evaluate_int(x, var, mathematical); };
  if (auto* c = e.as<CastNode>()) {
    auto x = sub(c->value);
    if (!x) return std::nullopt;
    return fits(*x);
  }
  if (auto* s = e.as<SelectNode>()) {
    auto c = sub(s->cond);
    if (!c) return std::nullopt;
    return sub(*c ? s->t : s->f);
  }
  if (auto* u = e.as<UnaryNode>()) {
    auto x = sub(u->a);
    if (!x) return std::nullopt;
    switch (u->op) {
      case UnOp::Neg:
        return fits(-static_cast<__int128>(*x));
      case UnOp::Not:
        return *x == 0;
      case UnOp::BitNot:
        return fits(~*x);
    }
  }
  auto* b = e.as<BinaryNode>();
  if (!b) return std::nullopt;
  auto x = sub(b->a);
  if (!x) return std::nullopt;
  if (b->op == BinOp::And && *x == 0) return 0;
  if (b->op == BinOp::Or && *x != 0) return 1;
  auto y = sub(b->b);
  if (!y) return std::nullopt;
  __int128 p = *x, q = *y;
  switch (b->op) {
    case BinOp::Add:
      return fits(p + q);
    case BinOp::Sub:
      return fits(p - q);
    case BinOp::Mul:
      return fits(p * q);
    case BinOp::Div:
      if (q == 0) return std::nullopt;
      return fits(p / q);
    case BinOp::Mod:
      if (q == 0) return std::nullopt;
      return fits(p % q);
    case BinOp::FloorDiv: {
      if (q == 0) return std::nullopt;
      __int128 r = p / q;
      if ((p % q != 0) && ((p < 0) != (q < 0))) --r;
      return fits(r);
    }
    case BinOp::FloorMod: {
      if (q == 0) return std::nullopt;
      __int128 r = p % q;
      if (r != 0 && ((r < 0) != (q < 0))) r += q;
      return fits(r);
    }
    case BinOp::Min:
      return std::min(*x, *y);
    case BinOp::Max:
      return std::max(*x, *y);
    case BinOp::EQ:
      return *x == *y;
    case BinOp::NE:
      return *x != *y;
    case BinOp::LT:
      return *x < *y;
    case BinOp::LE:
      return *x <= *y;
    case BinOp::GT:
      return *x > *y;
    case BinOp::GE:
      return *x >= *y;
    case BinOp::And:
      return *y != 0;
    case BinOp::Or:
      return *y != 0;
    case BinOp::BitAnd:
      return fits(p & q);
    case BinOp::BitOr:
      return fits(p | q);
    case BinOp::BitXor:
      return fits(p ^ q);
    case BinOp::Shl:
      if (q < 0 || q >= t.bits) return std::nullopt;
      return fits(p << static_cast<int>(q));
    case BinOp::Shr:
      if (q < 0 || q >= t.bits) return std::nullopt;
      return fits(p >> static_cast<int>(q));
  }
  return std::nullopt;
}

// ------------------------------------------------------------- simplifier

namespace {

// x OP y folded as the kernel computes it: two's complement at t's width, the
// result the GPU and the host JIT both produce. nullopt where the targets do
// not agree on one value (a divisor of 0, INT_MIN / -1, a shift count outside
// 0 .. width-1), which is then left to run.
std::optional<std::int64_t> fold_int(BinOp op, std::int64_t x, std::int64_t y, DType t) {
  const int w = t.is_bool() ? 64 : t.bits;
  const bool sg = t.is_bool() || t.is_int();
  auto wrap = [&](std::uint64_t v) -> std::int64_t {
    if (w >= 64) return static_cast<std::int64_t>(v);
    std::uint64_t mask = (std::uint64_t{1} << w) - 1;
    v &= mask;
    if (sg && (v >> (w - 1)) & 1) v |= ~mask;
    return static_cast<std::int64_t>(v);
  };
  x = wrap(static_cast<std::uint64_t>(x));
  y = wrap(static_cast<std::uint64_t>(y));
  const std::uint64_t ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
  // Unsigned values of 64 bits live in int64 as their bit pattern.
  const bool u64 = !sg && w == 64;
  const std::int64_t min =
      w >= 64 ? std::numeric_limits<std::int64_t>::min() : -(std::int64_t{1} << (w - 1));
  auto divides = [&] { return y != 0 && !(sg && x == min && y == -1); };
  auto less = [&](std::int64_t a, std::int64_t b) {
    return u64 ? static_cast<std::uint64_t>(a) < static_cast<std::uint64_t>(b) : a < b;
  };
  switch (op) {
    case BinOp::Add:
      return wrap(ux + uy);
    case BinOp::Sub:
      return wrap(ux - uy);
    case BinOp::Mul:
      return wrap(ux * uy);
    case BinOp::Div:
      if (!divides()) return std::nullopt;
      return u64 ? wrap(ux / uy) : wrap(static_cast<std::uint64_t>(x / y));
    case BinOp::Mod:
      if (!divides()) return std::nullopt;
      return u64 ? wrap(ux % uy) : wrap(static_cast<std::uint64_t>(x % y));
    case BinOp::FloorDiv:
    case BinOp::FloorMod: {
      if (!divides()) return std::nullopt;
      if (u64) return wrap(op == BinOp::FloorDiv ? ux / uy : ux % uy);
      std::int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
      return wrap(static_cast<std::uint64_t>(op == BinOp::FloorDiv ? q : r));
    }
    case BinOp::Min:
      return less(x, y) ? x : y;
    case BinOp::Max:
      return less(x, y) ? y : x;
    case BinOp::EQ:
      return x == y;
    case BinOp::NE:
      return x != y;
    case BinOp::LT:
      return less(x, y);
    case BinOp::LE:
      return !less(y, x);
    case BinOp::GT:
      return less(y, x);
    case BinOp::GE:
      return !less(x, y);
    case BinOp::And:
      return x != 0 && y != 0;
    case BinOp::Or:
      return x != 0 || y != 0;
    case BinOp::BitAnd:
      return wrap(ux & uy);
    case BinOp::BitOr:
      return wrap(ux | uy);
    case BinOp::BitXor:
      return wrap(ux ^ uy);
    case BinOp::Shl:
      if (y < 0 || y >= w) return std::nullopt;
      return wrap(ux << y);
    case BinOp::Shr:
      if (y < 0 || y >= w) return std::nullopt;
      if (sg) return x >> y;
      return wrap((w >= 64 ? ux : ux & ((std::uint64_t{1} << w) - 1)) >> y);
  }
  return std::nullopt;
}

class Simplifier : public IRMutator {
 public:
  explicit Simplifier(const Env* env) : env_(env) {}
  using IRMutator::mutate_node;

  Expr mutate_node(const Expr& self, const BinaryNode* n) override {
    Expr a = mutate(n->a), b = mutate(n->b);
    return rewrite(n->op, a, b, n->loc, a.same_as(n->a) && b.same_as(n->b) ? self : Expr());
  }

  Expr mutate_node(const Expr& self, const CastNode* n) override {
    Expr v = mutate(n->value);
    if (auto c = as_const_int(v)) {
      if (n->dtype.is_integer()) return make_int(*c, n->dtype, n->loc);
      if (n->dtype.is_float() && !n->dtype.is_low_precision_float())
        return make_float(static_cast<double>(*c), n->dtype, n->loc);
    }
    return v.same_as(n->value) ? self : make_cast(n->dtype, v, n->loc);
  }

  Expr mutate_node(const Expr& self, const SelectNode* n) override {
    Expr c = mutate(n->cond), t = mutate(n->t), f = mutate(n->f);
    if (auto k = as_const_int(c)) return *k ? t : f;
    if (c.same_as(n->cond) && t.same_as(n->t) && f.same_as(n->f)) return self;
    return make_select(c, t, f, n->loc);
  }

 private:
  Interval bound(const Expr& e) const { return env_ ? env_->bound(e) : Env().bound(e); }
  std::int64_t divisor(const Expr& e) const {
    return env_ ? env_->known_divisor(e) : Env().known_divisor(e);
  }

  Expr rebuild(BinOp op, const Expr& a, const Expr& b, SourceLoc loc, const Expr& self) {
    return self ? self : make_binary(op, a, b, loc);
  }

  Expr rewrite(BinOp op, Expr a, Expr b, SourceLoc loc, Expr self) {
    DType t = a.dtype();
    auto ca = as_const_int(a), cb = as_const_int(b);
    bool is_int = t.is_integer();

    if (ca && cb && (is_int || t.is_bool())) {
      if (auto v = fold_int(op, *ca, *cb, t)) {
        if (binop_is_comparison(op) || binop_is_logical(op)) return make_bool(*v != 0, loc);
        return make_int(*v, t, loc);
      }
    }

    if (t.is_bool() && (op == BinOp::And || op == BinOp::Or)) {
      if (ca) return (op == BinOp::And) == (*ca != 0) ? b : a;
      if (cb) return (op == BinOp::And) == (*cb != 0) ? a : b;
    }

    if (is_int) {
      // Constants to the right of commutative ops.
      if (ca && !cb && (op == BinOp::Add || op == BinOp::Mul)) {
        std::swap(a, b);
        std::swap(ca, cb);
        self = Expr();
      }
      switch (op) {
        case BinOp::Add: {
          if (cb && *cb == 0) return a;
          // x % c + (x / c) * c == x for x >= 0 (either order).
          auto split = [&](const Expr& m, const Expr& q) -> Expr {
            auto* mm = m.as<BinaryNode>();
            auto* qm = q.as<BinaryNode>();
            if (!mm || !qm || mm->op != BinOp::Mod || qm->op != BinOp::Mul) return Expr();
            auto* qd = qm->a.as<BinaryNode>();
            auto c1 = as_const_int(mm->b), c2 = as_const_int(qm->b);
            if (!qd || qd->op != BinOp::Div || !c1 || !c2 || *c1 != *c2) return Expr();
            auto c3 = as_const_int(qd->b);
            if (!c3 || *c3 != *c1) return Expr();
            if (!structural_equal(make_evaluate(mm->a), make_evaluate(qd->a))) return Expr();
            if (bound(mm->a).lo < 0) return Expr();
            return mm->a;
          };
          if (Expr r = split(a, b)) return r;
          if (Expr r = split(b, a)) return r;
        }
          // (x + k) + c = x + (k + c), the constants folded at t's width
          // (two's complement, as the kernel adds them).
          if (auto* x = a.as<BinaryNode>(); x && cb && x->op == BinOp::Add) {
            if (auto k = as_const_int(x->b))
              if (auto kc = fold_int(BinOp::Add, *k, *cb, t))
                return rewrite(BinOp::Add, x->a, make_int(*kc, t, loc), loc, {});
          }
          break;
        case BinOp::Sub:
          if (cb && *cb == 0) return a;
          if (a.same_as(b)) return make_int(0, t, loc);
          break;
        case BinOp::Mul:
          if (cb && *cb == 1) return a;
          if (cb && *cb == 0) return make_int(0, t, loc);
          if (auto* x = a.as<BinaryNode>(); x && cb && x->op == BinOp::Mul) {
            if (auto k = as_const_int(x->b))
              if (auto kc = fold_int(BinOp::Mul, *k, *cb, t))
                return rewrite(BinOp::Mul, x->a, make_int(*kc, t, loc), loc, {});
          }
          break;
        case BinOp::Div:
        case BinOp::FloorDiv:
          if (cb && *cb == 1) return a;
          if (cb && *cb > 0) {
            Interval ia = bound(a);
            if (ia.lo >= 0 && ia.hi < *cb) return make_int(0, t, loc);
            if (auto* x = a.as<BinaryNode>()) {
              auto kx = as_const_int(x->b);
              if (x->op == BinOp::Mul && kx && *kx % *cb == 0)
                return rewrite(BinOp::Mul, x->a, make_int(*kx / *cb, t, loc), loc, {});
              if ((x->op == BinOp::Div || x->op == BinOp::FloorDiv) && kx && *kx > 0 &&
                  bound(x->a).lo >= 0)
                return rewrite(op, x->a, make_int(*kx * *cb, t, loc), loc, {});
              if (x->op == BinOp::Add && ia.lo >= 0) {
                // (p + q) / c == p / c + q / c when c divides p and both are non-negative.
                Interval ip = bound(x->a), iq = bound(x->b);
                if (ip.lo >= 0 && iq.lo >= 0 && divisor(x->a) % *cb == 0 && divisor(x->a) != 0)
                  return rewrite(BinOp::Add, rewrite(op, x->a, b, loc, {}),
                                 rewrite(op, x->b, b, loc, {}), loc, {});
                if (ip.lo >= 0 && iq.lo >= 0 && divisor(x->b) % *cb == 0 && divisor(x->b) != 0)
                  return rewrite(BinOp::Add, rewrite(op, x->a, b, loc, {}),
                                 rewrite(op, x->b, b, loc, {}), loc, {});
              }
            }
          }
          break;
        case BinOp::Mod:
        case BinOp::FloorMod:
          if (cb && *cb == 1) return make_int(0, t, loc);
          if (cb && *cb > 0) {
            Interval ia = bound(a);
            if (ia.lo >= 0 && ia.hi < *cb) return a;
            std::int64_t da = divisor(a);
            if (ia.lo >= 0 && (da == 0 || da % *cb == 0)) return make_int(0, t, loc);
            if (auto* x = a.as<BinaryNode>()) {
              auto kx = as_const_int(x->b);
              if ((x->op == BinOp::Mod || x->op == BinOp::FloorMod) && kx && *kx % *cb == 0 &&
                  bound(x->a).lo >= 0)
                return rewrite(op, x->a, b, loc, {});
              if (x->op == BinOp::Add && ia.lo >= 0 && bound(x->a).lo >= 0 && bound(x->b).lo >= 0) {
                std::int64_t dp = divisor(x->a), dq = divisor(x->b);
                if (dp == 0 || dp % *cb == 0) return rewrite(op, x->b, b, loc, {});
                if (dq == 0 || dq % *cb == 0) return rewrite(op, x->a, b, loc, {});
              }
            }
          }
          break;
        case BinOp::Min:
        case BinOp::Max: {
          Interval ia = bound(a), ib = bound(b);
          bool a_le_b = ia.hi <= ib.lo, b_le_a = ib.hi <= ia.lo;
          if (op == BinOp::Min && a_le_b) return a;
          if (op == BinOp::Min && b_le_a) return b;
          if (op == BinOp::Max && a_le_b) return b;
          if (op == BinOp::Max && b_le_a) return a;
          break;
        }
        case BinOp::LT:
        case BinOp::LE:
        case BinOp::GT:
        case BinOp::GE:
        case BinOp::EQ:
        case BinOp::NE: {
          Interval ia = bound(a), ib = bound(b);
          std::optional<bool> r;
          switch (op) {
            case BinOp::LT:
              if (ia.hi < ib.lo) r = true;
              if (ia.lo >= ib.hi) r = false;
              break;
            case BinOp::LE:
              if (ia.hi <= ib.lo) r = true;
              if (ia.lo > ib.hi) r = false;
              break;
            case BinOp::GT:
              if (ia.lo > ib.hi) r = true;
              if (ia.hi <= ib.lo) r = false;
              break;
            case BinOp::GE:
              if (ia.lo >= ib.hi) r = true;
              if (ia.hi < ib.lo) r = false;
              break;
            case BinOp::EQ:
              if (ia.hi < ib.lo || ia.lo > ib.hi) r = false;
              break;
            case BinOp::NE:
              if (ia.hi < ib.lo || ia.lo > ib.hi) r = true;
              break;
            default:
              break;
          }
          if (r && ia.bounded() && ib.bounded()) return make_bool(*r, loc);
          break;
        }
        default:
          break;
      }
    }

    if (t.is_float() && !t.is_low_precision_float()) {
      auto fa = a.as<FloatImmNode>(), fb = b.as<FloatImmNode>();
      if (fb && op == BinOp::Mul && fb->value == 1.0) return a;
      if (fa && op == BinOp::Mul && fa->value == 1.0) return b;
      if (fb && (op == BinOp::Add || op == BinOp::Sub) && fb->value == 0.0 &&
          !std::signbit(fb->value))
        return a;
    }
    return rebuild(op, a, b, loc, self);
  }

  static std::int64_t floordiv(std::int64_t x, std::int64_t y) {
    std::int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  }
  static std::int64_t floormod(std::int64_t x, std::int64_t y) { return x - floordiv(x, y) * y; }

  const Env* env_;
};

}  // namespace

Expr simplify(const Expr& e, const Env* env) {
  Simplifier s(env);
  return s.mutate(e);
}

// `e` as an i64 expression whose value is the mathematical value of `e`
// computed without 32-bit wrap-around.
Expr widen_to_i64(const Expr& e) {
  DType t = e.dtype();
  if (t == i64) return e;
  // Only signed integers of up to 32 bits: unsigned arithmetic wraps by
  // definition, so its value is kept and converted.
  bool signed_narrow = t.is_int() && t.bits <= 32;
  if (auto c = as_const_int(e); c && (signed_narrow || t.is_uint()))
    return make_int(*c, i64, e->loc);
  if (!signed_narrow) return make_cast(i64, e, e->loc);
  if (auto* b = e.as<BinaryNode>()) {
    switch (b->op) {
      case BinOp::Add:
      case BinOp::Sub:
      case BinOp::Mul:
      case BinOp::Div:
      case BinOp::Mod:
      case BinOp::FloorDiv:
      case BinOp::FloorMod:
      case BinOp::Min:
      case BinOp::Max:
      case BinOp::BitAnd:
      case BinOp::BitOr:
      case BinOp::BitXor:
        return make_binary(b->op, widen_to_i64(b->a), widen_to_i64(b->b), b->loc);
      case BinOp::Shl:
      case BinOp::Shr:
        return make_binary(b->op, widen_to_i64(b->a), make_cast(i64, b->b, b->loc), b->loc);
      default:
        break;
    }
  }
  if (auto* u = e.as<UnaryNode>(); u && u->op == UnOp::Neg)
    return make_unary(UnOp::Neg, widen_to_i64(u->a), u->loc);
  if (auto* s = e.as<SelectNode>())
    return make_select(s->cond, widen_to_i64(s->t), widen_to_i64(s->f), s->loc);
  if (auto* c = e.as<CastNode>(); c && c->value.dtype().is_int() && c->value.dtype().bits <= 32)
    return widen_to_i64(c->value);  // a widening (or same-width) cast between signed ints
  return make_cast(i64, e, e->loc);
}

bool needs_wide_offsets(const Buffer& b) {
  return b->storage_elems() > std::numeric_limits<std::int32_t>::max();
}

Expr add(Expr a, Expr b) { return simplify(make_binary(BinOp::Add, std::move(a), std::move(b))); }
Expr mul(Expr a, Expr b) { return simplify(make_binary(BinOp::Mul, std::move(a), std::move(b))); }
Expr sub(Expr a, Expr b) { return simplify(make_binary(BinOp::Sub, std::move(a), std::move(b))); }
Expr div(Expr a, Expr b) { return simplify(make_binary(BinOp::Div, std::move(a), std::move(b))); }
Expr mod(Expr a, Expr b) { return simplify(make_binary(BinOp::Mod, std::move(a), std::move(b))); }
Expr lt(Expr a, Expr b) { return simplify(make_binary(BinOp::LT, std::move(a), std::move(b))); }
Expr land(Expr a, Expr b) { return simplify(make_binary(BinOp::And, std::move(a), std::move(b))); }
Expr eq(Expr a, Expr b) { return simplify(make_binary(BinOp::EQ, std::move(a), std::move(b))); }

}  // namespace tx::lowering
