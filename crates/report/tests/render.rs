//! Golden tests of the HTML report and its plots on fixed result data built
//! here (nothing is measured): the page and every SVG parse as XML, plots
//! are chosen by the generic rule and the special cases, and carry their
//! series names and axis labels with units.

use osprobe_core::environment::CacheInfo;
use osprobe_core::model::{Histogram, Prediction, Skipped};
use osprobe_core::plot_view::{ExpectedLine, InferredCaches, PlotView, PlotViews};
use osprobe_core::{Environment, Measurement, Params, Profile, Run, Summary, Unit};
use osprobe_report::chart;
use osprobe_report::html::Report;
use osprobe_report::plot::{Kind, Plot};

mod geometry;
use geometry::{number_attr, text_box, text_outside_canvas, text_over_marks};

/// The views the experiments plotted here declare (mem.latency, net.cc,
/// net.userspace and time.sleep in their crates; the cli's registry tests
/// check those declarations), built here since this crate sees no
/// experiment.
fn views() -> PlotViews {
    let mut views = PlotViews::default();
    views.insert(
        "mem.latency",
        PlotView {
            series: Some("stride"),
            log_x: true,
            cache_markers: true,
            inferred_caches: Some(InferredCaches {
                experiment: "mem.caches",
                prefix: "l",
                suffix: "_size",
            }),
            ..PlotView::default()
        },
    );
    views.insert(
        "net.cc",
        PlotView {
            series: Some("cc"),
            bars_for_series: true,
            ..PlotView::default()
        },
    );
    views.insert(
        "net.userspace",
        PlotView {
            series: Some("clock"),
            expected: Some(ExpectedLine {
                metrics: &["min_rtt", "srtt"],
                param: "delay",
                factor: 2.0,
                label: "configured round trip (2 x delay)",
            }),
            ..PlotView::default()
        },
    );
    views.insert(
        "time.sleep",
        PlotView {
            param_units: &[("requested", Unit::Nanoseconds, 1e3)],
            ..PlotView::default()
        },
    );
    views
}

fn plots(run: &Run) -> Vec<Plot> {
    osprobe_report::plot::plots(run, &views())
}

fn m(experiment: &str, metric: &str, params: Params, unit: Unit, p50: f64) -> Measurement {
    Measurement::new(
        experiment,
        metric,
        params,
        unit,
        Summary::of(&[p50 * 0.95, p50, p50 * 1.05]).unwrap(),
    )
}

fn run(measurements: Vec<Measurement>) -> Run {
    let mut environment = Environment {
        hostname: "testhost <&>".into(),
        ..Environment::default()
    };
    for (level, kind, size) in [
        (1, "Data", 32 << 10),
        (1, "Instruction", 32 << 10),
        (2, "Unified", 1 << 20),
        (3, "Unified", 32 << 20),
    ] {
        environment.caches.push(CacheInfo {
            level,
            kind: kind.into(),
            size_bytes: size,
            ..CacheInfo::default()
        });
    }
    Run {
        schema: osprobe_core::SCHEMA_VERSION,
        id: "01JTESTRUN0000000000000000".into(),
        started: "2025-01-01T00:00:00Z".into(),
        ended: "2025-01-01T00:01:00Z".into(),
        osprobe_version: "0.1.0".into(),
        profile: Profile::Full,
        command: "run --only 'mem.*' & <more>".into(),
        environment,
        measurements,
        skipped: vec![Skipped {
            experiment: "net.rtt".into(),
            params: Params::new().with("path", "netns"),
            reason: "needs root".into(),
        }],
        labels: Default::default(),
        far_ends: Vec::new(),
    }
}

