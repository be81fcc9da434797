// The bind step of a launch (bind.hpp): every check a launch makes before
// anything runs, and the kernel arguments it lays out. Messages are built
// only on failure: launches are hot.
#include "bind.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "tx/printer.hpp"

namespace tx::runtime {

namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// A parameter's extents as declared: (n, 4096).
std::string dims_str(const lowering::KernelParamInfo& p) {
  if (!p.symbolic) return shape_str(p.shape);
  std::string r = "(";
  for (std::size_t i = 0; i < p.dims.size(); ++i) r += (i ? ", " : "") + to_string(p.dims[i]);
  return r + (p.dims.size() == 1 ? ",)" : ")");
}

template <class T>
void put(ScalarSlot& slot, T v) {
  static_assert(sizeof(T) <= sizeof(slot.bytes));
  std::memcpy(slot.bytes, &v, sizeof(T));
}

// An integer scalar in the C type of its dtype's width.
void put_int(ScalarSlot& slot, int bits, std::int64_t v) {
  switch (bits) {
    case 8:
      put(slot, static_cast<std::int8_t>(v));
      break;
    case 16:
      put(slot, static_cast<std::int16_t>(v));
      break;
    case 32:
      put(slot, static_cast<std::int32_t>(v));
      break;
    default:
      put(slot, v);
      break;
  }
}

}  // namespace

void BoundLaunch::reserve(std::size_t slot_count, std::size_t dim_count) {
  slots = slot_count;
  ptrs = ptr_store_.data();
  values = value_store_.data();
  elems = elem_store_.data();
  if (slot_count > kInline) {
    ptr_heap_.assign(slot_count, nullptr);
    value_heap_.assign(slot_count, ScalarSlot{});
    elem_heap_.assign(slot_count, 0);
    ptrs = ptr_heap_.data();
    values = value_heap_.data();
    elems = elem_heap_.data();
  }
  dim_value = dim_store_.data();
  dim_from = dim_from_store_.data();
  if (dim_count > dim_store_.size()) {
    dim_heap_.assign(dim_count, 0);
    dim_from_heap_.assign(dim_count, -1);
    dim_value = dim_heap_.data();
    dim_from = dim_from_heap_.data();
  }
  for (std::size_t d = 0; d < dim_count; ++d) dim_from[d] = -1;
}

Binder::Binder(const lowering::LoweredKernel& info, std::string kernel_name)
    : info_(info), name_(std::move(kernel_name)), op_("launch " + name_) {
  for (const lowering::KernelParamInfo& p : info_.params) symmetric_params_ += p.symmetric ? 1 : 0;
}

void Binder::bad(const BoundLaunch& b, std::size_t i, const std::string& reason) const {
  const auto& params = info_.params;
  fail(op_, i < params.size() ? params[i].name + " (argument " + std::to_string(i) + ")" : "",
       b.loc, reason);
}

void Binder::bind(const Kernel::Arg* args, std::size_t n, Device device, SourceLoc loc,
                  BoundLaunch* out) const {
  BoundLaunch& b = *out;
  b.args = args;
  b.params = n;
  b.device = device;
  // The caller's line; the kernel's own where no call site is known.
  b.loc = loc.known() ? loc : info_.source->loc;
  const auto& params = info_.params;
  if (n != params.size())
    bad(b, params.size(),
        "takes " + std::to_string(params.size()) + " arguments, got " + std::to_string(n));
  b.reserve(n + info_.dims.size() + info_.derived.size() + symmetric_params_, info_.dims.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (params[i].is_scalar)
      bind_scalar(b, i);
    else
      bind_tensor(b, i);
  }
  if (info_.source->no_alias) check_no_alias(b);
  bind_dims(b);
  bind_computed(b);
  if (symmetric_params_ > 0) bind_peer_tables(b);
}

// T::match_symmetric: after the extents and derived values, each symmetric
// buffer's table of every rank's copy (Group::empty_symmetric made it).
void Binder::bind_peer_tables(BoundLaunch& b) const {
  std::size_t slot = b.params + info_.dims.size() + info_.derived.size();
  for (std::size_t i = 0; i < b.params; ++i) {
    const lowering::KernelParamInfo& pi = info_.params[i];
    if (!pi.symmetric) continue;
    const Tensor& t = *b.args[i].tensor();
    const SymmetricInfo* sym = t.symmetric();
    if (!sym)
      bad(b, i,
          "is a symmetric buffer (T::match_symmetric) but the tensor is not symmetric memory; "
          "allocate it with tx::dist::Group::empty_symmetric on every rank");
    if (t.data_ptr() != sym->peers[static_cast<std::size_t>(sym->rank)])
      bad(b, i,
          "is a symmetric buffer but the tensor is a view that starts " +
              std::to_string(
                  static_cast<const char*>(t.data_ptr()) -
                  static_cast<const char*>(sym->peers[static_cast<std::size_t>(sym->rank)])) +
              " bytes into its symmetric allocation; pass the allocation itself (or a reshape "
              "of it): the peers' copies are addressed from their starts");
    b.ptrs[slot] = sym->table;
    b.elems[slot] = sym->world;
    ++slot;
  }
}

