//! A child process that is killed when the test lets go of it, also when the test panics: an
//! orphan `reel tail --wait` would keep the test's stderr pipe open and hang `cargo test`.

use std::{
    ops::{Deref, DerefMut},
    process::{Child, Command, Output},
};

/// A running child, killed and reaped on drop.
pub struct Spawned(Option<Child>);

impl Spawned {
    /// Starts `command`.
    pub fn start(command: &mut Command) -> Self {
        Self(Some(command.spawn().expect("the process starts")))
    }

    /// Waits for the child to exit and collects what it wrote to its piped outputs.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0
            .take()
            .expect("not waited for yet")
            .wait_with_output()
    }
}

impl Deref for Spawned {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.0.as_ref().expect("not waited for yet")
    }
}

impl DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("not waited for yet")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0
            && let Ok(None) = child.try_wait()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
