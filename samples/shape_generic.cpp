// One kernel for every size: Y = alpha * X + b over a (rows, cols) tile of
// any extents, a bias b along the columns. The extents are T::dim variables,
// bound from the tensors' shapes at each launch (and checked: X and Y must
// agree, b must have cols elements); alpha is a scalar parameter passed at
// launch; the grid is one CTA per row. Compiled once, run on several shapes.
#include "sample_main.hpp"

using namespace tx;

PrimFunc scale_bias_rows() {
  return T::prim_func("scale_bias_rows",
                      [&](Handle X_ptr, Handle b_ptr, Handle Y_ptr, Handle alpha_ptr) {
                        auto rows = T::dim("rows");
                        auto cols = T::dim("cols");
                        auto X = T::match_buffer(X_ptr, {rows, cols}, f32);
                        auto b = T::match_buffer(b_ptr, {cols}, f32);
                        auto Y = T::match_buffer(Y_ptr, {rows, cols}, f32);
                        auto alpha = T::match_scalar(alpha_ptr, f32);
                        T::device_entry();
                        auto row = T::cta_id({rows});  // the grid: one CTA per row, known at launch
                        auto tid = T::thread_id({256});
                        // The CTA's 256 threads stride along the row.
                        for (Var k : T::serial(ceildiv(cols, 256))) {
                          auto col = T::let(k * 256 + tid);
                          T::if_(col < cols, [&] { Y(row, col) = alpha * X(row, col) + b(col); });
                        }
                      });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, scale_bias_rows(), [](const Kernel& k) {
    double worst = 0;
    // The same compiled kernel on shapes from one element to a few rows of 10^4.
    for (auto [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 7}, {8, 256}, {17, 4097}, {5, 10007}}) {
      std::vector<double> x = sample::random(rows * cols, f32, -2, 2);
      std::vector<double> b = sample::random(cols, f32, -1, 1);
      const double alpha = 0.75;
      Tensor X = Tensor::from_doubles(x, {rows, cols}, f32, k.device());
      Tensor B = Tensor::from_doubles(b, {cols}, f32, k.device());
      Tensor Y = Tensor::empty({rows, cols}, f32, k.device());
      Y.fill_bits(0x7fc0dead);
      k(X, B, Y, alpha);
      std::vector<double> want(x.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) want[r * cols + c] = alpha * x[r * cols + c] + b[c];
      double err = sample::max_error(Y.to_doubles(), want, 1e-6, 1e-6);
      std::printf("rows %lld, cols %lld: max error %.3g\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), err);
      worst = std::max(worst, err);
    }
    return worst;
  });
}
#endif
