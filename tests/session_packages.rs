//! One environment everywhere (issue 28): a package installed from a cell (`%pip install`, with
//! uv) or from its shell (`bash("pip install …")`) imports in the cells and in the shell's
//! `python`; a durable session records what it added and a revive into an environment that lost
//! it reinstalls it before the bindings come back, or names it when reinstalling is off.
//!
//! Real parts only: the real binary, a real ipykernel, real pip and uv. No network: the packages
//! are wheels written by the test and installed with `--no-index --find-links`. Each test
//! installs into a throwaway venv of its own (never the shared test venv): `python -m venv
//! --without-pip`, which reaches the test venv's packages (ipykernel, pip, uv) through a `.pth`
//! file, with `uv` and a `pip` script put beside its interpreter.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestHome, test_python};

/// Writes `<name>-<version>-py3-none-any.whl` into `dir`: a module whose `WHO` is its name and
/// whose `Thing` is a picklable class (so a revived binding needs the package).
const WRITE_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
name, version, out = sys.argv[1], sys.argv[2], sys.argv[3]
files = {
    f"{name}/__init__.py": f"WHO = {name!r}\nclass Thing:\n    def __init__(self, n):\n        self.n = n\n",
    f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    f"{name}-{version}.dist-info/top_level.txt": f"{name}\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{name}-{version}.dist-info/RECORD,,")
files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(f"{out}/{name}-{version}-py3-none-any.whl", "w") as wheel:
    for path, text in files.items():
        wheel.writestr(path, text)
"#;

/// A throwaway venv and a directory of wheels.
struct Sandbox {
    venv: PathBuf,
    wheels: PathBuf,
}

impl Sandbox {
    fn new(home: &TestHome) -> Sandbox {
        let venv = home.path().join("venv");
        let wheels = home.path().join("wheels");
        std::fs::create_dir_all(&wheels).unwrap();
        run(Command::new(test_python())
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv));
        let python = venv.join("bin/python");
        let site = |python: &Path| {
            let out = run(Command::new(python).args([
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ]));
            PathBuf::from(out.trim())
        };
        let shared = site(&test_python());
        std::fs::write(
            site(&python).join("_pi_repl_test_shared.pth"),
            format!("{}\n", shared.display()),
        )
        .unwrap();
        let shared_bin = test_python().parent().unwrap().to_path_buf();
        std::os::unix::fs::symlink(shared_bin.join("uv"), venv.join("bin/uv")).unwrap();
        let pip = venv.join("bin/pip");
        std::fs::write(
            &pip,
            format!(
                "#!{}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n",
                python.display()
            ),
        )
        .unwrap();
        run(Command::new("chmod").arg("755").arg(&pip));
        for name in ["tinypkg", "tinytwo"] {
            run(Command::new(test_python())
                .args(["-c", WRITE_WHEEL, name, "0.1.0"])
                .arg(&wheels));
        }
        Sandbox { venv, wheels }
    }

    fn python(&self) -> PathBuf {
        self.venv.join("bin/python")
    }

    fn find_links(&self) -> String {
        format!("--no-index --find-links {}", self.wheels.display())
    }

    /// Who installed `name` into the venv (`uv` or `pip`, from its dist-info's INSTALLER).
    fn installer_of(&self, name: &str) -> String {
        let out = run(Command::new(self.python()).args([
            "-c",
            &format!("import importlib.metadata as m; print(m.distribution({name:?}).read_text('INSTALLER'))"),
        ]));
        out.trim().to_string()
    }

    /// `pi-repl` running its kernel on this venv's interpreter.
    fn cli(&self, home: &TestHome) -> Command {
        let mut command = home.cli();
        command.env("PI_REPL_PYTHON", self.python());
        command
    }

    /// The same, with pip and uv told to find packages only among the test's wheels (what a
    /// reinstall at revive uses, as a user's index settings would be).
    fn cli_offline(&self, home: &TestHome) -> Command {
        let mut command = self.cli(home);
        command
            .env("PIP_NO_INDEX", "1")
            .env("PIP_FIND_LINKS", &self.wheels)
            .env("UV_NO_INDEX", "1")
            .env("UV_FIND_LINKS", &self.wheels);
        command
    }
}

