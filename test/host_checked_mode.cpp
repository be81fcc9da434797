// The checked host mode's race detector keys global memory by address, not
// by buffer (issue 45): two parameters bound to one tensor, to overlapping
// views of one storage, or to overlapping from_blob memory race like any two
// accesses to one element, and the report names both parameters; parameters
// that share a storage without sharing bytes stay clean and compute what the
// unchecked kernel computes.
#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Runs `k` checked; returns the error's text, or "" when the run was clean.
std::string checked_run(const Kernel& k, const std::vector<Tensor>& args,
                        std::optional<Error>* out = nullptr) {
  REQUIRE(k.checked());
  try {
    k.launch(args);
  } catch (const Error& e) {
    if (out) out->emplace(e);
    return e.what();
  }
  return "";
}

// A failure prints the whole report.
#define CHECK_HAS(text, part) CHECK_MESSAGE((text).find(part) != std::string::npos, (text))

// B(t) = A(63 - t): thread t reads what thread 63 - t writes when A and B
// are one memory.
PrimFunc reverse_kernel() {
  return T::prim_func("reverse", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto t = T::thread_id({64});
    B(t) = A(63 - t) * 2.0f;
  });
}

// B(t) = A(t) + 1: each thread reads and writes only its own element, so
// A and B may be one memory (an in-place update) without a race.
PrimFunc in_place_kernel() {
  return T::prim_func("add_one", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto t = T::thread_id({64});
    B(t) = A(t) + 1.0f;
  });
}

Tensor random_host(std::int64_t n, DType t = f32) {
  return Tensor::from_doubles(test::random_values(static_cast<std::size_t>(n), t, -4, 4), {n}, t,
                              Device::host());
}

}  // namespace

TEST_CASE("one tensor bound to two parameters: the race is found and names both") {
  Kernel k = compile(reverse_kernel(), {.checked = true});
  Tensor X = random_host(64);
  std::optional<Error> e;
  std::string r = checked_run(k, {X, X}, &e);
  // Threads run in order; thread 32 is the first to read (A[31]) what an
  // earlier thread wrote (thread 31, B[31]): the same element.
  CHECK_HAS(r, "launch reverse");
  CHECK_HAS(r,
            "race on global memory shared by arguments B and A (B[31] overlaps A[31]) in CTA "
            "0: thread 31 writes B[31] (T.store at test/host_checked_mode.cpp:");
  CHECK_HAS(r, "and thread 32 reads A[31] (T.load at test/host_checked_mode.cpp:");
  CHECK_HAS(r, "with no barrier of both threads between");
  // ... and thread 32 writes B[32] after thread 31 read it as A[32].
  CHECK_HAS(r,
            "race on global memory shared by arguments A and B (A[32] overlaps B[32]) in CTA "
            "0: thread 31 reads A[32] (T.load at test/host_checked_mode.cpp:");
  // Threads 32..63 read what threads 31..0 wrote, and write what they read:
  // 64 problems at two places (a site pair each way).
  CHECK_HAS(r, "found 64 problems at 2 distinct places");
  CHECK_HAS(r, "[32 times]");
  REQUIRE(e);
  CHECK(e->operand() == "A");
  CHECK(e->op() == "launch reverse");

  // The same kernel on two tensors is clean and computes the reversal.
  Tensor A = random_host(64), B = random_host(64);
  B.fill_bits(test::poison_bits(f32));
  CHECK(checked_run(k, {A, B}) == "");
  std::vector<double> a = A.to_doubles(), b = B.to_doubles();
  for (int i = 0; i < 64; ++i) CHECK(b[i] == 2.0 * a[63 - i]);
}

TEST_CASE("one tensor bound twice where each thread keeps to its element is not a race") {
  Kernel checked = compile(in_place_kernel(), {.checked = true});
  Kernel plain = compile(in_place_kernel(), {.device = Device::host(), .checked = false});
  std::vector<double> v = test::random_values(64, f32, -4, 4);
  Tensor X = Tensor::from_doubles(v, {64}, f32, Device::host());
  Tensor Y = Tensor::from_doubles(v, {64}, f32, Device::host());
  CHECK(checked_run(checked, {X, X}) == "");
  plain.launch({Y, Y});
  std::vector<double> x = X.to_doubles();
  for (int i = 0; i < 64; ++i) CHECK(x[i] == static_cast<double>(static_cast<float>(v[i] + 1.0)));
  CHECK(X.to_bytes() == Y.to_bytes());
}

