// The ops API: validate, broadcast and coalesce, pick a configuration, build
// the kernel with the one template of nary_kernel.cpp (cached in memory per
// op, dtype, shapes, parameters and config, so building an op twice compiles
// once; cache_stats() counts hits and compiles so that tests can see it),
// launch.
#include "tx/ops/ops.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "nary_kernel.hpp"
#include "ops_internal.hpp"
#include "tx/ir_functor.hpp"
#include "tx/ops/broadcast.hpp"
#include "tx/ops/registry.hpp"
#include "tx/runtime/prebuilt.hpp"

namespace tx::ops {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::direct:
      return "direct";
    case Strategy::explicit_parallel:
      return "explicit_parallel";
    case Strategy::register_copy:
      return "register_copy";
  }
  return "?";
}

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const OpInfo& o : all_ops()) out.push_back(o.name);
  return out;
}

namespace {

// Errors raised while running an op (its checks, its kernel's build and
// launch) are errors of the op at the caller's line: "tx.ops.gelu ... at
// app.cpp:12", not a line inside tx.
template <class F>
auto at_call(const std::string& op, SourceLoc loc, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string qn = "tx.ops." + op;
    if (e.op() == qn && e.loc().line == loc.line) throw;
    std::string detail = e.detail();
    if (e.op() != qn && e.op().rfind("tx.ops", 0) != 0)
      detail = "  raised by " + e.op() + (detail.empty() ? "" : "\n" + detail);
    throw Error(qn, e.operand(), loc.known() ? loc : e.loc(), e.reason(), detail);
  }
}

