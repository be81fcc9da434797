// One C++20 session of the tx Jupyter kernel: clang's incremental
// interpreter (clang::Interpreter, the engine under clang-repl) in this
// process, with tx's headers on its include path and libtx linked into the
// kernel, so a cell calls tx directly -- no pipe, no second process.
//
// A cell is written to a file and parsed as `#include "<file>"`, so its
// newlines, comments and preprocessor lines stay as typed and every
// std::source_location names "cell[N]" and the line (tx names buffers and
// reports errors by them). What can go wrong in a cell, and what run() does:
//   * a C++ error: clang's diagnostics are the result; nothing ran.
//   * an exception escapes the cell: its type and what() are the result; what
//     ran before the throw stays done.
//   * the cell crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT on the
//     cell's thread) or is interrupted (SIGINT): the signal jumps back here;
//     the session is probed with an empty input and, if that fails, rebuilt
//     (see Kernel's restart).
//   * the cell cannot be linked ("JIT session error: Symbols not found"): an
//     earlier failed cell poisoned the JIT (clang drops the function templates
//     a failed input instantiated first, and later inputs that use them never
//     get code). Nothing of the cell ran; the caller restarts the session and
//     replays the cells that succeeded.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace clang {
class Interpreter;
class IncrementalCompilerBuilder;
}  // namespace clang
namespace llvm {
class raw_string_ostream;
}

namespace tx_kernel {

enum class Outcome {
  ok,
  compile_error,  // clang's diagnostics; nothing of the cell ran
  exception,      // an exception escaped the cell
  crashed,        // a fatal signal in the cell's code
  interrupted,    // SIGINT while the cell ran
  link_error,     // the JIT could not link the cell (poisoned by an earlier failure)
  other_error,    // any other error clang's interpreter returned
};

struct CellResult {
  Outcome outcome = Outcome::ok;
  std::string name;     // "C++ error", "std::runtime_error", "SIGSEGV", ...
  std::string message;  // one line
  std::string detail;   // diagnostics, with the cell files named "cell[N]"
};

struct SessionConfig {
  std::vector<std::string> clang_args;  // -std=c++20, -I..., -D..., --gcc-install-dir=...
  std::string cell_dir;                 // where the cells' files go
};

// Blocks SIGINT in the calling thread; main() calls it before xeus starts
// its threads (see the signal guard in session.cpp).
void block_interrupts();

class Session {
 public:
  explicit Session(SessionConfig config);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Parses and runs one cell; `cell_name` ("cell[3]") names its file.
  CellResult run(const std::string& cell_name, std::string_view code);
  // Runs code that is not a user's cell (start-up, probes); true on success.
  bool run_quietly(std::string_view code);
  // Throws the current interpreter away and starts a new, empty one. After a
  // crash or an interrupt the old one is leaked, not destroyed: its
  // destructors would run the session's globals' destructors in a process
  // whose state the jump left unknown.
  void reset(bool leak_old);

  // Completion of the identifier that ends at `column` (0-based) of `line`:
  // the candidates and how many characters before the cursor they replace.
  std::vector<std::string> complete(const std::string& line, std::size_t column,
                                    std::size_t* replace_length);
  // The declaration of a (possibly qualified) name and the comment above it,
  // as text; empty when the name is unknown.
  std::string describe(const std::string& qualified_name);

 private:
  struct RawResult {
    std::string error_text;  // the llvm::Error ParseAndExecute returned
    bool threw = false;
    std::string thrown_type, thrown_what;
  };
  CellResult execute(const std::string& input);
  void parse_and_execute(const std::string& input, RawResult* raw);
  std::string remap(std::string text) const;

  SessionConfig config_;
  std::string diagnostics_;
  RawResult raw_;
  std::unique_ptr<llvm::raw_string_ostream> diagnostics_stream_;
  std::unique_ptr<clang::IncrementalCompilerBuilder> builder_;
  std::unique_ptr<clang::Interpreter> interp_;
  std::vector<const char*> argv_;
};

}  // namespace tx_kernel
