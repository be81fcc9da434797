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
