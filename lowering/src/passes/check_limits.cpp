// check_limits: the kernel's shared memory per CTA and register (local)
// storage per thread against the target's limits, when the kernel is
// compiled rather than when it is launched -- the host fallback would
// otherwise run a kernel no GPU can (4 GiB of shared memory), or overflow its
// own stack on a huge register tile.
//
// The limits are the hardware's (CUDA programming guide, "Technical
// Specifications per Compute Capability"): the opt-in shared memory per
// block, and 512 KiB of local memory per thread. Without an architecture
// (compiled for the host, or before a GPU is chosen) the largest of the
// table applies: a kernel above it runs on no GPU.
#include <algorithm>
#include <cctype>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

TargetLimits target_limits(const std::string& arch) {
  // Opt-in shared memory per block, by compute capability.
  struct Row {
    int cc;
    std::int64_t shared;
  };
  static const Row rows[] = {{70, 96 * 1024},  {75, 64 * 1024},   {80, 163 * 1024},
                             {86, 99 * 1024},  {87, 163 * 1024},  {89, 99 * 1024},
                             {90, 227 * 1024}, {100, 227 * 1024}, {120, 99 * 1024}};
  TargetLimits l;
  l.local_bytes_per_thread = 512 * 1024;
  l.arch = arch;
  int cc = 0;
  if (arch.rfind("sm_", 0) == 0 || arch.rfind("compute_", 0) == 0) {
    std::size_t i = arch.find('_') + 1;
    while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])))
      cc = cc * 10 + (arch[i++] - '0');
  }
  const Row* best = nullptr;
  for (const Row& r : rows)
    if (r.cc <= cc) best = &r;  // the newest row at or below this arch
  if (cc == 0 || !best) {
    l.arch = "sm_90";  // unknown or none: the largest limit any GPU has
    l.shared_bytes_per_cta = 227 * 1024;
  } else {
    l.shared_bytes_per_cta = best->shared;
  }
  return l;
}

namespace {
std::string kib(std::int64_t bytes) {
  return bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB"
                           : std::to_string(bytes) + " bytes";
}
}  // namespace

// The shared memory the kernel's own T::alloc_buffer calls take (each
// buffer aligned as lower() places it), without what variants add.
std::int64_t declared_shared_bytes(const LoweredKernel& k) {
  std::int64_t declared = 0;
  for_each_stmt(k.source->body, [&](const Stmt& s) {
    auto* a = s.as<AllocateNode>();
    if (!a || a->buffer->scope != MemScope::shared) return;
    const std::int64_t align = shared_alignment(a->buffer);
    declared = (declared + align - 1) / align * align +
               a->buffer->storage_elems() * a->buffer->dtype.bytes();
  });
  return declared;
}

void check_limits(const LoweredKernel& k, const std::string& arch, bool host) {
  TargetLimits lim = target_limits(arch);
  std::string target = arch.empty() ? lim.arch + ", the largest of any GPU" : lim.arch;
  // On the host, shared scratch that only the host's variants add (gemm/fallback
  // staging a register operand) is the host's own memory: the limit is a
  // GPU's, held against what the kernel declares.
  const std::int64_t bytes = host ? declared_shared_bytes(k) : k.shared_bytes;
  if (bytes > lim.shared_bytes_per_cta) {
    const SharedAllocation* big = nullptr;
    for (const SharedAllocation& a : k.shared)
      if (!big || a.bytes > big->bytes) big = &a;
    fail("T.alloc_buffer", big ? big->buffer->name : "", big ? big->buffer->loc : k.source->loc,
         "the kernel needs " + std::to_string(bytes) + " bytes of shared memory per CTA" +
             (big && big->bytes != bytes ? " (this buffer " + std::to_string(big->bytes) + ")"
                                         : std::string()) +
             "; a CTA has at most " + kib(lim.shared_bytes_per_cta) + " (" + target + ")");
  }
  // Register tiles: what one thread keeps, over every allocation (an upper
  // bound of what is live at once).
  std::int64_t local = 0;
  Buffer big;
  for_each_stmt(k.lowered->body, [&](const Stmt& s) {
    auto* a = s.as<AllocateNode>();
    if (!a || a->buffer->scope != MemScope::local) return;
    std::int64_t bytes = a->buffer->storage_elems() * a->buffer->dtype.bytes();
    local += bytes;
    if (!big || bytes > big->storage_elems() * big->dtype.bytes()) big = a->buffer;
  });
  if (local > lim.local_bytes_per_thread)
    fail("T.alloc_buffer", big->name, big->loc,
         "the kernel keeps " + std::to_string(local) +
             " bytes of registers per thread; a thread has 255 32-bit registers and at most " +
             kib(lim.local_bytes_per_thread) + " of local memory (" + target +
             "): use shared memory, or a register tile distributed over more threads");
}

}  // namespace tx::lowering
