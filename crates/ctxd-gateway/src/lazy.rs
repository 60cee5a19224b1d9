//! Lazy tools on a request, the adapter side ([`ctxd_core::mechanisms::lazy`] decides): the client's
//! `tools` array split into its definitions (their bytes kept), and which of them go upstream
//! given the log: the agent's base set, the tools activated since the last user prompt (read
//! from the branch on every body built, so a hidden round's `find_capability` shows in its
//! continuation), tools that are not plain functions and the one `tool_choice` names.

use std::collections::BTreeSet;
use std::ops::Range;

use ctxd_core::mechanisms::lazy::{self, Candidate};
use ctxd_engine::turn::SessionLog;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::Api;
use crate::config::Management;
use crate::request::ParsedRequest;

/// One definition of the client's `tools` array.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClientTool {
    name: String,
    function: bool,
    /// Its bytes in the request body.
    range: Range<usize>,
}

/// The request's tools under lazy tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lazy {
    base: Vec<String>,
    chosen: Option<String>,
    tools: Vec<ClientTool>,
}

/// What a body's `tools` keep, and what leaving the others out avoided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The kept definitions' bytes in the request body, in the client's order.
    pub ranges: Vec<Range<usize>>,
    /// Tokens of the left-out definitions, as the accounting counts the log's `ToolDefs`.
    pub avoided: u64,
}

impl Lazy {
    /// Lazy tools for this request, when on for `agent` and the client's tools include a plain
    /// function outside the base set (otherwise there is nothing to leave out, and the request
    /// keeps its tools as they are). Never for a client with a `find_capability` of its own
    /// (the seed's Pi extension manages its tools itself; two tools of one name are refused).
    pub fn new(
        management: &Management,
        agent: &str,
        req: &ParsedRequest,
        body: &[u8],
    ) -> Option<Lazy> {
        // Gemini declares functions in groups (`functionDeclarations`), which lazy tools do not
        // split yet: its requests keep every tool.
        if management.record_only
            || !management.mechanisms_for(agent).lazy_tools
            || req.api == Api::Gemini
        {
            return None;
        }
        let (range, _) = req.tools_raw.as_ref()?;
        let tools = split(req.api, body, range.clone())?;
        if tools.iter().any(|t| t.name == lazy::FIND_CAPABILITY) {
            return None;
        }
        let lazy = Lazy {
            base: management.lazy_base.row(Some(agent)).to_vec(),
            chosen: chosen_tool(req.api, body),
            tools,
        };
        let none = BTreeSet::new();
        lazy.tools
            .iter()
            .any(|t| !lazy.keeps(t, &none))
            .then_some(lazy)
    }

    fn keeps(&self, t: &ClientTool, active: &BTreeSet<String>) -> bool {
        let c = Candidate {
            name: &t.name,
            function: t.function,
        };
        lazy::keep(c, &self.base, active, self.chosen.as_deref())
    }

    /// What goes upstream now, given the log's branch.
    pub fn kept(&self, log: &SessionLog) -> Kept {
        let branch = log.branch();
        let active = lazy::activated(&log.session, &branch);
        let ranges = self
            .tools
            .iter()
            .filter(|t| self.keeps(t, &active))
            .map(|t| t.range.clone())
            .collect();
        let kept: BTreeSet<&str> = self
            .tools
            .iter()
            .filter(|t| self.keeps(t, &active))
            .map(|t| t.name.as_str())
            .collect();
        let defs = lazy::tools_in_force(&log.session, &branch);
        Kept {
            ranges,
            avoided: lazy::avoided_tokens(defs, |n| kept.contains(n)),
        }
    }
}

