// The elementwise operator library (seed 004), built on tx: every kernel is
// written in the tx DSL, runs on the GPU through NVRTC and on the host
// through the host JIT.
//
//   Tensor y = tx::ops::gelu(x);                 // a new tensor
//   tx::ops::gelu(x, y);                         // out= form
//   Tensor z = tx::ops::add(a, b);               // NumPy broadcasting
//   tx::ops::Elementwise op("silu_and_mul", {{2048, 2 * 28672}}, f16);
//   op({x}, y);                                  // built once, launched many times
//
// Tensors are contiguous (tx tensors have no strides), so every input is
// handled directly; there is no silent copy. Zero-size inputs give
// zero-size results without a launch, as in PyTorch.
//
// Kernels are shape-generic: one compiled kernel serves every shape with
// the same (op, dtypes, coalesced rank, broadcast pattern, alignment class);
// a new token count in a serving loop is a cache hit, not a compile. Kernels are cached per (op,
// dtype, shapes, parameters, config): building an op twice compiles once
// (cache_stats() shows it), and the disk cache makes the next process fast.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "tx/ops/promotion.hpp"
#include "tx/runtime/kernel.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

// The seed's three strategies.
//   direct             one element per thread
//   explicit_parallel  num_per_thread contiguous elements per thread, element by element
//   register_copy      num_per_thread elements staged in registers with tx's
//                      register tile copy (vector transfers)
enum class Strategy { direct, explicit_parallel, register_copy };
const char* strategy_name(Strategy s);

struct Config {
  std::optional<Strategy> strategy{};  // default: the fastest measured for the op's template
  int threads = 0;                     // default 128 for one-input ops, else 256 (fastest measured)
  int num_per_thread = 0;  // default: 16 bytes of elements (32 for fp8; casts: see cast())
  bool tune = false;       // time candidates on the GPU and remember the winner
  // One kernel for these exact shapes rather than the shape-generic kernel
  // that serves every shape of the op's class (the comparison of bench/shapes).
  bool exact_shape = false;
};

// Scalar parameters of the independent ops (see each op).
using Params = std::vector<double>;

// Every op takes the caller's line as a last, defaulted argument: its
// errors are "tx.ops.<op>" errors at that line.
using Loc = std::source_location;

// Runs `op` by name: inputs in the op's order, broadcasting as the op allows.
// A zero-size input gives a zero-size result (nothing is launched).
// Inputs of different dtypes promote as in PyTorch (promotion.hpp,
// docs/ops.md "Type promotion"); each is loaded in its own dtype and
// converted in registers. An out= of another dtype than the result's gets
// the result converted, when PyTorch allows that cast (can_cast).
Tensor run(const std::string& op, const std::vector<Tensor>& inputs, const Params& params = {},
           const Config& cfg = {}, Loc loc = Loc::current());
void run(const std::string& op, const std::vector<Tensor>& inputs, Tensor& out,
         const Params& params = {}, const Config& cfg = {}, Loc loc = Loc::current());

// Every op name, in table order (72: rope and dropout have their own headers).
std::vector<std::string> op_names();

// The in-memory kernel cache of this process (ops, cast, alibi, sinusoidal):
// lookups answered from it, and kernels built (lowered and turned into CUDA)
// on a miss. Building one (op, dtype, shapes, parameters, config, device)
// twice adds one compile and one hit; the two share the kernel, so the GPU
// binary is also built once.
struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t compiles = 0;
  std::uint64_t evictions = 0;  // least recently used kernels dropped at the capacity
  std::size_t size = 0;         // kernels held now
  std::size_t capacity = 0;
};
CacheStats cache_stats();
// At most `kernels` kernels are kept (least recently used first out;
// default 4096); 0 keeps none. Kernels in use by an Elementwise stay valid.
void set_cache_capacity(std::size_t kernels);
// Drops every cached kernel (the disk cache keeps their binaries).
void clear_cache();

