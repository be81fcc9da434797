#!/usr/bin/env python3
"""tx-repl's supervisor: a clang-repl-19 session that survives a poisoned JIT.

    tx_repl_supervisor.py COMMAND...

The tx-repl launcher runs this (Python 3, standard library only) with
COMMAND = `tx-repl --raw ...`: clang-repl-19 with tx's flags and
libtx_repl_guard. The supervisor starts COMMAND as a child on pipes, reads
the inputs itself (a prompt and line editing on a terminal, plain lines from
a pipe; a line ending in `\\` continues the input, as in clang-repl), and
hands them to the child one at a time.

Why: clang-repl-19 cannot get over one failure, and nothing inside it can
repair it. When an input fails to compile, the function templates it
instantiated for the first time (std::uninitialized_copy<const long*, long*>
for a kernel's shape list, std::swap<const tx::ExprNode*>, ...) keep their
instantiated bodies in clang's AST, but clang never generates code for them:
clang does not instantiate them again, and code generation only looks again
for the bodies of functions declared inside a class. Every later input that
uses one of them fails to link ("JIT session error: Symbols not found"), and
each input that fails to link loses its own new code the same way, so the
failures spread. A new clang-repl has none of that.

So the supervisor keeps the inputs that succeeded, in order. When an input
fails to link after an earlier input had failed (in a session where nothing
had failed, a link error is the input's own: a function declared and
defined nowhere), it starts a new clang-repl, replays them with their output
dropped, prints one line saying so, and runs the input again -- nothing of
it had run, since it never linked. When clang-repl dies running an input (an
abort, a crash the guard cannot survive) or the input is interrupted
(Ctrl-C: JIT-ed code cannot be stopped), it restarts and replays the same
way, without running the input again.

Inputs that failed are not replayed; neither are blank lines and `//`
comment lines, which are not sent at all. The end of each input's output is
found with the guard's `%lib tx-repl-echo:MARKER` (it writes MARKER to
stderr and stdout without the parser or the JIT, so it answers even after an
input that broke something). Exit status: clang-repl's.
"""

import os
import re
import selectors
import signal
import subprocess
import sys
import uuid

PROMPT = "clang-repl> "
CONTINUATION = "clang-repl...   "  # clang-repl's own prompts

# clang's diagnostics, "error: Parsing failed.", the guard's reports
_ERROR = re.compile(rb"^(?:\S+:\d+:\d+: )?(?:fatal )?error: ")
_LINK_ERROR = re.compile(rb"JIT session error|Failed to materialize symbols|Symbols not found")


def _how(returncode):
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return "signal %d" % -returncode
    return "exit code %s" % returncode


def _inputs(n):
    return "the %d input%s that had succeeded" % (n, "" if n == 1 else "s")


class Died(Exception):
    """clang-repl exited before it finished an input."""

    def __init__(self, returncode):
        super().__init__(_how(returncode))
        self.returncode = returncode


class Result:
    def __init__(self):
        self.ok = True  # no error line
        self.link_failed = False  # a JIT link error line
        self.held = b""  # stderr from the first link error line on, not yet shown


