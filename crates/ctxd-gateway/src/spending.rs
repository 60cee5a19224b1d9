//! Budgets at the gateway: before a request goes upstream it reserves its estimated input on
//! the counter of every budget that applies (session, project, tenant, everything; per day,
//! month or ever), refused with the API's own error once a hard budget's counter has reached
//! its limit; when the request ends its reservation gives way to what the provider reported
//! (usage × the model's price). The counters live in the store, so they survive restarts and
//! every gateway on one PostgreSQL database shares them; the reservation is one atomic
//! statement, so racing requests pass a limit by at most one.
//!
//! What the policy means (keys, limits, prices, wording) is `ctxd_core::spend`; this is the
//! adapter between it, the store and the request's lifecycle (`relay::Completion` settles).
//!
//! Limits: a response the client abandons is settled with nothing billed (its reservation is
//! released); the usage of hidden rounds counts through the client's view of the exchange,
//! which sums them.

use std::collections::BTreeMap;

use ctxd_core::model::Usage;
use ctxd_core::spend::{Budget, Counter, PriceTable, Spend, Subject};
use ctxd_store::{Backend, StoreError};

/// The header carrying soft-limit warnings on a response.
pub const WARNING_HEADER: &str = "x-ctxd-budget-warning";

/// The gateway's budgets and prices.
#[derive(Clone, Debug, Default)]
pub struct Spending {
    budgets: Vec<Budget>,
    prices: PriceTable,
}

/// What a request reserved, released when it ends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admission {
    /// (scope key, period key, amount) of each counter reserved on.
    reserved: Vec<(String, String, Spend)>,
    /// Soft limits passed, one line each.
    pub warnings: Vec<String>,
}

/// A request's fate under the budgets.
#[derive(Debug)]
pub enum Verdict {
    Admitted(Admission),
    /// A hard budget's limit is reached: the refusal's message.
    Refused(String),
}

impl Spending {
    pub fn new(budgets: Vec<Budget>, prices: PriceTable) -> Spending {
        Spending { budgets, prices }
    }

    /// The prices dollar budgets use (the dashboard's billed cost too).
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// No budget is configured: requests are neither counted nor checked.
    pub fn is_empty(&self) -> bool {
        self.budgets.is_empty()
    }

    /// What `usage` of `model` costs: every token billed, and dollars at its price (none when
    /// the model has no price: dollar budgets do not see it, said once in the log).
    pub fn cost(&self, model: Option<&str>, usage: &Usage) -> Spend {
        let tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
        let price = model.and_then(|m| self.prices.price(m));
        if price.is_none() {
            unpriced_once(model.unwrap_or(""));
        }
        Spend {
            tokens,
            micro_usd: price.map_or(0, |p| p.micro_usd(usage)),
        }
    }

    /// The counters `subject`'s budgets read at `now_ms`, each with the bound of its hard
    /// budgets (the lowest in each unit; unbounded when only soft ones read it).
    fn counters(&self, subject: &Subject, now_ms: i64) -> BTreeMap<(String, String), Spend> {
        let mut out: BTreeMap<(String, String), Spend> = BTreeMap::new();
        for b in &self.budgets {
            let Some(key) = b.key(subject, now_ms) else {
                continue;
            };
            let bound = out.entry(key).or_insert(Spend {
                tokens: u64::MAX,
                micro_usd: u64::MAX,
            });
            if b.hard {
                let own = b.bound();
                bound.tokens = bound.tokens.min(own.tokens);
                bound.micro_usd = bound.micro_usd.min(own.micro_usd);
            }
        }
        out
    }

