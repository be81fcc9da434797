// Literal typing, implicit promotion and the dtype rounding rules shared by
// the reference evaluation, the tensors and the host runtime.
#include "tx/expr.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <string_view>

namespace tx {

namespace detail {

Expr literal_like(double v, bool is_integral, DType like) {
  SourceLoc loc = current_loc();
  if (like.is_float()) return make_float(v, like, loc);
  if (like.is_bool()) return make_bool(v != 0, loc);
  if (like.is_integer()) {
    if (!is_integral && v != std::trunc(v)) return make_float(v, f32, loc);
    return make_int(static_cast<std::int64_t>(v), like, loc);
  }
  return literal_default(v, is_integral, false);
}

Expr literal_default(double v, bool is_integral, bool is_bool) {
  SourceLoc loc = current_loc();
  if (is_bool) return make_bool(v != 0, loc);
  if (is_integral) {
    if (v >= -2147483648.0 && v <= 2147483647.0)
      return make_int(static_cast<std::int64_t>(v), i32, loc);
    return make_int(static_cast<std::int64_t>(v), i64, loc);
  }
  return make_float(v, f32, loc);
}

namespace {
int rank(DType t) {
  // Promotion order for integers: wider wins; at equal width unsigned wins.
  return t.bits * 2 + (t.is_uint() ? 1 : 0);
}
}  // namespace

SourceLoc use_loc(const Expr& a, const Expr& b) {
  // A load records where the user wrote the element access (Idx), and nodes
  // built here inherit it; variables and literals carry no use site.
  auto site = [](const Expr& e) -> SourceLoc {
    if (!e.defined() || e.as<VarNode>() || e.as<IntImmNode>() || e.as<FloatImmNode>()) return {};
    return e->loc;
  };
  SourceLoc la = site(a), lb = site(b);
  if (la.known() && lb.known() && std::string_view(la.file) == lb.file)
    return la.line >= lb.line ? la : lb;  // the later line: the mistake is no earlier
  if (la.known()) return la;
  if (lb.known()) return lb;
  return current_loc();
}

Expr combine(BinOp op, const Expr& a0, const Expr& b0) {
  if (!a0.defined() || !b0.defined()) fail_undefined("tx::Expr");
  Expr a = spill_deep(a0), b = spill_deep(b0);
  SourceLoc loc = use_loc(a, b);
  DType ta = a.dtype(), tb = b.dtype();
  if (ta != tb && !binop_is_logical(op)) {
    if (ta.is_float() && !tb.is_float() && !tb.is_handle()) {
      b = make_cast(ta, b, loc);
    } else if (tb.is_float() && !ta.is_float() && !ta.is_handle()) {
      a = make_cast(tb, a, loc);
    } else if ((ta.is_integer() || ta.is_bool()) && (tb.is_integer() || tb.is_bool())) {
      DType t = ta.is_bool() ? tb : tb.is_bool() ? ta : (rank(ta) >= rank(tb) ? ta : tb);
      a = make_cast(t, a, loc);
      b = make_cast(t, b, loc);
    }
    // Two different float types: make_binary reports it and asks for a cast.
  }
  return make_binary(op, a, b, loc);
}

}  // namespace detail

namespace {

struct MiniFloat {
  int exp_bits, man_bits, bias;
  bool has_inf;  // IEEE-style Inf at the all-ones exponent
  double max_finite;
};

MiniFloat format_of(DType t) {
  switch (t.code) {
    case TypeCode::Float:
      if (t.bits == 16) return {5, 10, 15, true, 65504.0};
      break;
    case TypeCode::BFloat:
      return {8, 7, 127, true, 3.3895313892515355e38};
    case TypeCode::Float8E4M3:
      return {4, 3, 7, false, 448.0};
    case TypeCode::Float8E5M2:
      return {5, 2, 15, true, 57344.0};
    default:
      break;
  }
  fail("tx.quantize", t.name(), {}, "not a small float type");
}

// Round to nearest even in the format; returns the rounded magnitude (may be
// above max_finite, which the caller resolves).
double round_minifloat(double a, const MiniFloat& f) {
  if (a == 0) return 0;
  int emin = 1 - f.bias;
  int e;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;
  double q = std::ldexp(1.0, e - f.man_bits);
  return std::nearbyint(a / q) * q;
}

std::uint64_t encode_minifloat(double v, DType t) {
  MiniFloat f = format_of(t);
  int total = 1 + f.exp_bits + f.man_bits;
  std::uint64_t sign = std::signbit(v) ? 1ull << (total - 1) : 0;
  std::uint64_t exp_all = (1ull << f.exp_bits) - 1;
  std::uint64_t nan_bits = f.has_inf ? (exp_all << f.man_bits) | (1ull << (f.man_bits - 1))
                                     : (exp_all << f.man_bits) | ((1ull << f.man_bits) - 1);
  // fp8 NaNs are canonical (0x7F, as the GPU's conversion gives); others keep the sign.
  if (std::isnan(v)) return t.is_fp8() ? nan_bits : sign | nan_bits;
  double a = std::fabs(v);
  double r = std::isinf(a) ? a : round_minifloat(a, f);
  if (r > f.max_finite) {
    if (t.code == TypeCode::Float8E4M3) {
      r = f.max_finite;  // e4m3fn saturates (satfinite), Inf included
    } else {
      return sign | (exp_all << f.man_bits);  // Inf
    }
  }
  if (r == 0) return sign;
  int emin = 1 - f.bias;
  int e;
  std::frexp(r, &e);
  e -= 1;
  if (e < emin) {
    auto mant = static_cast<std::uint64_t>(std::ldexp(r, f.man_bits - emin));
    return sign | mant;
  }
  auto mant = static_cast<std::uint64_t>(std::ldexp(r, f.man_bits - e)) - (1ull << f.man_bits);
  auto ef = static_cast<std::uint64_t>(e + f.bias);
  return sign | (ef << f.man_bits) | mant;
}

double decode_minifloat(std::uint64_t bits, DType t) {
  MiniFloat f = format_of(t);
  int total = 1 + f.exp_bits + f.man_bits;
  bool neg = (bits >> (total - 1)) & 1;
  std::uint64_t ef = (bits >> f.man_bits) & ((1ull << f.exp_bits) - 1);
  std::uint64_t mant = bits & ((1ull << f.man_bits) - 1);
  std::uint64_t exp_all = (1ull << f.exp_bits) - 1;
  double v;
  if (f.has_inf && ef == exp_all) {
    v = mant ? std::nan("") : INFINITY;
  } else if (!f.has_inf && ef == exp_all && mant == (1ull << f.man_bits) - 1) {
    v = std::nan("");
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant + (1ull << f.man_bits)),
                   static_cast<int>(ef) - f.bias - f.man_bits);
  }
  return neg ? -v : v;
}

