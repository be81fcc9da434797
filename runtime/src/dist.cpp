// tx::dist (tx/runtime/dist.hpp): groups of ranks, symmetric memory, the
// barrier and NCCL's collectives.
//
// Two kinds of group share one Group::State:
//   - local (run_local): the ranks are threads of this process and share a
//     LocalWorld -- a barrier that can be aborted, the slots through which
//     they exchange records, the NCCL communicators, and every rank's
//     symmetric memory, freed when the last handle of any rank is gone;
//   - process (Group::nccl / adopt_nccl): one rank per process, records
//     exchanged by ncclAllGather, memory freed collectively (a barrier, then
//     the frees) when the rank's last handle is gone.
#include "tx/runtime/dist.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>

#include "dist_check.hpp"
#include "nccl.hpp"
#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/stream.hpp"

namespace tx::dist {

namespace {

using runtime::DevicePtr;
namespace nccl = runtime::nccl;

DevicePtr as_dev(const void* p) {
  return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
}
void* as_ptr(DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Copies a string into a fixed field, cut to fit, always terminated.
template <std::size_t N>
void put(char (&field)[N], const std::string& s) {
  const std::size_t n = std::min(s.size(), N - 1);
  std::memcpy(field, s.data(), n);
  field[n] = '\0';
}

// Makes `d` the calling thread's device for a scope (nothing for the host).
class ThreadDevice {
 public:
  explicit ThreadDevice(Device d) : active_(d.is_cuda()) {
    if (active_) previous_ = runtime::set_thread_device(d.index);
  }
  ~ThreadDevice() {
    if (!active_) return;
    try {
      runtime::set_thread_device(previous_);
    } catch (...) {
      runtime::set_thread_device(-1);
    }
  }
  ThreadDevice(const ThreadDevice&) = delete;
  ThreadDevice& operator=(const ThreadDevice&) = delete;

 private:
  bool active_ = false;
  int previous_ = -1;
};

// Which process a rank runs in: ranks of one process address each other's
// memory directly, ranks of other processes on this host through CUDA IPC.
struct ProcessId {
  std::uint64_t pid = 0;
  std::uint64_t nonce = 0;  // random per process: pids repeat across containers
  std::string host;         // host name and boot id
};

const ProcessId& this_process() {
  static const ProcessId id = [] {
    ProcessId p;
    p.pid = static_cast<std::uint64_t>(getpid());
    std::random_device rd;
    p.nonce =
        (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    std::string boot;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
    p.host = std::string(name) + "/" + boot;
    return p;
  }();
  return id;
}

// What empty_symmetric's ranks exchange: the request (to compare) and where
// the rank's copy is.
struct AllocRecord {
  char desc[160];  // "[4, 64] float32"
  std::uint64_t desc_hash;
  std::uint64_t bytes;
  std::uint64_t address;  // the rank's copy: device address or host pointer
  unsigned char ipc[64];  // its CUDA IPC handle (process groups)
  std::uint64_t pid;
  std::uint64_t nonce;
  char host[128];
  std::int32_t rank;
  std::int32_t ordinal;
};
static_assert(std::is_trivially_copyable_v<AllocRecord>);

// What the host collectives exchange.
struct CollRecord {
  std::uint64_t address;
  std::int64_t numel;
  std::uint8_t code, bits;
};
static_assert(std::is_trivially_copyable_v<CollRecord>);

// The ranks of run_local: threads of this process.
struct LocalWorld {
  int world = 1;
  std::vector<Device> devices;
  bool gpu = false;
  // NCCL communicators, one per rank, made on first use (comm()) for all
  // ranks at once: a run_local that uses no NCCL pays nothing for it.
  std::once_flag nccl_once;
  std::vector<int> nccl_ordinals;
  std::vector<nccl::Comm> comms;  // one per rank, or empty
  std::string no_nccl;            // why comms is (or will stay) empty

  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  bool aborted = false;
  int failed_rank = -1;
  std::string failure;
  std::vector<std::vector<unsigned char>> slots;
  // enqueue_barrier's: a spinning barrier (it runs on every multi-GPU op
  // call, where a condition variable's wake-up would cost more than a small
  // all-reduce). `aborted` mirrored for it without the lock.
  std::atomic<int> spin_arrived{0};
  std::atomic<std::uint64_t> spin_generation{0};
  std::atomic<bool> spin_aborted{false};
  // Every rank's symmetric memory, freed with the world.
  std::vector<std::pair<int, DevicePtr>> device_blocks;  // (ordinal, address)
  std::vector<void*> host_blocks;

  LocalWorld() = default;
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;
  ~LocalWorld();

  // Called with mu held.
  [[noreturn]] void throw_aborted(const char* op, int rank) const {
    fail(op, "", {},
         "rank " + std::to_string(rank) + " stops: rank " + std::to_string(failed_rank) +
             " of the group failed (" + failure + ")",
         "run_local rethrows rank " + std::to_string(failed_rank) + "'s error");
  }

  // Rank `rank`'s communicator, or nullptr (no_nccl says why).
  nccl::Comm comm(int rank) {
    std::call_once(nccl_once, [&] {
      if (!no_nccl.empty()) return;
      // ncclCommInitAll: one call for every GPU, from this thread, so that a
      // rank that never uses NCCL cannot leave the others waiting in it.
      try {
        comms = nccl::comm_init_all(nccl_ordinals);
      } catch (const Error& e) {
        no_nccl = e.what();
      }
      try {  // NCCL switched this thread's device while it set each one up
        runtime::set_thread_device(devices[static_cast<std::size_t>(rank)].index);
      } catch (...) {
      }
    });
    return comms.empty() ? nullptr : comms[static_cast<std::size_t>(rank)];
  }

  void abort(int rank, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!aborted) {
        aborted = true;
        failed_rank = rank;
        failure = what;
      }
    }
    spin_aborted.store(true, std::memory_order_release);
    cv.notify_all();
  }

  void spin_barrier(int rank, const char* op) {
    const std::uint64_t gen = spin_generation.load(std::memory_order_acquire);
    if (spin_arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == world) {
      spin_arrived.store(0, std::memory_order_relaxed);
      spin_generation.fetch_add(1, std::memory_order_release);
      return;
    }
    while (spin_generation.load(std::memory_order_acquire) == gen) {
      if (spin_aborted.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(mu);
        throw_aborted(op, rank);
      }
      std::this_thread::yield();
    }
  }

  void barrier(int rank, const char* op) {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) throw_aborted(op, rank);
    const std::uint64_t gen = generation;
    if (++arrived == world) {
      // The checked mode across host ranks: what every rank did before the
      // barrier happens before what any does after it.
      if (!gpu) runtime::host::dist_check_rendezvous(this);
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen) throw_aborted(op, rank);
  }

