//! One coherent stream out of a hidden exchange's responses (pure): the client's content is
//! relayed event by event as it arrives; only ctxd's tool blocks are withheld; the terminal
//! events wait until the exchange ends (a hidden round's end is no end for the client); a
//! continuation's events follow with its start dropped, block indexes renumbered after what the
//! client already has, ids kept, and usage summed over every round at the end. Thinking blocks,
//! their signatures and encrypted reasoning pass untouched (only an index may change).
//!
//! Events whose content changes are re-serialised (`serde_json`, keys in sorted order); all
//! others go out as their own data.

use std::collections::HashMap;

use ctxd_formats::wire::stream::SseEvent;
use serde_json::{json, Value};

use super::Offer;
use crate::api::Api;

/// How a response of the exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It called only ctxd's tools: a continuation follows; nothing reaches the client.
    Continue,
    /// The exchange ends here: the withheld terminal events go out (usage summed).
    Final,
    /// The exchange ends here although the response called ctxd's tools only (the rounds'
    /// limit): the client gets an ordinary end of turn.
    Cut,
}

/// The splicing state of one exchange (every round of one client request).
#[derive(Debug)]
pub struct Splicer {
    api: Api,
    offer: Offer,
    /// Rounds finished before the current response.
    round: u32,
    /// The current response's block/item/tool-call index → the client's (`None`: withheld).
    map: HashMap<u64, Option<u64>>,
    /// The client's next index.
    next: u64,
    /// Terminal events withheld until the exchange ends: (event name, data).
    held: Vec<(Option<String>, Value)>,
    /// Chat's `[DONE]` was withheld.
    held_done: bool,
    /// Gemini: a call of ctxd's was withheld from the current response (its chunks carry no
    /// indexes to map).
    withheld_in_round: bool,
    /// Usage of the finished rounds, and of the current one.
    total_usage: Value,
    round_usage: Value,
    /// Something was withheld or renumbered: the end's events are rewritten.
    changed: bool,
    /// Chat: the first chunk's id, kept on every later chunk, and its `created` and `model`.
    chat_id: Option<Value>,
    chat_meta: (Value, Value),
    /// Responses: the next `sequence_number` the client gets, and the items it was shown.
    seq: u64,
    visible: Vec<Value>,
}

impl Splicer {
    pub fn new(api: Api, offer: Offer) -> Self {
        Splicer {
            api,
            offer,
            round: 0,
            map: HashMap::new(),
            next: 0,
            held: Vec::new(),
            held_done: false,
            withheld_in_round: false,
            total_usage: Value::Object(Default::default()),
            round_usage: Value::Object(Default::default()),
            changed: false,
            chat_id: None,
            chat_meta: (Value::Null, Value::Null),
            seq: 0,
            visible: Vec::new(),
        }
    }

    /// Rounds finished so far (hidden rounds).
    pub fn rounds(&self) -> u32 {
        self.round
    }

    /// One upstream event: what the client gets now is appended to `out` as SSE.
    pub fn event(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        match self.api {
            Api::Anthropic => self.anthropic(ev, out),
            Api::Chat => self.chat(ev, out),
            Api::Responses => self.responses(ev, out),
            Api::Gemini => self.gemini(ev, out),
        }
    }

    /// The current response is over (see [`End`]); the client's last events go to `out`.
    pub fn end(&mut self, end: End, out: &mut Vec<u8>) {
        let usage = std::mem::take(&mut self.round_usage);
        add_usage(&mut self.total_usage, &usage);
        self.round_usage = Value::Object(Default::default());
        self.map.clear();
        self.withheld_in_round = false;
        if end == End::Continue {
            self.round += 1;
            self.changed = true;
            self.held.clear();
            self.held_done = false;
            return;
        }
        if end == End::Cut {
            self.notice(&super::cut_notice(), out);
        }
        let held = std::mem::take(&mut self.held);
        for (name, mut v) in held {
            if self.changed {
                self.finish_terminal(&mut v, end == End::Cut);
            }
            write_event(out, name.as_deref(), &v.to_string());
        }
        if std::mem::take(&mut self.held_done) {
            write_event(out, None, "[DONE]");
        }
    }

