//! What a connection carries below HTTP semantics: the framing watch that
//! spots request smuggling, and the body timer that ends a request whose
//! body stalls. `serve` wires both into every connection.
//!
//! Smuggling: given a head with both `Content-Length` and
//! `Transfer-Encoding`, hyper 1.x drops `Content-Length`, reads the body as
//! chunked and closes the connection after the response, but it still hands
//! the request to the service, which can no longer tell it from an honest
//! chunked request. `Watched` therefore reads a copy of the bytes hyper
//! reads, follows the message framing (heads, `Content-Length` bodies,
//! chunked bodies) and records the index of the first head that carries
//! both headers; `Framing::smuggled` answers for the request hyper hands
//! over next.
//!
//! Rules: the watch never changes, delays or withholds a byte; hyper alone
//! decides what a request is, and the watch only flags. When the watch
//! cannot follow the framing (a head it cannot parse or that is too large,
//! a malformed chunk) it stops watching: hyper refuses such input itself
//! and closes the connection, so no later request exists to misjudge.

use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// Most headers hyper accepts in one head (its default); a head with more
/// is refused by hyper, so the watch stops there too.
const MAX_HEADERS: usize = 100;

/// Longest chunk-size line (size and extensions) the watch follows.
const MAX_CHUNK_LINE: usize = 4096;

/// What the framing watch of one connection has learnt, shared between
/// the connection's bytes and its service.
#[derive(Debug)]
pub(crate) struct Framing {
    /// Index of the first head carrying both `Content-Length` and
    /// `Transfer-Encoding`; `u64::MAX` while there is none.
    smuggled_from: AtomicU64,
    /// Requests handed to the service so far.
    served: AtomicU64,
}

impl Framing {
    pub(crate) fn new() -> Arc<Framing> {
        Arc::new(Framing {
            smuggled_from: AtomicU64::new(u64::MAX),
            served: AtomicU64::new(0),
        })
    }

    /// Counts the request hyper hands over now and tells whether its head
    /// (or an earlier one of the connection) carried both length headers.
    /// hyper parses a head only from bytes the watch has already seen, and
    /// hands HTTP/1 requests over one at a time, in order.
    pub(crate) fn next_is_smuggled(&self) -> bool {
        let index = self.served.fetch_add(1, Ordering::AcqRel);
        index >= self.smuggled_from.load(Ordering::Acquire)
    }

    fn flag(&self, index: u64) {
        self.smuggled_from.store(index, Ordering::Release);
    }
}

/// Where the watch is in the byte stream.
#[derive(Debug)]
enum State {
    /// Before or inside a request head (its bytes so far in `Watch::head`).
    Head,
    /// Inside a `Content-Length` body: bytes still to come.
    Body(u64),
    /// Inside a chunk-size line.
    ChunkLine(ChunkLine),
    /// Inside a chunk's data and its closing CRLF: bytes still to come.
    ChunkData(u64),
    /// After the last chunk: trailer lines until an empty one.
    Trailers { line: usize, total: usize },
    /// Not following any more; see the module documentation.
    Off,
}

#[derive(Debug, Default)]
struct ChunkLine {
    size: u64,
    digits: u32,
    /// The size has ended; the rest of the line is extensions and CR.
    after_size: bool,
    len: usize,
}

/// The framing watch of one connection.
#[derive(Debug)]
struct Watch {
    state: State,
    /// A head split across reads, kept until its end arrives.
    head: Vec<u8>,
    heads: u64,
    max_head: usize,
    framing: Arc<Framing>,
}

