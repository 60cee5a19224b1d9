//! `ctxd stats [SESSION] [--by project|agent|model|tenant|day|upstream] [--json]`: the tokens ctxd's
//! mechanisms saved, read back from the request records (`ctxd.request`) in the store: every
//! session with a sum, one session request by request, or every request summed by one
//! attribute. The same views as the gateway's `GET /stats` (`ctxd_gateway::stats`),
//! over every tenant (the CLI is the operator's tool on the store file).

use std::io::Write;

use clap::{Args, ValueEnum};
use ctxd_core::savings::{ByMechanism, Mechanism, Totals};

use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// One session (store id or key, as `ctxd sessions --stored` lists it): request by request.
    pub session: Option<String>,
    /// Sum every request by one attribute instead of listing sessions: the project (the
    /// working directory the client stated), the agent, the model, the tenant or the UTC day.
    #[arg(long, value_enum, conflicts_with = "session")]
    pub by: Option<By>,
    /// Print JSON (the shape of the gateway's `GET /stats` and `GET /stats/{id}`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum By {
    Project,
    Agent,
    Model,
    Tenant,
    Day,
    /// The route each request went to (`--route`, `[[routes]]`).
    Upstream,
}

impl From<By> for ctxd_gateway::stats::GroupBy {
    fn from(by: By) -> Self {
        match by {
            By::Project => Self::Project,
            By::Agent => Self::Agent,
            By::Model => Self::Model,
            By::Tenant => Self::Tenant,
            By::Day => Self::Day,
            By::Upstream => Self::Upstream,
        }
    }
}

pub fn run(args: &StatsArgs, store: &StoreChoice) -> anyhow::Result<()> {
    let engine = store.open_existing()?;
    let mut out = std::io::stdout().lock();
    if let Some(name) = &args.session {
        let record = crate::store::find_record(&engine, name)?;
        let session = engine.store().load(record.id)?;
        let detail = ctxd_gateway::stats::detail(&record, &session, true);
        if args.json {
            serde_json::to_writer(&mut out, &detail)?;
            writeln!(out)?;
            return Ok(());
        }
        writeln!(
            out,
            "session {} ({})",
            detail.session.id, detail.session.key
        )?;
        let rows: Vec<Row> = detail
            .requests
            .iter()
            .enumerate()
            .map(|(i, r)| Row {
                first: (i + 1).to_string(),
                sent: r.sent,
                whole: r.whole,
                saved: r.saved,
                by: r.saved_by,
                usd: r.cost_saved_usd,
                last: r.timestamp.clone().unwrap_or_default(),
            })
            .collect();
        return table(
            &mut out,
            ("REQUEST", "TIME"),
            &rows,
            &detail.session.totals,
            0,
        );
    }
    // Newest first, as `ctxd sessions --stored` lists them.
    let mut records = Vec::new();
    for tenant in engine.store().tenants()? {
        records.extend(engine.store().list_sessions(&tenant)?);
    }
    records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
    let mut loaded = Vec::with_capacity(records.len());
    for record in &records {
        loaded.push(engine.store().load(record.id)?);
    }
    if let Some(by) = args.by {
        let grouped = ctxd_gateway::stats::grouped(by.into(), records.iter().zip(&loaded));
        return write_grouped(&mut out, &grouped, args.json);
    }
    let sessions = records
        .iter()
        .zip(&loaded)
        .map(|(record, session)| ctxd_gateway::stats::session_stats(record, session, true))
        .collect();
    let overview = ctxd_gateway::stats::overview(sessions);
    if args.json {
        serde_json::to_writer(&mut out, &overview)?;
        writeln!(out)?;
        return Ok(());
    }
    // A session without request records (an import: the gateway never planned its requests)
    // has nothing to show but zeros; they are counted below the table instead.
    let rows: Vec<Row> = overview
        .sessions
        .iter()
        .filter(|s| s.totals.requests > 0)
        .map(|s| {
            let t = &s.totals;
            Row {
                first: s.id.to_string(),
                sent: t.sent,
                whole: t.whole,
                saved: t.saved,
                by: t.saved_by,
                usd: (t.requests > t.unpriced).then_some(t.cost_saved_usd),
                last: s.key.clone(),
            }
        })
        .collect();
    let unrecorded = overview.sessions.len() - rows.len();
    table(&mut out, ("ID", "KEY"), &rows, &overview.total, unrecorded)
}

