//! Lazy tools (the seed's "Mechanism 3 — Lazy skill/tool loading"): a client
//! such as Claude Code sends tens of kilobytes of tool definitions on every request, most of
//! them unused in a given task. Only a base set ([`BaseTools`], data per agent, configurable)
//! goes upstream, plus ctxd's [`FIND_CAPABILITY`], which searches the client's whole list
//! ([`search`]) and activates what matches until the next user prompt.
//!
//! **State is the log.** An activation is a record ([`Record`], an `Event` named [`EVENT`])
//! appended after `find_capability`'s result; [`activated`] reads the branch back to the last
//! user prompt ([`is_prompt`]), so at the next prompt the base set is back without anything
//! being undone, and a continuation, a retry or another gateway process sees the same set.
//!
//! **A call to a tool that was not offered** (the model saw it earlier in the conversation,
//! or guessed it) reaches the client, which still holds every tool and runs it, and counts as
//! an activation until the next prompt ([`activated`] reads the task's calls too), so the
//! definition goes upstream with the call from then on. The seed answers such a call with an
//! error, because pi itself enforces its active set and cannot run it; behind ctxd the client
//! can, and an error would cost the model a round and the user a retry for nothing.
//!
//! **What is always kept** ([`keep`]): the base set, the active tools, every tool that is not
//! a plain function (provider-run tools such as web search, freeform/custom tools: their
//! calls are not the client's alone to answer, and some must be declared for the history to
//! be read), and a tool the request's `tool_choice` names (the provider refuses a choice of a
//! tool it was not given). Kept tools keep the client's bytes and order, so the `tools` bytes
//! are the same on every request until the set changes.
//!
//! **What it costs.** A change of the set changes the `tools` array, which comes first in
//! every provider's cached prefix: the request after an activation, and the first after the
//! next prompt, write the whole prompt to the cache again. It pays off only when the withheld
//! definitions are large and activations rare; it is off by default.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{ContentBlock, EntryKind, Message, Role, Session, ToolDef};
use crate::savings::tokens_of_bytes;

/// ctxd's search tool: the one the model calls to get a tool it was not offered.
pub const FIND_CAPABILITY: &str = "find_capability";
/// The name of the activation records' event.
pub const EVENT: &str = "ctxd.lazy";
/// The record's format version.
pub const RECORD_VERSION: u32 = 1;
/// Tools one search activates at most.
pub const MAX_ACTIVATED: usize = 3;

/// The base tool set per agent (the gateway's agent names); agents without a row use
/// `other`. A name the client does not define is simply absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseTools {
    pub agents: BTreeMap<String, Vec<String>>,
    pub other: Vec<String>,
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

impl Default for BaseTools {
    /// The tools each agent's model calls in most tasks (real names from the captured
    /// requests in `../shared/clients/`): Claude Code's file and shell tools, sub-agents and
    /// task list; Codex's shell, patch and plan tools; Pi's four (all it has).
    fn default() -> Self {
        let claude = names(&[
            "Bash",
            "Read",
            "Edit",
            "MultiEdit",
            "Write",
            "Glob",
            "Grep",
            "LS",
            "Agent",
            "Task",
            "TodoWrite",
            "TaskCreate",
            "TaskUpdate",
        ]);
        let codex = names(&[
            "shell",
            "exec_command",
            "write_stdin",
            "local_shell",
            "apply_patch",
            "update_plan",
        ]);
        let pi = names(&["read", "bash", "edit", "write"]);
        let mut agents = BTreeMap::new();
        agents.insert("claude-code".to_owned(), claude.clone());
        agents.insert("codex".to_owned(), codex.clone());
        agents.insert("pi".to_owned(), pi.clone());
        let mut other = claude;
        other.extend(codex);
        other.extend(pi);
        Self { agents, other }
    }
}

impl BaseTools {
    /// The base set of `agent` (`None`: an agent ctxd does not know).
    pub fn row(&self, agent: Option<&str>) -> &[String] {
        agent
            .and_then(|a| self.agents.get(a))
            .unwrap_or(&self.other)
    }
}

/// One activation (an [`EntryKind::Event`] named [`EVENT`]): what the model searched for and
/// the tools that became active.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    pub query: String,
    pub activated: Vec<String>,
}

impl Record {
    pub fn new(query: &str, activated: Vec<String>) -> Record {
        Record {
            v: RECORD_VERSION,
            query: query.to_owned(),
            activated,
        }
    }

    pub fn to_entry(&self) -> EntryKind {
        EntryKind::event_of(EVENT, self)
    }

