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

/// A file's production code: up to its `#[cfg(test)]` module (none in a
/// file named `tests.rs`).
fn production(path: &Path, text: &str) -> Option<String> {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return None;
    }
    Some(match text.find("\n#[cfg(test)]\nmod tests") {
        Some(i) => text[..i].to_string(),
        None => text.to_string(),
    })
}

/// Each function's name and length in lines, found by its braces (string
/// and char literals and comments left out first).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<String> = code_of(code).lines().map(strip_literals).collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(at) = t.find("fn ") else { continue };
        let before = &t[..at];
        let words = [
            "pub",
            "pub(crate)",
            "pub(super)",
            "const",
            "async",
            "unsafe",
            "extern",
            "\"C\"",
        ];
        if !before.split_whitespace().all(|w| words.contains(&w)) {
            continue;
        }
        let name: String = t[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 0i64;
        let mut opened = false;
        for (j, l) in lines[i..].iter().enumerate() {
            if !opened && l.contains(';') && !l.contains('{') {
                break; // a declaration (a trait's), no body
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                out.push((name.clone(), j + 1));
                break;
            }
        }
    }
    out
}

/// `l` with the contents of its string and char literals removed.
fn strip_literals(l: &str) -> String {
    let mut out = String::new();
    let mut chars = l.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => {
                in_str = false;
                out.push('"');
            }
            (true, _) => {}
            (false, '"') => {
                in_str = true;
                out.push('"');
            }
            (false, '\'') if chars.clone().nth(1) == Some('\'') => {
                chars.next();
                chars.next();
                out.push_str("''");
            }
            (false, '\'') if chars.peek() == Some(&'\\') => {
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                }
                out.push_str("''");
            }
            _ => out.push(c),
        }
    }
    out
}

/// Sizes that serve the reader: no production file over 800 lines (the
/// kernel's syscall table excepted), no production function over 120.
#[test]
fn no_production_file_over_800_lines_and_no_function_over_120() {
    let mut all = Vec::new();
    files(&Path::new(ROOT).join("src"), &mut all);
    let mut over = Vec::new();
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let Some(code) = production(path, &text) else {
            continue;
        };
        let rel = path.strip_prefix(ROOT).unwrap().display().to_string();
        let n = code.lines().count();
        if n > 800 && rel != "src/seccomp/syscalls.rs" {
            over.push(format!("{rel}: {n} lines"));
        }
        for (name, len) in function_lengths(&code) {
            if len > 120 {
                over.push(format!("{rel}: fn {name}: {len} lines"));
            }
        }
    }
    assert!(over.is_empty(), "too long:\n{}", over.join("\n"));
}

#[test]
fn function_lengths_are_counted_by_braces_not_by_literals() {
    let code = "fn a() {\n    let s = \"}}{\";\n    let c = '}';\n}\n\
                pub(crate) fn b(x: u8) -> u8 {\n    x\n}\n\
                trait T {\n    fn c(&self);\n}\n";
    assert_eq!(
        function_lengths(code),
        [("a".to_string(), 4), ("b".to_string(), 3)]
    );
}