/// The groups of `--by`, as JSON or a table (requests first, the group last).
fn write_grouped(
    out: &mut impl Write,
    grouped: &ctxd_gateway::stats::Grouped,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, grouped)?;
        writeln!(out)?;
        return Ok(());
    }
    let rows: Vec<Row> = grouped
        .groups
        .iter()
        .map(|g| {
            let t = &g.totals;
            Row {
                first: t.requests.to_string(),
                sent: t.sent,
                whole: t.whole,
                saved: t.saved,
                by: t.saved_by,
                usd: (t.requests > t.unpriced).then_some(t.cost_saved_usd),
                last: g.key.clone(),
            }
        })
        .collect();
    let name = grouped.by.to_uppercase();
    table(out, ("REQS", &name), &rows, &grouped.total, 0)
}

/// One line of the table: the id (or request number) first and the key (or time) last,
/// whole, so that no key is cut.
struct Row {
    first: String,
    sent: u64,
    whole: u64,
    saved: i64,
    by: ByMechanism,
    usd: Option<f64>,
    last: String,
}

/// The rows, the total and how the figures were estimated. Only the mechanisms that saved or
/// spent something get a column (all of them made lines ~160 characters wide of zeros); the
/// others are named under the table.
fn table(
    out: &mut impl Write,
    (first, last): (&str, &str),
    rows: &[Row],
    totals: &Totals,
    unrecorded: usize,
) -> anyhow::Result<()> {
    let shown: Vec<Mechanism> = Mechanism::EXISTING
        .into_iter()
        .filter(|m| totals.saved_by.get(*m) != 0 || rows.iter().any(|r| r.by.get(*m) != 0))
        .collect();
    let width = |m: &Mechanism| m.name().len().max(8);
    let mut line = format!("{first:>7} {:>10} {:>10} {:>10}", "SENT", "WHOLE", "SAVED");
    for m in &shown {
        line.push_str(&format!(" {:>w$}", m.name(), w = width(m)));
    }
    line.push_str(&format!(" {:>10}  {last}", "USD SAVED"));
    writeln!(out, "{line}")?;
    let total = Row {
        first: "total".to_owned(),
        sent: totals.sent,
        whole: totals.whole,
        saved: totals.saved,
        by: totals.saved_by,
        usd: (totals.requests > totals.unpriced).then_some(totals.cost_saved_usd),
        last: format!("{} requests", totals.requests),
    };
    for r in rows.iter().chain(std::iter::once(&total)) {
        let mut line = format!(
            "{:>7} {:>10} {:>10} {:>10}",
            r.first, r.sent, r.whole, r.saved
        );
        for m in &shown {
            line.push_str(&format!(" {:>w$}", r.by.get(*m), w = width(m)));
        }
        match r.usd {
            Some(u) => line.push_str(&format!(" {u:>10.4}")),
            None => line.push_str(&format!(" {:>10}", "-")),
        }
        line.push_str(&format!("  {}", r.last));
        writeln!(out, "{}", line.trim_end())?;
    }
    let idle: Vec<&str> = Mechanism::EXISTING
        .into_iter()
        .filter(|m| !shown.contains(m))
        .map(Mechanism::name)
        .collect();
    if !idle.is_empty() {
        writeln!(out, "nothing saved or spent by: {}", idle.join(", "))?;
    }
    if unrecorded > 0 {
        writeln!(
            out,
            "{unrecorded} session(s) without request records (imported, not through the \
             gateway) not listed"
        )?;
    }
    writeln!(
        out,
        "tokens: {}; cost: {}",
        ctxd_gateway::stats::ESTIMATE,
        ctxd_gateway::stats::COST
    )?;
    Ok(())
}
