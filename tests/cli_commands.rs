//! Command lines that must do what they say: binds of the directory the
//! jail's root is assembled in, the JSON outcome on every error, no
//! subcommand, shell completions and the man page. As root and as uid 65534.

mod common;

use common::{stderr, stdout, Scratch, Who};
use std::path::PathBuf;

/// `stockade ARGS…` as `who`.
fn stockade(who: Who, args: &[&str]) -> std::process::Output {
    common::stockade(who)
        .args(args)
        .output()
        .expect("start stockade")
}

#[test]
fn binding_the_directory_that_holds_the_new_root_shows_the_host_directory() {
    // The jail's root is assembled on /tmp (in the jail's own mount
    // namespace): a bind of /tmp, or of /, must still show the host's /tmp.
    let dir = Scratch::new("bind-base");
    let marker = format!("host-file-{}", std::process::id());
    std::fs::write(dir.join("marker"), &marker).unwrap();
    let file = dir.join("marker");
    let file = file.to_str().unwrap();
    for who in
        common::users("binding_the_directory_that_holds_the_new_root_shows_the_host_directory")
    {
        for (flags, inner) in [
            (vec!["--ro-bind", "/tmp"], file.to_string()),
            (vec!["--bind", "/tmp"], file.to_string()),
            (vec!["--ro-bind", "/:/host"], format!("/host{file}")),
        ] {
            let o = common::run(who, &flags, &["/bin/cat", &inner]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{who:?}: {flags:?}: {}",
                stderr(&o)
            );
            assert_eq!(stdout(&o), marker, "{who:?}: {flags:?}");
        }
    }
}

/// Validate outcomes (one per line) with Debian's python3-jsonschema
/// (installed by `cargo xtask test`), in one python run.
fn validate(jsons: &[String]) {
    let json = jsons.join("\n");
    let dir = Scratch::new("schema");
    let f = dir.join("outcomes.json");
    std::fs::write(&f, &json).unwrap();
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/outcome.schema.json");
    let o = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import json,sys,jsonschema\ns=json.load(open(sys.argv[2]))\nfor l in open(sys.argv[1]): jsonschema.validate(json.loads(l), s, format_checker=None)\nprint('valid')")
        .arg(&f)
        .arg(schema)
        .output()
        .expect("run python3");
    assert!(
        o.status.success() && stdout(&o).contains("valid"),
        "outcome does not validate against the schema:\n{json}\n{}",
        stderr(&o)
    );
}

/// The refusal is one stderr line, and the same line is the `error` of a
/// setup_error outcome in `json` (validated against the schema by the caller).
fn refusal_is_reported(what: &str, o: &std::process::Output, json: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(125), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert_eq!(json.lines().count(), 1, "{what}: {json:?}");
    let v: serde_json::Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {json:?}; stderr: {err}"));
    assert_eq!(v["status"], "setup_error", "{what}: {v}");
    assert_eq!(v["exit_code"], 125, "{what}: {v}");
    let line = err.trim_end().trim_start_matches("stockade: ");
    assert_eq!(v["error"].as_str(), Some(line), "{what}: {v}");
}

#[test]
fn report_to_stdout_is_an_outcome_even_for_a_bad_command_line() {
    let dir = Scratch::new("report-bad");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "\nlimits = 5\n").unwrap();
    let bad = bad.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["--report", "-", "--bogus-flag", "--", "/bin/true"],
        &["--bogus-flag", "--report=-", "--", "/bin/true"],
        &["--report", "-", "--profile", bad, "--", "/bin/true"],
        &[
            "--report",
            "-",
            "--profile",
            "no-such-profile",
            "--",
            "/bin/true",
        ],
        &["--report", "-", "--timeout", "0s", "--", "/bin/true"],
        &["--report", "-", "--memory", "-5m", "--", "/bin/true"],
        &["--report", "-", "--uid", "x", "--", "/bin/true"],
        &["--report", "-", "/bin/echo", "--", "x"],
        &["--report", "-"],
        &["--report", "-", "--"],
        &[
            "--report",
            "-",
            "--ro-bind",
            "/nonexistent/stockade-src",
            "--",
            "/bin/true",
        ],
    ];
    let mut outcomes = Vec::new();
    for who in common::users("report_to_stdout_is_an_outcome_even_for_a_bad_command_line") {
        for c in cases {
            let mut args = vec!["run"];
            args.extend_from_slice(c);
            let o = stockade(who, &args);
            refusal_is_reported(&format!("{who:?}: {args:?}"), &o, &stdout(&o));
            outcomes.push(stdout(&o).trim_end().to_string());
        }
    }
    validate(&outcomes);
}

