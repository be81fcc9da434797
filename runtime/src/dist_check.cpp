// The checked host mode's record of accesses across ranks: see dist_check.hpp.
#include "dist_check.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace tx::runtime::host {

void Knowledge::join(const Knowledge& o) {
  if (horizon.size() < o.horizon.size()) horizon.resize(o.horizon.size(), 0);
  for (std::size_t i = 0; i < o.horizon.size(); ++i)
    horizon[i] = std::max(horizon[i], o.horizon[i]);
  for (const auto& [key, clock] : o.ctas) {
    std::vector<std::uint32_t>& mine = ctas[key];
    if (mine.size() < clock.size()) mine.resize(clock.size(), 0);
    for (std::size_t i = 0; i < clock.size(); ++i) mine[i] = std::max(mine[i], clock[i]);
  }
  // CTAs of launches the horizon covers say nothing more: dropped, so that
  // what a rank knows stays small over many calls.
  std::erase_if(ctas, [&](const auto& e) {
    const auto rank = static_cast<std::size_t>(e.first >> 56);
    const auto launch = static_cast<std::uint32_t>(e.first >> 24);
    return rank < horizon.size() && launch < horizon[rank];
  });
}

namespace {

thread_local const DistRank* t_rank = nullptr;

struct Cell {
  const void* world = nullptr;
  DistAccess write;
  DistAccess reads[2];
};
struct FlagRecord {
  std::uint32_t value;
  Knowledge published;
};
struct Flag {
  const void* world = nullptr;
  std::uint32_t initial = 0;        // the value before the first record's signal
  std::vector<FlagRecord> records;  // in the order of the signals
};
struct Block {
  const void* world;
  int rank;
  std::uintptr_t lo, hi;
};
struct World {
  std::vector<std::uint32_t> launches;  // per rank: launches begun
  std::vector<Knowledge> carried;       // per rank: what its next launch starts knowing
};

struct Registry {
  std::mutex mu;
  std::unordered_map<std::uintptr_t, Cell> cells;
  std::unordered_map<std::uintptr_t, Flag> flags;
  std::vector<Block> blocks;
  std::map<const void*, World> worlds;
  std::vector<std::string> sites;
  std::map<std::string, int> site_ids;

  World& world(const DistRank& r) {
    World& w = worlds[r.world];
    if (w.launches.size() < static_cast<std::size_t>(r.size)) {
      w.launches.resize(static_cast<std::size_t>(r.size), 0);
      w.carried.resize(static_cast<std::size_t>(r.size));
    }
    return w;
  }
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// Signals kept per flag: a wait looks for the first that reached its value,
// and waits are for recent values (epochs grow).
constexpr std::size_t kFlagRecords = 64;

}  // namespace

const DistRank* current_dist_rank() { return t_rank; }
DistRankScope::DistRankScope(const void* world, int rank, int size)
    : previous_(t_rank), mine_{world, rank, size} {
  t_rank = &mine_;
}
DistRankScope::~DistRankScope() { t_rank = previous_; }

void dist_check_register(const void* world, int rank, const void* base, std::size_t bytes) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  g.blocks.push_back({world, rank, lo, lo + bytes});
}

void dist_check_rendezvous(const void* world) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.worlds.find(world);
  if (it == g.worlds.end()) return;
  World& w = it->second;
  // Every launch so far of every rank has finished (host launches return
  // when done) and happens before what any rank does next.
  Knowledge all;
  for (const Knowledge& k : w.carried) all.join(k);
  all.horizon = w.launches;
  all.ctas.clear();  // covered by the horizon
  for (Knowledge& k : w.carried) k = all;
}

void dist_check_end_world(const void* world) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  std::erase_if(g.cells, [&](const auto& e) { return e.second.world == world; });
  std::erase_if(g.flags, [&](const auto& e) { return e.second.world == world; });
  std::erase_if(g.blocks, [&](const Block& b) { return b.world == world; });
  g.worlds.erase(world);
}

std::uint32_t dist_check_begin_launch(const DistRank& r, Knowledge* carried) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  World& w = g.world(r);
  *carried = w.carried[static_cast<std::size_t>(r.rank)];
  return w.launches[static_cast<std::size_t>(r.rank)]++;
}

