"""The kernel's own interpreter first for its shells, and the record of what a session installed
(``pi_repl_kernel.environment``, ``pi_repl_kernel.packages``; issue 28). The installs through a
real kernel, pip and uv are ``tests/session_packages.rs``."""

import os
import sys

from pi_repl_kernel import environment, packages


def test_the_interpreters_directory_goes_first_on_path_once():
    bin_dir = os.path.dirname(sys.executable)
    environ = {"PATH": os.pathsep.join(["/usr/bin", bin_dir, "/bin"]), "VIRTUAL_ENV": "/elsewhere"}
    assert environment.adopt_own_interpreter(environ) == bin_dir
    assert environ["PATH"].split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]
    if environment.in_venv():
        assert environ["VIRTUAL_ENV"] == sys.prefix
    else:
        assert "VIRTUAL_ENV" not in environ, "a venv the host had active is not the kernel's"


def _dist_info(site, name, version):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name.replace('-', '_')}\n")
    (info / "RECORD").write_text("")
    return info


def test_a_distribution_added_to_sys_path_is_recorded_and_dropped_when_removed(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    sys.path.append(str(site))
    try:
        tracker = packages.Tracker()
        assert not tracker.refresh(), "nothing changed yet"
        info = _dist_info(site, "tiny-pkg", "1.2.3")
        assert tracker.refresh()
        assert tracker.added["tiny-pkg"]["version"] == "1.2.3"
        assert tracker.added["tiny-pkg"]["name"] == "tiny-pkg"
        for path in info.iterdir():
            path.unlink()
        info.rmdir()
        assert tracker.refresh()
        assert "tiny-pkg" not in tracker.added, "the agent removed it"
    finally:
        sys.path.remove(str(site))


def test_a_recorded_package_missing_here_is_named_with_the_bindings_that_need_it():
    tracker = packages.Tracker()
    tracker.adopt({"no-such-pkg": {"name": "no-such-pkg", "version": "9.9",
                                   "modules": ["no_such_pkg"]}})
    report = packages.ensure(tracker, reinstall=False)
    assert report["off"] and report["reinstalled"] == {}
    missing = packages.needed_by(report["missing"], {
        "t": "ModuleNotFoundError: No module named 'no_such_pkg'",
        "u": "ModuleNotFoundError: No module named 'other'",
    })
    assert missing == {"no-such-pkg": {"version": "9.9", "modules": ["no_such_pkg"],
                                       "needed_by": ["t"]}}
    assert "no-such-pkg" in tracker.added, "kept, so the next revive tries again"