/// mem.latency over sizes and two strides, mem.caches' inferred sizes, a
/// categorical experiment, net.cc, a histogram and a lone measurement.
fn sample_run() -> Run {
    let mut ms = Vec::new();
    for stride in [64i64, 4096] {
        for (i, size) in [4096i64, 65536, 1 << 20, 16 << 20, 256 << 20]
            .into_iter()
            .enumerate()
        {
            let params = Params::new()
                .with("pattern", "random")
                .with("size", size)
                .with("stride", stride);
            ms.push(m(
                "mem.latency",
                "load",
                params,
                Unit::Nanoseconds,
                [1.0, 3.0, 10.0, 40.0, 90.0][i] * (stride as f64 / 64.0).sqrt(),
            ));
        }
    }
    ms.push(m(
        "mem.caches",
        "l2_size",
        Params::new(),
        Unit::Bytes,
        1.1 * 1048576.0,
    ));
    for kind in ["process", "thread", "coroutine"] {
        ms.push(m(
            "proc.ctx_switch",
            "switch",
            Params::new().with("kind", kind),
            Unit::Nanoseconds,
            1500.0,
        ));
    }
    for (cc, rate) in [("bbr", 9e9), ("cubic", 12e9), ("reno", 11e9)] {
        let mut t = m(
            "net.cc",
            "throughput",
            Params::new().with("cc", cc).with("sndbuf", 0),
            Unit::BitsPerSecond,
            rate,
        );
        t.prediction = Some(Prediction::bound(10e9, "sndbuf / RTT").within(0.1));
        ms.push(t);
    }
    let mut rtt = m(
        "net.rtt",
        "tcp",
        Params::new().with("proto", "tcp"),
        Unit::Nanoseconds,
        20_000.0,
    );
    let samples: Vec<f64> = (1..200).map(|i| 10_000.0 + (i * i) as f64 * 10.0).collect();
    rtt.histogram = Histogram::log_spaced(&samples, 24);
    ms.push(rtt);
    ms.push(
        m(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            63.0,
        )
        .note("a note with <markup> & \"quotes\""),
    );
    run(ms)
}

/// The text of a page that must parse as XHTML.
fn page_text(html: &str) -> String {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(html, opts).expect("XHTML parses");
    doc.descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" ")
}

fn svg_texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::to_string))
        .collect()
}

fn find<'a>(plots: &'a [Plot], title_start: &str) -> &'a Plot {
    plots
        .iter()
        .find(|p| p.title.starts_with(title_start))
        .unwrap_or_else(|| panic!("no plot '{title_start}' in {:?}", titles(plots)))
}

fn titles(plots: &[Plot]) -> Vec<&str> {
    plots.iter().map(|p| p.title.as_str()).collect()
}

#[test]
fn memory_latency_is_a_log_plot_per_stride_with_cache_levels_marked() {
    let run = sample_run();
    let plots = plots(&run);
    let p = find(&plots, "mem.latency load against size");
    let Kind::Lines(lines) = &p.kind else {
        panic!("mem.latency is a line plot")
    };
    assert!(lines.x.log, "working sets span decades: log x");
    assert_eq!(lines.x.unit, Unit::Bytes);
    let names: Vec<&str> = lines.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stride=64", "stride=4K"]);
    assert_eq!(p.fixed, "pattern=random");
    let labels: Vec<&str> = lines.markers.iter().map(|m| m.label.as_str()).collect();
    assert!(labels.contains(&"L1 32 KiB (sysfs)"), "{labels:?}");
    assert!(labels.contains(&"L2 1.1 MiB (inferred)"), "{labels:?}");
    // The instruction cache is not a data working-set boundary.
    assert_eq!(labels.iter().filter(|l| l.starts_with("L1 ")).count(), 1);

    let texts = svg_texts(&chart::render(p));
    for expected in [
        "size (bytes, log scale)",
        "load median (time, log scale)",
        "stride=64",
        "stride=4K",
        "4 KiB",
        "1 MiB",
        "L3 32 MiB (sysfs)",
    ] {
        assert!(
            texts.iter().any(|t| t == expected),
            "'{expected}' missing from {texts:?}"
        );
    }
    // Readable y ticks with units.
    assert!(texts.iter().any(|t| t == "10 ns"), "{texts:?}");
}

/// The special plots come from the views, not from the experiments' names:
/// without a declared view mem.latency is a generic line plot.
#[test]
fn without_a_view_an_experiment_gets_the_generic_plot() {
    let run = sample_run();
    let generic = osprobe_report::plot::plots(&run, &PlotViews::default());
    let p = find(&generic, "mem.latency load against size");
    let Kind::Lines(lines) = &p.kind else {
        panic!("mem.latency is still a line plot")
    };
    assert!(lines.markers.is_empty(), "no view, no cache markers");
    let cc = find(&generic, "net.cc throughput");
    assert!(
        !matches!(&cc.kind, Kind::Bars(b) if b.series.iter().any(|s| s == "bbr")),
        "no view, no bar per algorithm"
    );
}

