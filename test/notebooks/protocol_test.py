#!/usr/bin/env python3
"""The tx Jupyter kernel (tx-kernel, notebooks/xeus) through the protocol.

    protocol_test.py TX_KERNEL

A headless client (jupyter_client) starts the kernel from a kernelspec made
for this run and checks, message by message: execute with streamed output,
complete (`Tx::wa` -> `warp`), inspect, is_complete, display_data bundles
(image/png from disk, text/html of a table and of a kernel), a tx error, a C++
error, an exception, a crash, a C++ error that poisons the JIT followed by a
cell that needs a restart and works, and an interrupt of a running cell --
each followed by a cell that uses what was defined before.

Exit: 0 pass, 1 fail.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
PNG = os.path.join(SRC, "docs", "bench", "elementwise.png")

failures = []


def check(cond, what, detail=""):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n     " + detail.replace("\n", "\n     ") if detail else ""))
        failures.append(what)


class Kernel:
    def __init__(self, tx_kernel):
        from jupyter_client import KernelManager

        self.dir = tempfile.mkdtemp(prefix="tx-protocol-")
        spec = os.path.join(self.dir, "kernels", "tx-protocol")
        os.makedirs(spec)
        with open(os.path.join(spec, "kernel.json"), "w") as f:
            json.dump(
                {
                    "argv": [tx_kernel, "-f", "{connection_file}"],
                    "display_name": "C++20 (tx, protocol test)",
                    "language": "c++",
                    "interrupt_mode": "signal",
                },
                f,
            )
        os.environ["JUPYTER_PATH"] = self.dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        self.km = KernelManager(kernel_name="tx-protocol")
        self.km.start_kernel(cwd=self.dir)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=180)

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def shell_reply(self, msg_id, timeout):
        deadline = time.time() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(1, deadline - time.time()))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def execute(self, code, timeout=300, interrupt_after=None):
        """Runs a cell; returns (reply content, iopub messages of the cell)."""
        msg_id = self.kc.execute(code)
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            self.km.interrupt_kernel()
        msgs = []
        deadline = time.time() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(1, deadline - time.time()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            msgs.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        return self.shell_reply(msg_id, timeout)["content"], msgs

    def request(self, method, *args):
        msg_id = getattr(self.kc, method)(*args)
        return self.shell_reply(msg_id, 120)["content"]


def text_of(msgs):
    out = []
    for m in msgs:
        c = m["content"]
        if m["msg_type"] == "stream":
            out.append(c["text"])
        elif m["msg_type"] in ("display_data", "execute_result"):
            out.append(c["data"].get("text/plain", ""))
        elif m["msg_type"] == "error":
            out.append(c["ename"] + ": " + c["evalue"] + "\n" + "\n".join(c["traceback"]))
    return "".join(out)


def run(tx_kernel):
    t0 = time.time()
    k = Kernel(tx_kernel)
    print("kernel ready in %.1f s" % (time.time() - t0))
    try:
        info = k.request("kernel_info")
        check(info["language_info"]["name"] == "c++", "kernel_info: language c++", str(info))

        # execute, output streamed from std::cout and printf
        reply, msgs = k.execute('#include <cstdio>\nusing namespace tx;\nint kept = 41;\nstd::cout << "kept + 1 = " << kept + 1 << std::endl;\nstd::printf("printf too\\n");')
        out = text_of(msgs)
        check(reply["status"] == "ok", "execute: ok", str(reply))
        check("kept + 1 = 42" in out and "printf too" in out, "execute: stdout streamed", out)
        check(any(m["msg_type"] == "stream" for m in msgs), "execute: stream messages")

        # is_complete
        for code, want in (("int x = 1;", "complete"), ("int f() {\n  return 1;", "incomplete"),
                           ("auto s = \"unterminated", "incomplete"), ("int y = 2; }", "invalid"),
                           ("/* open comment", "incomplete")):
            got = k.request("is_complete", code)
            check(got["status"] == want, "is_complete %r -> %s" % (code, want), str(got))

        # complete: tx's namespaces (the prelude includes tx; the first cell had
        # `using namespace tx;`)
        got = k.request("complete", "Tx::wa", 6)
        check("warp" in got["matches"], "complete Tx::wa -> warp", str(got))
        check(got["cursor_start"] == 4 and got["cursor_end"] == 6, "complete: the range replaces 'wa'", str(got))
        got = k.request("complete", "auto A = tx::T::mat", 19)
        check("match_buffer" in got["matches"] and "match_scalar" in got["matches"],
              "complete tx::T::mat -> match_buffer, match_scalar", str(got))
        got = k.request("complete", "  Tx::cta::sq", 13)
        check("sqrt" in got["matches"], "complete Tx::cta::sq -> sqrt", str(got))
        got = k.request("complete", "int z = kep", 11)
        check("kept" in got["matches"], "complete a cell's variable: kep -> kept", str(got))

        # inspect: a declaration and its comment
        got = k.request("inspect", "tx::compile(f)", 6)
        data = got.get("data", {}).get("text/plain", "")
        check(got.get("found") and "Kernel compile(const PrimFunc" in data and "// Lowers" in data,
              "inspect tx::compile: its declaration and the comment above it", str(got))
        got = k.request("inspect", "Tensor t", 3)
        data = got.get("data", {}).get("text/plain", "")
        check(got.get("found") and "class tx::Tensor" in data and "from_doubles" in data,
              "inspect Tensor: the class and its public members", data[:600])
        got = k.request("inspect", "no_such_name_here", 3)
        check(not got.get("found"), "inspect an unknown name: not found", str(got))

        # rich display: an image from disk, an HTML table, a kernel
        reply, msgs = k.execute('tx::display(tx::Image{.path = "%s", .width = 320});' % PNG)
        dd = [m["content"] for m in msgs if m["msg_type"] == "display_data"]
        check(reply["status"] == "ok" and dd and "image/png" in dd[0]["data"], "display: image/png bundle", str(reply))
        if dd and "image/png" in dd[0]["data"]:
            import base64
            raw = base64.b64decode(dd[0]["data"]["image/png"])
            check(raw[:8] == b"\x89PNG\r\n\x1a\n" and raw == open(PNG, "rb").read(), "display: the PNG's bytes, base64")
            check(dd[0]["metadata"].get("image/png", {}).get("width") == 320, "display: width metadata", str(dd[0]["metadata"]))
        reply, msgs = k.execute('tx::display(tx::Table{.header = {"op", "GB/s"}, .rows = {{"gelu", "3712"}, {"a<b", "1.5"}}});')
        dd = [m["content"] for m in msgs if m["msg_type"] == "display_data"]
        html = dd[0]["data"].get("text/html", "") if dd else ""
        check("<table" in html and "a&lt;b" in html and "3712" in html, "display: a table as text/html", html[:300])
        reply, msgs = k.execute("""
