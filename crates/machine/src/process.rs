//! proc.fork, proc.spawn, proc.thread_create: the cost of creating a task
//! (the CSE 221 report section 3.4, the SOS design document section 9).
//! `proc.spawn binary=rfs` loads the program over the file service
//! ([`crate::rfs_exec`]).

use crate::error::{bad_value, WorkerError};
use crate::rfs_exec::{RemoteProgram, REMOTE_NAME};
use crate::tiny_elf::StaticTrue;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
use std::ffi::CString;

/// Wait for `pid` and require a clean exit.
pub(crate) fn reap(pid: libc::pid_t, what: &str) -> Result<(), ExperimentError> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid int; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(ExperimentError::io(format!("waitpid for {what}"), err));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(ExperimentError::failed(what, WorkerError::Exit(status)))
    }
}

/// The resident set size of this process, for the notes of fork: fork
/// copies page tables, so its cost grows with the parent's memory.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// proc.fork: fork, the child exits at once, the parent waits.
pub struct Fork;

impl Experiment for Fork {
    fn id(&self) -> &'static str {
        "proc.fork"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "fork + child _exit + parent waitpid"
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        vec![Params::new()]
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let samples = ctx.harness().each_timed(|| {
            // SAFETY: the child calls only _exit, which is async-signal-safe,
            // so forking a multithreaded process is sound here.
            let pid = unsafe { libc::fork() };
            match pid {
                -1 => Err(ExperimentError::last_os("fork")),
                0 => unsafe { libc::_exit(0) },
                child => reap(child, "forked child"),
            }
        })?;
        let mut m = ctx.time_measurement(self.id(), "fork_exit_wait", params.clone(), &samples)?;
        if let Some(rss) = rss_kib() {
            m.notes.push(format!(
                "parent resident set {rss} KiB (fork copies its page tables)"
            ));
        }
        Ok(vec![m])
    }
}

/// proc.spawn: start a program and wait for it.
pub struct Spawn;

const SPAWN_METHODS: &[&str] = &["posix_spawn", "fork_exec"];
const BINARIES: &[&str] = &["static", "dynamic", "rfs"];

/// Where the dynamic binary is looked for, in order.
const DYNAMIC_TRUE: &[&str] = &["/bin/true", "/usr/bin/true"];

