#!/usr/bin/env python3
"""Executes notebooks headless on the tx Jupyter kernel and checks them.

    run_notebooks.py (--tx-kernel BUILD/tx-kernel | --tx-repl BUILD/tx-repl)
                     [--save-dir DIR] NOTEBOOK...

The kernel is tx-kernel (notebooks/xeus) of the build, or the fallback,
notebooks/kernel/tx_kernel.py of this source tree on the build's tx-repl; it
runs through a kernelspec made for this run in a temporary JUPYTER_PATH (a
kernelspec the user installed is neither needed nor used). Each notebook runs in its own
folder with nbclient. A code cell

  * fails the test if it raises an error, unless it is tagged
    "raises-exception" -- then it must raise one;
  * must show, in its outputs (streams, results and error tracebacks), every
    string in its metadata "tx": {"expect": [...]} list, and none in its
    "tx": {"expect_not": [...]} list; on tx-kernel also every string of
    "tx": {"expect_rich": [...]} (rich output, shown in the text as
    "[text/html] ...", "[image/svg+xml] ...", "[image/png]"; the fallback
    kernel prints tx::display's text/plain instead).

Exit: 0 pass, 1 fail, 77 skipped (Jupyter or clang-repl-19 missing; the
reason is printed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
KERNEL_PY = os.path.join(SRC, "notebooks", "kernel", "tx_kernel.py")
KERNEL_NAME = "tx-test"


def skip(why):
    # CI sets TX_REQUIRE_INTERACTIVE=1: there a missing tool is a failure.
    if os.environ.get("TX_REQUIRE_INTERACTIVE") == "1":
        print("FAIL (TX_REQUIRE_INTERACTIVE=1): " + why)
        sys.exit(1)
    print("SKIPPED: " + why)
    sys.exit(77)


def cell_text(cell):
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            # a stream may come in pieces (tx-kernel sends output as it is
            # written): the pieces join without a separator
            text = out.get("text", "")
            text = text if isinstance(text, str) else "".join(text)
            if parts and parts[-1].startswith("\0stream"):
                parts[-1] += text
            else:
                parts.append("\0stream" + text)
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            parts.append(data.get("text/plain", ""))
            # the rich parts, so that expectations can name them
            for mime in ("text/html", "image/svg+xml"):
                if mime in data:
                    parts.append("[%s] %s" % (mime, data[mime] if isinstance(data[mime], str) else "".join(data[mime])))
            if "image/png" in data:
                parts.append("[image/png]")
        elif kind == "error":
            parts.append("%s: %s" % (out.get("ename", ""), out.get("evalue", "")))
            parts.extend(out.get("traceback", []))
    parts = [p[len("\0stream"):] if p.startswith("\0stream") else p for p in parts]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def check_notebook(nb, name, rich):
    """Returns (problems, number of expectations checked)."""
    problems, checked = [], 0
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code_cells, 1):
        where = "%s, code cell %d (%s)" % (
            name,
            i,
            cell.source.strip().splitlines()[0][:60] if cell.source.strip() else "empty",
        )
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        tags = cell.get("metadata", {}).get("tags", [])
        if "raises-exception" in tags:
            checked += 1
            if not errors:
                problems.append(where + ": tagged raises-exception but raised no error")
        elif errors:
            e = errors[0]
            problems.append(
                "%s: unexpected error %s: %s\n      %s"
                % (where, e.get("ename"), e.get("evalue"), "\n      ".join(e.get("traceback", [])[:20]))
            )
        text = cell_text(cell)
        shown = text if len(text) < 3000 else text[:1500] + "\n...\n" + text[-1500:]
        tx = cell.get("metadata", {}).get("tx", {})
        for want in tx.get("expect", []) + (tx.get("expect_rich", []) if rich else []):
            checked += 1
            if want not in text:
                problems.append("%s: expected output missing: %r\n      output was:\n%s" % (where, want, shown))
        for unwanted in tx.get("expect_not", []):
            checked += 1
            if unwanted in text:
                problems.append("%s: output shows %r\n      output was:\n%s" % (where, unwanted, shown))
    if checked == 0:
        problems.append(name + ": no expectations (tag a cell or give it metadata tx.expect)")
    return problems, checked


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tx-repl", help="the tx-repl launcher of the build to test (the fallback kernel)")
    ap.add_argument("--tx-kernel", help="tx-kernel of the build to test (the xeus kernel)")
    ap.add_argument("--save-dir", help="write the executed notebooks here")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args()

    try:
        import nbformat  # noqa: F401
        from nbclient import NotebookClient
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
    except ImportError as e:
        skip("Jupyter is not installed for %s (%s): run notebooks/install_kernel.sh" % (sys.executable, e))
    import nbformat

    if bool(args.tx_repl) == bool(args.tx_kernel):
        ap.error("give one of --tx-kernel and --tx-repl")
    tool = os.path.abspath(args.tx_kernel or args.tx_repl)
    if not os.access(tool, os.X_OK):
        print("FAIL: %s is missing" % tool)
        return 1
    check = subprocess.run([tool, "--check"], capture_output=True, text=True)
    if check.returncode != 0:
        skip((check.stdout + check.stderr).strip())
    if args.tx_kernel:
        spec = {"argv": [tool, "-f", "{connection_file}"], "display_name": "C++20 (tx-kernel, test)",
                "language": "c++", "interrupt_mode": "signal"}
    else:
        spec = {"argv": [sys.executable, KERNEL_PY, "-f", "{connection_file}"],
                "display_name": "C++20 (tx, test)", "language": "c++", "env": {"TX_REPL": tool}}
    print("kernel: " + " ".join(spec["argv"][:2]))

    # A kernelspec for this source tree and build, seen only by this run.
    jupyter_dir = tempfile.mkdtemp(prefix="tx-notebooks-")
    try:
        spec_dir = os.path.join(jupyter_dir, "kernels", KERNEL_NAME)
        os.makedirs(spec_dir)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
            json.dump(spec, f)
        os.environ["JUPYTER_PATH"] = jupyter_dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")

        failed = 0
        for path in args.notebooks:
            name = os.path.relpath(path, SRC)
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs = []
            t0 = time.time()
            client = NotebookClient(
                nb,
                kernel_name=KERNEL_NAME,
                timeout=args.timeout,
                allow_errors=True,
                resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
            )
            try:
                client.execute()
            except Exception as e:  # a dead kernel, a timeout
                print("FAIL %s: the notebook did not run to the end: %s: %s" % (name, type(e).__name__, e))
                failed += 1
                continue
            seconds = time.time() - t0
            if args.save_dir:
                os.makedirs(args.save_dir, exist_ok=True)
                nbformat.write(nb, os.path.join(args.save_dir, os.path.basename(path)))
            problems, checked = check_notebook(nb, name, rich=bool(args.tx_kernel))
            cells = sum(1 for c in nb.cells if c.cell_type == "code")
            if problems:
                failed += 1
                print("FAIL %s (%d cells, %.1f s):" % (name, cells, seconds))
                for p in problems:
                    print("  - " + p)
            else:
                print("PASS %s: %d code cells, %d checks, %.1f s" % (name, cells, checked, seconds))
        return 1 if failed else 0
    finally:
        shutil.rmtree(jupyter_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