    pub fn from_entry(kind: &EntryKind) -> Option<Record> {
        kind.event_detail(EVENT)
    }
}

/// Whether `m` is a user prompt: a user message that carries no tool result and is not one
/// of ctxd's own (reminders). The task boundary the seed restores the base set at.
pub fn is_prompt(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .injected
            .as_deref()
            .is_some_and(|k| k.starts_with("ctxd/"))
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        && m.content.iter().any(|b| match b {
            ContentBlock::Text { text } => !text.trim().is_empty(),
            ContentBlock::Image { .. } => true,
            _ => false,
        })
}

/// The tools active on `branch` (positions, root first): those the activation records and the
/// model's calls name after the last user prompt.
pub fn activated(session: &Session, branch: &[usize]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in branch.iter().rev().filter_map(|&p| session.entries.get(p)) {
        match &e.kind {
            EntryKind::Message(m) if is_prompt(m) => break,
            EntryKind::Message(m) if m.role == Role::Assistant => {
                for b in &m.content {
                    if let ContentBlock::ToolCall { name, .. } = b {
                        out.insert(name.clone());
                    }
                }
            }
            kind => {
                if let Some(r) = Record::from_entry(kind) {
                    out.extend(r.activated);
                }
            }
        }
    }
    out
}

/// The client's tool definitions in force at the end of `branch` (the last `ToolDefs` entry).
pub fn tools_in_force<'a>(session: &'a Session, branch: &[usize]) -> &'a [ToolDef] {
    branch
        .iter()
        .rev()
        .filter_map(|&p| session.entries.get(p))
        .find_map(|e| match &e.kind {
            EntryKind::ToolDefs { tools } => Some(tools.as_slice()),
            _ => None,
        })
        .unwrap_or_default()
}

/// A tool of the request as the selection sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    /// A plain function tool (the client runs it); `false` for provider-run and freeform tools.
    pub function: bool,
}

/// Whether `tool` goes upstream: a base tool, an active one, one that is not a plain function,
/// or the one `tool_choice` names.
pub fn keep(
    tool: Candidate<'_>,
    base: &[String],
    active: &BTreeSet<String>,
    chosen: Option<&str>,
) -> bool {
    !tool.function
        || base.iter().any(|b| b == tool.name)
        || active.contains(tool.name)
        || chosen == Some(tool.name)
}

/// The tokens of one definition, as the accounting counts a `ToolDefs` entry (name,
/// description and schema at four bytes a token).
pub fn def_tokens(t: &ToolDef) -> u64 {
    let schema = if t.schema.is_null() {
        0
    } else {
        t.schema.to_string().len()
    };
    tokens_of_bytes(t.name.len() + t.description.len() + schema)
}

/// The tokens of the definitions in `tools` that `kept` leaves out: what lazy tools avoided
/// on a request.
pub fn avoided_tokens(tools: &[ToolDef], kept: impl Fn(&str) -> bool) -> u64 {
    tools
        .iter()
        .filter(|t| !kept(&t.name))
        .map(def_tokens)
        .sum()
}

/// What lazy tools leave out of the request at the end of `branch` of a recorded session (a
/// replay, `ctxd eval`): the definitions in force that are plain functions (their schema an
/// object's, as the wire parsers keep a function's parameters; a provider's or freeform tool
/// keeps its whole definition) outside `base` and the tools active at that point.
pub fn left_out(session: &Session, branch: &[usize], base: &[String]) -> u64 {
    let defs = tools_in_force(session, branch);
    if defs.is_empty() {
        return 0;
    }
    let active = activated(session, branch);
    let function = |t: &ToolDef| {
        t.schema.is_null() || t.schema.get("type").and_then(|v| v.as_str()) == Some("object")
    };
    defs.iter()
        .filter(|t| function(t) && !base.contains(&t.name) && !active.contains(&t.name))
        .map(def_tokens)
        .sum()
}

/// A tool [`search`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit<'a> {
    pub tool: &'a ToolDef,
    /// Query words in the name score 3, in the description 1; an exact name scores highest.
    pub score: u32,
}

const EXACT: u32 = 1_000;

/// Words too common in queries and descriptions to say anything.
const STOP: &[&str] = &[
    "a",
    "an",
    "and",
    "any",
    "for",
    "from",
    "in",
    "into",
    "is",
    "it",
    "of",
    "on",
    "or",
    "the",
    "this",
    "that",
    "to",
    "tool",
    "tools",
    "use",
    "used",
    "with",
    "can",
    "be",
    "i",
    "me",
    "my",
    "need",
    "want",
    "some",
    "do",
    "does",
    "capability",
];