impl Watch {
    fn feed(&mut self, mut input: &[u8]) {
        while !input.is_empty() {
            match &mut self.state {
                State::Off => return,
                State::Head => input = self.feed_head(input),
                State::Body(left) | State::ChunkData(left) => {
                    let take = (*left).min(input.len() as u64);
                    *left -= take;
                    input = &input[take as usize..];
                    if *left == 0 {
                        self.state = match self.state {
                            State::Body(_) => State::Head,
                            _ => State::ChunkLine(ChunkLine::default()),
                        };
                    }
                }
                State::ChunkLine(line) => {
                    let byte = input[0];
                    input = &input[1..];
                    self.state = chunk_line(std::mem::take(line), byte);
                }
                State::Trailers { line, total } => {
                    let byte = input[0];
                    input = &input[1..];
                    *total += 1;
                    let too_long = *total > self.max_head;
                    let ended = byte == b'\n' && *line == 0;
                    match byte {
                        b'\n' => *line = 0,
                        b'\r' => {}
                        _ => *line += 1,
                    }
                    if ended {
                        self.state = State::Head;
                    } else if too_long {
                        self.state = State::Off;
                    }
                }
            }
        }
    }

    /// Consumes head bytes from `input`; returns what follows the head.
    fn feed_head<'a>(&mut self, input: &'a [u8]) -> &'a [u8] {
        let mut input = input;
        if self.head.is_empty() {
            // hyper skips empty lines before a request line.
            let blank = input
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            input = &input[blank..];
            if input.is_empty() {
                return input;
            }
            // The usual case: the whole head in one read, parsed in place.
            if let Some(len) = self.parse_head(input) {
                return &input[len.min(input.len())..];
            }
            if matches!(self.state, State::Off) {
                return &[];
            }
        }
        let before = self.head.len();
        let take = input.len().min(self.max_head + 1 - before);
        self.head.extend_from_slice(&input[..take]);
        let head = std::mem::take(&mut self.head);
        match self.parse_head(&head) {
            Some(len) => &input[len - before..],
            None if matches!(self.state, State::Off) => &[],
            None if head.len() > self.max_head => {
                self.state = State::Off;
                &[]
            }
            None => {
                self.head = head;
                &input[take..]
            }
        }
    }

    /// Parses a complete head at the start of `bytes` and moves to its
    /// body; `None` when the head is incomplete (or the watch turned off).
    fn parse_head(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let len = match request.parse(bytes) {
            Ok(httparse::Status::Complete(len)) if len <= self.max_head => len,
            Ok(httparse::Status::Partial) => return None,
            _ => {
                self.state = State::Off;
                return None;
            }
        };
        let mut chunked = false;
        let mut length: Option<u64> = None;
        let mut length_ok = true;
        for h in request.headers.iter() {
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            } else if h.name.eq_ignore_ascii_case("content-length") {
                let parsed = std::str::from_utf8(h.value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok());
                match (parsed, length) {
                    (Some(n), None) => length = Some(n),
                    (Some(n), Some(m)) if n == m => {}
                    _ => length_ok = false,
                }
            }
        }
        let index = self.heads;
        self.heads += 1;
        let has_length = length.is_some() || !length_ok;
        self.state = if chunked && has_length {
            self.framing.flag(index);
            State::Off
        } else if chunked {
            State::ChunkLine(ChunkLine::default())
        } else if !length_ok {
            State::Off
        } else {
            match length {
                Some(n) if n > 0 => State::Body(n),
                _ => State::Head,
            }
        };
        Some(len)
    }
}

/// The next state after `byte` of a chunk-size line.
fn chunk_line(mut line: ChunkLine, byte: u8) -> State {
    line.len += 1;
    if byte == b'\n' {
        return match (line.digits, line.size) {
            (0, _) => State::Off,
            (_, 0) => State::Trailers { line: 0, total: 0 },
            // The data, then its CRLF.
            (_, size) => State::ChunkData(size.saturating_add(2)),
        };
    }
    let digit = (byte as char).to_digit(16);
    match digit {
        Some(d) if !line.after_size => {
            line.digits += 1;
            line.size = line.size * 16 + u64::from(d);
            if line.digits > 15 {
                return State::Off;
            }
        }
        _ => line.after_size = true,
    }
    if line.len > MAX_CHUNK_LINE {
        return State::Off;
    }
    State::ChunkLine(line)
}

/// A connection's I/O with the framing watch on what is read.
#[derive(Debug)]
pub(crate) struct Watched<IO> {
    io: IO,
    watch: Watch,
}

