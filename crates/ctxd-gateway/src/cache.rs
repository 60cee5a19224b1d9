//! Anthropic `cache_control` on the wire: the client's breakpoints read from
//! a body ([`scan`]), the engine's plan rendered into a body ctxd rewrites anyway ([`apply`]:
//! byte edits of the blocks concerned, everything else as it was), and the record of where the
//! breakpoints went, appended with the turn's response ([`append`]).
//!
//! A body whose messages ctxd does not rewrite keeps the client's breakpoints untouched (the
//! byte-identical pass-through holds); its breakpoints are still recorded, so a later edit can
//! read the entries they wrote.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use ctxd_core::cache::{self, ClientMarks, Mark, Record};
use ctxd_engine::turn::{breakpoints, hash, Part, Upstream};
use ctxd_store::NewEntry;

use crate::sessions::Loaded;

const DEFAULT_MARK: &[u8] = br#"{"type":"ephemeral"}"#;

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MessageHead<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BlockHead<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// A content block of a message: where it is, whether it may carry a breakpoint, and the byte
/// ranges of the values of its `cache_control` and of those on a tool result's nested blocks.
#[derive(Debug)]
struct Block {
    range: Range<usize>,
    cacheable: bool,
    own: Option<Range<usize>>,
    nested: Vec<Range<usize>>,
}

/// A message's content: a string (one text block) or blocks.
#[derive(Debug)]
enum Content {
    Text {
        range: Range<usize>,
        empty: bool,
    },
    Blocks(Vec<Block>),
    Other,
    /// Not read: the message holds no breakpoint (its byte range in the body).
    Unread(Range<usize>),
}

/// A breakpoint's place on a message: (message index, block index).
pub type Spot = (usize, u32);

/// What a body holds, by byte ranges.
#[derive(Debug)]
pub struct Scan {
    tools: Vec<Range<usize>>,
    system: Vec<Range<usize>>,
    messages: Vec<Content>,
    /// A top-level `cache_control` (automatic caching): ctxd then leaves breakpoints alone.
    automatic: bool,
    /// The value of the client's last breakpoint on a message (its TTL is copied to ctxd's).
    value: Option<Range<usize>>,
    head: Option<u64>,
}

fn offset(body: &[u8], raw: &RawValue) -> Range<usize> {
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    start..start + raw.get().len()
}

/// The `cache_control` members of the objects in `raw` (an array, or one object), and of the
/// array under their `content` (a tool result's blocks), as ranges of the member's value.
fn mark_values(body: &[u8], raw: &RawValue, nested: bool, out: &mut Vec<Range<usize>>) {
    if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
        for item in items {
            mark_values(body, item, nested, out);
        }
        return;
    }
    let Ok(head) = serde_json::from_str::<BlockHead>(raw.get()) else {
        return;
    };
    if let Some(cc) = head.cache_control {
        out.push(offset(body, cc));
    }
    if nested {
        if let Some(c) = head.content {
            mark_values(body, c, false, out);
        }
    }
}

/// A message's content read block by block; `value` becomes the last breakpoint value seen.
fn read_message(body: &[u8], m: &RawValue, value: &mut Option<Range<usize>>) -> Content {
    let content = serde_json::from_str::<MessageHead>(m.get())
        .ok()
        .and_then(|h| h.content);
    match content {
        None => Content::Other,
        Some(c) if c.get().starts_with('"') => Content::Text {
            range: offset(body, c),
            empty: c.get() == "\"\"",
        },
        Some(c) => match serde_json::from_str::<Vec<&RawValue>>(c.get()) {
            Err(_) => Content::Other,
            Ok(raws) => Content::Blocks(
                raws.into_iter()
                    .map(|b| {
                        let head = serde_json::from_str::<BlockHead>(b.get()).ok();
                        let kind = head.as_ref().and_then(|h| h.kind.as_deref());
                        let empty_text = kind == Some("text")
                            && head
                                .as_ref()
                                .and_then(|h| h.text)
                                .is_some_and(|t| t.get() == "\"\"");
                        let own = head
                            .as_ref()
                            .and_then(|h| h.cache_control)
                            .map(|v| offset(body, v));
                        let mut nested = Vec::new();
                        if let Some(c) = head.as_ref().and_then(|h| h.content) {
                            mark_values(body, c, false, &mut nested);
                        }
                        if let Some(v) = own.iter().chain(&nested).last() {
                            *value = Some(v.clone());
                        }
                        Block {
                            range: offset(body, b),
                            cacheable: head.is_some()
                                && !matches!(kind, Some("thinking" | "redacted_thinking"))
                                && !empty_text,
                            own,
                            nested,
                        }
                    })
                    .collect(),
            ),
        },
    }
}