bool has_zero_extent(const std::vector<std::int64_t>& s) {
  for (auto e : s)
    if (e == 0) return true;
  return false;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

const OpInfo& lookup(const std::string& name) {
  const OpInfo* op = find_op(name);
  if (!op) fail("tx.ops", name, {}, "no such op (tx::ops::op_names() lists the 72)");
  return *op;
}

// Which inputs are masks: where's condition and masked_fill's mask (bool,
// not promoted with the data inputs).
bool is_mask_input(const OpInfo& op, std::size_t i) {
  return (op.name == "where" && i == 0) || (op.name == "masked_fill" && i == 1);
}

// Defaults measured on the lent H200 (docs/elementwise_bench.md): register
// copies of 16-byte vectors, 256 threads.
// Threads per CTA when the config names none: 128 for the one-input
// template, 256 for the rest. Measured on the H200 (2^28 elements,
// register_copy): 128 gains 1-2% on the compute-heavy unary ops (gelu, sqrt
// in 16 bits) and is level elsewhere, while the broadcast, where and gated
// kernels are level or slightly faster with 256.
int default_threads(const OpInfo* op) {
  return op && op->tmpl == optable::Template::unary ? 128 : 256;
}

bool math_is_costly(const OpInfo& op, DType dtype);

Config resolve(const Config& c, DType t, const OpInfo* op = nullptr) {
  Config r = c;
  if (!r.strategy) r.strategy = Strategy::register_copy;
  if (r.threads == 0) r.threads = default_threads(op);
  // 16 bytes of the element type; 32 for one-byte types, whose kernels
  // (conversions in and out of fp8 around f32 math) need more bytes in
  // flight per thread: +5% for e4m3 relu / add, measured on the H200. Unary
  // ops on fp8 that look up by table (see uses_lookup_table): 16, four
  // chunks per thread in a pipeline (H200, e4m3 gelu at 2^28: 0.99 of copy
  // with 16, 0.80 with 32).
  const bool fp8_table =
      op && op->tmpl == optable::Template::unary && t.is_fp8() && math_is_costly(*op, t);
  if (r.num_per_thread == 0)
    r.num_per_thread = *r.strategy == Strategy::direct ? 1
                       : fp8_table                     ? 16
                       : t.bytes() == 1                ? 32
                                                       : std::max(1, 16 / t.bytes());
  if (r.threads <= 0 || r.threads > 1024 || r.threads % 32 != 0)
    fail("tx.ops", "threads", {},
         "threads must be a multiple of 32 in [32, 1024], got " + std::to_string(r.threads));
  if (r.num_per_thread <= 0 || (r.num_per_thread & (r.num_per_thread - 1)) != 0 ||
      r.num_per_thread > 64)
    fail("tx.ops", "num_per_thread", {},
         "num_per_thread must be a power of two <= 64, got " + std::to_string(r.num_per_thread));
  return r;
}

struct Plan {
  detail::NarySpec spec;  // for these exact shapes
  std::vector<std::int64_t> out_shape;
  DType out_dtype;
  // The shape-generic kernel of the same class, its cache key (no shapes),
  // and this shape's scalar arguments (the coalesced extents e[1..]).
  detail::GenericSpec generic;
  std::string class_key;
  std::vector<std::int64_t> scalars;
};

// Rows of the coalesced shape read in the output's order.
bool operand_is_flat(const detail::NarySpec& s, const detail::Operand& o) {
  std::int64_t inner = 1;
  for (std::size_t d = s.shape.size(); d-- > 0;) {
    if (o.strides[d] != inner) return false;
    inner *= s.shape[d];
  }
  return o.offset == 0;
}

// The shape-generic kernel that serves p.spec's shapes and every other of
// the same class: coalesced rank, which dimensions each operand broadcasts
// (gated ops: the gate and value halves), and whether the innermost extent
// is a multiple of the vector width.
void make_generic(Plan& p, const OpInfo& op, bool gated, const std::string& dtype_tag) {
  const detail::NarySpec& s = p.spec;
  detail::GenericSpec& g = p.generic;
  g.out_dtype = s.out_dtype;
  g.param_dtypes = s.param_dtypes;
  g.value = s.value;
  g.strategy = s.strategy;
  g.threads = s.threads;
  g.npt = s.npt;
  std::vector<std::int64_t> shape = s.shape;
  // One element coalesces to no dimension at all: the class of flat 1-D.
  const bool scalar = shape.empty();
  if (scalar) shape = {1};
  if (gated && shape.size() == 1) shape.insert(shape.begin(), 1);  // [rows, half]
  g.rank = shape.size();
  const int v = s.strategy == Strategy::direct ? 1 : s.npt;
  g.inner_multiple_of_v = g.rank > 1 && shape.back() % v == 0;
  std::string pattern;
  for (std::size_t k = 0; k < s.operands.size(); ++k) {
    const detail::Operand& o = s.operands[k];
    detail::GenericOperand go;
    go.param = o.param;
    go.compute = o.compute;
    if (gated) {
      go.gated = k == 0 ? detail::Gated::gate : detail::Gated::value;
      go.present.assign(g.rank, true);
      pattern += k == 0 ? "G" : "V";
    } else {
      go.flat = scalar || operand_is_flat(s, o);
      for (std::size_t d = 0; d < g.rank; ++d) go.present.push_back(scalar || o.strides[d] != 0);
      pattern += go.flat ? "f" : "";
      for (bool b : go.present) pattern += b ? "1" : "0";
    }
    pattern += "_";
    g.operands.push_back(go);
  }
  for (std::size_t d = 1; d < g.rank; ++d) p.scalars.push_back(shape[d]);
  // Plain appends, no stream: this runs once per new shape (a serving loop's
  // first call of each token count), where a stream's locale lookups showed.
  g.name = "tx_" + op.name + "_" + s.param_dtypes.front().short_name() + dtype_tag + "_" +
           strategy_name(s.strategy) + "_t" + std::to_string(s.threads) + "_v" +
           std::to_string(s.npt) + "_r" + std::to_string(g.rank) + "_" + pattern +
           (g.inner_multiple_of_v ? "w" : "p");
  p.class_key = g.name + "|" + std::to_string(g.rank) + "|" + pattern +
                (g.inner_multiple_of_v ? "|whole-rows" : "|any-rows");
}

// A unary op on an fp8 input looks its result up in a 256-entry table (see
// GenericSpec::lookup_table) in the shape-generic register_copy kernels, the
// default: fp8 gelu and silu then run at the copy limit, where computing
// them (an f32 erf or exp per byte moved) is instruction-bound. The table
// holds what the computing kernels produce, bit for bit; TX_OPS_LOOKUP=0
// turns the tables off (to compare).
// Only ops whose math costs more than a lookup: a transcendental call or a
// division somewhere in their expression (relu, neg, abs compute at the copy
// limit; measured on the H200: e4m3 relu 0.95 of copy computed, 0.85 by table).
bool math_is_costly(const OpInfo& op, DType dtype) {
  struct Costly : IRVisitor {
    bool found = false;
    void visit_node(const CallNode* n) override {
      switch (n->op) {
        case Intrinsic::fabs:
        case Intrinsic::floor:
        case Intrinsic::ceil:
        case Intrinsic::round:
        case Intrinsic::trunc:
        case Intrinsic::copysign:
        case Intrinsic::fma:
        case Intrinsic::isnan:
        case Intrinsic::isinf:
        case Intrinsic::isfinite:
          break;
        default:
          found = true;
      }
      IRVisitor::visit_node(n);
    }
    void visit_node(const BinaryNode* n) override {
      found = found || n->op == BinOp::Div || n->op == BinOp::Mod;
      IRVisitor::visit_node(n);
    }
  } v;
  Params params(static_cast<std::size_t>(op.params), 0.5);
  v.visit(op.expr({Expr(Var("x", compute_dtype_for(dtype)))}, params));
  return v.found;
}

bool uses_lookup_table(const OpInfo& op, DType dtype, const Config& cfg) {
  static const bool off = [] {
    const char* v = std::getenv("TX_OPS_LOOKUP");
    return v && std::string(v) == "0";
  }();
  return !off && op.tmpl == optable::Template::unary && op.inputs == 1 && dtype.is_fp8() &&
         *cfg.strategy == Strategy::register_copy && !cfg.exact_shape && math_is_costly(op, dtype);
}

// What sets a kernel's name apart when its operands are not all of the
// op's dtype (promotion) or its output is not of the op's output dtype (an
// out= of another dtype): "_from_f32_bf16", "_to_f32". Empty otherwise, so
// that the kernels of one dtype keep their names (and prebuilt keys).
std::string dtype_tag(const OpInfo& op, DType dtype, const std::vector<DType>& dtypes, DType out,
                      std::uint32_t scalars) {
  bool mixed = false;
  for (std::size_t i = 0; i < dtypes.size(); ++i)
    mixed = mixed || (!is_mask_input(op, i) && dtypes[i] != dtype);
  std::string tag;
  if (mixed) {
    tag = "_from";
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      if (!is_mask_input(op, i)) tag += "_" + dtypes[i].short_name();
  }
  if (out != out_dtype_for(op, dtype)) tag += "_to_" + out.short_name();
  // Scalar operands of a 16-bit op are read in f32 (see plan): other code.
  if (scalars != 0 && dtype.is_low_precision_float()) tag += "_s" + std::to_string(scalars);
  return tag;
}

// The kernel spec of an op on concrete shapes: `dtype` is the op's (promoted)
// dtype, `dtypes` the inputs' own (each loaded as it is and converted to the
// compute dtype in registers), `out` the output's (the op's output dtype, or
// an out='s into which that result is converted); bit i of `scalars` says
// input i was a number (a scalar operand), not a tensor.
Plan plan(const OpInfo& op, DType dtype, const std::vector<std::vector<std::int64_t>>& shapes,
          const std::vector<DType>& dtypes, const Params& params, const Config& cfg, DType out,
          std::uint32_t scalars) {
  Plan p;
  DType cd = compute_dtype_for(dtype);
  // The op's own output dtype; an out= of another dtype gets this result
  // converted, as PyTorch computes in the result type and casts on store.
  const DType natural = out_dtype_for(op, dtype);
  p.out_dtype = out;
  const std::string tag = dtype_tag(op, dtype, dtypes, out, scalars);
  detail::NarySpec& s = p.spec;
  s.strategy = *cfg.strategy;
  s.threads = cfg.threads;
  s.npt = cfg.num_per_thread;
  s.name = "tx_" + op.name + "_" + dtype.short_name() + tag + "_" + strategy_name(s.strategy) +
           "_t" + std::to_string(s.threads) + "_v" + std::to_string(s.npt);
  s.out_dtype = p.out_dtype;
  s.param_dtypes = dtypes;
  // The op's value, rounded to its own output dtype first when the output is
  // of another (f16 inputs into an f32 out= are the f16 sum, widened).
  // Operands that arrive in the promoted 16-bit dtype (integers, see below)
  // are widened to the compute dtype here.
  auto value = [&op, params, natural, out, cd](const std::vector<Expr>& operands, const Expr&) {
    std::vector<Expr> in = operands;
    for (Expr& x : in)
      if (x.dtype() != cd && x.dtype().is_low_precision_float()) x = cast(x, cd);
    Expr r = op.expr(in, params);
    if (out != natural && r.dtype() != natural) r = cast(r, natural);
    // tx's integers narrower than 32 bits compute as C's do, in int: an
    // int8 sum is truncated when it is stored, not before. Into a wider
    // out= it is truncated here, as PyTorch's int8 sum wraps (100 + 100 is
    // -56 in an int32 out=). Through int32, since a cast to its own dtype
    // is no cast.
    if (out != natural && natural.is_integer() && natural.bits < 32)
      r = cast(cast(r, natural.is_uint() ? u32 : i32), natural);
    return r;
  };
  for (const auto& sh : shapes) {
    std::int64_t n = 1;
    for (auto e : sh) n *= e;
    s.param_numel.push_back(n);
  }

  if (op.tmpl == optable::Template::gated) {
    const auto& x = shapes[0];
    if (x.empty() || x.back() % 2 != 0)
      fail("tx.ops." + op.name, "x", {},
           "input " + shape_str(x) + " needs an even last dimension (gate | value)");
    std::int64_t half = x.back() / 2, rows = 1;
    for (std::size_t d = 0; d + 1 < x.size(); ++d) rows *= x[d];
    p.out_shape = x;
    p.out_shape.back() = half;
    s.shape = rows == 1 ? std::vector<std::int64_t>{half} : std::vector<std::int64_t>{rows, half};
    std::vector<std::int64_t> st =
        rows == 1 ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{2 * half, 1};
    s.operands = {{0, cd, st, 0}, {0, cd, st, half}};
    s.value = value;
    make_generic(p, op, /*gated=*/true, tag);
    return p;
  }

  // prelu's weight (C,) belongs to dimension 1 of x (as torch.nn.functional.prelu),
  // not to the last one NumPy broadcasting would give it.
  std::vector<std::vector<std::int64_t>> bshapes = shapes;
  if (op.name == "prelu" && shapes[0].size() >= 2 && shapes[1].size() == 1 && shapes[1][0] != 1) {
    if (shapes[1][0] != shapes[0][1])
      fail("tx.ops.prelu", "weight", {},
           "has " + std::to_string(shapes[1][0]) + " channels but x has " +
               std::to_string(shapes[0][1]) + " in dimension 1");
    bshapes[1] = std::vector<std::int64_t>(shapes[0].size() - 1, 1);
    bshapes[1][0] = shapes[1][0];
  }
  Coalesced c = coalesce_broadcast(bshapes);
  p.out_shape = c.out_shape;
  s.shape = c.shape;
  // Each data operand converted to the compute dtype of the promoted one
  // (in registers, after its load); masks stay bool. A tensor of another
  // dtype than a 16-bit (or fp8) op's is rounded to the op's dtype first, as
  // PyTorch's kernels convert every tensor operand to the common dtype
  // (int32 257 plus a bf16 is 256 plus it; an f32 0-dim tensor is rounded
  // to bf16): f32 would hold it exactly and differ. A scalar operand is
  // read in the compute dtype directly, as PyTorch reads a CPU scalar in
  // the op's math type (bf16 x * 0.1 multiplies by the f32 0.1).
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const bool scalar = (scalars >> i) & 1;
    DType ci = is_mask_input(op, i)                                              ? boolean
               : dtypes[i] != dtype && dtype.is_low_precision_float() && !scalar ? dtype
                                                                                 : cd;
    s.operands.push_back({static_cast<int>(i), ci, c.strides[i], 0});
  }
  s.value = value;
  make_generic(p, op, /*gated=*/false, tag);
  if (uses_lookup_table(op, dtype, cfg)) {
    p.generic.lookup_table = true;
    p.generic.name += "_lut";
    p.class_key += "|lut";
  }
  return p;
}

struct CacheKey {
  std::string text;
  bool operator<(const CacheKey& o) const { return text < o.text; }
};

std::string key_of(const std::string& op, DType dtype,
                   const std::vector<std::vector<std::int64_t>>& shapes,
                   const std::vector<DType>& dtypes, const Params& params, const Config& cfg,
                   Device d, DType out) {
  std::ostringstream k;
  k << op << "|" << dtype.name() << "|" << d.str() << "|" << strategy_name(*cfg.strategy) << "|"
    << cfg.threads << "|" << cfg.num_per_thread << "|" << out.name();
  for (std::size_t i = 0; i < shapes.size(); ++i)
    k << "|" << dtypes[i].name() << shape_str(shapes[i]);
  for (double p : params) k << "|" << std::hexfloat << p;
  return k.str();
}

// p as std::hexfloat prints it (printf's %a), without a stream.
std::string hexfloat_text(double p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", p);
  return buf;
}

