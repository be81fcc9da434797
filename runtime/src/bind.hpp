// Binding a launch, apart from running it: the device-neutral half of
// Kernel::launch. A Binder checks one launch's arguments against the kernel's
// declarations (count, dtypes, shapes, devices, alignment, the facts of its
// scalars and T::dim extents, T::no_alias), binds the T::dim extents from the
// tensors' shapes, computes what the launch derives from them (fast_divide's
// magic numbers, a grid known only now) and lays everything out as kernel
// arguments in a BoundLaunch. An Executable (executable.hpp) of the kernel's
// target runs the BoundLaunch: nothing here knows CUDA or the host JIT.
//
// The hot path allocates nothing: a BoundLaunch holds its slots inline for up
// to 32 arguments (more go to the heap), and the last launch's derived values
// and grid are remembered (the memo, taken with try_lock so that threads
// launching at once never wait for each other).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tx/lowering/lower.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::runtime {

// A value of a scalar parameter or a T::dim as the kernel receives it: the
// bytes of its C type (CUDA takes a pointer to each argument's value).
struct ScalarSlot {
  alignas(8) unsigned char bytes[8] = {};
};

// One launch, checked and laid out. Slots, in order: one per kernel
// parameter, one per T::dim, one per derived value. Not copyable: its
// pointers point into itself.
struct BoundLaunch {
  static constexpr std::size_t kInline = 32;
  const Kernel::Arg* args = nullptr;  // the caller's, in parameter order
  std::size_t params = 0;
  std::size_t slots = 0;
  // Per slot: a buffer's data pointer, or the address of a value's bytes.
  void** ptrs = nullptr;
  ScalarSlot* values = nullptr;
  // Per slot: a buffer's element count (0 for values), for the host's checks.
  std::int64_t* elems = nullptr;
  // The T::dim values as the tensors bound them, and the argument that bound
  // each (-1: none yet).
  std::int64_t* dim_value = nullptr;
  int* dim_from = nullptr;
  std::array<std::int64_t, 3> grid{1, 1, 1};
  Device device;
  SourceLoc loc;

  BoundLaunch() = default;
  BoundLaunch(const BoundLaunch&) = delete;
  BoundLaunch& operator=(const BoundLaunch&) = delete;
  // Points the arrays at inline storage, or at the heap beyond kInline.
  void reserve(std::size_t slot_count, std::size_t dim_count);
  bool empty_grid() const { return grid[0] == 0 || grid[1] == 0 || grid[2] == 0; }

 private:
  std::array<void*, kInline> ptr_store_{};
  std::array<ScalarSlot, kInline> value_store_{};
  std::array<std::int64_t, kInline> elem_store_{};
  std::array<std::int64_t, 16> dim_store_{};
  std::array<int, 16> dim_from_store_{};
  std::vector<void*> ptr_heap_;
  std::vector<ScalarSlot> value_heap_;
  std::vector<std::int64_t> elem_heap_, dim_heap_;
  std::vector<int> dim_from_heap_;
};

class Binder {
 public:
  // `info` (the kernel's, or a prebuilt kernel's launch description) must
  // outlive the binder.
  Binder(const lowering::LoweredKernel& info, std::string kernel_name);
  // Checks and binds a launch of `args` on `device`; throws a tx error
  // naming the argument and `loc` for anything the kernel cannot take.
  void bind(const Kernel::Arg* args, std::size_t n, Device device, SourceLoc loc,
            BoundLaunch* out) const;
  const std::string& kernel_name() const { return name_; }

 private:
  // What the last launch of a shape-generic kernel computed from its extents
  // and scalars (the divisors' magic numbers, the grid): a launch with the
  // same values reuses it instead of evaluating the expressions again (a few
  // hundred ns of host time per launch, the launch's largest cost after the
  // driver's). `key` holds the T::dim values, then each scalar parameter's
  // bytes.
  struct LaunchMemo {
    static constexpr std::size_t capacity = 24;
    std::array<std::int64_t, capacity> key{};
    std::size_t key_size = 0;
    std::array<std::int32_t, capacity> derived{};
    std::array<std::int64_t, 3> grid{};
    bool valid = false;
  };

  [[noreturn]] void bad(const BoundLaunch& b, std::size_t i, const std::string& reason) const;
  void bind_scalar(BoundLaunch& b, std::size_t i) const;
  void bind_tensor(BoundLaunch& b, std::size_t i) const;
  void bind_extents(BoundLaunch& b, std::size_t i, const Tensor& t) const;
  void check_no_alias(const BoundLaunch& b) const;
  void bind_dims(BoundLaunch& b) const;
  void bind_computed(BoundLaunch& b) const;
  void bind_peer_tables(BoundLaunch& b) const;
  LaunchMemo memo_key(const BoundLaunch& b) const;
  void derive(const BoundLaunch& b, LaunchMemo& key) const;
  void evaluate_grid(BoundLaunch& b) const;
  std::optional<std::int64_t> value_of(const BoundLaunch& b, const VarNode* v) const;

  const lowering::LoweredKernel& info_;
  std::string name_;                  // the kernel's
  std::size_t symmetric_params_ = 0;  // T::match_symmetric parameters
  std::string op_;                    // "launch <name>": the op of every error
  mutable std::mutex memo_mu_;
  mutable LaunchMemo memo_;
};

}  // namespace tx::runtime
