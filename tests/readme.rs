//! Every example in README.md runs: fenced blocks whose info string is
//! `sh example` or `python example` are executed, each in a fresh directory
//! with `stockade` on PATH, as root and as uid 65534. `STOCKADE_README`
//! points the test at another file (to check README text before merging).

mod common;

use common::{Scratch, Who};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

struct Example {
    lang: String,
    line: usize,
    code: String,
}

fn examples(text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut cur: Option<Example> = None;
    for (i, l) in text.lines().enumerate() {
        match &mut cur {
            None => {
                if let Some(info) = l.strip_prefix("```") {
                    let mut w = info.split_whitespace();
                    if let (Some(lang), Some("example")) = (w.next(), w.next()) {
                        cur = Some(Example {
                            lang: lang.to_string(),
                            line: i + 1,
                            code: String::new(),
                        });
                    }
                }
            }
            Some(e) => {
                if l.trim_start().starts_with("```") {
                    out.push(cur.take().unwrap());
                } else {
                    e.code.push_str(l);
                    e.code.push('\n');
                }
            }
        }
    }
    assert!(cur.is_none(), "an example block is not closed");
    out
}

#[test]
fn every_readme_example_runs() {
    let path = std::env::var_os("STOCKADE_README")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let ex = examples(&text);
    assert!(
        ex.len() >= 3,
        "{}: expected the three main uses as examples (```sh example / ```python example), found {}",
        path.display(),
        ex.len()
    );
    let bindir = common::binary().parent().unwrap().display().to_string();
    for who in common::users("every_readme_example_runs") {
        for e in &ex {
            let s = Scratch::new("readme").world_writable();
            let (file, interp) = match e.lang.as_str() {
                "sh" => ("example.sh", vec!["sh", "-e"]),
                "python" => ("example.py", vec!["python3"]),
                other => panic!(
                    "{}:{}: unknown example language {other}",
                    path.display(),
                    e.line
                ),
            };
            let f = s.join(file);
            std::fs::write(&f, &e.code).unwrap();
            let mut c = Command::new(interp[0]);
            c.args(&interp[1..]).arg(&f);
            c.env_clear()
                .env("PATH", format!("{bindir}:/usr/local/bin:/usr/bin:/bin"))
                .env("HOME", s.path())
                .env("LANG", "C.UTF-8")
                .current_dir(s.path());
            if who == Who::Nobody && common::is_root() {
                c.uid(common::NOBODY).gid(common::NOBODY);
            }
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{}:{}: {} example failed as {who:?}: {:?}\n--- code\n{}--- stdout\n{}\n--- stderr\n{}",
                path.display(),
                e.line,
                e.lang,
                o.status,
                e.code,
                common::stdout(&o),
                common::stderr(&o)
            );
        }
    }
}
