// A cell's standard output and error as Jupyter stream messages, while the
// cell runs: file descriptors 1 and 2 go to pipes for the cell's duration
// (so printf, std::cout, tx's warnings and whatever a library writes all
// arrive), and a thread per pipe hands what it reads to the sink.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace tx_kernel {

class OutputCapture {
 public:
  // sink(stream, text): stream is "stdout" or "stderr". Called from the
  // reader threads; the sink serializes with the kernel's other messages.
  using Sink = std::function<void(const std::string& stream, const std::string& text)>;

  explicit OutputCapture(Sink sink);
  // Flushes C and C++ streams, gives the descriptors back and waits until
  // everything written was handed to the sink.
  ~OutputCapture();
  // Everything written so far handed to the sink before it returns (the
  // descriptors are given back and taken again): what the sink decides from
  // now on concerns only output written from now on.
  void drain();
  OutputCapture(const OutputCapture&) = delete;
  OutputCapture& operator=(const OutputCapture&) = delete;

 private:
  struct Channel {
    int fd = -1;     // 1 or 2
    int saved = -1;  // the descriptor before the cell
    int read_end = -1;
    std::thread reader;
  };
  void start(Channel& c, int fd, const char* stream);
  void stop(Channel& c);
  Sink sink_;
  Channel out_, err_;
};

}  // namespace tx_kernel
