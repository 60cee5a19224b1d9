//! Answers → decisions → drafts, under the seed's thresholds. A question without an answer
//! keeps its item.

use std::collections::BTreeMap;

use super::record::{blocks_chars, ItemResult, Outcome as RecordOutcome, Record, Usage};
use super::{planner, render, Answer, Config, Item, ItemKind, Missing, Phase, Plan, Target};
use crate::model::{ContentBlock, EntryId, EntryKind, Session};

pub use super::record::Outcome;

/// What a pass decided: per item results, and the edits.
#[derive(Clone, Debug, Default)]
pub struct Decisions {
    pub phase: Option<Phase>,
    pub results: Vec<ItemResult>,
    /// New content per entry (`None` omits it), in entry order.
    pub edits: Vec<(EntryId, Option<Vec<ContentBlock>>)>,
    pub saved_chars: usize,
}

impl Decisions {
    /// The entries to append: the edits, then the record (when anything was judged).
    pub fn drafts(&self, classifier: &str, usage: Usage, timed_out: bool) -> Vec<EntryKind> {
        let mut out: Vec<EntryKind> = self
            .edits
            .iter()
            .map(|(target, replacement)| EntryKind::ContextEdit {
                target: target.clone(),
                replacement: replacement.clone(),
            })
            .collect();
        if !self.results.is_empty() {
            out.push(
                Record {
                    v: 1,
                    phase: self.phase.unwrap_or(Phase::RunEnd),
                    classifier: classifier.to_owned(),
                    saved_chars: self.saved_chars,
                    usage,
                    timed_out,
                    results: self.results.clone(),
                }
                .to_entry(),
            );
        }
        out
    }
}

fn fmt_p(p: f32) -> String {
    let s = format!("{:.2}", p.clamp(0.0, 1.0));
    s.trim_start_matches('0').to_owned()
}

/// New content per (entry position, block).
type NewBlocks = BTreeMap<usize, BTreeMap<usize, Vec<ContentBlock>>>;

/// Decide every item of `plan` from `answers` (one per question; `Err` says why there is
/// none).
pub fn decide(
    session: &Session,
    plan: &Plan,
    answers: &[Result<Answer, Missing>],
    cfg: &Config,
) -> Decisions {
    let mut d = Decisions {
        phase: Some(plan.phase),
        results: plan.pinned.clone(),
        ..Decisions::default()
    };
    let by_item = questions_by_item(plan);
    let mut blocks: NewBlocks = BTreeMap::new();
    let mut exchange_omits: Vec<(usize, ItemResult)> = Vec::new();
    for (i, item) in plan.items.iter().enumerate() {
        let recall_id = cfg.recall_id(&item.entry_id);
        let mut result = kept_result(item);
        let new = match item.kind {
            ItemKind::Image => {
                let Some(new) = image(session, item, &recall_id, &mut result) else {
                    continue;
                };
                Some(new)
            }
            ItemKind::Small => {
                let answer = first_answer(&by_item[i], answers);
                small(item, answer, cfg, &recall_id, &mut result)
            }
            ItemKind::Exchange => {
                let answer = first_answer(&by_item[i], answers);
                if exchange_unrelated(answer, cfg, &mut result) {
                    exchange_omits.push((i, result));
                    continue;
                }
                None
            }
            ItemKind::Large => large(item, &by_item[i], plan, answers, cfg, &mut result)
                .map(|keep| large_text(session, item, &recall_id, &keep, &mut result)),
        };
        if let Some(new) = new {
            blocks
                .entry(item.entry)
                .or_default()
                .insert(item.block, new);
        }
        d.results.push(result);
    }

    // Items from before the run's prompt rewrite the cache from further back than the run's
    // own edits: that extra rewrite must pay off, or they wait for a later run end.
    let old_wait = old_items_wait(plan, &blocks, &exchange_omits, &d.results);
    if old_wait {
        defer_old_items(plan, &mut blocks, &mut d.results);
    }
    omit_exchanges(session, plan, cfg, exchange_omits, old_wait, &mut d);
    edit_blocks(session, blocks, &mut d.edits);
    d.saved_chars = d
        .results
        .iter()
        .map(|r| r.before_chars.saturating_sub(r.after_chars))
        .sum();
    d
}

