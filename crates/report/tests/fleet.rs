//! The fleet page on synthetic labelled runs (nothing is measured): rows
//! per host, headline columns, outliers, the pair heat maps' structure and
//! geometry, and the page as well-formed XML.

use osprobe_core::{Environment, Measurement, Params, Profile, Run, Summary, Unit};
use osprobe_report::fleet::{self, heatmap, outliers::Side, view};

mod geometry;

/// Parse a whole page (it starts with `<!DOCTYPE html>`).
fn parse_page(html: &str) -> roxmltree::Document<'_> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(html, options).expect("the page is well-formed XML")
}
use geometry::{number_attr, text_box, text_outside_canvas};

fn m(experiment: &str, metric: &str, params: Params, unit: Unit, p50: f64) -> Measurement {
    Measurement::new(
        experiment,
        metric,
        params,
        unit,
        Summary::of(&[p50 * 0.99, p50, p50 * 1.01]).unwrap(),
    )
}

fn run(id: &str, started: &str, labels: &[(&str, &str)], measurements: Vec<Measurement>) -> Run {
    Run {
        schema: osprobe_core::SCHEMA_VERSION,
        id: id.into(),
        started: started.into(),
        ended: started.into(),
        osprobe_version: "0.1.0".into(),
        profile: Profile::Smoke,
        command: "run --profile smoke".into(),
        environment: Environment {
            hostname: format!("machine-{id}"),
            ..Environment::default()
        },
        measurements,
        skipped: Vec::new(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        far_ends: Vec::new(),
    }
}

/// A host's run: cpu.syscall (headline getppid, then getuid) and
/// mem.bandwidth.
fn host_run(id: &str, host: &str, syscall_ns: f64, bandwidth: f64) -> Run {
    run(
        id,
        &format!("2026-01-01T00:00:{id}Z"),
        &[("host", host), ("fleet", "F1"), ("groups", "web,eu")],
        vec![
            m(
                "cpu.syscall",
                "getppid",
                Params::new().with("call", "getppid"),
                Unit::Nanoseconds,
                syscall_ns,
            ),
            m(
                "cpu.syscall",
                "getuid",
                Params::new().with("call", "getuid"),
                Unit::Nanoseconds,
                90.0,
            ),
            m(
                "mem.bandwidth",
                "read",
                Params::new().with("size", 1i64 << 26),
                Unit::BytesPerSecond,
                bandwidth,
            ),
        ],
    )
}

/// A network result from `src` to `dst`: net.rtt (tcp, then udp) and
/// net.bandwidth, with the peer's address as `to` (which differs per pair).
fn pair_run(id: &str, src: &str, dst: &str, rtt_ns: f64, bytes_per_s: f64) -> Run {
    let params = |proto: &str| {
        Params::new()
            .with("path", "remote")
            .with("proto", proto)
            .with("to", format!("198.18.0.{id}").as_str())
    };
    run(
        id,
        &format!("2026-01-01T00:01:{id}Z"),
        &[("pair", &format!("{src} -> {dst}")), ("fleet", "F1")],
        vec![
            m("net.rtt", "tcp", params("tcp"), Unit::Nanoseconds, rtt_ns),
            m(
                "net.rtt",
                "udp",
                params("udp"),
                Unit::Nanoseconds,
                rtt_ns * 0.9,
            ),
            m(
                "net.bandwidth",
                "sender",
                Params::new().with("path", "remote").with("to", "x"),
                Unit::BytesPerSecond,
                bytes_per_s,
            ),
        ],
    )
}

fn fleet_runs() -> Vec<Run> {
    vec![
        host_run("10", "web-1", 100.0, 10e9),
        host_run("11", "web-2", 102.0, 10.2e9),
        host_run("12", "web-3", 98.0, 9.9e9),
        host_run("13", "db-1", 101.0, 10.1e9),
        host_run("14", "db-2", 250.0, 10e9),
        pair_run("20", "web-1", "web-2", 50_000.0, 1.1e9),
        pair_run("21", "web-2", "db-1", 80_000.0, 0.9e9),
        pair_run("22", "db-1", "web-1", 400_000.0, 0.1e9),
    ]
}

#[test]
fn one_row_per_host_one_column_per_headline_and_the_outlier_marked() {
    let v = view("F1", &fleet_runs());
    let hosts: Vec<&str> = v.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(hosts, ["db-1", "db-2", "web-1", "web-2", "web-3"]);
    let columns: Vec<String> = v
        .columns
        .iter()
        .map(|c| format!("{} {}", c.experiment, c.point.label()))
        .collect();
    assert_eq!(
        columns,
        [
            "cpu.syscall getppid call=getppid",
            "mem.bandwidth read size=64M"
        ]
    );
    let syscall = &v.columns[0];
    let marked: Vec<Option<Side>> = syscall
        .cells
        .iter()
        .map(|c| c.as_ref().unwrap().outlier)
        .collect();
    assert_eq!(marked, [None, Some(Side::High), None, None, None]);
    assert!(v.columns[1]
        .cells
        .iter()
        .all(|c| c.as_ref().unwrap().outlier.is_none()));

    let html = fleet::page("F1", &fleet_runs());
    let doc = parse_page(&html);
    let rows: Vec<_> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("tr") && n.ancestors().any(|a| a.attribute("class") == Some("fleet"))
        })
        .collect();
    // Header, five hosts, the median.
    assert_eq!(rows.len(), 7, "{html}");
    let outliers: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("num outlier"))
        .collect();
    assert_eq!(outliers.len(), 1);
    let text: String = outliers[0].descendants().filter_map(|n| n.text()).collect();
    assert!(
        text.contains("250.0") && text.contains("▲ high (worse)"),
        "{text}"
    );
    assert!(outliers[0]
        .attribute("title")
        .unwrap()
        .contains("above Q3 + 1.5 IQR"));
    assert!(html.contains("1 value marked as outlier"), "{html}");
}

