#include "tx/error.hpp"

#include <atomic>
#include <cstdio>
#include <string_view>

namespace tx {

std::string SourceLoc::str() const {
  if (!known()) return "<unknown location>";
  std::string_view f(file);
  // Keep the last two path components: enough to find the file, short to read.
  auto last = f.rfind('/');
  if (last != std::string_view::npos && last > 0) {
    auto prev = f.rfind('/', last - 1);
    if (prev != std::string_view::npos) f = f.substr(prev + 1);
  }
  return std::string(f) + ":" + std::to_string(line);
}

namespace {
std::string compose(const std::string& op, const std::string& operand, const SourceLoc& loc,
                    const std::string& reason, const std::string& detail) {
  std::string msg = "tx error: " + op;
  if (!operand.empty()) msg += ": operand " + operand;
  msg += ": " + reason;
  if (loc.known()) msg += "\n  at " + loc.str();
  if (!detail.empty()) msg += "\n" + detail;
  return msg;
}
}  // namespace

Error::Error(std::string op, std::string operand, SourceLoc loc, std::string reason,
             std::string detail)
    : std::runtime_error(compose(op, operand, loc, reason, detail)),
      op_(std::move(op)),
      operand_(std::move(operand)),
      reason_(std::move(reason)),
      detail_(std::move(detail)),
      loc_(loc) {}

Error::~Error() = default;

void fail(const std::string& op, const std::string& operand, SourceLoc loc,
          const std::string& reason, const std::string& detail) {
  throw Error(op, operand, loc, reason, detail);
}

namespace {
void default_warning(const std::string& message) {
  std::fprintf(stderr, "tx warning: %s\n", message.c_str());
}
std::atomic<WarningHandler>& warning_handler() {
  static std::atomic<WarningHandler> h{&default_warning};
  return h;
}
}  // namespace

void set_warning_handler(WarningHandler h) { warning_handler() = h ? h : &default_warning; }
void warn(const std::string& message) { warning_handler().load()(message); }

}  // namespace tx
