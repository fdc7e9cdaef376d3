"""The packages a session adds to the kernel's environment: installing, recording, reinstalling.

Owns:

- the installer: ``uv pip install --python <this interpreter>`` when this interpreter is a venv's
  and a ``uv`` binary is at hand (beside the interpreter, the ``uv`` wheel's, or on ``PATH``),
  else ``<this interpreter> -m pip install`` (uv's rules for a system interpreter differ from
  pip's, so a system Python keeps pip). ``%pip install ...`` in a cell goes through it; every
  other ``%pip`` command is IPython's own.
- ``Tracker``: which distributions the session added (name, version, top-level modules),
  compared with what the environment held when the kernel started. A cheap stamp of the
  ``sys.path`` directories (their mtimes) says when to look again; a look lists those
  directories' ``*.dist-info``/``*.egg-info`` names. Whatever installed them (``%pip``, ``!pip``, ``bash("pip install")``,
  ``subprocess``) counts.
- ``ensure``: at a revive, installing the recorded packages the environment lacks, before any
  binding is unpickled; or, when reinstalling is off or fails, naming them.

Does not own: where the record is kept (the snapshot manifest's ``packages``, written by
``snapshot_save`` and read by ``snapshot_restore``; ``docs/snapshot-format.md``).

Invariants: a recorded package stays recorded until the agent removes it from this kernel's
environment (one that a revive could not reinstall stays, so the next revive tries again);
reinstalling pins the recorded version and uses the index settings of the environment
(``PIP_*``/``UV_*`` variables, pip.conf, uv.toml).
"""

import importlib
import os
import re
import shutil
import subprocess
import sys

from . import environment

# How long a reinstall at revive may take before it is given up (and the packages named):
# within the host's boot budget (90 s), which the revive is part of.
REINSTALL_TIMEOUT_S = 60


# Options of ``pip install`` that ``uv pip install`` does not take: these go to pip.
PIP_ONLY = frozenset({"--user", "--root", "--no-warn-script-location"})


def installer(args):
    """The command that runs ``install <args>`` into this interpreter's environment."""
    uv = uv_binary()
    if uv is not None and environment.in_venv() and not PIP_ONLY.intersection(args):
        return [uv, "pip", "install", "--python", sys.executable, *args]
    return [sys.executable, "-m", "pip", "install", *args]


def uv_binary():
    """A ``uv`` executable: beside the interpreter, the ``uv`` wheel's, or on ``PATH``."""
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.access(beside, os.X_OK):
        return beside
    try:
        import uv

        return uv.find_uv_bin()
    except Exception:  # not installed, or its binary is missing: look on PATH
        return shutil.which("uv")


def install_pip_magic(shell):
    """``%pip install ...`` through ``installer``; every other ``%pip`` stays IPython's."""
    original = shell.find_line_magic("pip")

    def pip(line):
        words = line.split()
        if not words or words[0] != "install":
            return original(line) if original is not None else None
        import shlex

        command = " ".join(shlex.quote(word) for word in installer(words[1:]))
        shell.system(command)
        print("Note: the package is importable now; a module imported before it changed may "
              "need a kernel restart to pick up a new version.")
        return None

    pip.__doc__ = ("Install packages into the kernel's environment (uv when available, else "
                   "pip): %pip install PACKAGE ...")
    shell.register_magic_function(pip, "line", "pip")


