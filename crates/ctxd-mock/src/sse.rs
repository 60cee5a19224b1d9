//! A response body sent frame by frame: an optional pause between frames (SSE event delay) and
//! an optional cut that ends the body with an error, which makes hyper close the connection
//! mid-body (a truncated stream, as when an upstream dies).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use crate::script::Truncate;

/// The pause before a cut: hyper drops its unflushed write buffer when a body fails, so the
/// bytes before the cut must reach the socket first.
const FLUSH_BEFORE_CUT: Duration = Duration::from_millis(20);

/// The error that ends a truncated body.
#[derive(Debug, thiserror::Error)]
#[error("ctxd-mock: scripted truncation")]
pub(crate) struct Truncated;

pub(crate) struct Frames {
    frames: VecDeque<Bytes>,
    gap: Duration,
    pause: Option<Pin<Box<Sleep>>>,
    /// Frames, and bytes, left to send before the cut.
    events_left: Option<usize>,
    bytes_left: Option<usize>,
    /// The full size for a JSON body (a client can then tell a cut body from a short one);
    /// `None` for SSE, which goes out chunked like a real stream.
    full_len: Option<u64>,
    sent: usize,
    cut: bool,
}

impl Frames {
    /// SSE events, sent chunked.
    pub(crate) fn events(frames: Vec<Bytes>, gap: Duration, truncate: Option<Truncate>) -> Self {
        Self::new(frames, gap, truncate, false)
    }

    /// A JSON body with its length announced, cut per `truncate` (it counts as one event).
    pub(crate) fn json(body: Vec<u8>, truncate: Option<Truncate>) -> Self {
        Self::new(vec![Bytes::from(body)], Duration::ZERO, truncate, true)
    }

    fn new(frames: Vec<Bytes>, gap: Duration, truncate: Option<Truncate>, sized: bool) -> Self {
        let full_len = sized.then(|| frames.iter().map(|f| f.len() as u64).sum());
        let (events_left, bytes_left) = match truncate {
            None => (None, None),
            Some(Truncate::AfterEvents(n)) => (Some(n), None),
            Some(Truncate::AfterBytes(n)) => (None, Some(n)),
        };
        Self {
            frames: frames.into(),
            gap,
            pause: None,
            events_left,
            bytes_left,
            full_len,
            sent: 0,
            cut: false,
        }
    }

    /// The next piece to send, the cut, or `None` at the end.
    fn take(&mut self) -> Option<Result<Bytes, Truncated>> {
        if self.cut || self.frames.is_empty() {
            return None;
        }
        if self.at_cut() {
            self.cut = true;
            self.frames.clear();
            return Some(Err(Truncated));
        }
        let mut frame = self.frames.pop_front()?;
        if let Some(left) = self.bytes_left.as_mut() {
            if frame.len() > *left {
                let rest = frame.split_off(*left);
                self.frames.push_front(rest);
            }
            *left -= frame.len();
        }
        if let Some(left) = self.events_left.as_mut() {
            *left -= 1;
        }
        Some(Ok(frame))
    }

    fn at_cut(&self) -> bool {
        self.events_left == Some(0) || self.bytes_left == Some(0)
    }

    /// The gap goes before every frame but the first; the cut waits for the flush.
    fn next_pause(&self) -> Duration {
        if self.cut || self.frames.is_empty() {
            Duration::ZERO
        } else if self.at_cut() {
            self.gap.max(FLUSH_BEFORE_CUT)
        } else if self.sent > 0 {
            self.gap
        } else {
            Duration::ZERO
        }
    }
}

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Truncated;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.pause.is_none() {
            let pause = this.next_pause();
            if !pause.is_zero() {
                this.pause = Some(Box::pin(tokio::time::sleep(pause)));
            }
        }
        if let Some(pause) = this.pause.as_mut() {
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.pause = None;
        }
        let next = this.take();
        if next.is_some() {
            this.sent += 1;
        }
        Poll::Ready(next.map(|r| r.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.cut || self.frames.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        self.full_len
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn drain(mut f: Frames) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        while let Some(r) = f.take() {
            match r {
                Ok(b) => out.extend_from_slice(&b),
                Err(Truncated) => return (out, true),
            }
        }
        (out, false)
    }

    fn frames() -> Vec<Bytes> {
        vec![
            Bytes::from_static(b"aaa"),
            Bytes::from_static(b"bb"),
            Bytes::from_static(b"c"),
        ]
    }

    #[test]
    fn whole_body_without_cut() {
        assert_eq!(
            drain(Frames::events(frames(), Duration::ZERO, None)),
            (b"aaabbc".to_vec(), false)
        );
    }

    #[test]
    fn cut_after_events() {
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterEvents(2)));
        assert_eq!(drain(f), (b"aaabb".to_vec(), true));
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterEvents(0)));
        assert_eq!(drain(f), (Vec::new(), true));
        // Past the end: the whole body, no cut.
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterEvents(9)));
        assert_eq!(drain(f), (b"aaabbc".to_vec(), false));
    }

    #[test]
    fn json_bodies_announce_their_length() {
        use http_body::Body as _;
        let f = Frames::json(b"{}".to_vec(), Some(Truncate::AfterBytes(1)));
        assert_eq!(f.size_hint().exact(), Some(2));
        assert_eq!(drain(f), (b"{".to_vec(), true));
        assert_eq!(
            Frames::events(frames(), Duration::ZERO, None)
                .size_hint()
                .exact(),
            None
        );
    }

    #[test]
    fn cut_after_bytes() {
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterBytes(4)));
        assert_eq!(drain(f), (b"aaab".to_vec(), true));
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterBytes(5)));
        assert_eq!(drain(f), (b"aaabb".to_vec(), true));
        let f = Frames::events(frames(), Duration::ZERO, Some(Truncate::AfterBytes(6)));
        assert_eq!(drain(f).0, b"aaabbc".to_vec());
    }
}
