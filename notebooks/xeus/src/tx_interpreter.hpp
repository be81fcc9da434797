// The Jupyter side of the tx kernel: xeus's interpreter interface (execute,
// complete, inspect, is_complete, kernel_info) over one in-process C++
// session (session.hpp), with the cell's output streamed as it is written
// and tx::display's bundles sent as display_data.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <xeus/xinterpreter.hpp>

#include "session.hpp"

namespace tx_kernel {

struct KernelConfig {
  SessionConfig session;
  // Run before the first cell and after every restart (tx's headers, so
  // that completion of tx:: works from the first cell).
  std::string prelude;
};

class TxInterpreter : public xeus::xinterpreter {
 public:
  explicit TxInterpreter(KernelConfig config);
  ~TxInterpreter() override;

 private:
  void configure_impl() override;
  nl::json execute_request_impl(int execution_counter, const std::string& code, bool silent,
                                bool store_history, nl::json user_expressions,
                                bool allow_stdin) override;
  nl::json complete_request_impl(const std::string& code, int cursor_pos) override;
  nl::json inspect_request_impl(const std::string& code, int cursor_pos, int detail_level) override;
  nl::json is_complete_request_impl(const std::string& code) override;
  nl::json kernel_info_request_impl() override;
  void shutdown_request_impl() override;

  // Messages from the cell's threads (output readers, tx::display) and
  // from this one go out one at a time.
  void send_stream(const std::string& name, const std::string& text);
  void set_publishing(bool on);
  // A new session: the prelude, then the cells that succeeded, in order,
  // their output discarded. Returns what to tell the user.
  std::string restart_and_replay(bool leak_old);
  // Runs the cell's leading %-lines (%lib PATH); returns the rest, or sets
  // `error` to what went wrong.
  std::string run_magics(const std::string& code, std::string* error);
  // The diagnostics call a name undeclared that a cell which succeeded
  // mentions (see execute_request_impl).
  bool lost_declaration(const std::string& diagnostics) const;

  KernelConfig config_;
  std::unique_ptr<Session> session_;
  std::string prelude_error_;
  struct Cell {
    std::string name, code;
  };
  std::vector<Cell> succeeded_;
  std::vector<std::string> libraries_;  // %lib, loaded again after a restart
  bool failed_since_restart_ = false;
  bool publishing_ = true;  // false while replaying
  std::mutex publish_mutex_;
};

}  // namespace tx_kernel
