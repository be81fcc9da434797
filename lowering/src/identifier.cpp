#include "tx/lowering/identifier.hpp"

#include <cctype>

namespace tx::lowering {

std::string sanitize_identifier(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

}  // namespace tx::lowering