def canonical(name):
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed():
    """``{canonical name: (name, version, metadata dir)}`` of every distribution on ``sys.path``
    (the first one of a name wins, as for imports). Read from the directory names
    (``NAME-VERSION.dist-info``, ``NAME-VERSION[-pyX.Y].egg-info``), not the metadata files: a
    look costs about a millisecond, where ``importlib.metadata`` took 200 ms for 120 packages."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for dirname in names:
            if dirname.endswith(".dist-info"):
                name, _, version = dirname[:-len(".dist-info")].rpartition("-")
            elif dirname.endswith(".egg-info"):
                name, _, version = dirname[:-len(".egg-info")].partition("-")
                version = version.split("-py", 1)[0]
            else:
                continue
            if name and version:
                found.setdefault(canonical(name),
                                 (name, version, os.path.join(entry or ".", dirname)))
    return found


def _modules_of(metadata_dir, name):
    """The top-level import names of a distribution (``top_level.txt``, else its ``RECORD``)."""
    try:
        with open(os.path.join(metadata_dir, "top_level.txt"), encoding="utf-8") as file:
            modules = {line.strip() for line in file if line.strip()}
    except OSError:
        modules = set()
    if not modules:
        try:
            with open(os.path.join(metadata_dir, "RECORD"), encoding="utf-8") as file:
                for line in file:
                    top = line.split(",", 1)[0].split("/", 1)
                    if len(top) == 2 and not top[0].endswith((".dist-info", ".data")) \
                            and top[0] != "..":
                        modules.add(top[0])
                    elif top[0].endswith(".py"):
                        modules.add(top[0][:-3])
        except OSError:
            pass
    return sorted(modules or {canonical(name).replace("-", "_")})


def _stamp():
    """The mtimes of the ``sys.path`` directories: an install or removal changes one."""
    stamp = []
    for entry in sys.path:
        if not entry:
            continue  # the working directory: it changes with every file a cell writes
        try:
            stamp.append((entry, os.stat(entry).st_mtime_ns))
        except OSError:
            stamp.append((entry, None))
    return tuple(stamp)


class Tracker:
    """What this session added to the environment (see the module docstring)."""

    def __init__(self):
        self.baseline = {name: found[1] for name, found in installed().items()}
        self.stamp = _stamp()
        # canonical name -> {"name", "version", "modules"}
        self.added = {}
        # Recorded packages seen installed in this kernel: removing one of those is the agent's.
        self.seen = set()

    def adopt(self, recorded):
        """Take a snapshot's record (``{canonical: {...}}``) as what the session added."""
        for name, entry in (recorded or {}).items():
            if isinstance(entry, dict) and entry.get("version"):
                self.added.setdefault(canonical(name), dict(entry))
        self.stamp = None  # look once: the revive may have reinstalled them

    def refresh(self):
        """Look again when the environment changed; True when the record changed."""
        stamp = _stamp()
        if stamp == self.stamp:
            return False
        self.stamp = stamp
        now = installed()
        before = dict(self.added)
        new = [name for name, (_, version, _) in now.items()
               if (self.added[name]["version"] != version if name in self.added
                   else self.baseline.get(name) != version)]
        for name in new:
            shown, version, metadata_dir = now[name]
            self.added[name] = {"name": shown, "version": version,
                                "modules": _modules_of(metadata_dir, shown)}
        for name in list(self.added):
            if name in now:
                self.seen.add(name)
            elif name in self.seen:
                del self.added[name]  # the agent removed it
        return self.added != before


def ensure(tracker, *, reinstall=True):
    """Install the recorded packages this environment lacks (at their recorded versions).

    Returns ``{"reinstalled": {name: version}, "missing": {name: {"version", "modules"}},
    "error": text or None, "off": bool}``; empty dicts when nothing was missing."""
    present = installed()
    lacking = {name: entry for name, entry in tracker.added.items()
               if present.get(name, (None, None, None))[1] != entry.get("version")}
    report = {"reinstalled": {}, "missing": {}, "error": None, "off": not reinstall}
    if not lacking:
        return report
    if reinstall:
        pins = [f"{entry.get('name') or name}=={entry['version']}"
                for name, entry in sorted(lacking.items())]
        try:
            done = subprocess.run(installer(pins), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=REINSTALL_TIMEOUT_S)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                report["error"] = " / ".join(tail) or f"exit status {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as error:
            report["error"] = str(error)
        importlib.invalidate_caches()
        present = installed()
    for name, entry in sorted(lacking.items()):
        shown = entry.get("name") or name
        if present.get(name, (None, None, None))[1] == entry.get("version"):
            report["reinstalled"][shown] = entry["version"]
        else:
            report["missing"][shown] = {"version": entry["version"],
                                        "modules": list(entry.get("modules") or [])}
    return report


def needed_by(missing, failed):
    """The bindings whose revive failed for want of a missing package's module."""
    for entry in missing.values():
        modules = entry.get("modules") or []
        entry["needed_by"] = sorted(
            binding for binding, why in failed.items()
            if any(f"No module named '{module}" in why for module in modules))
    return missing