/// The words of `s`, lower case: split at anything but letters and digits and at a lower to
/// upper case change (`WebFetch` → `web`, `fetch`; `exec_command` → `exec`, `command`).
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if !c.is_alphanumeric() {
            push_word(&mut out, &mut cur);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            push_word(&mut out, &mut cur);
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    push_word(&mut out, &mut cur);
    out
}

fn push_word(out: &mut Vec<String>, cur: &mut String) {
    if !cur.is_empty() && !STOP.contains(&cur.as_str()) {
        out.push(std::mem::take(cur));
    }
    cur.clear();
}

/// Two words match when equal, or when one starts with the other and the shorter has at least
/// four letters (`search` and `searching`, `schedule` and `scheduled`).
fn matches(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short == long || (short.len() >= 4 && long.starts_with(short))
}

/// The tools of `tools` that match `query`, best first: an exact name first, then by score
/// (query words in the name 3 each, in the description 1 each), ties in the client's order.
pub fn search<'a>(tools: &'a [ToolDef], query: &str) -> Vec<Hit<'a>> {
    let q = query.trim();
    let qwords = words(q);
    let mut hits: Vec<(usize, Hit<'a>)> = tools
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            if !q.is_empty() && t.name.eq_ignore_ascii_case(q) {
                return Some((
                    i,
                    Hit {
                        tool: t,
                        score: EXACT,
                    },
                ));
            }
            let name = words(&t.name);
            let desc = words(&t.description);
            let score: u32 = qwords
                .iter()
                .map(|w| {
                    let n = if name.iter().any(|x| matches(x, w)) {
                        3
                    } else {
                        0
                    };
                    let d = if desc.iter().any(|x| matches(x, w)) {
                        1
                    } else {
                        0
                    };
                    n + d
                })
                .sum();
            (score > 0).then_some((i, Hit { tool: t, score }))
        })
        .collect();
    hits.sort_by(|(ia, a), (ib, b)| b.score.cmp(&a.score).then(ia.cmp(ib)));
    hits.into_iter().map(|(_, h)| h).collect()
}

/// The hits a search activates: an exact name alone, else up to [`MAX_ACTIVATED`] whose score
/// is at least half the best one's.
pub fn to_activate<'a>(hits: &[Hit<'a>]) -> Vec<&'a ToolDef> {
    let Some(best) = hits.first() else {
        return Vec::new();
    };
    if best.score >= EXACT {
        return vec![best.tool];
    }
    hits.iter()
        .take_while(|h| h.score * 2 >= best.score)
        .take(MAX_ACTIVATED)
        .map(|h| h.tool)
        .collect()
}

/// The outcome of one `find_capability` call: the text the model reads and the record to
/// append (`None`: nothing new became active).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub text: String,
    pub record: Option<Record>,
}

/// Characters of a tool's description the answer quotes.
const DESCRIPTION_CHARS: usize = 200;

/// Search `tools` (the client's whole list) for `query`, given the tools the request already
/// has (`offered`: base, active and kept ones). The answer names the activated tools with the
/// start of their descriptions; with no match, the names that could be activated.
pub fn find(tools: &[ToolDef], query: &str, offered: impl Fn(&str) -> bool) -> Found {
    let hits = search(tools, query);
    let chosen = to_activate(&hits);
    if chosen.is_empty() {
        let mut available: Vec<&str> = tools
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !offered(n))
            .collect();
        available.sort_unstable();
        available.dedup();
        let text = if available.is_empty() {
            format!(
                "No tool matches {query:?}, and every tool of this session is already available."
            )
        } else {
            format!(
                "No tool matches {query:?}. Tools that can be activated: {}. Search again \
                 with one of these names or other words.",
                available.join(", ")
            )
        };
        return Found { text, record: None };
    }
    let mut text =
        String::from("Activated until the user's next message (call them directly now):");
    let mut activated = Vec::new();
    for t in &chosen {
        let desc: String = t
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(DESCRIPTION_CHARS)
            .collect();
        let state = if offered(&t.name) {
            " (already available)"
        } else {
            activated.push(t.name.clone());
            ""
        };
        text.push_str(&format!("\n- {}{state}: {desc}", t.name));
    }
    let record = (!activated.is_empty()).then(|| Record::new(query, activated));
    Found { text, record }
}

#[cfg(test)]
mod tests;
