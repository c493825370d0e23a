//! The one table of output formats: each [`Format`] with the flag that
//! prints it on standard output, the `--export-*` flag that writes it to a
//! file (where it has a file form), and its exporter. `run`, `bench` and
//! `net` (measure.rs), `show` (commands.rs) and the `--export-*` files
//! (export.rs) all choose their format here, so a format added here is
//! added everywhere.

use super::{Csv, Exporter, Json, Markdown, Text};
use crate::flags::{ProfileArgs, ShowArgs};
use anyhow::{bail, Result};
use osprobe_core::Run;
use serde::Serialize;
use std::fmt::Display;
use std::path::Path;

/// How a run (or an outcome that renders itself) is printed or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people: a run's terminal table, an outcome's `Display`. The
    /// default, so it has no flag.
    Table,
    /// The headline measurement of each experiment, one line each.
    Brief,
    /// The JSON of schema/ (docs/json.md).
    Json,
    /// One row per measurement, osprobe-report's columns.
    Csv,
    /// A run as Markdown tables.
    Markdown,
}

impl Format {
    /// The flag that prints it on standard output (none for the default).
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Format::Table => None,
            Format::Brief => Some("--brief"),
            Format::Json => Some("--json"),
            Format::Csv => Some("--csv"),
            Format::Markdown => Some("--markdown"),
        }
    }

    /// The flag that writes a run in it to a file beside the table; the
    /// terminal's formats have none (they depend on its width).
    pub fn export_flag(self) -> Option<&'static str> {
        match self {
            Format::Table | Format::Brief => None,
            Format::Json => Some("--export-json"),
            Format::Csv => Some("--export-csv"),
            Format::Markdown => Some("--export-markdown"),
        }
    }

    /// The first format whose flag was given; the table when none was.
    pub fn chosen(asked: &[(Format, bool)]) -> Format {
        asked
            .iter()
            .find_map(|&(format, given)| given.then_some(format))
            .unwrap_or(Format::Table)
    }

    /// What `run`, `bench` and `net` print: `--json`, `--brief` or the table.
    pub fn of_measuring(opts: &ProfileArgs) -> Format {
        Format::chosen(&[(Format::Json, opts.json), (Format::Brief, opts.brief)])
    }

    /// What `show` prints: `--json`, `--csv`, `--markdown` or the table.
    pub fn of_show(args: &ShowArgs) -> Format {
        Format::chosen(&[
            (Format::Json, args.json),
            (Format::Csv, args.csv),
            (Format::Markdown, args.markdown),
        ])
    }

    /// The `--export-*` files asked for: each one's format, flag and path.
    pub fn exports(opts: &ProfileArgs) -> Vec<(Format, &'static str, &Path)> {
        [
            (Format::Json, &opts.export_json),
            (Format::Csv, &opts.export_csv),
            (Format::Markdown, &opts.export_markdown),
        ]
        .into_iter()
        .filter_map(|(format, path)| Some((format, format.export_flag()?, path.as_deref()?)))
        .collect()
    }

    /// Its exporter of a run; the terminal's formats fit the terminal's
    /// width as it is when they render.
    pub fn of_run(self) -> &'static dyn Exporter<Run> {
        match self {
            Format::Table => &RunTable,
            Format::Brief => &BriefTable,
            Format::Json => &Json,
            Format::Csv => &Csv,
            Format::Markdown => &Markdown,
        }
    }

    /// Its exporter of an outcome that renders itself (`Display` for
    /// people, `Serialize` for programs): the table and JSON only.
    pub fn of_outcome<T: Serialize + Display + ?Sized>(self) -> Result<Box<dyn Exporter<T>>> {
        match self {
            Format::Table => Ok(Box::new(Text)),
            Format::Json => Ok(Box::new(Json)),
            other => bail!(
                "this command's outcome has no {} form; it prints as text or with --json",
                other.flag().unwrap_or("table")
            ),
        }
    }
}

/// A run's results table, as `run` and `show` print it after the machine.
struct RunTable;

impl Exporter<Run> for RunTable {
    fn render(&self, run: &Run) -> Result<String> {
        Ok(osprobe_report::run_results(
            run,
            osprobe_report::terminal_width(),
        ))
    }
}

/// `--brief`: a line per experiment, then the summary line.
struct BriefTable;