/// Per item, its questions' indices.
fn questions_by_item(plan: &Plan) -> Vec<Vec<usize>> {
    let mut by_item: Vec<Vec<usize>> = vec![Vec::new(); plan.items.len()];
    for (q, question) in plan.questions.iter().enumerate() {
        by_item[question.item].push(q);
    }
    by_item
}

/// The answer to an item's first question.
fn first_answer<'a>(
    questions: &[usize],
    answers: &'a [Result<Answer, Missing>],
) -> Result<&'a Answer, Missing> {
    match questions.first().map(|&q| answers.get(q)) {
        Some(Some(Ok(a))) => Ok(a),
        Some(Some(Err(m))) => Err(*m),
        Some(None) | None => Err(Missing::NoAnswer),
    }
}

/// The item's result before any decision: kept as it is.
fn kept_result(item: &Item) -> ItemResult {
    ItemResult {
        kind: item.kind,
        entry_id: item.entry_id.0.clone(),
        tool: item.tool.clone(),
        label: item.label.clone(),
        outcome: RecordOutcome::Kept,
        reason: String::new(),
        before_chars: item.before_chars,
        after_chars: item.before_chars,
        trace: Vec::new(),
        omitted: Vec::new(),
    }
}

/// An old image's result content: a stub in place of its images, its other blocks as they are.
/// `None` when the item's block is not a tool result (the item has no result then).
fn image(
    session: &Session,
    item: &Item,
    recall_id: &str,
    result: &mut ItemResult,
) -> Option<Vec<ContentBlock>> {
    let content = result_content(session, item)?;
    let sizes: Vec<_> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Image(img) => Some((img.width, img.height)),
            _ => None,
        })
        .collect();
    let tokens: u64 = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Image(img) => Some(crate::tokens::image_tokens(img)),
            _ => None,
        })
        .sum();
    let mut new = vec![ContentBlock::text(render::image_stub(
        &sizes,
        tokens,
        item.signals.age_turns,
        recall_id,
    ))];
    new.extend(
        content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::Image(_)))
            .cloned(),
    );
    result.after_chars = blocks_chars(&new);
    result.outcome = RecordOutcome::Removed;
    result.reason = format!("{} turns old", item.signals.age_turns);
    Some(new)
}

/// A small output's new content: a stub when judged no longer needed, else `None` (kept).
fn small(
    item: &Item,
    answer: Result<&Answer, Missing>,
    cfg: &Config,
    recall_id: &str,
    result: &mut ItemResult,
) -> Option<Vec<ContentBlock>> {
    let a = match answer {
        Err(m) => {
            result.reason = m.as_str().to_owned();
            return None;
        }
        Ok(a) => a,
    };
    let p = yes(a);
    result.trace.push(format!("p{}", fmt_p(p)));
    // A later edit quotes it: its text stays verbatim.
    if item.quoted {
        result.reason = "quoted".to_owned();
        return None;
    }
    if p >= cfg.small_keep {
        result.reason = "needed".to_owned();
        return None;
    }
    let stub = render::output_stub(
        &item.label,
        item.before_chars,
        recall_id,
        &removal_why(item),
    );
    result.outcome = RecordOutcome::Removed;
    result.reason = if item.signals.superseded.is_some() {
        "not-needed,superseded".to_owned()
    } else {
        "not-needed".to_owned()
    };
    result.after_chars = stub.len();
    Some(vec![ContentBlock::text(stub)])
}

/// What a removed output's stub says of why it went.
fn removal_why(item: &Item) -> String {
    match &item.signals.superseded {
        Some(s) => format!("out of date: {s}"),
        None => "judged no longer needed".to_owned(),
    }
}

/// Whether an old exchange is judged unrelated (omitted, if the run's omissions together save
/// enough); its result's reason and trace filled in either way.
fn exchange_unrelated(
    answer: Result<&Answer, Missing>,
    cfg: &Config,
    result: &mut ItemResult,
) -> bool {
    match answer {
        Err(m) => result.reason = m.as_str().to_owned(),
        Ok(a) => {
            let p = yes(a);
            result.trace.push(format!("p{}", fmt_p(p)));
            if p < cfg.exchange_omit {
                result.outcome = RecordOutcome::Omitted;
                result.reason = "unrelated".to_owned();
                return true;
            }
            result.reason = "relevant".to_owned();
        }
    }
    false
}

