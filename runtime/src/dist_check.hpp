// The checked host mode across ranks: what the checker of one rank's launch
// needs to know about the other ranks' accesses to symmetric memory
// (Group::run_local host ranks: threads of this process, symmetric memory
// host memory every rank addresses).
//
// Ordering across ranks is by T::dist::signal / wait_until and by host-side
// rendezvous (Group::barrier, the collective calls that use it), modelled
// as the PTX memory model states it: a wait that returns having seen a
// value synchronizes with the signal that first made the flag reach it (a
// wait for a value the flag already held orders nothing); a signal
// publishes what the signalling thread wrote or observed before it (the
// rest of its CTA's writes only through a barrier before the signal).
//
// What a thread knows of other ranks (Knowledge) rides on the checker's
// vector clocks: it is joined at barriers and mbarrier phases like the
// CTA's own clocks. An access to symmetric memory is recorded per element
// address here, shared by all ranks: (rank, launch, CTA, thread, its clock,
// the site); a later access by another rank must know the earlier one
// (through a chain of signals and waits), else both are reported with their
// ranks, ops and lines. Accesses of one rank are ordered by that rank's
// stream (launches one after another) and within a launch by the checker
// itself.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tx::runtime::host {

// A CTA of one launch of one rank.
struct CtaKey {
  static std::uint64_t of(int rank, std::uint32_t launch, std::int64_t cta) {
    return static_cast<std::uint64_t>(rank) << 56 | static_cast<std::uint64_t>(launch) << 24 |
           (static_cast<std::uint64_t>(cta) & 0xffffff);
  }
};

// What one actor knows of other ranks: every launch of rank s before
// horizon[s] entirely (a host rendezvous came after them), and the clocks of
// individual CTAs' actors that signals carried.
struct Knowledge {
  std::vector<std::uint32_t> horizon;
  std::map<std::uint64_t, std::vector<std::uint32_t>> ctas;
  void join(const Knowledge& o);
  bool empty() const { return horizon.empty() && ctas.empty(); }
};

// The rank this thread runs (set by Group::run_local on host ranks).
struct DistRank {
  const void* world = nullptr;
  int rank = 0;
  int size = 1;
};
const DistRank* current_dist_rank();
class DistRankScope {
 public:
  DistRankScope(const void* world, int rank, int size);
  ~DistRankScope();
  DistRankScope(const DistRankScope&) = delete;
  DistRankScope& operator=(const DistRankScope&) = delete;

 private:
  const DistRank* previous_;
  DistRank mine_;
};

// Called by the group (runtime/src/dist.cpp).
void dist_check_register(const void* world, int rank, const void* base, std::size_t bytes);
void dist_check_rendezvous(const void* world);  // every rank is at a host barrier
void dist_check_end_world(const void* world);   // forget its memory and flags

// Called by the checker (checked_mode.cpp), for the rank of this thread.
std::uint32_t dist_check_begin_launch(const DistRank& r, Knowledge* carried);
void dist_check_end_launch(const DistRank& r, const Knowledge& learned);

struct DistAccess {
  int rank = -1;
  std::uint32_t launch = 0;
  std::int64_t cta = 0;
  int actor = 0;
  std::uint32_t clock = 0;
  bool write = false;
  int site = -1;  // dist_check_site's
};
int dist_check_site(const std::string& text);  // interned: "T.store Buf at f.cpp:12"
// Records `a` at every element of [addr, addr + count * elem_bytes) and
// returns the earlier accesses it is not ordered after (`ordered` decides),
// each with the element's owner rank and index.
struct DistConflict {
  DistAccess first;
  int owner = -1;
  std::int64_t element = 0;
};
std::vector<DistConflict> dist_check_access(const DistRank& r, const void* addr, std::int64_t count,
                                            int elem_bytes, const DistAccess& a,
                                            bool (*ordered)(const DistAccess&, const void*),
                                            const void* who);
std::string dist_check_site_text(int site);

// Flags: a signal stores (or adds) the value and records what it publishes;
// a wait's acquire returns what the first signal to reach `value` published.
void dist_check_signal(const DistRank& r, std::uint32_t* flag, std::uint32_t value, bool add,
                       const Knowledge& published);
bool dist_check_acquire(const DistRank& r, const std::uint32_t* flag, std::uint32_t value,
                        Knowledge* into);

}  // namespace tx::runtime::host