std::uint64_t wrap_integer(double v, DType t) {
  if (std::isnan(v)) return 0;
  double tv = std::trunc(v);
  // Reduce modulo 2^bits without overflowing int64 conversions.
  double m = std::ldexp(1.0, t.bits);
  double r = std::fmod(tv, m);  // exact, |r| < 2^bits
  if (r < 0) {
    // -1 + 2^64 is not representable in double: go through int64 instead.
    if (r >= -0x1p63) {
      auto u = static_cast<std::uint64_t>(static_cast<std::int64_t>(r));
      return t.bits < 64 ? u & ((1ull << t.bits) - 1) : u;
    }
    r += m;  // exact here: r is a multiple of 2^11
  }
  auto u = static_cast<std::uint64_t>(r);
  if (t.bits < 64) u &= (1ull << t.bits) - 1;
  return u;
}

}  // namespace

std::uint64_t encode_bits(double v, DType t) {
  switch (t.code) {
    case TypeCode::Float:
      if (t.bits == 64) return std::bit_cast<std::uint64_t>(v);
      if (t.bits == 32) return std::bit_cast<std::uint32_t>(static_cast<float>(v));
      return encode_minifloat(v, t);
    case TypeCode::BFloat:
    case TypeCode::Float8E4M3:
    case TypeCode::Float8E5M2:
      return encode_minifloat(v, t);
    case TypeCode::Int:
    case TypeCode::UInt:
      return wrap_integer(v, t);
    case TypeCode::Bool:
      return v != 0 ? 1 : 0;
    default:
      fail("tx.encode_bits", t.name(), {}, "not an element type");
  }
}

double decode_bits(std::uint64_t bits, DType t) {
  switch (t.code) {
    case TypeCode::Float:
      if (t.bits == 64) return std::bit_cast<double>(bits);
      if (t.bits == 32) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
      return decode_minifloat(bits, t);
    case TypeCode::BFloat:
    case TypeCode::Float8E4M3:
    case TypeCode::Float8E5M2:
      return decode_minifloat(bits, t);
    case TypeCode::UInt:
      return static_cast<double>(t.bits < 64 ? bits & ((1ull << t.bits) - 1) : bits);
    case TypeCode::Int: {
      if (t.bits == 64) return static_cast<double>(static_cast<std::int64_t>(bits));
      std::uint64_t m = bits & ((1ull << t.bits) - 1);
      std::int64_t s = (m >> (t.bits - 1)) ? static_cast<std::int64_t>(m) -
                                                 static_cast<std::int64_t>(1ull << t.bits)
                                           : static_cast<std::int64_t>(m);
      return static_cast<double>(s);
    }
    case TypeCode::Bool:
      return bits ? 1.0 : 0.0;
    default:
      fail("tx.decode_bits", t.name(), {}, "not an element type");
  }
}

double quantize(double v, DType t) {
  if (t == f64) return v;
  return decode_bits(encode_bits(v, t), t);
}

}  // namespace tx
