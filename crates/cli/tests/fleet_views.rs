//! Labels and cross-host views through the binary, on real runs made here
//! with `--label` (the way a fleet run stores hosts' results): history's
//! filters, `HOST:REF` references in compare and show, and the fleet page
//! of `report --fleet`; in a SQLite file and in a private PostgreSQL.

use assert_cmd::Command;
use osprobe_store::testing::PrivatePostgres;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;

mod common;

fn osprobe(db: &OsStr) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.arg("--db").arg(db).arg("--quiet");
    cmd
}

fn ok(db: &OsStr, args: &[&str]) -> String {
    let out = osprobe(db).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "osprobe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Run `args`, require exit code `code`, return stderr.
fn fails(db: &OsStr, args: &[&str], code: i32) -> String {
    let out = osprobe(db).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "osprobe {args:?}: {stderr}");
    stderr
}

fn history(db: &OsStr, filters: &[&str]) -> Vec<Value> {
    let mut args = vec!["history", "--json"];
    args.extend_from_slice(filters);
    serde_json::from_str::<Value>(&ok(db, &args))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Fill the store `db` as a fleet run leaves it: four hosts' runs of
/// cpu.syscall, one network result from web-1 to web-2 over loopback
/// (round trip and bandwidth, as two runs), all labelled with fleet F1;
/// and one run of this machine without labels.
fn fill_like_a_fleet(db: &OsStr) {
    for host in ["web-1", "web-2", "web-3", "db-1"] {
        let group = if host.starts_with("web") { "web" } else { "db" };
        ok(
            db,
            &[
                "bench",
                "cpu.syscall",
                "--profile",
                "smoke",
                "--brief",
                "--label",
                &format!("host={host}"),
                "--label",
                &format!("groups={group}"),
                "--label",
                "fleet=F1",
            ],
        );
    }
    for test in ["rtt", "bandwidth"] {
        ok(
            db,
            &[
                "net",
                test,
                "--profile",
                "smoke",
                "--brief",
                "--label",
                "pair=web-1 -> web-2",
                "--label",
                "fleet=F1",
            ],
        );
    }
    ok(
        db,
        &["bench", "cpu.syscall", "--profile", "smoke", "--brief"],
    );
}

#[test]
fn views_over_labelled_runs_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db");
    views(db.as_os_str(), dir.path());
}

#[test]
fn views_over_labelled_runs_in_postgres() {
    let pg = match PrivatePostgres::start() {
        Ok(pg) => pg,
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            return;
        }
    };
    let mut admin = pg.connect("postgres").unwrap();
    admin.batch_execute("CREATE DATABASE fleet_views").unwrap();
    let dir = tempfile::tempdir().unwrap();
    views(OsStr::new(&pg.url("fleet_views")), dir.path());
}

