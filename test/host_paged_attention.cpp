// tx::ops::paged_attention and reshape_and_cache on the host JIT: the decode,
// combine and cache-write kernels as fibers, against float64; and the GPU's
// kernels lowered for sm_90a (TMA page loads, wgmma) and compiled to PTX by
// NVRTC, which needs no GPU.
#define TX_PAGED_DEVICE tx::Device::host()
#include "paged_attention_cases.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/runtime/nvrtc.hpp"

TEST_CASE("paged_attention's kernels lower for sm_90a: TMA page loads, wgmma, PTX by NVRTC") {
  using namespace tx;
  for (DType ct : {bf16, f8e4m3}) {
    CAPTURE(ct.name());
    pagedcase::Case c{
        .TQ = 2, .H = 8, .HK = 2, .D = 128, .P = 16, .ctx = {40, 100}, .cache_t = ct, .splits = 2};
    pagedcase::Built x = pagedcase::build(c);
    auto kernels =
        ops::detail::paged_attention_kernels(x.q, x.kc, x.vc, x.table, x.lens, {.splits = 2});
    REQUIRE(kernels.size() == 2);  // decode, then combine
    auto decode = lowering::lower(kernels[0], {.arch = "sm_90a"});
    const std::string cuda = lowering::codegen_cuda(decode);
    // Every tile TMA writes or wgmma reads starts on a 1 KiB boundary (the
    // fp8 kernel's widened tiles follow the barriers).
    int tiles = 0;
    for (const auto& s : decode.shared)
      if (s.buffer->name == "Qs" || s.buffer->name == "Ks" || s.buffer->name == "Vs" ||
          s.buffer->name == "K16" || s.buffer->name == "V16") {
        CAPTURE(s.buffer->name);
        CHECK(s.offset % 1024 == 0);
        ++tiles;
      }
    CHECK(tiles == (ct == f8e4m3 ? 5 : 3));
    CHECK(cuda.find("tx_tma_load(") != std::string::npos);
    CHECK(cuda.find("wgmma.mma_async") != std::string::npos);
    const auto ptx =
        runtime::nvrtc_compile(cuda, "paged_decode.cu", "sm_90a", runtime::NvrtcTarget::ptx);
    CHECK(ptx.ptx.find("cp.async.bulk.tensor") != std::string::npos);
    auto combine = lowering::codegen_cuda(lowering::lower(kernels[1], {.arch = "sm_90a"}));
    CHECK(runtime::nvrtc_compile(combine, "paged_combine.cu", "sm_90a", runtime::NvrtcTarget::ptx)
              .ptx.find(".entry") != std::string::npos);
  }
}

TEST_CASE("elementwise/smem on swizzled tiles: an fp8 tile widened to bf16, tail rows zeroed") {
  using namespace tx;
  // What the decode kernel does between the TMA and the MMA, on its own:
  // both tiles in layouts::swizzled_tiles (fp8: 64-byte rows, bf16: 128-byte).
  const std::int64_t R = 64, C = 64, keep = 41;
  PrimFunc f = T::prim_func("widen_and_zero", [&](Handle src, Handle dst) {
    auto S = T::match_buffer(src, {R, C}, f8e4m3);
    auto D = T::match_buffer(dst, {R, C}, bf16);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S8 = T::alloc_buffer({2, R, C}, f8e4m3, scope::shared,
                              layouts::swizzled_tiles({2, R, C}, f8e4m3));
    auto S16 = T::alloc_buffer({R, C}, bf16, scope::shared, layouts::swizzled_tiles({R, C}, bf16));
    Tx::cta::copy(S8[region({1, 2}, {0, R}, {0, C})], S.all());
    T::cuda::cta_sync();
    Tx::cta::cast(S16, S8[region({1, 2}, {0, R}, {0, C})]);  // a 3-D stage into a 2-D tile
    Tx::cta::fill(S16, 0.0f, {.where = [&](Expr i, Expr) { return i >= keep; }});
    Tx::cta::copy(D.all(), S16);
  });
  auto vals = test::random_values(static_cast<std::size_t>(R * C), f8e4m3, -100, 100);
  Tensor src = Tensor::from_doubles(vals, {R, C}, f8e4m3, Device::host());
  Tensor dst = Tensor::empty({R, C}, bf16, Device::host());
  dst.fill_bits(0x7fc0);
  compile(f, {.device = Device::host()})(src, dst);
  auto got = dst.to_doubles();
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j)
      REQUIRE(got[static_cast<std::size_t>(i * C + j)] ==
              (i >= keep ? 0.0 : vals[static_cast<std::size_t>(i * C + j)]));
  // The same call lowers for sm_90a through elementwise/smem, swizzled addresses.
  const std::string cuda = lowering::codegen_cuda(lowering::lower(f, {.arch = "sm_90a"}));
  CHECK(cuda.find("elementwise/smem") != std::string::npos);
  CHECK(cuda.find(" ^ ") != std::string::npos);
}
