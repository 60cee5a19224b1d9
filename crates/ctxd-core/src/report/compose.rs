//! Composition: each item's tokens attributed to the report's rows, and the largest items.

use std::collections::HashMap;

use serde::Serialize;

use crate::model::{ContentBlock, Message, Role, Session};
use crate::tokens::{for_each_part, Part, TokenCounter};
use crate::view::{Item, ItemKind, SummaryKind};

use super::walk::Walk;
use super::Largest;

/// A row's category: decides its colour on the screen (the same hue wherever it appears).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    System,
    Tools,
    User,
    Assistant,
    Thinking,
    ToolCalls,
    ToolResults,
    Images,
    Injected,
    Summaries,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::System,
        Category::Tools,
        Category::User,
        Category::Assistant,
        Category::Thinking,
        Category::ToolCalls,
        Category::ToolResults,
        Category::Images,
        Category::Injected,
        Category::Summaries,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Category::System => "system",
            Category::Tools => "tools",
            Category::User => "user",
            Category::Assistant => "assistant",
            Category::Thinking => "thinking",
            Category::ToolCalls => "tool_calls",
            Category::ToolResults => "tool_results",
            Category::Images => "images",
            Category::Injected => "injected",
            Category::Summaries => "summaries",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Category::System => "System prompt",
            Category::Tools => "Tool definitions",
            Category::User => "User messages",
            Category::Assistant => "Assistant text",
            Category::Thinking => "Thinking",
            Category::ToolCalls => "Tool calls",
            Category::ToolResults => "Tool results",
            Category::Images => "Images",
            Category::Injected => "Injected context",
            Category::Summaries => "Summaries",
        }
    }

    /// How many children a row names before folding the rest into `other`.
    fn child_limit(self) -> usize {
        match self {
            Category::Injected => 5,
            _ => 12,
        }
    }
}

/// The tokens of one live item, by row.
#[derive(Clone, Debug)]
pub(crate) struct ItemCount<'a> {
    pub entry: usize,
    pub total: u64,
    pub parts: Vec<(Category, Option<&'a str>, u64)>,
}

/// Count one item: every block's tokens go to exactly one row, so the rows add up.
pub(crate) fn count_item<'a>(
    item: &Item<'a>,
    tool_names: &HashMap<&'a str, &'a str>,
    counter: &dyn TokenCounter,
) -> ItemCount<'a> {
    let mut parts: Vec<(Category, Option<&'a str>, u64)> = Vec::new();
    let mut add = |cat: Category, child: Option<&'a str>, tokens: u64| {
        if let Some(p) = parts.iter_mut().find(|p| p.0 == cat && p.1 == child) {
            p.2 += tokens;
        } else {
            parts.push((cat, child, tokens));
        }
    };
    match &item.kind {
        ItemKind::Summary { kind, text } => {
            let child = match kind {
                SummaryKind::Compaction => "compaction",
                SummaryKind::Branch => "branch",
            };
            add(Category::Summaries, Some(child), counter.count(text));
        }
        ItemKind::Message {
            message, content, ..
        } => {
            let text_row = text_row(message);
            for block in content.iter() {
                match block {
                    ContentBlock::ToolResult {
                        call_id, tool_name, ..
                    } => {
                        let name = tool_name
                            .as_deref()
                            .or_else(|| tool_names.get(call_id.as_str()).copied())
                            .unwrap_or("unknown");
                        for_each_part(counter, block, &mut |part, t| match part {
                            Part::Image => add(Category::Images, None, t),
                            _ => add(Category::ToolResults, Some(name), t),
                        });
                    }
                    ContentBlock::ToolCall { name, .. } => {
                        for_each_part(counter, block, &mut |_, t| {
                            add(Category::ToolCalls, Some(name), t)
                        });
                    }
                    _ => for_each_part(counter, block, &mut |part, t| match part {
                        Part::Image => add(Category::Images, None, t),
                        Part::Thinking => add(Category::Thinking, None, t),
                        _ => add(text_row.0, text_row.1, t),
                    }),
                }
            }
        }
    }
    ItemCount {
        entry: item.entry,
        total: parts.iter().map(|p| p.2).sum(),
        parts,
    }
}