// What identifies a shape-generic kernel on any device: what key_of says
// but the shapes (which the class replaces) and the device. Also its key
// among the prebuilt kernels (runtime/prebuilt.hpp).
std::string generic_spec_of(const std::string& op, DType dtype, const std::vector<DType>& dtypes,
                            const Params& params, const Config& cfg, const std::string& class_key) {
  std::string k = op + "|" + dtype.name() + "|" + strategy_name(*cfg.strategy) + "|" +
                  std::to_string(cfg.threads) + "|" + std::to_string(cfg.num_per_thread) +
                  "|generic|" + class_key;
  for (DType t : dtypes) k += "|" + t.name();
  for (double p : params) k += "|" + hexfloat_text(p);
  return k;
}

// The key of a shape-generic kernel in the memory cache.
std::string class_key_of(const std::string& op, DType dtype, const std::vector<DType>& dtypes,
                         const Params& params, const Config& cfg, Device d,
                         const std::string& class_key) {
  return generic_spec_of(op, dtype, dtypes, params, cfg, class_key) + "|" + d.str();
}

// The in-memory kernel cache: least recently used out at the capacity.
struct KernelCache {
  std::mutex mu;
  std::list<std::pair<std::string, Kernel>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::pair<std::string, Kernel>>::iterator> index;
  std::size_t capacity = 4096;
  std::uint64_t hits = 0, compiles = 0, evictions = 0;
  void trim() {
    while (lru.size() > capacity) {
      index.erase(lru.back().first);
      lru.pop_back();
      ++evictions;
    }
  }
};
KernelCache& kernel_cache() {
  static auto* c = new KernelCache();
  return *c;
}

// The kernels declare every tensor flat, (numel,) (nary_kernel.cpp); a
// launch passes the caller's tensor as that view of the same storage
// (launches check shapes exactly).
Tensor as_flat(const Tensor& t) { return t.shape().size() == 1 ? t : t.reshape({t.numel()}); }

// The kernel under `key`, built by `build` (lowering and CUDA generation)
// on a miss. Built outside the lock: two threads missing on one key both
// build, and both get the kernel stored first.
Kernel cached(const std::string& key, const std::function<Kernel()>& build) {
  KernelCache& c = kernel_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.index.find(key);
    if (it != c.index.end()) {
      ++c.hits;
      c.lru.splice(c.lru.begin(), c.lru, it->second);  // now the most recent
      return it->second->second;
    }
  }
  Kernel k = build();
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.compiles;
  auto it = c.index.find(key);
  if (it != c.index.end()) return it->second->second;  // another thread stored it first
  if (c.capacity == 0) return k;
  c.lru.emplace_front(key, k);
  c.index[key] = c.lru.begin();
  c.trim();
  return k;
}

// The dtypes of one call: the result type the op computes in (PyTorch's
// promotion of its data inputs), and each input's own dtype (what its
// kernel loads).
struct CallDtypes {
  DType result;
  std::vector<DType> inputs;
  std::uint32_t scalars = 0;  // bit i: input i is a number (run_operands)
};

// PyTorch's result type of an op's data inputs (tensors, 0-dim tensors and
// scalars ranked as torch.result_type ranks them), checked against the op.
// Masks must be bool. masked_fill keeps x's dtype (its fill value is a
// parameter, converted to x's dtype, as torch.masked_fill does).
DType promoted_dtype(const OpInfo& op, const std::vector<PromotionOperand>& operands) {
  const std::string qn = "tx.ops." + op.name;
  std::vector<PromotionOperand> data;
  std::vector<std::string> names;
  std::size_t primary = operands.size();
  for (std::size_t i = 0; i < operands.size(); ++i) {
    if (is_mask_input(op, i)) {
      if (operands[i].dtype != boolean)
        fail(qn, "input " + std::to_string(i), {},
             "dtype " + operands[i].dtype.name() + " but a mask must be bool");
      continue;
    }
    if (primary == operands.size()) primary = i;
    if (op.name == "masked_fill") continue;
    data.push_back(operands[i]);
    names.push_back("input " + std::to_string(i));
  }
  DType t = op.name == "masked_fill" ? operands[0].dtype : detail::result_type(data, names, qn);
  // True division: integers and bools divide as floats (torch.div with the
  // default rounding_mode), in the default float dtype.
  if (op.name == "div" && (t.is_integer() || t.is_bool())) t = f32;
  if (!optable::accepts(op.dtypes, t)) {
    bool mixed = false;
    for (const PromotionOperand& o : data) mixed = mixed || o.dtype != t;
    fail(qn, "input " + std::to_string(primary), {},
         "dtype " + t.name() + (mixed ? " (the promoted dtype of the inputs)" : "") +
             " is not supported by " + op.name);
  }
  return t;
}

