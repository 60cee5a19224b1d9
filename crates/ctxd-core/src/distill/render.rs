//! The texts that replace what a pass takes out. Each starts with [`MARKER`] and names the id
//! `recall` takes (the entry's history item id when the pass knows its store session).
//!
//! - a distilled output: a header line, then the kept chunks verbatim (with whatever line
//!   numbers the tool printed), and one omission line per run of removed chunks giving the
//!   lines and the `recall` call (with `offset` and `limit`) that shows them;
//! - a small output, a removed large one: a one-line stub;
//! - an old exchange: a stub on its prompt;
//! - old images: a stub before the result's own text.

use super::chunk::Chunk;

/// How every text ctxd puts in place of content begins.
pub const MARKER: &str = "[ctxd]";

/// `12.3k` style sizes.
pub fn short(n: usize) -> String {
    if n < 1_000 {
        n.to_string()
    } else if n < 100_000 {
        format!("{:.1}k", n as f64 / 1_000.0)
    } else {
        format!("{}k", (n + 500) / 1_000)
    }
}

pub fn recall_call(id: &str) -> String {
    format!("recall({{\"entryId\":\"{id}\"}})")
}

fn recall_lines(id: &str, offset: usize, limit: usize) -> String {
    format!("recall({{\"entryId\":\"{id}\",\"offset\":{offset},\"limit\":{limit}}})")
}

/// The replacement text of a distilled output. `base_line` is the line (0-based) of the entry's
/// recalled text where the output starts, so omission lines give `recall` offsets that work.
pub fn distilled(
    label: &str,
    recall_id: &str,
    text: &str,
    chunks: &[Chunk],
    keep: &[bool],
    base_line: usize,
) -> String {
    let total_lines = chunks.iter().map(|c| c.lines).sum::<usize>();
    let kept_chars: usize = chunks
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c.chars())
        .sum();
    let kept = keep.iter().filter(|k| **k).count();
    let mut out = format!(
        "{MARKER} Distilled output of {label} ({} chars, {total_lines} lines): kept {kept} of {} parts \
         ({} chars) judged relevant to the task, verbatim. Full output: {}.\n",
        short(text.len()),
        chunks.len(),
        short(kept_chars),
        recall_call(recall_id),
    );
    let mut i = 0;
    while i < chunks.len() {
        if keep[i] {
            let t = chunks[i].text(text);
            out.push_str(t);
            if !t.ends_with('\n') {
                out.push('\n');
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < chunks.len() && !keep[i] {
            i += 1;
        }
        let first = chunks[start].first_line;
        let lines: usize = chunks[start..i].iter().map(|c| c.lines).sum();
        let chars: usize = chunks[start..i].iter().map(Chunk::chars).sum();
        let mut files: Vec<&str> = chunks[start..i]
            .iter()
            .filter_map(|c| c.file.as_deref())
            .collect();
        files.dedup();
        let files = match files.len() {
            0 => String::new(),
            1..=3 => format!("; {}", files.join(", ")),
            n => format!("; {}, {} and {} more files", files[0], files[1], n - 2),
        };
        let range = if lines == 1 {
            format!("line {first}")
        } else {
            format!("lines {first}-{}", first + lines - 1)
        };
        out.push_str(&format!(
            "{MARKER} … {range} omitted ({} chars{files}): {}\n",
            short(chars),
            recall_lines(recall_id, base_line + first, lines)
        ));
    }
    if out.ends_with('\n') {
        out.pop();
    }
    out
}

/// The one-line stub of an output judged not needed.
pub fn output_stub(label: &str, chars: usize, recall_id: &str, why: &str) -> String {
    format!(
        "{MARKER} Omitted the output of {label} ({} chars): {why}. Full output: {}.",
        short(chars),
        recall_call(recall_id)
    )
}

/// The stub on the prompt of an omitted exchange.
pub fn exchange_stub(prompt: &str, messages: usize, tokens: usize, recall_id: &str) -> String {
    let one_line = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    let head = super::run::clip_head(&one_line, 120);
    let more = if head.len() < one_line.len() {
        "…"
    } else {
        ""
    };
    format!(
        "{MARKER} Omitted an earlier exchange judged unrelated to the current work: \"{head}{more}\" \
         ({messages} messages, ~{} tokens). Full exchange: {}.",
        short(tokens),
        recall_call(recall_id)
    )
}

/// The stub before a result whose images were removed.
pub fn image_stub(
    sizes: &[(Option<u32>, Option<u32>)],
    tokens: u64,
    turns: usize,
    recall_id: &str,
) -> String {
    let n = sizes.len();
    let dims: Vec<String> = sizes
        .iter()
        .map(|s| match s {
            (Some(w), Some(h)) => format!("{w}×{h}"),
            _ => "size unknown".to_owned(),
        })
        .collect();
    let what = if n == 1 {
        "1 image".to_owned()
    } else {
        format!("{n} images")
    };
    format!(
        "{MARKER} Removed {what} from this output ({}; ~{} tokens), {turns} turns old. {} shows it again.",
        dims.join(", "),
        short(usize::try_from(tokens).unwrap_or(usize::MAX)),
        recall_call(recall_id)
    )
}
