//! `ctxd mcp`'s stdio transport: rmcp's line transport behind a filter that answers a line that
//! is not JSON with JSON-RPC's parse error (`-32700`, `"id": null`) and keeps serving.
//!
//! rmcp drops such a line without a word (it has no id to answer, and an answer to garbage
//! could feed a peer that echoes it back: rust-sdk#938), which leaves a client that wrote a
//! broken request waiting for an answer that never comes. JSON-RPC 2.0 asks for the parse
//! error; ours is valid JSON, so a peer that echoes it sends nothing to answer.
//!
//! ```text
//! input ──filter──► pipe ──► rmcp (parse, dispatch) ──► LineSink ─┐
//!           └── -32700 for a line that is not JSON ───────────────┴─► one writer ──► output
//! ```
//! One writer takes whole lines in the order they were queued: a parse error is queued before
//! the lines after it reach rmcp, so it goes out before their answers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::model::ErrorCode;
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::ToolServer;

/// Serve `server` on `input` and `output` (newline-delimited JSON-RPC) until `input` ends or
/// the client leaves.
pub(crate) async fn serve<S, R, W>(server: ToolServer<S>, input: R, output: W) -> Result<(), String>
where
    S: ctxd_store::Store + Send + Sync + ?Sized + 'static,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines, queued) = unbounded_channel();
    let writer = tokio::spawn(write_lines(queued, output));
    let (to_rmcp, from_filter) = tokio::io::duplex(64 * 1024);
    let filter = tokio::spawn(filter(input, to_rmcp, lines.clone()));
    let sink = LineSink {
        pending: Vec::new(),
        lines,
    };
    let served = match server.serve((from_filter, sink)).await {
        Ok(running) => running
            .waiting()
            .await
            .map(drop)
            .map_err(|e| format!("mcp: {e}")),
        Err(e) => Err(format!("mcp: cannot start: {e}")),
    };
    // The service has ended and dropped its sink; the filter may still wait on the input (the
    // service can end before it, on a failed start): its queue must close for the writer to
    // finish.
    filter.abort();
    let _ = filter.await;
    let written = writer
        .await
        .map_err(|e| format!("mcp: writer: {e}"))?
        .map_err(|e| format!("mcp: cannot write: {e}"));
    served.and(written)
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A line (with its newline, unless the input ended without one).
    Whole,
    /// Over the limit: dropped up to its newline.
    TooLong,
    Eof,
}

/// Read one line into `buf` (cleared first), at most `max` bytes of it kept: a longer line is
/// read to its end and dropped, so a peer that never writes a newline cannot grow the buffer.
async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::Eof,
                (false, false) => Line::Whole,
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !too_long && buf.len() + take > max {
            too_long = true;
            buf.clear();
        }
        if !too_long {
            buf.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if newline.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Whole });
        }
    }
}

/// The JSON text of a line: without its line ending and a leading byte order mark (RFC 8259
/// lets a parser ignore one, and rmcp does).
fn body(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

/// JSON-RPC's answer to a message that is not JSON: no id can be read, so `id` is null (rmcp's
/// own error type leaves it out, as MCP's newest revision allows; JSON-RPC 2.0 asks for null).
#[derive(serde::Serialize)]
struct ParseError {
    jsonrpc: &'static str,
    id: Option<()>,
    error: ErrorBody,
}

#[derive(serde::Serialize)]
struct ErrorBody {
    code: i32,
    message: String,
}

/// The line answering a line that is not JSON (`detail`: why).
fn parse_error(detail: &str) -> Vec<u8> {
    let answer = ParseError {
        jsonrpc: "2.0",
        id: None,
        error: ErrorBody {
            code: ErrorCode::PARSE_ERROR.0,
            message: format!("Parse error: {detail}"),
        },
    };
    let mut line = serde_json::to_vec(&answer).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Pass the input's JSON lines to rmcp (which answers what is JSON but no message itself) and
/// answer the others with a parse error. Blank lines are skipped, as rmcp does.
async fn filter<R: AsyncRead + Unpin>(
    input: R,
    mut to_rmcp: tokio::io::DuplexStream,
    lines: UnboundedSender<Vec<u8>>,
) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        let error = match read_line(&mut input, &mut line, DEFAULT_MAX_LINE_LENGTH).await {
            Ok(Line::Eof) => return,
            Err(e) => {
                tracing::error!(error = %e, "mcp: cannot read the input");
                return;
            }
            Ok(Line::TooLong) => {
                format!("a message is at most {DEFAULT_MAX_LINE_LENGTH} bytes")
            }
            Ok(Line::Whole) => {
                let json = body(&line);
                if json.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match serde_json::from_slice::<serde::de::IgnoredAny>(json) {
                    Ok(_) => {
                        let forwarded = to_rmcp.write_all(json).await;
                        if forwarded.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
                            // rmcp has stopped reading: the service is over.
                            return;
                        }
                        continue;
                    }
                    Err(e) => e.to_string(),
                }
            }
        };
        tracing::debug!(%error, "mcp: answering a line that is not JSON");
        if lines.send(parse_error(&error)).is_err() {
            return;
        }
    }
}

/// rmcp's output: whole lines, queued for the writer (rmcp writes each message, then its
/// newline, then flushes).
struct LineSink {
    pending: Vec<u8>,
    lines: UnboundedSender<Vec<u8>>,
}

impl AsyncWrite for LineSink {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.pending.extend_from_slice(buf);
        while let Some(end) = this.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = this.pending.drain(..=end).collect();
            if this.lines.send(line).is_err() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the output has closed",
                )));
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Write the queued lines in order, flushing when the queue is empty, until every sender has
/// gone.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut queued: UnboundedReceiver<Vec<u8>>,
    mut output: W,
) -> io::Result<()> {
    while let Some(line) = queued.recv().await {
        output.write_all(&line).await?;
        while let Ok(more) = queued.try_recv() {
            output.write_all(&more).await?;
        }
        output.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_an_overlong_one_is_dropped_whole() {
        let input: &[u8] = b"{\"a\":1}\nxxxxxxxxxxxx\n\r\n{}";
        let mut input = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut input, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"{\"a\":1}\n");
        assert_eq!(
            read_line(&mut input, &mut buf, 8).await.unwrap(),
            Line::TooLong
        );
        assert_eq!(
            read_line(&mut input, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(body(&buf), b"");
        assert_eq!(
            read_line(&mut input, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"{}", "the last line, without its newline");
        assert_eq!(read_line(&mut input, &mut buf, 8).await.unwrap(), Line::Eof);
    }

    #[test]
    fn a_parse_error_has_a_null_id() {
        let line = parse_error("x");
        assert!(line.starts_with(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"#));
        assert!(line.ends_with(b"}\n"));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null);
        assert!(v.as_object().unwrap().contains_key("id"));
        assert_eq!(v["error"]["code"], -32700);
    }
}
