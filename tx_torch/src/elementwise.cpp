// The elementwise ops of tx's op table as torch.ops.tx.*: every unary,
// binary, gated and parameterized op of tx::ops::all_ops(), each with its
// functional form, an out= form and (where PyTorch has one) an in-place form:
//
//   tx::exp(Tensor self) -> Tensor
//   tx::exp.out(Tensor self, *, Tensor(a!) out) -> ()
//   tx::exp_(Tensor(a!) self) -> ()
//
// The out= and in-place forms return nothing, unlike PyTorch's own (which
// return the out tensor): torch.compile functionalizes a custom op that
// mutates its arguments only when it returns no alias of them.
//
// One boxed kernel serves all of them on CPU, CUDA and Meta: it reads the op
// from the schema's name, the tensors and numbers from the stack, plans the
// call (the result's shape by broadcasting, its dtype by PyTorch's promotion
// and tx's output rule) and, except on Meta, runs tx::ops::run into a tensor
// PyTorch allocated. Shapes are SymInts so that torch.compile(dynamic=True)
// traces the ops through the Meta kernel.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "convert.hpp"
#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"

namespace tx_torch {
namespace {

using tx::optable::Template;

// Op names as PyTorch spells them where tx's differ.
bool has_inplace(const tx::ops::OpInfo& o) {
  // PyTorch has no in-place form of the predicates and gated ops; the
  // comparison and logical ones keep self's dtype in place (bool results
  // into a float tensor), which tx's bool outputs cannot mirror.
  if (o.out == tx::optable::Out::boolean) return false;
  if (o.tmpl == Template::gated) return false;
  return o.tmpl == Template::unary || o.tmpl == Template::binary || o.name == "leaky_relu" ||
         o.name == "elu" || o.name == "hardtanh" || o.name == "clamp" || o.name == "masked_fill" ||
         o.name == "nan_to_num";
}

// The argument list (without the out= argument) of an op's schema.
std::string arguments(const tx::ops::OpInfo& o) {
  if (o.name == "gelu") return "Tensor self, *, str approximate='none'";
  if (o.name == "lerp") return "Tensor self, Tensor end";
  if (o.name == "leaky_relu") return "Tensor self, float negative_slope=0.01";
  if (o.name == "elu") return "Tensor self, float alpha=1.0";
  if (o.name == "hardtanh") return "Tensor self, float min_val=-1.0, float max_val=1.0";
  if (o.name == "softplus") return "Tensor self, float beta=1.0, float threshold=20.0";
  if (o.name == "prelu") return "Tensor self, Tensor weight";
  if (o.name == "where") return "Tensor condition, Tensor self, Tensor other";
  if (o.name == "clamp") return "Tensor self, float? min=None, float? max=None";
  if (o.name == "masked_fill") return "Tensor self, Tensor mask, float value";
  if (o.name == "nan_to_num")
    return "Tensor self, float? nan=None, float? posinf=None, float? neginf=None";
  if (o.tmpl == Template::binary) return "Tensor self, Tensor other";
  return "Tensor self";
}

// The ops this file registers: every table op that takes tensors and has no
// kernel of its own (rope and dropout: special.cpp; alibi and sinusoidal
// make tensors from nothing: special.cpp).
bool registered_here(const tx::ops::OpInfo& o) {
  return o.inputs > 0 && (o.tmpl == Template::unary || o.tmpl == Template::binary ||
                          o.tmpl == Template::gated || o.tmpl == Template::independent);
}

double max_finite(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return std::numeric_limits<float>::max();
    case at::kDouble:
      return std::numeric_limits<double>::max();
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::max());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    case at::kFloat8_e4m3fn:
      return static_cast<double>(std::numeric_limits<c10::Float8_e4m3fn>::max());
    case at::kFloat8_e5m2:
      return static_cast<double>(std::numeric_limits<c10::Float8_e5m2>::max());
    default:
      return 0.0;
  }
}

// What one call does, worked out the same way on Meta and on a device.
struct Plan {
  const tx::ops::OpInfo* info = nullptr;
  std::string qualified;  // "tx::add" for messages
  std::vector<at::Tensor> inputs;
  std::vector<double> params;
  c10::SymDimVector shape;
  at::ScalarType out_dtype = at::kFloat;
  c10::Device device = c10::kCPU;
};

// Which inputs are conditions or masks (bool, not promoted with the rest).
bool is_mask(const tx::ops::OpInfo& o, std::size_t i) {
  return (o.name == "where" && i == 0) || (o.name == "masked_fill" && i == 1);
}

