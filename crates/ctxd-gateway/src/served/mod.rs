//! ctxd's own tools, served by the gateway: offered to the model beside the client's tools,
//! answered by ctxd, never seen by the client.
//!
//! - [`Offer`]: which tools a request gets (the setting for its agent, minus names the client
//!   already defines) and their definitions in the API's shape, the same bytes every request so
//!   the provider's cached tools prefix keeps hitting; [`inject`] adds them to the body. With
//!   lazy tools (`crate::lazy`) the offer has `find_capability` too, and [`inject`] rebuilds the
//!   client's array from the definitions kept.
//! - A response calling only ctxd's tools is a *hidden round*: ctxd runs the calls
//!   ([`exchange`]), appends the response and the results to the log and continues upstream;
//!   the client gets one coherent response ([`splice`] for streams, [`merge`] for JSON bodies).
//!   A response mixing ctxd's calls with the client's: ctxd's run at once, the client's reach
//!   the client, and both results are in place on the next request.
//! - What the client saw differs from what the log holds, so the log records it: after a
//!   hidden exchange, one view event (`ctxd_engine::turn::client_view`) per element the client will echo, the first naming the
//!   entries it stands for. The gateway's log matches the client's echo against those events
//!   and projects the real exchange (`ctxd_engine::turn::log`): the model always sees its own tool history.

pub(crate) mod exchange;
pub mod merge;
pub mod splice;

use ctxd_core::model::{ContentBlock, Message};
use ctxd_core::offered::ModelTools;
use serde_json::{json, Value};
use std::ops::Range;

use crate::api::Api;
use crate::config::Management;
use crate::request::ParsedRequest;

/// What the client reads when the rounds' limit ends an exchange ([`exchange::MAX_ROUNDS`]):
/// without it the client would get an answer with nothing in it and no word of why.
pub fn cut_notice() -> String {
    format!(
        "[ctxd ended this turn: the model called ctxd's own tools {} rounds in a row without \
         answering. Send a message to continue.]",
        exchange::MAX_ROUNDS
    )
}

/// ctxd's tools offered on one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    names: Vec<&'static str>,
}

impl Offer {
    /// The tools agent `agent` is offered, minus those whose names the client's own tools
    /// (`client`) already use: a client's tool is never shadowed.
    pub fn new<'a>(
        management: &Management,
        agent: &str,
        client: impl IntoIterator<Item = &'a str>,
    ) -> Offer {
        let client: Vec<&str> = client.into_iter().collect();
        // ctxd's tools join an agent's tool loop: a request offering no tool of its own (a
        // title, a summary, a classifier call of the client's) stays as it is.
        if management.record_only || client.is_empty() {
            return Offer::default();
        }
        let names = management
            .tools_for(agent)
            .names()
            .into_iter()
            .filter(|n| !client.contains(n))
            .collect();
        Offer { names }
    }

    /// This offer with `find_capability` (lazy tools leave some of the client's tools out).
    pub fn with_find_capability(mut self) -> Offer {
        let name = ctxd_core::mechanisms::lazy::FIND_CAPABILITY;
        if !self.has(name) {
            self.names.push(name);
        }
        self
    }

    /// An offer of exactly these tools (tests).
    pub fn of(names: &[&'static str]) -> Offer {
        Offer {
            names: names.to_vec(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.contains(&name)
    }

    /// The groups the texts the model reads may name.
    pub fn model_tools(&self) -> ModelTools {
        ModelTools::from_names(self.names.iter().copied())
    }

    /// The definitions in `api`'s shape, comma-separated (no brackets). Gemini's tools array
    /// holds tools that each declare functions: ctxd's are one more such tool.
    pub fn render(&self, api: Api) -> Vec<u8> {
        let mut out = Vec::new();
        if api == Api::Gemini && !self.is_empty() {
            out.extend_from_slice(b"{\"functionDeclarations\":[");
        }
        // The first definition goes right after Gemini's opening bracket, without a comma.
        let mut first = true;
        for (name, bytes) in rendered(api) {
            if !self.has(name) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(bytes);
        }
        if api == Api::Gemini && !self.is_empty() {
            out.extend_from_slice(b"]}");
        }
        out
    }

    /// ctxd's calls among `content`'s tool calls: (id, name, arguments).
    pub fn calls_in<'a>(
        &'a self,
        content: &'a [ContentBlock],
    ) -> impl Iterator<Item = (&'a str, &'a str, &'a Value)> + 'a {
        content.iter().filter_map(move |b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } if self.has(name) => Some((id.as_str(), name.as_str(), arguments)),
            _ => None,
        })
    }
}

