//! Any bytes into the importer: an `Err` is fine, a panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ctxd_formats::import_reader(std::io::Cursor::new(data));
});