// Checks the inputs against the op (count, defined, one device) and
// promotes their dtypes.
CallDtypes check_inputs(const OpInfo& op, const std::vector<Tensor>& inputs) {
  std::string qn = "tx.ops." + op.name;
  if (static_cast<int>(inputs.size()) != op.inputs)
    fail(qn, "", {},
         "takes " + std::to_string(op.inputs) + " tensors, got " + std::to_string(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) fail(qn, "input " + std::to_string(i), {}, "tensor is undefined");
  for (std::size_t i = 1; i < inputs.size(); ++i)
    if (!(inputs[i].device() == inputs[0].device()))
      fail(qn, "input " + std::to_string(i), {},
           "is on " + inputs[i].device().str() + " but input 0 is on " + inputs[0].device().str());
  CallDtypes r;
  std::vector<PromotionOperand> operands;
  for (const Tensor& t : inputs) {
    operands.push_back(PromotionOperand::of(t));
    r.inputs.push_back(t.dtype());
  }
  r.result = promoted_dtype(op, operands);
  return r;
}

// Results rounded to 16 bits or fewer tolerate the hardware math
// approximations -- except where a quotient is floored: an approximate
// division can cross an integer.
bool approx_math_for(const OpInfo& op, DType dtype, DType out_dtype) {
  return out_dtype.is_low_precision_float() && dtype.is_low_precision_float() &&
         op.name != "floor_divide" && op.name != "remainder";
}

// The input dtypes of an op whose data inputs are all of `dtype`: bool for
// the masks of where and masked_fill.
std::vector<DType> uniform_input_dtypes(const OpInfo& op, DType dtype, std::size_t count) {
  std::vector<DType> dts;
  for (std::size_t i = 0; i < count; ++i) dts.push_back(is_mask_input(op, i) ? boolean : dtype);
  return dts;
}

bool vector_aligned(const Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

// The elements from a view's first to its last (its strides are >= 0):
// the flat buffer a kernel is given for it.
std::int64_t span_of(const Tensor& t) {
  std::int64_t span = 1;
  for (std::size_t d = 0; d < t.shape().size(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  return span;
}
Tensor flat_span(const Tensor& t) { return t.as_strided({span_of(t)}, {1}, t.storage_offset()); }

// An elementwise op over views, TensorIterator's way: the operands' strides
// over the output's dimensions, ordered by the output's memory order and
// coalesced; then each input is read in the output's order (flat), as a
// broadcast row-major operand, or through strides of its own -- with vector
// copies where its rows are unit-stride and aligned. `base` is the op's
// shape-generic spec (value, dtypes, strategy); one kernel per class of
// views, cached under `key` plus the class. The output must be dense (a
// permutation of a row-major block): it is written in its memory order.
void launch_on_views(const detail::GenericSpec& base, const std::string& key, Device device,
                     bool approx, const std::string& op, const std::vector<Tensor>& inputs,
                     Tensor& out) {
  std::vector<std::vector<std::int64_t>> shapes, strides;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    strides.push_back(t.strides());
  }
  if (!is_dense(out.shape(), out.strides()))
    fail("tx.ops." + op, "out", {},
         "is a strided view with gaps or overlaps (shape " + shape_str(out.shape()) + ", strides " +
             shape_str(out.strides()) +
             "); the op writes dense outputs (any dimension order): pass a dense tensor and copy");
  CoalescedViews c = coalesce_views(out.shape(), shapes, strides, out.strides());
  if (c.shape.empty()) {  // one element
    c.shape = {1};
    for (auto& st : c.strides) st = {0};
    c.strides.back() = {1};
  }
  const std::size_t rank = c.shape.size();
  detail::GenericSpec g = base;
  if (g.lookup_table) {  // views compute (their kernels take no table)
    g.lookup_table = false;
    g.name.resize(g.name.size() - 4);  // "_lut"
  }
  g.rank = rank;
  const int v = g.strategy == Strategy::direct ? 1 : g.npt;
  g.inner_multiple_of_v = rank > 1 && c.shape.back() % v == 0;
  std::vector<std::int64_t> scalars(c.shape.begin() + 1, c.shape.end());
  std::vector<std::int64_t> stride_args;
  std::string pattern;
  const std::vector<std::int64_t>& ost = c.strides.back();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<std::int64_t>& st = c.strides[k];
    detail::GenericOperand& o = g.operands[k];
    o.param = static_cast<int>(k);
    o.gated = detail::Gated::none;
    o.present.assign(rank, false);
    for (std::size_t d = 0; d < rank; ++d) o.present[d] = st[d] != 0;
    // Row-major over the dimensions it has (a broadcast operand's layout).
    bool row_major = true;
    std::int64_t inner = 1;
    for (std::size_t d = rank; d-- > 0;) {
      if (st[d] == 0) continue;
      row_major = row_major && st[d] == inner;
      inner *= c.shape[d];
    }
    const bool aligned = vector_aligned(inputs[k]);
    o.flat = st == ost && aligned;
    o.strided = !o.flat && !(row_major && aligned);
    o.unit_inner = o.strided && st.back() == 1;
    o.aligned = o.unit_inner && aligned;
    for (std::size_t d = 0; d + 1 < rank && o.aligned; ++d) o.aligned = st[d] % v == 0;
    if (o.strided) {
      stride_args.insert(stride_args.end(), st.begin(), st.end());
      pattern += std::string("S") + (o.unit_inner ? "u" : "") + (o.aligned ? "a" : "");
    } else {
      pattern += o.flat ? "f" : "";
      for (bool b : o.present) pattern += b ? "1" : "0";
    }
    pattern += "_";
  }
  std::ostringstream name;
  name << base.name << "_views_r" << rank << "_" << pattern << (g.inner_multiple_of_v ? "w" : "p");
  g.name = name.str();
  for (char& ch : g.name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
  Kernel kernel = cached(key + "|views|" + g.name, [&] {
    return compile(detail::build_nary_generic(g), {.device = device, .approx_math = approx});
  });
  std::vector<Kernel::Arg> args;
  std::vector<Tensor> keep;  // the flat views outlive the launch
  keep.reserve(inputs.size() + 1);
  for (const Tensor& t : inputs) keep.push_back(flat_span(t));
  keep.push_back(flat_span(out));
  for (const Tensor& t : keep) args.emplace_back(t);
  for (std::int64_t e : scalars) args.emplace_back(e);
  for (std::int64_t e : stride_args) args.emplace_back(e);
  kernel.launch(args);
}

// dst = src over any views of one shape and dtype (dst dense): a kernel
// that walks both in dst's memory order.
void copy_into(const Tensor& src, Tensor& dst) {
  const DType dt = src.dtype();
  if (span_of(src) >= 2147483647 || span_of(dst) >= 2147483647 ||
      !is_dense(dst.shape(), dst.strides()) || !vector_aligned(dst)) {
    // Past 32-bit extents, or into unaligned memory: through the host.
    if (!dst.is_contiguous())
      fail("tx.ops.copy", "dst", {},
           "a copy past 32-bit extents or into unaligned memory needs a contiguous destination");
    std::vector<std::uint8_t> bytes = src.to_bytes();
    dst.copy_from_bytes(bytes.data(), bytes.size());
    return;
  }
  const Config c = resolve(Config{}, dt);
  detail::GenericSpec g;
  g.out_dtype = dt;
  g.param_dtypes = {dt};
  detail::GenericOperand o;
  o.compute = dt;
  g.operands = {o};
  g.value = [](const std::vector<Expr>& in, const Expr&) { return in[0]; };
  g.strategy = *c.strategy;
  g.threads = c.threads;
  g.npt = c.num_per_thread;
  g.name = "tx_copy_" + dt.short_name() + "_t" + std::to_string(c.threads) + "_v" +
           std::to_string(c.num_per_thread);
  launch_on_views(g, "copy|" + dt.name() + "|" + dst.device().str(), dst.device(), false, "copy",
                  {src}, dst);
}

// A contiguous, vector-aligned copy of a view.
Tensor gather_contiguous(const Tensor& t) {
  Tensor dense = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_into(t, dense);
  return dense;
}

// Tensor::contiguous() on the GPU gathers with that kernel (the runtime
// alone would go through the host).
[[maybe_unused]] const bool kDeviceGather = [] {
  runtime::set_device_gather([](const Tensor& src, Tensor& dst) { copy_into(src, dst); });
  return true;
}();

// The kernel of an op on these shapes. A shape-generic one assumes that
// its output overlaps no input (T::no_alias) unless `in_place`.
Kernel get_kernel(const OpInfo& op, DType dtype,
                  const std::vector<std::vector<std::int64_t>>& shapes,
                  const std::vector<DType>& dtypes, const Params& params, const Config& cfg,
                  Device device, DType out, std::uint32_t scalars, Plan* out_plan,
                  std::string* out_spec, bool in_place = false) {
  Plan p = plan(op, dtype, shapes, dtypes, params, cfg, out, scalars);
  p.generic.no_alias = !in_place;
  if (out_plan) *out_plan = p;
  // The result is rounded to the op's own output dtype (an out= of another
  // dtype receives that rounded value), so its approximations are allowed.
  bool approx = approx_math_for(op, dtype, out_dtype_for(op, dtype));
  if (cfg.exact_shape)
    return cached(key_of(op.name, dtype, shapes, dtypes, params, cfg, device, out), [&] {
      return compile(detail::build_nary(p.spec), {.device = device, .approx_math = approx});
    });
  const std::string spec = generic_spec_of(op.name, dtype, dtypes, params, cfg, p.class_key) +
                           (in_place ? "|in-place" : "");
  if (out_spec) *out_spec = spec;
  return cached(spec + "|" + device.str(), [&] {
    auto build = [g = p.generic, device, approx] {
      return compile(detail::build_nary_generic(g), {.device = device, .approx_math = approx});
    };
    // Compiled when tx was built, with its launch description: no lowering.
    if (std::optional<Kernel> k = runtime::load_prebuilt(spec, device, build)) return *k;
    return build();
  });
}

}  // namespace

namespace detail {
Config resolved(const Config& c, DType t, const OpInfo& op) { return resolve(c, t, &op); }
}  // namespace detail

namespace {
void forget_calls();
std::uint64_t call_hits();
}  // namespace

CacheStats cache_stats() {
  KernelCache& c = kernel_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.hits + call_hits(), c.compiles, c.evictions, c.lru.size(), c.capacity};
}

void set_cache_capacity(std::size_t kernels) {
  forget_calls();
  KernelCache& c = kernel_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.capacity = kernels;
  c.trim();
}

void clear_cache() {
  forget_calls();
  KernelCache& c = kernel_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.lru.clear();
  c.index.clear();
}

// The result shape of an op with a zero-size input: NumPy broadcasting, in
// which an extent 0 meets 0 or 1 (gated ops halve the last dimension).
static std::vector<std::int64_t> empty_result_shape(
    const OpInfo& op, const std::vector<std::vector<std::int64_t>>& shapes) {
  if (op.tmpl == optable::Template::gated) {
    std::vector<std::int64_t> out = shapes.at(0);
    if (out.empty() || out.back() % 2 != 0)
      fail("tx.ops." + op.name, "x", {},
           "input " + shape_str(out) + " needs an even last dimension (gate | value)");
    out.back() /= 2;
    return out;
  }
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<std::int64_t> out(rank, 1);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    for (std::size_t k = 0; k < s.size(); ++k) {
      std::int64_t& o = out[rank - s.size() + k];
      std::int64_t e = s[k];
      if (e == o || e == 1) continue;
      if (o == 1) {
        o = e;
        continue;
      }
      fail("tx.ops." + op.name, "input " + std::to_string(i), {},
           "shapes do not broadcast: dimension " + std::to_string(k) + " has extents " +
               std::to_string(o) + " and " + std::to_string(e));
    }
  }
  return out;
}

static void cast_into(const Tensor& x, Tensor& out, const Config& cfg);
static void alibi_into(std::int64_t heads, std::int64_t seq, Tensor& out, const Config& c);
static void sinusoidal_into(std::int64_t positions, std::int64_t dim, Tensor& out, const Config& c);

namespace {
// The 256 results of a unary op on every bit pattern of an 8-bit dtype,
// computed once per (op, dtype, params, device) by the template's computing
// kernel (explicit_parallel never looks up), so that a lookup returns the
// same bits as the arithmetic would.
Tensor lookup_table_for(const OpInfo& op, DType dtype, const Params& params, Device device) {
  static std::mutex mu;
  static auto* tables = new std::map<std::string, Tensor>();
  std::ostringstream k;
  k << op.name << "|" << dtype.name() << "|" << device.str();
  for (double v : params) k << "|" << std::hexfloat << v;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = tables->find(k.str());
    if (it != tables->end()) return it->second;
  }
  std::vector<std::uint8_t> bits(256);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<std::uint8_t>(i);
  Tensor x = Tensor::from_bytes(bits.data(), bits.size(), {256}, dtype, device);
  Elementwise compute(op.name, {{256}}, dtype, params,
                      Config{.strategy = Strategy::explicit_parallel}, device);
  // Through the host once (256 entries): the table is complete before any
  // stream reads it.
  std::vector<std::uint8_t> host = compute({x}).to_bytes();
  Tensor table = Tensor::from_bytes(host.data(), host.size(), {256}, compute.out_dtype(), device);
  std::lock_guard<std::mutex> lock(mu);
  return tables->emplace(k.str(), table).first->second;
}
}  // namespace