    /// A text of ctxd's for the client, as one more text block/item of the answer.
    fn notice(&mut self, text: &str, out: &mut Vec<u8>) {
        self.changed = true;
        match self.api {
            Api::Anthropic => {
                let index = self.next;
                self.next += 1;
                let events = [
                    (
                        "content_block_start",
                        json!({"type": "content_block_start",
                        "index": index, "content_block": {"type": "text", "text": ""}}),
                    ),
                    (
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": index, "delta": {"type": "text_delta", "text": text}}),
                    ),
                    (
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ),
                ];
                for (name, data) in events {
                    write_event(out, Some(name), &data.to_string());
                }
            }
            Api::Chat => {
                let (created, model) = self.chat_meta.clone();
                let chunk = json!({"id": self.chat_id.clone().unwrap_or(Value::Null),
                    "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
                write_event(out, None, &chunk.to_string());
            }
            Api::Responses => {
                let index = self.next;
                self.next += 1;
                let id = super::merge::NOTICE_ITEM_ID;
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let done = super::merge::responses_message(id, text);
                let events = [
                    json!({"type": "response.output_item.added", "output_index": index,
                        "item": {"type": "message", "id": id, "status": "in_progress",
                            "role": "assistant", "content": []}}),
                    json!({"type": "response.content_part.added", "item_id": id,
                        "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                    json!({"type": "response.output_text.delta", "item_id": id,
                        "output_index": index, "content_index": 0, "delta": text}),
                    json!({"type": "response.output_text.done", "item_id": id,
                        "output_index": index, "content_index": 0, "text": text}),
                    json!({"type": "response.content_part.done", "item_id": id,
                        "output_index": index, "content_index": 0, "part": part}),
                    json!({"type": "response.output_item.done", "output_index": index,
                        "item": done.clone()}),
                ];
                for mut ev in events {
                    ev["sequence_number"] = Value::from(self.seq);
                    self.seq += 1;
                    let name = ev["type"].as_str().unwrap_or_default().to_owned();
                    write_event(out, Some(&name), &ev.to_string());
                }
                self.visible.push(done);
            }
            Api::Gemini => {
                let chunk = json!({"candidates": [{"content": {"role": "model",
                    "parts": [{"text": text}]}, "index": 0}]});
                write_event(out, None, &chunk.to_string());
            }
        }
    }

    /// A withheld terminal event, rewritten for the exchange's end.
    fn finish_terminal(&mut self, v: &mut Value, cut: bool) {
        let total = self.total_usage.clone();
        match self.api {
            Api::Anthropic => {
                if v.get("type").and_then(Value::as_str) == Some("message_delta") {
                    if cut {
                        v["delta"]["stop_reason"] = Value::from("end_turn");
                    }
                    if self.round > 0 {
                        v["usage"] = total;
                    }
                }
            }
            Api::Chat => {
                if let Some(choice) = v
                    .get_mut("choices")
                    .and_then(Value::as_array_mut)
                    .and_then(|c| c.first_mut())
                {
                    if cut {
                        choice["finish_reason"] = Value::from("stop");
                    }
                }
                if self.round > 0 && v.get("usage").is_some_and(Value::is_object) {
                    v["usage"] = total;
                }
            }
            Api::Gemini => {
                if cut {
                    if let Some(c) = v.pointer_mut("/candidates/0") {
                        c["finishReason"] = Value::from("STOP");
                    }
                }
                if self.round > 0 && v.get("usageMetadata").is_some_and(Value::is_object) {
                    v["usageMetadata"] = total;
                }
            }
            Api::Responses => {
                if let Some(seq) = v.get_mut("sequence_number") {
                    *seq = Value::from(self.seq);
                    self.seq += 1;
                }
                if let Some(r) = v.get_mut("response").filter(|r| r.is_object()) {
                    r["output"] = Value::Array(self.visible.clone());
                    if self.round > 0 {
                        r["usage"] = total;
                    }
                }
            }
        }
    }

    /// The client's index for upstream index `i` of the current response, assigned on first
    /// sight unless `withhold`.
    fn assign(&mut self, i: u64, withhold: bool) -> Option<u64> {
        if withhold {
            self.changed = true;
            self.map.insert(i, None);
            return None;
        }
        let out = self.next;
        self.next += 1;
        if out != i {
            self.changed = true;
        }
        self.map.insert(i, Some(out));
        Some(out)
    }

    /// The client's index of an upstream index already seen (unknown ones keep theirs).
    fn lookup(&self, i: u64) -> Option<u64> {
        match self.map.get(&i) {
            Some(mapped) => *mapped,
            None => Some(i),
        }
    }

    fn anthropic(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        let name = ev.event.as_deref();
        let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
            write_event(out, name, &ev.data);
            return;
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name.unwrap_or(""));
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.round_usage = u.clone();
                }
                if self.round == 0 {
                    write_event(out, name, &ev.data);
                }
            }
            "content_block_start" => {
                let i = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = v.get("content_block");
                let ours = block.and_then(|b| b.get("type")).and_then(Value::as_str)
                    == Some("tool_use")
                    && block
                        .and_then(|b| b.get("name"))
                        .and_then(Value::as_str)
                        .is_some_and(|n| self.offer.has(n));
                if let Some(o) = self.assign(i, ours) {
                    emit_indexed(out, name, &ev.data, &mut v, "index", i, o);
                }
            }
            "content_block_delta" | "content_block_stop" => {
                let i = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(o) = self.lookup(i) {
                    emit_indexed(out, name, &ev.data, &mut v, "index", i, o);
                }
            }
            "message_delta" => {
                // Its usage fields are the response's totals so far: they replace the start's.
                if let (Value::Object(round), Some(Value::Object(u))) =
                    (&mut self.round_usage, v.get("usage"))
                {
                    for (k, val) in u.iter().filter(|(_, val)| !val.is_null()) {
                        round.insert(k.clone(), val.clone());
                    }
                }
                self.held.push((name.map(str::to_owned), v));
            }
            "message_stop" => self.held.push((name.map(str::to_owned), v)),
            _ => write_event(out, name, &ev.data),
        }
    }

    /// Gemini: each chunk is whole. ctxd's call parts are withheld; the chunk with the finish
    /// reason waits for the exchange's end, its other parts going now when the response
    /// called ctxd's tools (a hidden round's parts are the client's all the same).
    fn gemini(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
            write_event(out, None, &ev.data);
            return;
        };
        if let Some(u) = v.get("usageMetadata").filter(|u| u.is_object()) {
            self.round_usage = u.clone();
        }
        let mut withheld = false;
        if let Some(parts) = v
            .pointer_mut("/candidates/0/content/parts")
            .and_then(Value::as_array_mut)
        {
            let before = parts.len();
            parts.retain(|p| !super::merge::gemini_call_is_ours(&self.offer, p));
            withheld = parts.len() != before;
        }
        if withheld {
            self.changed = true;
            self.withheld_in_round = true;
        }
        let finish = v
            .pointer("/candidates/0/finishReason")
            .is_some_and(|f| !f.is_null());
        let ours_in_round = self.withheld_in_round;
        if !finish {
            let empty = v
                .pointer("/candidates/0/content/parts")
                .and_then(Value::as_array)
                .is_some_and(|p| p.is_empty());
            if withheld && empty {
                return;
            }
            if withheld {
                write_event(out, None, &v.to_string());
            } else {
                write_event(out, None, &ev.data);
            }
            return;
        }
        if self.round == 0 && !ours_in_round {
            // No call of ctxd's in this response: it ends the exchange as it came.
            self.held.push((None, v));
            return;
        }
        let has_parts = v
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
            .is_some_and(|p| !p.is_empty());
        if has_parts {
            let mut now = v.clone();
            if let Some(c) = now
                .pointer_mut("/candidates/0")
                .and_then(Value::as_object_mut)
            {
                c.remove("finishReason");
            }
            if let Some(o) = now.as_object_mut() {
                o.remove("usageMetadata");
            }
            write_event(out, None, &now.to_string());
            if let Some(p) = v.pointer_mut("/candidates/0/content/parts") {
                *p = Value::Array(Vec::new());
            }
        }
        self.held.push((None, v));
    }

    fn chat(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        let name = ev.event.as_deref();
        if ev.data.trim() == "[DONE]" {
            self.held_done = true;
            return;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
            write_event(out, name, &ev.data);
            return;
        };
        let mut changed = false;
        match &self.chat_id {
            None => {
                self.chat_id = v.get("id").cloned();
                self.chat_meta = (
                    v.get("created").cloned().unwrap_or(Value::Null),
                    v.get("model").cloned().unwrap_or(Value::Null),
                );
            }
            Some(id) if self.round > 0 => {
                if v.get("id") != Some(id) {
                    v["id"] = id.clone();
                    changed = true;
                }
            }
            Some(_) => {}
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.round_usage = u.clone();
        }
        let choices_empty = v
            .get("choices")
            .and_then(Value::as_array)
            .is_none_or(|c| c.is_empty());
        if choices_empty {
            if v.get("usage").is_some_and(Value::is_object) {
                self.held.push((name.map(str::to_owned), v));
            } else if changed {
                write_event(out, name, &v.to_string());
            } else {
                write_event(out, name, &ev.data);
            }
            return;
        }
        // Choice 0's tool calls: ctxd's withheld, the client's renumbered.
        let mut had_calls = false;
        if let Some(calls) = v
            .pointer_mut("/choices/0/delta/tool_calls")
            .and_then(Value::as_array_mut)
        {
            had_calls = !calls.is_empty();
            let before = calls.len();
            let mut kept = Vec::with_capacity(before);
            for mut call in calls.drain(..) {
                let i = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let first_sight = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .filter(|_| !self.map.contains_key(&i))
                    .map(|n| self.offer.has(n));
                let mapped = match first_sight {
                    Some(ours) => self.assign(i, ours),
                    None => self.lookup(i),
                };
                if let Some(o) = mapped {
                    if o != i {
                        call["index"] = Value::from(o);
                        changed = true;
                    }
                    kept.push(call);
                }
            }
            if kept.len() != before {
                changed = true;
            }
            *calls = kept;
        }
        let delta_empty = v
            .pointer("/choices/0/delta")
            .and_then(Value::as_object)
            .is_none_or(|d| {
                d.iter().all(|(k, val)| match k.as_str() {
                    "tool_calls" => val.as_array().is_none_or(|a| a.is_empty()),
                    "content" | "refusal" => val.is_null(),
                    _ => false,
                })
            });
        if let Some(calls) = v
            .pointer_mut("/choices/0/delta")
            .and_then(Value::as_object_mut)
        {
            if calls
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|a| a.is_empty())
            {
                calls.remove("tool_calls");
            }
        }
        let finish = v
            .pointer("/choices/0/finish_reason")
            .is_some_and(|f| !f.is_null());
        if finish {
            // The content beside the finish goes now; the finish waits for the exchange's end.
            if !delta_empty {
                let mut now = v.clone();
                now["choices"][0]["finish_reason"] = Value::Null;
                write_event(out, name, &now.to_string());
                v["choices"][0]["delta"] = Value::Object(Default::default());
            }
            self.held.push((name.map(str::to_owned), v));
            return;
        }
        if delta_empty && had_calls {
            return; // only ctxd's call was in it
        }
        if changed {
            write_event(out, name, &v.to_string());
        } else {
            write_event(out, name, &ev.data);
        }
    }

    fn responses(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        let name = ev.event.as_deref();
        let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
            write_event(out, name, &ev.data);
            return;
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name.unwrap_or(""))
            .to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" if self.round > 0 => {}
            "response.completed" | "response.incomplete" => {
                if let Some(u) = v.pointer("/response/usage").filter(|u| u.is_object()) {
                    self.round_usage = u.clone();
                }
                self.held.push((name.map(str::to_owned), v));
            }
            "response.output_item.added" => {
                let i = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                let item = v.get("item");
                let ours = item.and_then(|it| it.get("type")).and_then(Value::as_str)
                    == Some("function_call")
                    && item
                        .and_then(|it| it.get("name"))
                        .and_then(Value::as_str)
                        .is_some_and(|n| self.offer.has(n));
                if let Some(o) = self.assign(i, ours) {
                    self.emit_response_event(out, name, &ev.data, &mut v, Some((i, o)));
                }
            }
            _ => match v.get("output_index").and_then(Value::as_u64) {
                Some(i) => {
                    if let Some(o) = self.lookup(i) {
                        if kind == "response.output_item.done" {
                            if let Some(item) = v.get("item") {
                                self.visible.push(item.clone());
                            }
                        }
                        self.emit_response_event(out, name, &ev.data, &mut v, Some((i, o)));
                    }
                }
                None => self.emit_response_event(out, name, &ev.data, &mut v, None),
            },
        }
    }

    /// A Responses event with its `sequence_number` (and `output_index`) the client's.
    fn emit_response_event(
        &mut self,
        out: &mut Vec<u8>,
        name: Option<&str>,
        data: &str,
        v: &mut Value,
        index: Option<(u64, u64)>,
    ) {
        let mut changed = false;
        if let Some((i, o)) = index.filter(|(i, o)| i != o) {
            let _ = i;
            v["output_index"] = Value::from(o);
            changed = true;
        }
        if let Some(seq) = v.get_mut("sequence_number") {
            if seq.as_u64() != Some(self.seq) {
                *seq = Value::from(self.seq);
                changed = true;
            }
            self.seq += 1;
        }
        if changed {
            write_event(out, name, &v.to_string());
        } else {
            write_event(out, name, data);
        }
    }
}