void Binder::bind_scalar(BoundLaunch& b, std::size_t i) const {
  const lowering::KernelParamInfo& pi = info_.params[i];
  const Kernel::Arg& arg = b.args[i];
  if (arg.tensor()) bad(b, i, "is a scalar parameter (" + pi.dtype.name() + "), given a tensor");
  if (pi.dtype.is_integer()) {
    if (!arg.is_int())
      bad(b, i,
          "is an integer parameter (" + pi.dtype.name() + "), given " +
              std::to_string(arg.as_double()));
    double lo = pi.dtype.is_uint() ? 0.0 : -std::ldexp(1.0, pi.dtype.bits - 1);
    double hi = std::ldexp(1.0, pi.dtype.bits - (pi.dtype.is_uint() ? 0 : 1)) - 1;
    if (static_cast<double>(arg.as_int()) < lo || static_cast<double>(arg.as_int()) > hi)
      bad(b, i, "value " + std::to_string(arg.as_int()) + " does not fit " + pi.dtype.name());
    if (arg.as_int() < pi.min || arg.as_int() > pi.max || arg.as_int() % pi.multiple_of != 0)
      bad(b, i,
          "value " + std::to_string(arg.as_int()) +
              " breaks the facts the kernel was "
              "compiled with (min " +
              std::to_string(pi.min) + ", max " + std::to_string(pi.max) + ", multiple of " +
              std::to_string(pi.multiple_of) + ")");
    put_int(b.values[i], pi.dtype.bits, arg.as_int());
  } else if (pi.dtype == f64) {
    put(b.values[i], arg.as_double());
  } else {
    put(b.values[i], static_cast<float>(arg.as_double()));
  }
  b.ptrs[i] = b.values[i].bytes;
  b.elems[i] = 0;
}

void Binder::bind_tensor(BoundLaunch& b, std::size_t i) const {
  const lowering::KernelParamInfo& pi = info_.params[i];
  const Kernel::Arg& arg = b.args[i];
  if (!arg.tensor()) bad(b, i, "is a buffer parameter, given a number");
  const Tensor& t = *arg.tensor();
  if (!t.defined()) bad(b, i, "tensor is undefined");
  if (t.numel() == 0)
    bad(b, i,
        "tensor is empty (shape " + shape_str(t.shape()) +
            "); a kernel's buffers have positive extents (the kernel declares " + dims_str(pi) +
            ")");
  if (t.dtype() != pi.dtype)
    bad(b, i, "dtype " + t.dtype().name() + " but the kernel declares " + pi.dtype.name());
  if (!pi.symbolic) {
    if (t.shape() != pi.shape)
      bad(b, i,
          "shape " + shape_str(t.shape()) + " but the kernel declares " + shape_str(pi.shape) +
              (t.numel() == pi.elems ? " (same element count: pass t.reshape(...))" : ""));
    if (t.numel() < pi.elems)
      bad(b, i,
          "tensor holds " + std::to_string(t.numel()) + " elements, the layout needs " +
              std::to_string(pi.elems));
  } else {
    bind_extents(b, i, t);
  }
  if (!(t.device() == b.device))
    bad(b, i,
        "tensor is on " + t.device().str() + " but the kernel runs on " + b.device.str() +
            " (move it with .to(kernel.device()))");
  // T.match_buffer declares a row-major buffer: a strided view would be
  // read as if it were one.
  if (!t.is_contiguous())
    bad(b, i,
        "tensor is a strided view (shape " + shape_str(t.shape()) + ", strides " +
            shape_str(t.strides()) + ") but the kernel declares a row-major buffer " +
            dims_str(pi) + "; pass t.contiguous()");
  auto addr = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  if (addr % static_cast<std::uintptr_t>(pi.align_bytes) != 0)
    bad(b, i,
        "tensor data is not " + std::to_string(pi.align_bytes) +
            "-byte aligned; the kernel makes vector accesses of that width on it");
  b.ptrs[i] = t.data_ptr();
  b.elems[i] = t.numel();
}