TEST_CASE("overlapping views of one storage race; disjoint views of it do not") {
  Kernel k = compile(in_place_kernel(), {.checked = true});
  Tensor X = random_host(160);
  // A = X[0:64], B = X[32:96]: thread t writes B[t] = X[32 + t], which
  // thread 32 + t reads as A[32 + t].
  Tensor A = X.slice(0, 0, 64), B = X.slice(0, 32, 96);
  REQUIRE(A.is_contiguous());
  REQUIRE(B.is_contiguous());
  std::string r = checked_run(k, {A, B});
  CHECK_HAS(r,
            "race on global memory shared by arguments B and A (B[0] overlaps A[32]) in CTA 0: "
            "thread 0 writes B[0]");
  CHECK_HAS(r, "and thread 32 reads A[32] (T.load at test/host_checked_mode.cpp:");
  CHECK_HAS(r, "[32 times]");

  // X[0:64] and X[96:160] share the storage but no byte: clean, and correct.
  std::vector<double> before = X.to_doubles();
  Tensor C = X.slice(0, 0, 64), D = X.slice(0, 96, 160);
  CHECK(checked_run(k, {C, D}) == "");
  std::vector<double> after = X.to_doubles();
  for (int i = 0; i < 64; ++i) {
    CHECK(after[static_cast<std::size_t>(96 + i)] ==
          static_cast<double>(static_cast<float>(before[static_cast<std::size_t>(i)] + 1.0)));
    CHECK(after[static_cast<std::size_t>(i)] == before[static_cast<std::size_t>(i)]);
  }
  // Adjacent views (C ends where D begins) do not overlap either.
  CHECK(checked_run(k, {X.slice(0, 0, 64), X.slice(0, 64, 128)}) == "");
}

TEST_CASE("two overlapping from_blob tensors over one host array race") {
  Kernel k = compile(in_place_kernel(), {.checked = true});
  std::vector<float> mem(96);
  for (float& x : mem) x = static_cast<float>(test::random_values(1, f32, -4, 4)[0]);
  // A over mem[0:64], B over mem[16:80].
  Tensor A = Tensor::from_blob(mem.data(), {64}, f32, Device::host());
  Tensor B = Tensor::from_blob(mem.data() + 16, {64}, f32, Device::host());
  std::string r = checked_run(k, {A, B});
  CHECK_HAS(r,
            "race on global memory shared by arguments B and A (B[0] overlaps A[16]) in CTA 0: "
            "thread 0 writes B[0]");
  CHECK_HAS(r, "thread 16 reads A[16]");
  CHECK_HAS(r, "[48 times]");

  // Blobs of different dtypes over the same bytes: A f32 (64,) and B u8
  // (256,). Thread t reads A[63 - t] and writes byte 4t (inside A[t]): the
  // byte thread 31 writes is inside A[31], which thread 32 reads.
  auto bytes = T::prim_func("bytes", [&](Handle A_ptr, Handle B_ptr) {
    auto A2 = T::match_buffer(A_ptr, {64}, f32);
    auto B2 = T::match_buffer(B_ptr, {256}, u8);
    auto t = T::thread_id({64});
    Var v = T::let(A2(63 - t));
    B2(t * 4) = cast(v > 0.0f, u8);
  });
  Kernel kb = compile(bytes, {.checked = true});
  Tensor F = Tensor::from_blob(mem.data(), {64}, f32, Device::host());
  Tensor U = Tensor::from_blob(mem.data(), {256}, u8, Device::host());
  r = checked_run(kb, {F, U});
  CHECK_HAS(r,
            "race on global memory shared by arguments B2 and A2 (B2[124] overlaps A2[31]) in "
            "CTA 0: thread 31 writes B2[124]");
  CHECK_HAS(r, "thread 32 reads A2[31]");
  // A byte written inside A2[t] races with one read (thread 63 - t's), and
  // each is reported once per element read, not once per byte of it.
  CHECK_HAS(r, "found 64 problems at 2 distinct places");
}

TEST_CASE("an argument written by one CTA and read through another argument by the next races") {
  // CTA c writes B[c * 32 + t] and reads A[c * 32 + t + 32]: with B = A,
  // CTA 0 reads what CTA 1 writes.
  auto f = T::prim_func("shift", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {128}, f32);
    auto B = T::match_buffer(B_ptr, {96}, f32);
    auto c = T::cta_id({3});
    auto t = T::thread_id({32});
    B(c * 32 + t) = A(c * 32 + t + 32) - 1.0f;
  });
  Kernel k = compile(f, {.checked = true});
  Tensor X = random_host(128);
  std::string r = checked_run(k, {X, X.slice(0, 0, 96)});
  CHECK_HAS(r,
            "race across CTAs on memory shared by arguments A and B (A[32] overlaps B[32]): "
            "CTA 0 reads A[32]");
  CHECK_HAS(r, "and CTA 1 writes B[32]");
  // Distinct tensors: clean, and the values are right.
  Tensor A = random_host(128), B = random_host(96);
  B.fill_bits(test::poison_bits(f32));
  CHECK(checked_run(k, {A, B}) == "");
  std::vector<double> a = A.to_doubles(), b = B.to_doubles();
  for (int i = 0; i < 96; ++i)
    CHECK(b[static_cast<std::size_t>(i)] ==
          static_cast<double>(static_cast<float>(a[static_cast<std::size_t>(i + 32)] - 1.0)));
}
