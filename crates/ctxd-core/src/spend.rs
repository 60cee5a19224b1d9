//! Budgets: what a request costs (the provider's reported usage × a price table the user can
//! extend) and how a counter of a scope and period compares with its limits. Pure: the gateway
//! keeps the counters in the store and asks here what they mean.

use serde::Deserialize;

use crate::model::Usage;

/// US dollars per million tokens, by kind of token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input read (default: a tenth of `input`).
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Input written to the cache (default: `input`).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    const fn of(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price {
            input,
            output,
            cache_read: Some(cache_read),
            cache_write: Some(cache_write),
        }
    }

    /// What `usage` costs, in millionths of a dollar (rounded up: a budget never undercounts).
    pub fn micro_usd(&self, usage: &Usage) -> u64 {
        let per_token = |tokens: u64, usd_per_mtok: f64| tokens as f64 * usd_per_mtok;
        let total = per_token(usage.input, self.input)
            + per_token(usage.output, self.output)
            + per_token(
                usage.cache_read,
                self.cache_read.unwrap_or(self.input / 10.0),
            )
            + per_token(usage.cache_write, self.cache_write.unwrap_or(self.input));
        total.max(0.0).ceil() as u64
    }
}

/// List prices published by Anthropic and OpenAI in 2025, by model-name prefix (the first
/// match wins, so longer prefixes come first). Anthropic bills cache reads at a tenth and
/// 5-minute cache writes at 1.25× of input; OpenAI bills cached input at a tenth (GPT-5), a
/// quarter (GPT-4.1) or half (GPT-4o, o-series) and no cache writes.
const LIST_PRICES: &[(&str, Price)] = &[
    ("claude-opus-4-5", Price::of(5.0, 25.0, 0.5, 6.25)),
    ("claude-opus-4", Price::of(15.0, 75.0, 1.5, 18.75)),
    ("claude-3-opus", Price::of(15.0, 75.0, 1.5, 18.75)),
    ("claude-sonnet-4", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-3-7-sonnet", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-3-5-sonnet", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-haiku-4", Price::of(1.0, 5.0, 0.1, 1.25)),
    ("claude-3-5-haiku", Price::of(0.8, 4.0, 0.08, 1.0)),
    ("gpt-5-nano", Price::of(0.05, 0.4, 0.005, 0.05)),
    ("gpt-5-mini", Price::of(0.25, 2.0, 0.025, 0.25)),
    ("gpt-5", Price::of(1.25, 10.0, 0.125, 1.25)),
    ("gpt-4.1-nano", Price::of(0.1, 0.4, 0.025, 0.1)),
    ("gpt-4.1-mini", Price::of(0.4, 1.6, 0.1, 0.4)),
    ("gpt-4.1", Price::of(2.0, 8.0, 0.5, 2.0)),
    ("gpt-4o-mini", Price::of(0.15, 0.6, 0.075, 0.15)),
    ("gpt-4o", Price::of(2.5, 10.0, 1.25, 2.5)),
    ("o4-mini", Price::of(1.1, 4.4, 0.275, 1.1)),
    ("o3-mini", Price::of(1.1, 4.4, 0.55, 1.1)),
    ("o3", Price::of(2.0, 8.0, 0.5, 2.0)),
];

/// The prices budgets in dollars use: the user's own entries (longest prefix first), then the
/// list prices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable {
    own: Vec<(String, Price)>,
}

impl PriceTable {
    /// The user's prices by model-name prefix (lowercase).
    pub fn new(own: impl IntoIterator<Item = (String, Price)>) -> PriceTable {
        let mut own: Vec<_> = own
            .into_iter()
            .map(|(p, price)| (p.to_ascii_lowercase(), price))
            .collect();
        own.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        PriceTable { own }
    }

    /// The price of `model` (a provider prefix such as `openai/` is ignored).
    pub fn price(&self, model: &str) -> Option<Price> {
        let m = model.to_ascii_lowercase();
        let m = m.rsplit('/').next().unwrap_or(&m);
        self.own
            .iter()
            .map(|(p, price)| (p.as_str(), *price))
            .chain(LIST_PRICES.iter().map(|(p, price)| (*p, *price)))
            .find(|(prefix, _)| m.starts_with(prefix))
            .map(|(_, price)| price)
    }
}

