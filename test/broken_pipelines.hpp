// A catalogue of broken asynchronous pipelines, one bug each: the mistakes
// kernel authors report in the trackers of CUTLASS, FlashAttention, Triton
// and ThunderKittens (a stage released one step early, a missing proxy
// fence, a producer that does not wait for the consumers, a wrong phase
// parity, expect-tx bytes that do not match the copies, ...). Each is the
// same small warp-specialized GEMM as samples/gemm_hopper.cpp (one producer
// warpgroup filling a ring of TMA stages, two consumer warpgroups running
// wgmma from shared memory) with one thing changed, and each names what the
// checked host mode (TX_CHECK=1) must say about it. The correct kernels
// (`bug == none` and the fenced sync-copy kernel) must run silent and right.
//
// Shared by the CPU test (test/host_pipeline_checks.cpp) and the comparison
// with compute-sanitizer on the GPU (test/broken_pipelines.cpp,
// docs/reliability.md).
#pragma once

#include <string>
#include <vector>

#include "tx/tx.hpp"

namespace tx::test {

enum class PipelineBug {
  none,
  consumer_skips_wait,        // reads a stage without waiting for its full barrier
  consumer_wrong_parity,      // waits on the full barrier with the parity flipped
  consumer_wrong_stage,       // waits on the next stage's barrier, reads this one
  release_too_early,          // releases the stage its in-flight wgmma still reads
  accumulator_before_wait,    // stores the accumulator without the final wgmma_wait
  producer_skips_acquire,     // refills a stage without waiting for its release
  producer_wrong_parity,      // waits for the first release with parity 0
  producer_wrong_stage,       // copies into the stage after the one it acquired
  expect_tx_too_many,         // announces more bytes than its copies bring
  copy_on_wrong_barrier,      // completes a stage's copies on the other stage's barrier
  more_arrivals_than_count,   // both consumers release a barrier of count 1
  fewer_arrivals_than_count,  // a barrier of count 3 released by two consumers
  init_not_visible,           // threads use an mbarrier before the init's barrier
  named_barrier_mismatch,     // warpgroups sync one named barrier with different counts
  setmaxnreg_half_warpgroup,  // setmaxnreg by half of the producer warpgroup
  setmaxnreg_overcommit,      // consumers ask for more registers than the SM has
  unfenced_smem_operand,      // threads write a wgmma operand with no proxy fence
  fenced_smem_operand,        // the same, fenced: correct
};

struct BrokenPipeline {
  std::string name;
  PipelineBug bug;
  PrimFunc func;
  std::vector<std::string> expect;  // parts of the report (empty: must run silent)
  std::string what;                 // the bug, in words
};

namespace detail {

// C (M x N, f32) = A (M x K) B (K x N), bf16, one CTA: warpgroup 0 fills a
// ring of STAGES TMA stages, warpgroups 1 and 2 take 64 rows each.
inline PrimFunc pipeline_gemm(const std::string& name, PipelineBug bug) {
  constexpr std::int64_t M = 128, N = 64, K = 256, BK = 64, STAGES = 2, KT = K / BK;
  using B_ = PipelineBug;
  return T::prim_func(name, [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {M, K}, bf16);
    auto Bm = T::match_buffer(B_ptr, {K, N}, bf16);
    auto C = T::match_buffer(C_ptr, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto As = T::alloc_buffer({STAGES, M, BK}, bf16, scope::shared,
                              layouts::swizzled_tiles({STAGES, M, BK}, bf16));
    auto Bs = T::alloc_buffer({STAGES, BK, N}, bf16, scope::shared,
                              layouts::swizzled_tiles({STAGES, BK, N}, bf16));
    const int releases = bug == B_::more_arrivals_than_count    ? 1
                         : bug == B_::fewer_arrivals_than_count ? 3
                                                                : 2;
    auto pipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = releases});
    auto turn = T::named_barriers({.count = 1, .threads = 256});
    auto stage = [&](Value it) { return T::let(pipe.stage(it)); };
    T::if_(wg == 0,
           [&] {  // the producer
             if (bug == B_::setmaxnreg_half_warpgroup)
               T::if_(tid < 64, [&] { T::cuda::decrease_registers(40); });
             else
               T::cuda::decrease_registers(40);
             for (Var kt : T::serial(KT, "kt")) {
               if (bug == B_::producer_wrong_parity)
                 T::cuda::mbarrier_wait(pipe.empty(kt), (kt / STAGES) % 2);
               else if (bug != B_::producer_skips_acquire)
                 pipe.producer_acquire(kt);
               auto s = stage(bug == B_::producer_wrong_stage ? kt + 1 : Value(kt));
               auto bar = bug == B_::copy_on_wrong_barrier ? pipe.full(kt + 1) : pipe.full(kt);
               Tx::warpgroup::copy_async(As[region(span(s, 1), {0, M}, {0, BK})],
                                         A[region({0, M}, span(kt * BK, BK))], {.barrier = bar});
               Tx::warpgroup::copy_async(Bs[region(span(s, 1), {0, BK}, {0, N})],
                                         Bm[region(span(kt * BK, BK), {0, N})], {.barrier = bar});
               T::if_(tid == 0, [&] {
                 if (bug == B_::expect_tx_too_many)
                   T::cuda::mbarrier_expect_tx(pipe.full(kt), 1024);
                 pipe.producer_commit(kt);
               });
             }
           })
        .else_([&] {  // the consumers: 64 rows each
          T::cuda::increase_registers(bug == B_::setmaxnreg_overcommit ? 256 : 232);
          auto acc = T::alloc_buffer({64, N}, f32, scope::local, frag::wgmma_c(64, N));
          auto row0 = T::let(max(wg - 1, 0) * 64);
          Tx::warpgroup::fill(acc, 0.0f);
          for (Var kt : T::serial(KT, "kt")) {
            auto s = stage(kt);
            if (bug == B_::consumer_wrong_parity)
              T::cuda::mbarrier_wait(pipe.full(kt), (kt / STAGES + 1) % 2);
            else if (bug == B_::consumer_wrong_stage)
              pipe.consumer_wait(kt + 1);
            else if (bug != B_::consumer_skips_wait)
              pipe.consumer_wait(kt);
            Tx::warpgroup::gemm(acc, As[region(span(s, 1), span(row0, 64), {0, BK})],
                                Bs[region(span(s, 1), {0, BK}, {0, N})],
                                {.accum = true, .pending = 1});
            // This stage's MMA is in flight, the previous one's is done.
            T::if_(tid == 0, [&] {
              if (bug == B_::release_too_early)
                pipe.consumer_release(kt);
              else
                T::if_(kt > 0, [&] { pipe.consumer_release(kt - 1); });
            });
          }
          if (bug == B_::named_barrier_mismatch) {
            // Both consumer warpgroups meet before the epilogue; one counts 128.
            T::if_(wg == 1, [&] { T::cuda::named_barrier_sync(turn.id(0), 256); }).else_([&] {
              T::cuda::named_barrier_sync(turn.id(0), 128);
            });
          }
          if (bug != B_::accumulator_before_wait) T::cuda::wgmma_wait(0, acc);
          if (bug != B_::release_too_early)
            T::if_(tid == 0, [&] { pipe.consumer_release(KT - 1); });
          Tx::warpgroup::copy(C[region(span(row0, 64), {0, N})], acc);
        });
  });
}

