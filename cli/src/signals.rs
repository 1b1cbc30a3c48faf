//! SIGINT, SIGTERM and SIGHUP (the terminal went away) cancel the run instead of killing the
//! process, so that the run is recorded as stopped, the sinks are flushed, command tools are
//! stopped with their process groups, and `done` is still the last frame.

use std::sync::{
    Arc,
    atomic::{AtomicI32, Ordering},
};

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Watches for SIGINT, SIGTERM and SIGHUP and cancels a token when one arrives.
pub struct SignalWatch {
    received: Arc<AtomicI32>,
}

impl SignalWatch {
    /// Installs the handlers at once; the first signal cancels `cancel`.
    pub fn install(cancel: CancellationToken) -> std::io::Result<Self> {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let received = Arc::new(AtomicI32::new(0));
        let seen = Arc::clone(&received);
        tokio::spawn(async move {
            loop {
                let number = tokio::select! {
                    _ = interrupt.recv() => 2,
                    _ = terminate.recv() => 15,
                    _ = hangup.recv() => 1,
                };
                tracing::warn!("received signal {number}: stopping the run");
                let _ = seen.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
                cancel.cancel();
            }
        });
        Ok(Self { received })
    }

    /// The first signal received, if any (2, 15 or 1).
    pub fn received(&self) -> Option<i32> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            number => Some(number),
        }
    }
}