/// What a budget is counted over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Each session apart.
    Session,
    /// Each project (the working directory a session began in) of each tenant.
    Project,
    /// Each tenant.
    Tenant,
    /// Everything the gateway forwards.
    All,
}

/// When a budget's count starts over (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Month,
    /// Never: the whole life of the scope.
    Total,
}

/// A budget's limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    Tokens(u64),
    /// Millionths of a dollar.
    MicroUsd(u64),
}

/// One budget: a limit on a scope's spending per period.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub scope: Scope,
    pub period: Period,
    pub limit: Limit,
    /// The share of the limit past which responses carry a warning (the soft limit).
    pub warn_at: f64,
    /// Refuse requests once the limit is reached (`false`: warn only).
    pub hard: bool,
}

/// Who a request is, for the scopes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject<'a> {
    pub tenant: &'a str,
    pub project: Option<&'a str>,
    pub session: &'a str,
}

/// Tokens and dollars together (one counter holds both, so budgets in either unit on one
/// scope and period share it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spend {
    pub tokens: u64,
    pub micro_usd: u64,
}

/// A counter: what responses were billed, and what requests in flight have reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub used: Spend,
    pub reserved: Spend,
}

impl Budget {
    /// The counter this budget reads for `subject` at `now_ms`: (scope key, period key).
    /// `None`: the scope does not apply (a project budget for a request with no project).
    pub fn key(&self, subject: &Subject, now_ms: i64) -> Option<(String, String)> {
        let scope = match self.scope {
            Scope::Session => format!("session:{}\u{1f}{}", subject.tenant, subject.session),
            Scope::Project => format!("project:{}\u{1f}{}", subject.tenant, subject.project?),
            Scope::Tenant => format!("tenant:{}", subject.tenant),
            Scope::All => "all".to_owned(),
        };
        let day = crate::windows::iso8601(now_ms);
        let period = match self.period {
            Period::Day => format!("day:{}", day.get(..10)?),
            Period::Month => format!("month:{}", day.get(..7)?),
            Period::Total => "total".to_owned(),
        };
        Some((scope, period))
    }

    /// The limit as a counter's bound: what used + reserved must stay below for a request to
    /// be admitted (the other unit unbounded).
    pub fn bound(&self) -> Spend {
        match self.limit {
            Limit::Tokens(t) => Spend {
                tokens: t,
                micro_usd: u64::MAX,
            },
            Limit::MicroUsd(u) => Spend {
                tokens: u64::MAX,
                micro_usd: u,
            },
        }
    }

    /// The share of the limit `counter` has used (reserved amounts are not spent yet).
    pub fn share(&self, counter: &Counter) -> f64 {
        let (used, limit) = match self.limit {
            Limit::Tokens(t) => (counter.used.tokens, t),
            Limit::MicroUsd(u) => (counter.used.micro_usd, u),
        };
        if limit == 0 {
            return f64::INFINITY;
        }
        used as f64 / limit as f64
    }

    /// `tenant/day`, `project/month`... as the messages and headers name it.
    pub fn name(&self) -> String {
        let scope = match self.scope {
            Scope::Session => "session",
            Scope::Project => "project",
            Scope::Tenant => "tenant",
            Scope::All => "all",
        };
        let period = match self.period {
            Period::Day => "day",
            Period::Month => "month",
            Period::Total => "total",
        };
        format!("{scope}/{period}")
    }

    /// The limit as people write it: `$5.00`, `2,000,000 tokens`.
    pub fn limit_text(&self) -> String {
        match self.limit {
            Limit::Tokens(t) => format!("{} tokens", crate::text::thousands(t)),
            Limit::MicroUsd(u) => format!("${:.2}", u as f64 / 1e6),
        }
    }

    /// What was used against this limit, in its unit.
    pub fn used_text(&self, counter: &Counter) -> String {
        match self.limit {
            Limit::Tokens(_) => format!("{} tokens", crate::text::thousands(counter.used.tokens)),
            Limit::MicroUsd(_) => format!("${:.2}", counter.used.micro_usd as f64 / 1e6),
        }
    }

