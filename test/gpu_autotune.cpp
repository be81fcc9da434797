// Autotuning on the GPU (skipped, visibly, without one): the opt-in search
// times its candidates, writes the winner to autotune.txt in the cache folder,
// serves it to the next build of the same (op, dtype, shape class, GPU), and
// the tuned kernel computes the right thing. The file handling itself is
// tested without a GPU in test_autotune.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/tx.hpp"

using namespace tx;

TEST_CASE("autotuning picks a winner on the GPU, remembers it, and the tuned kernel is right") {
  const runtime::DiskCache& cache = runtime::DiskCache::instance();
  REQUIRE_MESSAGE(cache.enabled(), "the tuner remembers winners in the disk cache folder");
  // An odd shape of its own shape class, so no earlier run's winner answers.
  const std::vector<std::int64_t> shape{3, 50021};
  ops::Elementwise tuned("silu", {shape}, f16, {}, {.tune = true}, Device::cuda());
  ops::Config c = tuned.config();
  REQUIRE(c.strategy.has_value());
  CHECK(c.threads > 0);
  CHECK(c.num_per_thread > 0);

  std::ifstream f(cache.dir() + "/autotune.txt");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK_MESSAGE(text.find("silu|float16|") != std::string::npos, "autotune.txt:\n" << text);

  // The same key again: the remembered winner, no second search.
  ops::Elementwise again("silu", {shape}, f16, {}, {.tune = true}, Device::cuda());
  CHECK(again.config().strategy == c.strategy);
  CHECK(again.config().threads == c.threads);
  CHECK(again.config().num_per_thread == c.num_per_thread);

  std::vector<double> x = test::random_values(3 * 50021, f16, -6, 6);
  Tensor X = Tensor::from_doubles(x, shape, f16, Device::cuda());
  Tensor Y = Tensor::empty(shape, f16, Device::cuda());
  Y.fill_bits(test::poison_bits(f16));
  tuned({X}, Y);
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    want[i] = quantize(x[i] / (1.0 + std::exp(-x[i])), f16);
  double err = test::max_rel_error(Y.to_doubles(), want, 1e-4, test::default_rtol(f16));
  CHECK_MESSAGE(err <= 1.0,
                "max error " << err << " of tolerance (seed " << test::rng_seed() << ")");
}
