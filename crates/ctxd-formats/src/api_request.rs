//! Placeholder: being written.

use serde_json::Value;

use ctxd_core::model::{Session, WireApi};

use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;

pub(crate) fn import_body(
    _api: WireApi,
    _doc: &Value,
    _warnings: &mut Vec<Warning>,
) -> Result<Session, ImportError> {
    Err(ImportError::Malformed {
        format: "api",
        message: "not implemented yet".into(),
    })
}

#[derive(Default)]
pub(crate) struct CaptureImporter {
    builder: crate::builder::Builder,
}

impl LineImporter for CaptureImporter {
    const FORMAT: &'static str = "captured requests";

    fn line(&mut self, _line_no: usize, _line: &str) -> Result<(), String> {
        Err("not implemented yet".into())
    }

    fn finish(self, _warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        Ok(self.builder.finish())
    }
}
