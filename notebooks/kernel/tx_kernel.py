"""tx_kernel: a Jupyter kernel for C++20 with tx, running on clang-repl-19.

One clang-repl process per kernel, started through tx's `tx-repl` launcher
(clang-repl-19 with -std=c++20, tx's include paths and libtx_repl_guard
preloaded) and driven through pipes. libtx is loaded at start (`%lib`).

A cell is written to a file and run as `#include "<file>"`: one input per
cell, with its newlines, comments and preprocessor lines intact (clang-repl's
own line input joins continued lines without newlines), and with a real
source file behind every std::source_location, so tx names buffers and
variables after the source (`auto A = T::match_buffer(...)` is "A"). Errors
name the cell as cell[N]:line:col.

Lines at the top of a cell that start with % go to clang-repl as they are
(`%lib other.so`, `%undo`).

What a failing cell does (libtx_repl_guard does most of it, see
notebooks/repl/tx_repl_guard.cpp):
  * a C++ error: clang's diagnostics are the cell's error; nothing of the
    cell ran; the session goes on.
  * an exception that escapes the cell (a tx::Error, ...): its type and
    message are the error, the rest of the cell is skipped, the session goes
    on.
  * a crash (a segfault in the cell's code, or in clang-repl-19 itself, which
    crashes on a few invalid inputs): reported, the session goes on.
  * clang-repl dies all the same (an abort, a kill) or the cell is
    interrupted: a new clang-repl is started and the cells that succeeded
    before are replayed, output discarded; the cell reports what happened.
  * a cell cannot be linked ("JIT session error: Symbols not found") after
    an earlier cell had failed: the failed cell poisoned clang-repl-19's JIT
    (the function templates it instantiated first never get code, so every
    later cell that uses one fails to link, and nothing inside clang-repl
    can repair that). A new clang-repl is started, the cells that succeeded
    are replayed as above, and the cell runs again -- nothing of it had run,
    since it never linked; its output says so. (tx-repl does the same for a
    terminal session: notebooks/repl/tx_repl_supervisor.py.)

Environment: TX_REPL (the tx-repl launcher; default: `tx-repl` on PATH),
TX_KERNEL_DEBUG=1 (log the conversation with clang-repl to stderr).
"""

import codecs
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

from ipykernel.kernelbase import Kernel

__version__ = "0.1.0"

_SIGNAL_NAMES = {
    int(s): s.name for s in signal.Signals  # pylint: disable=no-member
}


