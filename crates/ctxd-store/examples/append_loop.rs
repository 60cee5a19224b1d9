//! The crash-safety test's victim: append batches to a file store in a loop until killed.
//!
//! `append_loop <store-path> <seed>` opens `<store-path>` with `synchronous=FULL`, continues the
//! chain of session `crash` from its leaf, and appends batches of 1 to 20 entries, each entry the
//! child of the previous one. After `append` returns (the batch is committed and acknowledged),
//! it prints one line to stdout:
//!
//! ```text
//! ACK <batch-number> <id> <id> ...
//! ```
//!
//! Entry ids are `<tag>.<i>.<n>`: `tag` names the batch attempt, `i` is the entry's place in it
//! and `n` the batch size, so a reader can tell a partial batch from a whole one even for a batch
//! that was committed but never acknowledged. Run by `tests/crash.rs`, which SIGKILLs it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use ctxd_core::model::{ContentBlock, Entry, EntryId, EntryKind, Message, Role, SessionMeta};
use ctxd_store::{Durability, NewEntry, SqliteStore, Store};

/// xorshift64*: enough randomness for batch sizes and text lengths, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("append_loop: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .ok_or("usage: append_loop <store-path> <seed>")?,
    );
    let seed: u64 = args.next().ok_or("missing seed")?.parse()?;
    let max_batches: Option<u64> = args.next().map(|s| s.parse()).transpose()?;
    let mut rng = Rng(seed | 1);

    let store = SqliteStore::open(&path, Durability::Full)?;
    let session = store.open_session("", "crash", &SessionMeta::default())?;
    let mut parent = session.leaf.clone();
    let pid = std::process::id();
    let stdout = std::io::stdout();
    let mut attempt = 0u64;
    loop {
        if max_batches.is_some_and(|m| attempt >= m) {
            return Ok(());
        }
        attempt += 1;
        let n = 1 + rng.below(20);
        let tag = format!("p{pid}-{attempt}");
        let mut batch = Vec::with_capacity(n as usize);
        for i in 0..n {
            let id = EntryId::new(format!("{tag}.{i}.{n}"));
            // 100 B to 4 KB of text; every entry carries `crashword` for the FTS check.
            let filler = "lorem ipsum dolor sit amet ".repeat(4 + rng.below(150) as usize);
            let text = format!("crashword {tag} entry {i} of {n}: {filler}");
            let kind = if i % 3 == 2 {
                EntryKind::Message(Message::new(
                    Role::Assistant,
                    vec![ContentBlock::ToolCall {
                        id: format!("call-{tag}-{i}"),
                        name: "bash".into(),
                        arguments: serde_json::json!({ "command": text }),
                    }],
                ))
            } else {
                EntryKind::Message(Message::text(Role::User, text))
            };
            let entry = Entry {
                id: id.clone(),
                parent: parent.clone(),
                timestamp: None,
                sidechain: false,
                kind,
            };
            let raw = (i % 2 == 0).then(|| format!("raw bytes of {id}").into_bytes());
            batch.push(NewEntry { entry, raw });
            parent = Some(id);
        }
        let batch_no = store.append(session.id, &batch, None)?;
        // Acknowledge only now that the batch is committed; one write per line.
        let ids: Vec<&str> = batch.iter().map(|b| b.entry.id.as_str()).collect();
        let line = format!("ACK {batch_no} {}\n", ids.join(" "));
        let mut out = stdout.lock();
        out.write_all(line.as_bytes())?;
        out.flush()?;
    }
}