    /// Reserve `estimate` (the request's input, before the provider says) on every counter
    /// of `subject`'s budgets, or refuse at the first hard limit reached (releasing what was
    /// reserved). Blocking: store calls.
    pub fn admit(
        &self,
        store: &dyn Backend,
        subject: &Subject,
        estimate: Spend,
        now_ms: i64,
    ) -> Result<Verdict, StoreError> {
        let mut admission = Admission::default();
        let mut seen: BTreeMap<(String, String), Counter> = BTreeMap::new();
        for ((scope, period), bound) in self.counters(subject, now_ms) {
            let (ok, counter) = store.spend_reserve(&scope, &period, estimate, bound)?;
            if !ok {
                let refusal = self
                    .budgets
                    .iter()
                    .filter(|b| b.hard)
                    .find(|b| b.key(subject, now_ms) == Some((scope.clone(), period.clone())))
                    .map(|b| b.refusal(&counter))
                    .unwrap_or_else(|| "ctxd: a budget's limit is reached".to_owned());
                self.release(store, &admission);
                return Ok(Verdict::Refused(refusal));
            }
            admission
                .reserved
                .push((scope.clone(), period.clone(), estimate));
            seen.insert((scope, period), counter);
        }
        for b in &self.budgets {
            let counter = b.key(subject, now_ms).and_then(|k| seen.get(&k));
            if let Some(w) = counter.and_then(|c| b.warning(c)) {
                admission.warnings.push(w);
            }
        }
        Ok(Verdict::Admitted(admission))
    }

    /// The request is over: its reservations give way to `billed`. Blocking: store calls; a
    /// failure is logged (the counter misses this request).
    pub fn settle(&self, store: &dyn Backend, admission: &Admission, billed: Spend) {
        for (scope, period, reserved) in &admission.reserved {
            if let Err(e) = store.spend_settle(scope, period, billed, *reserved) {
                tracing::warn!(error = %e, scope, period, "a budget's counter was not updated");
            }
        }
    }

    /// [`Spending::settle`] on a blocking thread of the gateway's runtime (inline outside
    /// one): the request never waits for its counters.
    pub fn settle_later(app: &std::sync::Arc<crate::Gateway>, admission: Admission, billed: Spend) {
        let app = app.clone();
        let settle = move || app.spending.settle(app.engine.store(), &admission, billed);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(settle)),
            Err(_) => settle(),
        }
    }

    /// Take back what `admission` reserved, billing nothing.
    fn release(&self, store: &dyn Backend, admission: &Admission) {
        self.settle(store, admission, Spend::default());
    }

    /// The estimate of a request's input: its body's bytes at 4 a token, priced as input.
    pub fn estimate(&self, model: Option<&str>, body_bytes: usize) -> Spend {
        let usage = Usage {
            input: (body_bytes / 4) as u64,
            ..Usage::default()
        };
        let price = model.and_then(|m| self.prices.price(m));
        Spend {
            tokens: usage.input,
            micro_usd: price.map_or(0, |p| p.micro_usd(&usage)),
        }
    }
}

/// Where one counter of one budget stands, for the dashboard.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BudgetState {
    /// `tenant/day`, ...
    pub budget: String,
    /// Whose counter: the project, the session's key; empty for a tenant or everything.
    pub whose: String,
    pub limit: String,
    pub used: String,
    /// The share of the limit used.
    pub share: f64,
    /// `ok`, `warning` (past the soft limit) or `reached` (a hard limit refuses requests).
    pub state: &'static str,
}

/// How many counters the dashboard shows at most (the fullest first).
const SHOWN_STATES: usize = 50;

impl Spending {
    /// The counters `subjects`' budgets read now, the fullest first: every budget of a tenant
    /// or of everything, and the projects and sessions that spent anything.
    pub fn states(
        &self,
        store: &dyn Backend,
        subjects: &[Subject],
        now_ms: i64,
    ) -> Result<Vec<BudgetState>, StoreError> {
        use ctxd_core::spend::Scope;
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for b in &self.budgets {
            for subject in subjects {
                let Some(key) = b.key(subject, now_ms) else {
                    continue;
                };
                if !seen.insert((b.name(), b.limit_text(), key.clone())) {
                    continue;
                }
                let counter = store.spend(&key.0, &key.1)?;
                let whose = match b.scope {
                    Scope::Session => subject.session.to_owned(),
                    Scope::Project => subject.project.unwrap_or_default().to_owned(),
                    Scope::Tenant | Scope::All => String::new(),
                };
                let fine_grained = matches!(b.scope, Scope::Session | Scope::Project);
                if fine_grained && counter.used == Spend::default() {
                    continue;
                }
                let share = b.share(&counter);
                let state = if b.hard && share >= 1.0 {
                    "reached"
                } else if share >= b.warn_at {
                    "warning"
                } else {
                    "ok"
                };
                out.push(BudgetState {
                    budget: b.name(),
                    whose,
                    limit: b.limit_text(),
                    used: b.used_text(&counter),
                    share,
                    state,
                });
            }
        }
        out.sort_by(|a, b| b.share.total_cmp(&a.share));
        out.truncate(SHOWN_STATES);
        Ok(out)
    }
}

