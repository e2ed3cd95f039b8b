//! The counts behind the closing line of `cargo xtask test`, read from what
//! each step printed. Pure functions of text, so they are unit-tested below.
//!
//! Cargo tests are counted against the list of tests each test binary
//! holds (`<exe> --list --format terse`), not against the `test result:`
//! lines: a test that printed no result (its binary crashed, aborted or was
//! killed) is counted as failed and named, never omitted.

/// The closing counts and the names behind them.
#[derive(Default, Debug)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    /// One line per failed test or step.
    pub failures: Vec<String>,
    /// One line per skipped or ignored test.
    pub skips: Vec<String>,
}

impl Tally {
    pub fn pass(&mut self) {
        self.passed += 1;
    }
    pub fn fail(&mut self, what: String) {
        self.fail_n(1, what);
    }
    /// `n` failed tests, named on one line.
    pub fn fail_n(&mut self, n: u64, what: String) {
        self.failed += n;
        self.failures.push(what);
    }
    pub fn skip(&mut self, what: String) {
        self.skipped += 1;
        self.skips.push(what);
    }
    /// The last line of the run, which CI reads.
    pub fn line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// A test binary cargo built: `label` names it for people
/// (`tests/fallback.rs`), `file` is its file name (`fallback-0123abcd`),
/// `tests` what `--list` printed (`None` when it could not list them).
#[derive(Debug, Clone)]
pub struct Binary {
    pub label: String,
    pub file: String,
    pub tests: Option<Vec<String>>,
}

/// The names `<exe> --list --format terse` printed (`name: test`).
pub fn listed_tests(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
    Ignored,
    /// Passed, but it logged that it skipped what it tests.
    Skipped,
}

/// What cargo printed for one binary, from its `Running …` line to the next.
#[derive(Debug, Default)]
struct Section {
    /// The binary's file name; `None` for doc-tests.
    file: Option<String>,
    /// What cargo called it (`tests/fallback.rs`, `Doc-tests stockade`).
    label: String,
    results: Vec<(String, Outcome)>,
    /// The `---- name stdout ----` blocks of failed tests.
    failure_output: Vec<String>,
}

/// Splits cargo test's combined output into one section per binary.
fn sections(out: &str) -> Vec<Section> {
    let mut v: Vec<Section> = Vec::new();
    let mut in_failure = false;
    for line in out.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            let (label, file) = match rest.rsplit_once(" (") {
                Some((l, p)) => (l, p.trim_end_matches(')')),
                None => (rest, rest),
            };
            let file = file.rsplit('/').next().unwrap_or(file).to_string();
            let label = label.strip_prefix("unittests ").unwrap_or(label);
            v.push(Section {
                file: Some(file),
                label: label.to_string(),
                ..Section::default()
            });
            in_failure = false;
            continue;
        }
        if t.starts_with("Doc-tests ") {
            v.push(Section {
                label: t.to_string(),
                ..Section::default()
            });
            in_failure = false;
            continue;
        }
        let Some(s) = v.last_mut() else { continue };
        if t.starts_with("---- ") && t.ends_with(" ----") {
            in_failure = true;
        } else if t == "failures:" || t.starts_with("test result: ") {
            in_failure = false;
        }
        if in_failure {
            s.failure_output.push(line.to_string());
        } else if let Some(r) = result_line(line) {
            s.results.push(r);
        }
    }
    v
}

/// `test NAME ... ok|FAILED|ignored[, reason]`, also when a payload's
/// unterminated output came first on the same line, and when NAME is
/// padded to the longest name's width (libtest-mimic's harness, tests/docs.rs).
fn result_line(line: &str) -> Option<(String, Outcome)> {
    let line = line.trim_end();
    for (i, _) in line.match_indices("test ") {
        let Some((name, res)) = line[i + 5..].split_once(" ... ") else {
            continue;
        };
        let outcome = if res == "ok" {
            Outcome::Passed
        } else if res == "FAILED" {
            Outcome::Failed
        } else if res == "ignored" || res.starts_with("ignored, ") {
            Outcome::Ignored
        } else {
            continue;
        };
        return Some((name.trim_end().to_string(), outcome));
    }
    None
}

/// cargo's `process didn't exit successfully: `…/file …` (signal: 6, …)`
/// line for the binary `file`, if it failed.
fn exit_error(out: &str, file: &str) -> Option<String> {
    if file.is_empty() {
        return None;
    }
    out.lines()
        .map(str::trim)
        .filter(|l| l.contains("process didn't exit successfully"))
        .find(|l| {
            l.match_indices(file).any(|(i, _)| {
                let before = l[..i].chars().last();
                let after = l[i + file.len()..].chars().next();
                matches!(before, Some('/' | '`')) && matches!(after, Some(' ' | '`') | None)
            })
        })
        .map(|l| {
            // Keep the status, not the command line.
            match l.rsplit_once("` (") {
                Some((_, st)) => format!("({st}"),
                None => l.to_string(),
            }
        })
}

