//! The store's behaviour, the same on both backends: every case runs
//! against a fresh SQLite file and a fresh database on a private
//! PostgreSQL server (started by the test, as an unprivileged user, on a
//! Unix socket in a temp dir; see osprobe_store::testing).

use osprobe_core::model::Skipped;
use osprobe_core::{ClockInfo, Measurement, Params, Profile, Run, Summary, Unit, SCHEMA_VERSION};
use osprobe_store::postgres::PostgresStore;
use osprobe_store::testing::PrivatePostgres;
use osprobe_store::{
    open, parse_jsonl, schema_version, Access, Location, RunStore, SqliteStore, StoreError,
};
use std::cell::Cell;

/// A run of `n` measurements with a ULID made from `seed`.
fn sample_run(seed: u64, n: usize) -> Run {
    let clock = ClockInfo {
        source: "monotonic".into(),
        reason: "test".into(),
        tsc_hz: None,
        calibration_error_ppm: None,
        calibration: None,
    };
    let measurements = (0..n)
        .map(|i| {
            let s = Summary::of(&[1.0 + i as f64, 2.0, 3.0 + 1e-9 * seed as f64]).unwrap();
            Measurement::new(
                "cpu.syscall",
                "getppid",
                Params::new().with("i", i as i64),
                Unit::Nanoseconds,
                s,
            )
            .note("a note with \"quotes\", é and a tab\t")
        })
        .collect();
    Run {
        schema: SCHEMA_VERSION,
        id: osprobe_core::id::ulid(1_764_000_000_000 + seed, [seed as u8; 10]),
        started: format!("2026-11-22T10:{:02}:00.000Z", seed % 60),
        ended: format!("2026-11-22T10:{:02}:30.000Z", seed % 60),
        osprobe_version: "0.1.0".into(),
        profile: Profile::Quick,
        command: "run --only cpu.*".into(),
        environment: osprobe_core::environment::capture(clock),
        measurements,
        skipped: vec![Skipped {
            experiment: "proc.spawn".into(),
            params: Params::new(),
            reason: "test".into(),
        }],
        labels: Default::default(),
        far_ends: Vec::new(),
    }
}

/// What `load_run` gives back for `run`: its measurements name their run.
fn as_stored(run: &Run) -> Run {
    let mut run = run.clone();
    for m in &mut run.measurements {
        m.run = run.id.clone();
    }
    run
}

fn write(loc: &Location) -> Box<dyn RunStore> {
    open(loc, Access::Write).unwrap_or_else(|e| panic!("open {loc} for writing: {e}"))
}

fn read(loc: &Location) -> Box<dyn RunStore> {
    open(loc, Access::Read).unwrap_or_else(|e| panic!("open {loc} for reading: {e}"))
}

/// Set the stored schema version, as a newer osprobe would have.
fn force_version(loc: &Location, version: u32) {
    match loc {
        Location::Sqlite(p) => SqliteStore::open(p, Access::Write)
            .unwrap()
            .force_version_for_tests(version)
            .unwrap(),
        Location::Postgres(u) => PostgresStore::open(u, Access::Write)
            .unwrap()
            .force_version_for_tests(version)
            .unwrap(),
    }
}

fn round_trip_of_a_run(fresh: &dyn Fn() -> Location) {
    let loc = fresh();
    let mut store = write(&loc);
    let run = sample_run(1, 3);
    store.save_run(&run).unwrap();
    assert_eq!(store.load_run("latest").unwrap(), as_stored(&run));
    let prefix = run.id[..8].to_ascii_lowercase();
    assert_eq!(
        store.load_run(&prefix).unwrap().id,
        run.id,
        "prefix, any case"
    );
    let list = store.list_runs().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].measurements, 3);
    assert_eq!(list[0].command, "run --only cpu.*");
    assert!(store.has_run(&run.id).unwrap());
    assert!(!store.has_run(&run.id[..25]).unwrap());
    // And from a second connection, opened for reading.
    assert_eq!(read(&loc).load_run(&run.id).unwrap(), as_stored(&run));
}