    /// The soft limit's warning, when `counter` is past it.
    pub fn warning(&self, counter: &Counter) -> Option<String> {
        let share = self.share(counter);
        (share >= self.warn_at).then(|| {
            format!(
                "{} budget: {} of {} used ({:.0}%)",
                self.name(),
                self.used_text(counter),
                self.limit_text(),
                (share * 100.0).min(999.0)
            )
        })
    }

    /// Why a request is refused: the limit, its period, and how to raise it.
    pub fn refusal(&self, counter: &Counter) -> String {
        let when = match self.period {
            Period::Day => "it starts over at midnight UTC",
            Period::Month => "it starts over on the 1st of the month (UTC)",
            Period::Total => "it does not start over",
        };
        format!(
            "ctxd: the {} budget of {} is reached ({} used, with requests in flight); {when}. \
             To raise it, change the `[[budgets]]` entry with scope = \"{}\" and period = \"{}\" \
             in the gateway's config (or its --budget flag) and restart the gateway.",
            self.name(),
            self.limit_text(),
            self.used_text(counter),
            self.name().split('/').next().unwrap_or(""),
            self.name().split('/').nth(1).unwrap_or(""),
        )
    }
}

/// A `--budget` value: `SCOPE/PERIOD=LIMIT[,warn=SHARE][,soft]`, the limit `$5`, `5usd` or a
/// number of tokens (`2000000`, `2_000_000`, `2m`, `500k`).
pub fn parse_budget(spec: &str) -> Result<Budget, String> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| {
        format!("budget {spec:?}: expected SCOPE/PERIOD=LIMIT, e.g. tenant/day=$5")
    })?;
    let (scope, period) = name
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("budget {spec:?}: expected SCOPE/PERIOD before '='"))?;
    let scope = match scope.trim() {
        "session" => Scope::Session,
        "project" => Scope::Project,
        "tenant" => Scope::Tenant,
        "all" => Scope::All,
        s => {
            return Err(format!(
                "budget scope {s:?}: session, project, tenant or all"
            ))
        }
    };
    let period = parse_period(period.trim())?;
    let mut parts = rest.split(',');
    let limit = parse_limit(parts.next().unwrap_or("").trim())?;
    let mut budget = Budget {
        scope,
        period,
        limit,
        warn_at: DEFAULT_WARN_AT,
        hard: true,
    };
    for part in parts {
        match part.trim() {
            "soft" => budget.hard = false,
            p => match p.strip_prefix("warn=").map(str::parse::<f64>) {
                Some(Ok(w)) if (0.0..=1.0).contains(&w) => budget.warn_at = w,
                _ => return Err(format!("budget {spec:?}: {p:?} is not warn=0..1 or soft")),
            },
        }
    }
    Ok(budget)
}

/// The soft limit when none is given: a warning from 80% on.
pub const DEFAULT_WARN_AT: f64 = 0.8;

pub fn parse_period(s: &str) -> Result<Period, String> {
    match s {
        "day" => Ok(Period::Day),
        "month" => Ok(Period::Month),
        "total" => Ok(Period::Total),
        p => Err(format!("budget period {p:?}: day, month or total")),
    }
}

