//! A private PostgreSQL server for tests: `initdb` into a temp dir, a
//! `postgres` listening only on a Unix socket in that dir, run as an
//! unprivileged user (initdb refuses root), stopped and removed on drop,
//! and killed with this process if it dies first (parent-death signal).
//! Used by the store's tests and by the cli's tests that need a shared store.

use crate::{PgUrl, PrivateServerError};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The database role the tests connect as (trusted on the private socket).
pub const ROLE: &str = "osprobe";

/// The port number naming the socket file (`.s.PGSQL.PORT`); there is no
/// TCP listener, so it cannot collide with another server.
const PORT: u16 = 5432;

/// How long the server may take to accept connections; generous for a
/// loaded machine (it is usually well under a second).
const READY_WITHIN: Duration = Duration::from_secs(60);

pub struct PrivatePostgres {
    server: Child,
    password: Option<String>,
    socket_dir: PathBuf,
    log: PathBuf,
    databases: AtomicUsize,
    // Last: removed after the server has stopped.
    dir: tempfile::TempDir,
}

impl PrivatePostgres {
    /// Start a server, or say why it cannot start here (no PostgreSQL
    /// binaries, no unprivileged user to run it as): the caller skips.
    pub fn start() -> Result<PrivatePostgres, PrivateServerError> {
        Self::launch(None)
    }

    /// A server that asks every client for `password` (SCRAM), for tests
    /// of where passwords come from; [`PrivatePostgres::url`] leaves it out.
    pub fn start_with_password(password: &str) -> Result<PrivatePostgres, PrivateServerError> {
        Self::launch(Some((password, "scram-sha-256")))
    }

    /// A server that asks every client for `password` in clear text (the
    /// pg_hba method `password`), for tests that osprobe will not send it.
    pub fn start_with_cleartext_password(
        password: &str,
    ) -> Result<PrivatePostgres, PrivateServerError> {
        Self::launch(Some((password, "password")))
    }

    /// `auth`: the password and the authentication method asking for it;
    /// None trusts every client on the socket.
    fn launch(auth: Option<(&str, &str)>) -> Result<PrivatePostgres, PrivateServerError> {
        let password = auth.map(|(p, _)| p);
        let bin = binaries_dir().ok_or(PrivateServerError::NoBinaries)?;
        let owner = server_user()?;
        let layout = Layout::make(owner)?;
        initdb(&bin, &layout, owner, auth)?;
        let server = start_postgres(&bin, &layout, owner)?;
        let mut pg = PrivatePostgres {
            server,
            password: password.map(str::to_string),
            socket_dir: layout.socket_dir,
            log: layout.log,
            databases: AtomicUsize::new(0),
            dir: layout.dir,
        };
        pg.wait_ready()?;
        Ok(pg)
    }

    fn wait_ready(&mut self) -> Result<(), PrivateServerError> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = self.server.try_wait() {
                return Err(PrivateServerError::Exited {
                    status,
                    log: self.log_tail(),
                });
            }
            if self.connect("postgres").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PrivateServerError::NotReady {
                    within: READY_WITHIN,
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the server's log, for a failure message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join(" | ")
    }

    /// The temp dir holding the server's data, socket and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory holding the server's socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The URL of database `db` on this server, as a user would write it.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{ROLE}@/{db}?host={}&port={PORT}",
            self.socket_dir.display()
        )
    }

    /// A client connected to database `db`.
    pub fn connect(&self, db: &str) -> Result<postgres::Client, postgres::Error> {
        let mut config = postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(PORT)
            .user(ROLE)
            .dbname(db)
            .connect_timeout(Duration::from_secs(5));
        if let Some(password) = &self.password {
            config.password(password);
        }
        config.connect(postgres::NoTls)
    }

    /// A new, empty database on this server, by its URL.
    pub fn fresh_database(&self) -> Result<PgUrl, PrivateServerError> {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("osprobe_test_{n}");
        let client_error =
            |context: String| move |source| PrivateServerError::Client { context, source };
        let mut client = self
            .connect("postgres")
            .map_err(client_error("connecting to the private server".into()))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(client_error(format!("CREATE DATABASE {name}")))?;
        Ok(PgUrl::parse(&self.url(&name))?)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown: clients are disconnected,
        // the server exits in well under a second.
        let pid = self.server.id() as libc::pid_t;
        // SAFETY: signals our own child, which has not been reaped yet.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.server.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = self.server.kill();
                    let _ = self.server.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// The newest PostgreSQL's server binaries: Debian's
/// /usr/lib/postgresql/VERSION/bin, else the directory of `initdb` on PATH.
fn binaries_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
}

