//! Which store a command uses, and opening it.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::parser::ValueSource;
use ctxd_engine::Engine;
use ctxd_store::{Backend, Durability, Location};

/// The engine every command runs, on whichever store `--store` names.
pub type StoreEngine = Engine<dyn Backend>;

/// The `--store` choice: a path or a `postgres://` URL, or the default location.
pub struct StoreChoice {
    given: Option<Location>,
    /// `--store` was given on the command line (not only through `CTXD_STORE`).
    pub explicit: bool,
}

impl StoreChoice {
    /// `--store PATH|URL`, else `CTXD_STORE`, else nothing given (the default store). An empty
    /// value counts as none.
    pub fn new(value: Option<OsString>, matches: &clap::ArgMatches) -> Self {
        let explicit = matches.value_source("store") == Some(ValueSource::CommandLine);
        let given = value.filter(|p| !p.is_empty()).map(|v| match v.to_str() {
            Some(text) => Location::parse(text),
            None => Location::Sqlite(PathBuf::from(v)),
        });
        Self { given, explicit }
    }

    /// A store was given (flag or `CTXD_STORE`).
    pub fn given(&self) -> bool {
        self.given.is_some()
    }

    /// The store: the given one, or `ctxd/ctxd.db` in the user's data directory.
    pub fn location(&self) -> anyhow::Result<Location> {
        match &self.given {
            Some(l) => Ok(l.clone()),
            None => Ok(Location::Sqlite(
                dirs::data_dir()
                    .context("no data directory for the default store: give --store PATH")?
                    .join("ctxd")
                    .join("ctxd.db"),
            )),
        }
    }

    /// The store exists already: a server is always there to ask; a file must exist.
    pub fn exists(&self) -> bool {
        match self.location() {
            Ok(Location::Sqlite(path)) => path.exists(),
            Ok(Location::Postgres(_)) => true,
            Err(_) => false,
        }
    }

    /// The store, which must exist: the commands that only read it never leave a new empty
    /// store behind (`ctxd stats --store typo.db` made one and printed an empty table).
    pub fn open_existing(&self) -> anyhow::Result<StoreEngine> {
        if let Location::Sqlite(path) = self.location()? {
            if !path.exists() {
                let how = if self.given() {
                    "--store takes an existing store's PATH or URL"
                } else {
                    "the default store: `ctxd serve` or `ctxd import` creates it"
                };
                anyhow::bail!("no store at {} ({how})", path.display());
            }
        }
        self.open()
    }

    /// The store, created when it does not exist yet: for the commands that write into it
    /// (`serve`, `import`, notes that write).
    pub fn open(&self) -> anyhow::Result<StoreEngine> {
        let store = ctxd_store::open(&self.location()?, Durability::Full)?;
        Ok(Engine::from_boxed(store))
    }
}

/// A stored session named by its key or its numeric id, in any tenant (the operator's view).
pub fn find_stored(engine: &StoreEngine, name: &str) -> anyhow::Result<ctxd_core::model::Session> {
    let record = find_record(engine, name)?;
    Ok(engine.store().load(record.id)?)
}

/// The record of a stored session named by its key or numeric id, in any tenant: the CLI is
/// the operator's tool on the store file (the gateway's tenants are hashes of credentials).
pub fn find_record(engine: &StoreEngine, name: &str) -> anyhow::Result<ctxd_store::SessionRecord> {
    let store = engine.store();
    let mut found: Vec<ctxd_store::SessionRecord> = Vec::new();
    for tenant in store.tenants()? {
        if let Some(r) = store.find_session(&tenant, name)? {
            found.push(r);
        } else if let Some(r) = name
            .parse::<i64>()
            .ok()
            .map(|id| store.session(&tenant, id))
            .transpose()?
            .flatten()
        {
            found.push(r);
        }
    }
    if found.len() == 1 {
        return found.pop().context("one session");
    }
    match found.as_slice() {
        [] => anyhow::bail!(
            "no session {name:?} in the store (list them with `ctxd sessions --stored`)"
        ),
        many => anyhow::bail!(
            "{name}: {} sessions have this key (in different tenants): use the numeric id ({})",
            many.len(),
            many.iter()
                .map(|r| r.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