/// The row a message's plain text belongs to.
fn text_row(message: &Message) -> (Category, Option<&str>) {
    if let Some(kind) = message.injected.as_deref() {
        return (Category::Injected, Some(kind));
    }
    match message.role {
        Role::System | Role::Developer => (Category::System, None),
        Role::User => (Category::User, None),
        Role::Assistant => (Category::Assistant, None),
        Role::Tool => (Category::ToolResults, Some("unknown")),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Composition {
    /// ctxd's estimate of the whole projection; the rows add up to it.
    pub total: u64,
    pub rows: Vec<Row>,
    /// What the pairing rule left out (not in `total` nor the rows).
    pub unpaired: Unpaired,
}

/// Messages the projection leaves out because a tool call has no result after it, or a result
/// has no call before it: the gateway never sends one without the other.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Unpaired {
    pub count: usize,
    pub tokens: u64,
    /// The first [`UNPAIRED_IDS`] of their entry ids, in branch order.
    pub entry_ids: Vec<String>,
}

/// How many unpaired entry ids a report lists.
pub const UNPAIRED_IDS: usize = 20;

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub id: String,
    pub label: String,
    pub category: Category,
    pub tokens: u64,
    /// Share of `composition.total`.
    pub percent: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Row>,
}

pub(crate) fn compose(session: &Session, walk: &Walk<'_>) -> Composition {
    let mut sums: HashMap<Category, (u64, HashMap<&str, u64>)> = HashMap::new();
    sums.entry(Category::System).or_default().0 += walk.system_tokens;
    for &(name, t) in &walk.tools_tokens {
        let e = sums.entry(Category::Tools).or_default();
        e.0 += t;
        *e.1.entry(name).or_default() += t;
    }
    for c in &walk.live {
        for &(cat, child, t) in &c.parts {
            let e = sums.entry(cat).or_default();
            e.0 += t;
            if let Some(child) = child {
                *e.1.entry(child).or_default() += t;
            }
        }
    }
    let total = walk.total();
    let pct = |t: u64| {
        if total == 0 {
            0.0
        } else {
            t as f64 * 100.0 / total as f64
        }
    };
    let rows = Category::ALL
        .iter()
        .map(|&cat| {
            let (tokens, children) = sums.remove(&cat).unwrap_or_default();
            let mut kids: Vec<(&str, u64)> = children.into_iter().collect();
            kids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let limit = cat.child_limit();
            let mut rows: Vec<Row> = kids
                .iter()
                .take(limit)
                .map(|&(name, t)| Row {
                    id: format!("{}/{}", cat.id(), name),
                    label: sanitize(name, 40),
                    category: cat,
                    tokens: t,
                    percent: pct(t),
                    children: Vec::new(),
                })
                .collect();
            let rest: u64 = kids.iter().skip(limit).map(|k| k.1).sum();
            if kids.len() > limit {
                rows.push(Row {
                    id: format!("{}/other", cat.id()),
                    label: format!("{} more", kids.len() - limit),
                    category: cat,
                    tokens: rest,
                    percent: pct(rest),
                    children: Vec::new(),
                });
            }
            Row {
                id: cat.id().to_owned(),
                label: cat.label().to_owned(),
                category: cat,
                tokens,
                percent: pct(tokens),
                children: rows,
            }
        })
        .collect();
    let unpaired = Unpaired {
        count: walk.unpaired.len(),
        tokens: walk.unpaired.iter().map(|u| u.1).sum(),
        entry_ids: walk
            .unpaired
            .iter()
            .filter_map(|&(pos, _)| session.entries.get(pos).map(|e| e.id.0.clone()))
            .take(UNPAIRED_IDS)
            .collect(),
    };
    Composition {
        total,
        rows,
        unpaired,
    }
}

