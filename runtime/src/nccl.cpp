// NCCL through dlopen (nccl.hpp): the library is looked for on first use,
// never linked, so that libtx loads where there is none.
#include "nccl.hpp"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "loader_leaks.hpp"
#include "tx/error.hpp"

namespace tx::runtime::nccl {

namespace {

// ncclUniqueId: passed by value to ncclCommInitRank, so its layout matters.
struct RawUniqueId {
  char internal[kUniqueIdBytes];
};

using Result = int;  // ncclResult_t: ncclSuccess = 0
using GetVersionFn = Result (*)(int*);
using GetUniqueIdFn = Result (*)(RawUniqueId*);
using CommInitRankFn = Result (*)(Comm*, int, RawUniqueId, int);
using CommInitAllFn = Result (*)(Comm*, int, const int*);
using CommDestroyFn = Result (*)(Comm);
using CommIntFn = Result (*)(Comm, int*);
using AllGatherFn = Result (*)(const void*, void*, std::size_t, int, Comm, StreamHandle);
using ReduceFn = Result (*)(const void*, void*, std::size_t, int, int, Comm, StreamHandle);
using BroadcastFn = Result (*)(const void*, void*, std::size_t, int, int, Comm, StreamHandle);
using GroupFn = Result (*)();
using ErrorStringFn = const char* (*)(Result);
using LastErrorFn = const char* (*)(Comm);

struct Library {
  void* handle = nullptr;
  std::string path;
  std::string error;  // why NCCL cannot be used; empty when it can
  int version = 0;
  GetVersionFn get_version = nullptr;
  GetUniqueIdFn get_unique_id = nullptr;
  CommInitRankFn comm_init_rank = nullptr;
  CommInitAllFn comm_init_all = nullptr;
  CommDestroyFn comm_destroy = nullptr;
  CommIntFn comm_count = nullptr;
  CommIntFn comm_user_rank = nullptr;
  AllGatherFn all_gather = nullptr;
  ReduceFn all_reduce = nullptr;
  ReduceFn reduce_scatter = nullptr;
  BroadcastFn broadcast = nullptr;
  GroupFn group_start = nullptr;
  GroupFn group_end = nullptr;
  ErrorStringFn error_string = nullptr;
  LastErrorFn last_error = nullptr;  // NCCL 2.13 and later
};

// A pip wheel's copy (nvidia-nccl-cu12 / -cu13) in a system Python.
std::vector<std::string> wheel_candidates() {
  std::vector<std::string> out;
  for (const char* pattern : {
           "/usr/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
           "/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
           "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
           "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
       }) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return out;
}

Library* open_library() {
  TX_IGNORE_LOADER_LEAKS;
  auto* lib = new Library();
  // NVLink multicast (NVLS) stays off unless the caller asks for it: tx
  // never uses it, and NCCL reads this when its first communicator is made.
  if (!std::getenv("NCCL_NVLS_ENABLE")) setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::vector<std::string> candidates;
  const char* forced = std::getenv("TX_NCCL_LIBRARY");
  if (forced && *forced) {
    candidates.emplace_back(forced);
  } else {
    candidates.emplace_back("libnccl.so.2");
    for (std::string& w : wheel_candidates()) candidates.push_back(std::move(w));
  }
  std::string tried;
  for (const std::string& c : candidates) {
    lib->handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib->handle) {
      lib->path = c;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + c + ": " + (e ? e : "dlopen failed");
  }
  if (!lib->handle) {
    lib->error = "NCCL not found (" + tried + ")";
    if (!forced || !*forced)
      lib->error +=
          "; install NCCL (libnccl2, or pip's nvidia-nccl-cu12) or set TX_NCCL_LIBRARY to "
          "libnccl.so.2's path";
    return lib;
  }
  std::string missing;
  auto load = [&](auto& fn, const char* name, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib->handle, name));
    if (!fn && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  load(lib->get_version, "ncclGetVersion", true);
  load(lib->get_unique_id, "ncclGetUniqueId", true);
  load(lib->comm_init_rank, "ncclCommInitRank", true);
  load(lib->comm_init_all, "ncclCommInitAll", true);
  load(lib->comm_destroy, "ncclCommDestroy", true);
  load(lib->comm_count, "ncclCommCount", true);
  load(lib->comm_user_rank, "ncclCommUserRank", true);
  load(lib->all_gather, "ncclAllGather", true);
  load(lib->all_reduce, "ncclAllReduce", true);
  load(lib->reduce_scatter, "ncclReduceScatter", true);
  load(lib->broadcast, "ncclBroadcast", true);
  load(lib->group_start, "ncclGroupStart", true);
  load(lib->group_end, "ncclGroupEnd", true);
  load(lib->error_string, "ncclGetErrorString", true);
  load(lib->last_error, "ncclGetLastError", false);
  if (!missing.empty()) {
    lib->error = lib->path + " lacks " + missing + " (an NCCL older than 2.0?)";
    return lib;
  }
  if (lib->get_version(&lib->version) != 0) lib->version = 0;
  return lib;
}

// Opened once, never closed (communicators may outlive static destructors).
const Library& library() {
  static const Library* lib = open_library();
  return *lib;
}

// (A C string: a temporary std::string argument makes GCC 13 warn of a
// dangling reference to the result.)
const Library& need(const char* what) {
  const Library& lib = library();
  if (!lib.error.empty()) fail("tx.nccl", what, {}, lib.error);
  return lib;
}

void check(Result r, const char* call, const std::string& what, Comm comm = nullptr) {
  if (r == 0) return;
  const Library& lib = library();
  std::string reason = std::string(call) + " failed: ";
  const char* s = lib.error_string ? lib.error_string(r) : nullptr;
  reason += s ? s : "ncclResult_t " + std::to_string(r);
  if (lib.last_error)
    if (const char* last = lib.last_error(comm); last && *last)
      reason += " (" + std::string(last) + ")";
  fail("tx.nccl", what, {}, reason,
       "NCCL_DEBUG=WARN (or INFO) in the environment makes NCCL say more");
}

}  // namespace

bool available(std::string* why) {
  const Library& lib = library();
  if (!lib.error.empty() && why) *why = lib.error;
  return lib.error.empty();
}

int version() { return library().error.empty() ? library().version : 0; }

void get_unique_id(unsigned char out[kUniqueIdBytes]) {
  const Library& lib = need("unique_id");
  RawUniqueId id{};
  TX_IGNORE_LOADER_LEAKS;
  check(lib.get_unique_id(&id), "ncclGetUniqueId", "unique_id");
  std::memcpy(out, id.internal, kUniqueIdBytes);
}

Comm comm_init_rank(const unsigned char id[kUniqueIdBytes], int world, int rank) {
  const std::string what =
      "communicator of rank " + std::to_string(rank) + " of " + std::to_string(world);
  const Library& lib = need(what.c_str());
  RawUniqueId raw{};
  std::memcpy(raw.internal, id, kUniqueIdBytes);
  Comm comm = nullptr;
  check(lib.comm_init_rank(&comm, world, raw, rank), "ncclCommInitRank", what);
  return comm;
}

std::vector<Comm> comm_init_all(const std::vector<int>& ordinals) {
  const std::string what = "communicators of " + std::to_string(ordinals.size()) + " GPUs";
  const Library& lib = need(what.c_str());
  std::vector<Comm> comms(ordinals.size(), nullptr);
  check(lib.comm_init_all(comms.data(), static_cast<int>(ordinals.size()), ordinals.data()),
        "ncclCommInitAll", what);
  return comms;
}

void comm_destroy(Comm comm) noexcept {
  const Library& lib = library();
  if (comm && lib.error.empty()) lib.comm_destroy(comm);
}

int comm_count(Comm comm) {
  const Library& lib = need("ncclCommCount");
  int n = 0;
  check(lib.comm_count(comm, &n), "ncclCommCount", "adopted communicator", comm);
  return n;
}

int comm_user_rank(Comm comm) {
  const Library& lib = need("ncclCommUserRank");
  int r = 0;
  check(lib.comm_user_rank(comm, &r), "ncclCommUserRank", "adopted communicator", comm);
  return r;
}

void all_gather(const void* send, void* recv, std::size_t send_count, DataType type, Comm comm,
                StreamHandle stream, const std::string& what) {
  const Library& lib = need(what.c_str());
  check(lib.all_gather(send, recv, send_count, type, comm, stream), "ncclAllGather", what, comm);
}

void all_reduce(const void* send, void* recv, std::size_t count, DataType type, RedOp op, Comm comm,
                StreamHandle stream, const std::string& what) {
  const Library& lib = need(what.c_str());
  check(lib.all_reduce(send, recv, count, type, op, comm, stream), "ncclAllReduce", what, comm);
}

void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type, RedOp op,
                    Comm comm, StreamHandle stream, const std::string& what) {
  const Library& lib = need(what.c_str());
  check(lib.reduce_scatter(send, recv, recv_count, type, op, comm, stream), "ncclReduceScatter",
        what, comm);
}

void broadcast(const void* send, void* recv, std::size_t count, DataType type, int root, Comm comm,
               StreamHandle stream, const std::string& what) {
  const Library& lib = need(what.c_str());
  check(lib.broadcast(send, recv, count, type, root, comm, stream), "ncclBroadcast", what, comm);
}

void group_start() { check(need("ncclGroupStart").group_start(), "ncclGroupStart", "group"); }
void group_end() { check(need("ncclGroupEnd").group_end(), "ncclGroupEnd", "group"); }

}  // namespace tx::runtime::nccl
