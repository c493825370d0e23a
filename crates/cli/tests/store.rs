//! The commands on a PostgreSQL store (`--db postgres://...` and
//! `$OSPROBE_DB`), and `export`/`import` between SQLite and PostgreSQL,
//! through the binary. The server is a private one the test starts
//! (osprobe_store::testing): a temp dir, a Unix socket, an unprivileged user.

use assert_cmd::Command;
use osprobe_store::testing::PrivatePostgres;
use serde_json::Value;
use std::path::Path;

mod common;

fn osprobe() -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    // Reports of runs in PostgreSQL go to the data directory: keep them
    // out of the real one.
    cmd.env_remove("OSPROBE_DB").arg("--quiet");
    cmd
}

fn private_postgres() -> Option<PrivatePostgres> {
    match PrivatePostgres::start() {
        Ok(pg) => Some(pg),
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            None
        }
    }
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn history_ids(db: &str, data: &Path) -> Vec<String> {
    let out = osprobe()
        .env("XDG_DATA_HOME", data)
        .args(["--db", db, "history", "--json"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_str(&ok(&out)).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

/// run, history, show, compare, report and reproduce on PostgreSQL, the
/// store named by --db or by $OSPROBE_DB.
#[test]
fn every_command_works_on_a_postgres_store() {
    let Some(pg) = private_postgres() else { return };
    let url = pg.fresh_database().unwrap();
    let url = url.secret();
    let data = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = osprobe()
            .env("XDG_DATA_HOME", data.path())
            .args(["--db", url, "run", "--profile", "smoke", "--only", "cpu.*"])
            .output()
            .unwrap();
        let text = ok(&out);
        assert!(text.contains("stored as run"), "{text}");
        assert!(text.contains(&format!("in {url}")), "{text}");
    }
    let ids = history_ids(url, data.path());
    assert_eq!(ids.len(), 2);
    // The same store through $OSPROBE_DB.
    let with_env = |args: &[&str]| {
        let mut cmd = Command::cargo_bin("osprobe").unwrap();
        cmd.env("OSPROBE_DB", url)
            .env("XDG_DATA_HOME", data.path())
            .arg("--quiet")
            .args(args);
        cmd.output().unwrap()
    };
    let shown: Value = serde_json::from_str(&ok(&with_env(&["show", "latest", "--json"]))).unwrap();
    assert_eq!(shown["id"], ids[1].as_str());
    assert!(!common::measurements(&shown, "cpu.syscall").is_empty());
    let compared: Value = serde_json::from_str(&ok(&with_env(&[
        "compare",
        "latest~1",
        "latest",
        "--json",
        "--threshold",
        "1000%",
    ])))
    .unwrap();
    assert!(!compared["pairs"].as_array().unwrap().is_empty());
    let report = data.path().join("r.html");
    ok(&with_env(&[
        "report",
        &ids[0][..12],
        "--out",
        report.to_str().unwrap(),
    ]));
    assert!(std::fs::read_to_string(&report).unwrap().contains(&ids[0]));
    ok(&with_env(&["reproduce", "latest"]));
    // The report `run` writes goes to the data directory.
    assert!(data
        .path()
        .join("osprobe/reports")
        .join(format!("{}.html", ids[1]))
        .exists());
}

/// A laptop's SQLite runs exported and imported into PostgreSQL, twice (the
/// second stores nothing), and back into a new SQLite file: the same runs.
#[test]
fn export_and_import_between_sqlite_and_postgres() {
    let Some(pg) = private_postgres() else { return };
    let url = pg.fresh_database().unwrap();
    let url = url.secret();
    let dir = tempfile::tempdir().unwrap();
    let laptop = dir.path().join("laptop.db");
    let laptop = laptop.to_str().unwrap();
    for _ in 0..2 {
        ok(&osprobe()
            .args([
                "--db",
                laptop,
                "run",
                "--profile",
                "smoke",
                "--only",
                "cpu.syscall",
            ])
            .output()
            .unwrap());
    }
    let exported = ok(&osprobe().args(["--db", laptop, "export"]).output().unwrap());
    assert_eq!(exported.lines().count(), 2);
    let twice = ok(&osprobe()
        .args(["--db", laptop, "export", "latest", "latest~0"])
        .output()
        .unwrap());
    assert_eq!(
        twice.lines().count(),
        1,
        "a run named twice is written once"
    );
    let out = osprobe()
        .args(["--db", laptop, "export", "latest", "01NOSUCH"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing half-written");
    assert!(String::from_utf8_lossy(&out.stderr).contains("'01NOSUCH'"));
    let file = dir.path().join("runs.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let file = file.to_str().unwrap();
    let out = ok(&osprobe()
        .args(["--db", url, "import", file])
        .output()
        .unwrap());
    assert!(
        out.contains("imported 2 new runs") && out.contains("(0 already there)"),
        "{out}"
    );
    let out = ok(&osprobe()
        .args(["--db", url, "import", file])
        .output()
        .unwrap());
    assert!(
        out.contains("imported 0 new runs") && out.contains("(2 already there)"),
        "{out}"
    );
    assert_eq!(
        history_ids(url, dir.path()),
        history_ids(laptop, dir.path())
    );

    // Back through a pipe (`-`), one run chosen by prefix.
    let first = &history_ids(url, dir.path())[0];
    let one = ok(&osprobe()
        .args(["--db", url, "export", &first[..10]])
        .output()
        .unwrap());
    let copy = dir.path().join("copy.db");
    let copy = copy.to_str().unwrap();
    let out = ok(&osprobe()
        .args(["--db", copy, "import", "-"])
        .write_stdin(one)
        .output()
        .unwrap());
    assert!(out.contains("imported 1 new run "), "{out}");
    let show = |db: &str| {
        ok(&osprobe()
            .args(["--db", db, "show", first, "--json"])
            .output()
            .unwrap())
    };
    assert_eq!(show(url), show(laptop));
    assert_eq!(show(copy), show(laptop));
}

/// A bad line anywhere in a file: its number and reason, exit 2; the
/// import streams, so the good run before it is stored and the error says
/// so, and importing the fixed file again stores nothing twice.
#[test]
fn a_bad_line_names_its_number_and_the_runs_before_it_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.db");
    let source = source.to_str().unwrap();
    ok(&osprobe()
        .args([
            "--db",
            source,
            "run",
            "--profile",
            "smoke",
            "--only",
            "cpu.syscall",
        ])
        .output()
        .unwrap());
    let good = ok(&osprobe().args(["--db", source, "export"]).output().unwrap());
    let mut renamed: Value = serde_json::from_str(good.trim()).unwrap();
    renamed["id"] = "not-a-ulid".into();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(&file, format!("{good}\n{renamed}\n")).unwrap();
    let target = dir.path().join("target.db");
    let out = osprobe()
        .args([
            "--db",
            target.to_str().unwrap(),
            "import",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl line 3: run id 'not-a-ulid' is not a ULID")
            && err.contains("the 1 new run before it was imported"),
        "{err}"
    );
    let target = target.to_str().unwrap();
    assert_eq!(history_ids(target, dir.path()).len(), 1);
    std::fs::write(&file, format!("{good}\n")).unwrap();
    let again = ok(&osprobe()
        .args(["--db", target, "import", file.to_str().unwrap()])
        .output()
        .unwrap());
    assert!(again.contains("imported 0 new runs"), "{again}");
    assert!(again.contains("(1 already there)"), "{again}");
    let out = osprobe()
        .args([
            "--db",
            source,
            "import",
            dir.path().join("absent").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent"));
}

/// A URL nothing answers at: one line naming it with its password hidden,
/// exit 1, before anything is measured, and nothing stored anywhere.
#[test]
fn an_unreachable_store_is_one_line_and_nothing_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://alice:hunter2@/runs?host={}&port=5999",
        dir.path().display()
    );
    for args in [
        vec!["run", "--profile", "smoke", "--only", "cpu.syscall"],
        vec!["history"],
        vec!["show", "latest"],
        vec!["compare", "latest~1", "latest"],
        vec!["import", "-"],
    ] {
        let out = osprobe()
            .env("XDG_DATA_HOME", dir.path())
            .args(["--db", &url])
            .args(&args)
            .write_stdin("")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "one line for {args:?}: {err}");
        assert!(
            err.starts_with(
                "osprobe: cannot connect to results database postgres://alice:***@/runs"
            ),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?} printed nothing");
    }
    let out = osprobe()
        .args(["--db", "postgres://alice@db:notaport/runs", "history"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("postgres://USER"));
}

/// Where the password comes from, as libpq users expect: the URL, else
/// $PGPASSWORD, else the password file ($PGPASSFILE or ~/.pgpass), which
/// is ignored when others may read it. Without one: one line, exit 1.
#[test]
fn passwords_from_the_url_pgpassword_or_the_password_file() {
    use std::os::unix::fs::PermissionsExt;
    const SECRET: &str = "s3cret-pw";
    let pg = match PrivatePostgres::start_with_password(SECRET) {
        Ok(pg) => pg,
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            return;
        }
    };
    let url = pg.fresh_database().unwrap();
    let url = url.secret().to_string();
    let home = tempfile::tempdir().unwrap();
    let history = |url: &str, env: &[(&str, &str)]| {
        let mut cmd = osprobe();
        cmd.env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .env_remove("PGUSER")
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.args(["--db", url, "history"]).output().unwrap()
    };
    // None given: refused by the server, one line, password not needed to say so.
    let out = history(&url, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("osprobe: cannot connect to results database"),
        "{err}"
    );
    assert!(err.contains("password"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // In the URL (and never echoed).
    let with_pw = url.replacen("osprobe@", &format!("osprobe:{SECRET}@"), 1);
    ok(&history(&with_pw, &[]));
    let out = history(&with_pw.replace(SECRET, "wrong"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("wrong") && err.contains("osprobe:***@"),
        "{err}"
    );
    // $PGPASSWORD.
    ok(&history(&url, &[("PGPASSWORD", SECRET)]));
    // ~/.pgpass: matched on the socket directory, port, database and user.
    let pgpass = home.path().join(".pgpass");
    let socket = pg.socket_dir().display().to_string().replace(':', "\\:");
    std::fs::write(
        &pgpass,
        format!("otherhost:*:*:*:nope\n{socket}:5432:*:osprobe:{SECRET}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(&history(&url, &[]));
    // ... through $PGPASSFILE too,
    let elsewhere = home.path().join("elsewhere");
    std::fs::rename(&pgpass, &elsewhere).unwrap();
    ok(&history(
        &url,
        &[("PGPASSFILE", elsewhere.to_str().unwrap())],
    ));
    // ... but not when others may read it (as libpq).
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = history(&url, &[("PGPASSFILE", elsewhere.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(1));
}