#[test]
fn a_host_whose_headline_differs_still_fills_the_common_column() {
    let mut runs = fleet_runs();
    // web-3 measured getuid first: its getppid still fills the column.
    runs[2].measurements.swap(0, 1);
    // db-2 did not measure getppid at all: a dash, not a zero.
    runs[4].measurements.remove(0);
    let v = view("F1", &runs);
    let syscall = &v.columns[0];
    assert_eq!(syscall.point.metric, "getppid");
    assert_eq!(syscall.cells[4].as_ref().unwrap().value, 98.0);
    assert!(syscall.cells[1].is_none());
    let html = fleet::page("F1", &runs);
    assert!(
        html.contains("<td class=\"missing\" title=\"not measured on this host\">"),
        "{html}"
    );
}

#[test]
fn the_pair_matrices_hold_every_host_with_missing_pairs_missing() {
    let v = view("F1", &fleet_runs());
    assert_eq!(v.rtt.hosts, ["db-1", "db-2", "web-1", "web-2", "web-3"]);
    // The headline of net.rtt is tcp, whatever address each pair used.
    let point = v.rtt.point.as_ref().unwrap();
    assert_eq!(point.label(), "tcp path=remote proto=tcp");
    let at = |m: &view::Matrix, s: usize, d: usize| m.values[s][d].as_ref().map(|(v, _)| *v);
    assert_eq!(at(&v.rtt, 2, 3), Some(50_000.0)); // web-1 -> web-2
    assert_eq!(at(&v.rtt, 3, 0), Some(80_000.0)); // web-2 -> db-1
    assert_eq!(at(&v.rtt, 0, 2), Some(400_000.0)); // db-1 -> web-1
    assert_eq!(at(&v.rtt, 3, 2), None); // web-2 -> web-1: not measured
    assert_eq!(at(&v.bandwidth, 0, 2), Some(0.1e9));
    assert_eq!(v.rtt.present().count(), 3);
    assert_eq!(v.pairs.len(), 3);
}