#[test]
fn words_become_grouped_bars_and_net_cc_one_bar_per_algorithm() {
    let run = sample_run();
    let plots = plots(&run);
    let Kind::Bars(bars) = &find(&plots, "proc.ctx_switch switch by kind").kind else {
        panic!("a categorical parameter gives bars")
    };
    assert_eq!(bars.groups, ["process", "thread", "coroutine"]);
    let cc = find(&plots, "net.cc throughput by cc");
    let Kind::Bars(bars) = &cc.kind else {
        panic!("net.cc gives bars")
    };
    assert_eq!(bars.groups, ["bbr", "cubic", "reno"]);
    let texts = svg_texts(&chart::render(cc));
    for expected in ["bbr", "cubic", "reno", "throughput median (bits/s)", "cc"] {
        assert!(texts.iter().any(|t| t == expected), "{expected}: {texts:?}");
    }
    assert!(texts.iter().any(|t| t.ends_with("Gbit/s")), "{texts:?}");
}

#[test]
fn a_histogram_gets_a_bar_plot_and_a_lone_value_none() {
    let run = sample_run();
    let plots = plots(&run);
    let h = find(&plots, "net.rtt tcp histogram");
    assert!(matches!(h.kind, Kind::Histogram(_)));
    let texts = svg_texts(&chart::render(h));
    assert!(texts.iter().any(|t| t == "samples (count)"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "tcp (time, log scale)"),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.starts_with("median ")), "{texts:?}");
    assert!(!titles(&plots).iter().any(|t| t.starts_with("cpu.syscall")));
}

#[test]
fn the_page_parses_as_xml_and_holds_every_part() {
    let run = sample_run();
    let html = Report::new(&run)
        .plot_views(views())
        .section("Reproduced <figures>", "<table><tr><td>1</td></tr></table>")
        .render();
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&html, opts).expect("XHTML parses");
    let text: String = doc
        .descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" ");
    for expected in [
        "osprobe run",
        "01JTESTRUN0000000000000000",
        "testhost <&>",
        "run --only 'mem.*' & <more>",
        "Environment",
        "Summary",
        "Reproduced <figures>",
        "Plots",
        "Missing",
        "needs root",
        "sndbuf / RTT",
        "a note with <markup> & \"quotes\"",
    ] {
        assert!(text.contains(expected), "'{expected}' missing");
    }
    // A ceiling exceeded beyond its tolerance says so.
    assert!(text.contains("disagrees: measured 1.20× the ceiling"));
    let svgs = doc.descendants().filter(|n| n.has_tag_name("svg")).count();
    assert_eq!(svgs, plots(&run).len());
    // Self-contained: nothing fetched, no scripts.
    assert!(!html.contains("<script") && !html.contains("http://example"));
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    // The added section comes after the plots.
    assert!(html.find("<h2>Reproduced &lt;figures&gt;") > html.find("<h2>Plots</h2>"));
}

#[test]
fn a_labelled_run_shows_its_labels_and_points_to_its_fleet_page() {
    let mut labelled = run(Vec::new());
    let plain = Report::new(&labelled).render();
    assert!(!plain.contains("labels:") && !plain.contains("--fleet"));
    labelled.labels.insert("host".into(), "web-1 <&>".into());
    labelled.labels.insert("fleet".into(), "F1".into());
    let text = page_text(&Report::new(&labelled).render());
    assert!(text.contains("labels: fleet=F1; host=web-1 <&>"), "{text}");
    assert!(text.contains("osprobe report --fleet F1"), "{text}");
}