/// The `n` largest live items, with a bounded, sanitized descriptor each.
pub(crate) fn largest(session: &Session, walk: &Walk<'_>, n: usize) -> Vec<Largest> {
    let mut order: Vec<usize> = (0..walk.live.len()).collect();
    order.sort_by(|&a, &b| walk.live[b].total.cmp(&walk.live[a].total).then(a.cmp(&b)));
    order
        .into_iter()
        .take(n)
        .filter_map(|i| {
            let item = walk.projector.items.get(i)?;
            let count = &walk.live[i];
            let entry = session.entries.get(item.entry)?;
            let category = count
                .parts
                .iter()
                .max_by_key(|p| p.2)
                .map_or(Category::User, |p| p.0);
            let (role, descriptor) = describe(item, count);
            Some(Largest {
                entry_id: entry.id.0.clone(),
                role,
                category,
                tokens: count.total,
                descriptor: sanitize(&descriptor, 40),
            })
        })
        .collect()
}

fn describe(item: &Item<'_>, count: &ItemCount<'_>) -> (String, String) {
    match &item.kind {
        ItemKind::Summary { kind, .. } => (
            "summary".into(),
            match kind {
                SummaryKind::Compaction => "compaction summary".into(),
                SummaryKind::Branch => "branch summary".into(),
            },
        ),
        ItemKind::Message {
            message, content, ..
        } => {
            let role = message.role.as_str().to_owned();
            if let Some(kind) = &message.injected {
                return (role, format!("injected: {kind}"));
            }
            for b in content.iter() {
                match b {
                    ContentBlock::ToolResult { .. } => {
                        // The name the count resolved (from the result or its call).
                        let name = count
                            .parts
                            .iter()
                            .find_map(|p| (p.0 == Category::ToolResults).then_some(p.1).flatten())
                            .unwrap_or("unknown");
                        return (role, format!("tool result: {name}"));
                    }
                    ContentBlock::ToolCall {
                        name, arguments, ..
                    } => {
                        let arg = ["command", "cmd", "path", "file_path", "pattern"]
                            .iter()
                            .find_map(|k| arguments.get(k))
                            .map(|v| match v {
                                serde_json::Value::String(s) => s.clone(),
                                other => other.to_string(),
                            })
                            .unwrap_or_default();
                        return (role, format!("{name} {arg}"));
                    }
                    _ => {}
                }
            }
            let text = content.iter().find_map(|b| match b {
                ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
                ContentBlock::Thinking { thinking, .. } if !thinking.trim().is_empty() => {
                    Some(thinking.as_str())
                }
                _ => None,
            });
            match text {
                Some(t) => (role, t.trim().lines().next().unwrap_or_default().to_owned()),
                None if content.iter().any(|b| matches!(b, ContentBlock::Image(_))) => {
                    (role, "image".into())
                }
                None => (role, String::new()),
            }
        }
    }
}

/// One line of at most `max` characters, with control characters removed and runs of white
/// space folded: model- and agent-written text is painted on a terminal.
pub fn sanitize(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(max.min(text.len()));
    let mut count = 0;
    let mut space = false;
    for ch in text.chars() {
        let ch = if ch.is_whitespace() { ' ' } else { ch };
        if ch.is_control() || is_bidi_control(ch) {
            continue;
        }
        if ch == ' ' {
            if space || count == 0 {
                continue;
            }
            space = true;
        } else {
            space = false;
        }
        if count == max {
            out.pop();
            out.push('…');
            return out.trim_end().to_owned();
        }
        out.push(ch);
        count += 1;
    }
    out.trim_end().to_owned()
}

fn is_bidi_control(ch: char) -> bool {
    matches!(ch, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}