/// An event whose `field` is upstream index `i`, as the client's `o`.
fn emit_indexed(
    out: &mut Vec<u8>,
    name: Option<&str>,
    data: &str,
    v: &mut Value,
    field: &str,
    i: u64,
    o: u64,
) {
    if i == o {
        write_event(out, name, data);
    } else {
        v[field] = Value::from(o);
        write_event(out, name, &v.to_string());
    }
}

/// One SSE event (a data line per line of `data`).
pub fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &str) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Add `add`'s numbers into `total`, field by field (nested objects too).
pub fn add_usage(total: &mut Value, add: &Value) {
    let (Value::Object(t), Value::Object(a)) = (total, add) else {
        return;
    };
    for (k, v) in a {
        match v {
            Value::Number(n) => {
                let sum = t.get(k).and_then(Value::as_u64).unwrap_or(0) + n.as_u64().unwrap_or(0);
                t.insert(k.clone(), Value::from(sum));
            }
            Value::Object(_) => {
                let slot = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Default::default()));
                if slot.is_object() {
                    add_usage(slot, v);
                }
            }
            _ => {
                t.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_formats::wire::stream::{Assembler, SseParser};

    fn ev(name: Option<&str>, data: Value) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_string(),
        }
    }

    fn anthropic_events(blocks: &[Value], stop: &str, usage: (u64, u64)) -> Vec<SseEvent> {
        let mut out = vec![ev(
            Some("message_start"),
            serde_json::json!({"type": "message_start", "message": {"id": "m", "type": "message",
                "role": "assistant", "content": [], "model": "x",
                "usage": {"input_tokens": usage.0, "output_tokens": 1}}}),
        )];
        for (i, b) in blocks.iter().enumerate() {
            let (start, delta) = if b["type"] == "tool_use" {
                (
                    serde_json::json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}),
                    serde_json::json!({"type": "input_json_delta", "partial_json": b["input"].to_string()}),
                )
            } else {
                (
                    serde_json::json!({"type": "text", "text": ""}),
                    serde_json::json!({"type": "text_delta", "text": b["text"]}),
                )
            };
            out.push(ev(Some("content_block_start"), serde_json::json!({"type": "content_block_start", "index": i, "content_block": start})));
            out.push(ev(
                Some("content_block_delta"),
                serde_json::json!({"type": "content_block_delta", "index": i, "delta": delta}),
            ));
            out.push(ev(
                Some("content_block_stop"),
                serde_json::json!({"type": "content_block_stop", "index": i}),
            ));
        }
        out.push(ev(
            Some("message_delta"),
            serde_json::json!({"type": "message_delta",
            "delta": {"stop_reason": stop}, "usage": {"output_tokens": usage.1}}),
        ));
        out.push(ev(
            Some("message_stop"),
            serde_json::json!({"type": "message_stop"}),
        ));
        out
    }

    #[test]
    fn a_hidden_round_and_its_continuation_read_as_one_message() {
        let mut s = Splicer::new(Api::Anthropic, Offer::of(&["notes_write"]));
        let mut out = Vec::new();
        let first = anthropic_events(
            &[
                serde_json::json!({"type": "text", "text": "noting. "}),
                serde_json::json!({"type": "tool_use", "id": "c1", "name": "notes_write", "input": {"path": "p"}}),
            ],
            "tool_use",
            (10, 5),
        );
        for e in &first {
            s.event(e, &mut out);
        }
        s.end(End::Continue, &mut out);
        let second = anthropic_events(
            &[
                serde_json::json!({"type": "text", "text": "done"}),
                serde_json::json!({"type": "tool_use", "id": "c2", "name": "Bash", "input": {"cmd": "ls"}}),
            ],
            "tool_use",
            (30, 7),
        );
        for e in &second {
            s.event(e, &mut out);
        }
        s.end(End::Final, &mut out);
        let mut parser = SseParser::new();
        let mut asm = Assembler::new(Api::Anthropic.stream_api());
        let events = parser.feed(&out);
        let starts = events
            .iter()
            .filter(|e| e.event.as_deref() == Some("message_start"))
            .count();
        assert_eq!(starts, 1, "one message_start");
        for e in &events {
            asm.push(e);
        }
        let a = asm.finish().unwrap();
        assert_eq!(a.elements.len(), 1);
        let m = &a.elements[0].message;
        let kinds: Vec<String> = m
            .content
            .iter()
            .map(|b| match b {
                ctxd_core::model::ContentBlock::Text { text } => format!("text:{text}"),
                ctxd_core::model::ContentBlock::ToolCall { name, .. } => format!("call:{name}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["text:noting. ", "text:done", "call:Bash"]);
        let u = a.usage.unwrap();
        assert_eq!(u.output, 12, "usage summed: {u:?}");
        assert_eq!(u.input, 40, "usage summed: {u:?}");
    }

    #[test]
    fn a_cut_exchange_tells_the_client_why_in_a_text_block() {
        let mut s = Splicer::new(Api::Anthropic, Offer::of(&["notes_list"]));
        let mut out = Vec::new();
        let only_ours = anthropic_events(
            &[
                serde_json::json!({"type": "tool_use", "id": "c1", "name": "notes_list", "input": {}}),
            ],
            "tool_use",
            (10, 5),
        );
        for e in &only_ours {
            s.event(e, &mut out);
        }
        s.end(End::Cut, &mut out);
        let mut asm = Assembler::new(Api::Anthropic.stream_api());
        for e in &SseParser::new().feed(&out) {
            asm.push(e);
        }
        let a = asm.finish().unwrap();
        let m = &a.elements[0].message;
        assert_eq!(
            m.content,
            [ctxd_core::model::ContentBlock::text(
                crate::served::cut_notice()
            )]
        );
    }

    #[test]
    fn without_ctxd_calls_every_event_keeps_its_data() {
        let mut s = Splicer::new(Api::Anthropic, Offer::of(&["notes_write"]));
        let mut out = Vec::new();
        let events = anthropic_events(
            &[serde_json::json!({"type": "text", "text": "hi"})],
            "end_turn",
            (3, 2),
        );
        for e in &events {
            s.event(e, &mut out);
        }
        s.end(End::Final, &mut out);
        let back = SseParser::new().feed(&out);
        assert_eq!(back, events);
    }

    #[test]
    fn usage_adds_field_by_field() {
        let mut t = serde_json::json!({"a": 1, "d": {"x": 2}});
        add_usage(
            &mut t,
            &serde_json::json!({"a": 2, "b": 3, "d": {"x": 1}, "s": "k"}),
        );
        assert_eq!(
            t,
            serde_json::json!({"a": 3, "b": 3, "d": {"x": 3}, "s": "k"})
        );
    }
}
