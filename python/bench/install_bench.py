"""Times ``%pip install`` as pi-repl runs it (uv) against IPython's own ``%pip`` (pip), in the
same run, on a warm cache (issue 28).

Usage: python install_bench.py PACKAGE [RUNS]   (run with an interpreter that has uv and pip,
e.g. pi-repl's venv). A throwaway venv (``--system-site-packages`` off) is made in a temp
directory; both installers are run once first to warm their caches; then each run uninstalls
the package's whole closure and installs it with one installer, alternating. The commands are
what a cell runs: the uv command ``packages.installer`` builds for a venv, and ``<python> -m pip install
PACKAGE`` (IPython's ``%pip``), both with ``-q``. Prints one JSON object: the median seconds of each and pip/uv.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    package = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    with tempfile.TemporaryDirectory(prefix="pi-repl-install-bench-") as scratch:
        venv = os.path.join(scratch, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        baseline = _installed(python)
        commands = {
            "uv": [uv, "pip", "install", "-q", "--python", python, package],
            "pip": [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", package],
        }
        for command in commands.values():  # warm both caches
            subprocess.run(command, check=True)
            _uninstall_added(uv, python, baseline)
        times = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                started = time.perf_counter()
                subprocess.run(command, check=True)
                times[name].append(time.perf_counter() - started)
                _uninstall_added(uv, python, baseline)
        medians = {name: statistics.median(values) for name, values in times.items()}
        print(json.dumps({
            "package": package,
            "runs": runs,
            "uv_s": round(medians["uv"], 3),
            "pip_s": round(medians["pip"], 3),
            "pip_over_uv": round(medians["pip"] / medians["uv"], 1),
        }))


def _installed(python):
    out = subprocess.run([python, "-m", "pip", "list", "--format=freeze"],
                         capture_output=True, text=True, check=True).stdout
    return {line.split("==")[0].lower() for line in out.splitlines() if "==" in line}


def _uninstall_added(uv, python, baseline):
    added = sorted(_installed(python) - baseline)
    if added:
        subprocess.run([uv, "pip", "uninstall", "-q", "--python", python, *added], check=True)


if __name__ == "__main__":
    main()
