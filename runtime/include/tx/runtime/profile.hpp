// What a profiled launch recorded (T::profile regions, CompileOptions::profile
// or TX_PROFILE=1): per warp, a slice for each pass through each region.
//
// On the GPU each warp's first active lane reads %globaltimer (ns) and the
// SM id when it enters and leaves a region; on the host each warp's first
// thread to reach a region records a logical step (the host's order of
// events, not its time). Kernel::last_profile() returns the last launch's.
//
//   Kernel k = tx::compile(f, {.profile = true});
//   k(A, B, C);
//   tx::KernelProfile p = *k.last_profile();
//   p.write("gemm");               // gemm.trace.json (chrome://tracing, ui.perfetto.dev), gemm.svg
//   std::cout << p.summary();      // time per region and warpgroup, idle gaps
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tx {

struct ProfileSlice {
  std::int32_t region = 0;    // index into KernelProfile::regions
  std::int64_t cta = 0;       // linear CTA id (x fastest)
  std::int32_t warp = 0;      // warp of the CTA
  std::int32_t sm = -1;       // the SM (GPU), -1 on the host
  double begin = 0, end = 0;  // in KernelProfile::unit, from the launch's first record
  std::int32_t depth = 0;     // nesting level (regions inside regions)
};

struct KernelProfile {
  std::string kernel;
  std::string unit;  // "us" (GPU: %globaltimer) or "steps" (host: logical order)
  std::vector<std::string> regions;
  std::int32_t warps_per_cta = 1;
  std::int64_t ctas = 0;
  std::vector<ProfileSlice> slices;
  std::int64_t dropped = 0;  // records past a warp's capacity (GPU), not in slices

  // Chrome trace event format (JSON): one process per SM (host: per CTA),
  // one thread per CTA and warp, an "X" slice per pass through a region.
  std::string chrome_trace() const;
  // A table: per region and warpgroup, passes, total and mean time, and each
  // warpgroup's idle share (its span minus its top-level regions).
  std::string summary() const;
  // A timeline picture of the first `max_ctas` CTAs: a row per warp, a
  // colored bar per slice, a legend.
  std::string svg(int max_ctas = 4) const;
  // The same timeline as a PNG (the file's bytes): a row of `row_px` pixels
  // per warp, `width` pixels of time, the regions in the SVG's colours.
  std::string png(int max_ctas = 4, int width = 1000, int row_px = 8) const;
  // The same profile limited to its first `n` CTAs (a smaller trace to keep
  // or show; the summary of a few CTAs).
  KernelProfile first_ctas(std::int64_t n) const;
  // Writes PREFIX.trace.json, PREFIX.svg and PREFIX.png; returns the trace's path.
  std::string write(const std::string& prefix) const;
};

}  // namespace tx