fn run(command: &mut Command) -> String {
    let out = command.output().expect("spawn");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn packages_installed_by_pip_magic_or_from_bash_import_in_cells_and_in_the_shell() {
    let home = TestHome::new();
    let sandbox = Sandbox::new(&home);
    let links = sandbox.find_links();
    let out = sandbox
        .cli(&home)
        .args([
            "exec",
            &format!("%pip install -q {links} tinypkg"),
            "import tinypkg; print(tinypkg.WHO)",
            "print(bash(\"python -c 'import tinypkg; print(tinypkg.WHO)'\", echo=False).stdout.strip())",
            &format!("print(bash('pip install -q {links} tinytwo', echo=False).returncode)"),
            "import tinytwo; print(tinytwo.WHO)",
            "print(bash(\"python -c 'import tinytwo; print(tinytwo.WHO)'\", echo=False).stdout.strip())",
            "import os, sys; print(os.environ['VIRTUAL_ENV'] == sys.prefix)",
            "import subprocess; print(subprocess.run(['python', '-c', 'import sys; print(sys.executable)'], capture_output=True, text=True).stdout.strip() == sys.executable)",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| !line.starts_with("Note:"))
        .collect();
    assert_eq!(
        lines,
        [
            "tinypkg", "tinypkg", "0", "tinytwo", "tinytwo", "True", "True"
        ],
        "{stdout}\n{stderr}"
    );
    assert_eq!(
        sandbox.installer_of("tinypkg"),
        "uv",
        "%pip install uses uv"
    );
    assert_eq!(
        sandbox.installer_of("tinytwo"),
        "pip",
        "the shell's pip is the venv's"
    );
}

/// Records `t`, an instance of a class from `tinypkg` that the session installed, then removes
/// `tinypkg` from the environment behind the session's back.
fn a_session_that_lost_its_package(home: &TestHome, sandbox: &Sandbox) {
    let links = sandbox.find_links();
    run(sandbox.cli(home).args([
        "exec",
        "--session",
        "s",
        &format!("%pip install -q {links} tinypkg"),
        "import tinypkg; t = tinypkg.Thing(7)",
    ]));
    let shown = run(sandbox.cli(home).args(["sessions", "show", "s"]));
    assert!(shown.contains("tinypkg==0.1.0"), "{shown}");
    run(Command::new(sandbox.venv.join("bin/pip")).args(["uninstall", "-q", "-y", "tinypkg"]));
}

#[test]
fn a_durable_session_whose_environment_lost_a_package_revives_with_it_reinstalled() {
    let home = TestHome::new();
    let sandbox = Sandbox::new(&home);
    a_session_that_lost_its_package(&home, &sandbox);
    let out = sandbox
        .cli_offline(&home)
        .args(["exec", "--session", "s", "print(t.n, type(t).__module__)"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "7 tinypkg\n", "{stderr}");
    assert!(
        stderr.contains("reinstalled first: tinypkg==0.1.0."),
        "{stderr}"
    );
    assert!(!stderr.contains("Lost:"), "{stderr}");
}

#[test]
fn with_reinstalling_off_the_reset_notice_names_the_missing_package_and_its_bindings() {
    let home = TestHome::new();
    let sandbox = Sandbox::new(&home);
    a_session_that_lost_its_package(&home, &sandbox);
    let out = sandbox
        .cli_offline(&home)
        .env("PI_REPL_REINSTALL_PACKAGES", "0")
        .args(["exec", "--session", "s", "print('t' in globals())"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "False\n", "{stderr}");
    assert!(
        stderr.contains(
            "missing from the environment, not reinstalled because reinstalling is switched \
             off (PI_REPL_REINSTALL_PACKAGES=0): tinypkg==0.1.0 (needed by t, tinypkg). Install them \
             with `%pip install tinypkg==0.1.0`"
        ),
        "{stderr}"
    );
}

#[test]
fn a_reinstall_that_fails_is_named_with_the_installers_error_and_the_session_goes_on() {
    let home = TestHome::new();
    let sandbox = Sandbox::new(&home);
    a_session_that_lost_its_package(&home, &sandbox);
    std::fs::remove_file(sandbox.wheels.join("tinypkg-0.1.0-py3-none-any.whl")).unwrap();
    let out = sandbox
        .cli_offline(&home)
        .args(["exec", "--session", "s", "print('t' in globals(), 1 + 1)"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "False 2\n", "{stderr}");
    assert!(
        stderr.contains(
            "missing from the environment, not reinstalled because installing them failed: "
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("tinypkg==0.1.0 (needed by t, tinypkg)"),
        "{stderr}"
    );
}
