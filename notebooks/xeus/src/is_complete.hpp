// Whether a cell is a whole input (Jupyter's is_complete_request, used by
// consoles to decide between running the input and a continuation line):
// brackets, string and character literals, block comments and a trailing
// backslash, scanned without a parser.
#pragma once

#include <string>
#include <string_view>

namespace tx_kernel {

struct Completeness {
  std::string status;  // "complete", "incomplete" or "invalid"
  std::string indent;  // for "incomplete": the next line's indentation
};

Completeness is_complete(std::string_view code);

}  // namespace tx_kernel