/// Everything the views do, on the store `db`; files go to `dir`.
fn views(db: &OsStr, dir: &Path) {
    fill_like_a_fleet(db);

    // history: the labels are stored and shown, the filters AND.
    let all = history(db, &[]);
    assert_eq!(all.len(), 7);
    let web2 = history(db, &["--host", "web-2"]);
    assert_eq!(web2.len(), 1);
    assert_eq!(web2[0]["labels"]["host"], "web-2");
    assert_eq!(web2[0]["labels"]["fleet"], "F1");
    assert_eq!(history(db, &["--label", "fleet=F1"]).len(), 6);
    assert_eq!(
        history(db, &["--label", "fleet=F1", "--label", "groups=web"]).len(),
        3
    );
    assert_eq!(
        history(db, &["--host", "db-1", "--label", "groups=web"]).len(),
        0
    );
    let unlabelled = all.last().unwrap();
    assert!(unlabelled.get("labels").is_none());
    let hostname = unlabelled["hostname"].as_str().unwrap().to_string();
    let table = String::from_utf8(
        osprobe(db)
            .env("COLUMNS", "300")
            .args(["history", "--label", "fleet=F1"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        table.contains("labels") && table.contains("fleet=F1; groups=db"),
        "{table}"
    );
    assert!(table.contains("pair=web-1 -> web-2"), "{table}");
    let none = ok(db, &["history", "--label", "fleet=F2"]);
    assert!(
        none.contains("no run of the 7 in") && none.contains("matches --label fleet=F2"),
        "{none}"
    );

    // compare: the same experiment on two hosts, named in the header.
    let out = ok(
        db,
        &[
            "compare",
            "web-1:latest",
            "web-2:latest",
            "--threshold",
            "1000%",
        ],
    );
    assert!(
        out.contains(&format!("host web-1 (hostname {hostname})")),
        "{out}"
    );
    assert!(
        out.contains(&format!("host web-2 (hostname {hostname})")),
        "{out}"
    );
    assert!(out.contains("cpu.syscall"), "{out}");
    let json: Value = serde_json::from_str(&ok(
        db,
        &[
            "compare",
            "web-1:latest",
            "db-1:latest",
            "--threshold",
            "1000%",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(json["a"]["host_label"], "web-1");
    assert_eq!(json["b"]["host_label"], "db-1");
    let err = fails(db, &["compare", "db-2:latest", "latest"], 2);
    assert!(
        err.contains("db-2:latest: no run of host 'db-2'; hosts in the store: ")
            && err.contains("db-1, ")
            && err.contains(&hostname),
        "{err}"
    );
    let err = fails(db, &["compare", "web-1:latest~1", "latest"], 2);
    assert!(err.contains("the host has 1 run"), "{err}");
    // No run is labelled with this machine's hostname: its hostname
    // stands in, and osprobe says so. The pair results do not count.
    let own = format!("{hostname}:latest");
    let out = osprobe(db).args(["show", &own, "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("no run is labelled host={hostname}")),
        "{stderr}"
    );
    let shown = common::json_of(&out);
    assert_eq!(shown["id"], unlabelled["id"]);

    // show: the labels in the header.
    let out = ok(db, &["show", "web-3:latest"]);
    assert!(
        out.contains("labels: fleet=F1; groups=web; host=web-3"),
        "{out}"
    );

    // report --fleet: the page of the latest fleet.
    let page = dir.join("fleet.html");
    let out = ok(db, &["report", "--fleet", "--out", page.to_str().unwrap()]);
    assert!(out.contains("fleet F1, 6 runs"), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&html, options).expect("the page is XHTML");
    let host_rows: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("tr"))
        .filter(|n| n.ancestors().any(|a| a.attribute("class") == Some("fleet")))
        .filter_map(|n| n.first_element_child()?.text().map(str::to_string))
        .collect();
    assert_eq!(
        host_rows,
        ["host", "db-1", "web-1", "web-2", "web-3", "fleet median"]
    );
    assert!(html.contains("cpu.syscall"), "{html}");
    // Both matrices, each with its one measured pair out of 4 x 4.
    let svgs: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("svg"))
        .collect();
    assert_eq!(svgs.len(), 2);
    for svg in svgs {
        let class = |c: &str| {
            svg.descendants()
                .filter(|n| n.attribute("class") == Some(c))
                .count()
        };
        assert_eq!((class("cell"), class("self")), (1, 4));
        assert_eq!(class("missing"), 16 - 4 - 1 + 1);
        let title = svg
            .descendants()
            .filter(|n| n.attribute("class") == Some("cell"))
            .find_map(|n| n.first_element_child()?.text())
            .unwrap();
        assert!(title.starts_with("web-1 -> web-2: "), "{title}");
    }
    // The same page by the fleet's id, to the default file name.
    let out = osprobe(db)
        .current_dir(dir)
        .args(["report", "--fleet", "F1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(dir.join("osprobe-fleet-F1.html").exists());
    let err = fails(db, &["report", "--fleet", "F9"], 2);
    assert!(
        err.contains("--fleet F9: no such fleet; fleets in the store: F1 (6 runs)"),
        "{err}"
    );
    // A labelled run's own report names its fleet page.
    let single = dir.join("one.html");
    ok(
        db,
        &["report", "web-1:latest", "--out", single.to_str().unwrap()],
    );
    let html = std::fs::read_to_string(&single).unwrap();
    assert!(html.contains("osprobe report --fleet F1"), "{html}");
}

#[test]
fn bad_labels_are_refused_before_anything_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.db");
    let db = path.as_os_str();
    for (label, why) in [
        ("Host=a", "the key may hold only a-z, 0-9"),
        ("host", "expected KEY=VALUE"),
        ("host=", "the value is empty"),
    ] {
        let err = fails(
            db,
            &[
                "bench",
                "cpu.syscall",
                "--profile",
                "smoke",
                "--label",
                label,
            ],
            2,
        );
        assert!(
            err.contains(why) && err.contains("--label"),
            "{label}: {err}"
        );
    }
    let err = fails(
        db,
        &[
            "run",
            "--profile",
            "smoke",
            "--only",
            "cpu.syscall",
            "--label",
            "a=1",
            "--label",
            "a=2",
        ],
        2,
    );
    assert!(err.contains("--label a: given twice"), "{err}");
    // Nothing was measured, so nothing was stored.
    assert!(!path.exists() || history(db, &[]).is_empty());
    let err = fails(db, &["history", "--label", "x"], 2);
    assert!(err.contains("expected KEY=VALUE"), "{err}");
}