/// The client's `tools` array (at `range` of `body`) as definitions with their byte ranges;
/// `None` when it does not read as an array.
fn split(api: Api, body: &[u8], range: Range<usize>) -> Option<Vec<ClientTool>> {
    #[derive(Deserialize)]
    struct Function {
        #[serde(default)]
        name: Option<String>,
    }
    #[derive(Deserialize)]
    struct Tool {
        #[serde(default)]
        name: Option<String>,
        #[serde(default, rename = "type")]
        kind: Option<String>,
        #[serde(default)]
        function: Option<Function>,
    }
    let bytes = body.get(range.clone())?;
    let items: Vec<&RawValue> = serde_json::from_slice(bytes).ok()?;
    let base = bytes.as_ptr() as usize;
    items
        .into_iter()
        .map(|raw| {
            let t: Tool = serde_json::from_str(raw.get()).ok()?;
            let start = range.start + (raw.get().as_ptr() as usize - base);
            let function = match api {
                // Client tools have no type or `custom`; provider-defined ones a versioned type.
                Api::Anthropic => matches!(t.kind.as_deref(), None | Some("custom")),
                Api::Chat | Api::Responses => t.kind.as_deref() == Some("function"),
                Api::Gemini => false,
            };
            let name = t
                .name
                .or_else(|| t.function.and_then(|f| f.name))
                .or(t.kind)
                .unwrap_or_default();
            Some(ClientTool {
                name,
                function,
                range: start..start + raw.get().len(),
            })
        })
        .collect()
}

/// The tool the request's `tool_choice` names, if it names one (the provider refuses a choice
/// of a tool it was not given).
fn chosen_tool(api: Api, body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        tool_choice: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Function {
        name: String,
    }
    #[derive(Deserialize)]
    struct Choice {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        function: Option<Function>,
    }
    // Most requests have none: a byte search spares the parse of a large body.
    memchr::memmem::find(body, b"\"tool_choice\"")?;
    let head: Head = serde_json::from_slice(body).ok()?;
    let choice: Choice = serde_json::from_str(head.tool_choice?.get()).ok()?;
    match api {
        Api::Chat => choice.function.map(|f| f.name),
        Api::Anthropic | Api::Responses => choice.name,
        Api::Gemini => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lazy_only_where_on_and_something_can_wait() {
        let mut m = Management::default();
        let body = br#"{"tools":[{"name":"bash","input_schema":{}},{"name":"web_fetch","input_schema":{}}],"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        assert!(Lazy::new(&m, "sdk", &req, body).is_none(), "off by default");
        m.mechanisms.lazy_tools = true;
        assert!(Lazy::new(&m, "sdk", &req, body).is_some());
        m.lazy_base.other = vec!["bash".into(), "web_fetch".into()];
        assert!(
            Lazy::new(&m, "sdk", &req, body).is_none(),
            "nothing beyond the base set"
        );
        m.lazy_base.other = vec!["bash".into()];
        let own = br#"{"tools":[{"name":"bash","input_schema":{}},{"name":"web_fetch","input_schema":{}},{"name":"find_capability","input_schema":{}}],"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Anthropic, own).unwrap();
        assert!(
            Lazy::new(&m, "sdk", &req, own).is_none(),
            "a client with its own find_capability"
        );
    }

    #[test]
    fn the_tools_array_splits_into_definitions_with_their_bytes() {
        let body = br#"{"model":"m","tools":[ {"name":"Bash","input_schema":{}}, {"type":"web_search_20250305","name":"web_search"},{"name":"WebFetch","input_schema":{}}],"tool_choice":{"type":"tool","name":"WebFetch"},"messages":[]}"#;
        let req = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        let tools = split(req.api, body, req.tools_raw.clone().unwrap().0).unwrap();
        let names: Vec<(&str, bool)> = tools
            .iter()
            .map(|t| (t.name.as_str(), t.function))
            .collect();
        assert_eq!(
            names,
            [("Bash", true), ("web_search", false), ("WebFetch", true)]
        );
        assert_eq!(
            &body[tools[0].range.clone()],
            br#"{"name":"Bash","input_schema":{}}"#
        );
        assert_eq!(
            chosen_tool(Api::Anthropic, body).as_deref(),
            Some("WebFetch")
        );
        let chat = br#"{"messages":[],"tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","name":"apply_patch"}],"tool_choice":{"type":"function","function":{"name":"f"}}}"#;
        let req = ParsedRequest::parse(Api::Chat, chat).unwrap();
        let tools = split(req.api, chat, req.tools_raw.clone().unwrap().0).unwrap();
        assert!(tools[0].function && !tools[1].function);
        assert_eq!(tools[1].name, "apply_patch");
        assert_eq!(chosen_tool(Api::Chat, chat).as_deref(), Some("f"));
        assert_eq!(chosen_tool(Api::Chat, br#"{"tool_choice":"auto"}"#), None);
    }
}