/// Read the breakpoints of an Anthropic body (`None`: not a body this module reads).
pub fn scan(body: &[u8]) -> Option<Scan> {
    let top: Top = serde_json::from_slice(body).ok()?;
    let mut tools = Vec::new();
    if let Some(t) = top.tools {
        mark_values(body, t, false, &mut tools);
    }
    let mut system = Vec::new();
    if let Some(s) = top.system {
        mark_values(body, s, false, &mut system);
    }
    // Only messages holding `"cache_control"` somewhere are read block by block (the others
    // carry no breakpoint; `apply` reads one of them if the plan marks it): reading every
    // block of every message cost more than parsing the whole body (2.9 against 1.6 ms for
    // 1 MiB of a Claude Code conversation), under the session's lock, on every request.
    // A key may also be spelled with escapes (`"cache\u005fcontrol"`), which the byte search
    // misses: a body escaping printable ASCII anywhere (no client seen does) is read whole.
    let escaped_ascii = memchr::memmem::find_iter(body, b"\\u00")
        .any(|i| matches!(body.get(i + 4), Some(b'2'..=b'7')));
    let marked_at: Vec<usize> = memchr::memmem::find_iter(body, b"\"cache_control\"").collect();
    let marked = |r: &Range<usize>| {
        let i = marked_at.partition_point(|&p| p < r.start);
        escaped_ascii || marked_at.get(i).is_some_and(|&p| p < r.end)
    };
    let mut messages = Vec::new();
    let mut value = None;
    for m in top.messages.unwrap_or_default() {
        let range = offset(body, m);
        messages.push(if marked(&range) {
            read_message(body, m, &mut value)
        } else {
            Content::Unread(range)
        });
    }
    let head = {
        let mut h = Vec::new();
        for (raw, marks) in [(top.tools, &tools), (top.system, &system)] {
            if let Some(raw) = raw {
                let r = offset(body, raw);
                let removals: Vec<Range<usize>> =
                    marks.iter().filter_map(|v| member(body, v)).collect();
                let mut at = r.start;
                for cut in removals {
                    h.extend_from_slice(&body[at..cut.start]);
                    at = cut.end;
                }
                h.extend_from_slice(&body[at..r.end]);
            }
            h.push(0xff);
        }
        Some(xxhash_rust::xxh3::xxh3_64(&h))
    };
    Some(Scan {
        tools,
        system,
        messages,
        automatic: top.cache_control.is_some(),
        value,
        head,
    })
}

impl Scan {
    /// The hash of the tools and system prompt, breakpoints aside ([`Record::head`]).
    pub fn head(&self) -> u64 {
        self.head.unwrap_or_default()
    }

    /// The messages' breakpoints: (message index, block index).
    pub fn message_marks(&self) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        for (m, content) in self.messages.iter().enumerate() {
            if let Content::Blocks(blocks) = content {
                for (b, block) in blocks.iter().enumerate() {
                    if block.own.is_some() || !block.nested.is_empty() {
                        out.push((m, b as u32));
                    }
                }
            }
        }
        out
    }

    /// The client's breakpoints as the engine plans with them: those on messages sent as the
    /// client's bytes (`parts`), by upstream index. `None`: automatic caching, left alone.
    pub fn client_marks(&self, parts: &[Part]) -> Option<ClientMarks> {
        if self.automatic {
            return None;
        }
        let marks = self.message_marks();
        let last = self.messages.len().checked_sub(1);
        let messages = parts
            .iter()
            .enumerate()
            .flat_map(|(k, p)| {
                let i = match p {
                    Part::Client(i) => Some(*i),
                    Part::Rendered(_) => None,
                };
                marks
                    .iter()
                    .filter(move |(m, _)| Some(*m) == i)
                    .map(move |(_, b)| (k, *b))
            })
            .collect();
        Some(ClientMarks {
            messages,
            tail: last.is_some_and(|l| marks.iter().any(|(m, _)| *m == l)),
            system: self.system.len(),
            tools: self.tools.len(),
        })
    }
}