// ------------------------------------------------------------ Elementwise

Elementwise::Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes,
                         DType dtype, Params params, Config cfg, std::optional<Device> device,
                         Loc loc)
    : op_(std::move(op)),
      in_shapes_(std::move(input_shapes)),
      dtype_(dtype),
      params_(std::move(params)) {
  at_call(op_, loc, [&] {
    if (const OpInfo* info = find_op(op_))
      in_dtypes_ = uniform_input_dtypes(*info, dtype, in_shapes_.size());
    build(cfg, device, std::nullopt);
  });
}

Elementwise::Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes,
                         std::vector<DType> input_dtypes, Params params, Config cfg,
                         std::optional<Device> device, std::optional<DType> out_dtype, Loc loc)
    : op_(std::move(op)),
      in_shapes_(std::move(input_shapes)),
      in_dtypes_(std::move(input_dtypes)),
      params_(std::move(params)) {
  at_call(op_, loc, [&] {
    const OpInfo& info = lookup(op_);
    if (in_dtypes_.size() != in_shapes_.size())
      fail("tx.ops." + op_, "", {},
           std::to_string(in_shapes_.size()) + " input shapes but " +
               std::to_string(in_dtypes_.size()) + " input dtypes");
    std::vector<PromotionOperand> operands;
    for (std::size_t i = 0; i < in_dtypes_.size(); ++i)
      operands.push_back({in_dtypes_[i], in_shapes_[i].empty() ? PromotionOperand::Kind::zero_dim
                                                               : PromotionOperand::Kind::tensor});
    dtype_ = promoted_dtype(info, operands);
    build(cfg, device, out_dtype);
  });
}

Elementwise::Elementwise(std::string op, std::vector<std::vector<std::int64_t>> input_shapes,
                         std::vector<DType> input_dtypes, Resolved r, Params params, Config cfg,
                         std::optional<Device> device, Loc loc)
    : op_(std::move(op)),
      in_shapes_(std::move(input_shapes)),
      in_dtypes_(std::move(input_dtypes)),
      dtype_(r.result),
      params_(std::move(params)),
      scalars_in_(r.scalars) {
  at_call(op_, loc, [&] { build(cfg, device, r.out); });
}

void Elementwise::build(const Config& cfg, std::optional<Device> device, std::optional<DType> out) {
  const OpInfo& info = lookup(op_);
  std::string qn = "tx.ops." + op_;
  if (static_cast<int>(in_shapes_.size()) != info.inputs)
    fail(qn, "", {},
         "takes " + std::to_string(info.inputs) + " input shapes, got " +
             std::to_string(in_shapes_.size()));
  if (static_cast<int>(params_.size()) != info.params)
    fail(qn, "", {},
         "takes " + std::to_string(info.params) + " parameters, got " +
             std::to_string(params_.size()));
  if (!optable::accepts(info.dtypes, dtype_))
    fail(qn, "", {}, "dtype " + dtype_.name() + " is not supported");
  // The kernels index with 32-bit offsets: a tensor of 2^31 elements or
  // more is refused here, naming the caller's operand (the kernels' own
  // bind check would name their internals: a T::dim `n`, a buffer `x0`).
  auto count = [](const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t e : shape)
      n = e > 0 && n > std::numeric_limits<std::int64_t>::max() / e
              ? std::numeric_limits<std::int64_t>::max()
              : n * e;
    return n;
  };
  auto too_large = [&](const std::string& operand, const std::vector<std::int64_t>& shape) {
    if (count(shape) > 2147483647)
      fail(qn, operand, {},
           std::to_string(count(shape)) + " elements (shape " + shape_str(shape) +
               "): the op library's elementwise kernels take tensors of up to 2^31 - 1 "
               "elements; call the op on slices of it (views: no copy)");
  };
  std::vector<std::int64_t> broadcast;  // the inputs broadcast together (NumPy's rule)
  for (std::size_t i = 0; i < in_shapes_.size(); ++i) {
    too_large(in_shapes_.size() == 1 ? "x" : "input " + std::to_string(i), in_shapes_[i]);
    const auto& sh = in_shapes_[i];
    if (sh.size() > broadcast.size())
      broadcast.insert(broadcast.begin(), sh.size() - broadcast.size(), 1);
    for (std::size_t k = 0; k < sh.size(); ++k) {
      std::int64_t& b = broadcast[broadcast.size() - sh.size() + k];
      b = std::max(b, sh[k]);
    }
  }
  too_large("out", broadcast);
  device_ = device ? *device : default_device();
  const DType dtype = dtype_;
  const std::vector<DType>& dts = in_dtypes_;
  // An out= of another dtype: PyTorch's rule, the result must cast to it
  // within its category (not floating into integers or bool, nothing but
  // bool into bool).
  const DType natural = out_dtype_for(info, dtype);
  if (out && *out != natural && !can_cast(natural, *out))
    fail(qn, "out", {},
         "result type " + natural.name() + " can't be cast to the desired output type " +
             out->name() +
             " (PyTorch's rule: no floating result into an integer or bool out=, "
             "no non-bool result into a bool one)");
  const DType out_dtype = out ? *out : natural;
  for (const auto& sh : in_shapes_)
    for (auto e : sh)
      if (e < 0) fail("tx.ops." + op_, "", {}, "negative extent in shape " + shape_str(sh));
  // Zero-size: the result's shape and dtype, and no kernel (nothing to launch).
  bool empty = false;
  for (const auto& sh : in_shapes_) empty = empty || has_zero_extent(sh);
  if (empty) {
    cfg_ = resolve(cfg, dtype, &info);
    out_dtype_ = out_dtype;
    out_shape_ = empty_result_shape(info, in_shapes_);
    return;
  }
  cfg_ = cfg.tune ? detail::tuned_config(info, dtype, in_shapes_, params_, device_, cfg)
                  : resolve(cfg, dtype, &info);
  cfg_ = resolve(cfg_, dtype, &info);
  Plan p;
  kernel_ = get_kernel(info, dtype, in_shapes_, dts, params_, cfg_, device_, out_dtype, scalars_in_,
                       &p, &prebuilt_spec_);
  out_shape_ = p.out_shape;
  out_dtype_ = p.out_dtype;
  if (!cfg_.exact_shape) scalars_ = p.scalars;
  lookup_ = !cfg_.exact_shape && p.generic.lookup_table;
  if (lookup_) table_once_ = std::make_shared<std::once_flag>();
  in_place_ = std::make_shared<InPlace>();
}

Tensor Elementwise::operator()(const std::vector<Tensor>& inputs, Loc loc) const {
  // The result takes the memory order of a full-size input that is a
  // permuted dense block (a transposed tensor), as PyTorch's does: then
  // every operand is walked in its own memory order, at the copy limit.
  for (const Tensor& t : inputs) {
    std::vector<int> order;
    if (t.defined() && !t.is_contiguous() && t.shape() == out_shape_ &&
        is_dense(t.shape(), t.strides(), &order)) {
      std::vector<std::int64_t> shape;
      for (int d : order) shape.push_back(out_shape_[static_cast<std::size_t>(d)]);
      std::vector<int> inverse(order.size());
      for (std::size_t k = 0; k < order.size(); ++k)
        inverse[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
      Tensor out = Tensor::empty(shape, out_dtype_, device_).permute(inverse);
      (*this)(inputs, out, loc);
      return out;
    }
    if (t.defined() && !t.is_contiguous()) break;
  }
  Tensor out = Tensor::empty(out_shape_, out_dtype_, device_);
  (*this)(inputs, out, loc);
  return out;
}

void Elementwise::operator()(const std::vector<Tensor>& inputs, Tensor& out, Loc loc) const {
  at_call(op_, loc, [&] { launch(inputs, out); });
}

void Elementwise::launch(const std::vector<Tensor>& inputs, Tensor& out) const {
  // Messages are built only on failure: this is the hot path of a launch.
  if (inputs.size() != in_shapes_.size())
    fail("tx.ops." + op_, "", {},
         "takes " + std::to_string(in_shapes_.size()) + " tensors, got " +
             std::to_string(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].shape() != in_shapes_[i])
      fail("tx.ops." + op_, "input " + std::to_string(i), {},
           "shape " + shape_str(inputs[i].shape()) + " but the op was built for " +
               shape_str(in_shapes_[i]));
  if (!out.defined() || out.shape() != out_shape_ || out.dtype() != out_dtype_)
    fail("tx.ops." + op_, "out", {},
         "needs a " + out_dtype_.name() + " tensor of shape " + shape_str(out_shape_) +
             (out.defined() ? ", got " + out.dtype().name() + " " + shape_str(out.shape()) : ""));
  if (out.numel() == 0) return;  // a zero-size op: nothing to compute
  // Contiguous, vector-aligned tensors: the kernel built for these shapes.
  // Anything else (views, unaligned borrowed memory) goes through strides.
  bool plain = out.is_contiguous() && vector_aligned(out);
  for (const Tensor& t : inputs) plain = plain && t.is_contiguous() && vector_aligned(t);
  if (!plain) return launch_views(inputs, out);
  // The kernels declare every tensor flat; a shape-generic one also takes
  // the coalesced extents.
  std::array<Tensor, 8> flat;
  std::array<Kernel::Arg, 16> args{};
  std::size_t n = 0;
  for (const Tensor& t : inputs) {
    flat[n] = as_flat(t);
    args[n] = flat[n];
    ++n;
  }
  flat[n] = as_flat(out);
  args[n] = flat[n];
  ++n;
  for (std::int64_t e : scalars_) args[n++] = Kernel::Arg(e);
  if (lookup_) {
    std::call_once(*table_once_,
                   [&] { table_ = lookup_table_for(lookup(op_), dtype_, params_, device_); });
    args[n++] = table_;
  }
  // In place (the output shares bytes with an input): the kernel built
  // without T::no_alias.
  bool overlap = false;
  auto lo = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()); };
  auto hi = [&](const Tensor& t) {
    return lo(t) + static_cast<std::uintptr_t>(t.numel() * t.dtype().bytes());
  };
  for (const Tensor& t : inputs) overlap = overlap || (lo(t) < hi(out) && lo(out) < hi(t));
  if (overlap && !cfg_.exact_shape) return in_place_kernel().launch(args.data(), n);
  kernel_.launch(args.data(), n);
}