/// `$5`, `5usd`, `0.5$` (dollars), or tokens: `2000000`, `2_000_000`, `2m`, `500k`.
pub fn parse_limit(s: &str) -> Result<Limit, String> {
    let s = s.trim().replace('_', "");
    let dollars = s
        .strip_prefix('$')
        .or_else(|| s.strip_suffix('$'))
        .or_else(|| s.strip_suffix("usd"));
    if let Some(d) = dollars {
        let usd: f64 = d
            .trim()
            .parse()
            .map_err(|_| format!("budget limit {s:?}: not a dollar amount"))?;
        if !(usd.is_finite() && usd >= 0.0) {
            return Err(format!("budget limit {s:?}: not a dollar amount"));
        }
        return Ok(Limit::MicroUsd((usd * 1e6).round() as u64));
    }
    let (digits, scale) = match s.to_ascii_lowercase() {
        t if t.ends_with('k') => (t[..t.len() - 1].to_owned(), 1_000),
        t if t.ends_with('m') => (t[..t.len() - 1].to_owned(), 1_000_000),
        t => (t.trim_end_matches("tokens").trim().to_owned(), 1),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("budget limit {s:?}: `$5` or a number of tokens (`2m`)"))?;
    Ok(Limit::Tokens(n.saturating_mul(scale)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    #[test]
    fn a_request_costs_its_usage_at_the_models_price() {
        let table = PriceTable::default();
        let sonnet = table.price("claude-sonnet-4-5-20250929").unwrap();
        // 1M input at $3, 100k output at $15, 1M cache reads at $0.30, 100k writes at $3.75.
        let cost = sonnet.micro_usd(&usage(1_000_000, 100_000, 1_000_000, 100_000));
        assert_eq!(cost, 3_000_000 + 1_500_000 + 300_000 + 375_000);
        assert!(table.price("llama-3").is_none());
        assert!(table.price("openai/gpt-4o-mini").is_some());
        // The user's entries win, the longest prefix first; unset cache prices follow input.
        let own = PriceTable::new([
            (
                "claude-sonnet".to_owned(),
                Price {
                    input: 1.0,
                    output: 2.0,
                    cache_read: None,
                    cache_write: None,
                },
            ),
            (
                "llama".to_owned(),
                Price {
                    input: 0.2,
                    output: 0.2,
                    cache_read: None,
                    cache_write: None,
                },
            ),
        ]);
        let p = own.price("claude-sonnet-4-5").unwrap();
        assert_eq!(p.input, 1.0);
        assert_eq!(
            p.micro_usd(&usage(0, 0, 1_000_000, 1_000_000)),
            100_000 + 1_000_000
        );
        assert!(own.price("llama-3-70b").is_some());
    }

    #[test]
    fn budgets_parse_from_flags() {
        let b = parse_budget("tenant/day=$5").unwrap();
        assert_eq!(
            (b.scope, b.period, b.limit),
            (Scope::Tenant, Period::Day, Limit::MicroUsd(5_000_000))
        );
        assert!(b.hard);
        let b = parse_budget("session/total=2m,warn=0.5,soft").unwrap();
        assert_eq!(b.limit, Limit::Tokens(2_000_000));
        assert_eq!((b.warn_at, b.hard), (0.5, false));
        assert_eq!(parse_limit("2_500").unwrap(), Limit::Tokens(2_500));
        assert_eq!(parse_limit("0.25usd").unwrap(), Limit::MicroUsd(250_000));
        for bad in [
            "tenant=5",
            "who/day=5",
            "tenant/week=5",
            "tenant/day=lots",
            "tenant/day=5,warn=2",
        ] {
            assert!(parse_budget(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counters_are_keyed_by_scope_and_period_and_judged_against_the_limit() {
        let subject = Subject {
            tenant: "t",
            project: Some("/repo"),
            session: "s1",
        };
        // 2026-12-05T10:00:00Z
        let now = 1_796_464_800_000;
        let b = parse_budget("project/month=1000").unwrap();
        assert_eq!(
            b.key(&subject, now),
            Some((
                "project:t\u{1f}/repo".to_owned(),
                "month:2026-12".to_owned()
            ))
        );
        let day = parse_budget("all/day=1000").unwrap();
        assert_eq!(day.key(&subject, now).unwrap().1, "day:2026-12-05");
        let none = Subject {
            project: None,
            ..subject.clone()
        };
        assert_eq!(b.key(&none, now), None);
        let counter = |tokens| Counter {
            used: Spend {
                tokens,
                micro_usd: 0,
            },
            ..Counter::default()
        };
        assert_eq!(b.warning(&counter(700)), None);
        let warn = b.warning(&counter(850)).unwrap();
        assert_eq!(
            warn,
            "project/month budget: 850 tokens of 1,000 tokens used (85%)"
        );
        let refusal = b.refusal(&counter(1_000));
        assert!(
            refusal.contains("project/month budget of 1,000 tokens is reached"),
            "{refusal}"
        );
        assert!(
            refusal.contains("1st of the month") && refusal.contains("--budget"),
            "{refusal}"
        );
        assert_eq!(
            b.bound(),
            Spend {
                tokens: 1_000,
                micro_usd: u64::MAX
            }
        );
    }
}
