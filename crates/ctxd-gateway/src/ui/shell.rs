//! The page shell every dashboard page starts as: no data, only the places the script fills
//! (with the key, when one is needed) and the login form it shows beyond loopback.

use maud::{html, Markup, DOCTYPE};

/// The shell of `page` (`sessions`, `session`, `usage`: the script's switch), titled `title`;
/// `open` tells the script that no key is needed (loopback).
pub fn shell(page: &str, title: &str, open: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/assets/ui.css";
                script src="/ui/assets/ui.js" defer {}
            }
            body data-page=(page) data-open=(open) {
                (top())
                (login())
                main id="main" {
                    div id="toolbar" class="toolbar" hidden {
                        input id="filter" type="search"
                            placeholder="filter: key, title, agent, project, model"
                            maxlength="200";
                        " "
                        span id="live" class="live" { "live" }
                    }
                    div id="content" { p class="empty" { "Loading…" } }
                }
                dialog id="raw-dialog" {
                    div class="dialog-head" {
                        b id="raw-title" { "raw content" }
                        button id="raw-close" { "close" }
                    }
                    pre id="raw-text" {}
                }
            }
        }
    }
}

fn top() -> Markup {
    html! {
        header class="top" {
            a class="brand" href="/ui/" { "ctxd" }
            " "
            nav { a href="/ui/" { "sessions" } " " a href="/ui/usage" { "usage" } }
            " "
            span id="who" class="who" {}
            " "
            button id="forget" class="link" hidden { "forget key" }
        }
    }
}

/// Asked for beyond loopback: the key stays in the tab and goes to ctxd as a header.
fn login() -> Markup {
    html! {
        form id="login" class="login" hidden {
            h2 { "This dashboard is beyond loopback" }
            p {
                "Enter your API key or your ctxd key to see your own sessions, or the operator "
                "token to see every tenant's. It stays in this tab (session storage) and goes to "
                "ctxd as a header; ctxd never stores it."
            }
            label { "API key " input id="login-key" type="password" autocomplete="off"; }
            " "
            label { "or ctxd key " input id="login-ctxd-key" type="password" autocomplete="off"; }
            " "
            label {
                "or operator token "
                input id="login-admin" type="password" autocomplete="off";
            }
            " "
            button { "open" }
            p id="login-error" class="error" hidden {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_names_its_page_and_whether_it_is_open() {
        let out = shell("usage", "ctxd · usage", false).into_string();
        assert!(out.starts_with("<!DOCTYPE html>"), "{out}");
        assert!(
            out.contains(r#"<body data-page="usage" data-open="false">"#),
            "{out}"
        );
        assert!(out.contains("<title>ctxd · usage</title>"), "{out}");
    }
}