/// The SVG of a matrix, parsed, with checks every heat map must pass.
fn check_heatmap(svg: &str, hosts: usize, measured: usize) {
    let doc = roxmltree::Document::parse(svg).expect("the heat map is well-formed XML");
    let class = |c: &str| -> Vec<roxmltree::Node> {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("class") == Some(c))
            .collect()
    };
    let (cells, missing, legend) = (class("cell"), class("missing"), class("legend"));
    let own = class("self");
    assert_eq!(cells.len(), measured);
    // A host with itself: the diagonal.
    assert_eq!(own.len(), hosts);
    // Every other pair, and one swatch in the legend.
    assert_eq!(missing.len(), hosts * hosts - hosts - measured + 1);
    assert_eq!(legend.len(), 40);
    // Every cell says which pair and run it is when hovered.
    for c in &cells {
        let title = c.children().find(|n| n.has_tag_name("title")).unwrap();
        assert!(title.text().unwrap().contains(" -> ") && title.text().unwrap().contains("(run "));
    }
    assert!(
        text_outside_canvas(svg).is_empty(),
        "{:?}",
        text_outside_canvas(svg)
    );
    // A value written in a cell stays inside it; any other text touches no
    // cell, missing cell or legend step.
    let boxes: Vec<(f64, f64, f64, f64)> = cells
        .iter()
        .chain(&missing)
        .chain(&own)
        .chain(&legend)
        .map(|r| {
            let n = |a| number_attr(*r, a);
            (n("x"), n("y"), n("x") + n("width"), n("y") + n("height"))
        })
        .collect();
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let b = text_box(t);
        let inside =
            |r: &(f64, f64, f64, f64)| b.0 >= r.0 && b.1 >= r.1 && b.2 <= r.2 && b.3 <= r.3;
        let overlaps = |r: &(f64, f64, f64, f64)| {
            b.0 < r.2 - 0.5 && r.0 < b.2 - 0.5 && b.1 < r.3 - 0.5 && r.1 < b.3 - 0.5
        };
        if t.attribute("fill").is_some() {
            assert!(
                boxes[..cells.len()].iter().any(inside),
                "{:?} leaves its cell",
                t.text()
            );
        } else {
            assert!(
                !boxes.iter().any(overlaps),
                "{:?} {b:?} over a cell",
                t.text()
            );
        }
    }
}

#[test]
fn heat_maps_draw_cells_missing_pairs_and_a_legend_that_fit() {
    let v = view("F1", &fleet_runs());
    let rtt = heatmap::render(&v.rtt, "Round-trip time").unwrap();
    check_heatmap(&rtt, 5, 3);
    let bandwidth = heatmap::render(&v.bandwidth, "Bandwidth").unwrap();
    check_heatmap(&bandwidth, 5, 3);
    // 50 µs .. 400 µs spans less than ten times: linear; 0.1 .. 1.1 GB/s
    // spans more: logarithmic.
    assert!(rtt.contains("linear scale") && rtt.contains("darker = worse: higher values"));
    assert!(
        bandwidth.contains("logarithmic scale")
            && bandwidth.contains("darker = worse: lower values")
    );

    // The worst pair is darkest in both maps: the slowest round trip, the
    // lowest bandwidth (both db-1 -> web-1).
    let fill_of = |svg: &str, pair: &str| -> String {
        let doc = roxmltree::Document::parse(svg).unwrap();
        doc.descendants()
            .filter(|n| n.attribute("class") == Some("cell"))
            .find(|n| {
                n.children()
                    .any(|c| c.text().is_some_and(|t| t.starts_with(pair)))
            })
            .and_then(|n| n.attribute("fill").map(str::to_string))
            .unwrap()
    };
    assert_eq!(fill_of(&rtt, "db-1 -> web-1"), heatmap::colour(1.0));
    assert_eq!(fill_of(&rtt, "web-1 -> web-2"), heatmap::colour(0.0));
    assert_eq!(fill_of(&bandwidth, "db-1 -> web-1"), heatmap::colour(1.0));
    assert_eq!(fill_of(&bandwidth, "web-1 -> web-2"), heatmap::colour(0.0));
}

