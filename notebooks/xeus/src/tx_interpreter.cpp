#include "tx_interpreter.hpp"

#include <dlfcn.h>

#include <mutex>
#include <sstream>
#include <tx/display.hpp>
#include <utility>
#include <vector>
#include <xeus/xhelper.hpp>

#include "is_complete.hpp"
#include "output_capture.hpp"

namespace tx_kernel {
namespace {

// Jupyter counts cursor positions in Unicode code points; the code is UTF-8.
std::size_t byte_offset(const std::string& s, int code_points) {
  std::size_t i = 0;
  for (int cp = 0; i < s.size() && cp < code_points; ++cp) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  }
  return i;
}
int code_points(const std::string& s, std::size_t bytes) {
  int n = 0;
  for (std::size_t i = 0; i < bytes && i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++n;
  return n;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The names clang reports as undeclared ("use of undeclared identifier 'x'").
std::vector<std::string> undeclared_names(const std::string& diagnostics) {
  std::vector<std::string> names;
  const std::string key = "use of undeclared identifier '";
  for (std::size_t at = diagnostics.find(key); at != std::string::npos;
       at = diagnostics.find(key, at + 1)) {
    std::size_t b = at + key.size(), e = diagnostics.find('\'', b);
    if (e != std::string::npos) names.push_back(diagnostics.substr(b, e - b));
  }
  return names;
}

bool mentions(const std::string& code, const std::string& name) {
  for (std::size_t at = code.find(name); at != std::string::npos; at = code.find(name, at + 1)) {
    bool left = at == 0 || !ident_char(code[at - 1]);
    bool right = at + name.size() >= code.size() || !ident_char(code[at + name.size()]);
    if (left && right) return true;
  }
  return false;
}

nl::json lines_of(const std::string& text) {
  nl::json out = nl::json::array();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace

TxInterpreter::TxInterpreter(KernelConfig config) : config_(std::move(config)) {
  xeus::register_interpreter(this);
}

TxInterpreter::~TxInterpreter() { tx::display_api::set_sink({}); }

void TxInterpreter::send_stream(const std::string& name, const std::string& text) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  if (publishing_) publish_stream(name, text);
}

void TxInterpreter::set_publishing(bool on) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  publishing_ = on;
}

void TxInterpreter::configure_impl() {
  session_ = std::make_unique<Session>(config_.session);
  if (!config_.prelude.empty()) {
    CellResult r = session_->run("prelude", config_.prelude);
    if (r.outcome != Outcome::ok) prelude_error_ = r.message + "\n" + r.detail;
  }
  tx::display_api::set_sink([this](const tx::display_api::MimeBundle& bundle) {
    nl::json data = nl::json::object(), metadata = nl::json::object();
    for (const auto& [mime, content] : bundle.data) data[mime] = content;
    if (bundle.image_width > 0)
      for (const char* m : {"image/png", "image/jpeg", "image/gif", "image/svg+xml"})
        if (data.contains(m)) metadata[m] = {{"width", bundle.image_width}};
    std::lock_guard<std::mutex> lock(publish_mutex_);
    if (publishing_) display_data(std::move(data), std::move(metadata), nl::json::object());
  });
}

std::string TxInterpreter::run_magics(const std::string& code, std::string* error) {
  std::istringstream in(code);
  std::string line, rest;
  bool leading = true;
  std::size_t consumed = 0;
  while (leading && std::getline(in, line)) {
    std::string t = line.substr(0, line.find_last_not_of(" \t\r") + 1);
    if (t.rfind("%lib ", 0) == 0) {
      std::string path = t.substr(5);
      path.erase(0, path.find_first_not_of(" \t"));
      // Loaded into the process with global symbols: the JIT finds them as
      // it finds libtx's.
      if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        *error = std::string("%lib: ") + dlerror();
        return {};
      }
      consumed += line.size() + 1;
    } else if (!t.empty() && t[0] == '%') {
      *error = "unknown magic '" + t + "' (the tx kernel knows %lib PATH)";
      return {};
    } else {
      leading = false;
    }
  }
  // Keep the line count: the cell's line numbers stay those the user sees.
  std::string out;
  for (std::size_t i = 0; i < consumed && i < code.size(); ++i)
    if (code[i] == '\n') out += '\n';
  return out + code.substr(std::min(consumed, code.size()));
}

std::string TxInterpreter::restart_and_replay(bool leak_old) {
  // The replay's output is discarded: its streams go to a capture of their
  // own (nested in the cell's; everything read before it returns), and its
  // tx::display calls see publishing off. (The lock is not held while cells
  // run: their display calls take it.)
  OutputCapture discard([](const std::string&, const std::string&) {});
  set_publishing(false);
  session_->reset(leak_old);
  if (!config_.prelude.empty()) session_->run("prelude", config_.prelude);
  std::string failures;
  std::vector<Cell> kept;
  for (const Cell& c : succeeded_) {
    CellResult r = session_->run(c.name, c.code);
    if (r.outcome == Outcome::ok)
      kept.push_back(c);
    else
      failures += "  " + c.name + " failed on replay: " + r.name + ": " + r.message + "\n";
  }
  std::size_t replayed = succeeded_.size();
  succeeded_ = std::move(kept);
  failed_since_restart_ = false;
  set_publishing(true);
  return "restarted the C++ interpreter and replayed the " + std::to_string(replayed) +
         " earlier cells that had succeeded (output not shown)" +
         (failures.empty() ? std::string() : ";\n" + failures);
}

bool TxInterpreter::lost_declaration(const std::string& diagnostics) const {
  for (const std::string& n : undeclared_names(diagnostics))
    for (const Cell& c : succeeded_)
      if (mentions(c.code, n)) return true;
  return false;
}

nl::json TxInterpreter::execute_request_impl(int execution_counter, const std::string& code,
                                             bool silent, bool /*store_history*/,
                                             nl::json /*user_expressions*/, bool /*allow_stdin*/) {
  std::string name = "cell[" + std::to_string(execution_counter) + "]";
  CellResult r;
  std::string note;
  // After a failed cell, this cell's first attempt may fail to link for the
  // earlier cell's sake, and the JIT then writes dozens of mangled symbol
  // names to stderr. Its output is held until the outcome is known: shown
  // as it would have been, or -- when the session is restarted and the cell
  // runs again -- its stderr goes to the kernel's log instead of the cell.
  std::mutex held_mutex;
  bool hold = failed_since_restart_;
  std::vector<std::pair<std::string, std::string>> held;
  std::string to_log;
  {
    OutputCapture capture([&](const std::string& stream, const std::string& text) {
      {
        std::lock_guard<std::mutex> lock(held_mutex);
        if (hold) {
          held.emplace_back(stream, text);
          return;
        }
      }
      if (!silent) send_stream(stream, text);
    });
    // Hands the held output on (without the first attempt's stderr when
    // `drop_stderr`) and streams from then on.
    auto release = [&](bool drop_stderr) {
      capture.drain();
      std::lock_guard<std::mutex> lock(held_mutex);
      for (auto& [stream, text] : held) {
        if (drop_stderr && stream == "stderr")
          to_log += text;
        else if (!silent)
          send_stream(stream, text);
      }
      held.clear();
      hold = false;
    };
    if (!prelude_error_.empty()) {
      std::fprintf(stderr,
                   "tx-kernel: the start-up code failed, tx's headers may be missing:\n%s\n",
                   prelude_error_.c_str());
      prelude_error_.clear();
    }
    std::string magic_error;
    std::string body = run_magics(code, &magic_error);
    if (!magic_error.empty()) {
      r.outcome = Outcome::other_error;
      r.name = "UsageError";
      r.message = magic_error;
    } else {
      r = session_->run(name, body);
      const bool relink = r.outcome == Outcome::link_error && failed_since_restart_;
      release(/*drop_stderr=*/relink);
      if (relink) {
        // Nothing of the cell ran (it never linked): a new session, the good
        // cells again, then this one. The JIT's own text (symbol names) goes
        // to the kernel's log, not to the cell.
        to_log += r.detail + "\n";
        std::fprintf(stderr,
                     "tx-kernel: this cell could not be linked: an earlier failed cell left "
                     "the JIT without code it needs (the JIT's message is in the kernel's "
                     "log);\n");
        std::fprintf(stderr, "tx-kernel: %s; running this cell again\n",
                     restart_and_replay(false).c_str());
        std::fflush(stderr);
        r = session_->run(name, body);
      } else if (r.outcome == Outcome::compile_error && failed_since_restart_ &&
                 lost_declaration(r.detail)) {
        // clang 19 undoes a failed input by removing the names it declared
        // from the lookup tables -- a failed redefinition of `f` takes the
        // good `f` with it. A name an earlier good cell declared and clang
        // now calls undeclared: a new session has it again.
        std::fprintf(stderr,
                     "tx-kernel: this cell uses a name an earlier cell declared, which a failed "
                     "cell made clang forget;\n");
        std::fprintf(stderr, "tx-kernel: %s; running this cell again\n",
                     restart_and_replay(false).c_str());
        std::fflush(stderr);
        r = session_->run(name, body);
      } else if (r.outcome == Outcome::crashed || r.outcome == Outcome::interrupted) {
        // The jump left the cell's code mid-way. If the session still runs
        // an empty input, it goes on as it is (what the cell did before the
        // jump stays done); otherwise a new one.
        if (!session_->run_quietly("(void)0;")) note = restart_and_replay(true);
      }
      if (r.outcome == Outcome::ok) succeeded_.push_back({name, body});
    }
    if (hold) release(false);  // a magic's error: nothing ran
  }
  // The kernel's own stderr (Jupyter's server log), once the cell's capture
  // has given it back.
  if (!to_log.empty())
    std::fprintf(stderr, "tx-kernel: %s: the first attempt's JIT output:\n%s\n", name.c_str(),
                 to_log.c_str());
  if (r.outcome == Outcome::ok) return xeus::create_successful_reply();
  failed_since_restart_ = true;
  nl::json traceback = nl::json::array();
  std::string headline = r.name + ": " + r.message;
  traceback.push_back(headline);
  for (auto& l : lines_of(r.detail)) traceback.push_back(l);
  if (r.outcome == Outcome::crashed || r.outcome == Outcome::interrupted)
    traceback.push_back(note.empty() ? "the session goes on: what the cell did before that stays"
                                     : "tx-kernel: " + note);
  if (!silent) {
    std::lock_guard<std::mutex> lock(publish_mutex_);
    publish_execution_error(r.name, r.message, traceback);
  }
  // xeus 2.4's create_error_reply puts its first argument into "evalue"
  // and its second into "ename".
  return xeus::create_error_reply(r.message, r.name, traceback);
}

nl::json TxInterpreter::complete_request_impl(const std::string& code, int cursor_pos) {
  std::size_t at = byte_offset(code, cursor_pos);
  std::size_t line_start = code.rfind('\n', at == 0 ? 0 : at - 1);
  line_start = line_start == std::string::npos || at == 0 ? 0 : line_start + 1;
  if (line_start > at) line_start = at;
  std::string line = code.substr(line_start, at - line_start);
  std::size_t replace = 0;
  std::vector<std::string> matches;
  {
    std::lock_guard<std::mutex> lock(publish_mutex_);
    matches = session_->complete(line, line.size(), &replace);
  }
  int end = cursor_pos;
  int start = code_points(code, at - replace);
  return xeus::create_complete_reply(matches, start, end);
}

nl::json TxInterpreter::inspect_request_impl(const std::string& code, int cursor_pos,
                                             int /*detail_level*/) {
  std::size_t at = byte_offset(code, cursor_pos);
  // The name under (or just before) the cursor, with its qualifiers.
  std::size_t b = at, e = at;
  while (e < code.size() && ident_char(code[e])) ++e;
  while (true) {
    while (b > 0 && ident_char(code[b - 1])) --b;
    if (b >= 2 && code.compare(b - 2, 2, "::") == 0)
      b -= 2;
    else
      break;
  }
  std::string name = code.substr(b, e - b);
  if (name.empty() || name == "::") return xeus::create_inspect_reply(false);
  std::string text = session_->describe(name);
  if (text.empty()) return xeus::create_inspect_reply(false);
  nl::json data;
  data["text/plain"] = text;
  data["text/html"] = "<pre style=\"font-size:12px\">" +
                      tx::display_api::highlight_html(text, tx::display_api::Language::cpp) +
                      "</pre>";
  return xeus::create_inspect_reply(true, data);
}

nl::json TxInterpreter::is_complete_request_impl(const std::string& code) {
  Completeness c = is_complete(code);
  return xeus::create_is_complete_reply(c.status, c.indent);
}

nl::json TxInterpreter::kernel_info_request_impl() {
  return xeus::create_info_reply(
      /*protocol_version=*/"5.3", "tx-kernel", "0.1.0", "c++", "20", "text/x-c++src", ".cpp", "c++",
      "text/x-c++src", "", "C++20 with tx, on clang's incremental interpreter (in process)");
}

void TxInterpreter::shutdown_request_impl() {}

}  // namespace tx_kernel