impl Exporter<Run> for BriefTable {
    fn render(&self, run: &Run) -> Result<String> {
        Ok(osprobe_report::brief_results(
            run,
            osprobe_report::terminal_width(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::Cli;
    use clap::{CommandFactory as _, Parser as _};

    /// Every format, the default first.
    const ALL: [Format; 5] = [
        Format::Table,
        Format::Brief,
        Format::Json,
        Format::Csv,
        Format::Markdown,
    ];

    fn parse(line: &str) -> Cli {
        Cli::try_parse_from(line.split_whitespace()).unwrap()
    }

    #[test]
    fn each_verb_chooses_by_its_flags() {
        let show = |line| match parse(line).command {
            crate::flags::Command::Show(args) => Format::of_show(&args),
            _ => unreachable!("{line} is a show"),
        };
        assert_eq!(show("osprobe show latest"), Format::Table);
        assert_eq!(show("osprobe show latest --json"), Format::Json);
        assert_eq!(show("osprobe show latest --csv"), Format::Csv);
        assert_eq!(show("osprobe show latest --markdown"), Format::Markdown);
        let bench = |line| match parse(line).command {
            crate::flags::Command::Bench(args) => {
                let exports = format!("{:?}", Format::exports(&args.profile));
                (Format::of_measuring(&args.profile), exports)
            }
            _ => unreachable!("{line} is a bench"),
        };
        assert_eq!(bench("osprobe bench cpu.syscall").0, Format::Table);
        assert_eq!(bench("osprobe bench cpu.syscall --brief").0, Format::Brief);
        let (format, exports) =
            bench("osprobe bench cpu.syscall --json --export-markdown m.md --export-csv c.csv");
        assert_eq!(format, Format::Json);
        assert_eq!(
            exports,
            r#"[(Csv, "--export-csv", "c.csv"), (Markdown, "--export-markdown", "m.md")]"#
        );
    }

    /// Every flag of the table is one that `show` or `run` really takes,
    /// and every format with a file form has the matching `--export-*`.
    #[test]
    fn the_flags_are_the_command_lines() {
        let cli = Cli::command();
        let takes = |verb: &str, flag: &str| {
            let command = cli.find_subcommand(verb).unwrap();
            let long = flag.trim_start_matches("--");
            command.get_arguments().any(|a| a.get_long() == Some(long))
        };
        for format in ALL {
            if let Some(flag) = format.flag() {
                assert!(takes("show", flag) || takes("run", flag), "{flag}");
            }
            if let Some(export) = format.export_flag() {
                assert!(takes("run", export) && takes("bench", export), "{export}");
                let flag = format.flag().unwrap();
                assert_eq!(export, format!("--export-{}", &flag[2..]));
                assert!(takes("show", flag), "show prints what run exports: {flag}");
            }
        }
    }

    #[test]
    fn an_outcome_has_no_file_forms() {
        #[derive(Serialize)]
        struct Outcome {
            rate: u32,
        }
        impl Display for Outcome {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "rate {}", self.rate)
            }
        }
        let outcome = Outcome { rate: 7 };
        let text = Format::Table.of_outcome().unwrap().render(&outcome);
        assert_eq!(text.unwrap(), "rate 7\n");
        let json = Format::Json.of_outcome().unwrap().render(&outcome);
        assert_eq!(json.unwrap(), "{\n  \"rate\": 7\n}\n");
        let Err(e) = Format::Csv.of_outcome::<Outcome>() else {
            panic!("an outcome has no CSV form")
        };
        assert!(e.to_string().contains("no --csv form"), "{e}");
    }

    #[test]
    fn a_run_renders_as_osprobe_report_does() {
        let run = Run {
            schema: osprobe_core::SCHEMA_VERSION,
            id: "01J".into(),
            started: String::new(),
            ended: String::new(),
            osprobe_version: String::new(),
            profile: osprobe_core::Profile::Smoke,
            command: String::new(),
            environment: osprobe_core::Environment::default(),
            measurements: Vec::new(),
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: Vec::new(),
        };
        let width = osprobe_report::terminal_width();
        let render = |format: Format| format.of_run().render(&run).unwrap();
        assert_eq!(
            render(Format::Table),
            osprobe_report::run_results(&run, width)
        );
        assert_eq!(
            render(Format::Brief),
            osprobe_report::brief_results(&run, width)
        );
        assert_eq!(
            render(Format::Csv),
            osprobe_report::csv::measurements_csv(&[])
        );
        assert_eq!(
            render(Format::Markdown),
            osprobe_report::markdown::run_markdown(&run)
        );
        let back: Run = serde_json::from_str(&render(Format::Json)).unwrap();
        assert_eq!(back, run);
    }
}