  // Every rank's bytes, in rank order (an all-gather through the slots).
  std::vector<std::vector<unsigned char>> exchange(int rank, std::vector<unsigned char> mine,
                                                   const char* op) {
    {
      std::lock_guard<std::mutex> lock(mu);
      slots[static_cast<std::size_t>(rank)] = std::move(mine);
    }
    barrier(rank, op);
    std::vector<std::vector<unsigned char>> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all = slots;
    }
    barrier(rank, op);  // no rank refills a slot before every rank has read it
    return all;
  }
};

LocalWorld::~LocalWorld() {
  if (!gpu) runtime::host::dist_check_end_world(this);
  // No handle of any rank is left, but kernels may still run: wait for every
  // GPU before freeing what a peer's kernel might read.
  std::vector<int> ordinals;
  for (const Device& d : devices)
    if (d.is_cuda()) ordinals.push_back(d.index);
  std::sort(ordinals.begin(), ordinals.end());
  ordinals.erase(std::unique(ordinals.begin(), ordinals.end()), ordinals.end());
  if (!device_blocks.empty())
    for (int o : ordinals) {
      try {
        runtime::synchronize_device(o, "tx.dist: freeing symmetric memory");
      } catch (...) {
      }
    }
  // ncclCommDestroy may wait for the other ranks' destroys: one thread each.
  if (!comms.empty()) {
    std::vector<std::thread> threads;
    try {
      for (std::size_t r = 0; r < comms.size(); ++r)
        threads.emplace_back([c = comms[r], o = devices[r].index] {
          try {
            runtime::set_thread_device(o);
          } catch (...) {
          }
          nccl::comm_destroy(c);
        });
    } catch (...) {
    }
    for (std::thread& t : threads) t.join();
  }
  for (auto [o, p] : device_blocks) runtime::device_free_unpooled(p, o);
  for (void* p : host_blocks) std::free(p);
}

// Bytes of a copy, rounded so that the table after it is aligned.
std::size_t table_offset(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
}

}  // namespace

