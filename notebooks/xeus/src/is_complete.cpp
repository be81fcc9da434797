#include "is_complete.hpp"

#include <vector>

namespace tx_kernel {

Completeness is_complete(std::string_view code) {
  std::vector<char> open;  // the brackets still open, innermost last
  std::size_t i = 0, n = code.size();
  while (i < n) {
    char c = code[i];
    if (c == '/' && i + 1 < n && code[i + 1] == '/') {  // line comment
      while (i < n && code[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && code[i + 1] == '*') {  // block comment
      std::size_t end = code.find("*/", i + 2);
      if (end == std::string_view::npos) return {"incomplete", ""};
      i = end + 2;
      continue;
    }
    if (c == 'R' && i + 1 < n && code[i + 1] == '"') {  // raw string R"delim( ... )delim"
      std::size_t paren = code.find('(', i + 2);
      if (paren == std::string_view::npos) return {"incomplete", ""};
      std::string close = ")" + std::string(code.substr(i + 2, paren - i - 2)) + "\"";
      std::size_t end = code.find(close, paren + 1);
      if (end == std::string_view::npos) return {"incomplete", ""};
      i = end + close.size();
      continue;
    }
    if (c == '"' || c == '\'') {
      // A quote after a digit is a digit separator (1'000'000).
      if (c == '\'' && i > 0 && std::isxdigit(static_cast<unsigned char>(code[i - 1]))) {
        ++i;
        continue;
      }
      std::size_t j = i + 1;
      while (j < n && code[j] != c) {
        if (code[j] == '\n') return {"invalid", ""};  // a literal cannot span lines
        j += code[j] == '\\' ? 2 : 1;
      }
      if (j >= n) return {"incomplete", ""};
      i = j + 1;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') open.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (open.empty() || open.back() != want) return {"invalid", ""};
      open.pop_back();
    }
    ++i;
  }
  std::size_t last = code.find_last_not_of(" \t\r\n");
  if (last != std::string_view::npos && code[last] == '\\') return {"incomplete", ""};
  if (!open.empty()) return {"incomplete", std::string(2 * open.size(), ' ')};
  return {"complete", ""};
}

}  // namespace tx_kernel