const Kernel& Elementwise::in_place_kernel() const {
  std::lock_guard<std::mutex> lock(in_place_->mu);
  if (!in_place_->kernel) {
    const OpInfo& info = lookup(op_);
    in_place_->kernel = get_kernel(info, dtype_, in_shapes_, in_dtypes_, params_, cfg_, device_,
                                   out_dtype_, scalars_in_, nullptr, nullptr, /*in_place=*/true);
  }
  return *in_place_->kernel;
}

void Elementwise::launch_views(const std::vector<Tensor>& inputs, Tensor& out) const {
  const OpInfo& info = lookup(op_);
  // Kernels whose operands are not plain broadcasts (the gate | value halves,
  // prelu's channel weight), exact-shape kernels and views past 32-bit
  // extents: the views are gathered into contiguous tensors first.
  bool gather = info.tmpl == optable::Template::gated || op_ == "prelu" || cfg_.exact_shape ||
                span_of(out) >= 2147483647;
  for (const Tensor& t : inputs) gather = gather || span_of(t) >= 2147483647;
  if (gather) {
    std::vector<Tensor> dense;
    for (const Tensor& t : inputs)
      dense.push_back(t.is_contiguous() && vector_aligned(t) ? t : gather_contiguous(t));
    if (out.is_contiguous() && vector_aligned(out)) return launch(dense, out);
    Tensor tmp = Tensor::empty(out_shape_, out_dtype_, device_);
    launch(dense, tmp);
    copy_into(tmp, out);
    return;
  }
  if (!vector_aligned(out))
    fail("tx.ops." + op_, "out", {},
         "data is not 16-byte aligned; the op stores 16-byte vectors: pass an aligned tensor "
         "(inputs may be unaligned)");
  Plan p = plan(info, dtype_, in_shapes_, in_dtypes_, params_, cfg_, out_dtype_, scalars_in_);
  launch_on_views(
      p.generic, class_key_of(op_, dtype_, p.spec.param_dtypes, params_, cfg_, device_, ""),
      device_, approx_math_for(info, dtype_, out_dtype_for(info, dtype_)), op_, inputs, out);
}

// ------------------------------------------------------------------- run

namespace {
// What a call of run() resolves to, remembered per call signature: op,
// dtype, device, input shapes, parameters and config. A repeated call (a
// serving loop, a training step) then skips validation of the op table,
// planning, coalescing and the kernel cache's string keys: a hash of a few
// integers and one shared Elementwise -- the host cost of an op call is
// then the launch and the allocation, as measured in bench/interop.
struct CallKey {
  const OpInfo* op = nullptr;
  // The promoted dtype and the output's (16 bits each), and each input's
  // dtype (16 bits each: ops take at most three inputs).
  std::uint64_t dtype_bits = 0;
  std::uint64_t input_dtype_bits = 0;
  Device device;
  std::vector<std::int64_t> shapes;  // each input's rank, then its extents
  Params params;
  Config cfg;
  bool operator==(const CallKey& o) const {
    return op == o.op && dtype_bits == o.dtype_bits && input_dtype_bits == o.input_dtype_bits &&
           device == o.device && shapes == o.shapes && params == o.params &&
           cfg.strategy == o.cfg.strategy && cfg.threads == o.cfg.threads &&
           cfg.num_per_thread == o.cfg.num_per_thread && cfg.tune == o.cfg.tune &&
           cfg.exact_shape == o.cfg.exact_shape;
  }
};
struct CallKeyHash {
  std::size_t operator()(const CallKey& k) const noexcept {
    std::uint64_t h = std::hash<const void*>()(k.op) ^ k.dtype_bits;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(k.input_dtype_bits);
    mix(static_cast<std::uint64_t>(k.device.index) * 2 + (k.device.is_cuda() ? 1 : 0));
    for (std::int64_t e : k.shapes) mix(static_cast<std::uint64_t>(e));
    for (double p : k.params) mix(std::bit_cast<std::uint64_t>(p));
    mix(static_cast<std::uint64_t>(k.cfg.threads) << 8 ^
        static_cast<std::uint64_t>(k.cfg.num_per_thread));
    return static_cast<std::size_t>(h);
  }
};
struct CallCache {
  std::mutex mu;
  std::unordered_map<CallKey, std::shared_ptr<const Elementwise>, CallKeyHash> map;
  // Per class of shape-generic calls (the leading extent as -1, see
  // wildcard_leading): the Elementwise new shapes of the class copy.
  std::unordered_map<CallKey, std::shared_ptr<const Elementwise>, CallKeyHash> classes;
  static constexpr std::size_t kCapacity = 4096;  // then forgotten at once, rebuilt on use
  std::atomic<std::uint64_t> hits{0};             // counted as kernel cache hits
};
CallCache& call_cache() {
  static auto* c = new CallCache();
  return *c;
}
std::uint64_t call_hits() { return call_cache().hits.load(std::memory_order_relaxed); }
void forget_calls() {
  CallCache& c = call_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.clear();
  c.classes.clear();
}

// Calls that differ only in the leading extent share a class. The leading
// extent L of the full-rank inputs (when > 1, and the same in each of them)
// takes no part in coalescing: a dimension's stride is the product of the
// extents inside it, so L sets neither which dimensions merge, nor which
// operands broadcast or read flat, nor the innermost extent of a coalesced
// rank above 1, nor the scalar arguments (the extents after the first);
// gated ops' rows and prelu's channel dimension lie inside it too. A
// shape-generic Elementwise built for one L therefore serves every other:
// only its shapes change. The key is the call's with L written as -1; a
// single-token call (L = 1, which coalescing drops) keeps its own.
// Returns L, or 0 when the call has no such extent.
std::int64_t wildcard_leading(CallKey& key, const std::vector<Tensor>& inputs) {
  std::size_t rank = 0;
  for (const Tensor& x : inputs) rank = std::max(rank, x.shape().size());
  if (rank < 2) return 0;  // a flat 1-D shape is one class for every extent already
  std::int64_t lead = 0;
  for (const Tensor& x : inputs)
    if (x.shape().size() == rank && x.shape()[0] > 1) {
      if (lead != 0 && x.shape()[0] != lead) return 0;  // not a broadcast: an error path
      lead = x.shape()[0];
    }
  if (lead == 0) return 0;
  // key.shapes: each input's rank, then its extents.
  std::size_t at = 0;
  for (const Tensor& x : inputs) {
    if (x.shape().size() == rank && x.shape()[0] == lead) key.shapes[at + 1] = -1;
    at += 1 + x.shape().size();
  }
  return lead;
}

}  // namespace

namespace detail {
struct ElementwiseSibling {
  // An Elementwise whose dtypes run() has promoted.
  static std::shared_ptr<const Elementwise> resolved(const std::string& op,
                                                     std::vector<std::vector<std::int64_t>> shapes,
                                                     std::vector<DType> dtypes, DType result,
                                                     std::optional<DType> out,
                                                     std::uint32_t scalars, const Params& params,
                                                     const Config& cfg, Device device, Loc loc) {
    return std::shared_ptr<const Elementwise>(
        new Elementwise(op, std::move(shapes), std::move(dtypes),
                        Elementwise::Resolved{result, out, scalars}, params, cfg, device, loc));
  }
  // proto's class, on these inputs' shapes (leading extent `lead`).
  static std::shared_ptr<const Elementwise> make(const Elementwise& proto,
                                                 const std::vector<Tensor>& inputs,
                                                 std::int64_t lead) {
    auto e = std::make_shared<Elementwise>(proto);
    for (std::size_t i = 0; i < inputs.size(); ++i) e->in_shapes_[i] = inputs[i].shape();
    e->out_shape_[0] = lead;
    // Per-object state of the first launch: its own, not the prototype's.
    e->in_place_ = std::make_shared<Elementwise::InPlace>();
    if (e->lookup_) {
      e->table_once_ = std::make_shared<std::once_flag>();
      e->table_ = Tensor();
    }
    return e;
  }
};
}  // namespace detail