struct Group::State {
  int rank = 0;
  int world = 1;
  Device device;
  std::shared_ptr<LocalWorld> local;  // run_local's ranks
  // Process groups (Group::nccl, adopt_nccl):
  nccl::Comm comm = nullptr;
  bool owns_comm = false;
  Stream stream;  // the group's own stream: barriers and exchanges
  DevicePtr barrier_word = 0;
  std::mutex mu;
  std::vector<DevicePtr> blocks;  // this rank's symmetric copies (with their tables)
  std::vector<DevicePtr> opened;  // peers' copies opened through CUDA IPC

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State();

  void barrier(const char* op);
  nccl::Comm communicator() { return local ? local->comm(rank) : comm; }
  template <class Record>
  std::vector<Record> exchange(const Record& mine, const char* op);
};

void Group::State::barrier(const char* op) {
  if (local) return local->barrier(rank, op);
  ThreadDevice on(device);
  nccl::all_reduce(as_ptr(barrier_word), as_ptr(barrier_word), 1, nccl::kInt32, nccl::kSum, comm,
                   stream.handle(), op);
  stream.synchronize();
}

template <class Record>
std::vector<Record> Group::State::exchange(const Record& mine, const char* op) {
  constexpr std::size_t n = sizeof(Record);
  std::vector<Record> all(static_cast<std::size_t>(world));
  if (local) {
    std::vector<unsigned char> bytes(n);
    std::memcpy(bytes.data(), &mine, n);
    auto got = local->exchange(rank, std::move(bytes), op);
    for (std::size_t r = 0; r < all.size(); ++r) std::memcpy(&all[r], got[r].data(), n);
    return all;
  }
  // Through the GPU: this rank's record, then everyone's after it.
  ThreadDevice on(device);
  const int ordinal = device.index;
  const DevicePtr buf = runtime::device_alloc(n * (all.size() + 1), ordinal, stream.handle());
  try {
    runtime::copy_to_device(buf, &mine, n, stream.handle());
    nccl::all_gather(as_ptr(buf), as_ptr(buf + n), n, nccl::kUint8, comm, stream.handle(), op);
    runtime::copy_to_host(all.data(), buf + n, n * all.size(), stream.handle());
    stream.synchronize();
  } catch (...) {
    runtime::device_free(buf, ordinal, stream.handle());
    throw;
  }
  runtime::device_free(buf, ordinal, stream.handle());
  return all;
}

Group::State::~State() {
  if (local) return;  // the world frees the memory and the communicators
  bool memory = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    memory = !blocks.empty() || !opened.empty();
  }
  // Freeing is collective: once every rank has finished its GPU work and
  // reached this barrier, no peer reads this rank's copies any more.
  if (memory) {
    try {
      runtime::synchronize_device(device.index, "tx.dist: freeing symmetric memory");
      barrier("tx.dist.Group (freeing symmetric memory)");
    } catch (...) {
    }
  }
  for (DevicePtr p : opened) runtime::ipc_close_mem_handle(p, device.index);
  for (DevicePtr p : blocks) runtime::device_free_unpooled(p, device.index);
  if (barrier_word) runtime::device_free_unpooled(barrier_word, device.index);
  if (owns_comm) nccl::comm_destroy(comm);
}

// ------------------------------------------------------------ UniqueId

