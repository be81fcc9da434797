// Softmax over the rows of a (64, 256) f32 matrix, a warp per row, written
// the way the algorithm reads: the row as a register tile spread over the
// warp's lanes (lane i holds columns [8i, 8i + 8)); its max, by the shuffle
// butterfly, into a copy in every lane; x - max; exp; the sum, the same way;
// a multiply by 1 / sum. Every step is a warp tile primitive.
#include "sample_main.hpp"

using namespace tx;

PrimFunc softmax_rows() {
  constexpr int kRows = 64, kPerLane = 8;                          // 256 columns
  auto row_tile = TileLayout(S({32, kPerLane}, {1 * laneid, 1}));  // lane i: row i of the tile
  auto every_lane = TileLayout(S({1}), R({32}, {1 * laneid}));     // one value, in every lane
  auto whole_row = [](const Var& r) { return region(span(r, 1), {0, 32}, {0, kPerLane}); };
  return T::prim_func("softmax_rows", [&](Handle X_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {kRows, 32, kPerLane}, f32);
    auto Y = T::match_buffer(Y_ptr, {kRows, 32, kPerLane}, f32);
    T::device_entry();
    auto r = T::cta_id({kRows});  // a CTA of one warp per row
    T::lane_id({32});
    T::thread_id({32});
    auto x = T::alloc_buffer({32, kPerLane}, f32, scope::local, row_tile);
    auto row_max = T::alloc_buffer({1}, f32, scope::local, every_lane);
    auto row_sum = T::alloc_buffer({1}, f32, scope::local, every_lane);
    Tx::warp::copy(x, X[whole_row(r)]);
    Tx::warp::max(row_max, x, {.axes = {0, 1}});
    Tx::warp::sub(x, x, row_max(0));  // every lane reads its own copy of the max
    Tx::warp::exp(x, x);
    Tx::warp::sum(row_sum, x, {.axes = {0, 1}});
    Tx::warp::mul(x, x, 1.0f / row_sum(0));
    Tx::warp::copy(Y[whole_row(r)], x);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, softmax_rows(), [](const Kernel& k) {
    std::vector<double> x = sample::random(64 * 256, f32, -8.0, 8.0);
    Tensor X = Tensor::from_doubles(x, {64, 32, 8}, f32, k.device());
    Tensor Y = Tensor::empty({64, 32, 8}, f32, k.device());
    Y.fill_bits(0x7fc0dead);
    k(X, Y);
    std::vector<double> want(x.size());
    for (std::size_t r = 0; r < 64; ++r) {
      double m = -1e300, s = 0;
      for (std::size_t i = 0; i < 256; ++i) m = std::max(m, x[r * 256 + i]);
      for (std::size_t i = 0; i < 256; ++i) s += std::exp(x[r * 256 + i] - m);
      for (std::size_t i = 0; i < 256; ++i) want[r * 256 + i] = std::exp(x[r * 256 + i] - m) / s;
    }
    return sample::max_error(Y.to_doubles(), want, 0, 1e-5);
  });
}
#endif