/// One cargo test and what became of it.
#[derive(Debug)]
struct Record {
    /// `tests/fallback.rs: name`
    shown: String,
    name: String,
    outcome: Outcome,
    /// Why it failed without a result line of its own, or why it skipped.
    note: Option<String>,
    /// How many tests it stands for: 1, or all of a binary that never ran.
    count: u64,
}

/// The records of one binary: every listed test, with its result line if it
/// printed one; a listed test without one failed.
fn records_of(b: &Binary, out: &str, secs: &[&Section]) -> Vec<Record> {
    let seen: Vec<&(String, Outcome)> = secs.iter().flat_map(|s| &s.results).collect();
    let exit = exit_error(out, &b.file);
    let listed = b.tests.as_deref().unwrap_or(&[]);
    let mut recs = Vec::new();
    let add = |recs: &mut Vec<Record>, name: &str, outcome, note| {
        recs.push(Record {
            shown: format!("{}: {name}", b.label),
            name: name.to_string(),
            outcome,
            note,
            count: 1,
        })
    };
    if secs.is_empty() && !listed.is_empty() {
        // cargo never ran it (the build failed, or cargo test stopped):
        // every test failed, named in one line.
        let n = listed.len();
        let mut r = Record {
            shown: format!("{}: {n} tests did not run", b.label),
            name: String::new(),
            outcome: Outcome::Failed,
            note: None,
            count: n as u64,
        };
        if n == 1 {
            r.shown = format!("{}: {} (did not run)", b.label, listed[0]);
        }
        return vec![r];
    }
    for name in listed {
        match seen.iter().find(|(n, _)| n == name) {
            Some((_, o)) => add(&mut recs, name, *o, None),
            None => {
                let why = match &exit {
                    Some(e) => format!("no result: the test binary exited {e}"),
                    None => "no result".to_string(),
                };
                add(&mut recs, name, Outcome::Failed, Some(why));
            }
        }
    }
    for (name, o) in &seen {
        if !listed.contains(name) {
            add(&mut recs, name, *o, None);
        }
    }
    // A binary that failed with no failed test (a crash after the last
    // test, a harness that lists nothing) is one failure of its own; so is
    // one that could not list its tests and did not run.
    let why = match (exit, b.tests.is_none() && secs.is_empty()) {
        (Some(e), _) => Some(format!("exited {e}")),
        (None, true) => Some("could not list its tests and did not run".into()),
        (None, false) => None,
    };
    if let Some(why) = why {
        if !recs.iter().any(|r| r.outcome == Outcome::Failed) {
            add(&mut recs, "the test binary", Outcome::Failed, Some(why));
        }
    }
    recs
}

/// Marks the tests named in the skip log (`SKIPPED: <test>: <reason>`) that
/// passed as skipped: they returned early and libtest counted them as
/// passed. A test that failed stays failed, counted once. Returns the
/// logged lines whose name matches no test.
fn apply_skips(skip_log: &str, recs: &mut [Record]) -> Vec<String> {
    let mut done: Vec<&str> = Vec::new();
    let mut unmatched = Vec::new();
    for line in skip_log.lines() {
        let Some(rest) = line.strip_prefix("SKIPPED: ") else {
            continue;
        };
        let (name, why) = rest.split_once(": ").unwrap_or((rest, ""));
        if done.contains(&name) {
            continue;
        }
        done.push(name);
        let suffix = format!("::{name}");
        let is = |r: &Record| r.name == name || r.name.ends_with(&suffix);
        if !recs.iter().any(is) {
            unmatched.push(rest.to_string());
        } else if !recs.iter().any(|r| is(r) && r.outcome == Outcome::Failed) {
            if let Some(r) = recs
                .iter_mut()
                .find(|r| is(r) && r.outcome == Outcome::Passed)
            {
                r.outcome = Outcome::Skipped;
                r.note = Some(why.to_string());
            }
        }
    }
    unmatched
}

