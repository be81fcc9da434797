// NCCL, opened with dlopen on first use (private to the runtime): tx builds
// and runs without it, and only tx::dist's NCCL paths need it. The few types
// and entry points used are declared here (NCCL's ABI is stable since 2.0),
// so no nccl.h is needed at build time either.
//
// The library: $TX_NCCL_LIBRARY if set (then only that), else
// "libnccl.so.2" (the loader's search: LD_LIBRARY_PATH, the ld cache), else
// a pip wheel's nvidia/nccl/lib/libnccl.so.2 under the site-packages or
// dist-packages of /usr/lib/python3* and /usr/local/lib/python3*.
//
// Before NCCL is loaded, NCCL_NVLS_ENABLE is set to 0 unless the
// environment already sets it: tx never uses NVLink multicast.
//
// Every failing call throws tx::Error naming the NCCL call and NCCL's
// message (ncclGetErrorString, and ncclGetLastError where NCCL has it).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tx::runtime::nccl {

using Comm = void*;  // ncclComm_t
using StreamHandle = void*;

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// ncclDataType_t and ncclRedOp_t (nccl.h).
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

// Whether the library loads and has the entry points; `why` says why not.
bool available(std::string* why = nullptr);
int version();  // ncclGetVersion, e.g. 22703 for 2.27.3

void get_unique_id(unsigned char out[kUniqueIdBytes]);
// A communicator on the calling thread's current CUDA device (the primary
// context current on this thread).
Comm comm_init_rank(const unsigned char id[kUniqueIdBytes], int world, int rank);
// One communicator per device of `ordinals`, ranks 0.. in that order, from
// one thread (ncclCommInitAll).
std::vector<Comm> comm_init_all(const std::vector<int>& ordinals);
void comm_destroy(Comm comm) noexcept;
int comm_count(Comm comm);
int comm_user_rank(Comm comm);

// Collectives, queued on `stream` (a CUstream of the communicator's device).
// `what` names the tx operation for errors.
void all_gather(const void* send, void* recv, std::size_t send_count, DataType type, Comm comm,
                StreamHandle stream, const std::string& what);
void all_reduce(const void* send, void* recv, std::size_t count, DataType type, RedOp op, Comm comm,
                StreamHandle stream, const std::string& what);
void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type, RedOp op,
                    Comm comm, StreamHandle stream, const std::string& what);
void broadcast(const void* send, void* recv, std::size_t count, DataType type, int root, Comm comm,
               StreamHandle stream, const std::string& what);
void group_start();
void group_end();

}  // namespace tx::runtime::nccl

namespace tx::runtime {
// tx::dist::nccl_available's answer.
inline bool nccl_available(std::string* why = nullptr) { return nccl::available(why); }
}  // namespace tx::runtime
