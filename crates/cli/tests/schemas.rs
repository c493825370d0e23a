//! Every `--json` output has a JSON Schema in schema/, documented in
//! docs/json.md. The commands' real output is validated where the
//! commands are tested (rfs.rs, pager.rs, pager_processes.rs, cli.rs);
//! here: every schema is a valid, non-vacuous schema, documented, and the
//! link emulator's report (root) follows its own.

mod common;

use common::need_root;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schemas() -> Vec<(String, Value)> {
    let mut all: Vec<(String, Value)> = std::fs::read_dir(repo().join("schema"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".schema.json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, value)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

#[test]
fn every_schema_compiles_refuses_a_wrong_document_and_is_documented() {
    let docs = std::fs::read_to_string(repo().join("docs/json.md")).unwrap();
    let all = schemas();
    assert!(
        all.len() >= 9,
        "{:?}",
        all.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    for (name, schema) in &all {
        let validator = jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Not vacuous: a bare string is neither a report nor a list.
        assert!(
            !validator.is_valid(&Value::from("not an outcome")),
            "{name}"
        );
        assert_eq!(
            schema["$id"].as_str().unwrap(),
            format!("https://osprobe.invalid/schema/{name}"),
            "{name}"
        );
        assert!(
            docs.contains(&format!("schema/{name}")),
            "{name} is not documented in docs/json.md"
        );
    }
}

#[test]
fn the_link_report_follows_its_schema() {
    if !need_root("the link report") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("link.json");
    let out = Command::new(env!("CARGO_BIN_EXE_osprobe"))
        .args([
            "link", "--delay", "1ms", "--rate", "100mbit", "--queue", "100p", "--json",
        ])
        .arg(&file)
        .args([
            "--",
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "5",
            "$OSPROBE_LINK_PEER",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    common::assert_follows("link.schema.json", &report);
    // The pings crossed the link both ways, through the bottleneck.
    for way in ["uplink", "downlink"] {
        assert!(
            report[way]["packets_out"].as_u64().unwrap() >= 3,
            "{report:#}"
        );
        assert!(
            report[way]["queueing_delay"]["count"].as_u64().unwrap() >= 3,
            "{report:#}"
        );
    }
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("uplink   A->B: in "), "{text}");
}