// One producer thread signals a consumer warp through an mbarrier it set up
// itself; without the CTA barrier after the init, the others may use the
// barrier before the init is visible to them.
inline PrimFunc init_race(const std::string& name) {
  return T::prim_func(name, [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto t = T::thread_id({64});
    auto S = T::alloc_buffer({64}, f32, scope::shared);
    auto bar = T::alloc_buffer({1}, u64, scope::shared);
    T::if_(t == 0, [&] { T::cuda::mbarrier_init(bar(0), 32); });
    // (missing: T::cuda::fence_barrier_init(); T::cuda::cta_sync();)
    T::if_(t < 32, [&] {
      S(t) = A(t) * 2.0f;
      T::cuda::mbarrier_arrive(bar(0));
    }).else_([&] {
      T::cuda::mbarrier_wait(bar(0), 0);
      A(t) = S(t - 32);
    });
  });
}

// Warpgroup 0 writes the wgmma's operands into shared memory with ordinary
// stores, then the whole warpgroup runs the MMA: the writes reach the
// asynchronous proxy only through fence.proxy.async.
inline PrimFunc sync_copy_gemm(const std::string& name, bool fenced) {
  constexpr std::int64_t M = 64, N = 64, K = 64;
  return T::prim_func(name, [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {M, K}, bf16);
    auto Bm = T::match_buffer(B_ptr, {K, N}, bf16);
    auto C = T::match_buffer(C_ptr, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::warpgroup_id({1});
    T::thread_id_in_wg({128});
    auto As = T::alloc_buffer({M, K}, bf16, scope::shared, layouts::swizzled_tiles({M, K}, bf16));
    auto Bs = T::alloc_buffer({K, N}, bf16, scope::shared, layouts::swizzled_tiles({K, N}, bf16));
    auto acc = T::alloc_buffer({M, N}, f32, scope::local, frag::wgmma_c(M, N));
    Tx::warpgroup::copy(As, A);
    Tx::warpgroup::copy(Bs, Bm);
    if (fenced) T::cuda::fence_proxy_async();
    T::cuda::warpgroup_sync();
    Tx::warpgroup::gemm(acc, As, Bs);
    Tx::warpgroup::copy(C, acc);
  });
}

}  // namespace detail

