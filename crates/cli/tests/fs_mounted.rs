//! fs.remote_read with dir= on a mounted file system. This kernel has no
//! NFS client, so the network case is sshfs (FUSE) mounting a directory
//! served by a real sshd in a network namespace of its own (198.18.80.16/28,
//! reached over a veth); the local case is a plain directory, recorded as
//! having no network server.

mod common;

use assert_cmd::cargo::CommandCargoExt;
use common::{ip_program, json_of, measurements, need_root};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NEAR: &str = "198.18.80.17";
const FAR: &str = "198.18.80.18";

fn bench_remote_read(db: &Path, dir: &Path) -> std::process::Output {
    Command::cargo_bin("osprobe")
        .unwrap()
        .arg("--db")
        .arg(db)
        .args(["bench", "fs.remote_read", "--profile", "smoke", "--json"])
        .arg("--param")
        .arg(format!("dir={}", dir.display()))
        .output()
        .unwrap()
}

fn notes_of(m: &serde_json::Value) -> String {
    m["notes"].to_string()
}

#[test]
fn a_local_directory_is_read_and_recorded_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let out = bench_remote_read(&dir.path().join("runs.db"), &data);
    let run = json_of(&out);
    let ms = measurements(&run, "fs.remote_read");
    assert_eq!(ms.len(), 2, "sequential and random");
    for m in &ms {
        let notes = notes_of(m);
        assert!(notes.contains("mount: "), "{notes}");
        assert!(notes.contains("no network server"), "{notes}");
        assert!(m["prediction"].is_null(), "no round trip to model with");
        assert_eq!(m["params"]["dir"], data.display().to_string());
    }
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "the test file is removed"
    );
}

#[test]
fn a_missing_directory_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench_remote_read(&dir.path().join("runs.db"), Path::new("/no/such/dir"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dir=/no/such/dir") && err.contains("not a directory"),
        "{err}"
    );
}

/// sshd alone in a fresh network namespace (which, with its veth, lives as
/// long as sshd does), serving `export` over sftp.
struct SshHost {
    sshd: Child,
    dir: tempfile::TempDir,
}

impl SshHost {
    fn start() -> SshHost {
        let dir = tempfile::Builder::new()
            .prefix("osprobe-sshfs-test-")
            .tempdir()
            .unwrap();
        let path = |n: &str| dir.path().join(n);
        for key in ["client", "host"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path(key))
                .status()
                .unwrap();
            assert!(st.success());
        }
        std::fs::copy(path("client.pub"), path("authorized_keys")).unwrap();
        std::fs::create_dir(path("export")).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let config = format!(
            "ListenAddress {FAR}\nPort 22\nHostKey {d}/host\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nLogLevel ERROR\n\
             Subsystem sftp internal-sftp\n",
            d = dir.path().display()
        );
        std::fs::write(path("sshd_config"), config).unwrap();
        let tag = format!("{:x}", std::process::id() & 0x00ff_ffff);
        let (near_veth, far_veth) = (format!("osf{tag}n"), format!("osf{tag}f"));
        let ip = ip_program();
        let script = format!(
            "read go && {ip} link set lo up && {ip} addr add {FAR}/28 dev {far_veth} && {ip} link set {far_veth} up && exec /usr/sbin/sshd -D -e -f {config}",
            ip = ip.display(),
            config = path("sshd_config").display()
        );
        let mut command = Command::new("sh");
        command
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            // The round-trip probes connect and close: sshd -e would
            // report each as a failed key exchange.
            .stderr(Stdio::null());
        // SAFETY: async-signal-safe calls only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::unshare(libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut sshd = command.spawn().unwrap();
        let pid = sshd.id().to_string();
        let run_ip = |args: &[&str]| {
            let out = Command::new(&ip).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run_ip(&[
            "link", "add", &near_veth, "type", "veth", "peer", "name", &far_veth, "netns", &pid,
        ]);
        run_ip(&["addr", "add", &format!("{NEAR}/28"), "dev", &near_veth]);
        run_ip(&["link", "set", &near_veth, "up"]);
        writeln!(sshd.stdin.as_mut().unwrap(), "go").unwrap();
        let host = SshHost { sshd, dir };
        let addr: SocketAddr = format!("{FAR}:22").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "sshd on {addr} did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        host
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for SshHost {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

/// An sshfs mount, unmounted on drop (before its host goes).
struct SshfsMount {
    point: PathBuf,
}

impl SshfsMount {
    fn mount(host: &SshHost) -> SshfsMount {
        let point = host.path("mnt");
        std::fs::create_dir(&point).unwrap();
        let out = Command::new("sshfs")
            .arg(format!("root@{FAR}:{}", host.path("export").display()))
            .arg(&point)
            .arg("-o")
            // A known-hosts file of the test's own, never /dev/null: ssh
            // may rewrite its known-hosts file through a temporary file
            // renamed into place, which replaces /dev/null with a regular
            // file for the whole machine.
            .arg(format!(
                "IdentityFile={},IdentitiesOnly=yes,StrictHostKeyChecking=no,UserKnownHostsFile={},GlobalKnownHostsFile={},UpdateHostKeys=no,BatchMode=yes,LogLevel=ERROR",
                host.path("client").display(),
                host.path("known_hosts").display(),
                host.path("known_hosts").display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sshfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SshfsMount { point }
    }
}

impl Drop for SshfsMount {
    fn drop(&mut self) {
        let unmounted = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.point)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        }
    }
}

#[test]
fn an_sshfs_mount_is_recorded_and_its_server_gives_the_round_trip() {
    if !need_root("an_sshfs_mount_is_recorded_and_its_server_gives_the_round_trip") {
        return;
    }
    let missing: Vec<&str> = ["sshfs", "ssh", "ssh-keygen", "fusermount3"]
        .into_iter()
        .filter(|p| osprobe_core::find_program(p).is_none())
        .chain((!Path::new("/usr/sbin/sshd").exists()).then_some("sshd"))
        .chain((!Path::new("/dev/fuse").exists()).then_some("/dev/fuse"))
        .collect();
    if !missing.is_empty() {
        osprobe_core::testing::skip(format!(
            "the sshfs test needs {}: apt-get install sshfs openssh-server openssh-client",
            missing.join(", ")
        ));
        return;
    }
    let host = SshHost::start();
    let mount = SshfsMount::mount(&host);
    let out = bench_remote_read(&host.path("runs.db"), &mount.point);
    let run = json_of(&out);
    let ms = measurements(&run, "fs.remote_read");
    assert_eq!(ms.len(), 2, "sequential and random");
    for m in &ms {
        let notes = notes_of(m);
        assert!(
            notes.contains("mount: fuse.sshfs root@198.18.80.18:"),
            "{notes}"
        );
        assert!(notes.contains(&format!("server {FAR}:22")), "{notes}");
        let predicted = m["prediction"]["value"]
            .as_f64()
            .expect("a round-trip model");
        assert!(predicted > 0.0);
        assert!(m["summary"]["p50"].as_f64().unwrap() > 0.0);
    }
    drop(mount);
    assert_eq!(
        std::fs::read_dir(host.path("export")).unwrap().count(),
        0,
        "the test file is removed from the server"
    );
}