/// The whole member (`"cache_control": value` with its comma) whose value is at `value`.
fn member(body: &[u8], value: &Range<usize>) -> Option<Range<usize>> {
    const KEY: &[u8] = b"\"cache_control\"";
    let ws = |c: u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t');
    let mut k = value.start;
    while k > 0 && ws(body[k - 1]) {
        k -= 1;
    }
    if k == 0 || body[k - 1] != b':' {
        return None;
    }
    k -= 1;
    while k > 0 && ws(body[k - 1]) {
        k -= 1;
    }
    let key_start = k.checked_sub(KEY.len())?;
    if &body[key_start..k] != KEY {
        return None;
    }
    let mut b = key_start;
    while b > 0 && ws(body[b - 1]) {
        b -= 1;
    }
    match body.get(b.checked_sub(1)?)? {
        b',' => Some(b - 1..value.end),
        b'{' => {
            // The first member: take the comma after it instead.
            let mut e = value.end;
            while e < body.len() && ws(body[e]) {
                e += 1;
            }
            if body.get(e) == Some(&b',') {
                e += 1;
                while e < body.len() && ws(body[e]) {
                    e += 1;
                }
            }
            Some(key_start..e)
        }
        _ => None,
    }
}

/// `body` (a rewritten Anthropic body) with the breakpoints of `plan`: on the planned blocks of
/// messages (a string content becomes one text block), the client's last ones on the system
/// prompt and the tools as many as the plan keeps, none elsewhere. Returns the body and the
/// (message, block) of each breakpoint on a message; `None` when the body does not read.
pub fn apply(body: &[u8], plan: &cache::Plan) -> Option<(Vec<u8>, Vec<Spot>)> {
    let scan = scan(body)?;
    let value: &[u8] = scan.value.clone().map_or(DEFAULT_MARK, |r| &body[r]);
    let mut edits: Vec<(Range<usize>, Vec<u8>)> = Vec::new();
    let drop_all = |marks: &[Range<usize>], keep: usize, edits: &mut Vec<_>| {
        for v in &marks[..marks.len().saturating_sub(keep)] {
            if let Some(m) = member(body, v) {
                edits.push((m, Vec::new()));
            }
        }
    };
    drop_all(&scan.tools, plan.tools, &mut edits);
    drop_all(&scan.system, plan.system, &mut edits);
    let mut placed = Vec::new();
    for (m, content) in scan.messages.iter().enumerate() {
        let wanted = plan.marks.iter().find(|p| p.message == m);
        let read;
        let content = match content {
            Content::Unread(range) if wanted.is_some() => {
                let Some(raw) = std::str::from_utf8(&body[range.clone()])
                    .ok()
                    .and_then(|text| serde_json::from_str::<&RawValue>(text).ok())
                else {
                    continue;
                };
                read = read_message(body, raw, &mut None);
                &read
            }
            c => c,
        };
        match content {
            Content::Blocks(blocks) => {
                let target = wanted.and_then(|p| {
                    p.block
                        .map(|b| b as usize)
                        .filter(|&b| blocks.get(b).is_some_and(|x| x.cacheable))
                        .or_else(|| blocks.iter().rposition(|b| b.cacheable))
                });
                for (b, block) in blocks.iter().enumerate() {
                    let is_target = Some(b) == target;
                    if is_target {
                        placed.push((m, b as u32));
                    }
                    // The target keeps its own breakpoint; every other one goes (nested ones
                    // too: the breakpoint is the block's).
                    let mut cut = |v: &Range<usize>| {
                        if let Some(r) = member(body, v) {
                            edits.push((r, Vec::new()));
                        }
                    };
                    block.nested.iter().for_each(&mut cut);
                    match (&block.own, is_target) {
                        (Some(v), false) => cut(v),
                        (None, true) => {
                            let mut add = b",\"cache_control\":".to_vec();
                            add.extend_from_slice(value);
                            let close = block.range.end - 1;
                            edits.push((close..close, add));
                        }
                        _ => {}
                    }
                }
            }
            Content::Text { range, empty } if wanted.is_some() && !empty => {
                let mut new = b"[{\"type\":\"text\",\"text\":".to_vec();
                new.extend_from_slice(&body[range.clone()]);
                new.extend_from_slice(b",\"cache_control\":");
                new.extend_from_slice(value);
                new.extend_from_slice(b"}]");
                edits.push((range.clone(), new));
                placed.push((m, 0));
            }
            _ => {}
        }
    }
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    let mut out = Vec::with_capacity(body.len() + 256);
    let mut at = 0;
    for (r, bytes) in edits {
        if r.start < at {
            return None; // overlapping edits: leave the body as it was
        }
        out.extend_from_slice(&body[at..r.start]);
        out.extend_from_slice(&bytes);
        at = r.end;
    }
    out.extend_from_slice(&body[at..]);
    Some((out, placed))
}

/// What a request's breakpoints need from the session, taken under its lock: the plan (on a
/// rewritten conversation) and the entry each marked message shows.
pub(crate) struct Prepared {
    plan: Option<cache::Plan>,
    /// (message index in the upstream body, entry id).
    names: Vec<(usize, String)>,
    /// Without a plan: the client's breakpoints on messages, as they go upstream.
    kept: Vec<(usize, u32)>,
    model: String,
    head: u64,
    at_ms: u64,
}

