// The package test's consumer: builds a kernel with the installed headers,
// prints its IR and CUDA, and -- where there is a GPU or the host JIT -- runs
// it and an operator-library op, and checks the results.
// Exit: 0 pass (or nothing to run on), 1 wrong result, 2 tx error.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <tx/ops/ops.hpp>
#include <tx/tx.hpp>
#include <vector>

using namespace tx;

// y = 2x + 1 over a 4x64 tile: one CTA per row, one thread per column.
PrimFunc axpb() {
  return T::prim_func("axpb", [&](Handle X_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {4, 64}, f32);
    auto Y = T::match_buffer(Y_ptr, {4, 64}, f32);
    T::device_entry();
    auto row = T::cta_id({4});
    auto col = T::thread_id({64});
    Y(row, col) = X(row, col) * 2.0f + 1.0f;
  });
}

int main() {
  try {
    PrimFunc f = axpb();
    std::cout << "== the kernel as written\n" << f;
    Kernel k = compile(f);
    std::cout << "== CUDA\n" << k.cuda_source();

    std::string why;
    if (!k.device().is_cuda() && !runtime::host_jit_available(&why)) {
      std::cout << "not run: no GPU and no host JIT (" << why << ")\n";
      return 0;
    }
    std::vector<double> x(4 * 64);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.25 * static_cast<double>(i) - 7.0;
    Tensor X = Tensor::from_doubles(x, {4, 64}, f32, k.device());
    Tensor Y = Tensor::empty({4, 64}, f32, k.device());
    k(X, Y);
    Tensor Z = ops::add(Y, X);  // the operator library: z = 3x + 1
    std::vector<double> y = Y.to_doubles(), z = Z.to_doubles();
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::fabs(y[i] - (2 * x[i] + 1)));
      worst = std::max(worst, std::fabs(z[i] - (3 * x[i] + 1)));
    }
    std::printf("ran axpb and ops::add on %s: max error %g -> %s\n", k.device().str().c_str(),
                worst, worst == 0 ? "PASS" : "FAIL");
    return worst == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