/// Log once per model that dollar budgets cannot price it.
fn unpriced_once(model: &str) {
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() < 1_000 && seen.insert(model.to_owned()) {
        tracing::warn!(
            model,
            "no price for this model: budgets in dollars do not count it (add it under [prices])"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::spend::parse_budget;
    use ctxd_store::{SqliteStore, Store};

    const NOW: i64 = 1_796_464_800_000;

    fn subject() -> Subject<'static> {
        Subject {
            tenant: "t",
            project: Some("/repo"),
            session: "s",
        }
    }

    #[test]
    fn a_request_is_admitted_warned_and_refused_as_the_counters_fill() {
        let store = SqliteStore::open_in_memory().unwrap();
        let spending = Spending::new(
            vec![
                parse_budget("session/total=1000").unwrap(),
                parse_budget("tenant/day=$1,soft").unwrap(),
            ],
            PriceTable::default(),
        );
        let estimate = Spend {
            tokens: 300,
            micro_usd: 0,
        };
        let Verdict::Admitted(a) = spending.admit(&store, &subject(), estimate, NOW).unwrap()
        else {
            panic!("refused at zero")
        };
        assert!(a.warnings.is_empty());
        // The provider billed 850 tokens: past the session's soft limit (80%).
        spending.settle(
            &store,
            &a,
            Spend {
                tokens: 850,
                micro_usd: 900_000,
            },
        );
        let Verdict::Admitted(b) = spending.admit(&store, &subject(), estimate, NOW).unwrap()
        else {
            panic!("850 < 1000: admitted")
        };
        assert_eq!(
            b.warnings,
            [
                "session/total budget: 850 tokens of 1,000 tokens used (85%)",
                "tenant/day budget: $0.90 of $1.00 used (90%)"
            ]
        );
        // Reserved 300 on top of 850: the next one is refused, and reserves nothing.
        let Verdict::Refused(why) = spending.admit(&store, &subject(), estimate, NOW).unwrap()
        else {
            panic!("850 + 300 reserved >= 1000: refused")
        };
        assert!(
            why.contains("session/total budget of 1,000 tokens"),
            "{why}"
        );
        let tenant = store.spend("tenant:t", "day:2026-12-05").unwrap();
        assert_eq!(tenant.reserved.tokens, 300, "the refusal released its own");
        // The soft dollar budget never refuses; another session is its own counter.
        let other = Subject {
            session: "s2",
            ..subject()
        };
        assert!(matches!(
            spending.admit(&store, &other, estimate, NOW).unwrap(),
            Verdict::Admitted(_)
        ));
    }

    #[test]
    fn usage_is_priced_by_the_model() {
        let spending = Spending::default();
        let usage = Usage {
            input: 1_000_000,
            output: 0,
            cache_read: 0,
            cache_write: 0,
        };
        assert_eq!(
            spending.cost(Some("claude-sonnet-4-5"), &usage),
            Spend {
                tokens: 1_000_000,
                micro_usd: 3_000_000
            }
        );
        assert_eq!(spending.cost(Some("unknown-model"), &usage).micro_usd, 0);
        assert_eq!(spending.estimate(Some("gpt-4o"), 4_000).tokens, 1_000);
    }
}