namespace detail {
struct ElementwiseSibling;

// An operand of an op: a tensor or a number (ops::mul(x, 0.5)).
struct OpArg {
  const Tensor* tensor = nullptr;
  std::optional<Scalar> scalar;
  OpArg(const Tensor& t) : tensor(&t) {}  // NOLINT: implicit by design
  OpArg(Scalar s) : scalar(s) {}          // NOLINT
};
// run() with numbers among the operands. A number takes part in promotion
// as a scalar (it raises the category, not the width: promotion.hpp) and is
// read by the kernel as a one-element tensor in the op's compute dtype (on
// the GPU: a 4- or 8-byte host-to-device copy per call). Into `out` when
// given (then returns it).
Tensor run_operands(const std::string& op, const std::vector<OpArg>& operands, Tensor* out,
                    const Params& params, const Config& cfg, Loc loc);
}  // namespace detail

// Built once, launched many times.
class Elementwise {
 public:
  // Every data input of `dtype` (where's condition and masked_fill's mask bool).
  Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes, DType dtype,
              Params params = {}, Config cfg = {}, std::optional<Device> device = std::nullopt,
              Loc loc = Loc::current());
  // Each input of its own dtype, promoted as PyTorch promotes them (an input
  // of shape () is a 0-dim tensor); the output of `out_dtype` when given
  // (an out= tensor's dtype, which the result must be castable to).
  Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes,
              std::vector<DType> input_dtypes, Params params = {}, Config cfg = {},
              std::optional<Device> device = std::nullopt,
              std::optional<DType> out_dtype = std::nullopt, Loc loc = Loc::current());
  Tensor operator()(const std::vector<Tensor>& inputs, Loc loc = Loc::current()) const;
  void operator()(const std::vector<Tensor>& inputs, Tensor& out, Loc loc = Loc::current()) const;

  const std::string& op() const { return op_; }
  const std::vector<std::int64_t>& out_shape() const { return out_shape_; }
  DType out_dtype() const { return out_dtype_; }
  // The dtype the op computes in: its inputs' promoted dtype.
  DType dtype() const { return dtype_; }
  const std::vector<DType>& input_dtypes() const { return in_dtypes_; }
  const Kernel& kernel() const { return kernel_; }
  // The key of its kernel among prebuilt ones (runtime/prebuilt.hpp), which
  // tx_aot_kernels stores them under; empty for exact-shape kernels.
  const std::string& prebuilt_spec() const { return prebuilt_spec_; }
  Config config() const { return cfg_; }  // as resolved (strategy, threads, npt)

 private:
  // Makes the Elementwise of another shape of a shape-generic one's class
  // (ops::run's calls on a new token count).
  friend struct detail::ElementwiseSibling;
  // The op's dtype already promoted by the caller (run(), whose scalars
  // rank apart from tensors), and the output's.
  struct Resolved {
    DType result;
    std::optional<DType> out;
    std::uint32_t scalars = 0;  // bit i: input i is a number, read in the compute dtype
  };
  Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes,
              std::vector<DType> input_dtypes, Resolved r, Params params, Config cfg,
              std::optional<Device> device, Loc loc);
  void build(const Config& cfg, std::optional<Device> device, std::optional<DType> out);
  void launch(const std::vector<Tensor>& inputs, Tensor& out) const;
  void launch_views(const std::vector<Tensor>& inputs, Tensor& out) const;
  // A shape-generic kernel's scalar arguments: the coalesced extents.
  std::vector<std::int64_t> scalars_;
  std::string op_;
  std::vector<std::vector<std::int64_t>> in_shapes_;
  std::vector<DType> in_dtypes_;
  DType dtype_, out_dtype_;
  std::vector<std::int64_t> out_shape_;
  Params params_;
  std::uint32_t scalars_in_ = 0;  // see Resolved
  Config cfg_;
  Device device_;
  Kernel kernel_;
  std::string prebuilt_spec_;
  // The kernel for calls whose output overlaps an input (built on first need):
  // kernel_ assumes no overlap (T::no_alias).
  const Kernel& in_place_kernel() const;
  struct InPlace {
    std::mutex mu;
    std::optional<Kernel> kernel;
  };
  std::shared_ptr<InPlace> in_place_;
  // The shape-generic fp8 kernels of unary ops look results up in a table
  // of the op on every 8-bit input, made at the first launch (building an
  // Elementwise runs nothing).
  bool lookup_ = false;
  mutable std::shared_ptr<std::once_flag> table_once_;
  mutable Tensor table_;
};