impl<IO> Watched<IO> {
    /// Watches `io`; `max_head` is the largest head hyper accepts.
    pub(crate) fn new(io: IO, max_head: usize, framing: Arc<Framing>) -> Watched<IO> {
        Watched {
            io,
            watch: Watch {
                state: State::Head,
                head: Vec::new(),
                heads: 0,
                max_head,
                framing,
            },
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        this.watch.feed(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request body that gives up when its next piece takes longer than
/// `timeout`: it then signals `stalled` and stays pending for good, and
/// `serve` answers 408 in place of the request it belongs to. The timer
/// runs only while the body is being read, so a handler that never reads
/// its body never times out on it.
#[derive(Debug)]
pub(crate) struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
    gave_up: bool,
    stalled: Arc<Notify>,
}

impl TimedBody {
    pub(crate) fn new(inner: Incoming, timeout: Duration, stalled: Arc<Notify>) -> TimedBody {
        TimedBody {
            inner,
            timeout,
            timer: None,
            armed: false,
            gave_up: false,
            stalled,
        }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.gave_up {
            return Poll::Pending;
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.armed = false;
            return Poll::Ready(frame);
        }
        if !this.armed {
            // The wait for this piece starts now.
            let deadline = Instant::now() + this.timeout;
            match &mut this.timer {
                Some(timer) => timer.as_mut().reset(deadline),
                None => this.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            this.armed = true;
        }
        if let Some(timer) = &mut this.timer {
            if timer.as_mut().poll(cx).is_ready() {
                this.gave_up = true;
                this.stalled.notify_one();
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch {
            state: State::Head,
            head: Vec::new(),
            heads: 0,
            max_head: 16384,
            framing: Framing::new(),
        }
    }

    /// Feeds `bytes` in pieces of `step` and returns the flagged index.
    fn flagged(bytes: &[u8], step: usize) -> Option<u64> {
        let mut w = watch();
        for piece in bytes.chunks(step) {
            w.feed(piece);
        }
        let at = w.framing.smuggled_from.load(Ordering::Acquire);
        (at != u64::MAX).then_some(at)
    }

    const SMUGGLED: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\
        Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

    #[test]
    fn both_length_headers_flag_their_head_in_any_order_and_split() {
        for step in [1, 3, 7, 1000] {
            assert_eq!(flagged(SMUGGLED, step), Some(0));
            let te_first = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\
                content-length: 4\r\n\r\n0\r\n\r\n";
            assert_eq!(flagged(te_first, step), Some(0));
        }
    }

    #[test]
    fn framing_is_followed_across_bodies_to_later_heads() {
        let mut stream = Vec::new();
        stream.extend_from_slice(b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        // A body that looks like a smuggling head is only a body.
        let body = "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";
        let head = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len());
        stream.extend_from_slice(head.as_bytes());
        stream.extend_from_slice(body.as_bytes());
        stream.extend_from_slice(
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
              a;ext=1\r\n0123456789\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n",
        );
        stream.extend_from_slice(SMUGGLED);
        for step in [1, 2, 5, 64, 4096] {
            assert_eq!(flagged(&stream, step), Some(3), "step {step}");
        }
    }

    #[test]
    fn honest_streams_are_never_flagged() {
        let stream = b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
            4\r\nabcd\r\n0\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(flagged(stream, 1), None);
        assert_eq!(flagged(stream, 4096), None);
    }

    #[test]
    fn unreadable_input_stops_the_watch() {
        let mut w = watch();
        w.feed(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n");
        assert!(matches!(w.state, State::Off));
        let mut w = watch();
        w.max_head = 64;
        w.feed(&[b'a'; 100]);
        assert!(matches!(w.state, State::Off));
        let mut w = watch();
        w.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        assert!(matches!(w.state, State::Off));
    }

    #[test]
    fn the_flag_answers_for_the_flagged_request_and_later_ones() {
        let framing = Framing::new();
        framing.flag(1);
        assert!(!framing.next_is_smuggled());
        assert!(framing.next_is_smuggled());
        assert!(framing.next_is_smuggled());
    }
}