impl Experiment for Spawn {
    fn id(&self) -> &'static str {
        "proc.spawn"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "posix_spawn and fork+exec of a minimal static ELF written by osprobe and of the dynamic /bin/true, until the child has exited; binary=rfs reads the static ELF from osprobe's file service into a memfd for every run"
    }
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("binary=rfs with path=netns or path=emulated (network namespaces)"),
            ..osprobe_core::Requirements::default()
        }
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "method",
                help: "how the program is started",
                kind: ParamKind::Choice(SPAWN_METHODS),
            },
            ParamSpec {
                name: "binary",
                help: "static: a static ELF with no loader; dynamic: /bin/true; rfs: the static ELF read over osprobe's file service into a memfd for every run",
                kind: ParamKind::Choice(BINARIES),
            },
            osprobe_rfs::experiments::PATH_PARAM,
            osprobe_rfs::experiments::DELAY_PARAM,
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let mut grid = Vec::new();
        for method in SPAWN_METHODS {
            for binary in ["static", "dynamic"] {
                grid.push(Params::new().with("method", *method).with("binary", binary));
            }
            // Over the file service: loopback always; the emulator (a LAN's
            // 1 ms each way) in full, where it can be built.
            let rfs = Params::new().with("method", *method).with("binary", "rfs");
            grid.push(rfs.clone().with("path", "loopback"));
            if profile == Profile::Full && osprobe_rfs::experiments::emulator_available().is_ok() {
                grid.push(rfs.with("path", "emulated").with("delay", "1ms"));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let method = params.text("method").unwrap_or("posix_spawn");
        let binary = params.text("binary").unwrap_or("static");
        if binary == "rfs" {
            return spawn_over_rfs(ctx, self.id(), method, params);
        }
        // The default path is harmless; another one, or a delay, would be
        // silently ignored by a local binary.
        if params.text("path").is_some_and(|p| p != "loopback") || params.text("delay").is_some() {
            return Err(ExperimentError::Unsupported(
                "path and delay apply to binary=rfs only".into(),
            ));
        }
        // Keep the static executable alive until sampling is done.
        let static_exe;
        let path = if binary == "static" {
            static_exe =
                StaticTrue::create_in(&std::env::temp_dir()).map_err(|e| match e.kind() {
                    std::io::ErrorKind::Unsupported => ExperimentError::Unsupported(e.to_string()),
                    _ => ExperimentError::io(
                        format!(
                            "writing the static executable under {}",
                            std::env::temp_dir().display()
                        ),
                        e,
                    ),
                })?;
            static_exe.path().to_path_buf()
        } else {
            DYNAMIC_TRUE
                .iter()
                .map(std::path::PathBuf::from)
                .find(|p| p.exists())
                .ok_or_else(|| {
                    ExperimentError::Unsupported(format!(
                        "no dynamic true binary at {}",
                        DYNAMIC_TRUE.join(" or ")
                    ))
                })?
        };
        let c_path = crate::os::fd::c_path(&path)?;
        // argv and an empty environment, prepared before any fork: the child
        // of fork may not allocate.
        let argv: [*mut libc::c_char; 2] = [c_path.as_ptr() as *mut _, std::ptr::null_mut()];
        let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
        let harness = ctx.harness();
        let samples = harness.each_timed(|| {
            let pid = match method {
                "fork_exec" => fork_exec(&c_path, &argv, &envp)?,
                _ => posix_spawn(&c_path, &argv, &envp)?,
            };
            reap(pid, &path.display().to_string())
        })?;
        let mut m = ctx.time_measurement(self.id(), method, params.clone(), &samples)?;
        m.notes.push(match binary {
            "static" => "a static ELF of three instructions written by osprobe: no loader, no libc"
                .to_string(),
            _ => format!(
                "{}: dynamic, loaded by ld.so; empty environment",
                path.display()
            ),
        });
        Ok(vec![m])
    }
}

/// proc.spawn binary=rfs: each sample reads the tiny static ELF from an
/// rfs server into a memfd and runs it (see [`crate::rfs_exec`]); a second
/// metric times the fetch alone.
fn spawn_over_rfs(
    ctx: &Context,
    id: &str,
    method: &str,
    params: &Params,
) -> Result<Vec<Measurement>, ExperimentError> {
    if !SPAWN_METHODS.contains(&method) {
        return Err(bad_value("method", method, SPAWN_METHODS.join(", ")));
    }
    let image = crate::tiny_elf::image().ok_or_else(|| {
        ExperimentError::Unsupported(format!(
            "no built-in static executable for {}",
            std::env::consts::ARCH
        ))
    })?;
    let mut remote = RemoteProgram::serve(params, REMOTE_NAME, &image)?;
    let argv0 = c"true";
    let argv: [*mut libc::c_char; 2] = [argv0.as_ptr() as *mut _, std::ptr::null_mut()];
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let what = format!("{REMOTE_NAME} loaded over rfs");
    let harness = ctx.harness();
    let requests_before = remote.requests();
    let mut runs = 0u64;
    let samples = harness.each_timed(|| {
        let program = remote.fetch()?;
        let pid = match method {
            "fork_exec" => program.fork_execveat(&argv, &envp)?,
            _ => posix_spawn(program.proc_path(), &argv, &envp)?,
        };
        runs += 1;
        reap(pid, &what)
    })?;
    let requests = (remote.requests() - requests_before) as f64 / runs.max(1) as f64;
    let fetch = harness.each_timed(|| remote.fetch().map(drop))?;
    let setup = vec![
        format!(
            "the static ELF of {} bytes written by osprobe, read from an rfs server for every run (open, fstat, read, close: {requests:.1} requests per run) into a memfd, checked, and started from it ({})",
            image.len(),
            match method {
                "fork_exec" => "fork, then execveat(fd, \"\", AT_EMPTY_PATH)",
                _ => "posix_spawn of /proc/self/fd/N",
            }
        ),
        format!("path: {}; {}", remote.description(), remote.client_note()),
    ];
    let mut m = ctx.time_measurement(id, method, params.clone(), &samples)?;
    m.notes.extend(setup.iter().cloned());
    let mut f = ctx.time_measurement(id, "fetch", params.clone(), &fetch)?;
    f.notes.push(
        "the fetch alone: the program read over rfs into a memfd and checked, not run".into(),
    );
    f.notes.extend(setup);
    Ok(vec![m, f])
}