std::string UniqueId::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * bytes.size());
  for (unsigned char b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

UniqueId UniqueId::from_hex(const std::string& s) {
  UniqueId id;
  if (s.size() != 2 * id.bytes.size())
    fail("tx.dist.UniqueId.from_hex", "", {},
         "takes " + std::to_string(2 * id.bytes.size()) + " hex digits, got " +
             std::to_string(s.size()));
  auto nibble = [&](char c) -> unsigned {
    if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<unsigned>(c - 'A' + 10);
    fail("tx.dist.UniqueId.from_hex", "", {}, std::string("'") + c + "' is not a hex digit");
  };
  for (std::size_t i = 0; i < id.bytes.size(); ++i)
    id.bytes[i] = static_cast<unsigned char>(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
  return id;
}

UniqueId unique_id() {
  UniqueId id;
  nccl::get_unique_id(id.bytes.data());
  return id;
}

bool nccl_available(std::string* why) { return nccl::available(why); }

// ------------------------------------------------------------- Group

namespace {

Group::State& need(const std::shared_ptr<Group::State>& s, const char* op) {
  if (!s) fail(op, "", {}, "the Group is empty (default-constructed)");
  return *s;
}

void check_cuda_device(Device d, const char* op) {
  std::string why;
  if (!runtime::cuda_available(&why)) fail(op, d.str(), {}, "no usable GPU: " + why);
  const int count = runtime::device_count();
  if (d.index < 0 || d.index >= count)
    fail(op, d.str(), {}, "no such GPU: this machine has " + std::to_string(count));
}

}  // namespace

int Group::rank() const { return need(state_, "tx.dist.Group.rank").rank; }
int Group::size() const { return need(state_, "tx.dist.Group.size").world; }
Device Group::device() const { return need(state_, "tx.dist.Group.device").device; }
bool Group::is_local() const { return need(state_, "tx.dist.Group.is_local").local != nullptr; }
void* Group::nccl_comm() const { return need(state_, "tx.dist.Group.nccl_comm").communicator(); }

void Group::barrier() const {
  need(state_, "tx.dist.Group.barrier").barrier("tx.dist.Group.barrier");
}

void Group::enqueue_barrier() const {
  State& s = need(state_, "tx.dist.Group.enqueue_barrier");
  if (s.local && s.local->gpu && s.world > 1)
    s.local->spin_barrier(s.rank, "tx.dist.Group.enqueue_barrier");
}

namespace {
// A process group's state around a communicator: its stream and barrier word.
std::shared_ptr<Group::State> process_state(nccl::Comm comm, bool owns, int rank, int world,
                                            Device device) {
  auto st = std::make_shared<Group::State>();
  st->comm = comm;
  st->owns_comm = owns;
  st->rank = rank;
  st->world = world;
  st->device = device;
  st->stream = Stream::create(device);
  st->barrier_word = runtime::device_alloc_unpooled(sizeof(std::int32_t), device.index);
  runtime::memset_device_sync(device.index, st->barrier_word, 0, sizeof(std::int32_t));
  return st;
}
}  // namespace

Group Group::nccl(const UniqueId& id, int rank, int world_size, Device device) {
  const char* op = "tx.dist.Group.nccl";
  if (!device.is_cuda())
    fail(op, "device", {}, "is the host: an NCCL group's ranks are GPUs (host ranks: run_local)");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail(op, "rank", {},
         "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
             ": ranks are numbered 0 .. world_size - 1");
  check_cuda_device(device, op);
  std::string why;
  if (!nccl::available(&why)) fail(op, "", {}, "NCCL is not available: " + why);
  // The rank's GPU is this thread's from now on (the copies, current_device()).
  runtime::set_thread_device(device.index);
  nccl::Comm comm = nccl::comm_init_rank(id.bytes.data(), world_size, rank);
  try {
    return Group(process_state(comm, true, rank, world_size, device));
  } catch (...) {
    nccl::comm_destroy(comm);
    throw;
  }
}

Group Group::adopt_nccl(void* nccl_comm, Device device) {
  const char* op = "tx.dist.Group.adopt_nccl";
  if (!nccl_comm) fail(op, "nccl_comm", {}, "is null");
  if (!device.is_cuda()) fail(op, "device", {}, "is the host: an NCCL communicator has a GPU");
  check_cuda_device(device, op);
  ThreadDevice on(device);
  const int world = nccl::comm_count(nccl_comm);
  const int rank = nccl::comm_user_rank(nccl_comm);
  return Group(process_state(nccl_comm, false, rank, world, device));
}

void Group::run_local(int world_size, const std::function<void(Group&)>& body) {
  if (world_size < 1)
    fail("tx.dist.Group.run_local", "world_size", {},
         "is " + std::to_string(world_size) + "; a group has at least one rank");
  run_local(std::vector<Device>(static_cast<std::size_t>(world_size), Device::host()), body);
}

void Group::run_local(const std::vector<Device>& devices, const std::function<void(Group&)>& body) {
  const char* op = "tx.dist.Group.run_local";
  if (devices.empty()) fail(op, "devices", {}, "is empty; a group has at least one rank");
  if (!body) fail(op, "body", {}, "is empty");
  const int n = static_cast<int>(devices.size());
  const bool gpu = devices[0].is_cuda();
  for (const Device& d : devices)
    if (d.is_cuda() != gpu) {
      std::string list;
      for (const Device& e : devices) list += (list.empty() ? "" : ", ") + e.str();
      fail(
          op, "devices", {},
          "mixes the host and GPUs (" + list + "); a group's ranks are all host ranks or all GPUs");
    }
  auto world = std::make_shared<LocalWorld>();
  world->world = n;
  world->devices = devices;
  world->gpu = gpu;
  world->slots.resize(devices.size());
  if (gpu) {
    std::vector<int> ordinals;
    for (const Device& d : devices) {
      check_cuda_device(d, op);
      ordinals.push_back(d.index);
    }
    std::vector<int> distinct = ordinals;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int a : distinct)
      for (int b : distinct)
        if (a != b && !runtime::can_access_peer(a, b))
          fail(op, "cuda:" + std::to_string(a) + ", cuda:" + std::to_string(b), {},
               "cuda:" + std::to_string(a) +
                   " cannot address the memory of cuda:" + std::to_string(b) +
                   " (cuDeviceCanAccessPeer says no); symmetric memory needs peer access "
                   "between every pair of the group's GPUs",
               "run the ranks on GPUs linked by NVLink or PCIe peer-to-peer (nvidia-smi topo -m "
               "shows the links)");
    for (int a : distinct)
      for (int b : distinct) runtime::enable_peer_access(a, b);
    const char* env = std::getenv("TX_DIST_NCCL");
    std::string why;
    if (distinct.size() != ordinals.size())
      world->no_nccl = "ranks share a GPU, and NCCL needs a GPU per rank";
    else if (env && std::string(env) == "0")
      world->no_nccl = "TX_DIST_NCCL=0 in the environment";
    else if (!nccl::available(&why))
      world->no_nccl = "NCCL is not available: " + why;
    else
      world->nccl_ordinals = ordinals;
  } else {
    world->no_nccl = "host ranks have no NCCL communicator";
  }

  struct Failure {
    int rank;
    std::exception_ptr error;
  };
  std::mutex failures_mu;
  std::vector<Failure> failures;
  auto run_rank = [&](int r) {
    try {
      const Device d = devices[static_cast<std::size_t>(r)];
      if (d.is_cuda()) runtime::set_thread_device(d.index);
      auto st = std::make_shared<State>();
      st->rank = r;
      st->world = n;
      st->device = d;
      st->local = world;
      Group g(std::move(st));
      // Host ranks: the checked mode's kernels know which rank runs them.
      std::optional<runtime::host::DistRankScope> checked_rank;
      if (!d.is_cuda()) checked_rank.emplace(world.get(), r, n);
      body(g);
    } catch (...) {
      std::string what = "an exception that is not a std::exception";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(failures_mu);
        failures.push_back({r, std::current_exception()});
      }
      world->abort(r, what);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  try {
    for (int r = 0; r < n; ++r) threads.emplace_back(run_rank, r);
  } catch (...) {
    world->abort(-1, "a rank thread could not be started");
    for (std::thread& t : threads) t.join();
    throw;
  }
  for (std::thread& t : threads) t.join();
  world.reset();
  if (failures.empty()) return;
  // The first failure is the cause; the others stopped because of it.
  const Failure& first = failures.front();
  const std::string who = "rank " + std::to_string(first.rank) + " of " + std::to_string(n) + " (" +
                          devices[static_cast<std::size_t>(first.rank)].str() + ")";
  try {
    std::rethrow_exception(first.error);
  } catch (const Error& e) {
    throw Error(e.op(), e.operand(), e.loc(), who + ": " + e.reason(), e.detail());
  } catch (const std::exception& e) {
    fail(op, "", {}, who + " threw: " + e.what());
  } catch (...) {
    fail(op, "", {}, who + " threw an exception that is not a std::exception");
  }
}

// --------------------------------------------------- symmetric memory

Tensor Group::empty_symmetric(std::vector<std::int64_t> shape, DType dtype) const {
  const char* op = "tx.dist.Group.empty_symmetric";
  State& s = need(state_, op);
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail(op, "dtype", {}, dtype.name() + " has no elements");
  std::uint64_t numel = 1;
  for (std::int64_t e : shape) {
    if (e < 0) fail(op, "shape", {}, "negative extent in " + shape_str(shape));
    if (e != 0 &&
        numel > (std::numeric_limits<std::uint64_t>::max() >> 8) / static_cast<std::uint64_t>(e))
      fail(op, "shape", {}, shape_str(shape) + " is too large");
    numel *= static_cast<std::uint64_t>(e);
  }
  const std::size_t bytes =
      static_cast<std::size_t>(numel) * static_cast<std::size_t>(dtype.bytes());
  const std::size_t table_at = table_offset(bytes);
  const std::size_t table_bytes = sizeof(void*) * static_cast<std::size_t>(s.world);
  const std::size_t total = table_at + table_bytes;
  ThreadDevice on(s.device);
  const int ordinal = s.device.index;

  // This rank's copy, with its table behind it, zero-filled before any peer
  // learns its address.
  void* mine = nullptr;
  if (s.device.is_cuda()) {
    const DevicePtr p = runtime::device_alloc_unpooled(total, ordinal);
    if (s.local) {
      std::lock_guard<std::mutex> lock(s.local->mu);
      s.local->device_blocks.push_back({ordinal, p});
    } else {
      std::lock_guard<std::mutex> lock(s.mu);
      s.blocks.push_back(p);
    }
    runtime::memset_device_sync(ordinal, p, 0, total);
    mine = as_ptr(p);
  } else {
    mine = std::aligned_alloc(64, (total + 63) / 64 * 64);
    if (!mine) fail(op, "", {}, "out of host memory (" + std::to_string(total) + " bytes)");
    {
      std::lock_guard<std::mutex> lock(s.local->mu);
      s.local->host_blocks.push_back(mine);
    }
    std::memset(mine, 0, total);
    runtime::host::dist_check_register(s.local.get(), s.rank, mine, bytes);
  }

  AllocRecord rec{};
  const std::string desc = shape_str(shape) + " " + dtype.name();
  put(rec.desc, desc);
  rec.desc_hash = fnv1a(desc);
  rec.bytes = bytes;
  rec.address = as_dev(mine);
  const ProcessId& me = this_process();
  rec.pid = me.pid;
  rec.nonce = me.nonce;
  put(rec.host, me.host);
  rec.rank = s.rank;
  rec.ordinal = ordinal;
  if (!s.local) {
    runtime::IpcMemHandle h = runtime::ipc_get_mem_handle(as_dev(mine), ordinal);
    std::memcpy(rec.ipc, h.bytes, sizeof rec.ipc);
  }
  const std::vector<AllocRecord> all = s.exchange(rec, op);

  // Every rank sees the same records, so every rank fails alike.
  for (const AllocRecord& r : all)
    if (r.desc_hash != all[0].desc_hash || r.bytes != all[0].bytes)
      fail(op, "", {},
           "the ranks ask for different allocations: rank 0 for " + std::string(all[0].desc) +
               ", rank " + std::to_string(r.rank) + " for " + std::string(r.desc),
           "empty_symmetric is collective: every rank passes the same shape and dtype, in the "
           "same order of calls");

  auto info = std::make_shared<SymmetricInfo>();
  info->rank = s.rank;
  info->world = s.world;
  info->bytes = bytes;
  info->peers.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const AllocRecord& p = all[r];
    if (static_cast<int>(r) == s.rank) {
      info->peers[r] = mine;
    } else if (s.local) {
      info->peers[r] = as_ptr(p.address);
    } else if (p.host != std::string(rec.host)) {
      fail(op, "", {},
           "rank " + std::to_string(r) + " runs on another host (" + p.host + ", this rank on " +
               rec.host + "); symmetric memory needs every rank of the group on one host");
    } else if (p.pid == rec.pid && p.nonce == rec.nonce) {
      // A rank of this process: its address is ours; its GPU must be reachable.
      if (p.ordinal != ordinal && !runtime::can_access_peer(ordinal, p.ordinal))
        fail(op, "", {},
             "cuda:" + std::to_string(ordinal) +
                 " cannot address the memory of cuda:" + std::to_string(p.ordinal) + " (rank " +
                 std::to_string(r) + "; cuDeviceCanAccessPeer says no)");
      runtime::enable_peer_access(ordinal, p.ordinal);
      info->peers[r] = as_ptr(p.address);
    } else {
      runtime::IpcMemHandle h;
      std::memcpy(h.bytes, p.ipc, sizeof h.bytes);
      const DevicePtr q = runtime::ipc_open_mem_handle(h, ordinal);
      {
        std::lock_guard<std::mutex> lock(s.mu);
        s.opened.push_back(q);
      }
      info->peers[r] = as_ptr(q);
    }
  }
  // The table of peers' addresses, behind this rank's copy.
  unsigned char* table = static_cast<unsigned char*>(mine) + table_at;
  info->table = table;
  if (s.device.is_cuda())
    runtime::copy_to_device_sync(ordinal, as_dev(table), info->peers.data(), table_bytes);
  else
    std::memcpy(table, info->peers.data(), table_bytes);

  // The tensor keeps the rank's state, and so the memory, alive.
  return Tensor::from_symmetric(mine, std::move(shape), dtype, s.device, std::move(info),
                                [keep = state_] {});
}

Tensor Group::symmetric_flags(std::int64_t count) const {
  if (count < 1)
    fail("tx.dist.Group.symmetric_flags", "count", {},
         "is " + std::to_string(count) + "; at least one flag per rank");
  return empty_symmetric({count}, u32);
}

// ------------------------------------------------------- collectives

namespace {

void check_tensor(const Tensor& t, const char* name, const Group::State& s, const char* op) {
  if (!t.defined()) fail(op, name, {}, "is an undefined tensor");
  if (!t.is_contiguous()) fail(op, name, {}, "is a strided view; pass a contiguous tensor");
  if (!(t.device() == s.device))
    fail(op, name, {},
         "is on " + t.device().str() + " but this rank's device is " + s.device.str());
}

nccl::DataType reduce_type(DType t, const char* op) {
  if (t == f32) return nccl::kFloat32;
  if (t == f16) return nccl::kFloat16;
  if (t == bf16) {
    if (nccl::version() > 0 && nccl::version() < 21000)
      fail(op, "", {},
           "bf16 needs NCCL 2.10 or later; this one is " + std::to_string(nccl::version()));
    return nccl::kBfloat16;
  }
  if (t == i32) return nccl::kInt32;
  fail(op, "", {}, "reduces f32, f16, bf16 and i32, not " + t.name());
}

void check_reduce_dtype(DType t, const char* op) {
  if (!(t == f32 || t == f16 || t == bf16 || t == i32))
    fail(op, "", {}, "reduces f32, f16, bf16 and i32, not " + t.name());
}

nccl::Comm need_comm(Group::State& s, const char* op) {
  if (nccl::Comm c = s.communicator()) return c;
  fail(op, "", {},
       "this group has no NCCL communicator: " + (s.local ? s.local->no_nccl : std::string()));
}

double load(const unsigned char* base, std::int64_t i, DType t) {
  std::uint64_t b = 0;
  std::memcpy(&b, base + i * t.bytes(), static_cast<std::size_t>(t.bytes()));
  return decode_bits(b, t);
}

void store(unsigned char* base, std::int64_t i, DType t, double v) {
  const std::uint64_t b = encode_bits(v, t);
  std::memcpy(base + i * t.bytes(), &b, static_cast<std::size_t>(t.bytes()));
}

// Host ranks: every rank's tensor address, checked to agree on dtype and
// element count (`numel` is what this rank expects of every rank).
std::vector<CollRecord> host_exchange(Group::State& s, const Tensor& t, std::int64_t numel,
                                      const char* op) {
  CollRecord mine{as_dev(t.data_ptr()), numel, static_cast<std::uint8_t>(t.dtype().code),
                  t.dtype().bits};
  std::vector<CollRecord> all = s.exchange(mine, op);
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r].numel != all[0].numel || all[r].code != all[0].code || all[r].bits != all[0].bits)
      fail(op, "", {},
           "the ranks pass different tensors: rank 0 " + std::to_string(all[0].numel) +
               " elements of " + DType(static_cast<TypeCode>(all[0].code), all[0].bits).name() +
               ", rank " + std::to_string(r) + " " + std::to_string(all[r].numel) +
               " elements of " + DType(static_cast<TypeCode>(all[r].code), all[r].bits).name());
  return all;
}

