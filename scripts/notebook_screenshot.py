#!/usr/bin/env python3
"""A screenshot of tx-kernel in JupyterLab, in a real browser (headless
Chromium driven by Playwright): a cell that builds a kernel and shows it with
tx::display (dispatch decisions, highlighted IR and CUDA), a measured table and
chart, and the completion popup of `Tx::wa`.

    scripts/notebook_screenshot.py [--out docs/notebook_tx_kernel.png] [--chromium PATH]

Needs: the "tx" kernelspec on tx-kernel (notebooks/install_kernel.sh --build
build), JupyterLab and Playwright for Python (pip install jupyterlab
playwright), Chromium (Debian: apt-get install chromium). The development
machine's tool, not a test.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CELLS = [
    """// A kernel in the notebook: tx::display shows the dispatch decisions, the IR and the CUDA.
using namespace tx;
PrimFunc scale_rows() {
  return T::prim_func("scale_rows", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 8}, f32);
    auto B = T::match_buffer(B_ptr, {32, 8}, f32);
    T::device_entry();
    T::cta_id({1});
    T::lane_id({32});
    T::thread_id({32});
    auto R = T::alloc_buffer({32, 8}, f32, scope::local, TileLayout(S({32, 8}, {1 * laneid, 1})));
    auto all = region({0, 32}, {0, 8});
    Tx::warp::copy(R[all], A[all]);
    Tx::warp::sqrt(R[all], R[all]);
    Tx::warp::copy(B[all], R[all]);
  });
}
Kernel k = compile(scale_rows(), {.device = Device::cuda(), .arch = "sm_90a"});
tx::display(k);""",
    """// A measured table and a chart: f16 on an H200, from docs/elementwise_bench.md.
tx::display(tx::Table{.header = {"op", "tx GB/s", "PyTorch eager GB/s"},
                      .rows = {{"gelu 2^28", "4190", "3150"},
                               {"silu_and_mul 2048 x 2x28672", "4009", "1072"}},
                      .caption = "f16, H200"});
tx::display(tx::BarChart{.title = "f16, H200", .labels = {"gelu", "silu_and_mul"},
                         .series = {"tx", "PyTorch eager"},
                         .values = {{4190, 4009}, {3150, 1072}}, .unit = "GB/s"});""",
    "",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(here, "docs", "notebook_tx_kernel.png"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--kernel", default="tx")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    work = tempfile.mkdtemp(prefix="tx-screenshot-")
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": c} for c in CELLS],
        "metadata": {"kernelspec": {"display_name": "C++20 (tx)", "language": "c++", "name": args.kernel},
                     "language_info": {"name": "c++"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    for i, c in enumerate(nb["cells"]):
        c["id"] = "cell%d" % i
    with open(os.path.join(work, "tx_kernel_tour.ipynb"), "w") as f:
        json.dump(nb, f)
    port = free_port()
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port", str(port),
         "--ServerApp.token=tx", "--ServerApp.root_dir=" + work, "--LabApp.news_url=",
         "--ServerApp.disable_check_xsrf=True"] + (["--allow-root"] if os.geteuid() == 0 else []),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/api?token=tx" % port, timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 1900})
            try:
                drive(page, port, args.out)
            except Exception:
                page.screenshot(path=args.out + ".failed.png", full_page=True)
                print("failed; the page as it was: " + args.out + ".failed.png")
                raise
            browser.close()
        print("wrote " + args.out)
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def drive(page, port, out):
    if True:
        if True:
            page.goto("http://127.0.0.1:%d/lab/tree/tx_kernel_tour.ipynb?token=tx&reset" % port)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120000)
            # JupyterLab may ask which kernel: the notebook's (selected).
            try:
                page.get_by_role("button", name="Select", exact=True).click(timeout=15000)
            except Exception:
                pass
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120000)
            # Run all cells (Run -> Run All Cells), then wait for both prompts
            # to show an execution count.
            page.get_by_text("Run", exact=True).first.click()
            page.get_by_text("Run All Cells", exact=True).first.click()
            page.wait_for_function(
                "Array.from(document.querySelectorAll('.jp-Cell .jp-InputPrompt'))"
                ".slice(0, 2).every(p => /\\[\\d+\\]/.test(p.textContent))", timeout=180000)
            time.sleep(2)
            for label in ("No",):  # the "Jupyter news" question, if asked
                b = page.get_by_role("button", name=label)
                if b.count():
                    b.first.click()
            page.keyboard.press("Escape")
            page.keyboard.press("Control+b")  # the file browser away: room for the notebook
            # The third cell: type, then Tab for completion.
            editor = page.locator(".jp-Cell").nth(2).locator(".cm-content")
            editor.click()
            page.keyboard.type("Tx::wa")
            page.keyboard.press("Tab")
            page.wait_for_selector(".jp-Completer", timeout=60000)
            time.sleep(1)
            # Close the file browser for room; the notebook as it is.
            page.screenshot(path=out, full_page=True)


if __name__ == "__main__":
    main()