/// Plan a request's breakpoints (`upstream`: the rewritten conversation, `None` when the
/// client's messages go as they are; `plan`: off, the client's are only recorded). `None`: the
/// client asked for no caching (no `cache_control` anywhere), uses automatic caching, or the
/// body does not read.
pub(crate) fn prepare(
    loaded: &Loaded,
    client_body: &[u8],
    upstream: Option<&Upstream>,
    element_entries: &[usize],
    model: Option<&str>,
    plan: bool,
) -> Option<Prepared> {
    memchr::memmem::find(client_body, b"\"cache_control\"")?;
    let scan = scan(client_body)?;
    let model = model?.to_owned();
    let at_ms = u64::try_from(ctxd_engine::now_ms()).unwrap_or_default();
    let head = scan.head();
    let id = |pos: usize| Some(loaded.log.entry(pos)?.id.0.clone());
    let mut kept = Vec::new();
    let (plan, names) = match upstream {
        Some(u) if !plan => {
            kept = scan.client_marks(&u.parts)?.messages;
            let names = kept
                .iter()
                .filter_map(|&(m, _)| Some((m, id(*u.entries.get(m)?)?)))
                .collect();
            (None, names)
        }
        Some(u) => {
            let client = scan.client_marks(&u.parts)?;
            let plan = breakpoints(&loaded.log, &u.entries, client, &model, head, at_ms);
            let names = plan
                .marks
                .iter()
                .filter_map(|p| Some((p.message, id(*u.entries.get(p.message)?)?)))
                .collect();
            (Some(plan), names)
        }
        None => {
            if scan.automatic {
                return None;
            }
            let mut names: Vec<(usize, String)> = Vec::new();
            kept = scan.message_marks();
            for &(m, _) in &kept {
                if names.last().is_some_and(|n| n.0 == m) {
                    continue;
                }
                if let Some(name) = element_entries.get(m).and_then(|&p| id(p)) {
                    names.push((m, name));
                }
            }
            (None, names)
        }
    };
    Some(Prepared {
        plan,
        names,
        kept,
        model,
        head,
        at_ms,
    })
}

impl Prepared {
    /// The upstream body with the plan rendered (`None`: `body` goes as it is; without a plan
    /// it is not read, and may be the client's compressed bytes), and the record of where the
    /// breakpoints on messages are.
    pub(crate) fn finish(self, body: &[u8]) -> (Option<Vec<u8>>, Option<Record>) {
        let (new_body, placed) = match &self.plan {
            Some(plan) => match apply(body, plan) {
                Some((b, placed)) => (Some(b), placed),
                None => return (None, None),
            },
            None => (None, self.kept.clone()),
        };
        let mut marks = Vec::new();
        for (m, block) in placed {
            if let Some((_, entry)) = self.names.iter().find(|(n, _)| *n == m) {
                marks.push(Mark {
                    entry: entry.clone(),
                    block,
                });
            }
        }
        let record =
            (!marks.is_empty()).then(|| Record::new(&self.model, self.at_ms, self.head, marks));
        (new_body, record)
    }
}