// Extents known at launch: constants must match, T::dim variables are bound
// by the first tensor that has them and must agree after.
void Binder::bind_extents(BoundLaunch& b, std::size_t i, const Tensor& t) const {
  const lowering::KernelParamInfo& pi = info_.params[i];
  const auto& dims = info_.dims;
  if (t.shape().size() != pi.dims.size())
    bad(b, i,
        "shape " + shape_str(t.shape()) + " has " + std::to_string(t.shape().size()) +
            " dimensions but the kernel declares " + dims_str(pi));
  for (std::size_t d = 0; d < pi.dims.size(); ++d) {
    std::int64_t got = t.shape()[d];
    if (auto c = as_const_int(pi.dims[d])) {
      if (got != *c)
        bad(b, i,
            "shape " + shape_str(t.shape()) + " but the kernel declares " + dims_str(pi) +
                " (dimension " + std::to_string(d) + ")");
      continue;
    }
    std::size_t k = 0;
    while (k < dims.size() && pi.dims[d].get() != dims[k].var.get()) ++k;
    if (k == dims.size())
      bad(b, i, "extent " + to_string(pi.dims[d]) + " is neither a constant nor a T::dim");
    if (b.dim_from[k] < 0) {
      b.dim_value[k] = got;
      b.dim_from[k] = static_cast<int>(i);
    } else if (b.dim_value[k] != got) {
      const auto& first = info_.params[static_cast<std::size_t>(b.dim_from[k])];
      bad(b, i,
          "extent " + dims[k].var.name() + " is " + std::to_string(got) + " here (shape " +
              shape_str(t.shape()) + ") but " + std::to_string(b.dim_value[k]) + " in " +
              first.name + " (argument " + std::to_string(b.dim_from[k]) +
              "): the tensors disagree");
    }
  }
}

// T::no_alias: no two buffers share bytes where the kernel writes one.
void Binder::check_no_alias(const BoundLaunch& b) const {
  const auto& params = info_.params;
  auto range = [&](std::size_t i) {
    const Tensor& t = *b.args[i].tensor();
    auto lo = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    return std::pair{lo, lo + static_cast<std::uintptr_t>(t.numel() * t.dtype().bytes())};
  };
  for (std::size_t i = 0; i < b.params; ++i) {
    if (params[i].is_scalar) continue;
    for (std::size_t j = i + 1; j < b.params; ++j) {
      if (params[j].is_scalar || !(params[i].written || params[j].written)) continue;
      auto [a0, a1] = range(i);
      auto [b0, b1] = range(j);
      if (a0 < b1 && b0 < a1)
        bad(b, j,
            "overlaps " + params[i].name + " (argument " + std::to_string(i) +
                ") in memory, but the kernel assumes its buffers do not (T::no_alias)");
    }
  }
}

// The facts each T::dim was compiled with; then its slot.
void Binder::bind_dims(BoundLaunch& b) const {
  const auto& dims = info_.dims;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const DimParam& dp = dims[d];
    const std::int64_t v = b.dim_value[d];
    auto bad_dim = [&](const std::string& why) {
      std::string from = b.dim_from[d] >= 0
                             ? " (from " +
                                   info_.params[static_cast<std::size_t>(b.dim_from[d])].name +
                                   ", argument " + std::to_string(b.dim_from[d]) + ")"
                             : "";
      fail(op_, dp.var.name(), b.loc,
           "extent " + dp.var.name() + " = " + std::to_string(v) + from + " " + why +
               " (T::dim at " + dp.loc.str() + ")");
    };
    if (v < dp.min) bad_dim("is below its min " + std::to_string(dp.min));
    if (v > dp.max) bad_dim("is above its max " + std::to_string(dp.max));
    if (dp.multiple_of > 1 && v % dp.multiple_of != 0)
      bad_dim("is not a multiple of " + std::to_string(dp.multiple_of) +
              ", which the kernel was specialized for");
    const std::size_t slot = b.params + d;
    put(b.values[slot], static_cast<std::int32_t>(v));
    b.ptrs[slot] = b.values[slot].bytes;
    b.elems[slot] = 0;
  }
}

// The value of a T::dim extent or a scalar parameter at this launch.
std::optional<std::int64_t> Binder::value_of(const BoundLaunch& b, const VarNode* v) const {
  const auto& dims = info_.dims;
  for (std::size_t d = 0; d < dims.size(); ++d)
    if (dims[d].var.get() == v) return b.dim_value[d];
  for (std::size_t i = 0; i < b.params; ++i)
    if (info_.params[i].is_scalar && info_.source->params[i].scalar.get() == v) {
      const Kernel::Arg& a = b.args[i];
      return a.is_int() ? a.as_int() : static_cast<std::int64_t>(a.as_double());
    }
  return std::nullopt;
}