double combine(double a, double b, ReduceOp op) {
  return op == ReduceOp::sum ? a + b : std::max(a, b);
}

nccl::RedOp nccl_op(ReduceOp op) { return op == ReduceOp::sum ? nccl::kSum : nccl::kMax; }

}  // namespace

void Group::nccl_all_reduce(Tensor& t, ReduceOp rop) const {
  const char* op = "tx.dist.Group.nccl_all_reduce";
  State& s = need(state_, op);
  check_tensor(t, "t", s, op);
  check_reduce_dtype(t.dtype(), op);
  const DType dt = t.dtype();
  const std::int64_t n = t.numel();
  if (!s.device.is_cuda()) {
    std::vector<CollRecord> all = host_exchange(s, t, n, op);
    std::vector<double> acc(static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < all.size(); ++r) {
      const auto* src = static_cast<const unsigned char*>(as_ptr(all[r].address));
      for (std::int64_t i = 0; i < n; ++i) {
        const double v = load(src, i, dt);
        acc[static_cast<std::size_t>(i)] =
            r == 0 ? v : combine(acc[static_cast<std::size_t>(i)], v, rop);
      }
    }
    s.barrier(op);  // every rank has read every input before any is overwritten
    auto* dst = static_cast<unsigned char*>(t.data_ptr());
    for (std::int64_t i = 0; i < n; ++i) store(dst, i, dt, acc[static_cast<std::size_t>(i)]);
    return;
  }
  nccl::Comm comm = need_comm(s, op);
  ThreadDevice on(s.device);
  nccl::all_reduce(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(n), reduce_type(dt, op),
                   nccl_op(rop), comm, current_stream(s.device).handle(), op);
}