/// Counts the cargo tests into `t`: `binaries` as built and listed, `out`
/// cargo test's combined stdout and stderr, `skip_log` the tests' skip log.
/// Returns the `---- name stdout ----` blocks of the failed tests.
pub fn cargo_tests(binaries: &[Binary], out: &str, skip_log: &str, t: &mut Tally) -> Vec<String> {
    let secs = sections(out);
    let mut recs = Vec::new();
    for b in binaries {
        let mine: Vec<&Section> = secs
            .iter()
            .filter(|s| s.file.as_deref() == Some(&b.file))
            .collect();
        recs.extend(records_of(b, out, &mine));
    }
    // Doc-tests, and any binary cargo ran that the build did not report.
    for s in &secs {
        if !binaries.iter().any(|b| s.file.as_deref() == Some(&b.file)) {
            let b = Binary {
                label: s.label.clone(),
                file: s.file.clone().unwrap_or_default(),
                tests: None,
            };
            recs.extend(records_of(&b, out, &[s]));
        }
    }
    let unmatched = apply_skips(skip_log, &mut recs);
    for r in recs {
        let note = r.note.map(|n| format!(" ({n})")).unwrap_or_default();
        match r.outcome {
            Outcome::Passed => t.pass(),
            Outcome::Failed => t.fail_n(r.count, format!("{}{note}", r.shown)),
            Outcome::Ignored => t.skip(format!("{} (ignored)", r.shown)),
            Outcome::Skipped => t.skip(format!("{}{note}", r.shown)),
        }
    }
    // A skip whose name matches no test was counted as passed by libtest.
    for u in unmatched {
        t.passed = t.passed.saturating_sub(1);
        t.skip(u);
    }
    secs.into_iter().flat_map(|s| s.failure_output).collect()
}