class ReplDied(Exception):
    """clang-repl exited while running an input."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        if returncode is not None and returncode < 0:
            name = _SIGNAL_NAMES.get(-returncode, "signal")
            how = "%s (signal %d)" % (name, -returncode)
        else:
            how = "exit code %s" % returncode
        super().__init__("clang-repl died: " + how)
        self.how = how


class Repl:
    """One clang-repl process; run() sends inputs and collects the output."""

    def __init__(self, tx_repl, cwd, debug=False):
        self.debug = debug
        self.token = uuid.uuid4().hex[:12]
        self.count = 0
        # --raw: clang-repl itself, not tx-repl's supervisor -- the kernel
        # does the supervising (restart and replay) per cell
        args = [tx_repl, "--raw", "-Xcc=-iquote" + cwd]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            # Interrupts go to the kernel, which decides what happens to
            # clang-repl (it cannot interrupt JIT-ed code and survive).
            start_new_session=True,
        )
        self.lib = None
        # A cell failed in this process: it may have left the JIT without
        # code that later cells need (see the module's docstring).
        self.failed = False

    def _send(self, line):
        if self.debug:
            sys.stderr.write("tx_kernel >>> %s\n" % line)
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the read loop sees the death

    def run(self, inputs, on_stdout=None):
        """Sends `inputs` (lines) and then a marker; returns (stdout, stderr)
        up to the marker. on_stdout(text) gets stdout as it arrives. Raises
        ReplDied if clang-repl exits first."""
        self.count += 1
        marker = "@@TX:%s:%d@@" % (self.token, self.count)
        for line in inputs:
            self._send(line)
        # libtx_repl_guard's echo: no parser, no JIT, so it comes even after
        # an input that broke something
        self._send("%lib tx-repl-echo:" + marker)
        return self._read_until(marker.encode(), on_stdout)

    def _read_until(self, marker, on_stdout):
        sel = selectors.DefaultSelector()
        streams = {"stdout": self.proc.stdout, "stderr": self.proc.stderr}
        bufs = {"stdout": b"", "stderr": b""}
        done = {"stdout": False, "stderr": False}
        sent = 0  # bytes of stdout passed to on_stdout
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        for name, f in streams.items():
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ, name)
        eof = set()
        try:
            while not all(done.values()):
                events = sel.select(timeout=1.0)
                if not events and self.proc.poll() is not None and len(eof) < 2:
                    # exited; drain what is left
                    for name, f in streams.items():
                        try:
                            bufs[name] += f.read() or b""
                        except (OSError, ValueError):
                            pass
                    break
                for key, _ in events:
                    name = key.data
                    try:
                        data = os.read(key.fileobj.fileno(), 1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:
                        eof.add(name)
                        sel.unregister(key.fileobj)
                        continue
                    bufs[name] += data
                    if marker in bufs[name]:
                        done[name] = True
                    if name == "stdout" and on_stdout is not None:
                        # pass on all but what may be the start of the marker
                        buf = bufs[name]
                        end = buf.find(marker)
                        if end < 0:
                            end = len(buf)
                            for k in range(min(len(marker) - 1, len(buf) - sent), 0, -1):
                                if buf.endswith(marker[:k]):
                                    end -= k
                                    break
                        if end > sent:
                            text = decoder.decode(bufs[name][sent:end])
                            sent = end
                            if text:
                                on_stdout(text)
                if len(eof) == 2:
                    break
        finally:
            sel.close()
        if not all(done.values()):
            self.proc.wait()
            out = bufs["stdout"][sent:].decode("utf-8", "replace")
            if out and on_stdout is not None:
                on_stdout(out)
            raise ReplDied(self.proc.returncode, out, bufs["stderr"].decode("utf-8", "replace"))
        out_end = bufs["stdout"].find(marker)
        rest = decoder.decode(bufs["stdout"][sent:out_end], final=True)
        if rest and on_stdout is not None:
            on_stdout(rest)
        err = bufs["stderr"][: bufs["stderr"].find(marker)].decode("utf-8", "replace")
        if self.debug:
            sys.stderr.write("tx_kernel <<< stderr: %r\n" % err)
        return rest if on_stdout is None else "", err

    def start(self, lib):
        """Loads libtx."""
        self.lib = lib
        return self.run(["%lib " + lib] if lib else [])

    def close(self):
        if self.proc.poll() is None:
            self._send("%quit")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


_INCLUDED_FROM = re.compile(r"^In file included from (<<< inputs >>>|input_line_\d+):\d+:$")
_CRASHED = re.compile(r"^error: this input crashed clang-repl \((.*?)\)")
_UNCAUGHT = re.compile(r"^error: uncaught exception of type (.+?): (.*)$")
_UNCAUGHT_BARE = re.compile(r"^error: uncaught exception of type (.+)$")
_DIAG_ERROR = re.compile(r"^(?:[^\s:]+:\d+:\d+: )?(?:fatal )?error: (.*)$")
_JIT_ERROR = re.compile(r"JIT session error|Failed to materialize symbols|Symbols not found")


class TxKernel(Kernel):
    implementation = "tx"
    implementation_version = __version__
    language = "c++"
    language_version = "20"
    language_info = {
        "name": "c++",
        "version": "20",
        "mimetype": "text/x-c++src",
        "file_extension": ".cpp",
        "codemirror_mode": "text/x-c++src",
        "pygments_lexer": "cpp",
    }
    banner = "C++20 with tx on clang-repl-19"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tx_repl = os.environ.get("TX_REPL") or shutil.which("tx-repl") or "tx-repl"
        self.debug = os.environ.get("TX_KERNEL_DEBUG") == "1"
        self.cwd = os.getcwd()
        self.dir = tempfile.mkdtemp(prefix="tx-kernel-")
        os.makedirs(os.path.join(self.dir, "cells"))
        self.cells = 0
        self.names = {}  # cell file -> "cell[N]"
        # inputs of the cells that succeeded, in order: what a new clang-repl replays
        self.history = []
        self.repl = None
        self.start_error = None
        self._start()

    # ------------------------------------------------------------ the process

    def _start(self):
        self.start_error = None
        try:
            lib = subprocess.run(
                [self.tx_repl, "--lib"], capture_output=True, text=True, check=True
            ).stdout.strip()
            self.repl = Repl(self.tx_repl, self.cwd, self.debug)
            _, err = self.repl.start(lib)
            # tx::display (<tx/display.hpp>) where the build has it: without a
            # front end for rich output it prints each bundle's text/plain.
            display = os.path.join(os.path.dirname(lib), "libtx_display.so")
            if os.path.exists(display):
                _, more = self.repl.run(["%lib " + display])
                err += more
            if re.search(r"^error:", err, re.M):
                self.start_error = "starting clang-repl:\n" + err
        except (OSError, subprocess.CalledProcessError) as e:
            detail = getattr(e, "stderr", "") or ""
            self.start_error = "cannot start %s: %s %s" % (self.tx_repl, e, detail)
            self.repl = None
        except ReplDied as e:
            self.start_error = "%s while starting:\n%s" % (e, e.stderr)
            self.repl = None

    def _restart_and_replay(self):
        """A new clang-repl with the cells that succeeded replayed; returns a
        report (lines). Cells that fail on replay are left out from then on;
        if replaying kills clang-repl, the session starts again empty."""
        if self.repl is not None:
            try:
                self.repl.proc.kill()
            except OSError:
                pass
            self.repl.close()
        self._start()
        if self.start_error:
            return ["restarting clang-repl failed: " + self.start_error]
        replayed, failed = [], []
        for n, inputs in enumerate(self.history, 1):
            try:
                _, err = self.repl.run(inputs)
            except ReplDied as e:
                count, self.history = len(self.history), []
                self.repl.close()
                self._start()
                return [
                    "restarted clang-repl, but replaying earlier cell %d of %d killed it too (%s): "
                    "the session started again empty" % (n, count, e.how)
                ]
            if self._errors(err):
                failed.append(self._cell_name(inputs))
                self.repl.failed = True
            else:
                replayed.append(inputs)
        n = len(self.history)
        report = [
            "restarted clang-repl and replayed the %d earlier cell%s that had succeeded "
            "(output not shown)" % (n, "" if n == 1 else "s")
        ]
        if failed:
            report.append("failed on replay, left out from now on: " + ", ".join(failed))
        self.history = replayed
        return report

    def _cell_name(self, inputs):
        for path, name in self.names.items():
            if any(path in i for i in inputs):
                return name
        return " ".join(inputs)[:40]

    # ---------------------------------------------------------------- output

    def _clean(self, text):
        lines = []
        for line in text.splitlines():
            if _INCLUDED_FROM.match(line):
                continue
            if line == "error: the rest of this input was skipped; the session goes on":
                continue
            for path, name in self.names.items():
                if path in line:
                    line = line.replace(path, name)
            lines.append(line)
        # "Parsing failed" only repeats the diagnostics above it
        if any(l != "error: Parsing failed." and _DIAG_ERROR.match(l) for l in lines):
            lines = [l for l in lines if l != "error: Parsing failed."]
        return lines

    @staticmethod
    def _errors(text):
        return [l for l in text.splitlines() if _DIAG_ERROR.match(l) or _JIT_ERROR.search(l)]

    def _stream(self, name, text):
        if text:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _error_reply(self, ename, evalue, traceback):
        content = {"ename": ename, "evalue": evalue, "traceback": traceback}
        self.send_response(self.iopub_socket, "error", content)
        content["status"] = "error"
        content["execution_count"] = self.execution_count
        return content

    def _ok(self):
        return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}

    # -------------------------------------------------------------- requests

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, **kwargs):
        if self.repl is None:
            self._start()
            if self.repl is None:
                return self._error_reply("KernelError", self.start_error, [self.start_error])
        if self.start_error:
            err, self.start_error = self.start_error, None
            return self._error_reply("KernelError", err.splitlines()[0], err.splitlines())

        lines = code.splitlines()
        inputs = []
        while lines and (lines[0].strip().startswith("%") or not lines[0].strip()):
            if lines[0].strip():
                inputs.append(lines[0].strip())
            lines.pop(0)
        body = "\n".join(lines)
        if body.strip():
            # cells/cell_<N>.cpp: what tx prints as a kernel's source line
            self.cells += 1
            stem = "cell_%d" % self.execution_count if store_history else "cell_s%d" % self.cells
            path = os.path.join(self.dir, "cells", stem + ".cpp")
            with open(path, "w", encoding="utf-8") as f:
                f.write(body + "\n")
            self.names[path] = "cell[%s]" % (self.execution_count if store_history else "-")
            inputs.append('#include "%s"' % path)
        if not inputs:
            return self._ok()

        def on_stdout(text):
            if not silent:
                self._stream("stdout", text)

        was_failed = self.repl.failed
        err, reply = self._run(inputs, on_stdout)
        if reply is not None:
            return reply
        rerun = False
        if was_failed and _JIT_ERROR.search(err):
            # Poisoned by an earlier failed cell (the module's docstring).
            # Nothing of this cell ran: it never linked.
            report = self._restart_and_replay()
            note = (
                "tx: this cell could not be linked (JIT session error: an earlier failed cell left "
                "clang-repl-19 without code it needs): %s" % "; ".join(report)
            )
            if self.start_error or self.repl is None:
                return self._error_reply("ReplCrashed", "restarting clang-repl failed", [note])
            if not silent:
                self._stream("stderr", note + "; running this cell again\n")
            rerun = True
            err, reply = self._run(inputs, on_stdout)
            if reply is not None:
                return reply

        lines = self._clean(err)
        errors = self._errors(err)
        if not errors:
            if lines and not silent:
                self._stream("stderr", "\n".join(lines) + "\n")
            self.history.append(inputs)
            return self._ok()
        # Only cells that succeeded are replayed.
        self.repl.failed = True

        ename, evalue = "CompileError", ""
        for l in lines:
            m = _UNCAUGHT.match(l) or _UNCAUGHT_BARE.match(l)
            if m:
                ename = m.group(1)
                evalue = m.group(2) if m.lastindex and m.lastindex >= 2 else ""
                break
            m = _CRASHED.match(l)
            if m:
                ename, evalue = "Crash", "this cell crashed (%s); the session may be inconsistent" % m.group(1)
                break
        if not evalue:
            for l in lines:
                m = _DIAG_ERROR.match(l)
                if m:
                    evalue = m.group(1)
                    break
        if any(_JIT_ERROR.search(l) for l in lines):
            if ename == "CompileError":
                ename = "JITError"
            if rerun:
                why = "it did not link in the new clang-repl either"
            else:
                why = "no cell had failed before it in this clang-repl"
            lines.append(
                "(%s, so the cause is in this cell: it uses a function or variable that is "
                "declared but defined nowhere)" % why
            )
        return self._error_reply(ename, evalue, lines)

    def _run(self, inputs, on_stdout):
        """Runs a cell's inputs: (stderr, None), or (None, the error reply)
        when clang-repl died or the cell was interrupted -- clang-repl has
        been restarted then, the earlier cells replayed."""
        try:
            _, err = self.repl.run(inputs, on_stdout)
            return err, None
        except ReplDied as e:
            lines = self._clean(e.stderr)
            report = self._restart_and_replay()
            tb = lines + [
                "",
                "the C++ session (clang-repl-19) died running this cell: %s" % e.how,
            ] + report
            return None, self._error_reply("ReplCrashed", "clang-repl died: " + e.how, tb)
        except KeyboardInterrupt:
            report = self._restart_and_replay()
            tb = ["interrupted: clang-repl cannot stop JIT-ed code, so it was restarted"] + report
            return None, self._error_reply("KeyboardInterrupt", "interrupted", tb)

    def do_shutdown(self, restart):
        if self.repl is not None:
            self.repl.close()
            self.repl = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return {"status": "ok", "restart": restart}

    def do_is_complete(self, code):
        return {"status": "complete"}


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=TxKernel)
