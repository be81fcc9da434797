// The checked host mode on asynchronous pipelines (issue 40): every kernel
// of the broken-pipeline catalogue (broken_pipelines.hpp) is reported with
// the ops, lines, threads, stages and phases its bug involves; the correct
// ones run silent and compute what a float64 GEMM computes. The model of
// sm_90 runs the GPU's code: the TMA and wgmma variants, their mbarriers,
// commit groups and proxy fences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "broken_pipelines.hpp"
#include "test_support.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Runs k on fresh random inputs, the output poisoned; the largest error of
// the GEMM's output against float64 (-1 for the kernel of one argument).
double run_checked(const Kernel& k) {
  std::vector<Tensor> args;
  std::vector<std::vector<double>> in;
  for (const auto& p : k.info().params) {
    Tensor t = Tensor::from_doubles(
        test::random_values(static_cast<std::size_t>(p.elems), p.dtype, -1.0, 1.0), p.shape,
        p.dtype, k.device());
    in.push_back(t.to_doubles());
    args.push_back(t);
  }
  if (args.size() != 3) {
    k.launch(args);
    return -1;
  }
  args[2].fill_bits(0x7fc00000u);
  k.launch(args);
  const std::int64_t M = args[0].shape()[0], K = args[0].shape()[1], N = args[1].shape()[1];
  const std::vector<double> C = args[2].to_doubles();
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < K; ++p)
        want +=
            in[0][static_cast<std::size_t>(i * K + p)] * in[1][static_cast<std::size_t>(p * N + j)];
      const double got = C[static_cast<std::size_t>(i * N + j)];
      worst = std::isnan(got) ? INFINITY : std::max(worst, std::abs(got - want));
    }
  return worst;
}

}  // namespace

TEST_CASE("the checked mode reports every broken pipeline of the catalogue as stated") {
  const auto all = test::broken_pipelines();
  CHECK(all.size() >= 17);
  int broken = 0;
  for (const auto& bp : all) {
    CAPTURE(bp.name);
    Kernel k = compile(bp.func, {.device = Device::host(), .checked = true});
    std::string report;
    double err = 0;
    try {
      err = run_checked(k);
    } catch (const Error& e) {
      report = std::string(e.what()) + "\n" + e.detail();
    }
    if (bp.expect.empty()) {
      CHECK_MESSAGE(report.empty(), report);
      CHECK(err < 1e-2);  // f32 accumulation of K = 256 bf16 products
      continue;
    }
    ++broken;
    REQUIRE_MESSAGE(!report.empty(), bp.name << " ran without a report");
    for (const std::string& part : bp.expect)
      CHECK_MESSAGE(report.find(part) != std::string::npos, "missing '" << part << "' in:\n"
                                                                        << report);
    // Every report names the user's line.
    CHECK_MESSAGE(report.find("broken_pipelines.hpp:") != std::string::npos, report);
  }
  CHECK(broken >= 15);
}

TEST_CASE("checked pipelines: a race names the TMA copy's barrier, phase and stage") {
  const auto all = test::broken_pipelines();
  auto it = std::find_if(all.begin(), all.end(),
                         [](const auto& b) { return b.name == "consumer_skips_wait"; });
  REQUIRE(it != all.end());
  Kernel k = compile(it->func, {.device = Device::host(), .checked = true});
  std::string report;
  try {
    run_checked(k);
  } catch (const Error& e) {
    report = std::string(e.what()) + "\n" + e.detail();
  }
  // The stage (of the As ring), the barrier and phase the copy completes on,
  // the issuing thread, both instructions' lines.
  CHECK_MESSAGE(report.find("As[0, ...] (stage 0") != std::string::npos, report);
  CHECK_MESSAGE(
      report.find("the TMA unit of pipe_full[0] (the copy of phase 0), issued by thread 0") !=
          std::string::npos,
      report);
  CHECK_MESSAGE(report.find("phase 0, parity 0") != std::string::npos, report);
  CHECK_MESSAGE(report.find("T.ptx.tma_load at test/broken_pipelines.hpp:") != std::string::npos,
                report);
  CHECK_MESSAGE(report.find("T.ptx.wgmma.m64n64k16") != std::string::npos, report);
}

TEST_CASE("checked pipelines: unchecked, the same kernels lower for the host without the model") {
  // The model is the checked mode's: an unchecked host compile keeps the
  // synchronous copies and the FMA product (no TMA, no wgmma).
  const auto all = test::broken_pipelines();
  Kernel plain = compile(all.front().func, {.device = Device::host()});
  CHECK(plain.lowered_ir().find("tma_load") == std::string::npos);
  Kernel checked = compile(all.front().func, {.device = Device::host(), .checked = true});
  CHECK(checked.lowered_ir().find("tma_load") != std::string::npos);
  CHECK(checked.lowered_ir().find("wgmma.m64n64k16") != std::string::npos);
  CHECK(run_checked(plain) < 1e-2);
}