/// A large output's new content from the chunks to keep: the kept chunks, or a stub when none.
fn large_text(
    session: &Session,
    item: &Item,
    recall_id: &str,
    keep: &[bool],
    result: &mut ItemResult,
) -> Vec<ContentBlock> {
    let new_text = if keep.iter().any(|k| *k) {
        let base = session.entries[item.entry]
            .kind
            .as_message()
            .map_or(0, |m| planner::base_line(m, item.block));
        render::distilled(&item.label, recall_id, &item.text, &item.chunks, keep, base)
    } else {
        render::output_stub(
            &item.label,
            item.before_chars,
            recall_id,
            &removal_why(item),
        )
    };
    result.after_chars = new_text.len();
    vec![ContentBlock::text(new_text)]
}

/// Old images, and earlier runs' outputs judged again (`planner::EarlierJudgments::retry`), wait: their
/// edits are dropped and their results kept as "deferred".
fn defer_old_items(plan: &Plan, blocks: &mut NewBlocks, results: &mut [ItemResult]) {
    for item in plan.items.iter().filter(|it| it.kind != ItemKind::Exchange) {
        let edited = is_old(plan, item.entry)
            && blocks
                .get_mut(&item.entry)
                .and_then(|b| b.remove(&item.block))
                .is_some();
        if !edited {
            continue;
        }
        // (Results name an entry, not a block: every edited result of the entry waits.)
        for r in results.iter_mut().filter(|r| {
            r.kind == item.kind && r.entry_id == item.entry_id.0 && r.outcome != RecordOutcome::Kept
        }) {
            r.outcome = RecordOutcome::Kept;
            r.reason = "deferred".to_owned();
            r.after_chars = r.before_chars;
        }
    }
    blocks.retain(|_, b| !b.is_empty());
}

/// Exchanges: together they must save enough, or they wait for a later run end.
fn omit_exchanges(
    session: &Session,
    plan: &Plan,
    cfg: &Config,
    exchange_omits: Vec<(usize, ItemResult)>,
    old_wait: bool,
    d: &mut Decisions,
) {
    let saving: usize = exchange_omits
        .iter()
        .map(|(i, _)| plan.items[*i].before_chars)
        .sum();
    for (i, mut result) in exchange_omits {
        let item = &plan.items[i];
        if saving < cfg.exchange_min_saving || old_wait {
            result.outcome = RecordOutcome::Kept;
            result.reason = "deferred".to_owned();
            d.results.push(result);
            continue;
        }
        let prompt = match session.entries[item.entry].kind.as_message() {
            Some(m) => super::run::prompt_text(m, &m.content),
            None => String::new(),
        };
        let stub = render::exchange_stub(
            &prompt,
            item.messages,
            item.before_chars / 4,
            &cfg.recall_id(&item.entry_id),
        );
        result.after_chars = stub.len();
        result.omitted = item
            .omit
            .iter()
            .map(|&p| session.entries[p].id.0.clone())
            .collect();
        d.edits
            .push((item.entry_id.clone(), Some(vec![ContentBlock::text(stub)])));
        for &p in &item.omit {
            d.edits.push((session.entries[p].id.clone(), None));
        }
        d.results.push(result);
    }
}

/// One edit per tool-result message, its other blocks as they are.
fn edit_blocks(
    session: &Session,
    blocks: NewBlocks,
    edits: &mut Vec<(EntryId, Option<Vec<ContentBlock>>)>,
) {
    for (pos, new_blocks) in blocks {
        let Some(m) = session.entries[pos].kind.as_message() else {
            continue;
        };
        let mut content = m.content.clone();
        for (b, new) in new_blocks {
            if let Some(ContentBlock::ToolResult { content: c, .. }) = content.get_mut(b) {
                *c = new;
            }
        }
        edits.push((session.entries[pos].id.clone(), Some(content)));
    }
}

/// The entry at `pos` comes before the run's prompt.
fn is_old(plan: &Plan, pos: usize) -> bool {
    match (plan.run.prompt, plan.costs.item_of(pos)) {
        (Some(prompt), Some(at)) => at < prompt,
        _ => false,
    }
}