class Repl:
    """One clang-repl process on pipes."""

    def __init__(self, command):
        # A session of its own: Ctrl-C on the terminal reaches only the
        # supervisor, which decides what happens to clang-repl.
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
        self.token = uuid.uuid4().hex[:12]
        self.count = 0
        # An input failed in this process: it may have left the JIT without
        # code that later inputs need.
        self.failed = False
        # What came after a marker (output of threads still running), shown
        # with the next input.
        self.leftover = {"stdout": b"", "stderr": b""}

    def run(self, lines, out=None, err=None):
        """Runs one input (its lines, as typed). Passes stdout to out and
        stderr, line by line, to err as they come -- except stderr from the
        first link error line on, which is held in the Result for the caller
        to show or drop. out/err None: output dropped. Raises Died."""
        self.count += 1
        marker = ("@@tx-repl:%s:%d@@" % (self.token, self.count)).encode()
        try:
            for line in lines + ["%lib tx-repl-echo:" + marker.decode()]:
                self.proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: the reads below see that
        res = Result()
        pending = dict(self.leftover)
        self.leftover = {"stdout": b"", "stderr": b""}
        done, eof = set(), set()

        def take(name, data):
            """Passes on what of `data` (after what was pending) belongs to
            this input and can be passed on now; keeps the rest pending."""
            buf = pending[name] + data
            at = buf.find(marker)
            if at >= 0:  # the end of this input's output on this stream
                self.leftover[name] = buf[at + len(marker) :]
                buf, cut = buf[:at], at
                done.add(name)
            elif name == "stdout":
                # all but what may be the start of the marker
                cut = len(buf)
                for k in range(min(len(marker) - 1, len(buf)), 0, -1):
                    if buf.endswith(marker[:k]):
                        cut -= k
                        break
            else:
                cut = buf.rfind(b"\n") + 1  # whole lines (a marker has no newline)
            pending[name] = buf[cut:]
            if name == "stdout":
                if cut and out:
                    out(buf[:cut])
            else:
                for line in buf[:cut].splitlines(keepends=True):
                    self._line(line, res, err)

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(self.proc.stderr, selectors.EVENT_READ, "stderr")
        try:
            for name in ("stdout", "stderr"):
                take(name, b"")
            while len(done | eof) < 2:
                events = sel.select(timeout=0.5)
                if not events and self.proc.poll() is not None:
                    break  # exited; what the pipes still hold is read below
                for key, _ in events:
                    try:
                        data = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:
                        eof.add(key.data)
                        sel.unregister(key.fileobj)
                    elif key.data not in done:
                        take(key.data, data)
                    else:
                        self.leftover[key.data] += data
        finally:
            sel.close()
        if len(done) == 2:
            return res
        # clang-repl died: show what it left, then say so
        for name, f in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            if name in done:
                continue
            try:
                os.set_blocking(f.fileno(), True)
                rest = pending[name] + (f.read() or b"")
            except (OSError, ValueError):
                rest = pending[name]
            if name == "stdout":
                if rest and out:
                    out(rest)
            else:
                for line in rest.splitlines(keepends=True):
                    self._line(line, res, err)
                if res.held and err:
                    err(res.held)
        self.proc.wait()
        raise Died(self.proc.returncode)

    @staticmethod
    def _line(line, res, err):
        if _ERROR.match(line):
            res.ok = False
        if res.held or _LINK_ERROR.search(line):
            res.ok = False
            res.link_failed = True
            res.held += line if line.endswith(b"\n") else line + b"\n"
        elif err:
            err(line)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        self.proc.wait()
        self._close()

    def quit(self, out, err):
        """Ends the session as clang-repl's %quit does; returns its status."""
        try:
            self.proc.stdin.write(b"%quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        # what it prints on the way out (destructors of the session's globals)
        for name, sink, f in (("stdout", out, self.proc.stdout), ("stderr", err, self.proc.stderr)):
            try:
                os.set_blocking(f.fileno(), True)
                data = self.leftover[name] + (f.read() or b"")
            except (OSError, ValueError):
                data = b""
            if data:
                sink(data)
        self.proc.wait()
        self._close()
        return self.proc.returncode

    def _close(self):
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


class Supervisor:
    def __init__(self, command):
        self.command = command
        self.history = []  # the inputs that succeeded, in order: what a new clang-repl replays
        self.repl = self._start()

    @staticmethod
    def out(data):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    @staticmethod
    def err(data):
        sys.stdout.flush()
        sys.stderr.buffer.write(data)
        sys.stderr.buffer.flush()

    def say(self, text):
        self.err(("tx-repl: " + text + "\n").encode())

    def _start(self):
        repl = Repl(self.command)
        try:
            repl.run([], self.out, self.err)  # its start-up output; and the guard answers
        except Died as e:
            # no session at all (a bad argument, a missing library): give up
            self.say("clang-repl exited on start (%s)" % e)
            sys.exit(e.returncode if e.returncode and e.returncode > 0 else 1)
        return repl

    def _restart(self, why, then=""):
        """A new clang-repl with the inputs that succeeded replayed; says so."""
        self.repl.kill()
        self.repl = self._start()
        replayed, failed = [], []
        for n, lines in enumerate(self.history, 1):
            try:
                r = self.repl.run(lines)
            except (Died, KeyboardInterrupt) as e:
                what = "was interrupted" if isinstance(e, KeyboardInterrupt) else "died (%s)" % e
                self.say(
                    "%s: restarted clang-repl, but replaying input %d of %d %s: the session "
                    "starts again empty" % (why, n, len(self.history), what)
                )
                self.history = []
                self.repl.kill()
                self.repl = self._start()
                return False
            if r.ok:
                replayed.append(lines)
            else:
                failed.append(lines[0].strip()[:60])
                self.repl.failed = True
        note = ""
        if failed:
            note = "; %d failed this time and are dropped: %s" % (len(failed), "; ".join(failed))
        self.say(
            "%s: restarted clang-repl, replayed %s (output not shown)%s%s"
            % (why, _inputs(len(self.history)), note, then)
        )
        self.history = replayed
        return True

    def _attempt(self, lines):
        """Runs the input once; None when clang-repl had to be restarted."""
        try:
            return self.repl.run(lines, self.out, self.err)
        except Died as e:
            self._restart("clang-repl died running this input (%s)" % e)
        except KeyboardInterrupt:
            self.err(b"\n")
            self._restart("interrupted (clang-repl cannot stop code that runs)")
        return None

    def execute(self, lines):
        was_failed = self.repl.failed
        r = self._attempt(lines)
        if r is None:
            return
        if r.link_failed and was_failed:
            # the session is poisoned (module docstring); this input never ran
            # (The line names no JIT error: a driver that reads errors from
            # stderr -- an older tx Jupyter kernel -- would take it for one.)
            restarted = self._restart(
                "this input could not be linked: an earlier failed input left clang-repl-19's JIT "
                "without code it needs",
                ", running this input again",
            )
            if not restarted:
                return
            r = self._attempt(lines)
            if r is None:
                return
        if r.held:
            self.err(r.held)
        if r.ok and not lines[0].startswith("%lib tx-repl-echo:"):  # a driver's marker: no state
            self.history.append(lines)
        else:
            self.repl.failed = True

    def quit(self):
        code = self.repl.quit(self.out, self.err)
        return 128 - code if code < 0 else code


def read_input(interactive):
    """One input: its lines as typed, or None at the end of the input."""
    lines = []
    while True:
        if interactive:
            try:
                line = input(CONTINUATION if lines else PROMPT)
            except EOFError:
                print()
                return None
        else:
            raw = sys.stdin.buffer.readline()
            if not raw:
                return None  # an unfinished continued input is dropped, as clang-repl does
            line = raw.decode("utf-8", "surrogateescape").rstrip("\r\n")
        lines.append(line)
        if not line.strip().endswith("\\"):
            return lines


def main(command):
    if not command:
        sys.stderr.write("usage: tx_repl_supervisor.py COMMAND...\n")
        return 2

    # The terminal's hang-up and a kill end the session; clang-repl, in a
    # session of its own, goes with it (the finally below).
    def leave(sig, _frame):
        raise SystemExit(128 + sig)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    sup = None
    try:
        sup = Supervisor(command)
        while True:
            try:
                lines = read_input(interactive)
            except KeyboardInterrupt:
                print()  # Ctrl-C at the prompt drops what was typed
                continue
            if lines is None:
                break
            text = "".join(l.strip() for l in lines)
            if not text or (len(lines) == 1 and text.startswith("//")):
                continue
            if text == "%quit":
                break
            sup.execute(lines)
        code = sup.quit()
        sup = None
        return code
    finally:
        if sup is not None:
            sup.repl.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
