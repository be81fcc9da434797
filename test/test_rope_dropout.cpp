// rope and dropout without running a kernel (so on every machine): the code
// they generate. Their numerics run in host_rope_dropout (host JIT) and
// gpu_rope_dropout (GPU) from support/rope_dropout_cases.hpp.
//
//  - rope moves q, k and the cache row with 128-bit loads and stores, in f32,
//    f16 and bf16, for neox and GPT-J pairs, partial rotary included; one
//    kernel serves every token count.
//  - dropout's Philox multiplies are single mul.wide.u32 (the DSL's u32 x u32
//    -> u64 product), and its loads and stores are 128-bit.
#include <doctest/doctest.h>

#include <regex>

#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

int count(const std::string& s, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(
      std::distance(std::sregex_iterator(s.begin(), s.end(), r), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("rope: 128-bit accesses to q, k and the cache, one kernel for every T") {
  const Device h = Device::host();
  for (DType t : {bf16, f16, f32})
    for (bool neox : {true, false})
      for (std::int64_t rot : {128, 64}) {
        CAPTURE(t.name());
        CAPTURE(neox);
        CAPTURE(rot);
        Tensor pos = Tensor::from_doubles({1, 2, 3}, {3}, i64, h);
        Tensor q = Tensor::empty({3, 32 * 128}, t, h), k = Tensor::empty({3, 8 * 128}, t, h);
        // Only its shape and dtype matter here: no kernel runs (the GPU machines have no host JIT).
        Tensor cache = Tensor::empty({64, rot}, f32, h);
        ops::RopeOptions o{.head_size = 128, .rotary_dim = rot, .is_neox = neox};
        Kernel kr = ops::rope_kernel(pos, q, k, cache, o);
        const std::string ptx = kr.ptx();
        // Per branch (q, k): x1 and x2 (neox) or the 2v columns (GPT-J) in and out; the
        // cos and sin vectors once. f32 cos/sin of 16 bytes of bf16 pairs: two v4 each.
        const int qk_moves = neox ? 2 : (t == f32 ? 2 : 1);
        CHECK(count(ptx, "ld\\.global(\\.nc)?\\.v4") >= 2 * qk_moves + 2);
        CHECK(count(ptx, "st\\.global\\.v4") >= 2 * qk_moves);
        // Another token count: the same kernel.
        Tensor pos2 = Tensor::from_doubles(std::vector<double>(77, 5.0), {77}, i64, h);
        Tensor q2 = Tensor::empty({77, 32 * 128}, t, h), k2 = Tensor::empty({77, 8 * 128}, t, h);
        CHECK(ops::rope_kernel(pos2, q2, k2, cache, o).name() == kr.name());
      }
}

TEST_CASE("dropout: Philox in mul.wide.u32, 128-bit loads and stores") {
  const Device h = Device::host();
  for (DType t : {f32, bf16, f8e4m3}) {
    CAPTURE(t.name());
    Tensor x = Tensor::empty({1024, 4096}, t, h);
    Kernel k = ops::dropout_kernel(x, 0.1, 0, /*with_mask=*/false);
    const std::string ptx = k.ptx();
    CHECK(count(ptx, "mul\\.wide\\.u32") >= 20);
    CHECK(count(ptx, "mul\\.lo\\.s64|mul\\.lo\\.u64") <= 8);  // no 64 x 64 products per round
    CHECK(count(ptx, "ld\\.global(\\.nc)?\\.v4") >= 1);
    CHECK(count(ptx, "st\\.global\\.v4") >= 1);
    // Another size, another offset of the same class: the same kernel.
    Tensor x2 = Tensor::empty({333}, t, h);
    CHECK(ops::dropout_kernel(x2, 0.7, 4096, false).name() == k.name());
    // An offset that is not a multiple of 4: the per-element kernel.
    CHECK(ops::dropout_kernel(x2, 0.7, 3, false).name() != k.name());
  }
}