/// The edits of items from before the run's prompt (omitted exchanges, old images) must wait:
/// the rewrite they add to the run's own edits' (`cache::Costs::rewrite_from`) does not pass
/// the break-even rule for what they save, over the session's turns so far.
fn old_items_wait(
    plan: &Plan,
    blocks: &NewBlocks,
    exchanges: &[(usize, ItemResult)],
    results: &[ItemResult],
) -> bool {
    let costs = &plan.costs;
    let (mut old_first, mut new_first) = (usize::MAX, usize::MAX);
    for &pos in blocks.keys() {
        if let Some(at) = costs.item_of(pos) {
            if is_old(plan, pos) {
                old_first = old_first.min(at);
            } else {
                new_first = new_first.min(at);
            }
        }
    }
    let mut saving = 0usize;
    for (i, _) in exchanges {
        let item = &plan.items[*i];
        if let Some(at) = costs.item_of(item.entry) {
            old_first = old_first.min(at);
        }
        saving += item.before_chars;
    }
    for item in plan.items.iter().filter(|it| it.kind != ItemKind::Exchange) {
        if is_old(plan, item.entry) && blocks.contains_key(&item.entry) {
            saving += results
                .iter()
                .find(|r| r.kind == item.kind && r.entry_id == item.entry_id.0)
                .map_or(0, |r| r.before_chars.saturating_sub(r.after_chars));
        }
    }
    if old_first == usize::MAX {
        return false;
    }
    let others = if new_first == usize::MAX {
        0
    } else {
        costs.rewrite_from(new_first)
    };
    let extra = costs.rewrite_from(old_first).saturating_sub(others);
    extra > 0 && !crate::cache::pays_off(saving, costs.turns, extra, costs.provider)
}

fn yes(a: &Answer) -> f32 {
    match a {
        Answer::Yes(p) => *p,
        Answer::Choice(ps) => ps.first().copied().unwrap_or(0.0),
    }
}

fn result_content<'a>(session: &'a Session, item: &Item) -> Option<&'a [ContentBlock]> {
    match session.entries[item.entry]
        .kind
        .as_message()?
        .content
        .get(item.block)?
    {
        ContentBlock::ToolResult { content, .. } => Some(content),
        _ => None,
    }
}

/// A large output's answers, by what they judge.
struct LargeAnswers<'a> {
    /// The keyword question's P(the whole output is needed); 0 without one.
    kw: f32,
    /// Per chunk, its own question's P(needed).
    p_chunk: Vec<Option<f32>>,
    /// Per focus question: its segment's first chunk, its chunk count, and the choice's
    /// probabilities (each chunk, then "whole", then "none").
    focus: Vec<(usize, usize, &'a [f32])>,
}

/// A large output's chunks to keep (`None`: keep it as it is), the result's reason and trace
/// filled in.
fn large(
    item: &Item,
    questions: &[usize],
    plan: &Plan,
    answers: &[Result<Answer, Missing>],
    cfg: &Config,
    result: &mut ItemResult,
) -> Option<Vec<bool>> {
    let a = match large_answers(item, questions, plan, answers) {
        Ok(a) => a,
        Err(m) => {
            result.reason = m.as_str().to_owned();
            return None;
        }
    };
    let mut keep = vec![false; item.chunks.len()];
    let mut reasons: Vec<&'static str> = Vec::new();
    for &(first, count, ps) in &a.focus {
        keep_segment(
            item,
            &a,
            cfg,
            (first, count, ps),
            &mut keep,
            &mut reasons,
            result,
        );
    }
    large_outcome(item, keep, reasons, cfg, result)
}

