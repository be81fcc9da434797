// Printing the IR in the script form of the seeds, and structural hashing.
//
//   std::cout << func;          // before lowering: reads like the user's kernel
//   std::cout << lowered_func;  // after: the seeds' "Generated TIRx IR"
//
// Structural equality and hash are defined on a canonical text of the IR in
// which every literal carries its dtype and every variable and buffer is
// renamed by order of first appearance: two functions are structurally equal
// exactly when their canonical texts are equal (alpha-renaming aside).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "tx/ir.hpp"

namespace tx {

struct PrintOptions {
  bool canonical = false;     // typed literals and positional names (for hashing)
  bool show_locations = false;  // append "# file:line" to tile calls
};

std::string to_string(const Expr& e, PrintOptions opt = {});
std::string to_string(const Stmt& s, PrintOptions opt = {});
std::string to_string(const PrimFunc& f, PrintOptions opt = {});
std::string to_string(const BufferRegion& r);
// "Tx.warp.copy(A_smem[0:32, 0:8], A[0:32, 0:8])"
std::string tile_call_str(const TileCallNode* call);

std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);
std::ostream& operator<<(std::ostream& os, const PrimFunc& f);

bool structural_equal(const PrimFunc& a, const PrimFunc& b);
bool structural_equal(const Stmt& a, const Stmt& b);
std::uint64_t structural_hash(const PrimFunc& f);
std::uint64_t structural_hash(const Stmt& s);

}  // namespace tx