using namespace tx;
PrimFunc doubler() {
  return T::prim_func("doubler", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    T::device_entry();
    T::cta_id({1});
    auto t = T::thread_id({64});
    A(t) = A(t) * 2.0f;
  });
}
Kernel dk = compile(doubler(), {.device = Device::cuda(), .arch = "sm_90a"});
tx::display(dk);
""")
        dd = [m["content"] for m in msgs if m["msg_type"] == "display_data"]
        html = dd[0]["data"].get("text/html", "") if dd else ""
        check(reply["status"] == "ok" and "extern" in html and "<span" in html and "doubler" in html,
              "display: a kernel's IR and CUDA as highlighted HTML", str(reply)[:400] + html[:300])

        # a tx error: the launch checks the tensors
        reply, msgs = k.execute("""Kernel hk = compile(doubler());
Tensor wrong = Tensor::empty({64}, f16, hk.device());
hk(wrong);""")
        out = text_of(msgs)
        check(reply["status"] == "error" and "tx::Error" in reply["ename"], "tx error: the reply is an error of type tx::Error", str(reply))
        check("cell[" in out and ("f16" in out or "dtype" in out), "tx error: names the cell's line and the reason", out)

        # a C++ error, then an exception, then a crash; each followed by a working cell
        reply, msgs = k.execute("int broken = kept + missing_name;")
        out = text_of(msgs)
        check(reply["status"] == "error" and "missing_name" in out and "cell[" in out, "C++ error: clang's diagnostic, named after the cell", out)
        reply, msgs = k.execute('#include <stdexcept>\nstd::cout << "before" << std::endl;\nthrow std::runtime_error("thrown on purpose");')
        out = text_of(msgs)
        check(reply["status"] == "error" and "std::runtime_error" in reply["ename"] and "thrown on purpose" in out and "before" in out,
              "exception: type and what(), output before it kept", out)
        reply, msgs = k.execute("*(volatile int*)nullptr = 1;")
        out = text_of(msgs)
        check(reply["status"] == "error" and "SIGSEGV" in out, "crash: reported as SIGSEGV", out)
        reply, msgs = k.execute('std::cout << "after the crash: kept = " << kept << std::endl;')
        check(reply["status"] == "ok" and "after the crash: kept = 41" in text_of(msgs), "the session goes on after the crash", text_of(msgs))

        # a failed redefinition: clang 19 forgets the good definition with the bad one;
        # the kernel notices the name it calls undeclared and restarts
        reply, _ = k.execute("int answer() { return 42; }")
        reply, msgs = k.execute("int answer() { return 43; }")
        check(reply["status"] == "error" and "redefinition of 'answer'" in text_of(msgs), "redefinition: a C++ error", text_of(msgs))
        reply, msgs = k.execute('std::cout << "answer() = " << answer() << std::endl;')
        check(reply["status"] == "ok" and "answer() = 42" in text_of(msgs), "after a failed redefinition, the first definition is there", text_of(msgs))

        # a C++ error that poisons the JIT (a failed cell that was the first to
        # instantiate std::map's templates, with an error in a kernel's lambda),
        # then a cell that needs what it left without code
        reply, _ = k.execute("#include <map>")
        reply, msgs = k.execute("""
