//! Placeholder: being written.

use ctxd_core::model::Session;

use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;

#[derive(Default)]
pub(crate) struct Importer {
    builder: crate::builder::Builder,
}

impl LineImporter for Importer {
    const FORMAT: &'static str = "codex";

    fn line(&mut self, _line_no: usize, _line: &str) -> Result<(), String> {
        Err("not implemented yet".into())
    }

    fn finish(self, _warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        Ok(self.builder.finish())
    }
}