void dist_check_end_launch(const DistRank& r, const Knowledge& learned) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  g.world(r).carried[static_cast<std::size_t>(r.rank)].join(learned);
}

int dist_check_site(const std::string& text) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  auto [it, fresh] = g.site_ids.emplace(text, static_cast<int>(g.sites.size()));
  if (fresh) g.sites.push_back(text);
  return it->second;
}
std::string dist_check_site_text(int site) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  return site >= 0 && static_cast<std::size_t>(site) < g.sites.size()
             ? g.sites[static_cast<std::size_t>(site)]
             : std::string("?");
}

std::vector<DistConflict> dist_check_access(const DistRank& r, const void* addr, std::int64_t count,
                                            int elem_bytes, const DistAccess& a,
                                            bool (*ordered)(const DistAccess&, const void*),
                                            const void* who) {
  Registry& g = registry();
  std::vector<DistConflict> out;
  std::lock_guard<std::mutex> lock(g.mu);
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  // The owner of the memory: a registered symmetric copy (else not checked:
  // memory of this rank alone is the local checker's).
  const Block* owner = nullptr;
  for (const Block& b : g.blocks)
    if (b.world == r.world && base >= b.lo && base < b.hi) owner = &b;
  if (!owner) return out;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::uintptr_t at = base + static_cast<std::uintptr_t>(k * elem_bytes);
    Cell& c = g.cells[at];
    c.world = r.world;
    const std::int64_t element = static_cast<std::int64_t>(at - owner->lo) / elem_bytes;
    auto conflict = [&](const DistAccess& first) {
      if (first.rank >= 0 && !ordered(first, who)) out.push_back({first, owner->rank, element});
    };
    conflict(c.write);
    if (a.write) {
      for (const DistAccess& rd : c.reads) conflict(rd);
      c.write = a;
      c.reads[0] = c.reads[1] = DistAccess{};
    } else if (c.reads[0].rank < 0 || ordered(c.reads[0], who)) {
      c.reads[0] = a;  // the earlier read is ordered before this one: this one stands for both
    } else if (c.reads[1].rank < 0 || ordered(c.reads[1], who)) {
      c.reads[1] = a;
    } else {
      c.reads[1] = c.reads[0];
      c.reads[0] = a;
    }
  }
  return out;
}

void dist_check_signal(const DistRank& r, std::uint32_t* flag, std::uint32_t value, bool add,
                       const Knowledge& published) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  auto [fit, fresh] = g.flags.try_emplace(reinterpret_cast<std::uintptr_t>(flag));
  Flag& f = fit->second;
  f.world = r.world;
  if (fresh) f.initial = __atomic_load_n(flag, __ATOMIC_SEQ_CST);
  std::uint32_t now = value;
  FlagRecord rec{0, published};
  if (add) {
    now = __atomic_load_n(flag, __ATOMIC_SEQ_CST) + value;
    // A release RMW continues the release sequence: a wait that reads the
    // sum synchronizes with every add since the last store.
    if (!f.records.empty()) rec.published.join(f.records.back().published);
  }
  rec.value = now;
  if (f.records.size() >= kFlagRecords) {
    f.initial = f.records.front().value;
    f.records.erase(f.records.begin());
  }
  f.records.push_back(std::move(rec));
  // Recorded before the store: a waiter that sees the value finds the record.
  __atomic_store_n(flag, now, __ATOMIC_SEQ_CST);
}

bool dist_check_acquire(const DistRank& r, const std::uint32_t* flag, std::uint32_t value,
                        Knowledge* into) {
  Registry& g = registry();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.flags.find(reinterpret_cast<std::uintptr_t>(flag));
  if (it == g.flags.end() || it->second.world != r.world) return false;
  // A value the flag held before any recorded signal needs none: the wait
  // orders nothing (a wait for the wrong value, or a flag set by the host).
  if (static_cast<std::int32_t>(it->second.initial - value) >= 0) return false;
  for (const FlagRecord& rec : it->second.records)
    if (static_cast<std::int32_t>(rec.value - value) >= 0) {
      into->join(rec.published);
      return true;
    }
  return false;
}

}  // namespace tx::runtime::host