/// The record into the log after its turn's response, in the turn's batch.
pub(crate) fn append(loaded: &mut Loaded, r: &Record) -> NewEntry {
    // From the parent and the record alone (the log makes a repeated id unique): entry ids
    // chain through their parents, and a clock or the log's size here made every later id
    // (and the `recall` ids texts name) differ between runs of the same conversation.
    let tag = format!("cache {}", r.marks.len());
    let stamp = Some(ctxd_core::windows::iso8601(
        i64::try_from(r.at_ms).unwrap_or_default(),
    ));
    let parent = loaded.log.leaf();
    let (_, entry) =
        loaded
            .log
            .append_under(parent, "cache", &hash::text(&tag), r.to_entry(), stamp);
    NewEntry::new(entry)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::cache::{Placed, Plan, Why};
    use serde_json::{json, Value};

    fn marks(v: &Value) -> usize {
        v.to_string().matches("cache_control").count()
    }

    fn body() -> Vec<u8> {
        br#"{"model":"claude-x","tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{},"cache_control":{"type":"ephemeral"}}],
"system":[{"type":"text","text":"one","cache_control":{"type":"ephemeral"}},{"type":"text","text":"two", "cache_control" : {"type":"ephemeral","ttl":"1h"} }],
"messages":[{"role":"user","content":"fix it"},
{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"u1","name":"bash","input":{}}]},
{"role":"user","content":[{"cache_control":{"type":"ephemeral"},"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"out","cache_control":{"type":"ephemeral"}}]}]},
{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]},
{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}"#
            .to_vec()
    }

    #[test]
    fn the_scan_reads_every_breakpoint_and_the_head_ignores_them() {
        let b = body();
        let s = scan(&b).unwrap();
        assert_eq!((s.tools.len(), s.system.len()), (1, 2));
        assert_eq!(s.message_marks(), vec![(2, 0), (4, 0)]);
        // Messages without a breakpoint are not read block by block.
        assert!(matches!(s.messages[0], Content::Unread(_)));
        assert!(matches!(s.messages[2], Content::Blocks(_)));
        // A key spelled with escapes is still found.
        let escaped = String::from_utf8(b.clone())
            .unwrap()
            .replace(
                r#"{"type":"text","text":"go on","cache_control""#,
                r#"{"type":"text","text":"go on","cache\u005fcontrol""#,
            )
            .into_bytes();
        assert_ne!(escaped, b);
        assert_eq!(
            scan(&escaped).unwrap().message_marks(),
            vec![(2, 0), (4, 0)]
        );
        let parts: Vec<Part> = (0..5).map(Part::Client).collect();
        let c = s.client_marks(&parts).unwrap();
        assert!(c.tail);
        assert_eq!(c.messages, vec![(2, 0), (4, 0)]);
        // The head without breakpoints hashes the same.
        let bare = String::from_utf8(b.clone())
            .unwrap()
            .replace(r#","cache_control":{"type":"ephemeral"}}],"#, "}],")
            .into_bytes();
        assert_ne!(bare, b);
        assert_eq!(scan(&bare).unwrap().head(), s.head());
    }

    #[test]
    fn the_plan_is_rendered_without_touching_anything_else() {
        let b = body();
        let plan = Plan {
            marks: vec![
                Placed {
                    message: 0,
                    block: None,
                    why: Why::Question,
                },
                Placed {
                    message: 3,
                    block: None,
                    why: Why::Write,
                },
                Placed {
                    message: 4,
                    block: Some(0),
                    why: Why::Tail,
                },
            ],
            system: 1,
            tools: 0,
        };
        let (out, placed) = apply(&b, &plan).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        // The question's string became a block carrying the client's TTL; an assistant message
        // of thinking only has no block that can carry one; the tail kept its own.
        assert_eq!(placed, vec![(0, 0), (4, 0)]);
        assert_eq!(
            v["messages"][0]["content"],
            json!([{"type":"text","text":"fix it","cache_control":{"type":"ephemeral","ttl":"1h"}}])
        );
        assert_eq!(marks(&v["messages"][2]), 0);
        assert_eq!(marks(&v["messages"][3]), 0);
        assert_eq!(marks(&v["tools"]), 0);
        assert_eq!(marks(&v["system"]), 1);
        assert!(v["system"][1].get("cache_control").is_some());
        assert_eq!(marks(&v), 3);
        // Everything else as it was.
        let orig: Value = serde_json::from_slice(&b).unwrap();
        let strip = |mut v: Value| {
            fn walk(v: &mut Value) {
                match v {
                    Value::Object(o) => {
                        o.remove("cache_control");
                        o.values_mut().for_each(walk);
                    }
                    Value::Array(a) => a.iter_mut().for_each(walk),
                    _ => {}
                }
            }
            walk(&mut v);
            v["messages"][0]["content"] = json!("fix it");
            v
        };
        assert_eq!(strip(v.clone()), strip(orig));
        // The tail's bytes are the client's.
        let tail =
            r#"{"type":"text","text":"go on","cache_control":{"type":"ephemeral","ttl":"1h"}}"#;
        assert!(String::from_utf8(out).unwrap().contains(tail));
    }

    #[test]
    fn members_are_cut_with_their_comma_wherever_they_sit() {
        for (src, want) in [
            (r#"{"a":1,"cache_control":{"t":1}}"#, r#"{"a":1}"#),
            (r#"{"cache_control":{"t":1},"a":1}"#, r#"{"a":1}"#),
            (r#"{ "cache_control" : {"t":1} , "a":1}"#, r#"{ "a":1}"#),
            (r#"{"a":1 ,  "cache_control":{"t":1} }"#, r#"{"a":1  }"#),
        ] {
            let b = src.as_bytes();
            let v = src.find("{\"t\"").unwrap();
            let r = member(b, &(v..v + 7)).unwrap();
            let mut out = b[..r.start].to_vec();
            out.extend_from_slice(&b[r.end..]);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{src}");
        }
    }
}
