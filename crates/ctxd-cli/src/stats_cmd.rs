//! `ctxd stats [SESSION] [--json]`: the tokens ctxd's mechanisms saved, read back from the
//! request records (`ctxd.request`) in the store: every session with a sum, or one session
//! request by request. The same views as the gateway's `GET /stats` (`ctxd_gateway::stats`),
//! over every tenant (the CLI is the operator's tool on the store file).

use std::io::Write;

use clap::Args;
use ctxd_core::savings::{ByMechanism, Mechanism, Totals};

use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// One session (store id or key, as `ctxd sessions --stored` lists it): request by request.
    pub session: Option<String>,
    /// Print JSON (the shape of the gateway's `GET /stats` and `GET /stats/{id}`).
    #[arg(long)]
    pub json: bool,
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
        writeln!(out, "{}", header("request"))?;
        for (i, r) in detail.requests.iter().enumerate() {
            let label = format!("{} {}", i + 1, r.timestamp.as_deref().unwrap_or(""));
            writeln!(
                out,
                "{}",
                row(
                    &label,
                    r.sent,
                    r.whole,
                    r.saved,
                    &r.saved_by,
                    r.cost_saved_usd
                )
            )?;
        }
        return footer(&mut out, &detail.session.totals);
    }
    let mut rows = Vec::new();
    for tenant in engine.store().tenants()? {
        for record in engine.store().list_sessions(&tenant)? {
            let session = engine.store().load(record.id)?;
            rows.push(ctxd_gateway::stats::session_stats(&record, &session, true));
        }
    }
    let overview = ctxd_gateway::stats::overview(rows);
    if args.json {
        serde_json::to_writer(&mut out, &overview)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{}", header("session"))?;
    for s in &overview.sessions {
        let t = &s.totals;
        let label = format!("{} {}", s.id, s.key);
        let usd = (t.requests > t.unpriced).then_some(t.cost_saved_usd);
        writeln!(
            out,
            "{}",
            row(&label, t.sent, t.whole, t.saved, &t.saved_by, usd)
        )?;
    }
    footer(&mut out, &overview.total)
}

/// The totals row and how the figures were estimated.
fn footer(out: &mut impl Write, totals: &Totals) -> anyhow::Result<()> {
    writeln!(out, "{}", total_row(totals))?;
    writeln!(
        out,
        "tokens: {}; cost: {}",
        ctxd_gateway::stats::ESTIMATE,
        ctxd_gateway::stats::COST
    )?;
    Ok(())
}

fn header(first: &str) -> String {
    let mut s = format!("{first:<32} {:>10} {:>10} {:>10}", "sent", "whole", "saved");
    for m in Mechanism::EXISTING {
        s.push_str(&format!(" {:>12}", m.name()));
    }
    s.push_str(&format!(" {:>10}", "usd saved"));
    s
}

fn row(
    label: &str,
    sent: u64,
    whole: u64,
    saved: i64,
    by: &ByMechanism,
    usd: Option<f64>,
) -> String {
    let label: String = label.chars().take(32).collect();
    let mut s = format!("{label:<32} {sent:>10} {whole:>10} {saved:>10}");
    for m in Mechanism::EXISTING {
        s.push_str(&format!(" {:>12}", by.get(m)));
    }
    match usd {
        Some(u) => s.push_str(&format!(" {u:>10.4}")),
        None => s.push_str(&format!(" {:>10}", "-")),
    }
    s
}

fn total_row(t: &Totals) -> String {
    let label = format!("total ({} requests)", t.requests);
    let usd = (t.requests > t.unpriced).then_some(t.cost_saved_usd);
    row(&label, t.sent, t.whole, t.saved, &t.saved_by, usd)
}