// ------------------------------------------------------------------ API

// The op lists, laid out by hand: clang-format 14 re-wraps these macro lists
// differently on every run.
// clang-format off
#define TX_OPS_UNARY(X)                                                                      \
  X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(neg) X(reciprocal) X(sign) X(sin) X(cos) X(floor)   \
  X(ceil) X(round) X(trunc) X(erf) X(log1p) X(expm1) X(relu) X(gelu) X(silu) X(sigmoid)       \
  X(tanh) X(hardswish) X(hardsigmoid) X(mish) X(selu) X(logical_not) X(bitwise_not) X(isnan)  \
  X(isinf) X(isfinite)
#define TX_OPS_BINARY(X)                                                                     \
  X(add) X(sub) X(mul) X(div) X(remainder) X(pow) X(floor_divide) X(lerp) X(maximum)          \
  X(minimum) X(eq) X(ne) X(gt) X(lt) X(ge) X(le) X(logical_and) X(logical_or) X(bitwise_and)  \
  X(bitwise_or) X(bitwise_xor)
// clang-format on
#define TX_OPS_GATED(X) X(silu_and_mul) X(gelu_and_mul) X(gelu_tanh_and_mul)

#define TX_DECLARE_UNARY(N)                                                                       \
  inline Tensor N(const Tensor& x, const Config& cfg = {}, Loc loc = Loc::current()) {            \
    return run(#N, {x}, {}, cfg, loc);                                                            \
  }                                                                                               \
  inline void N(const Tensor& x, Tensor& out, const Config& cfg = {}, Loc loc = Loc::current()) { \
    run(#N, {x}, out, {}, cfg, loc);                                                              \
  }
// A binary op also takes a number on either side (ops::mul(x, 0.5),
// ops::sub(1, x)), promoted as PyTorch promotes a Python scalar.
#define TX_DECLARE_BINARY(N)                                                                     \
  inline Tensor N(const Tensor& a, const Tensor& b, const Config& cfg = {},                      \
                  Loc loc = Loc::current()) {                                                    \
    return run(#N, {a, b}, {}, cfg, loc);                                                        \
  }                                                                                              \
  inline void N(const Tensor& a, const Tensor& b, Tensor& out, const Config& cfg = {},           \
                Loc loc = Loc::current()) {                                                      \
    run(#N, {a, b}, out, {}, cfg, loc);                                                          \
  }                                                                                              \
  inline Tensor N(const Tensor& a, Scalar b, const Config& cfg = {}, Loc loc = Loc::current()) { \
    return detail::run_operands(#N, {a, b}, nullptr, {}, cfg, loc);                              \
  }                                                                                              \
  inline Tensor N(Scalar a, const Tensor& b, const Config& cfg = {}, Loc loc = Loc::current()) { \
    return detail::run_operands(#N, {a, b}, nullptr, {}, cfg, loc);                              \
  }                                                                                              \
  inline void N(const Tensor& a, Scalar b, Tensor& out, const Config& cfg = {},                  \
                Loc loc = Loc::current()) {                                                      \
    detail::run_operands(#N, {a, b}, &out, {}, cfg, loc);                                        \
  }                                                                                              \
  inline void N(Scalar a, const Tensor& b, Tensor& out, const Config& cfg = {},                  \
                Loc loc = Loc::current()) {                                                      \
    detail::run_operands(#N, {a, b}, &out, {}, cfg, loc);                                        \
  }
TX_OPS_UNARY(TX_DECLARE_UNARY)
TX_OPS_BINARY(TX_DECLARE_BINARY)
// (M, 2N) -> (M, N): act(x[:, :N]) * x[:, N:]
TX_OPS_GATED(TX_DECLARE_UNARY)
#undef TX_DECLARE_UNARY
#undef TX_DECLARE_BINARY

// Independent ops: parameters as in PyTorch.
inline Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, const Config& c = {},
                         Loc loc = Loc::current()) {
  return run("leaky_relu", {x}, {negative_slope}, c, loc);
}
inline Tensor elu(const Tensor& x, double alpha = 1.0, const Config& c = {},
                  Loc loc = Loc::current()) {
  return run("elu", {x}, {alpha}, c, loc);
}
inline Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0,
                       const Config& c = {}, Loc loc = Loc::current()) {
  return run("hardtanh", {x}, {min_val, max_val}, c, loc);
}
inline Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0,
                       const Config& c = {}, Loc loc = Loc::current()) {
  return run("softplus", {x}, {beta, threshold}, c, loc);
}
// weight: (C,) over dimension 1 of x, or (1,) for all.
inline Tensor prelu(const Tensor& x, const Tensor& weight, const Config& c = {},
                    Loc loc = Loc::current()) {
  return run("prelu", {x, weight}, {}, c, loc);
}
// cond: bool; broadcasts all three; x and y promote (either may be a number).
inline Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y, const Config& c = {},
                    Loc loc = Loc::current()) {
  return run("where", {cond, x, y}, {}, c, loc);
}
inline Tensor where(const Tensor& cond, const Tensor& x, Scalar y, const Config& c = {},
                    Loc loc = Loc::current()) {
  return detail::run_operands("where", {cond, x, y}, nullptr, {}, c, loc);
}
inline Tensor where(const Tensor& cond, Scalar x, const Tensor& y, const Config& c = {},
                    Loc loc = Loc::current()) {
  return detail::run_operands("where", {cond, x, y}, nullptr, {}, c, loc);
}
inline Tensor where(const Tensor& cond, Scalar x, Scalar y, const Config& c = {},
                    Loc loc = Loc::current()) {
  return detail::run_operands("where", {cond, x, y}, nullptr, {}, c, loc);
}
inline Tensor clamp(const Tensor& x, double min_val, double max_val, const Config& c = {},
                    Loc loc = Loc::current()) {
  return run("clamp", {x}, {min_val, max_val}, c, loc);
}
// mask: bool, broadcast to x.
inline Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, const Config& c = {},
                          Loc loc = Loc::current()) {
  return run("masked_fill", {x, mask}, {value}, c, loc);
}
// Defaults as torch.nan_to_num: nan -> 0, +-inf -> the dtype's largest finite values.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt, const Config& c = {},
                  Loc loc = Loc::current());
// ALiBi: (heads, seq, seq), bias[h, i, j] = slope_h * (j - i), slopes as BLOOM/vLLM
// (geometric from 2^(-8/n) for the closest power of two n <= heads, then the
// odd powers of 2^(-4/n) for the remaining heads).
Tensor alibi(std::int64_t num_heads, std::int64_t seq_len, DType dtype = f32,
             std::optional<Device> device = std::nullopt, const Config& c = {},
             Loc loc = Loc::current());
// out= form: out (num_heads, seq_len, seq_len) gives the dtype and device.
void alibi(std::int64_t num_heads, std::int64_t seq_len, Tensor& out, const Config& c = {},
           Loc loc = Loc::current());
// Sinusoidal position encoding, interleaved: pe[p, 2i] = sin(p * w_i),
// pe[p, 2i+1] = cos(p * w_i), w_i = 10000^(-2i / dim).
Tensor sinusoidal(std::int64_t num_positions, std::int64_t dim, DType dtype = f32,
                  std::optional<Device> device = std::nullopt, const Config& c = {},
                  Loc loc = Loc::current());
// out= form: out (num_positions, dim) gives the dtype and device.
void sinusoidal(std::int64_t num_positions, std::int64_t dim, Tensor& out, const Config& c = {},
                Loc loc = Loc::current());

// Converts to another dtype, rounding as the GPU stores it (e4m3fn saturates
// to +-448, e5m2 keeps Inf and NaN, integers truncate and wrap).
Tensor cast(const Tensor& x, DType to, const Config& c = {}, Loc loc = Loc::current());
void cast(const Tensor& x, Tensor& out, const Config& c = {}, Loc loc = Loc::current());

// ALiBi slopes for `num_heads` heads (double precision; the kernel's reference).
std::vector<double> alibi_slopes(std::int64_t num_heads);

}  // namespace tx::ops

// rope (five variants) and dropout: their own kernels (rope.hpp, dropout.hpp);
// the row kernels: softmax, log_softmax, rms_norm, layer_norm, add_rms_norm (rows.hpp);
// matmul (matmul.hpp).
#include "tx/ops/dropout.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/ops/rope.hpp"
#include "tx/ops/rows.hpp"
