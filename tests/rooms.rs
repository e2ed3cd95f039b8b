//! The rooms' import order, as ARCHITECTURE.md lists it, holds in every
//! file of `src/`: a module names (`crate::…`) only rooms listed before
//! its own. Comments are not code; `lib.rs` and `main.rs` are the doors.

use std::collections::BTreeMap;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Each room's rank (twice its number), from ARCHITECTURE.md's numbered list under
/// "Rooms, in import order" (the first backticked name of each item; the
/// crate root's run functions have none and are the root's rank).
fn ranks() -> (BTreeMap<String, usize>, usize) {
    let text = std::fs::read_to_string(format!("{ROOT}/ARCHITECTURE.md")).unwrap();
    let rooms = text
        .split("## Rooms, in import order")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("ARCHITECTURE.md has its rooms");
    let mut ranks = BTreeMap::new();
    let mut root = None;
    for line in rooms.lines() {
        let Some((n, rest)) = line.split_once(". **") else {
            continue;
        };
        let Ok(n) = n.trim().parse::<usize>() else {
            continue;
        };
        let head = rest.split("**").next().unwrap_or("");
        match head.split('`').nth(1) {
            Some(name) => {
                ranks.insert(name.to_string(), 2 * n);
            }
            None => root = Some(2 * n),
        }
    }
    // Beside a room, just before it.
    if let Some(&z) = ranks.get("zygote") {
        ranks.insert("stages".into(), z - 1);
    }
    (
        ranks,
        root.expect("the crate root's run functions are ranked"),
    )
}

/// The rooms a file names: `crate::x` and `use crate::{x, y::…}`.
fn named(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut at_top = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        at_top = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && at_top && (c.is_alphanumeric() || c == '_') {
                    item.push(c);
                } else if !item.is_empty() {
                    out.push(std::mem::take(&mut item));
                    at_top = false;
                }
            }
            if !item.is_empty() {
                out.push(item);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// Code without comments (line comments and doc comments).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The room of a name the crate root re-exports (`crate::Jail`), or of
/// one of its own run functions.
fn room_of_root_item(name: &str) -> Option<&'static str> {
    Some(match name {
        "Child" | "Error" | "Jail" | "Killer" | "Output" | "Stdio" => "api",
        "Outcome" | "Status" => "outcome",
        "Masked" | "SetupError" => "plan",
        "Policy" | "PolicyError" => "policy",
        "SpawnError" => "spawner",
        _ => return None,
    })
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_room_imports_only_rooms_before_it() {
    let (ranks, root) = ranks();
    let src = Path::new(ROOT).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in all {
        let rel = path.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy();
        let room = top.trim_end_matches(".rs").to_string();
        // The doors, and the crates of their own (sys, confine).
        if ["lib", "main", "sys", "confine"].contains(&room.as_str()) {
            continue;
        }
        let Some(&mine) = ranks.get(&room) else {
            wrong.push(format!(
                "{}: room `{room}` is not in ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        // A module's own tests may reach anything.
        let code = code.split("#[cfg(test)]").next().unwrap_or("");
        for name in named(code) {
            let (target, rank) = match ranks.get(&name) {
                Some(&r) => (name.clone(), r),
                None => match room_of_root_item(&name) {
                    Some(r) => (r.to_string(), ranks[r]),
                    None => (format!("the crate root's `{name}`"), root),
                },
            };
            checked += 1;
            if target != room && rank >= mine {
                wrong.push(format!(
                    "{}: `{room}` (room {}) names `crate::{name}` ({target}, room {})",
                    rel.display(),
                    mine / 2,
                    rank.div_ceil(2)
                ));
            }
        }
    }
    assert!(
        checked > 300,
        "only {checked} paths seen: the scan is broken"
    );
    assert!(
        wrong.is_empty(),
        "imports against the order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_sees_grouped_and_plain_paths() {
    let got = named("use crate::{a::{b, c}, d};\nlet x = crate::e::f();");
    assert_eq!(got, ["a", "d", "e"]);
    assert_eq!(code_of("x // crate::y\n/// crate::z"), "x \n");
}