void Group::nccl_all_gather(const Tensor& in, Tensor& out) const {
  const char* op = "tx.dist.Group.nccl_all_gather";
  State& s = need(state_, op);
  check_tensor(in, "in", s, op);
  check_tensor(out, "out", s, op);
  if (out.dtype() != in.dtype() || out.numel() != in.numel() * s.world)
    fail(op, "out", {},
         "holds " + std::to_string(out.numel()) + " elements of " + out.dtype().name() +
             "; the gather of " + std::to_string(s.world) + " ranks' " +
             std::to_string(in.numel()) + " elements of " + in.dtype().name() + " needs " +
             std::to_string(in.numel() * s.world) + " of " + in.dtype().name());
  const std::size_t bytes = in.nbytes();
  if (!s.device.is_cuda()) {
    std::vector<CollRecord> all = host_exchange(s, in, in.numel(), op);
    auto* dst = static_cast<unsigned char*>(out.data_ptr());
    for (std::size_t r = 0; r < all.size(); ++r)
      if (bytes) std::memcpy(dst + r * bytes, as_ptr(all[r].address), bytes);
    s.barrier(op);  // no rank changes its input before every rank has copied it
    return;
  }
  nccl::Comm comm = need_comm(s, op);
  ThreadDevice on(s.device);
  nccl::all_gather(in.data_ptr(), out.data_ptr(), bytes, nccl::kUint8, comm,
                   current_stream(s.device).handle(), op);
}