/// Sorts a large output's answers by target; `Err` at the first question without a usable
/// answer.
fn large_answers<'a>(
    item: &Item,
    questions: &[usize],
    plan: &Plan,
    answers: &'a [Result<Answer, Missing>],
) -> Result<LargeAnswers<'a>, Missing> {
    let mut p_chunk: Vec<Option<f32>> = vec![None; item.chunks.len()];
    let mut kw: Option<f32> = None;
    let mut focus: Vec<(usize, usize, &'a [f32])> = Vec::new();
    for &q in questions {
        let a = match answers.get(q) {
            Some(Ok(a)) => a,
            Some(Err(m)) => return Err(*m),
            None => return Err(Missing::NoAnswer),
        };
        match (plan.questions[q].target, a) {
            (Target::Whole, a) => kw = Some(yes(a)),
            (Target::Chunk(k), a) => p_chunk[k] = Some(yes(a)),
            (Target::Focus { first, count }, Answer::Choice(ps)) => {
                focus.push((first, count, ps));
            }
            (Target::Focus { .. }, Answer::Yes(_)) => return Err(Missing::NoAnswer),
        }
    }
    Ok(LargeAnswers {
        kw: kw.unwrap_or(0.0),
        p_chunk,
        focus,
    })
}

/// Marks the chunks of one focus segment to keep, and traces why.
fn keep_segment(
    item: &Item,
    a: &LargeAnswers,
    cfg: &Config,
    (first, count, ps): (usize, usize, &[f32]),
    keep: &mut [bool],
    reasons: &mut Vec<&'static str>,
    result: &mut ItemResult,
) {
    let (kw, p_chunk) = (a.kw, &a.p_chunk);
    let (best, p_best) =
        ps.iter().copied().enumerate().fold(
            (0, f32::MIN),
            |acc, (i, p)| if p > acc.1 { (i, p) } else { acc },
        );
    let focus_name = if best < count {
        format!("chunk_{}", first + best + 1)
    } else if best == count {
        "whole".to_owned()
    } else {
        "none".to_owned()
    };
    let seg = first..first + count;
    let mut seg_keep = 0usize;
    for k in seg.clone() {
        if item.forced.get(k).copied().unwrap_or(false)
            || p_chunk[k].unwrap_or(1.0) >= cfg.chunk_keep
        {
            keep[k] = true;
            seg_keep += 1;
        }
    }
    let mut note = "";
    if kw >= cfg.chunk_keep {
        seg.clone().for_each(|k| keep[k] = true);
        note = " (whole-needed)";
        reasons.push("whole-needed");
    } else if best == count {
        seg.clone().for_each(|k| keep[k] = true);
        note = " (whole-chosen)";
        reasons.push("whole-chosen");
    } else if seg_keep == 0 && best < count {
        // No chunk passed its own question, and "none" did not win: keep the focus.
        keep[first + best] = true;
    } else if seg_keep == 0 && p_best < cfg.none_threshold {
        // "none" won, but not clearly: keep the best chunk by its own answer.
        if let Some(k) = seg.clone().max_by(|a, b| {
            p_chunk[*a]
                .unwrap_or(0.0)
                .total_cmp(&p_chunk[*b].unwrap_or(0.0))
        }) {
            keep[k] = true;
        }
    }
    let kept = seg.clone().filter(|k| keep[*k]).count();
    result.trace.push(format!(
        "kw{} focus={focus_name}:{} keep {kept}/{}{note}",
        fmt_p(kw),
        fmt_p(p_best),
        seg.len()
    ));
}

/// What the chunks to keep come to: all of them or too large a share keep the output as it
/// is (`None`), none removes it, else it is distilled.
fn large_outcome(
    item: &Item,
    keep: Vec<bool>,
    mut reasons: Vec<&'static str>,
    cfg: &Config,
    result: &mut ItemResult,
) -> Option<Vec<bool>> {
    let total: usize = item.chunks.iter().map(|c| c.chars()).sum();
    let kept_chars: usize = item
        .chunks
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c.chars())
        .sum();
    let mut reason = |r: &'static str| {
        reasons.push(r);
        result.reason = reasons.join(",");
    };
    if keep.iter().all(|k| *k) {
        if reasons.is_empty() {
            reasons.push("all-chunks");
        }
        result.reason = reasons.join(",");
        return None;
    }
    if !keep.iter().any(|k| *k) {
        result.outcome = RecordOutcome::Removed;
        reason("none-needed");
        return Some(keep);
    }
    if kept_chars as f32 > cfg.max_keep_ratio * total as f32 {
        reason("not-worth");
        return None;
    }
    result.outcome = RecordOutcome::Distilled;
    reason("chunks");
    Some(keep)
}