namespace {

std::uint64_t dtype_code(DType t) { return static_cast<std::uint64_t>(t.code) << 8 | t.bits; }

// The Elementwise of a call whose inputs' dtypes have been promoted to
// `dtypes.result`; its output of `out` when given (an out= of another dtype
// than the op's output).
std::shared_ptr<const Elementwise> elementwise_for(const OpInfo& info,
                                                   const std::vector<Tensor>& inputs,
                                                   const CallDtypes& dtypes,
                                                   std::optional<DType> out, const Params& params,
                                                   const Config& cfg, Loc loc) {
  const DType t = dtypes.result;
  CallKey key;
  key.op = &info;
  key.dtype_bits = dtype_code(t) | (out ? dtype_code(*out) << 16 : 0) |
                   static_cast<std::uint64_t>(dtypes.scalars) << 32;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    key.input_dtype_bits |= dtype_code(inputs[i].dtype()) << (16 * i);
  key.device = inputs.empty() ? default_device() : inputs[0].device();
  for (const Tensor& x : inputs) {
    key.shapes.push_back(static_cast<std::int64_t>(x.shape().size()));
    key.shapes.insert(key.shapes.end(), x.shape().begin(), x.shape().end());
  }
  key.params = params;
  key.cfg = cfg;
  CallCache& c = call_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      c.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  // A new shape of a shape-generic class seen before: its Elementwise with
  // these shapes, without planning again (a serving loop's new token count).
  CallKey class_key = key;
  const std::int64_t lead = cfg.exact_shape || cfg.tune ? 0 : wildcard_leading(class_key, inputs);
  std::shared_ptr<const Elementwise> e;
  if (lead > 0) {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.classes.find(class_key); it != c.classes.end()) {
      e = detail::ElementwiseSibling::make(*it->second, inputs, lead);
      c.hits.fetch_add(1, std::memory_order_relaxed);  // the class's kernel, from the cache
    }
  }
  const bool planned = !e;
  if (planned) {
    std::vector<std::vector<std::int64_t>> shapes;
    for (const Tensor& x : inputs) shapes.push_back(x.shape());
    e = detail::ElementwiseSibling::resolved(info.name, shapes, dtypes.inputs, t, out,
                                             dtypes.scalars, params, cfg, key.device, loc);
  }
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.map.size() >= CallCache::kCapacity) c.map.clear();
  if (c.classes.size() >= CallCache::kCapacity) c.classes.clear();
  if (lead > 0 && planned) c.classes.emplace(std::move(class_key), e);
  c.map.emplace(std::move(key), e);
  return e;
}

// The output dtype of a call into `out`: nullopt when it is the op's own
// (the common case, one kernel for it and for calls without out=).
std::optional<DType> out_dtype_of_call(const OpInfo& info, DType result, const Tensor& out) {
  if (!out.defined() || out.dtype() == out_dtype_for(info, result)) return std::nullopt;
  return out.dtype();
}

void check_out_device(const std::string& op, const Tensor& out, const Device& inputs) {
  if (out.defined() && !(out.device() == inputs))
    fail("tx.ops." + op, "out", {},
         "is on " + out.device().str() + " but the inputs are on " + inputs.str());
}

// A scalar operand as the tensor the kernel reads: one element of shape ()
// on the inputs' device, in the compute dtype of the promoted dtype `t` --
// PyTorch reads a CPU scalar in the op's math type too (a bf16 op's 0.1 is
// the f32 0.1, not bf16's). Values that dtype cannot hold are refused, as
// PyTorch refuses them (int8 + 300, float32 + 1e300).
Tensor scalar_tensor(const std::string& op, const std::string& operand, const Scalar& s, DType t,
                     Device device) {
  const DType cd = compute_dtype_for(t);
  auto overflow = [&] {
    fail("tx.ops." + op, operand, {},
         "value " + s.str() + " cannot be converted to type " + cd.name() + " without overflow");
  };
  std::uint64_t bits = 0;
  if (cd.is_float()) {
    const double v = s.as_double();
    if (std::isfinite(v) && std::fabs(v) > dtype_max_finite(cd)) overflow();
    if (cd == f64) {
      bits = std::bit_cast<std::uint64_t>(v);
    } else {
      bits = std::bit_cast<std::uint32_t>(static_cast<float>(v));
    }
  } else if (cd.is_bool()) {
    bits = s.i != 0 ? 1 : 0;
  } else {
    const std::int64_t v = s.i;  // an integer or bool scalar (a float one makes t floating)
    if (cd.is_uint()) {
      if (v < 0 || (cd.bits < 64 && static_cast<std::uint64_t>(v) >> cd.bits != 0)) overflow();
    } else if (cd.bits < 64) {
      const std::int64_t lim = std::int64_t{1} << (cd.bits - 1);
      if (v < -lim || v >= lim) overflow();
    }
    bits = static_cast<std::uint64_t>(v);
  }
  // Little-endian: the value's low bytes.
  return Tensor::from_bytes(&bits, static_cast<std::size_t>(cd.bytes()), {}, cd, device);
}

}  // namespace

Tensor run(const std::string& op, const std::vector<Tensor>& inputs, const Params& params,
           const Config& cfg, Loc loc) {
  return at_call(op, loc, [&] {
    const OpInfo& info = lookup(op);
    const CallDtypes dt = check_inputs(info, inputs);
    return (*elementwise_for(info, inputs, dt, std::nullopt, params, cfg, loc))(inputs, loc);
  });
}

void run(const std::string& op, const std::vector<Tensor>& inputs, Tensor& out,
         const Params& params, const Config& cfg, Loc loc) {
  at_call(op, loc, [&] {
    if (!inputs.empty() && inputs[0].defined()) check_out_device(op, out, inputs[0].device());
    const OpInfo& info = lookup(op);
    const CallDtypes dt = check_inputs(info, inputs);
    const std::optional<DType> od = out_dtype_of_call(info, dt.result, out);
    (*elementwise_for(info, inputs, dt, od, params, cfg, loc))(inputs, out, loc);
  });
}

namespace detail {

Tensor run_operands(const std::string& op, const std::vector<OpArg>& operands, Tensor* out,
                    const Params& params, const Config& cfg, Loc loc) {
  return at_call(op, loc, [&]() -> Tensor {
    const OpInfo& info = lookup(op);
    const std::string qn = "tx.ops." + op;
    if (static_cast<int>(operands.size()) != info.inputs)
      fail(qn, "", {},
           "takes " + std::to_string(info.inputs) + " operands, got " +
               std::to_string(operands.size()));
    // The device: the tensors' (an op needs one tensor at least).
    const Tensor* first = nullptr;
    std::vector<PromotionOperand> kinds;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      const OpArg& o = operands[i];
      if (o.tensor) {
        if (!o.tensor->defined()) fail(qn, "input " + std::to_string(i), {}, "tensor is undefined");
        if (!first) first = o.tensor;
        kinds.push_back(PromotionOperand::of(*o.tensor));
      } else {
        if (is_mask_input(info, i))
          fail(qn, "input " + std::to_string(i), {}, "a mask must be a bool tensor, not a number");
        kinds.push_back(PromotionOperand::of(*o.scalar));
      }
    }
    if (!first) fail(qn, "", {}, "needs a tensor operand (all operands are numbers)");
    const Device device = first->device();
    CallDtypes dt;
    dt.result = promoted_dtype(info, kinds);
    std::vector<Tensor> inputs;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      const OpArg& o = operands[i];
      inputs.push_back(
          o.tensor ? *o.tensor
                   : scalar_tensor(op, "input " + std::to_string(i), *o.scalar, dt.result, device));
      if (!o.tensor) dt.scalars |= 1u << i;
    }
    for (std::size_t i = 1; i < inputs.size(); ++i)
      if (!(inputs[i].device() == device))
        fail(qn, "input " + std::to_string(i), {},
             "is on " + inputs[i].device().str() + " but the other inputs are on " + device.str());
    for (const Tensor& t : inputs) dt.inputs.push_back(t.dtype());
    if (!out)
      return (*elementwise_for(info, inputs, dt, std::nullopt, params, cfg, loc))(inputs, loc);
    check_out_device(op, *out, device);
    const std::optional<DType> od = out_dtype_of_call(info, dt.result, *out);
    (*elementwise_for(info, inputs, dt, od, params, cfg, loc))(inputs, *out, loc);
    return *out;
  });
}

}  // namespace detail

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf,
                  std::optional<double> neginf, const Config& c, Loc loc) {
  double big = x.defined() && x.dtype().is_float() ? dtype_max_finite(x.dtype()) : 0.0;
  return run("nan_to_num", {x}, {nan, posinf.value_or(big), neginf.value_or(-big)}, c, loc);
}