/// A far end as a run against `osprobe serve` on another host stores it.
fn far_end(host: &str) -> osprobe_core::far_end::FarEnd {
    let nic = |name: &str| osprobe_core::nic::NicInfo {
        name: name.into(),
        address: "198.18.80.1".into(),
        kind: "veth".into(),
        mtu: Some(1500),
        qdisc: Some("noqueue".into()),
        offloads: [("tso".to_string(), true), ("lro".to_string(), false)].into(),
        ..Default::default()
    };
    let environment = osprobe_core::Environment {
        hostname: host.into(),
        ..Default::default()
    };
    osprobe_core::far_end::FarEnd {
        to: host.into(),
        address: format!("{host}:5301"),
        near_nic: Some(nic("veth-near")),
        environment: Some(environment),
        far_nic: Some(nic("veth-far")),
        error: None,
    }
}

fn far_ends_round_trip(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    let mut run = sample_run(3, 1);
    run.far_ends = vec![far_end("far-1"), far_end("far-2")];
    store.save_run(&run).unwrap();
    assert_eq!(store.load_run("latest").unwrap(), as_stored(&run));
}

fn labels_round_trip_and_show_in_the_summary(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    let mut run = sample_run(2, 1);
    run.labels.insert("host".into(), "web-1".into());
    run.labels.insert("pair".into(), "web-1 -> db-1".into());
    run.labels.insert("groups".into(), "web,eu".into());
    store.save_run(&run).unwrap();
    assert_eq!(store.load_run("latest").unwrap().labels, run.labels);
    assert_eq!(store.list_runs().unwrap()[0].labels, run.labels);
}

fn unknown_and_ambiguous_ids(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    let err = store.load_run("latest").unwrap_err();
    assert!(matches!(err, StoreError::UnknownRun { .. }), "{err}");
    // Two ids sharing their first 10 characters (the same millisecond).
    let mut a = sample_run(3, 1);
    let mut b = sample_run(3, 1);
    a.id = osprobe_core::id::ulid(1_764_000_000_003, [1; 10]);
    b.id = osprobe_core::id::ulid(1_764_000_000_003, [2; 10]);
    store.save_run(&a).unwrap();
    store.save_run(&b).unwrap();
    let err = store.load_run(&a.id[..10]).unwrap_err();
    assert!(
        matches!(err, StoreError::AmbiguousRun { count: 2, .. }),
        "{err}"
    );
    let err = store.load_run("ZZ").unwrap_err().to_string();
    assert!(
        err.contains("'ZZ'") && err.contains("osprobe history"),
        "{err}"
    );
}

fn latest_and_the_runs_before_it(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    // Stored out of order: `latest` is by start time, not by insertion.
    let later = sample_run(20, 1);
    let earlier = sample_run(10, 1);
    store.save_run(&later).unwrap();
    store.save_run(&earlier).unwrap();
    assert_eq!(store.resolve_id("latest").unwrap(), later.id);
    assert_eq!(store.resolve_id("latest~0").unwrap(), later.id);
    assert_eq!(store.resolve_id("latest~1").unwrap(), earlier.id);
    let err = store.resolve_id("latest~2").unwrap_err().to_string();
    assert!(
        err.contains("'latest~2'") && err.contains("holds 2 runs"),
        "{err}"
    );
    let err = store.resolve_id("latest~x").unwrap_err().to_string();
    assert!(err.contains("latest~N"), "{err}");
    let ids: Vec<String> = store
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![earlier.id, later.id], "oldest first");
}

fn migrations_apply_once_and_keep_the_data(fresh: &dyn Fn() -> Location) {
    let loc = fresh();
    write(&loc).save_run(&sample_run(4, 2)).unwrap();
    // Reopening for writing applies nothing twice and keeps the data.
    let store = write(&loc);
    assert_eq!(store.list_runs().unwrap().len(), 1);
    drop(store);
    assert_eq!(read(&loc).list_runs().unwrap()[0].measurements, 2);
}

fn a_store_of_a_newer_schema_is_refused(fresh: &dyn Fn() -> Location) {
    let loc = fresh();
    write(&loc).save_run(&sample_run(5, 1)).unwrap();
    force_version(&loc, schema_version() + 1);
    for access in [Access::Read, Access::Write] {
        let err = open(&loc, access).err().unwrap();
        assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("newer than this osprobe knows") && !text.contains('\n'),
            "one clear line: {text}"
        );
    }
}

