//! A TCP stream that acknowledges what it reads at once.
//!
//! Jupyter Server (tornado) never turns Nagle's algorithm off on its WebSocket: a reply sent as
//! several small frames (`execute_reply`, then `status: idle`) has its second frame held until
//! the first is acknowledged, and Linux delays that acknowledgement by up to 40 ms. Measured on
//! loopback, every `1+1` took ~44 ms instead of a few. `TCP_QUICKACK` turns the delay off, but
//! Linux clears it again by itself, so it is set again after every read.
//!
//! Owns: nothing but that flag; reads and writes pass straight through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

#[derive(Debug)]
pub struct QuickAck(TcpStream);

impl QuickAck {
    pub fn new(stream: TcpStream) -> QuickAck {
        rearm(&stream);
        QuickAck(stream)
    }
}

fn rearm(stream: &TcpStream) {
    // Only latency depends on it: a platform without the option reads as before.
    let _ = socket2::SockRef::from(stream).set_tcp_quickack(true);
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if polled.is_ready() {
            rearm(&self.0);
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