#[test]
fn an_empty_run_says_so() {
    let mut empty = run(Vec::new());
    empty.skipped.clear();
    let html = Report::new(&empty).render();
    assert!(html.contains("This run has no measurements."));
    assert!(html.contains("nothing to plot"));
    roxmltree::Document::parse_with_options(
        &html,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn too_many_series_are_split_into_several_plots() {
    let mut ms = Vec::new();
    for trace in ["loop", "uniform", "zipf"] {
        for policy in ["fifo", "clock", "lru", "opt"] {
            for frames in [8i64, 16, 32] {
                let params = Params::new()
                    .with("frames", frames)
                    .with("policy", policy)
                    .with("trace", trace);
                ms.push(m(
                    "pager.policy",
                    "faults",
                    params,
                    Unit::Count,
                    100.0 / frames as f64,
                ));
            }
        }
    }
    let plots = plots(&run(ms));
    assert_eq!(plots.len(), 3, "{:?}", titles(&plots));
    for p in &plots {
        let Kind::Lines(lines) = &p.kind else {
            panic!("frames varies: lines")
        };
        assert_eq!(lines.series.len(), 4);
        assert!(p.fixed.starts_with("trace="), "{}", p.fixed);
    }
}

#[test]
fn the_reference_studies_list_only_what_was_compared_by_title() {
    use osprobe_report::reproduce::{references, reproduce};
    let getppid = m(
        "cpu.syscall",
        "getppid",
        Params::new().with("call", "getppid"),
        Unit::Nanoseconds,
        100.0,
    );
    let run = run(vec![getppid]);
    let rows = reproduce(&run, &references().unwrap(), None);
    let measured = rows.iter().filter(|r| r.this.is_some()).count();
    assert!(measured >= 1, "the getppid row is compared");
    let html = Report::new(&run)
        .plot_views(views())
        .references(rows.clone())
        .render();
    let text = page_text(&html);
    assert!(
        text.contains(&format!("{measured} of {} figures", rows.len())),
        "{text}"
    );
    assert!(text.contains("cpu.syscall getppid"));
    assert!(text.contains("CSE 221 Project"), "named by its title");
    assert!(text.contains("Zou"), "and its source");
    assert!(html.contains("docs/references.md#cse-221-project"));
    // Only compared rows: one table row per compared figure.
    let section = &html[html.find("<section id=\"references\">").unwrap()..];
    assert_eq!(section.matches("<tr><td>").count(), measured, "{section}");
    // The tool's own word for the studies is not shown.
    assert!(!text.to_lowercase().contains("seed"), "{text}");
    // The studies of which nothing was compared are not named.
    assert!(!text.contains("Playing BBR"));
}

/// The page's top-level sections, by id, in order.
fn section_ids(html: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse_with_options(
        html,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("section"))
        .filter_map(|n| n.attribute("id").map(str::to_string))
        .collect()
}

#[test]
fn the_page_leads_with_results_and_ends_with_the_studies() {
    let run = sample_run();
    let rows = osprobe_report::reproduce::reproduce(
        &run,
        &osprobe_report::reproduce::references().unwrap(),
        None,
    );
    let html = Report::new(&run)
        .plot_views(views())
        .section("Extra", "<p>x</p>")
        .references(rows)
        .render();
    let ids = section_ids(&html);
    assert_eq!(
        ids,
        [
            "overview",
            "summary",
            "plots",
            "missing",
            "extra-0",
            "environment",
            "references"
        ]
    );
}

#[test]
fn the_overview_names_the_best_and_worst_against_predictions() {
    let mut fast = m(
        "cpu.syscall",
        "getppid",
        Params::new(),
        Unit::Nanoseconds,
        50.0,
    );
    fast.prediction = Some(Prediction::new(100.0, "a model"));
    let mut slow = m("net.rtt", "tcp", Params::new(), Unit::Nanoseconds, 400.0);
    slow.prediction = Some(Prediction::new(100.0, "a model").within(0.5));
    let mut rate = m("fs.read", "seq", Params::new(), Unit::BytesPerSecond, 300.0);
    rate.prediction = Some(Prediction::new(100.0, "a model"));
    let html = Report::new(&run(vec![fast, slow, rate])).render();
    let overview =
        &html[html.find("id=\"overview\"").unwrap()..html.find("id=\"summary\"").unwrap()];
    let good = overview.find("Good at").unwrap();
    let bad = overview.find("Bad at").unwrap();
    // Best first: 3x the predicted rate, then half the predicted time.
    let rate_at = overview
        .find("fs.read seq: 3.0x better than its model")
        .unwrap();
    let fast_at = overview.find("cpu.syscall getppid: 2.0x better").unwrap();
    assert!(
        good < rate_at && rate_at < fast_at && fast_at < bad,
        "{overview}"
    );
    assert!(overview[bad..].contains("net.rtt tcp: 4.0x worse than its model"));
    assert!(overview.contains("1 measurement disagrees"), "{overview}");
}

#[test]
fn many_histograms_of_one_metric_are_sampled_and_say_so() {
    let measurements: Vec<Measurement> = (1..=18)
        .map(|i| {
            let mut sleep = m(
                "time.sleep",
                "nanosleep",
                Params::new().with("requested", i as i64),
                Unit::Nanoseconds,
                1000.0 * i as f64,
            );
            sleep.histogram = Histogram::log_spaced(&[900.0, 1000.0, 1100.0, 5000.0], 8);
            sleep
        })
        .collect();
    let run = run(measurements);
    let histograms: Vec<Plot> = plots(&run)
        .into_iter()
        .filter(|p| matches!(p.kind, Kind::Histogram(_)))
        .collect();
    assert_eq!(histograms.len(), osprobe_report::plot::MAX_HISTOGRAMS);
    // The first and the last point are among them, and each says what
    // was left out.
    assert!(
        histograms[0].fixed.starts_with("requested=1 "),
        "{}",
        histograms[0].fixed
    );
    assert!(
        histograms[3].fixed.starts_with("requested=18 "),
        "{}",
        histograms[3].fixed
    );
    assert!(histograms
        .iter()
        .all(|p| p.fixed.contains("4 of 18 histograms")));
}

#[test]
fn no_text_lies_over_a_data_mark_in_any_kind_of_plot() {
    let run = sample_run();
    let all = plots(&run);
    for title in [
        "net.rtt tcp histogram",
        "mem.latency load against size",
        "net.cc throughput",
        "proc.ctx_switch switch by kind",
    ] {
        let plot = find(&all, title);
        let svg = chart::render(plot);
        let overlaps = text_over_marks(&svg);
        assert!(overlaps.is_empty(), "{title}:\n{}", overlaps.join("\n"));
        let outside = text_outside_canvas(&svg);
        assert!(outside.is_empty(), "{title}:\n{}", outside.join("\n"));
    }
    // The histogram's median stands above its tallest bar, not on it.
    let h = chart::render(find(&all, "net.rtt tcp histogram"));
    let doc = roxmltree::Document::parse(&h).unwrap();
    let median = doc
        .descendants()
        .find(|n| n.has_tag_name("text") && n.text().is_some_and(|t| t.starts_with("median ")))
        .unwrap();
    let top_of_bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect"))
        .map(|n| number_attr(n, "y"))
        .fold(f64::INFINITY, f64::min);
    assert!(text_box(median).3 <= top_of_bars, "{h}");
}

/// net.userspace: a colour per clock, and the stack's RTT estimate drawn
/// against each path's configured round trip (twice its one-way delay).
#[test]
fn net_userspace_bars_by_clock_with_the_configured_round_trip() {
    let point = |stack: &str, clock: &str, delay: &str| {
        Params::new()
            .with("stack", stack)
            .with("cc", "cubic")
            .with("clock", clock)
            .with("delay", delay)
    };
    let srtt = |stack: &str, clock: &str, delay: &str, ns: f64| {
        m(
            "net.userspace",
            "srtt",
            point(stack, clock, delay),
            Unit::Nanoseconds,
            ns,
        )
    };
    let run = run(vec![
        srtt("smoltcp", "fine", "10ms", 21e6),
        srtt("smoltcp", "tick:10ms", "10ms", 20e6),
        srtt("quinn", "fine", "10ms", 22e6),
        srtt("quinn", "tick:10ms", "10ms", 20e6),
        srtt("smoltcp", "fine", "50ms", 101e6),
        srtt("smoltcp", "tick:10ms", "50ms", 100e6),
    ]);
    let plots = plots(&run);
    let plot = plots
        .iter()
        .find(|p| p.experiment == "net.userspace" && p.metric == "srtt")
        .expect("an srtt plot");
    let Kind::Bars(bars) = &plot.kind else {
        panic!("words give bars: {plot:?}")
    };
    assert_eq!(bars.series, ["fine", "tick:10ms"], "a colour per clock");
    assert_eq!(bars.groups.len(), 3, "{:?}", bars.groups);
    for (group, expected) in bars.groups.iter().zip(&bars.expected) {
        let want = if group.contains("50ms") { 100e6 } else { 20e6 };
        assert_eq!(*expected, Some(want), "{group}");
    }
    let svg = chart::render(plot);
    let texts = svg_texts(&svg);
    assert!(
        texts
            .iter()
            .any(|t| t == "configured round trip (2 x delay)"),
        "{texts:?}"
    );
    assert_eq!(
        svg.matches("stroke-dasharray=\"5,3\"").count(),
        3 + 1,
        "a line per group and one in the legend"
    );
    // Throughput has no expected value.
    let tp = m(
        "net.userspace",
        "throughput",
        point("quinn", "fine", "0ms"),
        Unit::BitsPerSecond,
        1e9,
    );
    let tp2 = m(
        "net.userspace",
        "throughput",
        point("quinn", "tick:10ms", "0ms"),
        Unit::BitsPerSecond,
        5e8,
    );
    let plots = self::plots(&self::run(vec![tp, tp2]));
    let Kind::Bars(bars) = &plots[0].kind else {
        panic!()
    };
    assert!(bars.expected.iter().all(Option::is_none));
}

fn counted(event: &str, per_op: f64, unit: Unit) -> osprobe_core::counters::Counted {
    osprobe_core::counters::Counted {
        event: event.into(),
        per_op,
        unit,
        user_only: false,
        running: 1.0,
    }
}

/// The summary table's header cells, in order.
fn summary_headers(html: &str) -> Vec<String> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(html, opts).expect("XHTML parses");
    let section = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("summary"))
        .expect("a summary section");
    section
        .descendants()
        .filter(|n| n.has_tag_name("th"))
        .map(|n| n.text().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn counted_rows_show_their_counters_and_the_others_an_empty_cell() {
    let mut syscall = m(
        "cpu.syscall",
        "getppid",
        Params::new(),
        Unit::Nanoseconds,
        61.0,
    );
    syscall.counters = vec![
        counted("task-clock", 61.2, Unit::Nanoseconds),
        counted("page-faults", 0.0, Unit::Count),
    ];
    let mut scaled = m(
        "cpu.syscall",
        "gettid",
        Params::new(),
        Unit::Nanoseconds,
        60.0,
    );
    scaled.counters = vec![osprobe_core::counters::Counted {
        running: 0.5,
        user_only: true,
        ..counted("context-switches", 0.25, Unit::Count)
    }];
    let connect = m(
        "net.connect",
        "connect",
        Params::new(),
        Unit::Nanoseconds,
        20_000.0,
    );
    let html = Report::new(&run(vec![syscall, scaled, connect])).render();
    assert!(summary_headers(&html).contains(&"counted per operation".to_string()));
    let summary = &html[html.find("id=\"summary\"").unwrap()..html.find("id=\"plots\"").unwrap()];
    let rows: Vec<&str> = summary.split("<tr").skip(2).collect();
    assert_eq!(rows.len(), 3, "{summary}");
    assert!(
        rows[0].contains("<td class=\"counters\">task-clock 61.20 ns<br/>page-faults 0.000</td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].contains("context-switches 0.250 (scaled: ran 50% of the time)"),
        "{}",
        rows[1]
    );
    assert!(rows[1].contains("user space only"), "{}", rows[1]);
    assert!(
        rows[2].contains("<td class=\"counters\"></td>"),
        "{}",
        rows[2]
    );
    // Nothing here counted cycles: the page never shows a cycles figure.
    assert!(!summary.contains("cycles"), "{summary}");
}

#[test]
fn a_run_without_counters_has_no_counters_column() {
    let html = Report::new(&sample_run()).render();
    let headers = summary_headers(&html);
    assert!(
        !headers.contains(&"counted per operation".to_string()),
        "{headers:?}"
    );
    assert_eq!(headers.len(), 9, "{headers:?}");
}
