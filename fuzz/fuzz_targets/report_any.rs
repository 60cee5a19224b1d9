//! Any bytes into import, then the report: the first byte picks `at_turn` and `largest`, the
//! rest is the file. The report must never panic on whatever the importers accept.
#![no_main]

use ctxd_core::report::{self, Options};
use ctxd_core::tokens::CharEstimate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knob, file)) = data.split_first() else {
        return;
    };
    let Ok(import) = ctxd_formats::import_reader(std::io::Cursor::new(file)) else {
        return;
    };
    // 0: now; 1..=127: that turn (often past the end); 128..: a small turn number.
    let at_turn = match knob {
        0 => None,
        k if k < 128 => Some(usize::from(k)),
        k => Some(usize::from(k & 3)),
    };
    let options = Options {
        at_turn,
        largest: usize::from(knob % 7),
        window: if knob % 5 == 0 { Some(u64::from(knob) * 100) } else { None },
    };
    let report = report::build(&import.session, &CharEstimate, &options);
    let _ = report::text::render(&report);
    // Without the knob too: the report of the session as it is now.
    let _ = report::build(&import.session, &CharEstimate, &Options::default());
});