// What the launch computes from its extents and scalars (the derived
// values, the grid), from the memo when the last launch had the same ones.
void Binder::bind_computed(BoundLaunch& b) const {
  b.grid = info_.launch.grid;
  const auto& derived = info_.derived;
  if (derived.empty() && !info_.launch.symbolic_grid) return;
  LaunchMemo key = memo_key(b);
  const bool memoizable = key.key_size <= LaunchMemo::capacity;
  bool reused = false;
  if (memoizable) {
    std::unique_lock<std::mutex> lock(memo_mu_, std::try_to_lock);
    if (lock.owns_lock() && memo_.valid && memo_.key_size == key.key_size &&
        std::equal(memo_.key.begin(),
                   memo_.key.begin() + static_cast<std::ptrdiff_t>(memo_.key_size),
                   key.key.begin())) {
      key.derived = memo_.derived;
      b.grid = memo_.grid;
      reused = true;
    }
  }
  if (!reused) {
    derive(b, key);
    if (info_.launch.symbolic_grid) evaluate_grid(b);
  }
  for (std::size_t j = 0; j < derived.size(); ++j) {
    const std::size_t slot = b.params + info_.dims.size() + j;
    put(b.values[slot], key.derived[j]);
    b.ptrs[slot] = b.values[slot].bytes;
    b.elems[slot] = 0;
  }
  if (memoizable && !reused) {
    std::unique_lock<std::mutex> lock(memo_mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      key.grid = b.grid;
      key.valid = true;
      memo_ = key;
    }
  }
}

// The memo's key: this launch's extents, then its scalars' bits; a key_size
// past the capacity when there are too many values to remember.
Binder::LaunchMemo Binder::memo_key(const BoundLaunch& b) const {
  LaunchMemo key;
  const auto& dims = info_.dims;
  for (std::size_t d = 0; d < dims.size() && key.key_size < key.capacity; ++d)
    key.key[key.key_size++] = b.dim_value[d];
  for (std::size_t i = 0; i < b.params; ++i) {
    if (!info_.params[i].is_scalar) continue;
    if (key.key_size == key.capacity) {
      key.key_size = key.capacity + 1;
      break;
    }
    const Kernel::Arg& a = b.args[i];
    key.key[key.key_size++] = a.is_int() ? a.as_int() : std::bit_cast<std::int64_t>(a.as_double());
  }
  if (dims.size() > key.capacity || info_.derived.size() > key.capacity)
    key.key_size = key.capacity + 1;
  return key;
}

// fast_divide's magic numbers for this launch's divisors (lowering proved
// each in [1, 2^31 - 1] from the facts bind_dims checked).
void Binder::derive(const BoundLaunch& b, LaunchMemo& key) const {
  const auto& derived = info_.derived;
  auto values = [&](const VarNode* v) { return value_of(b, v); };
  for (std::size_t j = 0; j < derived.size(); ++j) {
    const DimParam& dp = derived[j];
    auto d = lowering::evaluate_int(dp.of, values);
    if (!d || *d < 1 || *d > 2147483647)
      fail(op_, dp.var.name(), b.loc,
           "divisor " + to_string(dp.of) + " is " +
               (d ? std::to_string(*d) : std::string("not computable")) +
               " at this launch, outside [1, 2^31 - 1]");
    const lowering::FastDivisor f = lowering::fast_divisor_magic(*d);
    const std::int32_t v = dp.derived == DimParam::Derived::div_magic
                               ? static_cast<std::int32_t>(f.magic)
                               : static_cast<std::int32_t>(f.shift);
    if (j < key.capacity) key.derived[j] = v;
  }
}

// The grid, where it is known only now.
void Binder::evaluate_grid(BoundLaunch& b) const {
  auto values = [&](const VarNode* v) { return value_of(b, v); };
  for (std::size_t g = 0; g < 3; ++g) {
    const Expr& e = info_.launch.grid_exprs[g];
    if (!e.defined() || e.as<IntImmNode>()) continue;
    auto v = lowering::evaluate_int(e, values, /*mathematical=*/true);
    const std::int64_t hw = g == 0 ? 2147483647 : 65535;
    if (!v || *v < 0 || *v > hw)
      fail(op_, "", b.loc,
           "grid dimension " + std::to_string(g) + " = " + to_string(e) + " is " +
               (v ? std::to_string(*v) : std::string("not computable")) + ", outside [0, " +
               std::to_string(hw) + "]");
    b.grid[g] = *v;
  }
}

}  // namespace tx::runtime