pub(crate) fn posix_spawn(
    path: &CString,
    argv: &[*mut libc::c_char; 2],
    envp: &[*mut libc::c_char; 1],
) -> Result<libc::pid_t, ExperimentError> {
    let mut pid: libc::pid_t = 0;
    // SAFETY: path, argv and envp are NUL-terminated and outlive the call.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(ExperimentError::io(
            format!("posix_spawn {}", path.to_string_lossy()),
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(pid)
}

fn fork_exec(
    path: &CString,
    argv: &[*mut libc::c_char; 2],
    envp: &[*mut libc::c_char; 1],
) -> Result<libc::pid_t, ExperimentError> {
    // SAFETY: the child only calls execve and _exit (async-signal-safe) on
    // data prepared before the fork.
    match unsafe { libc::fork() } {
        -1 => Err(ExperimentError::last_os("fork")),
        0 => unsafe {
            libc::execve(
                path.as_ptr(),
                argv.as_ptr() as *const *const _,
                envp.as_ptr() as *const *const _,
            );
            libc::_exit(127)
        },
        child => Ok(child),
    }
}

/// proc.thread_create: create a thread that exits at once, and join it.
pub struct ThreadCreate;

const THREAD_APIS: &[&str] = &["pthread", "std"];

extern "C" fn thread_body(_: *mut libc::c_void) -> *mut libc::c_void {
    std::ptr::null_mut()
}

impl Experiment for ThreadCreate {
    fn id(&self) -> &'static str {
        "proc.thread_create"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "pthread_create + pthread_join of a thread that returns at once (and std::thread::spawn for contrast)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "api",
            help: "raw pthreads or Rust's std::thread",
            kind: ParamKind::Choice(THREAD_APIS),
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        THREAD_APIS
            .iter()
            .map(|a| Params::new().with("api", *a))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let api = params.text("api").unwrap_or("pthread");
        let samples = ctx.harness().each_timed(|| {
            if api == "std" {
                return std::thread::Builder::new()
                    .spawn(|| {})
                    .map_err(|e| ExperimentError::io("std::thread::spawn", e))?
                    .join()
                    .map_err(|_| ExperimentError::failed("a thread", WorkerError::Panicked));
            }
            // SAFETY: thread is written by pthread_create before being joined;
            // the body touches nothing.
            unsafe {
                let mut thread: libc::pthread_t = std::mem::zeroed();
                let rc = libc::pthread_create(
                    &mut thread,
                    std::ptr::null(),
                    thread_body,
                    std::ptr::null_mut(),
                );
                if rc != 0 {
                    return Err(ExperimentError::io(
                        "pthread_create",
                        std::io::Error::from_raw_os_error(rc),
                    ));
                }
                let rc = libc::pthread_join(thread, std::ptr::null_mut());
                if rc != 0 {
                    return Err(ExperimentError::io(
                        "pthread_join",
                        std::io::Error::from_raw_os_error(rc),
                    ));
                }
            }
            Ok(())
        })?;
        Ok(vec![ctx.time_measurement(
            self.id(),
            "create_join",
            params.clone(),
            &samples,
        )?])
    }
}
