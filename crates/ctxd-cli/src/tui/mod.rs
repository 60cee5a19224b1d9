//! The interactive report screen. Placeholder: prints text until the screen lands.

use ctxd_core::report::Report;

pub fn run(
    report: Report,
    _title: &str,
    _reload: impl Fn() -> anyhow::Result<Report>,
) -> anyhow::Result<()> {
    print!("{}", ctxd_core::report::text::render(&report));
    Ok(())
}