fn a_second_write_of_one_id_is_refused_and_changes_nothing(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    let run = sample_run(6, 2);
    store.save_run(&run).unwrap();
    let mut again = sample_run(6, 5);
    again.command = "changed".into();
    assert!(store.save_run(&again).is_err());
    assert_eq!(store.load_run(&run.id).unwrap(), as_stored(&run));
}

fn importing_twice_stores_once(fresh: &dyn Fn() -> Location) {
    let mut store = write(&fresh());
    let first = sample_run(7, 2);
    store.save_run(&first).unwrap();
    let runs = vec![first.clone(), sample_run(8, 1), sample_run(9, 3)];
    let done = store.import_runs(&runs).unwrap();
    assert_eq!((done.new, done.already_there), (2, 1));
    let done = store.import_runs(&runs).unwrap();
    assert_eq!((done.new, done.already_there), (0, 3));
    assert_eq!(store.list_runs().unwrap().len(), 3);
    for run in &runs {
        assert_eq!(store.load_run(&run.id).unwrap(), as_stored(run));
    }
}

fn reading_an_empty_store_finds_no_runs(fresh: &dyn Fn() -> Location) {
    let loc = fresh();
    drop(write(&loc));
    let store = read(&loc);
    assert!(store.list_runs().unwrap().is_empty());
    let err = store.load_run("latest").unwrap_err().to_string();
    assert!(err.contains("holds no runs yet"), "{err}");
}

type Case = fn(&dyn Fn() -> Location);

const CASES: &[(&str, Case)] = &[
    ("round_trip_of_a_run", round_trip_of_a_run),
    (
        "labels_round_trip_and_show_in_the_summary",
        labels_round_trip_and_show_in_the_summary,
    ),
    ("far_ends_round_trip", far_ends_round_trip),
    ("unknown_and_ambiguous_ids", unknown_and_ambiguous_ids),
    (
        "latest_and_the_runs_before_it",
        latest_and_the_runs_before_it,
    ),
    (
        "migrations_apply_once_and_keep_the_data",
        migrations_apply_once_and_keep_the_data,
    ),
    (
        "a_store_of_a_newer_schema_is_refused",
        a_store_of_a_newer_schema_is_refused,
    ),
    (
        "a_second_write_of_one_id_is_refused_and_changes_nothing",
        a_second_write_of_one_id_is_refused_and_changes_nothing,
    ),
    ("importing_twice_stores_once", importing_twice_stores_once),
    (
        "reading_an_empty_store_finds_no_runs",
        reading_an_empty_store_finds_no_runs,
    ),
];

/// Run every case, naming the one that fails.
fn run_cases(backend: &str, fresh: &dyn Fn() -> Location) {
    for (name, case) in CASES {
        eprintln!("{backend}: {name}");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(fresh)));
        if let Err(panic) = result {
            eprintln!("{backend}: case {name} FAILED");
            std::panic::resume_unwind(panic);
        }
    }
}

/// The private server, or a skip (a failure in CI) saying why not.
fn private_postgres() -> Option<PrivatePostgres> {
    match PrivatePostgres::start() {
        Ok(pg) => Some(pg),
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            None
        }
    }
}

#[test]
fn sqlite_backend_passes_every_case() {
    let dir = tempfile::tempdir().unwrap();
    let n = Cell::new(0);
    run_cases("sqlite", &|| {
        n.set(n.get() + 1);
        Location::Sqlite(dir.path().join(format!("r{}.db", n.get())))
    });
}

#[test]
fn postgres_backend_passes_every_case() {
    let Some(pg) = private_postgres() else { return };
    run_cases("postgres", &|| {
        Location::Postgres(pg.fresh_database().unwrap_or_else(|e| panic!("{e}")))
    });
}

