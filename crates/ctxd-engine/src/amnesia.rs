//! Meta-amnesia on a request ([`ctxd_core::mechanisms::amnesia`]): the round the request ends in is
//! judged by the configured classifier when its results first arrive, and its record (and,
//! when every result is a drop, the edits omitting the round) appended after the request's
//! last element, before the request is projected: the model never sees a dropped round, and
//! every later request shows the same.
//!
//! Three steps, so that the token counter (not `Send`) is never held across an await:
//! [`prepare`] (sync: the round, what is retained unasked, the questions), [`judge`] (async:
//! the classifier, within its time budget; a failure or a late answer retains), [`commit`]
//! (sync: the record and edits as entries for the request's batch).

use std::time::Duration;

use ctxd_core::distill::Missing;
use ctxd_core::mechanisms::amnesia::{self, Config, Prepared, Record};
use ctxd_core::model::EntryKind;
use ctxd_core::tokens::TokenCounter;
use ctxd_store::NewEntry;

use crate::distill::{ask, Classifier, Limits};
use crate::turn::{hash, SessionLog};

/// The classifier's time budget per request when its settings name none: a read's judgment
/// holds its request, so it is short (past it the round is retained).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(10);

/// A round judged: the answers, and whether the budget ran out.
#[derive(Debug)]
pub struct Judged {
    pub prepared: Prepared,
    pub answers: Vec<Result<ctxd_core::distill::Answer, Missing>>,
}

/// Step 1: the round of the elements at `new` (positions of the request's new elements).
pub fn prepare(
    log: &SessionLog,
    new: &[usize],
    agent: Option<&str>,
    cfg: &Config,
    counter: &dyn TokenCounter,
) -> Option<Prepared> {
    if new.is_empty() {
        return None;
    }
    amnesia::prepare(&log.session, &log.branch(), new, agent, cfg, counter)
}

/// Step 2: the classifier's answers, within `budget` (none asked when the round is retained
/// unasked).
pub async fn judge<C: Classifier>(classifier: &C, prepared: Prepared, budget: Duration) -> Judged {
    let answers = match &prepared.plan {
        Some(plan) => {
            let limits = Limits {
                budget,
                concurrency: 4,
            };
            ask(classifier, plan, &limits).await.answers
        }
        None => Vec::new(),
    };
    Judged { prepared, answers }
}

/// Step 3: the record and the pruning edits appended after the log's leaf (the request's last
/// element), returned for the request's batch, with the record.
pub fn commit(
    log: &mut SessionLog,
    judged: Judged,
    classifier: &str,
    now: &str,
) -> (Record, Vec<NewEntry>) {
    let (record, drafts) = amnesia::decide(judged.prepared, &judged.answers, classifier);
    let mut parent = log.leaf();
    let mut out = Vec::new();
    for kind in drafts {
        let tag = match &kind {
            EntryKind::ContextEdit { target, .. } => format!("amnesia {target}"),
            _ => format!(
                "amnesia record {}",
                record.judgments.first().map_or("", |j| j.call_id.as_str())
            ),
        };
        let (pos, entry) = log.append_under(
            parent,
            "amnesia",
            &hash::text(&tag),
            kind,
            Some(now.to_owned()),
        );
        parent = Some(pos);
        out.push(NewEntry::new(entry));
    }
    (record, out)
}
