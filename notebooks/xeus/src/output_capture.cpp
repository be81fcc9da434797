#include "output_capture.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>

namespace tx_kernel {

OutputCapture::OutputCapture(Sink sink) : sink_(std::move(sink)) {
  std::fflush(stdout);
  std::fflush(stderr);
  start(out_, 1, "stdout");
  start(err_, 2, "stderr");
}

OutputCapture::~OutputCapture() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  stop(out_);
  stop(err_);
}

void OutputCapture::drain() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  stop(out_);
  stop(err_);
  start(out_, 1, "stdout");
  start(err_, 2, "stderr");
}

void OutputCapture::start(Channel& c, int fd, const char* stream) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return;  // no capture: output goes where it went
  c.fd = fd;
  c.saved = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  dup2(p[1], fd);
  close(p[1]);
  c.read_end = p[0];
  std::string name = stream;
  c.reader = std::thread([this, rd = p[0], name] {
    // Interrupts are the cell thread's business (session.cpp).
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    char buf[4096];
    while (true) {
      ssize_t n = read(rd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      sink_(name, std::string(buf, static_cast<std::size_t>(n)));
    }
  });
}

void OutputCapture::stop(Channel& c) {
  if (c.fd < 0) return;
  // The last write end goes with the dup2: the reader sees end of file once
  // it has read everything.
  dup2(c.saved, c.fd);
  close(c.saved);
  if (c.reader.joinable()) c.reader.join();
  close(c.read_end);
  c.fd = -1;
}

}  // namespace tx_kernel