/// Who runs the server: this user when not root, else the `postgres`
/// system user, else `nobody` (PostgreSQL refuses to run as root).
fn server_user() -> Result<(u32, u32), PrivateServerError> {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if uid != 0 {
        return Ok((uid, gid));
    }
    for name in ["postgres", "nobody"] {
        let cname = std::ffi::CString::new(name).expect("no NUL in a literal");
        // SAFETY: getpwnam returns static storage or null; read at once.
        let ids = unsafe {
            let pw = libc::getpwnam(cname.as_ptr());
            (!pw.is_null()).then(|| ((*pw).pw_uid, (*pw).pw_gid))
        };
        if let Some(ids) = ids {
            return Ok(ids);
        }
    }
    Err(PrivateServerError::NoServerUser)
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), PrivateServerError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|source| {
        PrivateServerError::Chown {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The server's temp dir, owned by the user it runs as: its data
/// directory, the directory of its Unix socket and its log.
struct Layout {
    dir: tempfile::TempDir,
    data: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
}

impl Layout {
    fn make((uid, gid): (u32, u32)) -> Result<Layout, PrivateServerError> {
        let dir = tempfile::Builder::new()
            .prefix("osprobe-pg-")
            .tempdir()
            .map_err(PrivateServerError::io("cannot make a temp dir"))?;
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("socket");
        let log = dir.path().join("server.log");
        for d in [dir.path(), socket_dir.as_path()] {
            std::fs::create_dir_all(d).map_err(PrivateServerError::io(d.display().to_string()))?;
            chown(d, uid, gid)?;
        }
        std::fs::write(&log, b"").map_err(PrivateServerError::io(log.display().to_string()))?;
        chown(&log, uid, gid)?;
        Ok(Layout {
            dir,
            data,
            socket_dir,
            log,
        })
    }
}

/// Create the cluster: trust on the socket, or `method` asking for
/// `password`.
fn initdb(
    bin: &Path,
    layout: &Layout,
    (uid, gid): (u32, u32),
    auth: Option<(&str, &str)>,
) -> Result<(), PrivateServerError> {
    let mut initdb = Command::new(bin.join("initdb"));
    match auth {
        None => {
            initdb.arg("--auth=trust");
        }
        Some((password, method)) => {
            let pwfile = layout.dir.path().join("pwfile");
            std::fs::write(&pwfile, format!("{password}\n"))
                .map_err(PrivateServerError::io(pwfile.display().to_string()))?;
            chown(&pwfile, uid, gid)?;
            initdb
                .arg(format!("--auth={method}"))
                .arg(format!("--pwfile={}", pwfile.display()));
        }
    }
    let initdb = initdb
        .args(["--no-sync", "--encoding=UTF8", "--locale=C"])
        .arg(format!("--username={ROLE}"))
        .arg("-D")
        .arg(&layout.data)
        .current_dir(layout.dir.path())
        .env("LC_ALL", "C")
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .output()
        .map_err(PrivateServerError::io(format!(
            "cannot run {}",
            bin.join("initdb").display()
        )))?;
    if !initdb.status.success() {
        return Err(PrivateServerError::Initdb {
            status: initdb.status,
            stderr: String::from_utf8_lossy(&initdb.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Start `postgres` on the cluster, listening on its Unix socket only,
/// logging into the temp dir, and dying with this process.
fn start_postgres(
    bin: &Path,
    layout: &Layout,
    (uid, gid): (u32, u32),
) -> Result<Child, PrivateServerError> {
    let log = &layout.log;
    let log_file = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .map_err(PrivateServerError::io(log.display().to_string()))?;
    let log_err = log_file
        .try_clone()
        .map_err(PrivateServerError::io(log.display().to_string()))?;
    let mut command = Command::new(bin.join("postgres"));
    command
        .arg("-D")
        .arg(&layout.data)
        .arg("-k")
        .arg(&layout.socket_dir)
        .args(["-p", &PORT.to_string()])
        // No TCP listener: nothing outside this temp dir can reach it.
        .args(["-c", "listen_addresses="])
        // A throwaway server: durability buys nothing here.
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off"])
        .current_dir(layout.dir.path())
        .env("LC_ALL", "C")
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err);
    // SAFETY: prctl is async-signal-safe; it runs in the child after its
    // uid change (which would clear the setting) and before exec.
    unsafe {
        command.pre_exec(|| {
            // Immediate shutdown if the test process dies without
            // running Drop.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map_err(PrivateServerError::io(format!(
        "cannot start {}",
        bin.join("postgres").display()
    )))
}