/// `osprobe export` from one backend, `osprobe import` into the other: the
/// same runs, either way, and a second import stores nothing.
#[test]
fn export_then_import_into_the_other_backend_gives_equal_runs() {
    let Some(pg) = private_postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Location::Sqlite(dir.path().join("laptop.db"));
    let postgres = Location::Postgres(pg.fresh_database().unwrap());
    let mut runs: Vec<Run> = (30..34).map(|s| sample_run(s, 3)).collect();
    runs[1].labels.insert("host".into(), "laptop".into());
    runs[2].far_ends.push(far_end("far-1"));
    let mut laptop = write(&sqlite);
    for run in &runs {
        laptop.save_run(run).unwrap();
    }
    for (from, to) in [(&sqlite, &postgres), (&postgres, &sqlite)] {
        let source = read(from);
        let mut jsonl = String::new();
        for summary in source.list_runs().unwrap() {
            let run = source.load_run(&summary.id).unwrap();
            jsonl.push_str(&osprobe_store::import::run_line(&run));
            jsonl.push('\n');
        }
        let (parsed, repeats) = parse_jsonl(jsonl.as_bytes(), "runs.jsonl").unwrap();
        assert_eq!((parsed.len(), repeats), (4, 0));
        let mut target = write(to);
        let done = target.import_runs(&parsed).unwrap();
        let expected_new = if to == &postgres { 4 } else { 0 };
        assert_eq!(done.new, expected_new, "{from} -> {to}");
        assert_eq!(target.import_runs(&parsed).unwrap().new, 0, "idempotent");
        for run in &runs {
            assert_eq!(
                target.load_run(&run.id).unwrap(),
                as_stored(run),
                "{from} -> {to}"
            );
        }
        assert_eq!(
            source.list_runs().unwrap(),
            target.list_runs().unwrap(),
            "the same history on both"
        );
    }
}