#[test]
fn report_file_is_written_for_a_bad_command_line() {
    let dir = Scratch::new("report-file").world_writable();
    for who in common::users("report_file_is_written_for_a_bad_command_line") {
        let f = dir.join(&format!("{who:?}.json"));
        let f = f.to_str().unwrap();
        let args = ["run", "--report", f, "--bogus-flag", "--", "/bin/true"];
        let o = stockade(who, &args);
        assert_eq!(stdout(&o), "", "{who:?}");
        let json = std::fs::read_to_string(f).unwrap_or_default();
        refusal_is_reported(&format!("{who:?}: {args:?}"), &o, &json);
        validate(&[json.trim_end().to_string()]);
    }
}

#[test]
fn no_subcommand_exits_2_with_usage() {
    for who in common::users("no_subcommand_exits_2_with_usage") {
        for (args, usage, sub) in [
            (&[][..], "Usage: stockade <COMMAND>", "run"),
            (
                &["profile"][..],
                "Usage: stockade profile <COMMAND>",
                "show",
            ),
        ] {
            let o = stockade(who, args);
            assert_eq!(o.status.code(), Some(2), "{who:?}: {args:?}");
            assert!(
                stderr(&o).contains(usage),
                "{who:?}: {args:?}: {}",
                stderr(&o)
            );
            assert!(stderr(&o).contains(sub), "{who:?}: {args:?}");
        }
    }
}

#[test]
fn completions_name_the_subcommands_and_flags_and_bash_accepts_the_script() {
    for who in
        common::users("completions_name_the_subcommands_and_flags_and_bash_accepts_the_script")
    {
        for shell in ["bash", "zsh", "fish"] {
            let o = stockade(who, &["completions", shell]);
            assert_eq!(o.status.code(), Some(0), "{who:?}: {shell}: {}", stderr(&o));
            let script = stdout(&o);
            for word in ["ro-bind", "run", "profile", "report", "seccomp-allow"] {
                assert!(script.contains(word), "{who:?}: {shell}: {word} missing");
            }
            // The hidden man subcommand is not offered.
            assert!(!script.contains("\"man\""), "{who:?}: {shell}");
        }
        let o = stockade(who, &["completions", "bash"]);
        let dir = Scratch::new("completions");
        let f = dir.join("stockade.bash");
        std::fs::write(&f, &o.stdout).unwrap();
        let n = std::process::Command::new("bash")
            .arg("-n")
            .arg(&f)
            .output()
            .expect("run bash");
        assert!(n.status.success(), "bash -n: {}", stderr(&n));
        // And it completes: `stockade run --ro` offers --ro-bind.
        let probe = format!(
            "source {}\nCOMP_WORDS=(stockade run --ro); COMP_CWORD=2; COMP_LINE='stockade run --ro'; COMP_POINT=${{#COMP_LINE}}\n_stockade stockade --ro run\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
            f.display()
        );
        let c = std::process::Command::new("bash")
            .arg("-c")
            .arg(probe)
            .output()
            .expect("run bash");
        assert!(
            stdout(&c).lines().any(|l| l == "--ro-bind"),
            "{who:?}: completions of `stockade run --ro`: {:?} {}",
            stdout(&c),
            stderr(&c)
        );
    }
}

#[test]
fn man_pages_come_from_the_command_line_definition() {
    for who in common::users("man_pages_come_from_the_command_line_definition") {
        let o = stockade(who, &["man"]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let page = stdout(&o);
        assert!(page.contains(".TH stockade 1"), "{who:?}: {page}");
        assert!(page.contains("run"), "{who:?}");
        let dir = Scratch::new("man").world_writable();
        let o = stockade(who, &["man", dir.path().to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{who:?}: {}", stderr(&o));
        let run = std::fs::read_to_string(dir.join("stockade-run.1")).unwrap();
        assert!(run.contains(".TH stockade-run 1"), "{who:?}: {run}");
        assert!(run.contains("ro\\-bind"), "{who:?}: {run}");
        for page in ["stockade.1", "stockade-profile.1", "stockade-check.1"] {
            assert!(dir.join(page).exists(), "{who:?}: {page}");
        }
    }
}
