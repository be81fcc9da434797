// tx::ops::paged_attention and reshape_and_cache on an sm_90 GPU (H100 /
// H200): the cases of paged_attention_cases.hpp, larger contexts, and the
// decode step captured in a CUDA graph and replayed with new lengths.
#define TX_PAGED_DEVICE tx::Device::cuda()
#include "paged_attention_cases.hpp"
#include "tx/runtime/cuda_driver.hpp"

TEST_CASE("paged_attention at serving sizes against float64: GQA 8, head_dim 128, long contexts") {
  using namespace pagedcase;
  const std::vector<Case> cases = {
      {.TQ = 1, .H = 32, .HK = 4, .D = 128, .P = 16, .ctx = {2048, 1, 777, 4096}},
      {.TQ = 1, .H = 32, .HK = 8, .D = 128, .P = 64, .ctx = {513, 3000}, .splits = 1},
      {.TQ = 8, .H = 32, .HK = 4, .D = 128, .P = 32, .ctx = {1000, 8, 2500}},
      {.TQ = 1, .H = 16, .HK = 2, .D = 256, .P = 16, .ctx = {300, 1200}},
      {.TQ = 1,
       .H = 32,
       .HK = 8,
       .D = 128,
       .P = 16,
       .ctx = {1500, 2049},
       .cache_t = tx::f8e4m3,
       .k_scale = 0.5,
       .v_scale = 2},
  };
  for (const Case& c : cases) {
    CAPTURE(describe(c));
    Built x = build(c, 5);
    Result r = run(c, x);
    CAPTURE(r.plan);
    CHECK(r.error <= 1.0);
  }
}

TEST_CASE("paged decode steps in a CUDA graph: lengths and tables read on the device at replay") {
  using namespace pagedcase;
  using namespace tx;
  Case c{.TQ = 1, .H = 32, .HK = 8, .D = 128, .P = 16, .ctx = {300, 1000, 64, 2000}};
  Built x = build(c, 9);
  Tensor out = Tensor::empty({4, 1, 32, 128}, bf16, Device::cuda());
  ops::PagedAttentionOptions opt{.out = &out};
  ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, opt);  // compiles and loads outside
  synchronize();
  Graph g = Graph::capture([&] { ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, opt); });
  out.fill_bits(0x7fc0);
  g.replay();
  synchronize();
  tx::test::AttentionRef want{reference(c, x), {}};
  CHECK(tx::test::attention_error(want, out.to_doubles(), {}, bf16, 1.0).out <= 1.0);
  // New lengths in place (shorter: the pages stay valid): the replay reads them.
  Case shorter = c;
  shorter.ctx = {17, 999, 1, 1500};
  std::vector<double> lens(shorter.ctx.begin(), shorter.ctx.end());
  Tensor L2 = Tensor::from_doubles(lens, {4}, i32, Device::cuda());
  runtime::copy_device_to_device(reinterpret_cast<runtime::DevicePtr>(x.lens.data_ptr()),
                                 reinterpret_cast<runtime::DevicePtr>(L2.data_ptr()), 16);
  out.fill_bits(0x7fc0);
  g.replay();
  synchronize();
  // The reference of the shorter lengths over the same cache (its NaN rows
  // now lie inside the longer pages, past the new lengths: still masked).
  tx::test::AttentionRef want2{reference(shorter, x), {}};
  CHECK(tx::test::attention_error(want2, out.to_doubles(), {}, bf16, 1.0).out <= 1.0);
}
