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
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Running while a write waits for the client.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl GuardedIo {
    pub fn new(stream: TcpStream, slot: OwnedSemaphorePermit, closing: CancellationToken) -> Self {
        Self {
            stream,
            _slot: slot,
            closing: Box::pin(closing.cancelled_owned()),
            stalled: None,
        }
    }

    /// Fails once the server closes its connections (and wakes the task then).
    fn check_open(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.closing.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server closed the connection",
            )),
            Poll::Pending => Ok(()),
        }
    }

    /// What a write's poll says, with the stall bound: pending for too long is an error.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
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

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.bounded(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.bounded(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.bounded(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