/// A URL nothing answers at: one line naming it, password redacted, and
/// nothing created.
#[test]
fn an_unreachable_url_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgres://alice:hunter2@/runs?host={}&port=5999",
        dir.path().display()
    );
    let loc = Location::parse(url.as_ref()).unwrap();
    for access in [Access::Write, Access::Read] {
        let err = open(&loc, access).err().unwrap();
        assert!(matches!(err, StoreError::Unreachable { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with("cannot connect to results database postgres://alice:***@/runs"),
            "{text}"
        );
        assert!(!text.contains("hunter2") && !text.contains('\n'), "{text}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // Over TCP on loopback, to a port nothing listens on.
    let loc = Location::parse("postgresql://alice:hunter2@127.0.0.1:1/runs".as_ref()).unwrap();
    let text = open(&loc, Access::Write).err().unwrap().to_string();
    assert!(
        text.starts_with(
            "cannot connect to results database postgresql://alice:***@127.0.0.1:1/runs: "
        ),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

/// Several hosts' first runs into one new database at the same moment: the
/// advisory lock lets one create the schema and the others find it.
#[test]
fn concurrent_first_writers_into_postgres_all_store_their_runs() {
    let Some(pg) = private_postgres() else { return };
    const WRITERS: usize = 4;
    for round in 0..3 {
        let url = pg.fresh_database().unwrap();
        let start = std::sync::Barrier::new(WRITERS);
        let results: Vec<Result<(), StoreError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (url, start) = (&url, &start);
                    s.spawn(move || {
                        start.wait();
                        let mut store = PostgresStore::open(url, Access::Write)?;
                        store.save_run(&sample_run(100 + w as u64, 2))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (w, r) in results.iter().enumerate() {
            assert!(r.is_ok(), "round {round}, writer {w}: {r:?}");
        }
        let store = PostgresStore::open(&url, Access::Read).unwrap();
        assert_eq!(store.list_runs().unwrap().len(), WRITERS, "round {round}");
        assert_eq!(store.version_for_tests().unwrap(), schema_version());
    }
}

/// A write that fails half way through a run's measurements (here: the
/// code producing them panics) leaves nothing of the run behind.
#[test]
fn a_write_failing_half_way_leaves_no_partial_run_in_postgres() {
    let Some(pg) = private_postgres() else { return };
    let url = pg.fresh_database().unwrap();
    let mut store = PostgresStore::open(&url, Access::Write).unwrap();
    let complete = sample_run(40, 2);
    store.save_run(&complete).unwrap();
    let partial = sample_run(41, 5);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let failing = partial.measurements.iter().enumerate().map(|(i, m)| {
            assert!(i < 2, "the measurements stop coming half way");
            m
        });
        let _ = store.save_run_from(&partial, failing);
    }));
    assert!(result.is_err());
    let ids: Vec<String> = store
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![complete.id]);
    let orphans: i64 = pg
        .connect(url_db(&url))
        .unwrap()
        .query_one(
            "SELECT count(*) FROM measurements WHERE run_id = $1",
            &[&partial.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0);
}

/// The database name of a test URL (`.../NAME?host=...`).
fn url_db(url: &osprobe_store::PgUrl) -> &str {
    let s = url.secret();
    let after = &s[s.find("@/").unwrap() + 2..];
    &after[..after.find('?').unwrap()]
}

/// Environment variable that turns [`child_dies_while_writing_to_postgres`]
/// into the dying writer of [`a_writer_killed_mid_run_leaves_nothing_in_postgres`].
const DYING_WRITER_URL: &str = "OSPROBE_TEST_DYING_WRITER_URL";

/// The dying writer, in its own process: stores one run, then ends the
/// process on the spot after two measurements of the second, its
/// transaction open and its connection dropped without a word.
#[test]
#[ignore = "helper process of a_writer_killed_mid_run_leaves_nothing_in_postgres"]
fn child_dies_while_writing_to_postgres() {
    let url = std::env::var(DYING_WRITER_URL).expect("run by the parent test only");
    let url = osprobe_store::PgUrl::parse(&url).unwrap();
    let mut store = PostgresStore::open(&url, Access::Write).unwrap();
    store.save_run(&sample_run(50, 2)).unwrap();
    let partial = sample_run(51, 5);
    let dying = partial.measurements.iter().enumerate().map(|(i, m)| {
        if i == 2 {
            // SAFETY: ends the process on the spot, mid-transaction.
            unsafe { libc::_exit(0) };
        }
        m
    });
    let _ = store.save_run_from(&partial, dying);
    // Reaching this line means the write was not interrupted: fail loudly.
    std::process::exit(3);
}

/// A process that dies while storing a run (a kill, a crash) leaves no
/// trace of it: the server rolls the open transaction back.
#[test]
fn a_writer_killed_mid_run_leaves_nothing_in_postgres() {
    let Some(pg) = private_postgres() else { return };
    let url = pg.fresh_database().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_dies_while_writing_to_postgres",
            "--ignored",
            "--test-threads=1",
        ])
        .env(DYING_WRITER_URL, url.secret())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the dying writer must end by _exit(0) mid-write"
    );
    let partial = sample_run(51, 5);
    let mut client = pg.connect(url_db(&url)).unwrap();
    // The server notices the closed connection and rolls back; wait for
    // its backend to end rather than for a fixed time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let open: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dead writer's session never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let store = PostgresStore::open(&url, Access::Read).unwrap();
    let ids: Vec<String> = store
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![sample_run(50, 2).id]);
    let orphans: i64 = client
        .query_one(
            "SELECT count(*) FROM measurements WHERE run_id = $1",
            &[&partial.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0);
}

/// A server that asks for the password in clear text does not get it
/// (osprobe has no TLS): refused, naming the way out; with
/// `osprobe_allow_cleartext=1` the user chose to send it, and it works.
#[test]
fn a_cleartext_password_request_is_refused_unless_allowed() {
    const SECRET: &str = "s3cret/pw?x";
    let pg = match PrivatePostgres::start_with_cleartext_password(SECRET) {
        Ok(pg) => pg,
        Err(reason) => {
            osprobe_core::testing::skip(format!("no private PostgreSQL: {reason}"));
            return;
        }
    };
    let url = pg.fresh_database().unwrap();
    let encoded = SECRET.replace('/', "%2F").replace('?', "%3F");
    let with_pw = url
        .secret()
        .replacen("osprobe@", &format!("osprobe:{encoded}@"), 1);
    let refused = PostgresStore::open(
        &osprobe_store::PgUrl::parse(&with_pw).unwrap(),
        Access::Write,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        refused.contains("clear text") && refused.contains("osprobe_allow_cleartext=1"),
        "{refused}"
    );
    assert!(
        !refused.contains("s3cret") && !refused.contains(&encoded),
        "{refused}"
    );
    let allowed = format!("{with_pw}&osprobe_allow_cleartext=1");
    let mut store = PostgresStore::open(
        &osprobe_store::PgUrl::parse(&allowed).unwrap(),
        Access::Write,
    )
    .unwrap();
    store.save_run(&sample_run(7, 1)).unwrap();
    assert_eq!(store.list_runs().unwrap().len(), 1);
}