std::map<long, std::vector<double>> runs_by_size() {
  std::map<long, std::vector<double>> m;
  m[64].push_back(1.5);
  return m;
}
PrimFunc broken_kernel() {
  return T::prim_func("broken", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64, 2}, f32);
    T::device_entry();
    A(0) = A("zero");
  });
}""")
        check(reply["status"] == "error", "poisoning C++ error: an error", text_of(msgs))
        reply, msgs = k.execute("""
PrimFunc tripler() {
  return T::prim_func("tripler", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64, 2}, f32);
    T::device_entry();
    T::cta_id({1});
    auto t = T::thread_id({64});
    A(t, 0) = A(t, 0) * 3.0f;
  });
}
std::map<long, std::vector<double>> built;
Kernel tk = compile(tripler());
built[64].push_back(3.0);
std::cout << "tripler built for " << tk.device().str() << ", kept = " << kept << ", " << built.size() << std::endl;
""")
        out = text_of(msgs)
        check(reply["status"] == "ok" and "tripler built" in out and "kept = 41, 1" in out,
              "after the poisoning error, a working cell (restarted and replayed)", out)
        check("restarted" in out, "the poisoned cell made the kernel restart the interpreter", out)
        # the recovery line alone: the JIT's text (mangled symbol names) goes
        # to the kernel's log, not into the cell
        check("_ZN" not in out and "Symbols not found" not in out,
              "the recovered cell shows the recovery line, not the JIT's symbol names", out)

        # interrupt: a cell that would run for ever
        t = time.time()
        reply, msgs = k.execute('std::cout << "spinning" << std::endl;\nfor (volatile long i = 0;; ++i) {}', interrupt_after=3)
        out = text_of(msgs)
        check(reply["status"] == "error" and "interrupt" in out.lower() and "spinning" in out,
              "interrupt: the running cell stops with an error (%.1f s)" % (time.time() - t), out)
        reply, msgs = k.execute('std::cout << "after the interrupt: kept = " << kept << std::endl;')
        check(reply["status"] == "ok" and "after the interrupt: kept = 41" in text_of(msgs),
              "the session goes on after the interrupt", text_of(msgs))
    finally:
        k.close()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        run(os.path.abspath(sys.argv[1]))
    except Exception:  # a dead kernel, a timeout
        traceback.print_exc()
        failures.append("the session did not run to the end")
    if failures:
        print("FAILED: %d check(s): %s" % (len(failures), "; ".join(failures)))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
