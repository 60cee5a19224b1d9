//! `ctxd tenant-key NAME`: a fresh ctxd key for an operator-named tenant, and the config line
//! that names it (the config keeps only the key's hash).

use clap::Args;
use ctxd_gateway::tenancy;

#[derive(Debug, Args)]
pub struct TenantKeyArgs {
    /// The tenant's name (a person or a team): 1 to 64 letters, digits, '-', '_', '.' or '@'.
    pub name: String,
}

pub fn run(args: &TenantKeyArgs) -> anyhow::Result<()> {
    tenancy::check_name(&args.name).map_err(anyhow::Error::msg)?;
    let key = tenancy::new_key().map_err(anyhow::Error::msg)?;
    println!("{key}");
    eprintln!(
        "ctxd: the key above is {name}'s: its clients send it as `x-ctxd-key: <key>` (Claude \
         Code: ANTHROPIC_CUSTOM_HEADERS; an SDK: its default headers). ctxd keeps only its \
         hash: add this line under [tenants] in the gateway's config (--config) and restart \
         it:\n\n{name} = \"{hash}\"",
        name = args.name,
        hash = tenancy::key_hash_value(&key),
    );
    Ok(())
}
