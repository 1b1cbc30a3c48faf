//! A connection's socket with the server's bounds on it, which stay with it after an upgrade
//! to a WebSocket (hyper hands the same socket on):
//!
//! * it holds one of the server's connection slots until it is closed;
//! * a write that has waited [`WRITE_STALL`] for the client to read fails, so a client that
//!   stops reading cannot hold the connection (and the frames queued for it) for ever;
//! * once the server closes every connection, each read and write fails at once.

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::OwnedSemaphorePermit,
    time::Sleep,
};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::connections::WRITE_STALL;

pub struct GuardedIo {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    /// Checked (an atomic load) before each read and write.
    closed: CancellationToken,
    /// Polled only when the socket has to wait, so that closing wakes a waiting task.
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Running while a write waits for the client.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl GuardedIo {
    pub fn new(stream: TcpStream, slot: OwnedSemaphorePermit, closing: CancellationToken) -> Self {
        Self {
            stream,
            _slot: slot,
            closed: closing.clone(),
            closing: Box::pin(closing.cancelled_owned()),
            stalled: None,
        }
    }

    /// What a poll of the socket says, unless the server closes its connections: then an error
    /// at once, or, for a poll that has to wait, as soon as it closes them.
    fn guarded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if self.closed.is_cancelled() {
            return Poll::Ready(Err(closed()));
        }
        let polled = poll(Pin::new(&mut self.stream), cx);
        if polled.is_pending() && self.closing.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(closed()));
        }
        polled
    }

    /// A write's poll, with the stall bound: pending for too long is an error.
    fn write_guarded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        let polled = self.guarded(cx, poll);
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL)));
        ready!(stalled.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client read nothing for a minute",
        )))
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the server closed the connection",
    )
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut()
            .guarded(cx, |stream, cx| stream.poll_read(cx, buf))
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_guarded(cx, |stream, cx| stream.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_guarded(cx, |stream, cx| stream.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .write_guarded(cx, |stream, cx| stream.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