/// Each tool's name and definition bytes, in the registry's order.
type Definitions = Vec<(&'static str, Vec<u8>)>;

/// Every tool's definition in `api`'s shape, in the registry's order (rendered once).
fn rendered(api: Api) -> &'static [(&'static str, Vec<u8>)] {
    static RENDERED: std::sync::OnceLock<[Definitions; 4]> = std::sync::OnceLock::new();
    let all = RENDERED.get_or_init(|| {
        [Api::Anthropic, Api::Chat, Api::Responses, Api::Gemini].map(|api| {
            ctxd_engine::tools::specs()
                .into_iter()
                .map(|spec| {
                    let v = match api {
                        Api::Anthropic => json!({
                            "name": spec.name,
                            "description": spec.description,
                            "input_schema": spec.parameters,
                        }),
                        Api::Chat => json!({"type": "function", "function": {
                            "name": spec.name,
                            "description": spec.description,
                            "parameters": spec.parameters,
                        }}),
                        Api::Responses => json!({
                            "type": "function",
                            "name": spec.name,
                            "description": spec.description,
                            "parameters": spec.parameters,
                        }),
                        // One declaration; `Offer::render` groups them in one tool.
                        Api::Gemini => json!({
                            "name": spec.name,
                            "description": spec.description,
                            "parametersJsonSchema": spec.parameters,
                        }),
                    };
                    (spec.name, v.to_string().into_bytes())
                })
                .collect()
        })
    });
    match api {
        Api::Anthropic => &all[0],
        Api::Chat => &all[1],
        Api::Responses => &all[2],
        Api::Gemini => &all[3],
    }
}