void Group::nccl_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp rop) const {
  const char* op = "tx.dist.Group.nccl_reduce_scatter";
  State& s = need(state_, op);
  check_tensor(in, "in", s, op);
  check_tensor(out, "out", s, op);
  check_reduce_dtype(in.dtype(), op);
  if (out.dtype() != in.dtype() || in.numel() != out.numel() * s.world)
    fail(op, "out", {},
         "holds " + std::to_string(out.numel()) + " elements of " + out.dtype().name() + "; in's " +
             std::to_string(in.numel()) + " elements of " + in.dtype().name() + " over " +
             std::to_string(s.world) + " ranks give each " + std::to_string(in.numel() / s.world) +
             (in.numel() % s.world ? " (not evenly)" : "") + " of " + in.dtype().name());
  const DType dt = in.dtype();
  const std::int64_t m = out.numel();
  if (!s.device.is_cuda()) {
    std::vector<CollRecord> all = host_exchange(s, in, in.numel(), op);
    std::vector<double> acc(static_cast<std::size_t>(m));
    for (std::size_t r = 0; r < all.size(); ++r) {
      const auto* src = static_cast<const unsigned char*>(as_ptr(all[r].address));
      for (std::int64_t i = 0; i < m; ++i) {
        const double v = load(src, s.rank * m + i, dt);
        acc[static_cast<std::size_t>(i)] =
            r == 0 ? v : combine(acc[static_cast<std::size_t>(i)], v, rop);
      }
    }
    s.barrier(op);  // out may overlap an input a peer still reads
    auto* dst = static_cast<unsigned char*>(out.data_ptr());
    for (std::int64_t i = 0; i < m; ++i) store(dst, i, dt, acc[static_cast<std::size_t>(i)]);
    return;
  }
  nccl::Comm comm = need_comm(s, op);
  ThreadDevice on(s.device);
  nccl::reduce_scatter(in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m),
                       reduce_type(dt, op), nccl_op(rop), comm, current_stream(s.device).handle(),
                       op);
}

}  // namespace tx::dist