/// Counts a sub-suite's `<TAG> PASS|FAIL|SKIPPED` lines; a suite that
/// failed without a FAIL line of its own did not complete, one failure.
pub fn tagged(tag: &str, ok: bool, out: &str, t: &mut Tally) {
    let mut failed = false;
    for l in out.lines() {
        let Some(rest) = l.trim().strip_prefix(tag) else {
            continue;
        };
        let rest = rest.trim_start();
        let named = || format!("{tag} {rest}");
        if rest.starts_with("PASS") {
            t.pass();
        } else if rest.starts_with("FAIL") {
            failed = true;
            t.fail(named());
        } else if rest.starts_with("SKIP") {
            t.skip(named());
        }
    }
    if !ok && !failed {
        t.fail(format!("{tag}: the suite did not complete"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cargo test --no-fail-fast where `crash` aborted after its first test,
    /// `fallback` has a failure and an ignored test, `gone` never ran, and a
    /// payload's unterminated output ran into a result line.
    const OUT: &str = "   Compiling stockade v0.1.0 (/w)
     Running unittests src/lib.rs (target/debug/deps/stockade-aaaa)

running 2 tests
test policy::tests::merges ... ok
partial output without newlinetest plan::tests::orders ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/crash.rs (target/debug/deps/crash-bbbb)

running 3 tests
test first_passes ... ok
error: test failed, to rerun pass `--test crash`

Caused by:
  process didn't exit successfully: `/w/target/debug/deps/crash-bbbb --test-threads 4` (signal: 6, SIGABRT: process abort signal)
     Running tests/fallback.rs (target/debug/deps/fallback-cccc)

running 4 tests
test a ... ok
test b ... FAILED
test c ... ignored, needs docker
test d ... ok

failures:

---- b stdout ----
thread 'b' panicked at tests/fallback.rs:10:5:
test x ... ok
boom

failures:
    b

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

error: test failed, to rerun pass `--test fallback`
   Doc-tests stockade

running 1 test
test src/lib.rs - Policy (line 12) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s

error: 2 targets failed:
    `--test crash`
    `--test fallback`
";

    fn bin(label: &str, file: &str, tests: &[&str]) -> Binary {
        Binary {
            label: label.into(),
            file: file.into(),
            tests: Some(tests.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn bins() -> Vec<Binary> {
        vec![
            bin(
                "src/lib.rs",
                "stockade-aaaa",
                &["plan::tests::orders", "policy::tests::merges"],
            ),
            bin(
                "tests/crash.rs",
                "crash-bbbb",
                &["first_passes", "second", "third"],
            ),
            bin("tests/fallback.rs", "fallback-cccc", &["a", "b", "c", "d"]),
            bin("tests/gone.rs", "gone-dddd", &["never"]),
        ]
    }

    #[test]
    fn unrun_tests_of_a_crashed_or_missing_binary_count_as_failed() {
        let mut t = Tally::default();
        let blocks = cargo_tests(&bins(), OUT, "", &mut t);
        // lib 2 + crash 1 + fallback 2 + doc-test 1 passed.
        assert_eq!((t.passed, t.failed, t.skipped), (6, 4, 1), "{t:#?}");
        assert_eq!(
            t.failures,
            [
                "tests/crash.rs: second (no result: the test binary exited (signal: 6, SIGABRT: process abort signal))",
                "tests/crash.rs: third (no result: the test binary exited (signal: 6, SIGABRT: process abort signal))",
                "tests/fallback.rs: b",
                "tests/gone.rs: never (did not run)",
            ]
        );
        assert_eq!(t.skips, ["tests/fallback.rs: c (ignored)"]);
        // A binary with more tests that never ran: all counted, one line.
        let mut more = bins();
        more[3].tests = Some(vec!["x".into(), "y".into(), "z".into()]);
        let mut t = Tally::default();
        cargo_tests(&more, OUT, "", &mut t);
        assert_eq!((t.passed, t.failed, t.skipped), (6, 6, 1));
        assert_eq!(t.failures[3], "tests/gone.rs: 3 tests did not run");
        assert_eq!(blocks[0], "---- b stdout ----");
        assert!(blocks.iter().any(|l| l == "boom"));
        assert!(!blocks.iter().any(|l| l.contains("failures")));
    }

    #[test]
    fn a_skip_moves_a_passed_test_once_and_leaves_a_failed_one_failed() {
        let log = "SKIPPED: a: no root\nSKIPPED: a: no root\nSKIPPED: b: no userns\nSKIPPED: merges: x\nSKIPPED: elsewhere: y\n";
        let mut t = Tally::default();
        cargo_tests(&bins(), OUT, log, &mut t);
        // a and policy::tests::merges move to skipped; b stays failed;
        // `elsewhere` matches no test: taken from the passed count.
        assert_eq!((t.passed, t.failed, t.skipped), (3, 4, 4), "{t:#?}");
        assert!(t.failures.contains(&"tests/fallback.rs: b".to_string()));
        assert_eq!(
            t.skips,
            [
                "src/lib.rs: policy::tests::merges (x)",
                "tests/fallback.rs: a (no root)",
                "tests/fallback.rs: c (ignored)",
                "elsewhere: y",
            ]
        );
    }

    #[test]
    fn a_binary_that_fails_without_a_failed_test_is_one_failure() {
        let out = "     Running tests/late.rs (target/debug/deps/late-eeee)\n\nrunning 1 test\ntest only ... ok\n\ntest result: ok. 1 passed; 0 failed\n\nerror: test failed, to rerun pass `--test late`\n\nCaused by:\n  process didn't exit successfully: `/w/target/debug/deps/late-eeee` (exit status: 101)\n";
        let mut t = Tally::default();
        cargo_tests(
            &[bin("tests/late.rs", "late-eeee", &["only"])],
            out,
            "",
            &mut t,
        );
        assert_eq!((t.passed, t.failed, t.skipped), (1, 1, 0));
        assert_eq!(
            t.failures,
            ["tests/late.rs: the test binary (exited (exit status: 101))"]
        );
        // A binary whose name is another's prefix is not confused with it.
        assert_eq!(exit_error(out, "late-ee"), None);
        let unlisted = Binary {
            tests: None,
            ..bin("tests/odd.rs", "odd-ffff", &[])
        };
        let mut t = Tally::default();
        cargo_tests(&[unlisted], "", "", &mut t);
        assert_eq!(
            t.failures,
            ["tests/odd.rs: the test binary (could not list its tests and did not run)"]
        );
    }

    #[test]
    fn lists_and_result_lines() {
        assert_eq!(
            listed_tests("a::b: test\nc: test\nd: bench\n\n2 tests, 1 benchmark\n"),
            ["a::b", "c"]
        );
        assert_eq!(
            result_line("test a ... ignored, needs root"),
            Some(("a".into(), Outcome::Ignored))
        );
        assert_eq!(
            result_line("test README.md:9      ... ok"),
            Some(("README.md:9".into(), Outcome::Passed))
        );
        assert_eq!(result_line("test result: ok. 1 passed"), None);
        assert_eq!(
            result_line("test a has been running for over 60 seconds"),
            None
        );
    }

    #[test]
    fn tagged_suites() {
        let out = "VMTEST PASS mem\nVMTEST FAIL pids: no limit\nDOCKERTEST SKIPPED: x\nVMTEST SKIPPED cpu: no controller\nVMTEST DONE\n";
        let mut t = Tally::default();
        tagged("VMTEST", false, out, &mut t);
        assert_eq!((t.passed, t.failed, t.skipped), (1, 1, 1));
        assert_eq!(t.failures, ["VMTEST FAIL pids: no limit"]);
        let mut t = Tally::default();
        tagged("DOCKERTEST", false, "boot failed\n", &mut t);
        assert_eq!(t.failures, ["DOCKERTEST: the suite did not complete"]);
        assert_eq!(t.line(), "0 passed, 1 failed, 0 skipped");
    }
}
