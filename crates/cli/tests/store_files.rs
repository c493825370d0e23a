//! What a hostile store or imported file cannot do through osprobe: put an
//! escape sequence, a C1 control or a bidi override on the terminal through
//! any printer (history, show and its formats, reproduce, compare, the
//! import and error messages), or make osprobe write through a symbolic
//! link planted at a store's or a report's name.

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

mod common;

/// A terminal title change, a colour, a CSI as a C1 control and a
/// right-to-left override: what a hostile run carries.
const HOSTILE: &str = "\u{1b}]0;PWNED\u{7}\u{1b}[31m\u{9b}2J\u{202e}gpj";

fn osprobe(db: &Path) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.env_remove("OSPROBE_DB")
        .arg("--quiet")
        .arg("--db")
        .arg(db);
    cmd
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// Anything a terminal would act on instead of showing.
fn acted_on(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t' && c != '\r')
                || matches!(c as u32, 0x202a..=0x202e | 0x2066..=0x2069 | 0x200e | 0x200f)
        })
        .collect()
}

/// A store holding one real run with HOSTILE in its labels, host name,
/// command, metric, parameters and notes, brought in by `osprobe import`.
fn hostile_store(dir: &Path) -> (std::path::PathBuf, String) {
    let source = dir.join("source.db");
    stdout_of(
        &osprobe(&source)
            .args(["bench", "cpu.syscall", "--profile", "smoke"])
            .output()
            .unwrap(),
    );
    let line = stdout_of(&osprobe(&source).arg("export").output().unwrap());
    let mut run: Value = serde_json::from_str(line.trim()).unwrap();
    run["labels"] = serde_json::json!({"host": HOSTILE, HOSTILE: "x"});
    run["environment"]["hostname"] = HOSTILE.into();
    run["command"] = HOSTILE.into();
    for m in run["measurements"].as_array_mut().unwrap() {
        m["metric"] = format!("getppid{HOSTILE}").into();
        m["params"]["evil"] = HOSTILE.into();
        m["notes"] = serde_json::json!([HOSTILE]);
    }
    let file = dir.join("hostile.jsonl");
    std::fs::write(&file, format!("{run}\n")).unwrap();
    let target = dir.join("target.db");
    let imported = stdout_of(&osprobe(&target).arg("import").arg(&file).output().unwrap());
    assert!(imported.contains("imported 1 new run"), "{imported}");
    (target, run["id"].as_str().unwrap().to_string())
}

#[test]
fn no_printer_puts_a_stored_escape_sequence_on_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let (db, id) = hostile_store(dir.path());
    let printers: [&[&str]; 9] = [
        &["history"],
        &["history", "--json"],
        &["show", "latest"],
        &["show", "latest", "--csv"],
        &["show", "latest", "--markdown"],
        &["show", "latest", "--json"],
        &["reproduce", "latest"],
        &["reproduce", "latest", "--csv"],
        &["compare", "latest", "latest"],
    ];
    for args in printers {
        let out = osprobe(&db).args(args).output().unwrap();
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!text.is_empty(), "{args:?} printed nothing: {err}");
        assert_eq!(
            acted_on(&text),
            Vec::<char>::new(),
            "{args:?} printed {text:?}"
        );
        assert_eq!(acted_on(&err), Vec::<char>::new(), "{args:?} said {err:?}");
        if args.contains(&"--json") {
            // Still the same JSON to a reader.
            let value: Value = serde_json::from_str(&text).unwrap();
            assert!(value.to_string().contains("PWNED"), "{args:?}");
        }
    }
    let shown = stdout_of(&osprobe(&db).args(["show", &id]).output().unwrap());
    assert!(shown.contains("\\x1b]0;PWNED\\x07\\x1b[31m"), "{shown}");
    assert!(shown.contains("\\u{202e}gpj"), "{shown}");
}

#[test]
fn a_store_link_planted_by_another_user_is_refused_and_its_target_untouched() {
    if !common::need_root("a_store_link_planted_by_another_user_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"root's file\n").unwrap();
    let link = dir.path().join("results.db");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let out = osprobe(&link)
        .args(["bench", "cpu.syscall", "--profile", "smoke"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a symbolic link osprobe will not follow")
            && err.contains("owned by uid 65534"),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file\n");
    // The user's own link is followed: the store is its target.
    let own = dir.path().join("own.db");
    let real = dir.path().join("real.db");
    std::os::unix::fs::symlink(&real, &own).unwrap();
    stdout_of(
        &osprobe(&own)
            .args(["bench", "cpu.syscall", "--profile", "smoke"])
            .output()
            .unwrap(),
    );
    assert!(real.is_file() && std::fs::symlink_metadata(&own).unwrap().is_symlink());
}

#[test]
fn a_report_link_planted_at_its_name_is_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    stdout_of(
        &osprobe(&db)
            .args(["bench", "cpu.syscall", "--profile", "smoke"])
            .output()
            .unwrap(),
    );
    let id = stdout_of(&osprobe(&db).args(["history", "--json"]).output().unwrap());
    let runs: Value = serde_json::from_str(&id).unwrap();
    let id = runs[0]["id"].as_str().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    let planted = dir.path().join(format!("osprobe-report-{id}.html"));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let mut cmd = osprobe(&db);
    cmd.current_dir(dir.path()).args(["report", id]);
    stdout_of(&cmd.output().unwrap());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    let written = std::fs::symlink_metadata(&planted).unwrap();
    assert!(written.is_file(), "the link itself was replaced");
    assert!(std::fs::read_to_string(&planted).unwrap().contains("<html"));
}
