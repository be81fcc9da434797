// Issue 14 on the GPU: a kernel over a buffer just past 2^31 elements (64-bit
// offsets, only where needed), and the checked host mode's verdict on the
// racy kernels next to what the GPU computes for them. Skipped (exit 77)
// without a GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

#include "racy_kernels.hpp"
#include "test_support.hpp"
#include "tx/tx.hpp"

using namespace tx;

TEST_CASE("a kernel writes every element of a buffer of 2^31 + 4096 bytes") {
  constexpr std::int64_t kN = (std::int64_t{1} << 31) + 4096;  // a multiple of 256
  const std::uint32_t salt = static_cast<std::uint32_t>(test::rng()() % 200) + 1;
  auto f = T::prim_func("fill_big", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {kN}, u8);
    auto bx = T::cta_id({kN / 256});
    auto t = T::thread_id({256});
    // bx * 256 + t passes 2^31 - 1 in the last 16 CTAs: computed in 64 bits.
    A(bx * 256 + t) = cast((bx + t * static_cast<int>(salt)) % 251, u8);
  });
  Kernel k = compile(f, {.device = Device::cuda()});
  REQUIRE(k.cuda_source().find("long long") != std::string::npos);
  Tensor A = Tensor::empty({kN}, u8, Device::cuda());
  A.fill_bits(0xFF);  // 255 is never written: 251 values
  k(A);
  synchronize();
  std::vector<std::uint8_t> got = A.to_bytes();
  REQUIRE(got.size() == static_cast<std::size_t>(kN));
  auto want = [&](std::int64_t i) {
    std::int64_t bx = i / 256, t = i % 256;
    return static_cast<std::uint8_t>((bx + t * salt) % 251);
  };
  std::int64_t wrong = 0;
  // Every element of the last 64 KiB (past 2^31) and a stride through the rest.
  for (std::int64_t i = kN - 65536; i < kN; ++i)
    wrong += got[static_cast<std::size_t>(i)] != want(i);
  for (std::int64_t i = 0; i < kN - 65536; i += 4093)
    wrong += got[static_cast<std::size_t>(i)] != want(i);
  CHECK(wrong == 0);
}

TEST_CASE("the racy kernels run on the GPU; the checked host mode reports each") {
  // The GPU computes something for each (what, depends on timing); the host
  // run in the checked mode must name the race. racecheck's view of the same
  // kernels is in scripts/device_all.sh sanitize (racy_kernels).
  for (const test::RacyKernel& r : test::racy_kernels()) {
    CAPTURE(r.name);
    Kernel gpu = compile(r.func, {.device = Device::cuda()});
    std::vector<Tensor> args;
    for (const auto& p : gpu.info().params) {
      std::vector<double> v(static_cast<std::size_t>(p.elems));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = p.dtype == i32 ? 3 : 1.0 + i % 5;
      args.push_back(Tensor::from_doubles(v, p.shape, p.dtype, Device::cuda()));
    }
    gpu.launch(args);
    synchronize();
    if (!runtime::host_jit_available()) continue;  // the GPU machines have no LLVM
    Kernel checked = compile(r.func, {.checked = true});
    std::vector<Tensor> host_args;
    for (const Tensor& t : args) host_args.push_back(t.to(Device::host()));
    CHECK_THROWS_WITH(checked.launch(host_args), doctest::Contains(r.expect.c_str()));
  }
}