// ------------------------------------------------------ generative ops

std::vector<double> alibi_slopes(std::int64_t heads) {
  if (heads <= 0) fail("tx.ops.alibi", "num_heads", {}, "must be positive");
  std::int64_t n = 1;
  while (n * 2 <= heads) n *= 2;  // closest power of two <= heads
  std::vector<double> s;
  double base = std::exp2(-8.0 / static_cast<double>(n));
  for (std::int64_t h = 0; h < n; ++h) s.push_back(std::pow(base, static_cast<double>(h + 1)));
  double extra = std::exp2(-4.0 / static_cast<double>(n));
  for (std::int64_t k = 0; k < heads - n; ++k)
    s.push_back(std::pow(extra, static_cast<double>(2 * k + 1)));
  return s;
}

namespace {
// Fills `out` (of `shape`) with value(flat index): alibi and sinusoidal.
void generate(const std::string& op, const std::vector<std::int64_t>& shape, Tensor& out,
              const Config& cfg, std::function<Expr(const Expr&)> value) {
  const OpInfo& info = lookup(op);
  if (!out.defined()) fail("tx.ops." + op, "out", {}, "tensor is undefined");
  if (out.shape() != shape)
    fail("tx.ops." + op, "out", {},
         "shape " + shape_str(out.shape()) + " but the op makes " + shape_str(shape));
  DType dtype = out.dtype();
  if (!optable::accepts(info.dtypes, dtype))
    fail("tx.ops." + op, "", {}, "dtype " + dtype.name() + " is not supported");
  Device d = out.device();
  Config c = resolve(cfg, dtype);
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  detail::NarySpec s;
  std::ostringstream name;
  name << "tx_" << op << "_" << dtype.short_name();
  for (auto e : shape) name << "_" << e;
  s.name = name.str();
  s.shape = {n};
  s.out_dtype = dtype;
  s.strategy = *c.strategy;
  s.threads = c.threads;
  s.npt = c.num_per_thread;
  s.value = [value](const std::vector<Expr>&, const Expr& idx) { return value(idx); };
  std::string key = op + "|" + dtype.name() + "|" + d.str() + "|" + shape_str(shape) + "|" +
                    s.name + strategy_name(s.strategy) + std::to_string(s.threads) + "|" +
                    std::to_string(s.npt);
  Kernel k = cached(key, [&] { return compile(detail::build_nary(s), {.device = d}); });
  k(as_flat(out));
}
}  // namespace

void cast(const Tensor& x, Tensor& out, const Config& cfg, Loc loc) {
  at_call("cast", loc, [&] { cast_into(x, out, cfg); });
}

void cast_into(const Tensor& x, Tensor& out, const Config& cfg) {
  if (!x.defined() || !out.defined()) fail("tx.ops.cast", "", {}, "tensor is undefined");
  if (x.shape() != out.shape())
    fail("tx.ops.cast", "out", {},
         "shape " + shape_str(out.shape()) + " differs from the input's " + shape_str(x.shape()));
  if (!(x.device() == out.device()))
    fail("tx.ops.cast", "out", {}, "is on another device than the input");
  DType from = x.dtype(), to = out.dtype();
  // 16 bytes of the wider type per thread, twice that when narrowing, so that
  // the narrow side's stores stay wide (f32 -> f16 / e4m3 / e5m2: +2-5%;
  // widening is fastest at 16 bytes of the wide side; measured on the H200).
  Config want = cfg;
  DType wide = from.bytes() > to.bytes() ? from : to;
  if (want.num_per_thread == 0 && want.strategy != Strategy::direct)
    want.num_per_thread = std::max(1, 16 / wide.bytes()) * (to.bytes() < from.bytes() ? 2 : 1);
  Config c = resolve(want, wide);
  std::int64_t n = x.numel();
  if (n == 0) return;  // zero-size: nothing to convert
  detail::NarySpec s;
  s.name = std::string("tx_cast_") + from.short_name() + "_to_" + to.short_name() + "_" +
           strategy_name(*c.strategy) + "_t" + std::to_string(c.threads) + "_v" +
           std::to_string(c.num_per_thread);
  s.shape = {n};
  s.out_dtype = to;
  s.param_dtypes = {from};
  s.param_numel = {n};
  bool ints = (from.is_integer() || from.is_bool()) && (to.is_integer() || to.is_bool());
  DType compute = ints ? from : (from == f64 || to == f64) ? f64 : f32;
  s.operands = {{0, compute, {1}, 0}};
  s.strategy = *c.strategy;
  s.threads = c.threads;
  s.npt = c.num_per_thread;
  s.value = [](const std::vector<Expr>& in, const Expr&) { return in[0]; };
  if (cfg.exact_shape) {
    std::string key = "cast|" + s.name + "|" + std::to_string(n) + "|" + x.device().str();
    Kernel k = cached(key, [&] { return compile(detail::build_nary(s), {.device = x.device()}); });
    k(as_flat(x), as_flat(out));
    return;
  }
  // Every size through one shape-generic kernel per (from, to, config).
  detail::GenericSpec g;
  g.name = s.name;
  g.rank = 1;
  g.out_dtype = to;
  g.param_dtypes = {from};
  g.operands = {{0, compute, /*flat=*/true, {true}, detail::Gated::none}};
  g.value = s.value;
  g.strategy = s.strategy;
  g.threads = s.threads;
  g.npt = s.npt;
  std::string key = "cast|" + s.name + "|generic|" + x.device().str();
  Kernel k =
      cached(key, [&] { return compile(detail::build_nary_generic(g), {.device = x.device()}); });
  k(as_flat(x), as_flat(out));
}

Tensor cast(const Tensor& x, DType to, const Config& cfg, Loc loc) {
  return at_call("cast", loc, [&] {
    if (!x.defined()) fail("tx.ops.cast", "", {}, "tensor is undefined");
    Tensor out = Tensor::empty(x.shape(), to, x.device());
    cast_into(x, out, cfg);
    return out;
  });
}

void alibi(std::int64_t heads, std::int64_t seq, Tensor& out, const Config& c, Loc loc) {
  at_call("alibi", loc, [&] { alibi_into(heads, seq, out, c); });
}

void alibi_into(std::int64_t heads, std::int64_t seq, Tensor& out, const Config& c) {
  if (heads <= 0 || seq <= 0)
    fail("tx.ops.alibi", "", {}, "num_heads and seq_len must be positive");
  const double h_count = static_cast<double>(heads);
  generate("alibi", {heads, seq, seq}, out, c, [=](const Expr& idx) {
    Expr h = idx / (seq * seq), i = idx / seq % seq, j = idx % seq;
    return to_expr(optable::math::alibi_bias(h, i, j, h_count));
  });
}

Tensor alibi(std::int64_t heads, std::int64_t seq, DType dtype, std::optional<Device> device,
             const Config& c, Loc loc) {
  return at_call("alibi", loc, [&] {
    if (heads <= 0 || seq <= 0)
      fail("tx.ops.alibi", "", {}, "num_heads and seq_len must be positive");
    Tensor out = Tensor::empty({heads, seq, seq}, dtype, device ? *device : default_device());
    alibi_into(heads, seq, out, c);
    return out;
  });
}

void sinusoidal(std::int64_t positions, std::int64_t dim, Tensor& out, const Config& c, Loc loc) {
  at_call("sinusoidal", loc, [&] { sinusoidal_into(positions, dim, out, c); });
}

void sinusoidal_into(std::int64_t positions, std::int64_t dim, Tensor& out, const Config& c) {
  if (positions <= 0 || dim <= 0 || dim % 2 != 0)
    fail("tx.ops.sinusoidal", "dim", {},
         "num_positions must be positive and dim positive and even");
  const double d_count = static_cast<double>(dim);
  generate("sinusoidal", {positions, dim}, out, c, [=](const Expr& idx) {
    Expr p = idx / dim, d = idx % dim;
    return to_expr(optable::math::sinusoidal_pe(p, d, d_count));
  });
}

Tensor sinusoidal(std::int64_t positions, std::int64_t dim, DType dtype,
                  std::optional<Device> device, const Config& c, Loc loc) {
  return at_call("sinusoidal", loc, [&] {
    if (positions <= 0 || dim <= 0 || dim % 2 != 0)
      fail("tx.ops.sinusoidal", "dim", {},
           "num_positions must be positive and dim positive and even");
    Tensor out = Tensor::empty({positions, dim}, dtype, device ? *device : default_device());
    sinusoidal_into(positions, dim, out, c);
    return out;
  });
}

}  // namespace tx::ops