inline std::vector<BrokenPipeline> broken_pipelines() {
  using B_ = PipelineBug;
  std::vector<BrokenPipeline> out;
  auto gemm = [&](std::string name, B_ bug, std::vector<std::string> expect, std::string what) {
    out.push_back({name, bug, detail::pipeline_gemm("pipe_" + name, bug), std::move(expect),
                   std::move(what)});
  };
  gemm("correct", B_::none, {}, "the correct pipeline");
  gemm("consumer_skips_wait", B_::consumer_skips_wait,
       {"race on shared memory", "the TMA unit of pipe_full[", "the wgmma unit of warpgroup",
        "valid only once the mbarrier phase"},
       "a consumer reads a stage without waiting for its full barrier");
  gemm("consumer_wrong_parity", B_::consumer_wrong_parity,
       {"deadlock", "pipe_full[0] for the phase of parity 1", "wgmma is .sync.aligned"},
       "a consumer waits on the full barrier with the parity flipped: it passes at once for "
       "some threads of a warpgroup and not for others");
  gemm("consumer_wrong_stage", B_::consumer_wrong_stage,
       {"race on shared memory", "the TMA unit of pipe_full[0]",
        "valid only once the mbarrier phase"},
       "a consumer waits for the next stage's barrier and reads this stage");
  gemm("release_too_early", B_::release_too_early,
       {"the wgmma unit of warpgroup", "until a wgmma_wait retires it"},
       "a consumer releases the stage its in-flight wgmma (pending = 1) still reads");
  gemm("accumulator_before_wait", B_::accumulator_before_wait,
       {"the wgmma accumulator acc", "before a wgmma_wait retires"},
       "the epilogue stores the accumulator without the final wgmma_wait");
  gemm("producer_skips_acquire", B_::producer_skips_acquire,
       {"deadlock", "pipe_full[0]", "the barrier ran past it"},
       "the producer refills a stage without waiting for the consumers' release");
  gemm("producer_wrong_parity", B_::producer_wrong_parity,
       {"deadlock", "pipe_empty[0]", "parity 0"},
       "the producer waits for the first release with parity 0 (it never comes)");
  gemm("producer_wrong_stage", B_::producer_wrong_stage,
       {"race on shared memory", "the TMA unit of pipe_full["},
       "the producer copies into the stage after the one it acquired");
  gemm("expect_tx_too_many", B_::expect_tx_too_many,
       {"deadlock", "expect_tx announced", "they do not match"},
       "the producer announces 1024 bytes more than its TMA copies bring");
  gemm("copy_on_wrong_barrier", B_::copy_on_wrong_barrier,
       {"race on shared memory", "the TMA unit of pipe_full[1] (the copy of phase 0)"},
       "a stage's TMA copies complete on the other stage's barrier");
  gemm("more_arrivals_than_count", B_::more_arrivals_than_count,
       {"deadlock", "pipe_empty[0]", "more arrivals than its count"},
       "two consumer warpgroups release an empty barrier initialized for one");
  gemm("fewer_arrivals_than_count", B_::fewer_arrivals_than_count,
       {"deadlock", "pipe_empty[0]", "arrivals pending"},
       "an empty barrier initialized for three arrivals, released by two consumers");
  out.push_back({"init_not_visible",
                 B_::init_not_visible,
                 detail::init_race("pipe_init_race"),
                 {"before its initialization by thread 0"},
                 "threads use an mbarrier before the init's CTA barrier"});
  gemm("named_barrier_mismatch", B_::named_barrier_mismatch, {"named barrier", "counts"},
       "two warpgroups sync one named barrier, counting 256 and 128 threads");
  gemm("setmaxnreg_half_warpgroup", B_::setmaxnreg_half_warpgroup,
       {"setmaxnreg 40 was executed by 64 of warpgroup 0's 128 threads", ".sync.aligned"},
       "half of the producer warpgroup calls setmaxnreg");
  gemm("setmaxnreg_overcommit", B_::setmaxnreg_overcommit,
       {"setmaxnreg.inc to 256", "more than the SM's 65536"},
       "the consumers increase to 256 registers each: 40 x 128 + 256 x 256 > 65536");
  out.push_back({"unfenced_smem_operand",
                 B_::unfenced_smem_operand,
                 detail::sync_copy_gemm("pipe_unfenced_operand", false),
                 {"missing proxy fence", "fence.proxy.async"},
                 "threads write the wgmma's operands with ordinary stores, no proxy fence"});
  out.push_back({"fenced_smem_operand",
                 B_::fenced_smem_operand,
                 detail::sync_copy_gemm("pipe_fenced_operand", true),
                 {},
                 "the same with the fence: correct"});
  return out;
}

}  // namespace tx::test