#[test]
fn long_host_names_and_one_pair_still_fit() {
    let runs = vec![pair_run(
        "30",
        "a-rather-long-inventory-name.eu-west.example.org",
        "b",
        20_000.0,
        1e9,
    )];
    let v = view("F2", &runs);
    let svg = heatmap::render(&v.rtt, "Round-trip time").unwrap();
    check_heatmap(&svg, 2, 1);
    // One value: the legend shows it once.
    assert!(!svg.contains("darker = worse: lower"));
}

#[test]
fn a_fleet_without_pairs_or_hosts_says_so_in_words() {
    let three: Vec<Run> = fleet_runs().into_iter().take(3).collect();
    let html = fleet::page("F1", &three);
    assert!(
        html.contains("No column was measured by 4 hosts or more"),
        "{html}"
    );
    assert!(!html.contains("outlier\""), "{html}");
    let hosts_only: Vec<Run> = fleet_runs().into_iter().take(5).collect();
    let html = fleet::page("F1", &hosts_only);
    parse_page(&html);
    assert!(html.contains("no network results between hosts"), "{html}");
    assert!(!html.contains("<svg"));
    let pairs_only: Vec<Run> = fleet_runs().into_iter().skip(5).collect();
    let html = fleet::page("F1", &pairs_only);
    parse_page(&html);
    assert!(
        html.contains("No run of this fleet carries a host label"),
        "{html}"
    );
    assert_eq!(html.matches("<svg").count(), 2);
}

#[test]
fn each_figure_comes_from_the_latest_run_that_measured_it() {
    let mut runs = fleet_runs();
    // web-1 measured again: its syscall column shows the later value.
    runs.push(host_run("15", "web-1", 105.0, 10e9));
    // web-2 -> db-1 measured again, round trip only: the bandwidth of the
    // earlier run stays.
    let mut again = pair_run("23", "web-2", "db-1", 70_000.0, 1.0);
    again.measurements.retain(|m| m.experiment == "net.rtt");
    runs.push(again);
    runs.push(run(
        "16",
        "2026-01-01T00:02:00Z",
        &[("fleet", "F1")],
        vec![],
    ));
    runs.push(run(
        "17",
        "2026-01-01T00:02:01Z",
        &[("pair", "web-1 to web-2")],
        vec![],
    ));
    let v = view("F1", &runs);
    let web1 = v.hosts.iter().position(|h| h.name == "web-1").unwrap();
    assert_eq!(v.hosts[web1].runs, ["10", "15"]);
    let cell = v.columns[0].cells[web1].as_ref().unwrap();
    assert_eq!((cell.value, cell.run.as_str()), (105.0, "15"));
    let rtt = v.rtt.values[3][0].as_ref().unwrap();
    assert_eq!((rtt.0, rtt.1.as_str()), (70_000.0, "23"));
    let bandwidth = v.bandwidth.values[3][0].as_ref().unwrap();
    assert_eq!((bandwidth.0, bandwidth.1.as_str()), (0.9e9, "21"));
    assert_eq!(v.pair_count(), 3);
    assert_eq!(v.pairs.len(), 4);
    let reasons: Vec<String> = v
        .not_shown
        .iter()
        .map(|(id, why)| format!("{id}: {why}"))
        .collect();
    assert_eq!(
        reasons,
        [
            "16: it has neither a host nor a pair label",
            "17: its pair label 'web-1 to web-2' is not of the form SRC -> DST",
        ]
    );
    let html = fleet::page("F1 <&>", &runs);
    parse_page(&html);
    assert!(html.contains("osprobe fleet <code>F1 &lt;&amp;&gt;</code>"));
    assert!(html.contains("5 hosts · 3 pairs between hosts"), "{html}");
}