/// The names of the client's own tools in the request, read without building their schemas
/// (Claude Code sends tens of kilobytes of them on every request).
pub fn client_tool_names(req: &ParsedRequest, body: &[u8]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Function<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Tool<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        function: Option<Function<'a>>,
        #[serde(borrow, default, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
        /// Gemini: a tool declares functions (Google's other tools have no name of a function).
        #[serde(borrow, default, rename = "functionDeclarations")]
        declarations: Option<Vec<Function<'a>>>,
    }
    let Some(bytes) = req
        .tools_raw
        .as_ref()
        .and_then(|(r, _)| body.get(r.clone()))
    else {
        return Vec::new();
    };
    let Ok(tools) = serde_json::from_slice::<Vec<Tool<'_>>>(bytes) else {
        return Vec::new();
    };
    if req.api == crate::api::Api::Gemini {
        return tools
            .into_iter()
            .flat_map(|t| t.declarations.unwrap_or_default())
            .filter_map(|f| f.name.map(|n| n.into_owned()))
            .collect();
    }
    tools
        .into_iter()
        .map(|t| {
            t.name
                .or_else(|| t.function.and_then(|f| f.name))
                .or(t.kind)
                .map(|n| n.into_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// Which tool calls a response makes, by whom.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub ctxd: usize,
    pub client: usize,
}

impl Calls {
    pub fn of<'a>(offer: &Offer, messages: impl IntoIterator<Item = &'a Message>) -> Calls {
        let mut calls = Calls::default();
        for m in messages {
            for b in &m.content {
                if let ContentBlock::ToolCall { name, .. } = b {
                    if offer.has(name) {
                        calls.ctxd += 1;
                    } else {
                        calls.client += 1;
                    }
                }
            }
        }
        calls
    }

    /// A hidden round: ctxd answers and the model continues, the client waits.
    pub fn hidden_round(&self) -> bool {
        self.ctxd > 0 && self.client == 0
    }
}

/// The body's `tools` edit: ctxd's definitions after the client's own, in the client's array
/// or a `tools` field added at the end of the object. With `kept` (lazy tools), the array's
/// content is rebuilt: the kept definitions as the client's bytes, in its order, then ctxd's.
/// `None`: nothing to change.
pub fn inject(
    req: &ParsedRequest,
    body: &[u8],
    offer: &Offer,
    kept: Option<&[Range<usize>]>,
) -> Option<Insert> {
    if offer.is_empty() && kept.is_none() {
        return None;
    }
    let defs = offer.render(req.api);
    let served = defs.len();
    if let Some((range, _)) = &req.tools_raw {
        let close = range.end.checked_sub(1)?;
        if body.get(close) != Some(&b']') {
            return None;
        }
        if let Some(kept) = kept {
            let mut bytes = Vec::with_capacity(range.len() + defs.len());
            for r in kept {
                if !bytes.is_empty() {
                    bytes.push(b',');
                }
                bytes.extend_from_slice(body.get(r.clone())?);
            }
            if !bytes.is_empty() && !defs.is_empty() {
                bytes.push(b',');
            }
            bytes.extend_from_slice(&defs);
            return Some(Insert {
                at: range.start + 1..close,
                bytes,
                served,
            });
        }
        let inner = body.get(range.start + 1..close)?;
        let empty = inner.iter().all(u8::is_ascii_whitespace);
        let mut bytes = Vec::with_capacity(defs.len() + 1);
        if !empty {
            bytes.push(b',');
        }
        bytes.extend_from_slice(&defs);
        return Some(Insert {
            at: close..close,
            bytes,
            served,
        });
    }
    if offer.is_empty() {
        return None;
    }
    let close = body.iter().rposition(|&b| b == b'}')?;
    let mut bytes = b",\"tools\":[".to_vec();
    bytes.extend_from_slice(&defs);
    bytes.push(b']');
    Some(Insert {
        at: close..close,
        bytes,
        served,
    })
}

/// Bytes that replace a range of the body (empty: inserted before the byte at its start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insert {
    pub at: Range<usize>,
    pub bytes: Vec<u8>,
    /// How many of `bytes` are ctxd's definitions (their cost in the accounting).
    pub served: usize,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn definitions_go_after_the_clients_own_or_into_a_new_field() {
        let offer = Offer::of(&["notes_write", "recall"]);
        let body = br#"{"model":"m","tools":[{"name":"Bash","input_schema":{}}],"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        let ins = inject(&req, body, &offer, None).unwrap();
        let mut out = body.to_vec();
        out.splice(ins.at, ins.bytes);
        let v: Value = serde_json::from_slice(&out).unwrap();
        let names: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Bash", "notes_write", "recall"]);

        let body = br#"{"model":"m","input":"hi"} "#;
        let req = ParsedRequest::parse(Api::Responses, body).unwrap();
        let ins = inject(&req, body, &offer, None).unwrap();
        let mut out = body.to_vec();
        out.splice(ins.at, ins.bytes);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["tools"][1]["name"], "recall");
        assert_eq!(v["tools"][1]["type"], "function");

        let body = br#"{"model":"m","tools":[ ],"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Chat, body).unwrap();
        let ins = inject(&req, body, &offer, None).unwrap();
        let mut out = body.to_vec();
        out.splice(ins.at, ins.bytes);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["tools"][0]["function"]["name"], "notes_write");
        // The same bytes every time: the provider's tools prefix stays cached.
        assert_eq!(offer.render(Api::Chat), offer.render(Api::Chat));
    }

    #[test]
    fn gemini_gets_ctxds_declarations_as_one_more_tool() {
        let offer = Offer::of(&["notes_write", "recall"]);
        let body = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"Bash","parametersJsonSchema":{}}]}]}"#;
        let req = ParsedRequest::parse(Api::Gemini, body).unwrap();
        let ins = inject(&req, body, &offer, None).unwrap();
        let mut out = body.to_vec();
        out.splice(ins.at, ins.bytes);
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
        let tools = v["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        let names: Vec<&str> = tools[1]["functionDeclarations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["notes_write", "recall"]);
    }

    #[test]
    fn lazy_tools_rebuild_the_array_from_the_kept_definitions_bytes() {
        let offer = Offer::default().with_find_capability();
        let body = br#"{"tools":[ {"name":"a", "input_schema":{}} , {"name":"b","input_schema":{}},{"name":"c","input_schema":{}}],"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        let range = |def: &[u8]| {
            let at = body.windows(def.len()).position(|w| w == def).unwrap();
            at..at + def.len()
        };
        let a = range(br#"{"name":"a", "input_schema":{}}"#);
        let c = range(br#"{"name":"c","input_schema":{}}"#);
        let ins = inject(&req, body, &offer, Some(&[a, c])).unwrap();
        let mut out = body.to_vec();
        out.splice(ins.at, ins.bytes.clone());
        let text = String::from_utf8(out).unwrap();
        let kept = r#"{"tools":[{"name":"a", "input_schema":{}},{"name":"c","input_schema":{}},"#;
        assert!(text.starts_with(kept), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["tools"][2]["name"], "find_capability");
        assert_eq!(v["tools"].as_array().unwrap().len(), 3);
        assert_eq!(ins.served, offer.render(Api::Anthropic).len());
        // Nothing kept: ctxd's alone.
        let ins = inject(&req, body, &offer, Some(&[])).unwrap();
        assert_eq!(ins.bytes, offer.render(Api::Anthropic));
    }

    #[test]
    fn a_clients_tool_is_never_shadowed() {
        let m = Management {
            tools: crate::config::ToolsSetting::All,
            ..Management::default()
        };
        let offer = Offer::new(&m, "pi", ["recall", "bash"]);
        assert!(!offer.has("recall") && offer.has("notes_write"));
        assert!(!offer.model_tools().recall && offer.model_tools().notes);
        assert!(
            Offer::new(&m, "pi", []).is_empty(),
            "a request without tools of its own gets none"
        );
        let none = Management {
            tools: crate::config::ToolsSetting::None,
            ..Management::default()
        };
        assert!(Offer::new(&none, "pi", ["bash"]).is_empty());
    }
}
