//! The tuning/test split (`--split FILE --half tune|test`): defaults are chosen on the tuning
//! half only and the test half is what docs/eval.md reports, so a figure cannot be tuned to
//! the sessions it is reported on. The file lists paths; a session file belongs to the entry
//! its path ends with (`claude-code/abc.jsonl` matches `../shared/sessions/claude-code/abc.jsonl`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Half {
    Tune,
    Test,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    pub tune: Vec<String>,
    pub test: Vec<String>,
}

impl Split {
    pub fn read(path: &Path) -> anyhow::Result<Split> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let split: Split =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if let Some(both) = split.tune.iter().find(|t| split.test.contains(t)) {
            anyhow::bail!("{}: {both} is in both halves", path.display());
        }
        Ok(split)
    }

    /// The half a file is in, if the split lists it.
    pub fn half_of(&self, file: &Path) -> Option<Half> {
        let is = |entry: &String| file.ends_with(entry);
        if self.tune.iter().any(is) {
            Some(Half::Tune)
        } else if self.test.iter().any(is) {
            Some(Half::Test)
        } else {
            None
        }
    }

    /// `files` of `half`; a file the split does not list is an error (a session added without
    /// a half would be measured on neither, or tuned on unseen).
    pub fn keep(&self, half: Half, files: Vec<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for f in files {
            match self.half_of(&f) {
                Some(h) if h == half => out.push(f),
                Some(_) => {}
                None => anyhow::bail!(
                    "{}: not in the split; add it to a half (the rule is in the split file)",
                    f.display()
                ),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's split names every session of `../shared/sessions`, each in one half.
    #[test]
    fn the_repositorys_split_covers_the_shared_sessions() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let split = Split::read(&root.join("eval/split.toml")).unwrap();
        let shared = std::env::var_os("CTXD_SHARED")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("../shared"))
            .join("sessions");
        let Ok(families) = std::fs::read_dir(&shared) else {
            return; // no shared sessions on this machine
        };
        let mut seen = 0;
        for family in families.flatten().filter(|e| e.path().is_dir()) {
            for f in std::fs::read_dir(family.path()).unwrap().flatten() {
                let p = f.path();
                assert!(split.half_of(&p).is_some(), "{} has no half", p.display());
                seen += 1;
            }
        }
        assert_eq!(seen, split.tune.len() + split.test.len());
    }
}