Plan plan(const tx::ops::OpInfo& info, std::vector<at::Tensor> ins,
          const std::vector<std::optional<double>>& nums, const std::string& approximate) {
  Plan p;
  p.info = &info;
  p.qualified = "tx::" + info.name;
  const char* op = p.qualified.c_str();
  if (info.name == "gelu")
    TORCH_CHECK(approximate == "none", op, ": approximate='", approximate,
                "': tx's gelu is the exact (erf) form; the tanh form is tx::gelu_tanh_and_mul's "
                "gate only");
  // The device: that of the first tensor that is not a 0-dim CPU number.
  p.device = ins[0].device();
  for (const at::Tensor& t : ins)
    if (!(t.dim() == 0 && t.is_cpu())) {
      p.device = t.device();
      break;
    }
  // One compute dtype for the data inputs, as PyTorch promotes them (a 0-dim
  // tensor does not raise the category's width); masks are bool.
  std::optional<at::ScalarType> common;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    if (is_mask(info, i)) {
      TORCH_CHECK(ins[i].scalar_type() == at::kBool, op, ": ", i == 0 ? "condition" : "mask",
                  " must be a bool tensor, got ", ins[i].scalar_type());
      continue;
    }
    if (info.name == "prelu" && i == 1) continue;  // weight follows self's dtype
    common = common ? at::promote_types(*common, ins[i].scalar_type()) : ins[i].scalar_type();
  }
  if (ins.size() > 1 && info.name != "prelu" && info.name != "where" && info.name != "masked_fill")
    common = at::result_type(ins[0], ins[1]);
  if (info.name == "where") common = at::result_type(ins[1], ins[2]);
  tx::DType t = tx_dtype(*common, op, "self");
  TORCH_CHECK(tx::optable::accepts(info.dtypes, t), op, ": tx's ", info.name, " takes ",
              info.dtypes == tx::optable::DTypes::floats     ? "floating"
              : info.dtypes == tx::optable::DTypes::numeric  ? "floating or integer"
              : info.dtypes == tx::optable::DTypes::integral ? "integer or bool"
                                                             : "",
              " tensors; the inputs are ", *common);
  for (std::size_t i = 0; i < ins.size(); ++i) {
    at::Tensor x = ins[i];
    if (!is_mask(info, i) && x.scalar_type() != *common) x = x.to(*common);
    if (x.device() != p.device) {
      TORCH_CHECK(x.dim() == 0 && x.is_cpu(), op, ": tensors on ", p.device, " and ", x.device(),
                  "; tx runs an op on one device (move them with .to())");
      x = x.to(p.device);
    }
    p.inputs.push_back(x);
  }
  p.out_dtype = torch_dtype(tx::ops::out_dtype_for(info, t));
  // The result's shape.
  if (info.tmpl == Template::gated) {
    const at::Tensor& x = p.inputs[0];
    TORCH_CHECK(x.dim() >= 1, op, ": self must have at least one dimension");
    p.shape = c10::SymDimVector(x.sym_sizes().begin(), x.sym_sizes().end());
    TORCH_CHECK(p.shape.back() % 2 == 0, op, ": the last dimension of self (", p.shape.back(),
                ") must be even: the gate and the value halves");
    p.shape.back() = p.shape.back() / 2;
  } else if (info.name == "prelu" || info.name == "masked_fill") {
    p.shape = c10::SymDimVector(p.inputs[0].sym_sizes().begin(), p.inputs[0].sym_sizes().end());
  } else {
    p.shape = c10::SymDimVector(p.inputs[0].sym_sizes().begin(), p.inputs[0].sym_sizes().end());
    for (std::size_t i = 1; i < p.inputs.size(); ++i)
      p.shape = at::infer_size_symdimvector(p.shape, p.inputs[i].sym_sizes());
  }
  // Scalar parameters, with PyTorch's defaults for the optional ones.
  const double big = max_finite(*common);
  if (info.name == "nan_to_num") {
    p.params = {nums[0].value_or(0.0), nums[1].value_or(big), nums[2].value_or(-big)};
  } else if (info.name == "clamp") {
    TORCH_CHECK(nums[0] || nums[1], op, ": at least one of min and max must be given");
    const bool fl = at::isFloatingType(*common);
    p.params = {nums[0].value_or(fl ? -INFINITY : static_cast<double>(INT64_MIN)),
                nums[1].value_or(fl ? INFINITY : static_cast<double>(INT64_MAX))};
  } else {
    for (const auto& n : nums) p.params.push_back(*n);
  }
  return p;
}

