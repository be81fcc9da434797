// tx errors and source locations.
//
// Every builder takes a defaulted std::source_location; the IR stores it as a
// SourceLoc so that any later failure (dispatch, codegen, NVRTC, launch) can
// name the user's file and line. tx::Error is the one exception type tx
// throws; its members are out of line so that clang-repl sessions see one
// vtable (DESIGN.md section 8).
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace tx {

struct SourceLoc {
  const char* file = "";
  unsigned line = 0;
  unsigned column = 0;

  SourceLoc() = default;
  SourceLoc(const std::source_location& l)  // NOLINT: implicit by design
      : file(l.file_name()), line(l.line()), column(l.column()) {}
  bool known() const { return line != 0; }
  // "samples/warp_sqrt_reg.cpp:23" (the path shortened to its last two parts).
  std::string str() const;
};

class Error : public std::runtime_error {
 public:
  // op: the tile op or API ("Tx.warp.copy", "launch", "nvrtc"); operand: the
  // buffer/argument at fault, or empty; reason: what is wrong.
  Error(std::string op, std::string operand, SourceLoc loc, std::string reason,
        std::string detail = {});
  ~Error() override;

  const std::string& op() const { return op_; }
  const std::string& operand() const { return operand_; }
  const SourceLoc& loc() const { return loc_; }
  const std::string& reason() const { return reason_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string op_, operand_, reason_, detail_;
  SourceLoc loc_;
};

[[noreturn]] void fail(const std::string& op, const std::string& operand, SourceLoc loc,
                       const std::string& reason, const std::string& detail = {});

// Warnings (e.g. the scalar copy fallback) go through one replaceable sink;
// the default prints "tx warning: ..." to stderr.
using WarningHandler = void (*)(const std::string& message);
void set_warning_handler(WarningHandler h);
void warn(const std::string& message);

}  // namespace tx