// The boxed kernel of every op of this file.
void elementwise_boxed(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = handle.schema();
  std::string name = schema.name().substr(4);  // after "tx::"
  const bool out_form = schema.overload_name() == "out";
  const bool inplace = !out_form && !name.empty() && name.back() == '_';
  if (inplace) name.pop_back();
  const tx::ops::OpInfo* info = tx::ops::find_op(name);
  TORCH_CHECK(info, "tx_torch: no tx op ", name);

  const std::size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  std::vector<at::Tensor> ins;
  std::vector<std::optional<double>> nums;
  std::string approximate = "none";
  at::Tensor out;
  for (std::size_t i = 0; i < nargs; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    const c10::IValue& v = args[i];
    if (out_form && a.name() == "out") {
      out = v.toTensor();
    } else if (v.isTensor()) {
      ins.push_back(v.toTensor());
    } else if (v.isString()) {
      approximate = v.toStringRef();
    } else if (v.isNone()) {
      nums.emplace_back();
    } else {
      nums.emplace_back(v.toDouble());
    }
  }
  Plan p = plan(*info, ins, nums, approximate);
  const char* op = p.qualified.c_str();
  // Where the result's dtype is not the destination's but PyTorch would
  // cast it there (f16.add_(f32), an f32 out= for f16 inputs), the result
  // is computed in its own dtype and copied in, as PyTorch computes it.
  at::Tensor cast_to;
  if (inplace) {
    out = ins[0];
    TORCH_CHECK(at::canCast(p.out_dtype, out.scalar_type()), op, "_: the result type ", p.out_dtype,
                " cannot be stored in self's ", out.scalar_type());
    TORCH_CHECK(out.sym_sizes() == c10::SymIntArrayRef(p.shape), op,
                "_: the result's shape differs from self's (in-place ops cannot broadcast self)");
  } else if (out_form) {
    TORCH_CHECK(at::canCast(p.out_dtype, out.scalar_type()), op, ": the result type ", p.out_dtype,
                " cannot be stored in out's ", out.scalar_type());
    prepare_out(op, out, p.shape, out.scalar_type());
  } else {
    out = at::empty_symint(p.shape, p.inputs[0].options().dtype(p.out_dtype).device(p.device));
  }
  if ((inplace || out_form) && out.scalar_type() != p.out_dtype) {
    cast_to = out;
    out = at::empty_symint(p.shape, p.inputs[0].options().dtype(p.out_dtype).device(p.device));
  }
  if (p.device.type() != c10::DeviceType::Meta) {
    // Memory checks (not on Meta: they need concrete sizes). An out that
    // overlaps an input other than exactly (in place) would be read after
    // it is written.
    const at::Tensor& dest = cast_to.defined() ? cast_to : out;
    if (inplace || out_form) at::assert_no_internal_overlap(dest);
    if (out_form)
      for (const at::Tensor& x : ins) at::assert_no_partial_overlap(dest, x);
    call(op, [&] {
      OnDevice on(p.device);
      std::vector<tx::Tensor> tins;
      for (std::size_t i = 0; i < p.inputs.size(); ++i)
        tins.push_back(view(p.inputs[i], op, schema.arguments()[i].name().c_str()));
      into(out, [&](at::Tensor& o) {
        tx::Tensor to = view(o, op, "out");
        tx::ops::run(info->name, tins, to, p.params);
      });
    });
    if (cast_to.defined()) cast_to.copy_(out);
  }
  torch::jit::drop(*stack, nargs);
  if (!out_form && !inplace) torch::jit::push(*stack, out);
}

}  // namespace

}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  for (const tx::ops::OpInfo& o : tx::ops::all_ops()) {
    if (!tx_torch::registered_here(o)) continue;
    const std::string args = tx_torch::arguments(o);
    m.def((o.name + "(" + args + ") -> Tensor").c_str());
    m.def((o.name + ".out(" + args + ", *, Tensor(a!) out) -> ()").c_str());
    if (tx_torch::has_inplace(o)) {
      std::string a = args;
      a.replace(0, 11, "Tensor(a!) self");  // "Tensor self" -> mutable self
      m.def((o.name + "_(" + a + ") -> ()").c_str());
    }
  }
}

namespace {
void register_elementwise(torch::Library& m) {
  for (const tx::ops::OpInfo& o : tx::ops::all_ops()) {
    if (!tx_torch::registered_here(o)) continue;
    m.impl(o.name.c_str(),
           torch::CppFunction::makeFromBoxedFunction<&tx_torch::elementwise_boxed>());
    m.impl((o.name + ".out").c_str(),
           torch::CppFunction::makeFromBoxedFunction<&tx_torch::elementwise_boxed>());
    if (tx_torch::has_inplace(o))
      m.impl((o.name + "_").c_str(),
             torch::CppFunction::makeFromBoxedFunction<&tx_torch::elementwise_boxed>());
  }
}
}  // namespace

TORCH_LIBRARY_IMPL(tx, CPU, m) { register_elementwise(m); }
TORCH_LIBRARY_IMPL(tx, CUDA, m) { register_elementwise(m); }
TORCH_LIBRARY_IMPL(tx, Meta, m) { register_elementwise(m); }
